"""`sdscore score arena` settings: the audio judge's, declared once (runtime/settings.py) — its CLI
options, the Scorer's keyword check and the run record come from this class.

The endpoint options keep the names of `sdscore score consistency --judge openai` (--base-url, --model,
--prompt-file, --seed, --concurrency, --cache-dir, --timeout, --audio-rate, --max-request-bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdscore.llm_judges.settings import AudioJudgeConfig
from sdscore.protocols.arena.choices import ORDERS
from sdscore.runtime.settings import Options, setting


@dataclass(frozen=True)
class ArenaJudgeSettings(AudioJudgeConfig):
    """The arena audio judge: AudioJudgeConfig plus orders (both: A-B and B-A; shown: A-B; random: one
    seeded order), allow_ties, seed (of orders="random")."""

    model: str | None = setting(help="judge model name (the results' judge column)", required=True)
    prompt_file: Path | None = setting(None, help="your own prompt (sections: see docs/arena.md)")
    orders: str = setting("both", choices=ORDERS,
                          help="both: A-B and B-A (position consistency); shown: A-B only; random: one seeded order")
    allow_ties: bool = setting(False, help="the judge may answer Tie (bundled prompt: First, Second or Tie)")
    seed: int = setting(0, help="seed of --orders random", needs={"orders": ("random",)})


OPTIONS = Options({"openai": ArenaJudgeSettings}, mode="judge", mode_required=True, title="audio judge",
                  mode_help="openai: an audio LLM at an OpenAI-compatible endpoint judges each battle")
