"""A batch of prefix groups for a Qwen2-family decoder: collate, then prefix pass + continuation pass.

A group's members share their first `prefix` tokens (runtime/reward/prefix_groups.py decides
which). `collate_prefix_groups` lays a batch of groups out; `grouped_states` runs it:

1. the prefixes, once per group, packed without padding (causal within each prefix, through
   packed_attention), keeping their keys and values (a DynamicCache);
2. the continuations, in one of two layouts (`CONTINUATION_LAYOUTS`):
   - "varlen" (the default): packed into one row, no padding; each continuation's queries attend
     to its group's cached prefix keys followed by its own (prefix_attention: flash-attention
     varlen with bottom-right causal alignment on CUDA, SDPA per segment elsewhere);
   - "padded" (the earlier path, kept for comparison): the cache gathered to one left-padded row
     per member, the continuations right-padded, masked SDPA over both — every projection and MLP
     FLOP of the padding is spent, and the mask is [N, 1, C, P + C].
   Both give the same states at the attended positions (tests/test_models_prefix_continuation.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from sdscore.errors import ModelError
from sdscore.models.base import Prepared
from sdscore.models.packed_attention import packed_inputs, use_packed_attention
from sdscore.models.prefix_attention import PrefixKeys, continuation_layout

CONTINUATION_LAYOUTS = ("varlen", "padded")


def collate_prefix_groups(groups: Sequence[tuple[Sequence[Prepared], int]], pad_token_id: int) -> tuple[dict, list, list]:
    """(batch, the prefixes' clips, the continuations' clips) of one batch of groups (members, prefix length).

    The prefixes (each from its group's first member) packed as packed_inputs lays them out
    (prefix_input_ids [1, T], prefix_position_ids, prefix_cu_seqlens, prefix_max_seqlen,
    prefix_bounds) with prefix_gather int64 [G, P] (each group's prefix left-padded: its packed
    rows, padding pointing at its first row) and prefix_mask [G, P]; cont_ids / cont_mask [N, C]
    (right padding: each member's tokens after its group's prefix), group_index [N],
    prefix_lengths [G]; and the packed continuations: cont_packed_ids [1, Tc], cont_position_ids
    [3, 1, Tc] (each continuing its prefix's positions), cont_layout (prefix_attention's plan) and
    cont_scatter int64 [Tc] (each packed token's flat index in [N, C]).
    """
    if not groups or any(not members for members, _ in groups):
        raise ValueError("collate_groups needs at least one group, each with at least one member")
    width_p = max(prefix for _, prefix in groups)
    rows = [(g, item, prefix) for g, (members, prefix) in enumerate(groups) for item in members]
    width_c = max(item.length - prefix for _, item, prefix in rows)
    packed = packed_inputs([members[0].inputs["input_ids"][:prefix] for members, prefix in groups])
    gather = torch.zeros((len(groups), width_p), dtype=torch.long)
    prefix_mask = torch.zeros((len(groups), width_p), dtype=torch.long)
    cont_ids = torch.full((len(rows), width_c), pad_token_id, dtype=torch.long)
    cont_mask = torch.zeros((len(rows), width_c), dtype=torch.long)
    prefix_clips, cont_clips = [], []
    for g, (members, prefix) in enumerate(groups):
        start = packed["bounds"][g]
        gather[g] = start
        gather[g, width_p - prefix:] = torch.arange(start, start + prefix)
        prefix_mask[g, width_p - prefix:] = 1
        first = members[0]
        spans = first.inputs["clip_spans"]
        prefix_clips += [f for f, end in zip(first.inputs["features"], spans[:, 1].tolist()) if end <= prefix]
    pieces, positions, scatter = [], [], []
    for n, (_, item, prefix) in enumerate(rows):
        length = item.length - prefix
        if length < 1:
            raise ValueError(f"group member {n} has no tokens after its group's {prefix}-token prefix")
        pieces.append(item.inputs["input_ids"][prefix:].to(torch.long))
        cont_ids[n, :length] = pieces[-1]
        cont_mask[n, :length] = 1
        positions.append(torch.arange(prefix, prefix + length))
        scatter.append(torch.arange(n * width_c, n * width_c + length))
        spans = item.inputs["clip_spans"]
        cont_clips += [f for f, start in zip(item.inputs["features"], spans[:, 0].tolist()) if start >= prefix]
    group = [g for g, _, _ in rows]
    batch = {
        "prefix_input_ids": packed["input_ids"], "prefix_position_ids": packed["position_ids"],
        "prefix_cu_seqlens": packed["cu_seqlens"], "prefix_max_seqlen": packed["max_seqlen"],
        "prefix_bounds": packed["bounds"], "prefix_gather": gather, "prefix_mask": prefix_mask,
        "cont_ids": cont_ids, "cont_mask": cont_mask,
        "group_index": torch.tensor(group, dtype=torch.long),
        "prefix_lengths": torch.tensor([prefix for _, prefix in groups], dtype=torch.long),
        "cont_packed_ids": torch.cat(pieces).unsqueeze(0),
        "cont_position_ids": torch.cat(positions).view(1, 1, -1).expand(3, 1, -1).contiguous(),
        "cont_layout": continuation_layout(packed["bounds"], [len(p) for p in pieces], group),
        "cont_scatter": torch.cat(scatter),
    }
    return batch, prefix_clips, cont_clips


def _gathered_cache(cache: Any, rows: torch.Tensor) -> Any:
    """The cache of a packed forward ([1, heads, T, d] per layer) re-laid as [N, heads, P, d]: row n
    holds packed positions rows[n] (int64 [N, P]). transformers' DynamicCache keeps a layer's
    tensors in .keys / .values (transformers >= 4.56)."""
    layers = getattr(cache, "layers", None)
    if not layers or not all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
        raise ModelError(f"prefix sharing needs transformers' DynamicCache with per-layer keys/values, got "
                         f"{type(cache).__name__}; score with share_prefixes=False")
    for layer in layers:
        layer.keys = layer.keys[0][:, rows].transpose(0, 1)
        layer.values = layer.values[0][:, rows].transpose(0, 1)
    return cache


def grouped_states(lm: nn.Module, batch: dict[str, Any], prefix_embeds: torch.Tensor, cont_embeds: torch.Tensor,
                   layout: str = "varlen") -> tuple[torch.Tensor, ...]:
    """(prefix states [G, P, H], prefix_mask, continuation states [N, C, H] (right padded, zeros in
    the padding), cont_mask, group_index) of a collate_prefix_groups batch.

    prefix_embeds [1, Tp, H]: the packed prefixes' input embeddings; cont_embeds: the
    continuations' — [1, Tc, H] packed (layout "varlen") or [N, C, H] right padded ("padded")."""
    if layout not in CONTINUATION_LAYOUTS:
        raise ValueError(f"continuation layout must be one of {CONTINUATION_LAYOUTS}, got {layout!r}")
    prefix_mask, cont_mask, group = batch["prefix_mask"], batch["cont_mask"], batch["group_index"]
    use_packed_attention(lm)
    cu, longest = batch["prefix_cu_seqlens"].to(torch.int32), int(batch["prefix_max_seqlen"])
    out = lm(inputs_embeds=prefix_embeds, attention_mask=None, position_ids=batch["prefix_position_ids"],
             use_cache=True, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest,
             sdscore_seq_bounds=batch["prefix_bounds"])
    gather = batch["prefix_gather"]
    prefix_states = out.last_hidden_state[0][gather]
    if layout == "varlen":
        prefix = PrefixKeys.from_cache(out.past_key_values, batch["cont_layout"])
        del out
        cont = lm(inputs_embeds=cont_embeds, attention_mask=None, position_ids=batch["cont_position_ids"],
                  use_cache=False, sdscore_prefix=prefix).last_hidden_state[0]
        states = cont.new_zeros((cont_mask.shape[0] * cont_mask.shape[1], cont.shape[-1]))
        states.index_copy_(0, batch["cont_scatter"], cont)
        return prefix_states, prefix_mask, states.view(*cont_mask.shape, -1), cont_mask, group
    cache = _gathered_cache(out.past_key_values, gather[group])
    width_p, width_c = gather.shape[1], cont_mask.shape[1]
    steps = torch.arange(width_c, device=cont_mask.device)
    cont_positions = batch["prefix_lengths"][group][:, None] + steps
    cont = lm(inputs_embeds=cont_embeds, attention_mask=torch.cat([prefix_mask[group], cont_mask], 1),
              position_ids=cont_positions.expand(3, -1, -1), past_key_values=cache, use_cache=False,
              cache_position=steps + width_p)
    return prefix_states, prefix_mask, cont.last_hidden_state, cont_mask, group
