"""Similarity ops: Triton kernel vs torch reference vs a naive scipy loop, plus every error path.

Without CUDA the kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1, set in conftest.py).
"""


import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.spatial.distance import cosine as cosine_distance
from sdscore import kernels
from sdscore.kernels import dispatch

HAS_TRITON = dispatch.triton_available()
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
IMPLS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not HAS_TRITON, reason="triton not installed"))]
# Scores are float32 sums of the input values. The naive loop sees the same (rounded) inputs, so
# half-precision inputs meet the float32 tolerance too; only the summation order differs.
TOL = 2e-5


def block_n(dim: int) -> int:
    if not HAS_TRITON:
        return 16
    from sdscore.kernels import similarity_triton

    return similarity_triton.similarity_blocks(dim)[0]


def group_sizes(groups: int, dim: int) -> list[int]:
    """Sizes 0, 1 and BLOCK-1, BLOCK, BLOCK+1 of the kernel's row tile."""
    block = block_n(dim)
    return [block + 1] if groups == 1 else [0, 1, block - 1, block, block + 1, 2, 3]


def offsets_of(sizes: list[int]) -> torch.Tensor:
    return torch.tensor([0, *np.cumsum(sizes)], dtype=torch.int64)


def naive_group_cosine(emb: np.ndarray, sizes: list[int], reference: np.ndarray) -> dict[str, np.ndarray]:
    """Loops over turns with scipy's cosine distance (float64)."""
    out = {"pairwise": [], "centroid": [], "reference": []}
    start = 0
    for g, n in enumerate(sizes):
        turns = emb[start : start + n]
        for i, turn in enumerate(turns):
            others = [1 - cosine_distance(turn, other) for j, other in enumerate(turns) if j != i]
            out["pairwise"].append(np.mean(others) if others else 1.0)
            out["centroid"].append(cosine_distance(turn, turns.mean(0)))
            out["reference"].append(1 - cosine_distance(turn, reference[g]))
        start += n
    return {k: np.array(v) for k, v in out.items()}


def naive_candidates(cand, cand_group, emb, sizes, reference) -> dict[str, np.ndarray]:
    out = {"pairwise": [], "centroid": [], "reference": []}
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for c, g in zip(cand, cand_group):
        turns = emb[starts[g] : starts[g + 1]]
        out["pairwise"].append(np.mean([1 - cosine_distance(c, t) for t in turns]) if len(turns) else 0.0)
        out["centroid"].append(cosine_distance(c, turns.mean(0)) if len(turns) else 1.0)
        out["reference"].append(1 - cosine_distance(c, reference[g]))
    return {k: np.array(v) for k, v in out.items()}


def check(got: dict, want: dict, keys=("pairwise", "centroid", "reference")) -> None:
    for key in keys:
        assert got[key].dtype == torch.float32
        assert torch.isfinite(got[key]).all()
        expected = torch.as_tensor(want[key], dtype=torch.float64)
        torch.testing.assert_close(got[key].double().cpu(), expected, atol=TOL, rtol=TOL)


def embeddings(rows: int, dim: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Rows sharing a common direction (like one speaker's turns) plus noise, rounded to dtype."""
    common = torch.randn(dim, generator=gen)
    return (common + 0.7 * torch.randn(rows, dim, generator=gen)).to(dtype)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("groups", "dim"), [(1, 1), (7, 7), (7, 769)])
def test_group_cosine_matches_scipy_loop(impl, dtype, groups, dim):
    gen = torch.Generator().manual_seed(dim)
    sizes = group_sizes(groups, dim)
    emb = embeddings(sum(sizes), dim, dtype, gen)
    reference = torch.randn(groups, dim, generator=gen).to(dtype)
    got = kernels.group_cosine(emb.to(DEVICE), offsets_of(sizes).to(DEVICE), reference.to(DEVICE), impl=impl)
    check(got, naive_group_cosine(emb.double().numpy(), sizes, reference.double().numpy()))
    without = kernels.group_cosine(emb.to(DEVICE), offsets_of(sizes).to(DEVICE), impl=impl)
    assert without["reference"] is None
    check(without, got, keys=("pairwise", "centroid"))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("groups", "dim"), [(1, 1), (7, 7), (7, 769)])
