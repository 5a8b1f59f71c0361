"""Pooling ops: Triton kernel vs torch reference vs a naive float64 loop, plus every error path.

Without CUDA the kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1, set in conftest.py).
"""


import numpy as np
import pytest
import torch
from sdscore import kernels
from sdscore.kernels import dispatch, pooling

HAS_TRITON = dispatch.triton_available()
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
IMPLS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not HAS_TRITON, reason="triton not installed"))]
# output tolerance per dtype: float32 sums agree to rounding; half types are compared after rounding
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
OPS = ["masked_mean", "last_token", "attention_pool"]


def block_l(op: str, width: int) -> int:
    if not HAS_TRITON:
        return 16
    from sdscore.kernels import pooling_triton

    return pooling_triton.attention_blocks(width)[0] if op == "attention_pool" else pooling_triton.BLOCK_L


def row_lengths(op: str, batch: int, width: int) -> list[int]:
    """Lengths 0, 1 and BLOCK-1, BLOCK, BLOCK+1 of the kernel's position tile."""
    block = block_l(op, width)
    return [block + 1] if batch == 1 else [0, 1, block - 1, block, block + 1, 3, 2 * block + 1]


def make_mask(lengths: list[int], length: int, layout: str, gen: torch.Generator) -> torch.Tensor:
    """mask [B, L]: right padding, left padding, or holes (random attended positions, count = lengths)."""
    mask = torch.zeros(len(lengths), length, dtype=torch.bool)
    for b, n in enumerate(lengths):
        if layout == "right":
            mask[b, :n] = True
        elif layout == "left":
            mask[b, length - n :] = True
        else:
            mask[b, torch.randperm(length, generator=gen)[:n]] = True
    return mask


def naive(op: str, rows: list[np.ndarray], weight: np.ndarray | None, bias: float, width: int) -> np.ndarray:
    """Float64 loop over the attended rows of each item (rows[b] is [n_b, H])."""
    out = np.zeros((len(rows), width))
    for b, x in enumerate(rows):
        if len(x) == 0:
            continue
        if op == "masked_mean":
            out[b] = x.sum(0) / len(x)
        elif op == "last_token":
            out[b] = x[-1]
        else:
            scores = x @ weight + bias
            p = np.exp(scores - scores.max())
            out[b] = (p[:, None] * x).sum(0) / p.sum()
    return out


def run(op: str, x, mask=None, offsets=None, weight=None, bias=0.0, impl="auto"):
    fn = getattr(kernels, op)
    if op == "attention_pool":
        return fn(x, mask, weight, bias, offsets=offsets, impl=impl)
    return fn(x, mask, offsets=offsets, impl=impl)


def check(got: torch.Tensor, want, dtype: torch.dtype) -> None:
    assert got.dtype == dtype
    assert torch.isfinite(got).all()
    want = torch.as_tensor(want, dtype=torch.float64)
    torch.testing.assert_close(got.double().cpu(), want, atol=TOL[dtype], rtol=TOL[dtype])


def inputs(op, batch, width, dtype, layout, seed=0):
    """Padded (hidden, mask) with NaN in every padded slot, the attended rows, and weight [H]."""
    gen = torch.Generator().manual_seed(seed)
    lengths = row_lengths(op, batch, width)
    length = max(lengths) + 2
    hidden = torch.randn(batch, length, width, generator=gen).to(dtype)
    mask = make_mask(lengths, length, layout, gen)
    rows = [hidden[b][mask[b]].double().numpy() for b in range(batch)]
    hidden = hidden.masked_fill(~mask[..., None], float("nan"))
    weight = (torch.randn(width, generator=gen) / width**0.5).to(dtype)
    return hidden, mask, rows, weight


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", ["right", "left", "holes"])
@pytest.mark.parametrize(("batch", "width"), [(1, 1), (7, 7), (7, 769)])
def test_padded_matches_naive_loop(impl, op, layout, batch, width):
    hidden, mask, rows, weight = inputs(op, batch, width, torch.float32, layout)
    got = run(op, hidden.to(DEVICE), mask.to(DEVICE), weight=weight.to(DEVICE), bias=0.25, impl=impl)
    check(got, naive(op, rows, weight.double().numpy(), 0.25, width), torch.float32)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("batch", "width"), [(1, 1), (7, 7), (7, 769)])
