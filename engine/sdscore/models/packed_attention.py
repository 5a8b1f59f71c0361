"""Padding-free (packed) forward of a Hugging Face decoder: episodes concatenated into one [1, T] row.

A packed batch has no padding, so no FLOPs go to pad tokens and no [B, 1, L, L] mask is built;
each episode attends causally to itself only, through `cu_seqlens` (int32 [B+1], the layout Hugging
Face's flattening collator and flash-attention's varlen kernels use). Results equal the left-padded
forward's valid positions (tests/test_models_packed_attention.py).

`register()` adds one attention implementation, ATTENTION_NAME, to transformers' AttentionInterface
and AttentionMaskInterface. It is a hybrid so that it can be set once on a model and stay there:

- a packed call (attention_mask None, cu_seq_lens_q/k and max_length_q/k passed down as transformers'
  flash path passes them: LM forward **kwargs → decoder layer → attention → interface) gets no mask
  at all (the mask function returns None) and runs varlen attention, picked in this order:
  1. `flash_attn.flash_attn_varlen_func` (CUDA, fp16/bf16, when the package is installed);
  2. `torch.nn.attention.varlen.varlen_attn` (CUDA, fp16/bf16, head_dim ≤ 256 and a multiple of 8:
     torch's own flash-attention kernel; causal is window_size=(-1, 0); GQA by enable_gqa);
  3. one `scaled_dot_product_attention(is_causal=True, enable_gqa=True)` call per episode (CPU, and
     CUDA in fp32). Chosen over one call with a block-diagonal [T, T] mask: that does T² work where
     the loop does Σ Lᵢ² (8 equal episodes: 8× less), and it would build exactly the dense mask this
     module exists to avoid. Measured (CPU, 1 thread, 16 query / 2 kv heads of 128, fp32): 8 × 512
     tokens 0.47 s vs 6.8 s, 32 × 64 tokens 0.036 s vs 0.88 s, one 1000-token episode 0.20 vs 0.30 s.
- any other call (a 2-D padding mask, or cached keys as in pair-prefix sharing; no cu_seq_lens) is
  passed to transformers' own sdpa mask and sdpa attention unchanged, so the model's padded
  `hidden()` and cached forwards keep giving sdpa's states.

Why set it on the language model once (`use_packed_attention`), not per call: transformers reads
`config._attn_implementation` at every layer, and flipping it around a call would race with any
other thread using the module; the hybrid makes the permanent switch harmless to padded callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from sdscore import kernels

ATTENTION_NAME = "sdscore_varlen"

_registered = False


def _flash_attn_varlen():
    """flash_attn.flash_attn_varlen_func, or None when the package is not installed."""
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_varlen_func


def _torch_varlen():
    """torch.nn.attention.varlen.varlen_attn (torch ≥ 2.10), or None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def _packed_mask(*args: Any, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor | None:
    """Mask function of ATTENTION_NAME: None when there is nothing beyond plain causal masking to
    express (no padding mask, no cached keys: a packed call, whose causal-per-episode masking the
    attention function applies); anything else (padding, a cache) gets transformers' sdpa mask, as
    under attn_implementation="sdpa"."""
    q_length, kv_length = kwargs.get("q_length"), kwargs.get("kv_length")
    if attention_mask is None and q_length is not None and q_length == kv_length and not kwargs.get("kv_offset"):
        return None
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def _half_precision(x: torch.Tensor) -> bool:
    return x.dtype in (torch.float16, torch.bfloat16)


def varlen_backend(query: torch.Tensor) -> str:
    """Which path attends for a packed query [T, heads, d]: "flash_attn", "torch_varlen" or "sdpa_loop"."""
    if query.is_cuda and _half_precision(query):
        if _flash_attn_varlen() is not None:
            return "flash_attn"
        head_dim = query.shape[-1]
        if _torch_varlen() is not None and head_dim <= 256 and head_dim % 8 == 0:
            return "torch_varlen"
    return "sdpa_loop"


def varlen_causal_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
    scaling: float | None = None, dropout: float = 0.0, bounds: Sequence[int] | None = None,
) -> torch.Tensor:
    """Causal attention within each sequence of a packed batch -> [T, heads_q, d].

    query [T, heads_q, d], key/value [T, heads_kv, d] with heads_q a multiple of heads_kv (GQA);
    cu_seqlens int32 [B+1] on the query's device; bounds: the same offsets as host ints (saves a
    device sync per layer on the SDPA path; read from cu_seqlens when None).
    """
    heads_q, heads_kv = query.shape[1], key.shape[1]
    if heads_q % heads_kv:
        raise ValueError(f"{heads_q} query heads are not a multiple of {heads_kv} key/value heads")
    backend = varlen_backend(query)
    if backend == "flash_attn":
        cu = cu_seqlens.to(device=query.device, dtype=torch.int32)
        return _flash_attn_varlen()(
            query, key, value, cu, cu, max_seqlen, max_seqlen, dropout_p=dropout, softmax_scale=scaling, causal=True
        )
    if backend == "torch_varlen" and dropout == 0.0:
        cu = cu_seqlens.to(device=query.device, dtype=torch.int32)
        return _torch_varlen()(
            query, key, value, cu, cu, max_seqlen, max_seqlen, scale=scaling, window_size=(-1, 0),
            enable_gqa=heads_q != heads_kv,
        )
    edges = [int(x) for x in (bounds if bounds is not None else cu_seqlens.tolist())]
    out = query.new_empty(query.shape)
    # [1, heads, T, d]: with a batch dimension SDPA keeps its fused CPU kernel; 3-D inputs with
    # enable_gqa fell back to a path ~6x slower (measured: 470 tokens, 4/2 heads of 8)
    q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (query, key, value))
    for start, stop in pairwise(edges):
        if stop > start:
            out[start:stop] = F.scaled_dot_product_attention(
                q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop], dropout_p=dropout, is_causal=True,
                scale=scaling, enable_gqa=heads_q != heads_kv,
            )[0].transpose(0, 1)
    return out


