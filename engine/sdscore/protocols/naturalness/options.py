"""`sdscore score naturalness` options: the NaturalnessScorer's settings on the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP


def add_score_options(parser: argparse.ArgumentParser) -> None:
    models = parser.add_argument_group("local model folders (none ships; the columns stay null with the reason)")
    models.add_argument("--whisper-dir", type=Path, help="a Whisper checkpoint (HF layout): a second ASR engine")
    models.add_argument("--lid-dir", type=Path,
                        help="an audio language-ID classifier (e.g. MMS-LID); default: py3langid on the transcript")
    models.add_argument("--dialect-dir", type=Path, help="a Voxlect-English-style 16-class dialect classifier")
    models.add_argument("--emotion-dir", type=Path, help="an arousal/valence/dominance regression model")
    models.add_argument("--mos-dir", type=Path, help="model.onnx: 16 kHz waveform [1, T] -> one MOS (e.g. UTMOS)")
    parser.add_argument("--jobs", type=int, help="worker processes for pocketsphinx and Praat (default: CPU count)")
    parser.add_argument("--cache-dir", type=Path, help="clip-feature cache (keyed by audio content)")
    parser.add_argument("--max-audio-seconds", type=float, default=DEFAULT_MAX_AUDIO_SECONDS,
                        help=MAX_AUDIO_SECONDS_HELP)


def score_settings(args: argparse.Namespace) -> dict:
    return {"whisper_dir": args.whisper_dir, "lid_dir": args.lid_dir, "dialect_dir": args.dialect_dir,
            "emotion_dir": args.emotion_dir, "mos_dir": args.mos_dir, "jobs": args.jobs,
            "cache_dir": args.cache_dir, "max_audio_seconds": args.max_audio_seconds}
