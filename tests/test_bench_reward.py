"""bench/reward.py's GPU rows, checked where they can be on a CPU: the Qwen2.5-Omni-3B shape the
MFU row builds, and the FLOP count it divides by time."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import reward as bench  # noqa: E402
from tiny_reward_models import (  # noqa: E402
    OMNI_3B_SIZES,
    OMNI_NAMED_TOKENS,
    OMNI_SPECIAL_TOKENS,
    build_tiny_sdiareward,
    byte_level_tokenizer,
    tiny_thinker_config,
)

from sdscore.models.episodes import Episode, Turn  # noqa: E402
from sdscore.models.loading import load_reward_model  # noqa: E402
from sdscore.runtime.reward.episode_scorer import RewardScorer  # noqa: E402


def test_omni_3b_shape_has_the_published_sizes():
    """Qwen2.5-Omni-3B's thinker: a 3.09 B-parameter Qwen2.5-3B language model and a 0.64 B
    Whisper-large-v3-sized audio tower (counted on the meta device: no memory is allocated)."""
    from transformers import Qwen2_5OmniThinkerModel

    config = tiny_thinker_config(byte_level_tokenizer(OMNI_SPECIAL_TOKENS, OMNI_NAMED_TOKENS), OMNI_3B_SIZES)
    with torch.device("meta"):
        thinker = Qwen2_5OmniThinkerModel._from_config(config)
    count = {name: sum(p.numel() for p in getattr(thinker, name).parameters()) for name in ("language_model", "audio_tower")}
    assert 3.05e9 < count["language_model"] < 3.12e9
    assert 0.62e9 < count["audio_tower"] < 0.65e9
    text = config.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads, text.num_key_value_heads) == (2048, 36, 16, 2)


def _linear_weights(module: nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def test_counted_flops_cover_the_language_model(tmp_path):
    """The MFU numerator: FLOPs counted over one score_pairs pass are at least 2 x the language
    model's Linear weights x the attended tokens (attention, the audio tower and padding come on
    top), and not wildly more."""
    ckpt, base = build_tiny_sdiareward(tmp_path / "ckpt", tmp_path / "base")
    model = load_reward_model(ckpt, base=base)
    rng = np.random.default_rng(0)
    wave = lambda s: (0.1 * rng.standard_normal(int(s * 16000))).astype(np.float32)  # noqa: E731
    pairs = []
    for i in range(3):
        context = (Turn("user", "how are you", wave(0.8 + 0.3 * i)),)
        pairs.append((Episode(context + (Turn("assistant", "fine thanks", wave(0.6)),), "modality", f"{i}/c"),
                      Episode(context + (Turn("assistant", "go away", wave(1.1)),), "modality", f"{i}/r")))
    tokens = sum(model.prepare(e, [t.audio for t in e.turns]).length for pair in pairs for e in pair)
    floor = 2 * _linear_weights(model.backbone.language_model) * tokens
    scorer = RewardScorer(model, device="cpu", max_batch=4)
    flops = bench.counted_flops(lambda: bench.ours(scorer, pairs))
    assert floor <= flops <= 20 * floor

