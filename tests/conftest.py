"""Session set-up shared by the tests.

Without CUDA, Triton kernels run in Triton's CPU interpreter, which TRITON_INTERPRET=1 selects;
it must be set before triton is first imported, so it is set here, before any test module loads.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """The tiny synthetic corpus (seed 3): every protocol's manifest with real TTS audio; built once."""
    from sdscore.synth import build_corpus

    out = tmp_path_factory.mktemp("tiny-corpus") / "corpus"
    build_corpus(out, seed=3, size="tiny")
    return out
