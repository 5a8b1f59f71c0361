"""The compiled core's LSTM (sdscore._core.lstm_final_hidden) against torch.nn.LSTM.

Parity on ragged batches (one-frame rows included) with resemblyzer's GE2E weights and with tiny
random LSTMs whose hidden sizes pick each of the three kernels (AVX-512, AVX2, portable); a row's
result is the same bits alone as in any batch; empty input gives a defined result or a clear error.
"""

import numpy as np
import pytest
import torch

from sdscore import _core
from sdscore.features.speaker import ge2e

# An LSTM's final state carries the rounding of every step before it: over 160 frames fp32
# arithmetic (torch's own included) lands up to ~2e-5 from the float64 result, so parity is
# checked with this bound (the states are in [-1, 1]) against torch.nn.LSTM and against float64,
# torch's own fp32 result held to the same bound; one-frame rows meet torch.testing's float32
# tolerances.
FP32_RECURRENT = {"rtol": 0, "atol": 5e-5}
FP32 = {"rtol": 1.3e-6, "atol": 1e-5}


@pytest.fixture(autouse=True)
def one_thread():
    """References on one thread: BLAS's thread team crawls on a loaded 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # numpy's BLAS keeps its own threads
        yield
    else:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(threads)


def layers_of(lstm: torch.nn.LSTM) -> list[tuple[np.ndarray, ...]]:
    return [
        tuple(getattr(lstm, f"{name}_l{layer}").detach().numpy() for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
        for layer in range(lstm.num_layers)
    ]


def random_lstm(features: int, hidden: int, num_layers: int, seed: int) -> torch.nn.LSTM:
    torch.manual_seed(seed)
    return torch.nn.LSTM(features, hidden, num_layers, batch_first=True).eval()


def torch_final_hidden(lstm: torch.nn.LSTM, x: np.ndarray, lengths: list[int]) -> np.ndarray:
    """h_n [layers, B, H] of torch.nn.LSTM run on each row alone over its own frames."""
    with torch.no_grad():
        return np.stack([lstm(torch.from_numpy(x[b : b + 1, :n]))[1][0][:, 0].numpy() for b, n in enumerate(lengths)], 1)


def float64_final_hidden(lstm: torch.nn.LSTM, x: np.ndarray, lengths: list[int]) -> np.ndarray:
    """h_n [layers, B, H] in float64 from torch.nn.LSTM's equations (numpy; rows past their length
    keep their state)."""
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    seq, out = x.astype(np.float64), []
    for w_ih, w_hh, b_ih, b_hh in layers_of(lstm):
        w_ih, w_hh, bias = w_ih.astype(np.float64), w_hh.astype(np.float64), b_ih.astype(np.float64) + b_hh
        h = c = np.zeros((len(x), w_hh.shape[1]))
        ys = []
        for t in range(seq.shape[1]):
            i, f, g, o = np.split(seq[:, t] @ w_ih.T + h @ w_hh.T + bias, 4, axis=1)
            c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h_new = sigmoid(o) * np.tanh(c_new)
            live = (t < np.asarray(lengths))[:, None]
            h, c = np.where(live, h_new, h), np.where(live, c_new, c)
            ys.append(h)
        out.append(h)
        seq = np.stack(ys, 1)
    return np.stack(out)


def check_ragged(lstm: torch.nn.LSTM, lengths: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(len(lengths), max(lengths), lstm.input_size)).astype(np.float32)
    lens = np.array(lengths, dtype=np.int64)
    ours = _core.lstm_final_hidden(x, layers_of(lstm), lens)
    assert ours.shape == (lstm.num_layers, len(lengths), lstm.hidden_size) and ours.dtype == np.float32
    exact = float64_final_hidden(lstm, x, lengths)
    reference = torch_final_hidden(lstm, x, lengths)
    np.testing.assert_allclose(reference, exact, **FP32_RECURRENT)  # the bound holds for torch's fp32
    np.testing.assert_allclose(ours, exact, **FP32_RECURRENT)
    np.testing.assert_allclose(ours, reference, **FP32_RECURRENT)
    one_frame = lens == 1
    np.testing.assert_allclose(ours[:, one_frame], reference[:, one_frame], **FP32)
    for b, n in enumerate(lengths):  # bit for bit alone: no padding frames, no other rows
        alone = _core.lstm_final_hidden(x[b : b + 1, :n], layers_of(lstm))
        np.testing.assert_array_equal(alone[:, 0], ours[:, b])


@pytest.fixture(scope="module")
def ge2e_lstm() -> torch.nn.LSTM:
    pytest.importorskip("resemblyzer")
    return ge2e.Ge2eEncoder(workers=1).network.lstm


def test_ge2e_weights_ragged_batch_matches_torch(ge2e_lstm):
    # one-frame rows, a row the length of a GE2E partial window, rows between; 7 rows: a full
    # register tile of 6 and a remainder of 1
    check_ragged(ge2e_lstm, [ge2e.PARTIAL_FRAMES, 1, 37, 2, ge2e.PARTIAL_FRAMES - 1, 1, 90], seed=0)


def test_ge2e_encoder_cpu_forward_matches_torch_network(ge2e_lstm):
    encoder = ge2e.Ge2eEncoder(workers=1, partials_per_batch=8)
    mels = torch.rand(5, ge2e.PARTIAL_FRAMES, ge2e.MEL_CHANNELS, generator=torch.Generator().manual_seed(1)) * 3
    ours = encoder._forward_cpu(mels)[:5]
    np.testing.assert_allclose(ours, encoder._forward(mels), **FP32_RECURRENT)
    np.testing.assert_array_equal(encoder._forward_cpu(mels[2:3])[0], ours[2])


@pytest.mark.parametrize("hidden", [32, 24, 6])  # AVX-512 (16 | H), AVX2 (8 | H), portable
def test_kernels_match_torch(hidden):
    lstm = random_lstm(features=7, hidden=hidden, num_layers=3, seed=hidden)
    check_ragged(lstm, [12, 1, 5, 12, 3, 9, 1, 8], seed=hidden)


def test_isa_follows_hidden_size():
    assert _core.lstm_isa(6) == "generic"
    assert _core.lstm_isa(24) in ("avx2+fma", "generic")
    assert _core.lstm_isa(256) in ("avx512f", "avx2+fma", "generic")


def test_every_row_full_length_and_float64_input():
    lstm = random_lstm(features=3, hidden=16, num_layers=1, seed=3)
    x = np.random.default_rng(3).normal(size=(4, 6, 3))  # float64: converted
    ours = _core.lstm_final_hidden(x, layers_of(lstm))
    np.testing.assert_allclose(ours, torch_final_hidden(lstm, x.astype(np.float32), [6] * 4), **FP32_RECURRENT)


def test_empty_batch_is_empty_result():
    lstm = random_lstm(features=3, hidden=8, num_layers=2, seed=4)
    ours = _core.lstm_final_hidden(np.zeros((0, 5, 3), np.float32), layers_of(lstm))
    assert ours.shape == (2, 0, 8)
    assert _core.lstm_final_hidden(np.zeros((0, 0, 3), np.float32), layers_of(lstm)).shape == (2, 0, 8)


def test_empty_sequences_are_errors():
    layers = layers_of(random_lstm(features=3, hidden=8, num_layers=2, seed=5))
    with pytest.raises(ValueError, match="x has no frames"):
        _core.lstm_final_hidden(np.zeros((2, 0, 3), np.float32), layers)
    with pytest.raises(ValueError, match=r"row 1 has length 0; each must be in \[1, 4\]"):
        _core.lstm_final_hidden(np.zeros((2, 4, 3), np.float32), layers, np.array([4, 0]))
    with pytest.raises(ValueError, match=r"row 0 has length 5"):
        _core.lstm_final_hidden(np.zeros((2, 4, 3), np.float32), layers, np.array([5, 1]))


def test_bad_shapes_are_errors():
    layers = layers_of(random_lstm(features=3, hidden=8, num_layers=2, seed=6))
    x = np.zeros((2, 4, 3), np.float32)
    with pytest.raises(ValueError, match=r"x must be float32 \[batch, frames, features\], got \[2, 4\]"):
        _core.lstm_final_hidden(x[:, :, 0], layers)
    with pytest.raises(ValueError, match="layers is empty"):
        _core.lstm_final_hidden(x, [])
    with pytest.raises(ValueError, match=r"layer 0's w_ih must be float32 \[32, 4\], got \[32, 3\]"):
        _core.lstm_final_hidden(np.zeros((2, 4, 4), np.float32), layers)
    w_ih, w_hh, b_ih, b_hh = layers[1]
    with pytest.raises(ValueError, match=r"layer 1's b_hh must be float32 \[32\], got \[31\]"):
        _core.lstm_final_hidden(x, [layers[0], (w_ih, w_hh, b_ih, b_hh[:31])])
    with pytest.raises(ValueError, match=r"layer 0's w_hh must be float32 \[4 hidden, hidden\]"):
        _core.lstm_final_hidden(x, [(layers[0][0], layers[0][1][0], *layers[0][2:])])
    with pytest.raises(ValueError, match=r"lengths must be 1-D with one entry per row \(2\)"):
        _core.lstm_final_hidden(x, layers, np.array([1, 2, 3]))


def test_ge2e_front_end_runs_on_one_torch_thread_and_restores_it(ge2e_lstm, monkeypatch):
    encoder = ge2e.Ge2eEncoder(workers=1)
    seen = []
    front_end = encoder._partials
    monkeypatch.setattr(encoder, "_partials", lambda wav: seen.append(torch.get_num_threads()) or front_end(wav))
    torch.set_num_threads(2)  # the autouse fixture restores the caller's setting afterwards
    wave = np.random.default_rng(7).normal(scale=0.1, size=ge2e.SAMPLE_RATE * 2).astype(np.float32)
    embeddings, errors = encoder.embed_waveforms([wave, wave])
    assert seen == [1, 1] and torch.get_num_threads() == 2
    assert embeddings.shape == (2, ge2e.HIDDEN)
    assert errors[0] == errors[1] and (errors[0] is not None or np.array_equal(embeddings[0], embeddings[1]))
