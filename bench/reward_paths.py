"""A/B rows of the reward path's two optimisations, on one model and the same pairs.

- continuations: "varlen" (packed continuations over the cached prefixes: no padding) vs "padded"
  (the earlier right-padded continuation over a gathered cache, masked SDPA) — both with pair-prefix
  sharing on (`SDiaRewardQwenOmni.continuation_layout`);
- decoder: fused (one q/k/v GEMM, one gate/up GEMM, fused RMSNorm / rotary / SiLU·mul:
  models/fused_decoder.py) vs Hugging Face's unfused layers (`unfuse_decoder`).

Every variant runs in the same interleaved rounds (bench/common.py): the ratio is the median of
the per-round ratios; the max |score difference| against the new path is printed. Used by
`bench/reward.py --paths`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import Row, interleaved_rounds, rate_row

from sdscore.models.fused_decoder import fuse_decoder, unfuse_decoder
from sdscore.runtime.reward.episode_scorer import RewardScorer

VARIANTS = {  # name: (continuation layout, fused decoder)
    "varlen + fused": ("varlen", True),
    "padded + fused": ("padded", True),
    "varlen + unfused": ("varlen", False),
    "padded + unfused": ("padded", False),
}

#: a small random thinker for CPU timings where the tiny test model is all overhead (fp32)
SMALL_TEXT = {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 2, "mrope_section": [8, 12, 12]}


def small_model(folder: Path, device: str):
    """The SDiaReward adapter over a random thinker with SMALL_TEXT's language model (tiny audio tower)."""
    from tiny_reward_models import TINY_SIZES, build_tiny_sdiareward, tiny_thinker_config
    from transformers import Qwen2_5OmniThinkerModel

    from sdscore.models.loading import load_reward_model
    from sdscore.models.sdiareward_qwen import SDiaRewardQwenOmni

    ckpt, base = build_tiny_sdiareward(folder / "ckpt-small", folder / "base-small")
    tiny = load_reward_model(ckpt, base=base)
    sizes = {**TINY_SIZES, "audio": {**TINY_SIZES["audio"], "output_dim": SMALL_TEXT["hidden_size"]},
             "vision": {**TINY_SIZES["vision"], "out_hidden_size": SMALL_TEXT["hidden_size"]}, "text": SMALL_TEXT}
    torch.manual_seed(0)
    backbone = Qwen2_5OmniThinkerModel._from_config(tiny_thinker_config(tiny.tokenizer, sizes),
                                                    attn_implementation="sdpa")
    model = SDiaRewardQwenOmni(backbone, tiny.tokenizer, tiny.feature_extractor, tiny.chat_template, tiny.system_prompt)
    return model.to(device).eval()


def _variant(model, scorer: RewardScorer, pairs, layout: str, fused: bool, out: dict, name: str) -> Callable[[], None]:
    def run() -> None:
        model.continuation_layout = layout
        (fuse_decoder if fused else unfuse_decoder)(model.backbone.language_model)
        chosen, rejected = scorer.score_pairs(pairs)
        out[name] = torch.stack([chosen, rejected], 1).float().cpu().numpy()
    return run


def path_rows(name: str, model, pairs, rounds: int, max_batch: int, device: str,
              sync: Callable[[], None] | None = None) -> list[Row]:
    """Rows: varlen vs padded continuations (fused decoder), fused vs unfused decoder (varlen), and
    both optimisations vs neither; pairs/s, interleaved rounds. Leaves the model varlen + fused."""
    scorer = RewardScorer(model, share_prefixes=True, device=device, max_batch=max_batch)
    outputs: dict[str, np.ndarray] = {}
    runs = {k: _variant(model, scorer, pairs, *v, outputs, k) for k, v in VARIANTS.items()}
    try:
        seconds = interleaved_rounds(runs, rounds, sync=sync)
    finally:
        model.continuation_layout = "varlen"
        fuse_decoder(model.backbone.language_model)
    for k in VARIANTS:
        diff = float(np.max(np.abs(outputs[k] - outputs["varlen + fused"])))
        print(f"{name}, {k}: max |score - varlen + fused score| = {diff:.2e} over {len(pairs)} pairs")
    n = len(pairs)
    return [
        rate_row(f"{name}: varlen vs padded continuation, fused decoder ({device})", "pairs/s", n,
                 seconds["varlen + fused"], seconds["padded + fused"]),
        rate_row(f"{name}: fused vs unfused decoder, varlen continuation ({device})", "pairs/s", n,
                 seconds["varlen + fused"], seconds["varlen + unfused"]),
        rate_row(f"{name}: varlen + fused vs padded + unfused (the earlier path) ({device})", "pairs/s", n,
                 seconds["varlen + fused"], seconds["padded + unfused"]),
    ]


def forward_rows(name: str, model, pairs, rounds: int, max_batch: int, device: str,
                 sync: Callable[[], None] | None = None) -> list[Row]:
    """The same A/B on the model's forward alone (front end excluded): each pair one prefix group,
    collated once into batches of max_batch episodes, moved to the device, then timed
    inference_pooled over all batches per variant."""
    from sdscore.audio import load
    from sdscore.models.base import batch_to

    dtype = next(model.parameters()).dtype
    waves = [[[None if t.audio is None else load(t.audio, model.sample_rate) for t in e.turns] for e in pair]
             for pair in pairs]
    groups = []
    for pair, audio in zip(pairs, waves):
        items = model.prepare_many(list(pair), audio)
        groups.append((items, model.shared_prefix(items[0], items[1])))
    per_batch = max(1, max_batch // 2)
    batches = [batch_to(model.collate_groups(groups[i:i + per_batch]), device, dtype)
               for i in range(0, len(groups), per_batch)]

    def variant(layout: str, fused: bool) -> Callable[[], None]:
        def run() -> None:
            model.continuation_layout = layout
            (fuse_decoder if fused else unfuse_decoder)(model.backbone.language_model)
            with torch.inference_mode():
                for batch in batches:
                    model.inference_pooled(batch)
        return run

    try:
        seconds = interleaved_rounds({k: variant(*v) for k, v in VARIANTS.items()}, rounds, sync=sync)
    finally:
        model.continuation_layout = "varlen"
        fuse_decoder(model.backbone.language_model)
    n = len(pairs)
    return [
        rate_row(f"{name}, forward only: varlen vs padded continuation, fused ({device})", "pairs/s", n,
                 seconds["varlen + fused"], seconds["padded + fused"]),
        rate_row(f"{name}, forward only: fused vs unfused decoder, varlen ({device})", "pairs/s", n,
                 seconds["varlen + fused"], seconds["varlen + unfused"]),
        rate_row(f"{name}, forward only: varlen + fused vs padded + unfused ({device})", "pairs/s", n,
                 seconds["varlen + fused"], seconds["padded + unfused"]),
    ]
