"""ChatClient against a real HTTP server on 127.0.0.1: replies, failures, retries, cache, limits, cost."""

from __future__ import annotations

import json
import logging
import threading
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import pytest
from judge_server import ChatServer, Reply, completion, labels_json

from sdscore.errors import JudgeError
from sdscore.llm_judges.client import ChatClient, Price, RetryPolicy, Usage
from sdscore.llm_judges.deadline_transport import environment_proxy
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.protocols.judge.replies import parse_reply

KEY = "sk-test-S3CRET-0123456789"
MESSAGES = [{"role": "system", "content": "judge"}, {"role": "user", "content": "which is better?"}]
FAST = RetryPolicy(max_retries=3, reply_retries=2, backoff_base_s=0.01, backoff_max_s=0.05, max_retry_after_s=5.0)


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("SDSCORE_JUDGE_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def make_client(server: ChatServer, sleeps: list | None = None, **kwargs) -> ChatClient:
    options = {"retry": FAST, "timeout_s": 2.0, "seed": 0, "sleep": (sleeps.append if sleeps is not None else None)}
    options.update(kwargs)
    if options["sleep"] is None:
        del options["sleep"]
    return ChatClient(server.base_url, "judge-model", **options)


def script(*replies: Reply):
    """A responder giving replies in order, then repeating the last one."""
    return lambda index, body, headers: replies[min(index, len(replies) - 1)]


def test_canned_reply_is_parsed_and_the_request_is_openai_shaped():
    with ChatServer(script(completion(labels_json()))) as server, make_client(server) as client:
        result = client.complete(MESSAGES, parse=parse_reply)
    assert result.parsed == {"content": "1", "voice_quality": "both_good", "paralinguistics": "2", "reasoning": "ok"}
    assert (result.cached, result.attempts) == (False, 1)
    headers, body = server.requests[0]
    assert headers["authorization"] == f"Bearer {KEY}"
    assert body == {"model": "judge-model", "messages": MESSAGES, "response_format": {"type": "json_object"}}


def test_params_are_sent_and_json_mode_can_be_off():
    with ChatServer(script(completion("plain"))) as server:
        with make_client(server, json_mode=False, params={"temperature": 0.0}) as client:
            assert client.complete(MESSAGES).content == "plain"
    assert server.requests[0][1] == {"model": "judge-model", "messages": MESSAGES, "temperature": 0.0}


def test_openai_api_key_is_the_fallback(monkeypatch):
    monkeypatch.delenv("SDSCORE_JUDGE_API_KEY")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other")
    with ChatServer(script(completion(labels_json()))) as server, make_client(server) as client:
        client.complete(MESSAGES)
    assert server.requests[0][0]["authorization"] == "Bearer sk-other"


def test_no_key_sends_no_authorization(monkeypatch):
    monkeypatch.delenv("SDSCORE_JUDGE_API_KEY")
    with ChatServer(script(completion(labels_json()))) as server, make_client(server) as client:
        client.complete(MESSAGES)
        assert "api_key=none" in repr(client)
    assert "authorization" not in server.requests[0][0]


def test_malformed_json_is_asked_again_then_accepted():
    replies = script(completion("{not json"), completion("```json\n" + labels_json(content="2") + "\n```"))
    with ChatServer(replies) as server, make_client(server) as client:
        result = client.complete(MESSAGES, parse=parse_reply)
        assert client.totals.as_dict()["invalid_replies"] == 1
    assert result.parsed["content"] == "2"
    assert result.attempts == 2
    assert len(server.requests) == 2


def test_wrong_labels_every_time_raise_after_the_reply_retries():
    with ChatServer(script(completion(labels_json(content="tie")))) as server, make_client(server) as client:
        with pytest.raises(ReplyError, match=r"no valid reply after 3 replies; last: .*content label 'tie'"):
            client.complete(MESSAGES, parse=parse_reply)
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("<html>oops</html>", "response body is not JSON"),
        ({"choices": []}, r"no choices\[0\].message.content"),
        ({"choices": [{"message": {"content": None}}]}, "content is NoneType, expected text"),
    ],
)
def test_broken_success_bodies_are_reply_errors(body, match):
    with ChatServer(script(Reply(200, body))) as server, make_client(server) as client:
        with pytest.raises(ReplyError, match=match):
            client.complete(MESSAGES, parse=parse_reply)
    assert len(server.requests) == FAST.reply_retries + 1


