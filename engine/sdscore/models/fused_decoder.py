"""Fused inference forward for Hugging Face Qwen2-family decoder layers (Qwen2.5-Omni's thinker).

`fuse_decoder(language_model)` switches every decoder layer of a transformers text model (its
`.layers`, plus the final `.norm`) to forwards that do the same arithmetic in fewer passes:

- q/k/v projections as ONE GEMM over the concatenated weights and biases, gate/up as ONE GEMM;
- rotary embedding applied in place to the q and k heads of that GEMM's output
  (`sdscore.kernels.rotary_`: one pass instead of HF's two products, a rotate_half cat and a sum);
- SiLU·mul of the gate/up output in one op (`kernels.silu_mul`), RMSNorm in one op
  (`kernels.rms_norm`, float32 statistics).

On CUDA the ops run Triton kernels, elsewhere their torch references, which are HF's ops exactly
(the tests check the fused layer against the unfused one). The checkpoint layout does not change:
the fusion happens at load time, in memory. Each projection's weight (and bias) becomes a view
into its fused tensor, so no weight is held twice and `state_dict()` keeps HF's keys and values.
A conversion (`.to(device, dtype)`, deepcopy) re-lays the projections as separate tensors; the
next forward fuses them again (a per-layer check of the views' data pointers).

The switch is a change of each module's class to a subclass whose forward is the fused one; the
module keeps its parameters, attributes and isinstance checks. The fused forward steps aside for
the original in training, under autograd (a weight or input that requires grad), under autocast
(weights in another dtype than the activations), while tracing or exporting (ONNX), for an
activation other than SiLU, and when a layer lacks what it needs: those calls run HF's forward.
`unfuse_decoder` restores the original classes (the weights stay views; values are unchanged), so
benches can switch back and forth on one model.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from sdscore import kernels

_SWAPPED: dict[tuple[type, type], type] = {}


def _inference_call(module: nn.Module, x: torch.Tensor, *weights: torch.Tensor) -> bool:
    """True when a fused forward may run: eval, no autograd, no autocast, no trace, weights in x's dtype."""
    if module.training or torch.jit.is_tracing() or torch.is_autocast_enabled(x.device.type):
        return False
    if torch.onnx.is_in_onnx_export():
        return False
    if torch.is_grad_enabled() and (x.requires_grad or any(w.requires_grad for w in weights)):
        return False
    return all(w.dtype == x.dtype and w.device == x.device for w in weights)


def _views_of(fused: torch.Tensor | None, parts: list[torch.Tensor | None]) -> bool:
    """True when `parts` are consecutive row blocks of `fused` (same storage, same dtype)."""
    if fused is None or any(p is None for p in parts) or any(p.dtype != fused.dtype for p in parts):
        return False
    offset = 0
    for p in parts:
        if p.data_ptr() != fused[offset:].data_ptr() or not p.is_contiguous():
            return False
        offset += p.shape[0]
    return offset == fused.shape[0]


def _fuse_linears(linears: list[nn.Linear], name: str, owner: nn.Module) -> None:
    """Concatenate the linears' weights (and biases) into owner.<name> (weight, bias) and make each
    linear's parameters views of them; a no-op when they already are."""
    current = owner.__dict__.get(name)
    weights = [m.weight for m in linears]
    biases = [m.bias for m in linears]
    has_bias = all(b is not None for b in biases)
    if current is not None and _views_of(current[0], weights) and (not has_bias or _views_of(current[1], biases)):
        return
    with torch.inference_mode(False), torch.no_grad():  # parameters must stay normal (non-inference) tensors
        weight = torch.cat([w.detach() for w in weights])
        bias = torch.cat([b.detach() for b in biases]) if has_bias else None
        start = 0
        for m in linears:
            rows = m.weight.shape[0]
            m.weight = nn.Parameter(weight[start:start + rows], requires_grad=m.weight.requires_grad)
            if has_bias:
                m.bias = nn.Parameter(bias[start:start + rows], requires_grad=m.bias.requires_grad)
            start += rows
    owner.__dict__[name] = (weight, bias)


class _FusedWeightsMixin:
    """Drops the fused tensors when the module's parameters are converted (.to, .half, ...)."""

    _fused_names: tuple[str, ...] = ()

    def _apply(self, fn, *args: Any, **kwargs: Any):
        out = super()._apply(fn, *args, **kwargs)
        for name in self._fused_names:
            self.__dict__.pop(name, None)
        return out