def test_packed_matches_naive_loop(impl, op, batch, width):
    gen = torch.Generator().manual_seed(1)
    lengths = row_lengths(op, batch, width)
    offsets = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int64)
    values = torch.randn(int(offsets[-1]), width, generator=gen)
    weight = torch.randn(width, generator=gen) / width**0.5
    rows = [values[offsets[b] : offsets[b + 1]].double().numpy() for b in range(batch)]
    got = run(op, values.to(DEVICE), offsets=offsets.to(DEVICE), weight=weight.to(DEVICE), bias=-1.0, impl=impl)
    check(got, naive(op, rows, weight.double().numpy(), -1.0, width), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", OPS)
def test_half_precision_triton_matches_reference_and_naive(op, dtype):
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    hidden, mask, rows, weight = inputs(op, 7, 769, dtype, "holes", seed=2)
    hidden, mask, weight = hidden.to(DEVICE), mask.to(DEVICE), weight.to(DEVICE)
    ours = run(op, hidden, mask, weight=weight, impl="triton")
    check(ours, run(op, hidden, mask, weight=weight, impl="torch").double(), dtype)
    check(ours, naive(op, rows, weight.double().cpu().numpy(), 0.0, 769), dtype)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("op", OPS)
def test_strided_views_are_read_in_place(impl, op):
    gen = torch.Generator().manual_seed(3)
    width, batch = 7, 7
    lengths = row_lengths(op, batch, width)
    length = max(lengths) + 1
    # [B, H, 2L] -> transpose -> every other position: strides on all three axes, none of them 1
    base = torch.randn(batch, width, 2 * length, generator=gen)
    hidden = base.transpose(1, 2)[:, ::2]
    mask = make_mask(lengths, 2 * length, "holes", gen)[:, ::2]
    weight = torch.randn(2 * width, generator=gen)[::2]
    assert not hidden.is_contiguous() and not mask.is_contiguous()
    got = run(op, hidden.to(DEVICE), mask.to(DEVICE), weight=weight.to(DEVICE), impl=impl)
    want = run(op, hidden.contiguous(), mask.contiguous(), weight=weight.contiguous(), impl="torch")
    check(got, want.double(), torch.float32)
    # packed values [T, H] as a transposed view
    offsets = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int64)
    values = torch.randn(width, int(offsets[-1]), generator=gen).t()
    got = run(op, values.to(DEVICE), offsets=offsets.to(DEVICE), weight=weight.to(DEVICE), impl=impl)
    want = run(op, values.contiguous(), offsets=offsets, weight=weight.contiguous(), impl="torch")
    check(got, want.double(), torch.float32)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("op", OPS)
def test_empty_rows_give_exact_zeros(impl, op):
    hidden = torch.full((3, 5, 7), float("nan"), device=DEVICE)
    mask = torch.zeros(3, 5, dtype=torch.int64, device=DEVICE)
    weight = torch.ones(7, device=DEVICE)
    assert torch.equal(run(op, hidden, mask, weight=weight, impl=impl), torch.zeros(3, 7, device=DEVICE))
    offsets = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    values = torch.empty(0, 7, device=DEVICE)
    assert torch.equal(run(op, values, offsets=offsets, weight=weight, impl=impl), torch.zeros(3, 7, device=DEVICE))
    no_length = torch.empty(3, 0, 7, device=DEVICE)
    got = run(op, no_length, mask[:, :0], weight=weight, impl=impl)
    assert torch.equal(got, torch.zeros(3, 7, device=DEVICE))