def packed_attention_forward(
    module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
    sliding_window: int | None = None, **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function of ATTENTION_NAME: query [1, heads, T, d] -> ([1, T, heads, d], None).

    Packed when cu_seq_lens_q is passed (cu_seq_lens_k must equal it: no cache, self-attention);
    packed continuations over cached prefixes when sdscore_prefix (prefix_attention.PrefixKeys) is;
    otherwise transformers' sdpa_attention_forward with the padded call's mask.
    """
    prefix = kwargs.pop("sdscore_prefix", None)
    if prefix is not None:  # packed continuations over cached prefixes (prefix_attention.PrefixKeys)
        if attention_mask is not None:
            raise ValueError(f"{ATTENTION_NAME}: a packed continuation call takes no attention_mask")
        return prefix.attend(module.layer_idx, query, key, value, scaling), None
    cu_q, cu_k = kwargs.pop("cu_seq_lens_q", None), kwargs.pop("cu_seq_lens_k", None)
    max_q, max_k = kwargs.pop("max_length_q", None), kwargs.pop("max_length_k", None)
    bounds = kwargs.pop("sdscore_seq_bounds", None)
    if cu_q is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if attention_mask is not None:
        raise ValueError(f"{ATTENTION_NAME}: a packed call (cu_seq_lens_q given) takes no attention_mask")
    if sliding_window is not None:
        raise ValueError(f"{ATTENTION_NAME}: sliding-window layers are not supported in packed calls")
    if query.shape[0] != 1:
        raise ValueError(f"{ATTENTION_NAME}: a packed call has batch 1, got query {tuple(query.shape)}")
    if cu_k is not None and cu_k is not cu_q and not torch.equal(cu_k, cu_q):
        raise ValueError(f"{ATTENTION_NAME}: cu_seq_lens_k differs from cu_seq_lens_q (no cache is supported)")
    if max_q is None or (max_k is not None and int(max_k) != int(max_q)):
        raise ValueError(f"{ATTENTION_NAME}: a packed call needs max_length_q (= max_length_k)")
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [T, heads, d]
    out = varlen_causal_attention(q, k, v, cu_q, int(max_q), scaling, dropout, bounds)
    return out.unsqueeze(0), None


def register() -> str:
    """Register ATTENTION_NAME with transformers' attention and mask interfaces (idempotent); its name."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface

        AttentionInterface.register(ATTENTION_NAME, packed_attention_forward)
        AttentionMaskInterface.register(ATTENTION_NAME, _packed_mask)
        _registered = True
    return ATTENTION_NAME


def use_packed_attention(language_model: nn.Module) -> None:
    """Switch a transformers decoder (a PreTrainedModel) to ATTENTION_NAME, once; padded and cached
    calls then run sdpa (whatever the model was loaded with), packed calls become possible. Only
    this module's config changes (a Qwen2.5-Omni audio tower keeps its own). A no-op when already
    switched. Call it where the model is built (each worker process builds its own)."""
    register()
    if getattr(language_model.config, "_attn_implementation", None) != ATTENTION_NAME:
        language_model.set_attn_implementation(ATTENTION_NAME)


def packed_inputs(ids_list: Sequence[torch.Tensor]) -> dict[str, Any]:
    """One packed row from B episodes' token ids (1-D integer tensors, each ≥ 1 token).

    Returns input_ids int64 [1, T] (episodes concatenated), position_ids int64 [3, 1, T] (positions
    restart at 0 per episode; Qwen2.5-Omni's three mrope rows are equal for text and audio tokens,
    as its get_rope_index gives), cu_seqlens int32 [B+1], max_seqlen int, offsets int64 [B+1] (for
    the pooling kernels) and bounds (the offsets as host ints).
    """
    if len(ids_list) == 0:
        raise ValueError("packed_inputs needs at least one episode")
    lengths = []
    for n, ids in enumerate(ids_list):
        if not isinstance(ids, torch.Tensor) or ids.ndim != 1 or ids.is_floating_point() or ids.is_complex():
            shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"episode {n}: input ids must be a 1-D integer tensor, got {shape}")
        if ids.numel() == 0:
            raise ValueError(f"episode {n}: no tokens (an empty episode cannot be scored)")
        lengths.append(int(ids.numel()))
    bounds = [0]
    for length in lengths:
        bounds.append(bounds[-1] + length)
    positions = torch.cat([torch.arange(length, dtype=torch.long) for length in lengths])
    return {
        "input_ids": torch.cat([ids.to(torch.long) for ids in ids_list]).unsqueeze(0),
        "position_ids": positions.view(1, 1, -1).expand(3, 1, -1).contiguous(),
        "cu_seqlens": torch.tensor(bounds, dtype=torch.int32),
        "max_seqlen": max(lengths),
        "offsets": torch.tensor(bounds, dtype=torch.long),
        "bounds": tuple(bounds),
    }