def test_429_honours_retry_after_seconds():
    sleeps: list[float] = []
    replies = script(Reply(429, {"error": "slow down"}, {"Retry-After": "2"}), completion(labels_json()))
    with ChatServer(replies) as server, make_client(server, sleeps) as client:
        client.complete(MESSAGES, parse=parse_reply)
        assert client.totals.as_dict()["retries"] == 1
    assert sleeps == [2.0]
    assert len(server.requests) == 2


def test_retry_after_is_capped_and_http_dates_are_read():
    sleeps: list[float] = []
    replies = script(
        Reply(429, {}, {"Retry-After": "3600"}),
        Reply(503, {}, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),  # in the past: no wait
        completion(labels_json()),
    )
    with ChatServer(replies) as server, make_client(server, sleeps) as client:
        client.complete(MESSAGES)
    assert sleeps == [FAST.max_retry_after_s, 0.0]


def test_5xx_are_retried_with_jittered_exponential_backoff():
    sleeps: list[float] = []
    replies = script(Reply(500, {}), Reply(502, {}), Reply(503, {}), completion(labels_json()))
    with ChatServer(replies) as server, make_client(server, sleeps) as client:
        assert client.complete(MESSAGES, parse=parse_reply).attempts == 4
    assert len(sleeps) == 3
    for attempt, delay in enumerate(sleeps):
        assert 0.0 <= delay <= min(FAST.backoff_max_s, FAST.backoff_base_s * 2**attempt)
    with ChatServer(replies) as server, make_client(server, again := []) as client:
        client.complete(MESSAGES)
    assert again == sleeps  # the same seed gives the same jitter


def test_persistent_5xx_gives_up_after_max_retries():
    with ChatServer(script(Reply(500, {"error": "down"}))) as server, make_client(server, []) as client:
        with pytest.raises(JudgeError, match=r"request failed after 4 attempts; last: HTTP 500"):
            client.complete(MESSAGES)
    assert len(server.requests) == FAST.max_retries + 1


def test_4xx_is_not_retried():
    with ChatServer(script(Reply(400, {"error": {"message": "bad model"}}))) as server, make_client(server) as client:
        with pytest.raises(JudgeError, match=r"refused the request: HTTP 400: .*bad model"):
            client.complete(MESSAGES)
    assert len(server.requests) == 1


class TransportClock:
    """The deadline transport's clock, moved on only by the test: a deadline passes when the test says so,
    never by racing wall time (a loaded machine cannot make a reply late or early)."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    import sdscore.llm_judges.deadline_transport as transport

    fake = TransportClock()
    monkeypatch.setattr(transport, "time", fake)
    return fake


def stalls_past_the_deadline(clock: TransportClock, stalled: threading.Event, seconds: float = 660.0) -> Reply:
    """An answer that stalls after its first byte while the transport's clock moves `seconds` on."""
    clock.now += seconds
    return Reply(body={}, stall=stalled)


def test_timeout_is_retried_and_then_succeeds(clock):
    """The first answer stalls mid-reply and its 600 s deadline passes (on the transport's clock): a
    timeout, retried after one backoff; the second answer comes at once. (600 s: the per-read
    timeout equals timeout_s in real time, so only the deadline can end the attempt in time.)"""
    sleeps: list[float] = []
    stalled = threading.Event()
    replies = lambda index, body, headers: stalls_past_the_deadline(clock, stalled) if index == 0 else \
        completion(labels_json())
    with ChatServer(replies) as server, make_client(server, sleeps, timeout_s=600.0) as client:
        try:
            result = client.complete(MESSAGES, parse=parse_reply)
        finally:
            stalled.set()
    assert result.attempts == 2
    assert len(sleeps) == 1 and len(server.requests) == 2


