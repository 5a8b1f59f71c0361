"""Varlen attention of packed continuations over their shared prefixes' cached keys and values.

Pair-prefix sharing runs each group's common prefix once (packed, keeping its keys/values) and
then every member's continuation. Here the continuations run PACKED too — one [1, Tc] row, no
padding, so no projection or MLP FLOP goes to pad tokens — and continuation n's queries attend
to its group's prefix keys followed by its own keys, causally:

    keys of segment n = prefix keys of group g(n)  ++  continuation n's keys      (Lk = P_g + C_n)
    query i of segment n (0 ≤ i < C_n) sees keys j ≤ P_g + i                      (bottom-right causal)

`continuation_layout` plans this on the host: per-segment query and key offsets (cu_seqlens, int32,
flash-attention's varlen layout) and `key_index`, which gathers each segment's keys from the
concatenation [prefix packed keys (Tp rows); continuation keys (Tc rows)] — the prefix rows are
repeated per member (as a padded cache gather would, without the padding). `prefix_attention`
attends, with the same backend order as packed_attention.varlen_causal_attention:

1. `flash_attn.flash_attn_varlen_func(causal=True)`: with Lq ≠ Lk its causal mask is aligned to
   the bottom right (flash-attn ≥ 2.1), exactly the rule above;
2. `torch.nn.attention.varlen.varlen_attn(window_size=(-1, 0))`: torch's flash-attention kernel,
   same alignment (CUDA, fp16/bf16, head_dim ≤ 256 and a multiple of 8);
3. one `scaled_dot_product_attention` per segment with an explicit lower-right boolean mask (CPU,
   CUDA fp32, and the reference the others are tested against; SDPA's own is_causal aligns top-left).

A zero-length continuation has no queries and gives no output rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch
from torch.nn import functional as F

from sdscore.errors import ModelError
from sdscore.models.packed_attention import _flash_attn_varlen, _torch_varlen, varlen_backend


@dataclass
class ContinuationLayout:
    """Where each packed continuation's queries and keys lie (see `continuation_layout`)."""

    cu_q: torch.Tensor  # int32 [N+1]: continuation n's queries are rows cu_q[n]:cu_q[n+1] of the packed row
    cu_k: torch.Tensor  # int32 [N+1]: its keys are rows cu_k[n]:cu_k[n+1] of the gathered keys
    key_index: torch.Tensor  # int64 [K]: gathered key row -> row of cat(prefix keys [Tp], continuation keys [Tc])
    max_q: int
    max_k: int
    bounds_q: tuple[int, ...]  # cu_q as host ints
    bounds_k: tuple[int, ...]  # cu_k as host ints

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ContinuationLayout:
        moved = (t.to(device, non_blocking=non_blocking) for t in (self.cu_q, self.cu_k, self.key_index))
        return ContinuationLayout(*moved, self.max_q, self.max_k, self.bounds_q, self.bounds_k)

    def pin_memory(self) -> ContinuationLayout:
        pinned = (t if t.device.type != "cpu" else t.pin_memory() for t in (self.cu_q, self.cu_k, self.key_index))
        return ContinuationLayout(*pinned, self.max_q, self.max_k, self.bounds_q, self.bounds_k)


def continuation_layout(prefix_bounds: Sequence[int], cont_lengths: Sequence[int],
                        group: Sequence[int]) -> ContinuationLayout:
    """The layout of N packed continuations (cont_lengths[n] ≥ 0 tokens, of group group[n]) over
    packed prefixes (group g's prefix is rows prefix_bounds[g]:prefix_bounds[g+1], G+1 offsets)."""
    if len(cont_lengths) != len(group):
        raise ValueError(f"{len(cont_lengths)} continuation lengths for {len(group)} group indices")
    n_groups = len(prefix_bounds) - 1
    total_prefix = int(prefix_bounds[-1]) if n_groups >= 0 else 0
    bounds_q, bounds_k, index = [0], [0], []
    for n, (length, g) in enumerate(zip(cont_lengths, group)):
        if not 0 <= g < n_groups:
            raise ValueError(f"continuation {n}: group {g} is not one of the {n_groups} prefixes")
        if length < 0:
            raise ValueError(f"continuation {n}: negative length {length}")
        start, stop = int(prefix_bounds[g]), int(prefix_bounds[g + 1])
        index.append(torch.arange(start, stop))
        index.append(torch.arange(total_prefix + bounds_q[-1], total_prefix + bounds_q[-1] + length))
        bounds_q.append(bounds_q[-1] + int(length))
        bounds_k.append(bounds_k[-1] + stop - start + int(length))
    spans_q = [b - a for a, b in pairwise(bounds_q)] or [0]
    spans_k = [b - a for a, b in pairwise(bounds_k)] or [0]
    return ContinuationLayout(
        cu_q=torch.tensor(bounds_q, dtype=torch.int32), cu_k=torch.tensor(bounds_k, dtype=torch.int32),
        key_index=torch.cat(index).long() if index else torch.zeros(0, dtype=torch.long),
        max_q=max(spans_q), max_k=max(spans_k), bounds_q=tuple(bounds_q), bounds_k=tuple(bounds_k),
    )


