"""`sdscore score reward` settings, declared once (runtime/settings.py): the reward model's
(RewardPairsScorer) and the zero-shot audio-LLM judge's (--judge openai, RewardAudioJudgeScorer).
The CLI options, the Scorers' keyword checks and the run record come from these classes.

The judge's endpoint options keep the names of `sdscore score consistency --judge openai` (--base-url,
--model, --prompt-file, --concurrency, --cache-dir, --timeout, --audio-rate, --max-request-bytes);
--model names either mode's model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdscore.audio_limits import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP
from sdscore.llm_judges.audio_request import DEFAULT_MAX_REQUEST_BYTES
from sdscore.llm_judges.settings import AudioJudgeConfig
from sdscore.protocols.reward.choices import BACKENDS, ORDERS
from sdscore.runtime.settings import Options, setting

_MODEL_HELP = ("reward model folder (default: the shipped compact demo model); with --judge openai: the judge "
               "model's name")


@dataclass(frozen=True)
class RewardModelSettings:
    """The reward model: model (folder; default the shipped demo model), base and system_prompt (SDiaReward
    Qwen2.5-Omni checkpoints), backend, device, dtype, max_batch, max_tokens, store_pooled,
    max_audio_seconds (longer audio files are refused per pair; 0: no cap). How the work is split changes
    no score (tested within 1e-5), so a resumed run may change these volatile ones: share_prefixes (a
    pair's shared context runs once where the model allows it) and num_threads (audio loading threads)."""

    # type=str: the same --model names the judge's model with --judge openai (the API takes a path here)
    model: Path | None = setting(None, help=_MODEL_HELP, type=str)
    base: Path | None = setting(None, help="base Qwen2.5-Omni folder (config, tokenizer, processor)")
    system_prompt: Path | None = setting(None, help="system prompt file the checkpoint was trained with")
    backend: str = setting("auto", choices=BACKENDS,
                           help="onnxruntime / tensorrt run MODEL/export/ written by `sdscore export`")
    device: str = setting("auto", help="auto | cpu | cuda | cuda:N")
    dtype: str = setting("auto", help="auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16")
    max_batch: int = setting(16, help="episodes per forward")
    max_tokens: int | None = setting(None, help="cap on positions per batch: batch × longest sequence, or the "
                                                "summed length for models that pack (SDiaReward; default from "
                                                "free device memory)")
    share_prefixes: bool = setting(True, cli="--no-prefix-sharing", volatile=True,
                                   help="score each episode whole (by default a pair's shared context runs once)")
    store_pooled: bool = setting(False, help="also store pooled states (for --head-only)")
    max_audio_seconds: float = setting(DEFAULT_MAX_AUDIO_SECONDS, help=MAX_AUDIO_SECONDS_HELP)
    num_threads: int | None = setting(None, cli=None, volatile=True)


@dataclass(frozen=True)
class RewardJudgeSettings(AudioJudgeConfig):
    """The audio-LLM judge (PairwiseAudioJudge): AudioJudgeConfig plus orders (both: the chosen episode
    first and again second; shown: one order per pair, drawn from seed and pair_id) and seed."""

    model: str | None = setting(None, help="judge model name (the results' judge_model column)")
    prompt_file: Path | None = setting(None, help="your own pair prompt, used for every criterion")
    cache_dir: Path | None = setting(None, help="cache of validated replies (keyed by request content)",
                                     volatile=True)
    max_request_bytes: int = setting(DEFAULT_MAX_REQUEST_BYTES,
                                     help="largest base64 audio payload of one request; a pair over it fails")
    orders: str = setting("both", choices=ORDERS,
                          help="both: ask with the chosen episode first and again with it second; shown: one "
                               "order per pair, drawn with --seed")
    seed: int = setting(0, help="seed of the orders drawn with --orders shown", needs={"orders": ("shown",)})


OPTIONS = Options({"reward-model": RewardModelSettings, "openai": RewardJudgeSettings}, mode="judge",
                  mode_default="reward-model", groups={"openai": "audio-LLM judge (--judge openai)"},
                  mode_help="reward-model: a reward model scores each episode; openai: an audio LLM at an "
                            "OpenAI-compatible endpoint says which episode of each pair is better (zero-shot "
                            "baseline)")
