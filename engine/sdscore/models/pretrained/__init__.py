"""Models that ship inside the package (small, safetensors): the compact demo reward model."""

from __future__ import annotations

from pathlib import Path

from sdscore.errors import ModelError

#: the compact reward model trained by bench/train_demo_model.py on the synthetic corpus
DEFAULT_MODEL = "compact-synth"


def default_model_dir(name: str = DEFAULT_MODEL) -> Path:
    """Folder of a shipped model; ModelError if the package was installed without it."""
    folder = Path(__file__).resolve().parent / name
    if not (folder / "sdscore_reward.json").is_file():
        raise ModelError(f"{folder}: the shipped model {name!r} is missing from this installation")
    return folder
