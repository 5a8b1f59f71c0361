"""read_results: results files of any supported format, typed, with clear errors naming file and column."""

from __future__ import annotations

import json

import polars as pl
import pytest

from sdscore.corpus.results_file import read_results
from sdscore.errors import ManifestError

COLUMNS = {"pair_id": pl.String, "chosen_reward": pl.Float64, "correct": pl.Boolean, "scores": pl.List(pl.Float64),
           "cost": pl.Float64}
FRAME = pl.DataFrame({"pair_id": ["a", "b"], "chosen_reward": [0.5, -1.25], "correct": [True, False],
                      "scores": [[0.1, 0.2], []]}, schema={k: v for k, v in COLUMNS.items() if k != "cost"})


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
def test_every_format_reads_back_typed_with_absent_optional_columns_null(tmp_path, suffix):
    path = tmp_path / f"r{suffix}"
    if suffix == ".parquet":
        FRAME.write_parquet(path)
    elif suffix == ".jsonl":
        FRAME.write_ndjson(path)
    else:  # a CSV cannot hold lists: a tool writing one puts JSON text in the cell
        cells = [json.dumps(v) for v in FRAME["scores"].to_list()]
        FRAME.with_columns(pl.Series("scores", cells, dtype=pl.String)).write_csv(path)
    got = read_results(path, COLUMNS, required=("pair_id", "chosen_reward"))
    assert got.select(FRAME.columns).equals(FRAME)
    assert got.schema["cost"] == pl.Float64 and got["cost"].null_count() == 2


def test_text_numbers_are_cast_and_bad_values_named(tmp_path):
    path = tmp_path / "r.parquet"
    FRAME.with_columns(pl.col("chosen_reward").cast(pl.String)).write_parquet(path)
    assert read_results(path, COLUMNS)["chosen_reward"].to_list() == [0.5, -1.25]
    FRAME.with_columns(pl.Series("chosen_reward", ["0.5", "high"])).write_parquet(path)
    message = r"r.parquet: column 'chosen_reward' holds String values that are not Float64 .*\[\"high\"\]"
    with pytest.raises(ManifestError, match=message):
        read_results(path, COLUMNS)


def test_missing_files_columns_and_unreadable_files_are_named(tmp_path):
    with pytest.raises(ManifestError, match="none.parquet: no such results file"):
        read_results(tmp_path / "none.parquet", COLUMNS)
    FRAME.drop("chosen_reward").write_parquet(tmp_path / "r.parquet")
    with pytest.raises(ManifestError, match=r"r.parquet: results lack column 'chosen_reward' \(found: pair_id"):
        read_results(tmp_path / "r.parquet", COLUMNS, required=("chosen_reward",))
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ManifestError, match="bad.parquet: not a readable Parquet results file"):
        read_results(tmp_path / "bad.parquet", COLUMNS)
    (tmp_path / "r.xlsx").write_bytes(b"")
    with pytest.raises(ManifestError, match=r"cannot read results from '.xlsx'"):
        read_results(tmp_path / "r.xlsx", COLUMNS)


@pytest.mark.parametrize("protocol", ["reward", "judge", "consistency", "naturalness"])
def test_eval_names_a_folder_or_a_fifo_given_as_results(tmp_path, capsys, protocol):
    import os

    from sdscore.cli import main

    (tmp_path / "folder.parquet").mkdir()
    os.mkfifo(tmp_path / "pipe.parquet")  # never opened: reading it would wait for a writer
    for name, message in (("folder.parquet", "a folder, not a results file"),
                          ("pipe.parquet", "not a regular file (a FIFO, socket or device is not read)")):
        assert main(["eval", protocol, str(tmp_path / name), "--out", str(tmp_path / "m.json")]) == 2
        assert f"{name}: {message}" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "m.json").exists()


EMPTY_RESULTS = {  # the columns each eval requires, and no row
    "reward": ({"pair_id": pl.String, "chosen_reward": pl.Float64, "rejected_reward": pl.Float64},
               "the results hold no rows; there is nothing to evaluate"),
    "consistency": ({"task": pl.String}, "the results hold no rows; there is nothing to evaluate"),
    "arena": ({"model_a": pl.String, "model_b": pl.String, "winner": pl.String},
              "holds no battles (no rows); there is nothing to rate"),
}


