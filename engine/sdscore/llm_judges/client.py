"""An OpenAI-compatible chat-completions client for LLM judges, over httpx.

It retries 429, 5xx, timeouts and connection failures with exponential backoff and full jitter
(honouring Retry-After), re-asks when a reply does not validate, holds at most ``concurrency``
requests in flight across threads, caches validated replies on disk and adds up tokens and cost.
Every loop is bounded: at most ``max_retries + 1`` HTTP attempts per reply and ``reply_retries + 1``
replies per call. Each attempt has a wall-clock deadline of ``timeout_s`` from sending the request
to the last byte of the answer (not a per-read timeout, which a trickling server never trips); one
that runs past it is a timeout and is retried. A reply body is read as a stream and given up past
``max_reply_bytes`` — not retried, since a server that sends one oversized reply sends the next.
``json_mode`` adds ``response_format={"type": "json_object"}``; cached replies are those that
validated. The API key is read from the environment (SDSCORE_JUDGE_API_KEY, then OPENAI_API_KEY),
sent as a Bearer token, and kept out of reprs, logs, errors, results and the cache: a reply or an
error body that echoes it has it replaced by ``[redacted]`` before anything else sees it.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from sdscore.errors import JudgeError
from sdscore.features.cache import ContentCache, hash_settings
from sdscore.llm_judges.deadline_transport import DeadlineTransport
from sdscore.llm_judges.reply_error import ReplyError

log = logging.getLogger(__name__)

#: environment variables read for the API key, in order
API_KEY_ENV = ("SDSCORE_JUDGE_API_KEY", "OPENAI_API_KEY")
#: environment variables read for the endpoint when none is given, in order
BASE_URL_ENV = ("SDSCORE_JUDGE_BASE_URL", "OPENAI_BASE_URL")
_SHOWN_BODY = 300
_ERROR_BODY_BYTES = 65536  # what is read of a non-2xx answer (only its start is shown)
#: seconds from sending a request to the last byte of its answer, per attempt
DEFAULT_TIMEOUT_S = 120.0
#: largest reply body read (bytes after content decoding); a judge's JSON verdict is a few KiB
DEFAULT_MAX_REPLY_BYTES = 8 * 2**20
_NOT_JSON = object()  # a 2xx answer whose body did not decode
REPLY_NAMESPACE = "judge-replies"  # folder of cached replies under cache_dir


@dataclass(frozen=True)
class Usage:
    """Token counts of one reply, from the response's ``usage`` (audio tokens are part of prompt tokens)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    audio_tokens: int = 0

    @classmethod
    def from_response(cls, usage: Any) -> Usage:
        """Read an OpenAI ``usage`` object; missing or malformed counts are 0."""
        if not isinstance(usage, Mapping):
            return cls()
        details = usage.get("prompt_tokens_details")
        audio = details.get("audio_tokens") if isinstance(details, Mapping) else 0
        return cls(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")), _count(audio))


def _count(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0


@dataclass(frozen=True)
class Price:
    """List prices in USD per million tokens; audio input defaults to the text input price."""

    input: float
    output: float
    audio_input: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "audio_input"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"Price.{name} must be a finite number >= 0, got {value!r}")

    def cost(self, usage: Usage) -> float:
        """USD for one reply's usage."""
        audio_price = self.input if self.audio_input is None else self.audio_input
        text_in = max(usage.prompt_tokens - usage.audio_tokens, 0)
        return (text_in * self.input + usage.audio_tokens * audio_price + usage.completion_tokens * self.output) / 1e6


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry: HTTP failures, then replies that do not validate."""

    max_retries: int = 4
    reply_retries: int = 2
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("max_retries", "reply_retries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"RetryPolicy.{name} must be an integer >= 0, got {value!r}")
        for name in ("backoff_base_s", "backoff_max_s", "max_retry_after_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"RetryPolicy.{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class ChatResult:
    """One validated reply: its text, parsed value, usage, list-price cost and whether it came from the cache."""

    content: str
    parsed: Any
    usage: Usage
    cost: float | None
    cached: bool
    attempts: int


@dataclass
class Totals:
    """What a client has done so far: HTTP requests, retries, cache hits, tokens and USD spent."""

    requests: int = 0
    retries: int = 0
    invalid_replies: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    audio_tokens: int = 0
    cost: float | None = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict of the counters."""
        with self._lock:
            return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def add(self, **counts: int) -> None:
        """Add to integer counters, atomically."""
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def add_reply(self, usage: Usage, cost: float | None) -> None:
        """Count one paid reply's tokens and cost (cost stays None once a reply could not be priced)."""
        with self._lock:
            self.prompt_tokens += usage.prompt_tokens
            self.completion_tokens += usage.completion_tokens
            self.audio_tokens += usage.audio_tokens
            self.cost = None if cost is None or self.cost is None else self.cost + cost


def api_key_from_env() -> str | None:
    """The first non-empty key among API_KEY_ENV, or None."""
    for name in API_KEY_ENV:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def base_url_from_env() -> str | None:
    """The first non-empty endpoint among BASE_URL_ENV, or None."""
    return next((os.environ[v] for v in BASE_URL_ENV if os.environ.get(v)), None)


def configured_client(config, *, json_mode: bool = True) -> ChatClient:
    """judge_client for a JudgeConfig (llm_judges/settings.py): every `--judge openai` Scorer builds its
    client from its settings this way, so a new shared judge setting reaches all of them."""
    return judge_client(config.model, config.base_url, concurrency=config.concurrency, cache_dir=config.cache_dir,
                        timeout_s=config.timeout_s, prices=config.prices, json_mode=json_mode,
                        temperature=config.temperature)


def judge_client(model: str | None, base_url: str | None = None, *, concurrency: int = 8,
                 cache_dir: str | os.PathLike | None = None, timeout_s: float | None = None,
                 prices: Mapping[str, Price] | None = None, json_mode: bool = True,
                 temperature: float | None = None) -> ChatClient:
    """The ChatClient of an `--judge openai` run: base_url (else BASE_URL_ENV) and model checked with
    errors that say what to pass; replies cached under cache_dir/replies; temperature, when given, sent
    with every request (None: not sent, the endpoint's default)."""
    base_url = base_url or base_url_from_env()
    if not base_url:
        raise ValueError(f"the openai judge needs base_url (or {' / '.join(BASE_URL_ENV)} set)")
    if not model:
        raise ValueError("the openai judge needs a model name (--model)")
    params = None
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
                or not (math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"the judge's temperature must be a finite number >= 0, got {temperature!r}")
        params = {"temperature": float(temperature)}
    options = {} if timeout_s is None else {"timeout_s": timeout_s}
    return ChatClient(base_url, model, concurrency=concurrency, json_mode=json_mode, prices=prices, params=params,
                      cache_dir=None if cache_dir is None else os.path.join(os.fspath(cache_dir), "replies"), **options)


def _retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


class ChatClient:
    """A thread-safe chat client for one model at one endpoint; ``params`` go into every request and the
    cache key, ``prices`` maps model → Price, ``seed`` and ``sleep`` make the backoff testable."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        concurrency: int = 8,
        retry: RetryPolicy | None = None,
        json_mode: bool = True,
        params: Mapping[str, Any] | None = None,
        prices: Mapping[str, Price] | None = None,
        cache_dir: str | os.PathLike | None = None,
        seed: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError("model must be a non-empty string")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
        if isinstance(max_reply_bytes, bool) or not isinstance(max_reply_bytes, int) or max_reply_bytes < 1:
            raise ValueError(f"max_reply_bytes must be an integer >= 1, got {max_reply_bytes!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.concurrency = concurrency
        self.timeout_s = float(timeout_s)
        self.max_reply_bytes = max_reply_bytes
        self.retry = retry or RetryPolicy()
        self.params = dict(params or {})
        if json_mode:
            self.params["response_format"] = {"type": "json_object"}
        self.price = (prices or {}).get(model)
        # disk only: a reply's entry is re-read (and re-validated) on every call
        self.cache = None if cache_dir is None else ContentCache(cache_dir, REPLY_NAMESPACE, memory=False)
        self.totals = Totals(cost=None if self.price is None else 0.0)
        self._api_key = api_key if api_key is not None else api_key_from_env()
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(concurrency)
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._transport = DeadlineTransport(self.url, max_connections=concurrency)
        self._http = httpx.Client(headers=headers, timeout=httpx.Timeout(self.timeout_s), transport=self._transport)

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"ChatClient(url={self.url!r}, model={self.model!r}, concurrency={self.concurrency}, api_key={key})"

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "[redacted]") if self._api_key else text

    def _redact_value(self, value: Any) -> Any:
        """A parsed reply with the key redacted from every string in it (keys of dicts included)."""
        if isinstance(value, str):
            return self._redact(value)
        if isinstance(value, dict):
            return {self._redact_value(k): self._redact_value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._redact_value(v) for v in value)
        return value

    def _backoff(self, attempt: int) -> float:
        cap = min(self.retry.backoff_max_s, self.retry.backoff_base_s * 2.0**attempt)
        with self._rng_lock:
            return self._rng.uniform(0.0, cap)

    def complete(self, messages: list[dict[str, Any]], parse: Callable[[str], Any] | None = None) -> ChatResult:
        """The first reply that ``parse`` accepts (its ReplyError = ask again); ReplyError when none does
        (its ``raw``: the last reply's text, redacted), JudgeError when HTTP retries run out or the endpoint refuses (4xx other than 429)."""
        key = None
        if self.cache is not None:
            key = hash_settings({"model": self.model, "messages": messages, "params": self.params})
            hit = self._from_cache(self.cache.get_json(key), parse)
            if hit is not None:
                return hit
        body = {"model": self.model, "messages": messages, **self.params}
        last_error: ReplyError | None = None
        attempts = 0
        with self._slots:
            for _ in range(self.retry.reply_retries + 1):
                raw, tries = self._post(body)
                attempts += tries
                usage = Usage.from_response(raw.get("usage") if isinstance(raw, dict) else None)
                cost = self._cost(usage)
                self.totals.add_reply(usage, cost)
                content = None
                try:
                    content = self._redact(_message_content(raw))
                    parsed = self._redact_value(parse(content)) if parse is not None else content
                except ReplyError as error:
                    if error.raw is None:
                        error.raw = content
                    last_error = error
                    self.totals.add(invalid_replies=1)
                    log.warning("judge reply did not validate (%s); asking again", self._redact(str(error)))
                    continue
                if self.cache is not None and key is not None:
                    self.cache.put_json(key, {"content": content, "usage": vars(usage), "model": self.model})
                return ChatResult(content, parsed, usage, cost, cached=False, attempts=attempts)
        raw_text = None if last_error is None or last_error.raw is None else self._redact(last_error.raw)
        raise ReplyError(
            self._redact(f"no valid reply after {self.retry.reply_retries + 1} replies; last: {last_error}"),
            raw=raw_text,
        )

    def _from_cache(self, entry: dict[str, Any] | None, parse: Callable[[str], Any] | None) -> ChatResult | None:
        """A result from a cache entry, or None when there is none or it no longer validates."""
        if entry is None or not isinstance(entry.get("content"), str):
            return None
        content = self._redact(entry["content"])  # an entry written before replies were redacted
        try:
            parsed = self._redact_value(parse(content)) if parse is not None else content
        except ReplyError:
            return None
        usage = Usage.from_response(entry.get("usage"))
        self.totals.add(cache_hits=1)
        return ChatResult(content, parsed, usage, self._cost(usage), cached=True, attempts=0)

    def _cost(self, usage: Usage) -> float | None:
        return None if self.price is None else self.price.cost(usage)

    def _post(self, body: dict[str, Any]) -> tuple[Any, int]:
        """POST until a 2xx answer or retries run out; returns (decoded JSON, attempts made)."""
        attempt = 0
        while True:
            self.totals.add(requests=1)
            retry_after = None
            try:
                status, headers, data = self._attempt(body)
            except httpx.TimeoutException:
                reason = f"timed out after {self.timeout_s:g} s (the deadline for the whole reply)"
            except httpx.TransportError as error:
                reason = f"connection failed ({type(error).__name__})"
            except httpx.DecodingError:
                reason = "the reply's Content-Encoding did not decode"
            else:
                if 200 <= status < 300:
                    try:
                        return json.loads(data), attempt + 1
                    except ValueError:
                        return _NOT_JSON, attempt + 1
                if status != 429 and status < 500:
                    raise JudgeError(self._refusal(status, data.decode("utf-8", "replace")))
                reason = f"HTTP {status}"
                retry_after = _retry_after_seconds(headers.get("retry-after"))
            if attempt == self.retry.max_retries:
                raise JudgeError(f"{self.url}: request failed after {attempt + 1} attempts; last: {reason}")
            if retry_after is not None:
                delay = min(retry_after, self.retry.max_retry_after_s)
            else:
                delay = self._backoff(attempt)
            self.totals.add(retries=1)
            log.warning("judge request %s; retry %d/%d in %.2f s", reason, attempt + 1, self.retry.max_retries, delay)
            self._sleep(delay)
            attempt += 1

    def _attempt(self, body: dict[str, Any]) -> tuple[int, httpx.Headers, bytes]:
        """One POST within the deadline: (status, headers, body); a 2xx body past the cap is a JudgeError
        (the connection is dropped there), a longer error body is cut to _ERROR_BODY_BYTES."""
        with self._transport.deadline(self.timeout_s), self._http.stream("POST", self.url, json=body) as response:
            ok = 200 <= response.status_code < 300
            limit = self.max_reply_bytes if ok else _ERROR_BODY_BYTES
            declared = response.headers.get("content-length", "")
            if ok and declared.isdigit() and int(declared) > limit:
                raise JudgeError(self._too_large(f"it declares {int(declared)} bytes"))
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > limit:
                    if ok:
                        raise JudgeError(self._too_large(f"{len(data)} bytes read so far"))
                    del data[limit:]
                    break
        return response.status_code, response.headers, bytes(data)

    def _too_large(self, detail: str) -> str:
        cap = _size(self.max_reply_bytes)
        return (f"{self.url}: the reply is larger than the {cap} cap (max_reply_bytes); not retried, "
                f"a server that sends one sends it again ({detail})")

    def _refusal(self, status: int, text: str) -> str:
        text = self._redact(text)  # before it is cut, so that no part of the key is shown
        shown = text if len(text) <= _SHOWN_BODY else text[:_SHOWN_BODY] + "…"
        message = f"{self.url} refused the request: HTTP {status}: {shown.strip()}"
        if status in (401, 403):
            message += f" (set the API key in {' or '.join(API_KEY_ENV)})"
        return self._redact(message)


def _size(n: int) -> str:
    """A byte count as people read it: 8 MiB, 256 KiB, 1000 bytes."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


def _message_content(raw: Any) -> str:
    """choices[0].message.content of a chat-completions response; ReplyError when absent."""
    if raw is _NOT_JSON:
        raise ReplyError("response body is not JSON")
    try:
        content = raw["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ReplyError("response has no choices[0].message.content") from None
    if not isinstance(content, str):
        raise ReplyError(f"response message content is {type(content).__name__}, expected text")
    return content