@pytest.mark.parametrize("impl", IMPLS)
def test_attention_pool_is_stable_for_huge_scores(impl):
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]]], device=DEVICE)
    mask = torch.tensor([[1, 1, 0]], device=DEVICE)
    weight = torch.tensor([1e4, 0.0], device=DEVICE)  # scores 1e4 and 0: exp would overflow unshifted
    got = kernels.attention_pool(hidden, mask, weight, bias=1e4, impl=impl)
    assert torch.equal(got.cpu(), torch.tensor([[1.0, 0.0]]))


def test_attention_pool_slices_merge_like_one_pass():
    if not HAS_TRITON:
        pytest.skip("triton not installed")
    from sdscore.kernels import pooling_triton

    hidden, mask, rows, weight = inputs("attention_pool", 7, 7, torch.float32, "holes", seed=4)
    want = naive("attention_pool", rows, weight.double().numpy(), 0.0, 7)
    for splits in (2, 3, 5):
        got = pooling_triton.attention_pool(hidden.to(DEVICE), mask.to(DEVICE), None, weight.to(DEVICE), 0.0, splits)
        check(got, want, torch.float32)


@pytest.mark.parametrize("op", OPS)
def test_padded_references_compile_to_one_graph_that_ignores_nan_padding(op):
    """The export path: no data-dependent branch, and NaN padding still stays out."""
    hidden, mask, rows, weight = inputs(op, 7, 7, torch.float32, "holes", seed=6)
    fn = getattr(kernels, f"{op}_reference")
    args = (hidden, mask, weight) if op == "attention_pool" else (hidden, mask)
    compiled = torch.compile(fn, backend="eager", fullgraph=True)
    check(compiled(*args), naive(op, rows, weight.double().numpy(), 0.0, 7), torch.float32)


def test_integer_masks_count_nonzero_as_attended():
    hidden = torch.randn(2, 4, 3)
    mask = torch.tensor([[0, 2, 0, 5], [1, 0, 0, 0]])
    want = torch.stack([hidden[0, [1, 3]].mean(0), hidden[1, 0]])
    torch.testing.assert_close(kernels.masked_mean(hidden, mask), want)


