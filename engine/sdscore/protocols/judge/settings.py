"""`sdscore score judge` settings, declared once (runtime/settings.py): one class per `--judge` — the rule
baseline's and the LLM judge's. The CLI options, `make_judge`'s and the Scorer's keyword checks and the
run record come from these classes.

The LLM judge's endpoint options are JudgeConfig's, spelled as in every protocol (--base-url, --model,
--prompt-file, --concurrency, --cache-dir, --timeout). Light: `sdscore --help` builds the options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdscore.audio_limits import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP
from sdscore.llm_judges.cli_types import positive_seconds
from sdscore.llm_judges.client import DEFAULT_TIMEOUT_S
from sdscore.llm_judges.settings import JudgeConfig
from sdscore.protocols.judge.blueprint_view import check_groups
from sdscore.protocols.judge.choices import FUSIONS, PITCH_TRACKERS
from sdscore.protocols.judge.interface import INSTRUCTION_SOURCES
from sdscore.protocols.judge.overall_replies import LABEL_MODES
from sdscore.protocols.judge.prompts import PROMPT_MODES
from sdscore.runtime.settings import Options, build_mode, setting

_CACHE_HELP = "blueprint and reply caches"


@dataclass(frozen=True)
class RuleJudgeSettings:
    """`--judge rule`, the offline rule baseline (RuleBaselineJudge), and what every judge of this protocol
    shares: fusion (the rule fusing C/VQ/P into overall), instruction_source (the instruction's text, or
    its audio's ASR transcript), cache_dir (blueprints, and an LLM judge's replies, keyed by content;
    volatile), pitch (the blueprints' pitch tracker: "yin" or "aubio", see BlueprintBuilder),
    max_audio_seconds (longer audio files fail their rows; 0: no cap)."""

    fusion: str = setting("speakbench", choices=FUSIONS)
    instruction_source: str = setting("text", choices=INSTRUCTION_SOURCES)
    cache_dir: Path | None = setting(None, help=_CACHE_HELP, volatile=True)
    pitch: str = setting("yin", choices=PITCH_TRACKERS,
                         help="blueprint pitch tracker: yin = batched YIN with Praat's 75-600 Hz band and voicing "
                              "rule (median F0 checked against Praat on real voices); aubio = the TRACE authors' "
                              "tracker (aubio yin, 80-300 Hz, confidence >= 0.8), for blueprint fidelity")
    max_audio_seconds: float = setting(DEFAULT_MAX_AUDIO_SECONDS, help=MAX_AUDIO_SECONDS_HELP)


@dataclass(frozen=True)
class LlmJudgeSettings(RuleJudgeSettings, JudgeConfig):
    """`--judge openai`, an LLM judge at an OpenAI-compatible endpoint (LLMJudge): RuleJudgeSettings, the
    endpoint, prompt, reply cache, parallelism, deadline and prices of JudgeConfig, and mode (what the
    judge is shown: blueprints, transcripts or the audio), labels ("typed" C/VQ/P, fused, or one
    "original" overall 1 / 2 / tie label), drop_groups (blueprint feature groups left out of the prompt,
    TRACE's feature ablation: a comma-separated text or a sequence, kept in FEATURE_GROUPS' order)."""

    # no model: judge_client's error, which names --model (as the missing base_url's names the variables)
    model: str | None = setting(None, help="judge model name")
    prompt_file: Path | None = setting(None, help="your own prompt ([system]/[user] sections)")
    timeout_s: float = setting(DEFAULT_TIMEOUT_S, cli="--timeout", type=positive_seconds, metavar="SECONDS",
                               volatile=True,
                               help=f"LLM judge: deadline per HTTP attempt, from sending to the whole reply; one "
                                    f"past it is retried with backoff (default {DEFAULT_TIMEOUT_S:g})")
    mode: str = setting("blueprint", choices=PROMPT_MODES)
    labels: str = setting("typed", choices=LABEL_MODES,
                          help="typed: C/VQ/P labels with typed ties, fused (TRACE); original: one overall "
                               "1 / 2 / tie label, as the original SpeakBench/S2S-Arena labels (TRACE Tab. 1)")
    drop_groups: str | Sequence[str] = setting((), cli="--drop-group", metavar="GROUP[,GROUP]",
                                               help="blueprint mode: leave these feature groups out of the "
                                                    "blueprints the judge sees (TRACE's feature ablation, "
                                                    "Tab. 12): emotion, accent, quality, properties")

    def __post_init__(self) -> None:  # one spelling, in the run record too: a tuple in FEATURE_GROUPS' order
        object.__setattr__(self, "drop_groups", check_groups(self.drop_groups))


#: the settings of one judge of this protocol
JudgeSettings = RuleJudgeSettings | LlmJudgeSettings

OPTIONS = Options({"rule": RuleJudgeSettings, "openai": LlmJudgeSettings}, mode="judge", mode_default="rule",
                  mode_help="rule = offline baseline", groups={"openai": "LLM judge (--judge openai)"})


def judge_settings(judge: str = "rule", **settings: Any) -> JudgeSettings:
    """The settings object of `judge` ("rule" | "openai") from keyword arguments. SettingsError (a
    ValueError) for another judge, a keyword of the other judge's class, an unknown keyword (naming the
    valid ones), a wrong type or choice; ValueError for an unknown feature group."""
    return build_mode(OPTIONS, judge, settings)
