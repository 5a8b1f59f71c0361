"""Which implementation runs an op: the Triton kernel or the torch reference.

`impl="auto"` runs Triton for CUDA tensors when triton imports, the torch reference otherwise
(CPU tensors, no triton, or an input the kernel does not cover). `impl="torch"` always runs the
reference. `impl="triton"` insists on the kernel: CUDA tensors, or CPU tensors when the caller has
set ``TRITON_INTERPRET=1`` before triton was first imported (how the tests run the kernels).
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

IMPLS = ("auto", "triton", "torch")
TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@functools.cache
def triton_available() -> bool:
    """True when the `triton` package can be imported (looked up once per process)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True when Triton kernels run in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(impl: str, x: torch.Tensor, unsupported: str | None = None) -> bool:
    """Decide for an op on tensor `x`; `unsupported` names why the kernel cannot take this input.

    Raises ValueError for an unknown `impl`, or when `impl="triton"` cannot be honoured
    (no triton, a CPU tensor without the interpreter, or an unsupported input); the message says why.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "torch":
        return False
    if unsupported is None and x.dtype not in TRITON_DTYPES:
        unsupported = f"the Triton kernels take float32, float16 or bfloat16, got {x.dtype}"
    if impl == "auto":
        return x.is_cuda and unsupported is None and triton_available()
    if unsupported is not None:
        raise ValueError(f"impl='triton' cannot run this input: {unsupported}")
    if not triton_available():
        raise ValueError("impl='triton' needs the triton package: pip install triton")
    if not (x.is_cuda or (x.device.type == "cpu" and interpreting())):
        raise ValueError(
            f"impl='triton' needs CUDA tensors, or TRITON_INTERPRET=1 for CPU ones; got a {x.device} tensor"
        )
    return True