def test_score_candidates_matches_scipy_loop(impl, dtype, groups, dim):
    gen = torch.Generator().manual_seed(10 + dim)
    sizes = group_sizes(groups, dim)
    emb = embeddings(sum(sizes), dim, dtype, gen)
    reference = torch.randn(groups, dim, generator=gen).to(dtype)
    # three candidates per group, the empty group (g = 0 when G = 7) included
    cand_group = torch.arange(groups).repeat_interleave(3)
    cand = embeddings(len(cand_group), dim, dtype, gen)
    args = (cand, cand_group, emb, offsets_of(sizes), reference)
    got = kernels.score_candidates(*(a.to(DEVICE) for a in args), impl=impl)
    cand64, emb64, reference64 = (a.double().numpy() for a in (cand, emb, reference))
    want = naive_candidates(cand64, cand_group.numpy(), emb64, sizes, reference64)
    check(got, want)
    without = kernels.score_candidates(*(a.to(DEVICE) for a in args[:4]), impl=impl)
    assert without["reference"] is None
    check(without, got, keys=("pairwise", "centroid"))


@pytest.mark.parametrize("impl", IMPLS)
def test_zero_and_tiny_embeddings_follow_torch_cosine_similarity(impl):
    emb = torch.tensor([[0.0, 0.0, 0.0], [1e-10, 0.0, 0.0], [1.0, 2.0, 3.0], [-1.0, 0.5, 2.0], [0.0, 0.0, 0.0]])
    offsets = torch.tensor([0, 4, 5])
    reference = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    got = kernels.group_cosine(emb.to(DEVICE), offsets.to(DEVICE), reference.to(DEVICE), impl=impl)

    def cos(a, b):  # the convention: a·b / (max(|a|, eps) · max(|b|, eps))
        return F.cosine_similarity(a[None].double(), b[None].double(), eps=1e-8).item()

    pairwise = [np.mean([cos(emb[i], emb[j]) for j in range(4) if j != i]) for i in range(4)] + [1.0]
    centroid = [1 - cos(emb[i], emb[:4].mean(0)) for i in range(4)] + [1 - cos(emb[4], emb[4])]
    ref = [cos(emb[i], reference[0]) for i in range(4)] + [0.0]
    check(got, {"pairwise": pairwise, "centroid": centroid, "reference": ref})
    assert got["pairwise"][0].item() == 0.0 and got["centroid"][4].item() == 1.0


@pytest.mark.parametrize("impl", IMPLS)
def test_strided_views_are_read_in_place(impl):
    gen = torch.Generator().manual_seed(7)
    sizes, dim = group_sizes(7, 7), 7
    emb = torch.randn(dim, 2 * sum(sizes), generator=gen).t()[::2]  # [N, D], no unit stride
    reference = torch.randn(2 * 7, 2 * dim, generator=gen)[::2, ::2]
    cand = torch.randn(dim, 2 * 21, generator=gen).t()[::2]
    cand_group = torch.arange(7).repeat_interleave(6)[::2]
    offsets = offsets_of(sizes)
    assert not (emb.is_contiguous() or reference.is_contiguous() or cand.is_contiguous() or cand_group.is_contiguous())
    got = kernels.group_cosine(emb.to(DEVICE), offsets.to(DEVICE), reference.to(DEVICE), impl=impl)
    check(got, kernels.group_cosine(emb.contiguous(), offsets, reference.contiguous(), impl="torch"))
    args = (cand, cand_group, emb, offsets, reference)
    got = kernels.score_candidates(*(a.to(DEVICE) for a in args), impl=impl)
    check(got, kernels.score_candidates(*(a.contiguous() for a in args), impl="torch"))


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_groups_produce_no_rows(impl):
    offsets = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    emb = torch.empty(0, 5, device=DEVICE)
    got = kernels.group_cosine(emb, offsets, torch.ones(3, 5, device=DEVICE), impl=impl)
    assert all(got[k].shape == (0,) for k in ("pairwise", "centroid", "reference"))
    cand = torch.ones(2, 5, device=DEVICE)
    got = kernels.score_candidates(cand, torch.tensor([0, 2], device=DEVICE), emb, offsets, impl=impl)
    assert got["pairwise"].tolist() == [0.0, 0.0] and got["centroid"].tolist() == [1.0, 1.0]
    nothing = kernels.group_cosine(emb, offsets[:1], impl=impl)
    assert nothing["pairwise"].shape == (0,)


