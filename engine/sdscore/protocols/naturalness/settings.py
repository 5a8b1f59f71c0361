"""`sdscore score naturalness` settings, declared once (runtime/settings.py): the NaturalnessScorer's
(--judge features, the default) and the stance judge's (--judge openai: StanceJudgeScorer). The CLI
options, the Scorers' keyword checks and the run record come from these classes; the judge's endpoint
options keep the names of every other protocol's `--judge openai`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdscore.audio_limits import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP
from sdscore.llm_judges.settings import AudioJudgeConfig
from sdscore.runtime.settings import Options, setting

_MODELS = "local model folders (none ships; the columns stay null with the reason)"
_CACHE_HELP = "clip-feature cache (keyed by audio content); with --judge openai the judge's reply cache"


@dataclass(frozen=True)
class NaturalnessSettings:
    """The naturalness Scorer: whisper_dir, lid_dir, dialect_dir, emotion_dir, emotional_naturalness_dir,
    mos_dir (optional local model folders), max_audio_seconds (longer files fail their rows; 0: no cap);
    jobs (worker processes for pocketsphinx and Praat; default: the compute budget's cores(), 1 in an executor's worker) and
    cache_dir (clip features keyed by content) change no score: volatile."""

    whisper_dir: Path | None = setting(None, group=_MODELS,
                                       help="a Whisper checkpoint (HF layout): a second ASR engine")
    lid_dir: Path | None = setting(None, group=_MODELS,
                                   help="an audio language-ID classifier (e.g. MMS-LID); default: py3langid on "
                                        "the transcript")
    dialect_dir: Path | None = setting(None, group=_MODELS,
                                       help="a Voxlect-English-style 16-class dialect classifier")
    emotion_dir: Path | None = setting(None, group=_MODELS, help="an arousal/valence/dominance regression model")
    emotional_naturalness_dir: Path | None = setting(
        None, group=_MODELS, record_none=False, help="an emotional-naturalness predictor (config.json + model.safetensors; see "
                                  "docs/naturalness.md); needs --emotion-dir, whose model gives the emotion embeddings")
    mos_dir: Path | None = setting(None, group=_MODELS,
                                   help="model.onnx: 16 kHz waveform [1, T] -> one MOS (e.g. UTMOS)")
    turn_taking_model: Path | None = setting(
        None, group=_MODELS, record_none=False, help="VAP turn-taking evaluators: a folder in the authors' released checkpoint layout "
                                  "(VAP_state_dict.pt; every *.pt state dict in it is one evaluator, their surprisals "
                                  "averaged); default: only the model-free n-gram baseline at eval")
    jobs: int | None = setting(None, volatile=True,
                               help="worker processes for pocketsphinx and Praat (default: the compute budget's cores; 1 inside a processes/ray worker)")
    cache_dir: Path | None = setting(None, volatile=True, help=_CACHE_HELP)
    max_audio_seconds: float = setting(DEFAULT_MAX_AUDIO_SECONDS, help=MAX_AUDIO_SECONDS_HELP)


@dataclass(frozen=True)
class StanceJudgeSettings(AudioJudgeConfig):
    """The stance judge (StanceJudgeScorer): AudioJudgeConfig — endpoint, model, prompt_file (sections
    [system] and [user] with {question}, {answer} and {dimensions}; see docs/naturalness.md), reply
    cache, parallelism, deadline, temperature, audio limits — and nothing else."""

    prompt_file: Path | None = setting(None, help="your own stance prompt (sections: see docs/naturalness.md)")
    cache_dir: Path | None = setting(None, volatile=True, help=_CACHE_HELP)


OPTIONS = Options({"features": NaturalnessSettings, "openai": StanceJudgeSettings}, mode="judge",
                  mode_default="features", groups={"openai": "stance judge (--judge openai)"},
                  mode_help="features: latency, interruptions, WER/CER, MOS, language, dialect, emotion and F0 "
                            "columns (offline); openai: an audio LLM at an OpenAI-compatible endpoint rates the "
                            "question and the answer on StanceBench's 10 interpersonal stances")
