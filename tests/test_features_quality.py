"""DNSMOS P.835 (standard, personalized) and P.808 batched with shared trunks == speechmos per file."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from features_audio import RATE, batch_of, harmonic, read16, render
from sdscore.errors import ModelError
from sdscore.features.quality import Dnsmos, _runs, tile, window_indices

dnsmos = pytest.importorskip("speechmos.dnsmos")
TOL = 1e-3
DIMS = ("sig", "bak", "ovrl")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """TTS speech plus synthetic clips whose lengths hit every window layout (see the test below)."""
    paths = render(tmp_path_factory.mktemp("dnsmos"), ("slt", "rms", "espeak"))
    rng = np.random.default_rng(3)
    noisy = lambda s: (
        harmonic(140, s)
        + (0.02 * rng.standard_normal(int(s * RATE))).astype(np.float32)
    )
    return [read16(p) for p in paths.values()] + [
        noisy(0.4),
        noisy(5.2),
        noisy(5.7),
        noisy(12.0),
    ]


@pytest.fixture(scope="module")
def ours(clips):
    return Dnsmos().run(batch_of(clips), {})


def speechmos(x: np.ndarray, model_type: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dnsmos.run(x, RATE, model_type=model_type)


def test_clips_cover_lone_windows_runs_and_tiling(clips):
    layouts = [_runs(window_indices(len(tile(x)))) for x in clips]
    sizes = {b - a + 1 for runs in layouts for a, b in runs}
    assert 1 in sizes and 2 in sizes and max(sizes) >= 5
    assert any(len(x) < 9.01 * RATE for x in clips) and any(
        len(x) > 9.01 * RATE for x in clips
    )


def test_personalized_and_p808_match_speechmos_per_file(clips, ours):
    for i, x in enumerate(clips):
        ref = speechmos(x, "dnsmos_personalized")
        for dim in DIMS:
            assert ours[f"dnsmos_personalized_{dim}"][i] == pytest.approx(
                ref[f"{dim}_mos"], abs=TOL
            ), (i, dim)
        assert ours["p808_mos"][i] == pytest.approx(float(ref["p808_mos"]), abs=TOL), i


def test_standard_dnsmos_matches_speechmos_per_file(clips, ours):
    for i in (0, 6):
        ref = speechmos(clips[i], "dnsmos")
        for dim in DIMS:
            assert ours[f"dnsmos_{dim}"][i] == pytest.approx(
                ref[f"{dim}_mos"], abs=TOL
            ), (i, dim)


def test_speechmos_window_quirk_is_kept():
    # like dnsmos_local.py: a window whose float end index truncates one sample short is skipped
    assert window_indices(40 * RATE) == [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        24,
        25,
        26,
        27,
        28,
        29,
        30,
    ]
    assert _runs([0, 1, 2, 5, 6], longest=2) == [(0, 1), (2, 2), (5, 6)]


def test_batched_equals_one_file_at_a_time(clips, ours):
    model = Dnsmos(standard=False)
    for i in (1, 4):
        alone = model.run(batch_of([clips[i]]), {})
        for col in ("dnsmos_personalized_sig", "dnsmos_personalized_ovrl", "p808_mos"):
            assert alone[col][0] == pytest.approx(ours[col][i], abs=1e-5)


def test_empty_items_are_null_and_the_rest_scored(clips):
    out = Dnsmos(standard=False, p808=False).run(batch_of([np.zeros(0), clips[3]]), {})
    assert out["dnsmos_personalized_ovrl"][0] is None
    assert 1.0 < out["dnsmos_personalized_ovrl"][1] < 5.0
    assert set(out) == {
        "dnsmos_personalized_sig",
        "dnsmos_personalized_bak",
        "dnsmos_personalized_ovrl",
    }


def test_tile_refuses_empty_audio():
    with pytest.raises(ValueError, match="empty audio has no DNSMOS windows"):
        tile(np.zeros(0, np.float32))


def test_bad_configurations_are_refused(tmp_path):
    with pytest.raises(
        ValueError, match="enable at least one of standard, personalized, p808"
    ):
        Dnsmos(standard=False, personalized=False, p808=False)
    with pytest.raises(
        ModelError, match="DNSMOS model file not found: .*sig_bak_ovr.onnx"
    ):
        Dnsmos(model_dir=str(tmp_path))
