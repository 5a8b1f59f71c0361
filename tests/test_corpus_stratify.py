"""stratify / run_stratify: ESDR-Bench's ≤ K pairs per source × category bucket, the rest kept for training."""

from __future__ import annotations

import json
import os
from collections import Counter

import polars as pl
import pytest

from sdscore.corpus import write_manifest
from sdscore.corpus.stratify import run_stratify, stratify, stratify_buckets
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest
from sdscore.protocols.reward.spec import SPEC as REWARD

#: (source, category, pairs): one bucket over the cap, one at it, small ones, null keys.
BUCKETS = [
    ("wild", "laughter", 23),
    ("wild", "filler", 7),
    ("semi-wild", "joy", 5),
    ("scripted", None, 9),
    (None, None, 8),
    (None, "joy", 2),
]


def pairs_frame(buckets=BUCKETS) -> pl.DataFrame:
    """Rows of the buckets interleaved (so a bucket's rows are not contiguous), with ids p0, p1, …"""
    rows = []
    pending = [[(source, category)] * n for source, category, n in buckets]
    while any(pending):
        for queue in pending:
            if queue:
                rows.append(queue.pop())
    turn = [{"role": "user", "text": "hi", "audio_path": "a.wav"}]
    return pl.DataFrame(
        {
            "pair_id": [f"p{i}" for i in range(len(rows))],
            "criterion": ["modality"] * len(rows),
            "subset": [source for source, _ in rows],
            "category": [category for _, category in rows],
            "source": [source for source, _ in rows],
            "chosen": [turn] * len(rows),
            "rejected": [turn] * len(rows),
            "margin": [None] * len(rows),
        },
        schema_overrides={"margin": pl.Float64},
    )


def bucket_counter(frame: pl.DataFrame, by=("source", "category")) -> Counter:
    return Counter(frame.select(by).rows())


def test_caps_hold_and_small_buckets_stay_whole():
    pairs = pairs_frame()
    selected, remaining = stratify(pairs, per_bucket=8)
    given, kept = bucket_counter(pairs), bucket_counter(selected)
    assert kept == Counter({key: min(n, 8) for key, n in given.items()})
    assert bucket_counter(remaining) == given - kept
    assert kept[("wild", "filler")] == 7 and kept[("semi-wild", "joy")] == 5  # below the cap: whole


def test_selected_and_remaining_partition_the_input_in_input_order():
    pairs = pairs_frame()
    selected, remaining = stratify(pairs, per_bucket=3, seed=5)
    ids = pairs["pair_id"].to_list()
    chosen, rest = selected["pair_id"].to_list(), remaining["pair_id"].to_list()
    assert len(set(chosen)) == len(chosen) and not set(chosen) & set(rest)
    assert sorted(chosen + rest) == sorted(ids)
    assert chosen == [i for i in ids if i in set(chosen)]  # input order kept
    assert rest == [i for i in ids if i in set(rest)]
    assert selected.columns == pairs.columns and selected.schema == pairs.schema
    assert pl.concat([selected, remaining]).sort("pair_id").equals(pairs.sort("pair_id"))


def test_null_values_form_their_own_buckets():
    pairs = pairs_frame()
    selected, _ = stratify(pairs, per_bucket=4)
    kept = bucket_counter(selected)
    assert kept[(None, None)] == 4 and kept[(None, "joy")] == 2 and kept[("scripted", None)] == 4
    table = stratify_buckets(pairs, per_bucket=4)
    rows = {(r["source"], r["category"]): (r["available"], r["selected"]) for r in table.to_dicts()}
    assert rows[("<none>", "<none>")] == (8, 4)
    assert rows[("<none>", "joy")] == (2, 2)
    assert rows[("scripted", "<none>")] == (9, 4)
    assert table.height == len(BUCKETS) and table["selected"].sum() == sum(min(n, 4) for *_, n in BUCKETS)
    first_seen = list(dict.fromkeys(pairs.select("source", "category").rows()))
    assert [(r["source"], r["category"]) for r in table.to_dicts()] == [
        tuple("<none>" if v is None else v for v in key) for key in first_seen
    ]


def test_same_seed_same_split_other_seed_other_split():
    pairs = pairs_frame()
    first, _ = stratify(pairs, per_bucket=5, seed=11)
    again, _ = stratify(pairs, per_bucket=5, seed=11)
    other, _ = stratify(pairs, per_bucket=5, seed=12)
    assert first.equals(again)
    assert first["pair_id"].to_list() != other["pair_id"].to_list()
    assert bucket_counter(first) == bucket_counter(other)


def test_a_bucket_selection_ignores_the_other_buckets():
    pairs = pairs_frame()
    alone = pairs.filter(pl.col("source") == "wild", pl.col("category") == "laughter")
    together, _ = stratify(pairs, per_bucket=6, seed=3)
    by_itself, _ = stratify(alone, per_bucket=6, seed=3)
    assert together.filter(pl.col("category") == "laughter", pl.col("source") == "wild")["pair_id"].to_list() == (
        by_itself["pair_id"].to_list()
    )


def test_every_row_of_a_bucket_gets_an_equal_chance():
    pairs = pairs_frame([("wild", "laughter", 4)])
    hits = Counter()
    for seed in range(400):
        hits.update(stratify(pairs, per_bucket=2, seed=seed)[0]["pair_id"].to_list())
    assert set(hits) == {"p0", "p1", "p2", "p3"}
    assert all(150 <= n <= 250 for n in hits.values()), hits  # 200 expected, sd 10


