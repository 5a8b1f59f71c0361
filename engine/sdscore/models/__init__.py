"""Reward models: backbone adapter → pooling (sdscore.kernels) → head; losses and training.

Adapters (one module each) implement `RewardModel` (base.py): the compact built-in model, the
SDiaReward Qwen2.5-Omni thinker, and TRL sequence-classification checkpoints.
"""

from sdscore.models.base import Prepared, RewardModel
from sdscore.models.episodes import Episode, Turn, episodes_from_pairs

__all__ = ["Episode", "Prepared", "RewardModel", "Turn", "episodes_from_pairs"]