@pytest.mark.parametrize("protocol", sorted(EMPTY_RESULTS))
def test_eval_of_results_without_rows_is_refused(tmp_path, capsys, protocol):
    from sdscore.cli import main

    schema, message = EMPTY_RESULTS[protocol]
    pl.DataFrame(schema=schema).write_parquet(tmp_path / "empty.parquet")
    assert main(["eval", protocol, str(tmp_path / "empty.parquet"), "--out", str(tmp_path / "m.json")]) == 2
    assert f"empty.parquet: {message}" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "m.json").exists()


def test_eval_reads_results_other_tools_wrote(tmp_path, capsys):
    """`sdscore eval` on CSV results with text rewards, and on judge results without a cost column."""
    from sdscore.cli import main

    reward = pl.DataFrame({"pair_id": ["a", "b", "c"], "criterion": ["modality"] * 3, "subset": ["wild"] * 3,
                           "chosen_reward": ["1.0", "0.2", "0.9"], "rejected_reward": ["0.0", "0.5", "0.1"]})
    reward.write_csv(tmp_path / "reward.csv")
    assert main(["eval", "reward", str(tmp_path / "reward.csv"), "--out", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["subsets"]["wild"]["accuracy"] == pytest.approx(2 / 3)
    judge = pl.DataFrame({"item_id": ["1", "2"], "content_pred": ["1", "2"], "voice_quality_pred": ["1", "2"],
                          "paralinguistics_pred": ["1", "2"], "overall_pred": ["1", "1"], "error": [None, None],
                          "overall": ["1", "2"]}, schema_overrides={"error": pl.String})
    judge.write_parquet(tmp_path / "j.parquet")
    assert main(["eval", "judge", str(tmp_path / "j.parquet"), "--out", str(tmp_path / "j.json")]) == 0
    metrics = json.loads((tmp_path / "j.json").read_text())["judges"]["j"]
    assert metrics["accuracy"]["overall"] == 0.5 and metrics["cost"]["total_usd"] is None
    judge.write_csv(tmp_path / "k.csv")  # no Parquet metadata to read the fusion rule from: the default
    assert main(["eval", "judge", str(tmp_path / "k.csv"), "--out", str(tmp_path / "k.json")]) == 0
    assert json.loads((tmp_path / "k.json").read_text())["judges"]["k"]["fusion"] == "speakbench"
    pl.DataFrame({"task": ["detection"]}).write_parquet(tmp_path / "c.parquet")
    assert main(["eval", "consistency", str(tmp_path / "c.parquet"), "--out", str(tmp_path / "c.json")]) in (0, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_eval_reward_without_subset_or_criterion_reports_overall_accuracy(tmp_path):
    """criterion and subset are optional in results other tools wrote: no per-subset table, no macros."""
    from sdscore.cli import main

    bare = pl.DataFrame({"chosen_reward": [1.0, 0.2, 0.9, 0.3], "rejected_reward": [0.0, 0.5, 0.1, 0.1]})
    bare.write_csv(tmp_path / "bare.csv")
    out = tmp_path / "m.json"
    assert main(["eval", "reward", str(tmp_path / "bare.csv"), "--out", str(out),
                 "--plot", str(tmp_path / "p.png")]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["overall_micro"] == pytest.approx(0.75) and metrics["n"] == 4
    assert metrics["subsets"] == {} and metrics["overall_macro"] is None and metrics["modality_micro"] is None
    assert (tmp_path / "p.png").stat().st_size > 0
    with_criterion = bare.with_columns(pl.Series("criterion", ["modality", "modality", "colloquialness",
                                                               "colloquialness"]))
    with_criterion.write_parquet(tmp_path / "c.parquet")
    assert main(["eval", "reward", str(tmp_path / "c.parquet"), "--out", str(out), "--overwrite"]) == 0  # m.json exists
    metrics = json.loads(out.read_text())
    assert metrics["modality_micro"] == pytest.approx(0.5) and metrics["colloquial"] == pytest.approx(1.0)
    assert metrics["subsets"] == {} and metrics["overall_macro"] is None  # macro needs subsets