@pytest.mark.parametrize("layout", ["right", "left", "holes"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_last_token_on_the_cpu_gathers_the_rows_the_reference_picks(layout, dtype):
    """CPU impl="auto" finds each row's last index on the host and gathers those rows: bit-equal to the
    torch reference and to the naive loop, with NaN padding, empty rows and segments (zeros), integer masks,
    strided views (no flat row view: the indexing fallback) and packed segments, empty ones first and last."""
    gen = torch.Generator().manual_seed(7)
    lengths = [0, 1, 5, 9, 0, 3]
    length = max(lengths) + 2
    hidden = torch.randn(len(lengths), length, 5, generator=gen).to(dtype)
    mask = make_mask(lengths, length, layout, gen)
    rows = [hidden[b][mask[b]].double().numpy() for b in range(len(lengths))]
    hidden = hidden.masked_fill(~mask[..., None], float("nan"))
    want = naive("last_token", rows, None, 0.0, 5)
    strided = hidden.transpose(1, 2).contiguous().transpose(1, 2)  # [B, L, H] with no flat [B * L, H] view
    for x, m in ((hidden, mask), (hidden, mask.to(torch.int64) * 3), (strided, mask), (hidden[:1], mask[:1])):
        got = kernels.last_token(x, m)
        assert torch.equal(got, kernels.last_token(x, m, impl="torch"))
        assert got.dtype == dtype and torch.equal(got.double(), torch.as_tensor(want[: len(x)]).to(dtype).double())
    offsets = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int64)
    values = hidden[mask]
    got = kernels.last_token(values, offsets=offsets)
    assert torch.equal(got, kernels.last_token(values, offsets=offsets, impl="torch"))
    assert torch.equal(got.double(), torch.as_tensor(want).to(dtype).double())
    trailing = torch.tensor([0, 0, *np.cumsum(lengths[1:]), int(offsets[-1])], dtype=torch.int64)  # empty first and last
    assert torch.equal(kernels.last_token(values, offsets=trailing), kernels.last_token(values, offsets=trailing, impl="torch"))


def test_auto_uses_the_reference_on_cpu():
    assert not dispatch.use_triton("auto", torch.zeros(1))
    assert not dispatch.use_triton("torch", torch.zeros(1))


def attended(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bool)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: kernels.masked_mean(torch.zeros(7, 13, 4), attended(7, 12)),
            r"mask has shape \(7, 12\) but hidden \[B, L, H\] has \(B, L\) = \(7, 13\)",
        ),
        (
            lambda: kernels.masked_mean(torch.zeros(7, 4), offsets=torch.tensor([0, 5])),
            "offsets end at 5 but values has 7 rows",
        ),
        (
            lambda: kernels.masked_mean(torch.zeros(7, 4), offsets=torch.tensor([0, 7], dtype=torch.int32)),
            "offsets must be int64",
        ),
        (
            lambda: kernels.masked_mean(torch.zeros(7, 4), offsets=torch.tensor([1, 7])),
            "offsets must start at 0, got 1",
        ),
        (lambda: kernels.masked_mean(torch.zeros(7, 4), offsets=torch.tensor([0, 5, 3, 7])), "non-decreasing"),
        (lambda: kernels.masked_mean(torch.zeros(2, 3, 4)), "either mask"),
        (lambda: kernels.last_token(torch.zeros(2, 3, 4), attended(2, 3), offsets=torch.tensor([0, 2])), "either mask"),
        (lambda: kernels.last_token(torch.zeros(2, 3, 4), torch.ones(2, 3)), "mask must be bool or integer"),
        (lambda: kernels.last_token(torch.zeros(6, 4), attended(6, 1)), "hidden must have 3 dimensions"),
        (
            lambda: kernels.masked_mean(torch.zeros(2, 3, 4, dtype=torch.int64), attended(2, 3)),
            "must be a floating tensor",
        ),
        (
            lambda: kernels.attention_pool(torch.zeros(2, 3, 7), attended(2, 3), torch.ones(8)),
            r"weight has shape \(8,\) but hidden has H = 7",
        ),
        (lambda: kernels.attention_pool(torch.zeros(2, 3, 7), attended(2, 3)), "needs weight"),
        (lambda: kernels.masked_mean(torch.zeros(2, 3, 4), attended(2, 3), impl="cuda"), "impl must be one of"),
    ],
)
def test_bad_arguments_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_forced_triton_explains_what_it_cannot_run(monkeypatch):
    with pytest.raises(ValueError, match="take float32, float16 or bfloat16, got torch.float64"):
        kernels.masked_mean(torch.zeros(2, 3, 4, dtype=torch.float64), attended(2, 3), impl="triton")
    monkeypatch.setattr(pooling, "MAX_ATTENTION_H", 4)
    with pytest.raises(ValueError, match="H = 7 exceeds 4"):
        kernels.attention_pool(torch.zeros(2, 3, 7), attended(2, 3), torch.ones(7), impl="triton")
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(ValueError, match="needs CUDA tensors, or TRITON_INTERPRET=1 for CPU ones"):
            kernels.masked_mean(torch.zeros(2, 3, 4), attended(2, 3), impl="triton")


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_kernels_compile_for_a_cuda_gpu():
    """The GPU code path, not only the interpreter's, builds (ptxas ships with triton)."""
    from kernels_cuda_compile import compile_in_subprocess

    done = compile_in_subprocess("pooling")
    if done.returncode == 77:
        pytest.skip(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op", OPS)
def test_cuda_kernel_matches_reference_at_model_size(op):
    gen = torch.Generator(device="cuda").manual_seed(5)
    hidden = torch.randn(9, 1031, 3584, device="cuda", dtype=torch.bfloat16, generator=gen)
    mask = torch.rand(9, 1031, device="cuda", generator=gen) > 0.3
    weight = torch.randn(3584, device="cuda", dtype=torch.bfloat16, generator=gen) / 60
    got = run(op, hidden, mask, weight=weight, impl="triton")
    check(got, run(op, hidden, mask, weight=weight, impl="torch").double(), torch.bfloat16)