def test_by_accepts_one_name_a_comma_list_or_other_columns():
    pairs = pairs_frame()
    one, _ = stratify(pairs, per_bucket=3, by="source")
    assert bucket_counter(one, ("source",)) == Counter({("wild",): 3, ("semi-wild",): 3, ("scripted",): 3, (None,): 3})
    listed, _ = stratify(pairs, per_bucket=3, by="source, category")
    assert listed.equals(stratify(pairs, per_bucket=3, by=("source", "category"))[0])
    assert stratify(pairs, per_bucket=3, by=["subset"])[0].height == 12


def test_empty_input_and_huge_cap():
    pairs = pairs_frame()
    selected, remaining = stratify(pairs.head(0))
    assert selected.height == remaining.height == 0 and selected.schema == pairs.schema
    selected, remaining = stratify(pairs, per_bucket=10_000)
    assert selected.equals(pairs) and remaining.height == 0


@pytest.mark.parametrize("per_bucket", [0, -3, 2.5, True, "50"])
def test_per_bucket_must_be_a_positive_integer(per_bucket):
    with pytest.raises(ValueError, match=r"per_bucket must be an integer ≥ 1, got"):
        stratify(pairs_frame(), per_bucket=per_bucket)


@pytest.mark.parametrize(
    ("by", "message"),
    [
        (("source", "speaker"), r"cannot stratify by column 'speaker': the frame has no such column"),
        ("", r"by must name at least one column"),
        ((), r"by must name at least one column"),
        ("source,,category", r"by must name at least one column \(no empty names\)"),
        (("source", "source"), r"by names column 'source' more than once"),
        ("chosen", r"cannot stratify by column 'chosen' of type List"),
        ("source,selected", r"cannot stratify by column 'selected': the bucket table uses that name"),
    ],
)
def test_bad_by(by, message):
    with pytest.raises(ValueError, match=message):
        stratify(pairs_frame(), by=by)


@pytest.mark.parametrize("seed", [-1, 1.5, None])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match=r"seed must be an integer ≥ 0"):
        stratify(pairs_frame(), seed=seed)


def write_jsonl_manifest(folder, frame: pl.DataFrame) -> str:
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in frame.to_dicts()))
    return str(path)


def test_run_stratify_writes_bench_and_train(tmp_path):
    pairs = pairs_frame()
    manifest = write_jsonl_manifest(tmp_path, pairs)
    out, train = tmp_path / "out" / "bench.parquet", tmp_path / "out" / "train.jsonl"
    summary = run_stratify(manifest, out, per_bucket=4, by="source,category", seed=1, remaining_out=train, spec=REWARD)
    json.dumps(summary)  # JSON-ready for the CLI
    bench, rest = read_manifest(out), read_manifest(train)
    expected, _ = stratify(read_manifest(manifest, protocol="reward"), per_bucket=4, seed=1)
    assert bench["pair_id"].to_list() == expected["pair_id"].to_list()
    assert sorted(bench["pair_id"].to_list() + rest["pair_id"].to_list()) == sorted(pairs["pair_id"].to_list())
    assert summary["counts"] == {"input": 54, "selected": bench.height, "remaining": rest.height, "buckets": 6}
    assert summary["by"] == ["source", "category"] and summary["per_bucket"] == 4 and summary["seed"] == 1
    assert {"source": "<none>", "category": "<none>", "available": 8, "selected": 4} in summary["buckets"]
    audio = bench["chosen"].list.first().struct.field("audio_path")[0]
    assert audio == os.path.join(str(tmp_path), "a.wav")  # resolved against the input's folder
    assert sorted(os.listdir(tmp_path / "out")) == ["bench.parquet", "train.jsonl"]  # no temp files


def test_run_stratify_without_remaining_and_by_an_extra_column(tmp_path):
    pairs = pairs_frame().with_columns(emotion=pl.col("category"))
    write_manifest(pairs, tmp_path / "pairs.parquet")
    summary = run_stratify(tmp_path / "pairs.parquet", tmp_path / "bench.parquet", per_bucket=2, by=["emotion"],
                           spec=REWARD)
    assert summary["remaining_out"] is None and summary["counts"]["selected"] == 8  # laughter, filler, joy, <none>
    assert sorted(os.listdir(tmp_path)) == ["bench.parquet", "pairs.parquet"]


def test_run_stratify_errors(tmp_path):
    manifest = write_jsonl_manifest(tmp_path, pairs_frame())
    with pytest.raises(ManifestError, match=r"pairs\.jsonl: cannot stratify by column 'speaker'"):
        run_stratify(manifest, tmp_path / "bench.parquet", by="source,speaker", spec=REWARD)
    with pytest.raises(ValueError, match=r"out .*pairs\.jsonl' is the input manifest"):
        run_stratify(manifest, manifest, spec=REWARD)
    with pytest.raises(ValueError, match=r"remaining_out .* is the input manifest"):
        run_stratify(manifest, tmp_path / "bench.parquet", remaining_out=manifest, spec=REWARD)
    with pytest.raises(ValueError, match=r"out and remaining_out are the same file"):
        run_stratify(manifest, tmp_path / "x.parquet", remaining_out=tmp_path / "x.parquet", spec=REWARD)
    with pytest.raises(ValueError, match=r"per_bucket must be an integer ≥ 1, got 0"):
        run_stratify(manifest, tmp_path / "bench.parquet", per_bucket=0, spec=REWARD)
    with pytest.raises(ManifestError, match=r"nope\.jsonl: no such file"):
        run_stratify(tmp_path / "nope.jsonl", tmp_path / "bench.parquet", spec=REWARD)
    with pytest.raises(ManifestError, match=r"cannot write a manifest as '\.csv'"):
        run_stratify(manifest, tmp_path / "bench.csv", spec=REWARD)
    assert os.listdir(tmp_path) == ["pairs.jsonl"]  # nothing half-written