class FusedAttention(_FusedWeightsMixin):
    """Qwen2 / Qwen2.5-Omni attention: one q/k/v GEMM, rotary in place, then the model's attention function."""

    _fused_names = ("_sdscore_qkv",)

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any):
        embeddings = kwargs.get("position_embeddings")
        if args or embeddings is None or not _inference_call(self, hidden_states, self.q_proj.weight,
                                                             self.k_proj.weight, self.v_proj.weight):
            return super().forward(hidden_states, *args, **kwargs)
        _fuse_linears([self.q_proj, self.k_proj, self.v_proj], "_sdscore_qkv", self)
        weight, bias = self.__dict__["_sdscore_qkv"]
        kwargs = dict(kwargs)
        kwargs.pop("position_embeddings")
        mask = kwargs.pop("attention_mask", None)
        cache = kwargs.pop("cache", None)
        cache = kwargs.pop("past_key_values", None) if cache is None else cache
        batch, length, _ = hidden_states.shape
        heads_q = self.config.num_attention_heads
        heads_kv = self.config.num_key_value_heads
        qkv = F.linear(hidden_states, weight, bias).view(batch, length, heads_q + 2 * heads_kv, self.head_dim)
        q, k, v = qkv[:, :, :heads_q], qkv[:, :, heads_q:heads_q + heads_kv], qkv[:, :, heads_q + heads_kv:]
        cos, sin = embeddings
        kernels.rotary_(q, cos, sin)
        kernels.rotary_(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, T, d], as HF's attention functions take
        if cache is not None:  # the cache keeps its own compact copy, not a view of the whole qkv buffer
            k, v = cache.update(k.contiguous(), v.contiguous(), self.layer_idx)
        out, weights = _attention_function(self)(
            self, q, k, v, mask, dropout=0.0, scaling=self.scaling, sliding_window=getattr(self, "sliding_window", None),
            **kwargs,
        )
        return self.o_proj(out.reshape(batch, length, -1)), weights


def _attention_function(module: nn.Module):
    """The attention function the module's config names (transformers' registry; eager from its modeling file)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    name = module.config._attn_implementation
    if name in (None, "eager"):
        for base in type(module).__mro__:
            eager = getattr(inspect.getmodule(base), "eager_attention_forward", None)
            if eager is not None:
                return eager
    return ALL_ATTENTION_FUNCTIONS[name]


class FusedMLP(_FusedWeightsMixin):
    """Qwen2 MLP: one gate/up GEMM, SiLU·mul in one op, the down projection."""

    _fused_names = ("_sdscore_gate_up",)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        silu = isinstance(self.act_fn, nn.SiLU) or type(self.act_fn).__name__ == "SiLUActivation"
        if not silu or not _inference_call(self, x, self.gate_proj.weight, self.up_proj.weight):
            return super().forward(x)
        _fuse_linears([self.gate_proj, self.up_proj], "_sdscore_gate_up", self)
        weight, bias = self.__dict__["_sdscore_gate_up"]
        return self.down_proj(kernels.silu_mul(F.linear(x, weight, bias)))


class FusedRMSNorm:
    """Qwen2 RMSNorm in one op (float32 statistics, HF's rounding)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _inference_call(self, x, self.weight):
            return super().forward(x)
        return kernels.rms_norm(x, self.weight, self.variance_epsilon)


def _swap(module: nn.Module, mixin: type) -> None:
    base = type(module)
    if issubclass(base, mixin):
        return
    key = (base, mixin)
    if key not in _SWAPPED:
        _SWAPPED[key] = type(f"Fused{base.__name__}", (mixin, base), {"__module__": __name__, "_sdscore_base": base})
    module.__class__ = _SWAPPED[key]


def _is_attention(m: nn.Module) -> bool:
    return all(hasattr(m, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling", "layer_idx"))


def _is_mlp(m: nn.Module) -> bool:
    return all(isinstance(getattr(m, a, None), nn.Linear) for a in ("gate_proj", "up_proj", "down_proj"))


def _is_rms_norm(m: nn.Module) -> bool:
    return type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon") and getattr(m, "weight", None) is not None


def fuse_decoder(language_model: nn.Module) -> int:
    """Switch a transformers decoder's layers to the fused forwards (see the module docstring);
    returns how many modules were switched (0 when the model has no Qwen2-style `.layers`).
    Idempotent; weights are fused lazily, at the first inference call."""
    switched = 0
    for layer in getattr(language_model, "layers", []):
        for name, test, mixin in (("self_attn", _is_attention, FusedAttention), ("mlp", _is_mlp, FusedMLP),
                                  ("input_layernorm", _is_rms_norm, FusedRMSNorm),
                                  ("post_attention_layernorm", _is_rms_norm, FusedRMSNorm)):
            module = getattr(layer, name, None)
            if module is not None and test(module):
                _swap(module, mixin)
                switched += 1
    norm = getattr(language_model, "norm", None)
    if switched and norm is not None and _is_rms_norm(norm):
        _swap(norm, FusedRMSNorm)
        switched += 1
    return switched


def unfuse_decoder(language_model: nn.Module) -> None:
    """Restore the original (Hugging Face) forwards of every module fuse_decoder switched."""
    for module in language_model.modules():
        base = type(module).__dict__.get("_sdscore_base") or getattr(type(module), "_sdscore_base", None)
        if base is not None:  # the fused tensors stay (the weights are views of them): fusing again is free
            module.__class__ = base


def decoder_is_fused(language_model: nn.Module) -> bool:
    """True when fuse_decoder has switched this model's layers."""
    return any(getattr(type(m), "_sdscore_base", None) is not None for m in language_model.modules())
