"""Session set-up shared by the tests.

Without CUDA, Triton kernels run in Triton's CPU interpreter, which TRITON_INTERPRET=1 selects;
it must be set before triton is first imported, so it is set here, before any test module loads.

bfloat16 matmuls on CPU go through oneDNN, which picks AMX on CPUs that advertise it; on the VMs
CI runs on, AMX is advertised but its tile state is not usable and the process dies of SIGILL.
ONEDNN_MAX_CPU_ISA (read when oneDNN first runs) caps it at AVX-512 with bf16 instructions.
"""

import os

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")

import pytest  # noqa: E402
import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("PYTEST_XDIST_WORKER_COUNT") and not os.environ.get("SDSCORE_CORES", "").strip():
    # under pytest-xdist (`pytest -n N`) each worker process is one of N sharing the machine: it gets
    # its share of the cores as its compute budget (what a pool's parent gives its workers), so N
    # workers do not each size their pools and threads to the whole machine. Tests of the budget
    # itself clear SDSCORE_CORES (test_compute_budget.py's `machine`, test_parent_watch.py).
    from sdscore.runtime.compute_budget import CORES_ENV, machine_cores  # noqa: E402

    os.environ[CORES_ENV] = str(max(1, machine_cores() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """`pytest -n N --dist loadgroup` sends the tests of one xdist_group (the Ray tests: "ray") to one worker:
    pytest-xdist's worker marks them by appending "@<group>" to their node ids, which it does by setting
    item._nodeid; since pytest keeps a node id as item._id (a NodeId), that no longer changes the id, and
    the tests of a group were spread over the workers (pytest-dev/pytest-xdist#1386, fix pending in #1388).
    The same suffix is set here where it is missing."""
    if not config.getoption("loadgroup", default=False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)


@pytest.fixture(scope="session", autouse=True)
def own_sdscore_cache(tmp_path_factory):
    """The session's SDSCORE_CACHE_DIR (embedded audio, WebDataset members, remote manifests): a folder
    of its own, so no test writes into the user's ~/.cache/sdscore and parallel test processes
    (pytest-xdist workers) never extract into the same files at once; tests of a cache set their own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SDSCORE_CACHE_DIR", str(tmp_path_factory.mktemp("sdscore-cache")))
        yield


@pytest.fixture(scope="session")
def tiny_corpus_build(tmp_path_factory):
    """(folder, build summary) of the tiny synthetic corpus (seed 3, two render workers): every protocol's
    manifest with real TTS audio; built once per session, and only read by the tests."""
    from sdscore.synth import build_corpus

    out = tmp_path_factory.mktemp("tiny-corpus") / "corpus"
    summary = build_corpus(out, seed=3, size="tiny", workers=2)
    return out, summary


@pytest.fixture(scope="session")
def tiny_corpus(tiny_corpus_build):
    """The tiny synthetic corpus's folder (see tiny_corpus_build)."""
    return tiny_corpus_build[0]


@pytest.fixture(scope="session")
def tiny_feature_cache(tmp_path_factory):
    """One content cache (--cache-dir) for the session's score runs over the tiny corpus whose subject is
    not the features (rows kept, errors flagged, a results file to fuzz): a clip's GE2E embedding or
    blueprint is computed by the first of them and read by the others. The cache is keyed by the
    clip's bytes and the extractor settings, so a hit gives what a computation would (the cache's own
    tests: test_features_cache.py, test_batched_extraction.py); tests of extraction keep their own."""
    return tmp_path_factory.mktemp("tiny-feature-cache")


@pytest.fixture
def arena_few_bootstraps(monkeypatch):
    """`eval arena` draws its Bradley–Terry CIs from 20 bootstrap resamples instead of 1000 for this test:
    a test of messages, exit codes or file handling does not depend on their number, which sets most of
    an arena eval's cost, and on a busy machine can take minutes (tests/test_metrics_ratings.py checks the
    bootstrap itself; test_arena_lalm_judge.py's score-then-eval keeps the default 1000 through the CLI).
    A resample count given explicitly (the demo's 200) is kept."""
    from sdscore.protocols.arena import evaluate as evaluation

    real = evaluation.evaluate_arena
    monkeypatch.setattr(evaluation, "evaluate_arena", lambda battles, **options: real(battles, **{"n_boot": 20, **options}))