def gather_keys(prefix: torch.Tensor, cont: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
    """Each segment's keys [K, heads, d]: rows key_index of cat(prefix [Tp, heads, d], cont [Tc, heads, d])."""
    return torch.cat([prefix, cont]).index_select(0, key_index)


def lower_right_causal(length_q: int, length_k: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """bool [Lq, Lk]: query i sees key j when j ≤ i + Lk − Lq (the queries are the last Lq keys)."""
    return torch.ones(length_q, length_k, dtype=torch.bool, device=device).tril(length_k - length_q)


def prefix_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: ContinuationLayout,
    scaling: float | None = None, backend: str | None = None,
) -> torch.Tensor:
    """[Tq, heads_q, d]: each segment's queries over its keys, bottom-right causal (module docstring).

    query [Tq, heads_q, d] (packed continuations), key/value [K, heads_kv, d] (gather_keys'
    layout); heads_q a multiple of heads_kv. backend: None picks as varlen_backend does, or one of
    "flash_attn", "torch_varlen", "sdpa_loop" (tests compare them).
    """
    heads_q, heads_kv = query.shape[1], key.shape[1]
    if heads_q % heads_kv:
        raise ValueError(f"{heads_q} query heads are not a multiple of {heads_kv} key/value heads")
    if query.shape[0] != layout.bounds_q[-1] or key.shape[0] != layout.bounds_k[-1]:
        raise ValueError(f"the layout holds {layout.bounds_q[-1]} queries and {layout.bounds_k[-1]} keys, got "
                         f"{query.shape[0]} and {key.shape[0]}")
    backend = backend or varlen_backend(query)
    if backend == "flash_attn":
        return _flash_attn_varlen()(query, key, value, layout.cu_q.to(query.device), layout.cu_k.to(query.device),
                                    layout.max_q, layout.max_k, softmax_scale=scaling, causal=True)
    if backend == "torch_varlen":
        return _torch_varlen()(query, key, value, layout.cu_q.to(query.device), layout.cu_k.to(query.device),
                               layout.max_q, layout.max_k, scale=scaling, window_size=(-1, 0),
                               enable_gqa=heads_q != heads_kv)
    if backend != "sdpa_loop":
        raise ValueError(f"unknown attention backend {backend!r}; expected flash_attn, torch_varlen or sdpa_loop")
    out = query.new_empty(query.shape)
    q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (query, key, value))  # [1, heads, T, d]
    for (q0, q1), (k0, k1) in zip(pairwise(layout.bounds_q), pairwise(layout.bounds_k)):
        if q1 > q0:
            mask = lower_right_causal(q1 - q0, k1 - k0, query.device)
            out[q0:q1] = F.scaled_dot_product_attention(
                q[:, :, q0:q1], k[:, :, k0:k1], v[:, :, k0:k1], attn_mask=mask, scale=scaling,
                enable_gqa=heads_q != heads_kv,
            )[0].transpose(0, 1)
    return out


@dataclass
class PrefixKeys:
    """What a continuation pass hands each layer's attention: the prefix pass's cache (per layer,
    [1, heads_kv, Tp, d] keys and values, rotary applied) and the continuations' layout."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    layout: ContinuationLayout

    @classmethod
    def from_cache(cls, cache, layout: ContinuationLayout) -> PrefixKeys:
        layers = getattr(cache, "layers", None)
        if not layers or not all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
            raise ModelError(f"prefix sharing needs transformers' DynamicCache with per-layer keys/values, got "
                             f"{type(cache).__name__}")
        return cls([layer.keys for layer in layers], [layer.values for layer in layers], layout)

    def attend(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               scaling: float | None) -> torch.Tensor:
        """query [1, heads_q, Tc, d], key/value [1, heads_kv, Tc, d] of layer `layer` -> [1, Tc, heads_q, d]."""
        if query.shape[0] != 1:
            raise ValueError(f"a packed continuation call has batch 1, got query {tuple(query.shape)}")
        keys = gather_keys(self.keys[layer][0].transpose(0, 1), key[0].transpose(0, 1), self.layout.key_index)
        values = gather_keys(self.values[layer][0].transpose(0, 1), value[0].transpose(0, 1), self.layout.key_index)
        return prefix_attention(query[0].transpose(0, 1), keys, values, self.layout, scaling).unsqueeze(0)
