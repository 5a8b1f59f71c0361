"""Reward distribution plot (SDiaReward Fig. 4 c–d) and the per subset × side statistics behind it."""

from __future__ import annotations

import os

import numpy as np
import polars as pl
import pytest
from matplotlib.image import imread

from sdscore.protocols.reward import RESULT_SCHEMA
from sdscore.report.reward_plots import plot_reward_distributions, reward_distribution_stats

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SCHEMA = RESULT_SCHEMA


def results_frame(groups) -> pl.DataFrame:
    """groups: (subset, chosen rewards, rejected rewards, errors or None) → a reward results frame."""
    rows = []
    for subset, chosen, rejected, errors in groups:
        errors = errors or [None] * len(chosen)
        for i, (c, r, e) in enumerate(zip(chosen, rejected, errors, strict=True)):
            ok = c is not None and r is not None and np.isfinite(c) and np.isfinite(r)
            rows.append(
                {
                    "pair_id": f"{subset}-{i}",
                    "criterion": "colloquialness" if subset == "colloquial" else "modality",
                    "subset": subset,
                    "category": None,
                    "chosen_reward": c,
                    "rejected_reward": r,
                    "margin": None,
                    "correct": bool(c > r) if ok else None,
                    "error": e,
                }
            )
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def mixed_results() -> pl.DataFrame:
    rng = np.random.default_rng(7)
    wild_c, wild_r = rng.normal(0.8, 0.2, 40), rng.normal(-0.4, 0.4, 40)
    scripted_c, scripted_r = rng.normal(-0.2, 0.3, 9), rng.normal(-1.0, 0.3, 9)
    return results_frame(
        [
            ("wild", [*wild_c, 5.0, 7.0], [*wild_r, None, -1.0], [None] * 40 + [None, "decode failed"]),
            ("scripted", [*scripted_c, float("nan")], [*scripted_r, 0.0], None),
            ("semi-wild", [0.3], [0.1], None),  # one pair
            ("flat", [0.5, 0.5, 0.5], [0.2, 0.2, 0.2], None),  # no spread: no density to draw
            ("colloquial", [1.0, 2.0], [0.0, 0.0], ["timeout", "timeout"]),  # nothing scored
        ]
    )


def assert_png(path):
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image[..., :3].std() > 0  # not a blank canvas


def test_stats_match_numpy_on_the_scored_pairs():
    results = mixed_results()
    stats = reward_distribution_stats(results)
    assert stats.columns == ["subset", "side", "n", "n_excluded", "mean", "median", "q1", "q3"]
    assert stats.select("subset", "side").rows() == [
        (s, side) for s in ("wild", "scripted", "semi-wild", "flat", "colloquial") for side in ("chosen", "rejected")
    ]
    scored = results.filter(
        pl.col("error").is_null(), pl.col("chosen_reward").is_not_nan(), pl.col("rejected_reward").is_not_null()
    )
    for row in stats.to_dicts():
        values = scored.filter(pl.col("subset") == row["subset"])[f"{row['side']}_reward"].to_numpy()
        assert row["n"] == values.size
        assert row["n_excluded"] == results.filter(pl.col("subset") == row["subset"]).height - values.size
        if values.size == 0:
            assert row["mean"] is row["median"] is row["q1"] is row["q3"] is None
            continue
        assert row["mean"] == pytest.approx(np.mean(values), abs=1e-12)
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        assert (row["q1"], row["median"], row["q3"]) == pytest.approx((q1, median, q3), abs=1e-12)
    by_subset = {(r["subset"], r["side"]): r for r in stats.to_dicts()}
    assert by_subset[("wild", "chosen")]["n"] == 40 and by_subset[("wild", "chosen")]["n_excluded"] == 2
    assert by_subset[("scripted", "rejected")]["n"] == 9  # the NaN chosen reward drops the whole pair
    assert by_subset[("colloquial", "chosen")]["n"] == 0


def test_stats_by_another_column_and_null_groups():
    results = results_frame([("wild", [1.0, 2.0, 3.0], [0.0, 0.0, 0.0], None)]).with_columns(
        category=pl.Series(["laughter", None, None])
    )
    stats = reward_distribution_stats(results, by="category")
    assert stats.select("category", "side", "n").rows() == [
        ("laughter", "chosen", 1),
        ("laughter", "rejected", 1),
        ("<none>", "chosen", 2),
        ("<none>", "rejected", 2),
    ]
    assert stats.filter(pl.col("category") == "<none>", pl.col("side") == "chosen")["median"][0] == 2.5


def test_plot_writes_a_png_and_leaves_results_alone(tmp_path):
    results = mixed_results()
    before = results.clone()
    path = plot_reward_distributions(results, tmp_path / "plots" / "rewards.png", title="ESDR-Bench")
    assert path == tmp_path / "plots" / "rewards.png"
    assert_png(path)
    assert results.equals(before)
    assert os.listdir(tmp_path / "plots") == ["rewards.png"]  # no temp file left behind


def test_plot_single_values_null_subsets_and_an_old_file(tmp_path):
    results = results_frame([("wild", [0.4], [0.1], None)]).vstack(
        results_frame([("x", [0.2, 0.9], [0.0, -0.5], None)]).with_columns(subset=pl.lit(None, pl.String))
    )
    target = tmp_path / "rewards.png"
    target.write_bytes(b"old")
    plot_reward_distributions(results, target)
    assert_png(target)


@pytest.mark.parametrize(
    "results",
    [
        results_frame([("wild", [1.0, 2.0], [0.0, 0.0], ["oom", "oom"]), ("scripted", [None], [1.0], None)]),
        results_frame([]),
    ],
    ids=["all-error-or-null", "no-rows"],
)
def test_nothing_to_plot_is_a_clear_error(tmp_path, results):
    with pytest.raises(ValueError, match=r"no reward to plot: the results frame has \d+ rows and none has both"):
        plot_reward_distributions(results, tmp_path / "rewards.png")
    assert os.listdir(tmp_path) == []


def test_missing_columns_and_bad_group_column(tmp_path):
    results = mixed_results()
    with pytest.raises(ValueError, match=r"results frame lacks column\(s\) \['rejected_reward'\]"):
        plot_reward_distributions(results.drop("rejected_reward"), tmp_path / "r.png")
    with pytest.raises(ValueError, match=r"results frame lacks column\(s\) \['speaker'\]"):
        reward_distribution_stats(results, by="speaker")
    with pytest.raises(ValueError, match=r"cannot group rewards by column 'side'"):
        reward_distribution_stats(results.with_columns(side=pl.col("subset")), by="side")
    with pytest.raises(ValueError, match=r"cannot group rewards by column 'turns' of type List"):
        reward_distribution_stats(results.with_columns(turns=pl.concat_list("subset")), by="turns")
