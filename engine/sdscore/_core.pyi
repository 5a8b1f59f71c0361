# Typed stub of the compiled core `sdscore._core` (csrc/: audio/, mel/, ops/, rnn/ bindings.cpp and
# module.cpp). Each function's docstring is the binding's own: help(sdscore._core.NAME).
# tests/test_core_stub.py checks that this stub and the built module name the same functions
# with the same parameters and defaults.
import os
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray
from typing_extensions import Buffer

# A path as os.fsencode takes it; messages give it back unchanged (surrogateescape).
_Path: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]
# float32 mono samples and their sample rate in Hz.
_Decoded: TypeAlias = tuple[NDArray[np.float32], int]

__version__: str

# audio: WAV decoding, resampling, batch loading (csrc/audio/)

def decode_wav(data: Buffer, name: _Path = "<bytes>", max_seconds: float = 0.0) -> _Decoded: ...
def read_wav(path: _Path, max_seconds: float = 0.0) -> _Decoded: ...
def resample(x: ArrayLike, sr_in: int, sr_out: int) -> NDArray[np.float32]: ...
def load_many(
    paths: Sequence[_Path], sample_rate: int, num_threads: int = 0, max_seconds: float = 0.0
) -> tuple[NDArray[np.float32], NDArray[np.int64], list[str | None], list[bool]]: ...
def simd_isa() -> str: ...

# mel: the compact model's log-mel front end (csrc/mel/)

def stft_frames(
    waves: Sequence[ArrayLike], n_fft: int, hop: int, window: ArrayLike, num_threads: int = 1
) -> NDArray[np.float32]: ...
def log_mel_tokens(
    spec: ArrayLike,
    frames: ArrayLike,
    filters: ArrayLike,
    top_db: float,
    frames_per_token: int,
    num_threads: int = 1,
) -> NDArray[np.float32]: ...
def log_mel_from_waves(
    waves: Sequence[ArrayLike],
    n_fft: int,
    hop: int,
    window: ArrayLike,
    filters: ArrayLike,
    top_db: float,
    frames_per_token: int,
    num_threads: int = 1,
) -> NDArray[np.float32]: ...
def fused_log_mel_supported(n_fft: int) -> bool: ...

# ops: CPU span attention and GELU (csrc/ops/)

def span_attention(
    qkv: NDArray[np.float32],
    starts: ArrayLike,
    lengths: ArrayLike,
    scale: float,
    num_threads: int = 1,
) -> NDArray[np.float32]: ...
def span_attention_isa(head_size: int) -> str: ...
def gelu_(
    x: NDArray[np.float32], bias: NDArray[np.float32] | None = None, num_threads: int = 1
) -> None: ...
def gelu_isa() -> str: ...

# rnn: the GE2E speaker encoder's LSTM (csrc/rnn/)

def lstm_final_hidden(
    x: ArrayLike,
    layers: Sequence[tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike]],
    lengths: ArrayLike | None = None,
) -> NDArray[np.float32]: ...
def lstm_isa(hidden: int) -> str: ...