def test_timeouts_every_time_give_up(clock):
    policy = RetryPolicy(max_retries=1, backoff_base_s=0.0)
    stalled = threading.Event()
    with ChatServer(lambda index, body, headers: stalls_past_the_deadline(clock, stalled)) as server:
        with make_client(server, [], timeout_s=600.0, retry=policy) as client:
            try:
                with pytest.raises(JudgeError, match=r"failed after 2 attempts; last: timed out after 600 s"):
                    client.complete(MESSAGES)
            finally:
                stalled.set()
    assert len(server.requests) == 2


def test_slow_reply_within_the_timeout_is_not_retried(clock):
    """The server takes 29 of the 30 s (on the transport's clock) before it answers: one attempt."""
    sleeps: list[float] = []

    def slow(index, body, headers):
        clock.now += 29.0
        return completion(labels_json())

    with ChatServer(slow) as server:
        with make_client(server, sleeps, timeout_s=30.0) as client:
            assert client.complete(MESSAGES, parse=parse_reply).attempts == 1
    assert sleeps == [] and len(server.requests) == 1


def test_connection_refused_is_retried_then_reported():
    with ChatServer(script(completion("x"))) as server:
        url = server.base_url
    client = ChatClient(url, "m", retry=RetryPolicy(max_retries=2, backoff_base_s=0.0), sleep=lambda s: None)
    with client, pytest.raises(JudgeError, match=r"failed after 3 attempts; last: connection failed \(ConnectError\)"):
        client.complete(MESSAGES)


def test_api_key_never_leaves_the_authorization_header(tmp_path, caplog):
    echo = lambda index, body, headers: Reply(401, {"error": "bad key", "got": headers.get("authorization")})
    caplog.set_level(logging.DEBUG)
    with ChatServer(echo) as server, make_client(server, cache_dir=tmp_path) as client:
        assert KEY not in repr(client) and "api_key=set" in repr(client)
        with pytest.raises(JudgeError, match=r"HTTP 401.*\[redacted\].*SDSCORE_JUDGE_API_KEY") as info:
            client.complete(MESSAGES)
    assert KEY not in str(info.value)
    assert server.requests[0][0]["authorization"] == f"Bearer {KEY}"
    replies = script(Reply(500, {}), completion("{bad"), completion(labels_json()))
    with ChatServer(replies) as server, make_client(server, cache_dir=tmp_path) as client:
        client.complete(MESSAGES, parse=parse_reply)
    cached = [p.read_text() for p in tmp_path.rglob("*.json")]
    assert len(cached) == 1 and KEY not in cached[0]
    assert caplog.records and all(KEY not in record.getMessage() for record in caplog.records)
    assert KEY not in caplog.text


def test_cache_hits_make_no_request(tmp_path):
    with ChatServer(script(completion(labels_json(), 1000, 50))) as server:
        prices = {"judge-model": Price(input=1.0, output=2.0)}
        with make_client(server, cache_dir=tmp_path, prices=prices) as client:
            first = client.complete(MESSAGES, parse=parse_reply)
            second = client.complete(MESSAGES, parse=parse_reply)
            assert client.totals.as_dict()["cache_hits"] == 1
            assert client.totals.as_dict()["cost"] == pytest.approx(first.cost)
        with make_client(server, cache_dir=tmp_path) as fresh:
            assert fresh.complete(MESSAGES, parse=parse_reply).cached
            fresh.complete(MESSAGES + [{"role": "user", "content": "again"}])
        with make_client(server, cache_dir=tmp_path, params={"temperature": 0.5}) as other:
            other.complete(MESSAGES)
    assert len(server.requests) == 3  # first call, the new messages, the new params
    assert not first.cached and second.cached
    assert second.parsed == first.parsed and second.usage == first.usage and second.cost == first.cost


