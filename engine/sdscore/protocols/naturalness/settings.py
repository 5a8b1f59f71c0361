"""`sdscore score naturalness` settings, declared once (runtime/settings.py): the NaturalnessScorer's.
Its CLI options, keyword check and run record come from this class."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP
from sdscore.runtime.settings import Options, setting

_MODELS = "local model folders (none ships; the columns stay null with the reason)"


@dataclass(frozen=True)
class NaturalnessSettings:
    """The naturalness Scorer: whisper_dir, lid_dir, dialect_dir, emotion_dir, mos_dir (optional local
    model folders), max_audio_seconds (longer files fail their rows; 0: no cap); jobs (worker processes
    for pocketsphinx and Praat; default: the compute budget's cores(), 1 in an executor's worker) and
    cache_dir (clip features keyed by content) change no score: volatile."""

    whisper_dir: Path | None = setting(None, group=_MODELS,
                                       help="a Whisper checkpoint (HF layout): a second ASR engine")
    lid_dir: Path | None = setting(None, group=_MODELS,
                                   help="an audio language-ID classifier (e.g. MMS-LID); default: py3langid on "
                                        "the transcript")
    dialect_dir: Path | None = setting(None, group=_MODELS,
                                       help="a Voxlect-English-style 16-class dialect classifier")
    emotion_dir: Path | None = setting(None, group=_MODELS, help="an arousal/valence/dominance regression model")
    mos_dir: Path | None = setting(None, group=_MODELS,
                                   help="model.onnx: 16 kHz waveform [1, T] -> one MOS (e.g. UTMOS)")
    jobs: int | None = setting(None, volatile=True,
                               help="worker processes for pocketsphinx and Praat (default: the compute budget's cores; 1 inside a processes/ray worker)")
    cache_dir: Path | None = setting(None, volatile=True, help="clip-feature cache (keyed by audio content)")
    max_audio_seconds: float = setting(DEFAULT_MAX_AUDIO_SECONDS, help=MAX_AUDIO_SECONDS_HELP)


OPTIONS = Options({"naturalness": NaturalnessSettings})
