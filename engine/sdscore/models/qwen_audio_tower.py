"""Qwen2.5-Omni's audio tower with one attention call per layer and its bookkeeping planned on the host.

transformers' `Qwen2_5OmniAudioEncoder.forward` splits every clip's log-mel into chunks of
2 * n_window frames, runs conv1/conv2 and the sinusoid positions per chunk, and lets each token
attend only within its chunk. Under sdpa/eager its attention layer splits q/k/v with
`lengths.tolist()` and loops over the chunks: one call per 100-token chunk per layer and a host
sync per layer. Here the same modules run in the same order, but:

- `AudioTowerPlan.build` computes every index (chunk lengths, valid positions after the convs,
  cu_seqlens, pooling pairs, key mask) on the host from the clips' frame counts, before the
  forward; `.to(device)` moves it in one go (non_blocking; pinned when `pin_memory()` was called).
- `run_audio_tower` makes ONE attention call per layer over all chunks and reads nothing back
  to the host inside the layer loop.

Attention backend, chosen once per call (`attention_backend`), first that applies:
1. "flash_attn": `flash_attn.flash_attn_varlen_func` on packed [T, heads, head_dim], when the
   package imports, the tower is on CUDA in fp16/bf16 and head_dim <= 256;
2. "varlen": `torch.nn.attention.varlen.varlen_attn` (torch's flash kernel, same packed layout),
   on CUDA in fp16/bf16, compute capability >= 8.0, head_dim a multiple of 8 and <= 256;
3. "sdpa_padded": one `scaled_dot_product_attention` over [chunks, heads, max_len, head_dim]
   with a boolean key-padding mask (any device and dtype; padded query rows are dropped).

Equal to `tower(input_features, feature_lens=..., aftercnn_lens=...).last_hidden_state` within
float rounding (tests: fp32 <= 1e-5 abs, bf16 within the bound stated there). Inference only
(no dropout, no gradient checkpointing).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch
from torch import nn

BACKENDS = ("flash_attn", "varlen", "sdpa_padded")
_HALF = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class AudioTowerPlan:
    """Index bookkeeping of one batch of clips for `run_audio_tower` (tensors int64 unless noted).

    A chunk is a 2 * n_window-frame piece of a clip (a clip's last chunk may be shorter); after the
    stride-2 conv2 a chunk of c frames has (c - 1) // 2 + 1 tokens. "Packed" is the [T, D] layout
    of all chunks' tokens back to back (the tower's own); "padded" is [num_chunks, max_seqlen, D].
    """

    frame_counts: torch.Tensor  # [N] log-mel frames per clip
    chunk_starts: torch.Tensor  # [C] first frame of each chunk in the clips' concatenated features
    chunk_lengths: torch.Tensor  # [C] frames per chunk
    feature_mask: torch.Tensor  # [C, 1, max_chunk] 1 on a chunk's frames, 0 on padding (conv1 output mask)
    valid_indices: torch.Tensor  # [T] flat positions of the packed tokens in the padded [C * max_seqlen] grid
    key_mask: torch.Tensor  # bool [C, max_seqlen]: True on a chunk's tokens
    cu_seqlens: torch.Tensor  # int32 [C + 1] token offsets of the chunks in the packed layout
    pool_indices: torch.Tensor  # [P] first token of each stride-2 average-pooling pair
    token_counts: tuple[int, ...]  # output tokens per clip (sum = P)
    max_chunk: int  # longest chunk in frames
    max_seqlen: int  # longest chunk in tokens after conv2

    @classmethod
    def build(cls, frame_counts: Sequence[int], n_window: int) -> AudioTowerPlan:
        """The plan for clips of `frame_counts` log-mel frames and the tower's `n_window`, on the CPU."""
        counts = np.asarray(list(frame_counts), dtype=np.int64).reshape(-1)
        if int(n_window) < 1:
            raise ValueError(f"n_window must be >= 1, got {n_window}")
        bad = np.flatnonzero(counts < 1)
        if len(bad):
            raise ValueError(f"audio clip {int(bad[0])} has {int(counts[bad[0]])} log-mel frames (needs >= 1)")
        window = 2 * int(n_window)
        chunks_per_clip = -(-counts // window)
        n_chunks = int(chunks_per_clip.sum())
        lengths = np.full(n_chunks, window, dtype=np.int64)
        last = np.cumsum(chunks_per_clip) - 1
        tails = counts - (chunks_per_clip - 1) * window
        lengths[last] = tails
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n_chunks else np.zeros(0, dtype=np.int64)
        seqlens = (lengths - 1) // 2 + 1
        max_chunk = int(lengths.max()) if n_chunks else 0
        max_seqlen = int(seqlens.max()) if n_chunks else 0
        feature_mask = np.arange(max_chunk)[None, :] < lengths[:, None]
        key_mask = np.arange(max_seqlen)[None, :] < seqlens[:, None]
        valid = np.flatnonzero(key_mask.reshape(-1))
        cu = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
        # pooling as get_pool_indices: pairs within each clip's tokens (its chunks back to back)
        after_cnn = (counts - 1) // 2 + 1
        pooled = np.maximum((after_cnn - 2) // 2 + 1, 0)
        clip_offsets = np.concatenate([[0], np.cumsum(after_cnn)[:-1]]) if len(counts) else np.zeros(0, np.int64)
        local = np.arange(int(pooled.sum())) - np.repeat(np.cumsum(pooled) - pooled, pooled)
        pool = np.repeat(clip_offsets, pooled) + 2 * local
        return cls(
            frame_counts=torch.from_numpy(counts),
            chunk_starts=torch.from_numpy(starts.astype(np.int64)),
            chunk_lengths=torch.from_numpy(lengths),
            feature_mask=torch.from_numpy(feature_mask[:, None, :].astype(np.int64)),
            valid_indices=torch.from_numpy(valid.astype(np.int64)),
            key_mask=torch.from_numpy(key_mask),
            cu_seqlens=torch.from_numpy(cu),
            pool_indices=torch.from_numpy(pool.astype(np.int64)),
            token_counts=tuple(int(n) for n in pooled),
            max_chunk=max_chunk,
            max_seqlen=max_seqlen,
        )

    @property
    def num_chunks(self) -> int:
        return int(self.chunk_lengths.shape[0])

    @property
    def num_tokens(self) -> int:
        """Packed tokens between conv2 and pooling."""
        return int(self.valid_indices.shape[0])

    @property
    def device(self) -> torch.device:
        return self.valid_indices.device

    def _tensors(self) -> list[str]:
        return [f.name for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)]

    def to(self, device: torch.device | str, non_blocking: bool = True) -> AudioTowerPlan:
        """A copy with every tensor on `device` (asynchronous from pinned memory)."""
        return replace(self, **{n: getattr(self, n).to(device, non_blocking=non_blocking) for n in self._tensors()})

    def pin_memory(self) -> AudioTowerPlan:
        """A copy with the tensors in page-locked host memory, so `.to("cuda")` does not block."""
        return replace(self, **{n: getattr(self, n).pin_memory() for n in self._tensors()})


def chunk_features(features: torch.Tensor, plan: AudioTowerPlan) -> torch.Tensor:
    """[num_chunks, n_mels, max_chunk]: the clips' concatenated [n_mels, T] log-mel cut into the
    plan's chunks and zero-padded on the right (transformers' chunk_and_pad_features)."""
    if features.dim() != 2:
        raise ValueError(f"features must be [n_mels, frames], got shape {tuple(features.shape)}")
    total = int(plan.frame_counts.sum())
    if features.shape[1] != total:
        raise ValueError(f"features have {features.shape[1]} frames, the plan's clips {total}")
    offsets = torch.arange(plan.max_chunk, device=plan.chunk_starts.device)
    index = plan.chunk_starts[:, None] + offsets[None, :]
    index = torch.where(offsets[None, :] < plan.chunk_lengths[:, None], index, total)  # padding -> zero column
    padded = torch.cat([features, features.new_zeros(features.shape[0], 1)], dim=1)
    return padded[:, index.to(features.device)].permute(1, 0, 2).contiguous()


@functools.cache
def _flash_attn_varlen() -> Any:
    try:
        from flash_attn import flash_attn_varlen_func
    except (ImportError, OSError):
        return None
    return flash_attn_varlen_func


@functools.cache
def _torch_varlen() -> Any:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def attention_backend(device: torch.device, dtype: torch.dtype, head_dim: int) -> str:
    """The first of BACKENDS that runs for this device, dtype and head size (see the module doc)."""
    if device.type == "cuda" and dtype in _HALF and head_dim <= 256:
        if _flash_attn_varlen() is not None:
            return "flash_attn"
        if _torch_varlen() is not None and head_dim % 8 == 0 and torch.cuda.get_device_capability(device) >= (8, 0):
            return "varlen"
    return "sdpa_padded"


def _attend(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AudioTowerPlan,
            scale: float) -> torch.Tensor:
    """Bidirectional attention within each chunk: packed q, k, v [T, heads, head_dim] -> same shape."""
    if backend == "flash_attn":
        return _flash_attn_varlen()(
            q, k, v, plan.cu_seqlens, plan.cu_seqlens, plan.max_seqlen, plan.max_seqlen,
            dropout_p=0.0, softmax_scale=scale, causal=False,
        )
    if backend == "varlen":
        return _torch_varlen()(q, k, v, plan.cu_seqlens, plan.cu_seqlens, plan.max_seqlen, plan.max_seqlen, scale=scale)
    heads, dim = q.shape[1:]
    grid = q.new_zeros(plan.num_chunks * plan.max_seqlen, 3, heads, dim)
    grid.index_copy_(0, plan.valid_indices, torch.stack([q, k, v], dim=1))
    grid = grid.view(plan.num_chunks, plan.max_seqlen, 3, heads, dim).permute(2, 0, 3, 1, 4)
    out = torch.nn.functional.scaled_dot_product_attention(
        grid[0], grid[1], grid[2], attn_mask=plan.key_mask[:, None, None, :], dropout_p=0.0, scale=scale
    )
    out = out.transpose(1, 2).reshape(plan.num_chunks * plan.max_seqlen, heads, dim)
    return out.index_select(0, plan.valid_indices)


def _encoder_layer(layer: nn.Module, hidden: torch.Tensor, plan: AudioTowerPlan, backend: str) -> torch.Tensor:
    """Qwen2_5OmniAudioEncoderLayer.forward with its attention as one call over all chunks."""
    attn = layer.self_attn
    tokens = hidden.shape[0]
    heads, dim = attn.num_heads, attn.head_dim
    residual = hidden
    hidden = layer.self_attn_layer_norm(hidden)
    q = attn.q_proj(hidden).reshape(tokens, heads, dim)
    k = attn.k_proj(hidden).reshape(tokens, heads, dim)
    v = attn.v_proj(hidden).reshape(tokens, heads, dim)
    hidden = attn.out_proj(_attend(backend, q, k, v, plan, attn.scaling).reshape(tokens, -1))
    hidden = residual + hidden
    residual = hidden
    hidden = layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(hidden))))
    hidden = residual + hidden
    if hidden.dtype == torch.float16:
        limit = torch.finfo(hidden.dtype).max - 1000
        hidden = torch.clamp(hidden, min=-limit, max=limit)
    return hidden