def test_unreadable_or_invalid_cache_entries_are_misses(tmp_path):
    with ChatServer(script(completion(labels_json(content="tie")), completion(labels_json()))) as server:
        with make_client(server, cache_dir=tmp_path, retry=RetryPolicy(reply_retries=0)) as client:
            client.complete(MESSAGES)  # cached without validation
            entry = next(tmp_path.rglob("*.json"))
            client.complete(MESSAGES, parse=parse_reply)  # the cached reply fails parse: asked again
            assert json.loads(entry.read_text())["content"] == labels_json()
            entry.write_text("{truncated")
            client.complete(MESSAGES)
    assert len(server.requests) == 3


def test_concurrency_limit_is_respected():
    # the first three answers wait until all three requests are in at once (a barrier, not a delay that a
    # slow machine might not overlap): max_in_flight is then 3 whatever the speed, and more only if the
    # client lets a fourth request out
    together = threading.Barrier(3, timeout=60)

    def slow(index, body, headers):
        if index < 3:
            together.wait()
        return Reply(body=completion(labels_json()).body)

    with ChatServer(slow) as server, make_client(server, concurrency=3) as client:
        requests = [MESSAGES + [{"role": "user", "content": str(i)}] for i in range(12)]
        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(lambda m: client.complete(m, parse=parse_reply), requests))
    assert len(results) == 12 and len(server.requests) == 12
    assert server.max_in_flight == 3


def test_cost_accounting_from_usage():
    replies = script(
        completion(labels_json(), prompt_tokens=1000, completion_tokens=100, audio_tokens=200),
        completion(labels_json(), prompt_tokens=500, completion_tokens=50),
    )
    prices = {"judge-model": Price(input=2.5, output=10.0, audio_input=40.0)}
    with ChatServer(replies) as server, make_client(server, prices=prices) as client:
        first = client.complete(MESSAGES)
        second = client.complete(MESSAGES)
        totals = client.totals.as_dict()
    assert first.usage == Usage(1000, 100, 200)
    assert first.cost == pytest.approx((800 * 2.5 + 200 * 40.0 + 100 * 10.0) / 1e6)
    assert second.cost == pytest.approx((500 * 2.5 + 50 * 10.0) / 1e6)
    assert totals["cost"] == pytest.approx(first.cost + second.cost)
    assert (totals["prompt_tokens"], totals["completion_tokens"], totals["audio_tokens"]) == (1500, 150, 200)
    assert totals["requests"] == 2


def test_invalid_replies_are_paid_for_and_unpriced_models_cost_none():
    replies = script(completion("nope", 10, 10), completion(labels_json(), 10, 10))
    with ChatServer(replies) as server:
        with make_client(server, prices={"judge-model": Price(1.0, 1.0)}) as client:
            result = client.complete(MESSAGES, parse=parse_reply)
            assert result.cost == pytest.approx(20 / 1e6)
            assert client.totals.as_dict()["cost"] == pytest.approx(40 / 1e6)
        with make_client(server, prices={"other-model": Price(1.0, 1.0)}) as client:
            assert client.complete(MESSAGES).cost is None
            assert client.totals.as_dict()["cost"] is None


