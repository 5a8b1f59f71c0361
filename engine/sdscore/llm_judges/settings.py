"""The settings every protocol's LLM judge shares (endpoint, prompt, reply cache, parallelism, deadline,
prices), declared once; a protocol's judge settings class extends them (runtime/settings.py).

Light: `sdscore --help` builds the judge options from these classes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdscore.audio_limits import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP
from sdscore.llm_judges.audio_request import DEFAULT_AUDIO_RATE, DEFAULT_MAX_REQUEST_BYTES
from sdscore.llm_judges.cli_types import nonnegative_number, positive_seconds
from sdscore.llm_judges.client import DEFAULT_TIMEOUT_S
from sdscore.runtime.settings import setting


@dataclass(frozen=True)
class JudgeConfig:
    """An LLM judge at an OpenAI-compatible endpoint: model, base_url (or SDSCORE_JUDGE_BASE_URL /
    OPENAI_BASE_URL), prompt_file; concurrency (requests in flight per worker), cache_dir (replies, keyed
    by request content), timeout_s (per HTTP attempt) — these three are volatile: a resumed run may change
    them —; prices (per-token prices for the cost column; API only); temperature (sent with every request
    and part of the reply cache's key; None: not sent, and left out of the run record)."""

    model: str | None = setting(help="judge model name")
    base_url: str | None = setting(None, help="OpenAI-compatible endpoint (or SDSCORE_JUDGE_BASE_URL)")
    prompt_file: Path | None = setting(None, help="your own prompt (see docs/<protocol>.md)")
    concurrency: int = setting(8, help="requests in flight per worker", volatile=True)
    cache_dir: Path | None = setting(None, help="reply cache (keyed by request content)", volatile=True)
    timeout_s: float = setting(DEFAULT_TIMEOUT_S, cli="--timeout", type=positive_seconds, metavar="SECONDS",
                               volatile=True, help="deadline per HTTP attempt, from sending to the whole reply "
                                                   f"(default {DEFAULT_TIMEOUT_S:g})")
    prices: Mapping[str, Any] | None = setting(None, cli=None)
    temperature: float | None = setting(None, type=nonnegative_number, metavar="T", record_none=False,
                                        help="sampling temperature sent with every request (default: not sent, "
                                             "the endpoint's own; 0 for the most repeatable verdicts)")


@dataclass(frozen=True)
class AudioJudgeConfig(JudgeConfig):
    """JudgeConfig of a judge that hears audio: audio_rate (Hz the clips are sent at), max_request_bytes
    (a row whose base64 audio is larger fails), max_audio_seconds (longer files fail their rows; 0: no cap)."""

    audio_rate: int = setting(DEFAULT_AUDIO_RATE, help="Hz the clips are sent at")
    max_request_bytes: int = setting(DEFAULT_MAX_REQUEST_BYTES,
                                     help="largest base64 audio payload of one request; a row over it fails")
    max_audio_seconds: float = setting(DEFAULT_MAX_AUDIO_SECONDS, help=MAX_AUDIO_SECONDS_HELP)