def packed_language_model(
    language_model: nn.Module, inputs_embeds: torch.Tensor, position_ids: torch.Tensor, cu_seqlens: torch.Tensor,
    max_seqlen: int, bounds: Sequence[int] | None = None,
) -> torch.Tensor:
    """Last hidden states [T, H] of a packed row: inputs_embeds [1, T, H], position_ids [3, 1, T]
    (or [1, T]), cu_seqlens [B+1] ending at T (bounds: the same as host ints, else read once).
    Switches the model to ATTENTION_NAME on first use (see the module docstring)."""
    if inputs_embeds.ndim != 3 or inputs_embeds.shape[0] != 1:
        raise ValueError(f"inputs_embeds must be [1, T, H] (one packed row), got {tuple(inputs_embeds.shape)}")
    total = inputs_embeds.shape[1]
    edges = tuple(int(x) for x in (bounds if bounds is not None else cu_seqlens.tolist()))  # one host copy
    steps_ok = all(b >= a for a, b in pairwise(edges))
    if cu_seqlens.ndim != 1 or len(edges) < 2 or edges[0] != 0 or edges[-1] != total or not steps_ok:
        raise ValueError(f"cu_seqlens must rise from 0 to T = {total}, got {list(edges)}")
    if position_ids.shape[-1] != total:
        raise ValueError(f"position_ids has {position_ids.shape[-1]} positions for T = {total} tokens")
    use_packed_attention(language_model)
    cu = cu_seqlens.to(device=inputs_embeds.device, dtype=torch.int32)
    out = language_model(
        inputs_embeds=inputs_embeds, attention_mask=None, position_ids=position_ids.to(inputs_embeds.device),
        use_cache=False, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=int(max_seqlen),
        max_length_k=int(max_seqlen), sdscore_seq_bounds=edges,
    )
    return out.last_hidden_state[0]


def packed_pooled(pooler: nn.Module, states: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """float32 [B, H]: heads.Pooler's pooling of packed states [T, H] (rows by offsets int64 [B+1]),
    with the same kernel choice (torch reference while training, pooler.impl otherwise)."""
    offsets = offsets.to(states.device)
    grad = torch.is_grad_enabled() and (states.requires_grad or any(p.requires_grad for p in pooler.parameters()))
    impl = "torch" if grad else pooler.impl
    if pooler.kind == "mean":
        return kernels.masked_mean(states, offsets=offsets, impl=impl).float()
    if pooler.kind == "last":
        return kernels.last_token(states, offsets=offsets, impl=impl).float()
    return kernels.attention_pool(states, weight=pooler.attn.weight[0], offsets=offsets, impl=impl).float()
