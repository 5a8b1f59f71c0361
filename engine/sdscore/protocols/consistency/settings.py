"""`sdscore score consistency` settings, declared once (runtime/settings.py): the embedding Scorer's
and the LALM judge's (--judge openai). The CLI options, the Scorers' keyword checks and the run record
come from these classes.

The LALM judge's endpoint options keep the names of `sdscore score judge` (--base-url, --model,
--prompt-file, --concurrency, --cache-dir, --timeout).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdscore.audio_limits import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP
from sdscore.llm_judges.settings import AudioJudgeConfig
from sdscore.protocols.consistency.choices import LALM_TASKS, METHODS, PERMUTATIONS
from sdscore.runtime.settings import Options, setting

#: the speaker embedders of the embedding methods
EMBEDDERS = ("ge2e", "ecapa", "wavlm")
_CACHE_HELP = "embedding cache / LLM reply cache (keyed by content)"


@dataclass(frozen=True)
class ConsistencySettings:
    """The embedding Scorer: embedder, method, threshold (default: check_method's, by embedder and
    method), model_dir (ecapa, wavlm folders), cache_dir (embedding cache keyed by audio content;
    volatile), max_audio_seconds (longer audio files fail their rows; 0: no cap)."""

    embedder: str = setting("ge2e", choices=EMBEDDERS)
    method: str = setting("pairwise", choices=tuple(METHODS),
                          help="centroid: mean of unit-normalised embeddings; centroid-raw: mean of raw ones")
    threshold: float | None = setting(None, help="default: the paper's (0.4 / 0.3 / 0.4)")
    model_dir: Path | None = setting(None, help="local model folder (ecapa, wavlm)")
    cache_dir: Path | None = setting(None, help=_CACHE_HELP, volatile=True)
    max_audio_seconds: float = setting(DEFAULT_MAX_AUDIO_SECONDS, help=MAX_AUDIO_SECONDS_HELP)


@dataclass(frozen=True)
class LalmConsistencySettings(AudioJudgeConfig):
    """The LALM judge: AudioJudgeConfig plus task, reference, text_context, per_turn, permutations, seed
    (LalmConsistencyJudge's)."""

    prompt_file: Path | None = setting(None, help="your own prompt for the --task asked (see docs/consistency.md)")
    cache_dir: Path | None = setting(None, help=_CACHE_HELP, volatile=True)
    task: str = setting("auto", choices=LALM_TASKS,
                        help="auto: detection rows get the YES/NO question, discrimination rows the A/B/C one")
    reference: bool = setting(True, cli="--no-reference", help="leave the reference clip out")
    text_context: bool = setting(False, cli="--with-text-context",
                                 help="interleave the interlocutors' turns as text (dialogue_speakers/dialogue_texts)")
    per_turn: bool = setting(False, help="one call per turn against the reference")
    permutations: str = setting("one", choices=PERMUTATIONS,
                                help="one: a seeded random option order per row; all: every order (position bias)")
    seed: int = setting(0, help="seed of the option orders", needs={"permutations": ("one",)})


OPTIONS = Options({"embedding": ConsistencySettings, "openai": LalmConsistencySettings}, mode="judge",
                  mode_default="embedding", groups={"openai": "LALM judge (--judge openai)"},
                  mode_help="embedding: speaker-embedding methods (offline); openai: an audio LLM at an "
                            "OpenAI-compatible endpoint")