def run_audio_tower(tower: nn.Module, chunks: torch.Tensor, plan: AudioTowerPlan,
                    backend: str | None = None) -> torch.Tensor:
    """[sum(plan.token_counts), output_dim]: the tower's output for `chunks` (from chunk_features).

    tower: transformers' Qwen2_5OmniAudioEncoder (inference). backend: one of BACKENDS to force
    (tests), default `attention_backend`'s choice. The plan is moved to the tower's device first
    if it is elsewhere; nothing is read back to the host afterwards.
    """
    weight = tower.conv1.weight
    device, dtype = weight.device, weight.dtype
    out_dim = tower.proj.out_features
    if chunks.dim() != 3 or chunks.shape[0] != plan.num_chunks or chunks.shape[2] != plan.max_chunk:
        raise ValueError(
            f"chunks must be [{plan.num_chunks}, n_mels, {plan.max_chunk}] for this plan, got {tuple(chunks.shape)}"
        )
    if plan.num_chunks == 0:
        return torch.zeros(0, out_dim, device=device, dtype=dtype)
    first = tower.layers[0].self_attn if len(tower.layers) else None
    choice = backend or attention_backend(device, dtype, first.head_dim if first is not None else 0)
    if choice not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if plan.device != device:
        plan = plan.to(device)
    chunks = chunks.to(device=device, dtype=dtype, non_blocking=True)
    mask = plan.feature_mask
    embed = nn.functional.gelu(tower.conv1(chunks)) * mask
    embed = nn.functional.gelu(tower.conv2(embed)).transpose(1, 2)
    embed = embed + tower.positional_embedding.positional_embedding[: embed.shape[1], :].unsqueeze(0).to(embed.dtype)
    hidden = torch.index_select(embed.reshape(-1, embed.shape[-1]), 0, plan.valid_indices)
    for layer in tower.layers:
        hidden = _encoder_layer(layer, hidden, plan, choice)
    hidden = (hidden[plan.pool_indices] + hidden[plan.pool_indices + 1]) / 2
    return tower.proj(tower.ln_post(hidden))