@pytest.mark.parametrize("impl", IMPLS)
def test_group_of_one_turn_has_pairwise_one(impl):
    emb = torch.tensor([[3.0, -1.0], [0.0, 0.0]], device=DEVICE)
    got = kernels.group_cosine(emb, torch.tensor([0, 1, 2], device=DEVICE), impl=impl)
    assert got["pairwise"].tolist() == [1.0, 1.0]


def test_auto_uses_the_reference_on_cpu():
    assert not dispatch.use_triton("auto", torch.zeros(3, 2))


def score_one_group(cand: torch.Tensor, cand_group: torch.Tensor) -> dict:
    """score_candidates against one group of five 3-d turns."""
    return kernels.score_candidates(cand, cand_group, torch.zeros(5, 3), torch.tensor([0, 5]))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: kernels.group_cosine(torch.zeros(5, 3), torch.tensor([0, 2, 4])),
            "offsets end at 4 but emb has 5 rows",
        ),
        (
            lambda: kernels.group_cosine(torch.zeros(5, 3), torch.tensor([0, 5]), torch.zeros(2, 3)),
            r"reference has shape \(2, 3\) but offsets and emb give \(G, D\) = \(1, 3\)",
        ),
        (
            lambda: kernels.group_cosine(torch.zeros(5, 3), torch.tensor([0, 5]), torch.zeros(1, 4)),
            r"reference has shape \(1, 4\) but offsets and emb give \(G, D\) = \(1, 3\)",
        ),
        (lambda: kernels.group_cosine(torch.zeros(5), torch.tensor([0, 5])), "emb must have 2 dimensions"),
        (lambda: kernels.group_cosine(torch.zeros(5, 0), torch.tensor([0, 5])), "at least one column"),
        (
            lambda: kernels.group_cosine(torch.zeros(5, 3), torch.tensor([0, 5]), eps=1e-8, impl="fast"),
            "impl must be one of",
        ),
        (
            lambda: score_one_group(torch.zeros(2, 4), torch.tensor([0, 0])),
            "cand has last dimension 4 but emb has 3",
        ),
        (
            lambda: score_one_group(torch.zeros(2, 3), torch.tensor([0])),
            "cand_group has 1 entries but cand has 2 rows",
        ),
        (
            lambda: score_one_group(torch.zeros(2, 3), torch.tensor([0, 1])),
            "cand_group holds 1 but offsets give G = 1 groups",
        ),
        (
            lambda: score_one_group(torch.zeros(2, 3), torch.tensor([0, -1])),
            "cand_group holds -1",
        ),
        (
            lambda: score_one_group(torch.zeros(2, 3), torch.tensor([0, 0], dtype=torch.int32)),
            "cand_group must be 1-D int64",
        ),
    ],
)
def test_bad_arguments_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_forced_triton_on_too_wide_embeddings_says_so(monkeypatch):
    from sdscore.kernels import similarity

    monkeypatch.setattr(similarity, "MAX_DIM", 2)
    with pytest.raises(ValueError, match="D = 3 exceeds 2"):
        kernels.group_cosine(torch.zeros(5, 3), torch.tensor([0, 5]), impl="triton")


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_kernels_compile_for_a_cuda_gpu():
    """The GPU code path, not only the interpreter's, builds (ptxas ships with triton)."""
    from kernels_cuda_compile import compile_in_subprocess

    done = compile_in_subprocess("similarity")
    if done.returncode == 77:
        pytest.skip(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_kernels_match_reference_at_dataset_size():
    gen = torch.Generator(device="cuda").manual_seed(8)
    sizes = torch.randint(0, 40, (5000,), device="cuda", generator=gen)
    offsets = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])
    emb = torch.randn(int(offsets[-1]), 192, device="cuda", generator=gen)
    reference = torch.randn(5000, 192, device="cuda", generator=gen)
    want = kernels.group_cosine(emb, offsets, reference, impl="torch")
    check(kernels.group_cosine(emb, offsets, reference, impl="triton"), want)
    cand_group = torch.randint(0, 5000, (3000,), device="cuda", generator=gen)
    cand = torch.randn(3000, 192, device="cuda", generator=gen)
    args = (cand, cand_group, emb, offsets, reference)
    check(kernels.score_candidates(*args, impl="triton"), kernels.score_candidates(*args, impl="torch"))
