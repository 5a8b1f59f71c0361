"""Session set-up shared by the tests.

Without CUDA, Triton kernels run in Triton's CPU interpreter, which TRITON_INTERPRET=1 selects;
it must be set before triton is first imported, so it is set here, before any test module loads.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
