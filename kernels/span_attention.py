"""Softmax attention within each row's span of a padded batch, for small heads on the CPU.

`span_attention(qkv, starts, lengths)` takes a fused projection `qkv [B, L, 3, H, D]` (q, k, v of
every position, as a Linear(d, 3d) output viewed) and lets row b's positions
[starts[b], starts[b] + lengths[b]) attend to each other only (bidirectional, scale 1/sqrt(D)).
It returns `[B, L, H, D]`, zeros outside the spans; a zero-length span gives no output rows.

`impl="auto"` runs the compiled core (`sdscore._core.span_attention`: an AVX-512 kernel for head
sizes 16/32/64 where the CPU has it, AVX2 for 8/16/32/64, portable loops otherwise; fp32; threads
over (row, head)) for CPU float32
tensors that need no gradient, and the torch reference (one SDPA per row) otherwise;
`impl="core"` insists on the compiled kernel, `impl="torch"` always runs the reference. At head
size 16 the core kernel is ~2x torch's CPU flash attention on the same padded batch
(bench/kernels.py) and never computes on padding.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

IMPLS = ("auto", "core", "torch")


def _check(qkv: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor) -> None:
    if not isinstance(qkv, torch.Tensor) or qkv.ndim != 5 or qkv.shape[2] != 3:
        shape = tuple(qkv.shape) if isinstance(qkv, torch.Tensor) else type(qkv).__name__
        raise ValueError(f"qkv must be a tensor [B, L, 3, H, D], got {shape}")
    if not qkv.is_floating_point():
        raise ValueError(f"qkv must be a floating tensor, got {qkv.dtype}")
    b, n = qkv.shape[:2]
    for name, t in (("starts", starts), ("lengths", lengths)):
        if not isinstance(t, torch.Tensor) or t.ndim != 1 or t.shape[0] != b or t.is_floating_point():
            raise ValueError(f"{name} must be an integer tensor [B={b}], got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    bad = (starts < 0) | (lengths < 0) | (starts + lengths > n)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"row {row} spans [{int(starts[row])}, {int(starts[row] + lengths[row])}), "
                         f"outside its {n} positions")


def span_attention_reference(qkv: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The torch reference: one scaled_dot_product_attention per row over its span."""
    _check(qkv, starts, lengths)
    b, _, _, h, d = qkv.shape
    out = qkv.new_zeros((b, qkv.shape[1], h, d))
    for row, (a, n) in enumerate(zip(starts.tolist(), lengths.tolist())):
        if n:
            q, k, v = qkv[row, a : a + n].permute(1, 2, 0, 3)  # each [H, n, D]
            out[row, a : a + n] = F.scaled_dot_product_attention(q, k, v).transpose(0, 1)
    return out


def core_supports(qkv: torch.Tensor) -> bool:
    """True when impl="auto" would run the compiled kernel on this input."""
    return qkv.device.type == "cpu" and qkv.dtype == torch.float32 and not (torch.is_grad_enabled() and qkv.requires_grad)


def span_attention(
    qkv: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, impl: str = "auto",
    num_threads: int | None = None,
) -> torch.Tensor:
    """[B, L, H, D] attention of each row's span; see the module docstring. num_threads defaults
    to torch.get_num_threads()."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "torch" or (impl == "auto" and not core_supports(qkv)):
        return span_attention_reference(qkv, starts, lengths)
    if not core_supports(qkv):
        raise ValueError(f"impl='core' needs a CPU float32 tensor without gradient, got {qkv.dtype} on {qkv.device}"
                         f"{' requiring grad' if qkv.requires_grad else ''}")
    from sdscore._native import core  # the compiled core; imported here so the Triton ops need no build

    _check(qkv, starts, lengths)
    out = core.span_attention(
        qkv.detach().contiguous().numpy(), starts.to(torch.int64).cpu().numpy(), lengths.to(torch.int64).cpu().numpy(),
        qkv.shape[-1] ** -0.5, num_threads or torch.get_num_threads(),
    )
    return torch.from_numpy(out)