def test_the_client_is_shared_safely_across_threads():
    counter = threading.Lock()
    seen = []

    def respond(index, body, headers):
        with counter:
            seen.append(body["messages"][-1]["content"])
        return completion(labels_json(content="1" if int(body["messages"][-1]["content"]) % 2 else "2"))

    with ChatServer(respond) as server, make_client(server, concurrency=4) as client:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(
                pool.map(lambda i: client.complete([{"role": "user", "content": str(i)}], parse_reply), range(20))
            )
    assert [r.parsed["content"] for r in results] == ["1" if i % 2 else "2" for i in range(20)]
    assert sorted(seen, key=int) == [str(i) for i in range(20)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"base_url": "ftp://x"}, "base_url must be an http"),
        ({"model": ""}, "model must be a non-empty string"),
        ({"concurrency": 0}, "concurrency must be an integer >= 1"),
        ({"timeout_s": 0}, "timeout_s must be a finite number > 0"),
        ({"max_reply_bytes": 0}, "max_reply_bytes must be an integer >= 1"),
    ],
)
def test_client_arguments_are_checked(kwargs, match):
    options = {"base_url": "http://127.0.0.1:9/v1", "model": "m", **kwargs}
    with pytest.raises(ValueError, match=match):
        ChatClient(options.pop("base_url"), options.pop("model"), **options)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: RetryPolicy(max_retries=-1), r"RetryPolicy.max_retries must be an integer >= 0"),
        (lambda: RetryPolicy(reply_retries=1.5), r"RetryPolicy.reply_retries must be an integer >= 0"),
        (lambda: RetryPolicy(backoff_base_s=float("inf")), r"RetryPolicy.backoff_base_s must be a finite number"),
        (lambda: Price(input=-1.0, output=1.0), r"Price.input must be a finite number >= 0"),
        (lambda: Price(input=1.0, output=float("nan")), r"Price.output must be a finite number >= 0"),
    ],
)
def test_policy_and_price_are_checked(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def bounded(call, seconds: float):
    """call() on a thread; its result or exception, or a test failure when it runs past `seconds`."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s (no deadline)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.mark.parametrize("trickle_body", [False, True], ids=["whole-answer", "body-only"])
def test_a_trickling_reply_hits_the_total_deadline_and_is_retried(clock, caplog, trickle_body):
    """Each byte comes 40 s after the last on the transport's clock, far inside a per-read timeout; after
    20 bytes (800 s) the 600 s deadline for the whole reply has passed and the answer stalls, unfinished,
    until the call is over, so an attempt can only end on the deadline: twice, then a quick answer.
    No wall time: the per-read timeout (600 s of real silence) cannot fire, and without the deadline
    the stalled answer is finished after the server's 60 s and the first attempt succeeds."""
    caplog.set_level(logging.WARNING, logger="sdscore.llm_judges.client")
    sleeps: list[float] = []
    released = threading.Event()

    def forty_seconds_on() -> None:
        clock.now += 40.0

    trickle = Reply(body=completion(labels_json()).body, trickle_body=trickle_body, tick=forty_seconds_on,
                    stall=released, stall_after=20)
    replies = lambda index, body, headers: trickle if index < 2 else completion(labels_json())
    with ChatServer(replies) as server, make_client(server, sleeps, timeout_s=600.0) as client:
        try:
            result = client.complete(MESSAGES, parse=parse_reply)
        finally:
            released.set()
        assert client.totals.as_dict()["retries"] == 2
    assert result.attempts == 3 and len(sleeps) == 2  # both timeouts went through the backoff
    assert len(server.requests) == 3
    warnings = [record.getMessage() for record in caplog.records if record.name == "sdscore.llm_judges.client"]
    assert len(warnings) == 2
    for number, warning in enumerate(warnings, start=1):
        assert warning.startswith(f"judge request timed out after 600 s (the deadline for the whole reply); "
                                  f"retry {number}/3 in ")


def test_trickling_every_time_gives_up_with_the_deadline_in_the_error(caplog):
    policy = RetryPolicy(max_retries=1, backoff_base_s=0.0)
    trickle = Reply(body=completion(labels_json()).body, trickle_s=0.2)
    with ChatServer(script(trickle)) as server, make_client(server, [], timeout_s=0.5, retry=policy) as client:
        with pytest.raises(JudgeError, match=r"failed after 2 attempts; last: timed out after 0.5 s \(the deadline "):
            bounded(lambda: client.complete(MESSAGES), 10.0)
    assert len(server.requests) == 2


def _huge_body(total_bytes: int) -> list[bytes]:
    """A chat-completions JSON body of about total_bytes, as chunks that share one filler buffer."""
    filler = b"x" * 65536
    return [b'{"choices": [{"message": {"content": "', *[filler] * (total_bytes // len(filler)), b'"}}]}']


@pytest.mark.parametrize("content_length", [True, False], ids=["declared", "streamed"])
def test_a_reply_over_the_size_cap_is_aborted_and_not_retried(content_length):
    cap = 256 * 1024
    huge = Reply(body=_huge_body(32 * 2**20), content_length=content_length)
    with ChatServer(script(huge, completion(labels_json()))) as server:
        with make_client(server, [], max_reply_bytes=cap) as client:
            tracemalloc.start()
            try:
                too_large = r"reply is larger than the 256 KiB cap \(max_reply_bytes\); not retried"
                with pytest.raises(JudgeError, match=too_large):
                    bounded(lambda: client.complete(MESSAGES, parse=parse_reply), 15.0)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert client.totals.as_dict()["retries"] == 0
    assert len(server.requests) == 1  # a server that sent one huge reply would send another
    assert peak < 4 * 2**20  # the 32 MiB body was never held


def test_a_reply_within_the_cap_is_read_whole():
    reply = completion(labels_json(reasoning="y" * 5000))
    with ChatServer(script(reply)) as server, make_client(server, max_reply_bytes=6000) as client:
        assert client.complete(MESSAGES, parse=parse_reply).parsed["reasoning"] == "y" * 5000


def test_an_echoed_api_key_is_redacted_in_replies_errors_logs_and_the_cache(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    secret = KEY.split("-")[2]  # a piece of the key: no partial key may show either

    def echo_in_content(index, body, headers):
        return completion(labels_json(reasoning=f"you sent {headers['authorization']}"))

    with ChatServer(echo_in_content) as server, make_client(server, cache_dir=tmp_path) as client:
        fresh = client.complete(MESSAGES, parse=parse_reply)
        cached = client.complete(MESSAGES, parse=parse_reply)
    assert cached.cached
    for result in (fresh, cached):
        assert result.parsed["reasoning"] == "you sent Bearer [redacted]"
        assert secret not in result.content and secret not in repr(result.parsed)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and all(secret.encode() not in p.read_bytes() for p in files)

    def echo_in_label(index, body, headers):
        return completion(labels_json(content=headers["authorization"]))

    with ChatServer(echo_in_label) as server, make_client(server) as client:
        with pytest.raises(ReplyError, match=r"content label 'Bearer \[redacted\]'") as info:
            client.complete(MESSAGES, parse=parse_reply)
    assert secret not in str(info.value)

    # an error body that echoes the key, once where the shown part of the body ends inside the key
    bodies = [
        lambda auth: {"error": {"message": f"bad request from {auth}"}},
        lambda auth: "{" + '"e": "' + "x" * (285 - 7 - len("Bearer ")) + auth + '"}',
    ]
    for make_body in bodies:
        def echo_in_error(index, body, headers, make_body=make_body):
            return Reply(400, make_body(headers["authorization"]))

        with ChatServer(echo_in_error) as server, make_client(server) as client:
            with pytest.raises(JudgeError, match="HTTP 400") as info:
                client.complete(MESSAGES)
        assert secret not in str(info.value)
    assert caplog.records and secret not in caplog.text


def test_a_body_that_does_not_decode_is_retried():
    broken = Reply(body="not gzip at all", headers={"Content-Encoding": "gzip"})
    with ChatServer(script(broken, completion(labels_json()))) as server, make_client(server, []) as client:
        assert client.complete(MESSAGES, parse=parse_reply).attempts == 2
    with ChatServer(script(broken)) as server, make_client(server, [], retry=RetryPolicy(max_retries=0)) as client:
        with pytest.raises(JudgeError, match=r"failed after 1 attempts; last: the reply's Content-Encoding did not"):
            client.complete(MESSAGES)


def test_the_proxy_comes_from_the_environment_as_httpx_reads_it(monkeypatch):
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert environment_proxy("https://api.example.com/v1/chat/completions") is None
    monkeypatch.setenv("https_proxy", "proxy.corp:3128")
    monkeypatch.setenv("no_proxy", "localhost,.internal")
    assert environment_proxy("https://api.example.com/v1") == "http://proxy.corp:3128"
    assert environment_proxy("http://api.example.com/v1") is None  # no proxy for plain http
    assert environment_proxy("https://llm.internal/v1") is None
    monkeypatch.setenv("all_proxy", "http://any:8080")
    assert environment_proxy("http://api.example.com/v1") == "http://any:8080"
