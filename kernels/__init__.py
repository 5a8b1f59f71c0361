"""Pooling, similarity and attention kernels of sdscore, installed as `sdscore.kernels`.

Each op validates its arguments, then runs a Triton kernel (CUDA tensors) or its torch reference
(CPU, and the ONNX-export path); `impl="auto" | "triton" | "torch"` overrides the choice.
The decoder-layer ops (`rms_norm`, `silu_mul`, `rotary_`) follow the same scheme.
`span_attention` and `gelu_` are the exceptions: CPU kernels of the compiled core beside their
torch references.
"""

from .activations import gelu_
from .decoder import rms_norm, rotary_, silu_mul
from .decoder_reference import rms_norm_reference, rotary_reference, silu_mul_reference
from .pooling import attention_pool, last_token, masked_mean
from .pooling_reference import (
    attention_pool_packed_reference,
    attention_pool_reference,
    last_token_packed_reference,
    last_token_reference,
    masked_mean_packed_reference,
    masked_mean_reference,
)
from .similarity import group_cosine, score_candidates
from .span_attention import span_attention, span_attention_reference
from .similarity_reference import group_cosine_reference, score_candidates_reference

__all__ = [
    "gelu_",
    "attention_pool",
    "attention_pool_packed_reference",
    "attention_pool_reference",
    "group_cosine",
    "group_cosine_reference",
    "last_token",
    "rms_norm",
    "rms_norm_reference",
    "rotary_",
    "rotary_reference",
    "last_token_packed_reference",
    "last_token_reference",
    "masked_mean",
    "masked_mean_packed_reference",
    "masked_mean_reference",
    "score_candidates",
    "score_candidates_reference",
    "silu_mul",
    "silu_mul_reference",
    "span_attention",
    "span_attention_reference",
]
