"""`sdscore score ... --write-back PATH`: the input HF dataset (save_to_disk), Lhotse CutSet /
SupervisionSet or Kaldi data directory written again at PATH with the results added, read back with
the toolkit's own loader (datasets.load_from_disk, lhotse's CutSet/SupervisionSet.from_file, Kaldi's
text-table format); every id kept, values equal to the results Parquet; the input never changes."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet
from sdscore.cli import main
from sdscore.corpus.write_back import write_back
from sdscore.errors import SdscoreError
from sdscore.output_paths import MARKER
from sdscore.protocols.consistency.spec import SPEC as CONSISTENCY
from sdscore.protocols.naturalness.spec import SPEC as NATURALNESS
from sdscore.runtime.run import score_manifest
from sdscore.runtime.scorer import ScoringJob

datasets = pytest.importorskip("datasets")


class ToyNaturalness:
    """A fraction (wer_pocketsphinx), a float, a boolean and a text column derived from each item's id."""

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        digest = pl.col("item_id").hash(7) % 1000
        good = pl.col("error").is_null()
        return rows.select(
            "item_id",
            pl.when(good).then(digest.cast(pl.Float64) / 999).alias("wer_pocketsphinx"),
            pl.when(good).then(1 + digest.cast(pl.Float64) / 250).alias("mos_dnsmos_ovrl"),
            pl.when(good).then(digest % 2 == 0).alias("interrupted"),
            pl.when(good).then(pl.lit("hello ") + pl.col("item_id")).alias("transcript_pocketsphinx"),
            "error",
        )


def _score(manifest, out) -> pl.DataFrame:
    score_manifest(ScoringJob(NATURALNESS, ToyNaturalness), manifest, out)
    return pl.read_parquet(out)


def _digests(folder) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(3)
    paths = []
    for i in range(5):
        paths.append(d / f"a{i}.wav")
        sf.write(paths[-1], (0.1 * rng.standard_normal(8000)).astype(np.float32), 16000)
    return paths


# -- HF datasets -------------------------------------------------------------------------------------


def test_hf_dataset_dict_gets_the_result_columns_split_by_split(clips, tmp_path):
    from datasets import Audio, Dataset, DatasetDict

    def split(ids, files):
        ds = Dataset.from_dict({"item_id": ids, "answer_audio_path": [str(f) for f in files],
                                "speaker": [f"spk{k % 2}" for k in range(len(ids))]})
        return ds.cast_column("answer_audio_path", Audio(decode=False))  # embedded on save

    source = tmp_path / "ds"
    DatasetDict({"train": split(["t0", "t1", "t2"], clips[:3]), "test": split(["e0", "e1"], clips[3:])}).save_to_disk(
        str(source))
    before = _digests(source)
    results = _score(source, tmp_path / "r.parquet")
    written = write_back(source, tmp_path / "r.parquet", NATURALNESS, tmp_path / "scored")
    assert _digests(source) == before  # the input is untouched
    assert json.loads((written / MARKER).read_text())["command"] == "sdscore score --write-back"
    loaded = datasets.load_from_disk(str(written))
    assert list(loaded) == ["train", "test"]
    back = pl.concat([pl.from_arrow(loaded[name].data.table) for name in ("train", "test")])
    assert back["item_id"].to_list() == results["item_id"].to_list() == ["t0", "t1", "t2", "e0", "e1"]
    for column in ("wer_pocketsphinx", "mos_dnsmos_ovrl", "interrupted", "transcript_pocketsphinx", "error"):
        assert back[column].to_list() == results[column].to_list(), column
    assert back["speaker"].to_list() == ["spk0", "spk1", "spk0", "spk0", "spk1"]  # the input's columns stay
    original = datasets.load_from_disk(str(source))
    assert loaded["test"][1]["answer_audio_path"] == original["test"][1]["answer_audio_path"]  # audio bytes too
    # the written-back dataset already has the columns: scoring it again cannot add them twice
    _score(written, tmp_path / "again.parquet")
    with pytest.raises(SdscoreError, match=r"split 'train' already has the result column\(s\) wer_pocketsphinx"):
        write_back(written, tmp_path / "again.parquet", NATURALNESS, tmp_path / "twice")


def test_hf_dataset_without_ids_keeps_its_row_order(clips, tmp_path):
    from datasets import Dataset

    Dataset.from_dict({"answer_audio_path": [str(f) for f in clips]}).save_to_disk(str(tmp_path / "plain"))
    results = _score(tmp_path / "plain", tmp_path / "r.parquet")
    written = write_back(tmp_path / "plain", tmp_path / "r.parquet", NATURALNESS, tmp_path / "out")
    loaded = datasets.load_from_disk(str(written))
    assert loaded["answer_audio_path"] == [str(f) for f in clips]
    assert loaded["mos_dnsmos_ovrl"] == results["mos_dnsmos_ovrl"].to_list()
    assert "item_id" not in loaded.column_names  # the id the reader made up (row numbers) is not added


def test_results_of_another_manifest_are_refused(clips, tmp_path):
    from datasets import Dataset

    Dataset.from_dict({"item_id": ["x", "y"], "answer_audio_path": [str(f) for f in clips[:2]]}).save_to_disk(
        str(tmp_path / "a"))
    Dataset.from_dict({"item_id": ["x", "z"], "answer_audio_path": [str(f) for f in clips[:2]]}).save_to_disk(
        str(tmp_path / "b"))
    Dataset.from_dict({"item_id": ["x"], "answer_audio_path": [str(clips[0])]}).save_to_disk(str(tmp_path / "c"))
    _score(tmp_path / "a", tmp_path / "a.parquet")
    with pytest.raises(SdscoreError, match=r"a.parquet: row 2 is 'y' but .*b's row 2 is 'z'"):
        write_back(tmp_path / "b", tmp_path / "a.parquet", NATURALNESS, tmp_path / "out")
    with pytest.raises(SdscoreError, match=r"a.parquet: 2 result rows but .*c holds 1"):
        write_back(tmp_path / "c", tmp_path / "a.parquet", NATURALNESS, tmp_path / "out")


# -- Kaldi -------------------------------------------------------------------------------------------


def _kaldi_dir(folder, clips):
    folder.mkdir()
    (folder / "wav.scp").write_text(f"rec1 {clips[0]}\nrec2 {clips[1]}\n")
    (folder / "segments").write_text("rec1-u1 rec1 0.0 0.2\nrec1-u2 rec1 0.25 0.5\nrec2-u1 rec2 0 -1\n")
    (folder / "text").write_text("rec1-u1 HELLO\nrec1-u2 THERE\nrec2-u1 FINE\n")
    (folder / "utt2spk").write_text("rec1-u1 A\nrec1-u2 B\nrec2-u1 A\n")
    (folder / "split2").mkdir()  # a subfolder is not copied
    (folder / "split2" / "notes").write_text("x")
    return folder


def test_kaldi_dir_is_copied_with_one_scp_per_metric_in_the_reports_units(clips, tmp_path):
    source = _kaldi_dir(tmp_path / "data", clips)
    before = _digests(source)
    results = _score(source, tmp_path / "r.parquet")
    written = write_back(source / "wav.scp", tmp_path / "r.parquet", NATURALNESS, tmp_path / "scored")
    assert _digests(source) == before
    names = sorted(p.name for p in written.iterdir())
    assert names == sorted([MARKER, "wav.scp", "segments", "text", "utt2spk", "wer_pocketsphinx_pct.scp",
                            "mos_dnsmos_ovrl.scp", "interrupted.scp"])
    for name in ("wav.scp", "segments", "text", "utt2spk"):
        assert (written / name).read_bytes() == (source / name).read_bytes()
    wer = dict(line.split(maxsplit=1) for line in (written / "wer_pocketsphinx_pct.scp").read_text().splitlines())
    assert list(wer) == sorted(results["item_id"].to_list())  # every utterance id, in byte order
    for key, fraction in zip(results["item_id"], results["wer_pocketsphinx"]):
        assert float(wer[key]) == pytest.approx(100 * fraction, rel=1e-12)  # the report's WER %
    mos = dict(line.split() for line in (written / "mos_dnsmos_ovrl.scp").read_text().splitlines())
    assert {k: float(v) for k, v in mos.items()} == dict(zip(results["item_id"], results["mos_dnsmos_ovrl"]))
    # the copy reads as the same utterances
    assert _score(written, tmp_path / "copy.parquet")["item_id"].to_list() == results["item_id"].to_list()


def test_kaldi_dir_that_already_holds_a_metric_file_is_refused(clips, tmp_path):
    source = _kaldi_dir(tmp_path / "data", clips)
    _score(source, tmp_path / "r.parquet")
    (source / "mos_dnsmos_ovrl.scp").write_text("rec1-u1 3.0\n")
    with pytest.raises(SdscoreError, match=r"data: already holds mos_dnsmos_ovrl.scp"):
        write_back(source, tmp_path / "r.parquet", NATURALNESS, tmp_path / "scored")
    assert not (tmp_path / "scored").exists()


# -- Lhotse ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def talk(tmp_path_factory):
    d = tmp_path_factory.mktemp("talk")
    rng = np.random.default_rng(0)
    sf.write(d / "talk.wav", (0.1 * rng.standard_normal(16000 * 20)).astype(np.float32), 16000)
    recording = Recording.from_file(d / "talk.wav", recording_id="talk")
    turns = [SupervisionSegment(id=f"t{i}", recording_id="talk", start=2.0 * i, duration=1.5, speaker="AB"[i % 2],
                                custom={"note": f"n{i}"}) for i in range(8)]
    return RecordingSet.from_recordings([recording]), SupervisionSet.from_segments(turns)


def test_lhotse_cutset_gets_results_in_each_supervision(talk, tmp_path):
    recordings, supervisions = talk
    cuts = CutSet.from_manifests(recordings, supervisions).trim_to_supervisions(keep_overlapping=False)
    cuts.to_file(tmp_path / "cuts.jsonl.gz")
    before = _digests(tmp_path)
    out = tmp_path / "scores.parquet"
    code = main(["score", "consistency", str(tmp_path / "cuts.jsonl.gz"), "--out", str(out),
                 "--write-back", str(tmp_path / "scored" / "cuts.jsonl.gz"), "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    assert {k: v for k, v in _digests(tmp_path).items() if k in before} == before
    results = pl.read_parquet(out)
    back = CutSet.from_file(tmp_path / "scored" / "cuts.jsonl.gz")  # lhotse's own loader
    assert [c.id for c in back] == [c.id for c in cuts]
    sups = [s for c in back for s in c.supervisions]
    assert [s.id for s in sups] == [f"t{i}" for i in range(8)]  # every supervision id kept
    by_speaker = {r["instance_id"]: r for r in results.iter_rows(named=True)}
    for s in sups:
        row = by_speaker[s.speaker]
        turn = [f"t{i}" for i in range(8) if "AB"[i % 2] == s.speaker].index(s.id)
        assert s.custom["note"] == f"n{int(s.id[1:])}"  # the supervision's own fields stay
        assert s.custom["instance_id"] == s.speaker
        assert s.custom["turn_score"] == row["turn_scores"][turn]
        assert s.custom["flagged"] == (turn in row["flagged_turns"])
        assert s.custom["inconsistent_pred"] == row["inconsistent_pred"]
        assert s.custom["method"] == row["method"] and s.custom["threshold"] == row["threshold"]
        assert "scenario" not in s.custom and "error" not in s.custom
    # writing back into the written-back manifest would replace fields: refused, naming the line
    with pytest.raises(SdscoreError, match=r"line 1: supervision 't0' already has custom .*instance_id"):
        write_back(tmp_path / "scored" / "cuts.jsonl.gz", out, CONSISTENCY, tmp_path / "twice.jsonl")


def test_lhotse_supervision_set_gets_results_in_each_line(talk, tmp_path):
    recordings, supervisions = talk
    recordings.to_file(tmp_path / "x_recordings_test.jsonl.gz")
    supervisions.to_file(tmp_path / "x_supervisions_test.jsonl.gz")
    out = tmp_path / "scores.parquet"
    assert main(["score", "consistency", str(tmp_path / "x_supervisions_test.jsonl.gz"), "--out", str(out),
                 "--write-back", str(tmp_path / "y_supervisions_test.jsonl"),
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    results = pl.read_parquet(out)
    back = SupervisionSet.from_file(tmp_path / "y_supervisions_test.jsonl")
    assert [s.id for s in back] == [s.id for s in supervisions]
    scores = {s: iter(r) for s, r in zip(results["instance_id"], results["turn_scores"])}
    for s in back:
        assert s.custom["turn_score"] == next(scores[s.speaker])


def test_lhotse_write_back_of_instances_grouped_by_recording(talk, tmp_path):
    from sdscore.manifests import read_manifest
    from sdscore.protocols.registry import score

    recordings, supervisions = talk
    second = [SupervisionSegment(id=f"u{i}", recording_id="talk2", start=2.0 * i, duration=1.5, speaker="AB"[i % 2])
              for i in range(4)]
    talk2 = Recording.from_file(recordings["talk"].sources[0].source, recording_id="talk2")
    cuts = CutSet.from_manifests(RecordingSet.from_recordings([recordings["talk"], talk2]),
                                 SupervisionSet.from_segments(list(supervisions) + second))
    cuts.to_file(tmp_path / "cuts.jsonl.gz")
    grouped = read_manifest(tmp_path / "cuts.jsonl.gz", "consistency", lhotse_group_by="recording", resolve_audio=False)
    grouped.write_parquet(tmp_path / "grouped.parquet")  # what a run of the grouped instances scores
    score("consistency", tmp_path / "grouped.parquet", tmp_path / "scores.parquet")
    results = pl.read_parquet(tmp_path / "scores.parquet")
    assert results["instance_id"].to_list() == ["talk/A", "talk/B", "talk2/A", "talk2/B"]
    written = write_back(tmp_path / "cuts.jsonl.gz", tmp_path / "scores.parquet", CONSISTENCY,
                         tmp_path / "scored.jsonl.gz", lhotse_group_by="recording")
    sups = [s for c in CutSet.from_file(written) for s in c.supervisions]
    assert [s.id for s in sups] == [s.id for c in cuts for s in c.supervisions]
    for s in sups:
        assert s.custom["instance_id"] == f"{s.recording_id}/{s.speaker}"
    with pytest.raises(SdscoreError, match=r"4 result rows but .*cuts.jsonl.gz holds 2"):
        write_back(tmp_path / "cuts.jsonl.gz", tmp_path / "scores.parquet", CONSISTENCY, tmp_path / "x.jsonl")  # by speaker


def test_a_grouping_for_a_manifest_that_is_not_lhotse_is_refused(clips, tmp_path):
    source = _kaldi_dir(tmp_path / "data", clips)
    with pytest.raises(SdscoreError, match=r"data: lhotse_group_by \(--lhotse-group-by\) groups the turns of a "
                                           r"Lhotse CutSet or SupervisionSet, and this manifest is not one"):
        write_back(source, tmp_path / "r.parquet", NATURALNESS, tmp_path / "scored", lhotse_group_by="speaker")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


# -- what --write-back refuses -----------------------------------------------------------------------


def _refused(argv, capsys, message):
    """The CLI stops with exit code 2 and prints `message` (a regex) as its one-line error."""
    capsys.readouterr()
    assert main(argv) == 2
    printed = " ".join("".join(capsys.readouterr()).split())
    assert re.search(message, printed), printed


def test_write_back_refuses_what_it_cannot_write(clips, talk, tmp_path, capsys):
    pl.DataFrame({"item_id": ["a"], "answer_audio_path": [str(clips[0])]}).write_parquet(tmp_path / "m.parquet")
    base = ["score", "naturalness", str(tmp_path / "m.parquet"), "--out", str(tmp_path / "r.parquet")]
    _refused(base + ["--write-back", str(tmp_path / "out")], capsys,
             r"m.parquet: --write-back writes back into a HF dataset folder")
    recordings, supervisions = talk
    CutSet.from_manifests(recordings, supervisions).to_file(tmp_path / "cuts.jsonl.gz")
    cuts = ["score", "consistency", str(tmp_path / "cuts.jsonl.gz"), "--out", str(tmp_path / "c.parquet")]
    _refused(cuts + ["--write-back", str(tmp_path / "out.parquet")], capsys,
             r"out.parquet: --write-back of a Lhotse manifest is a manifest file; name it .jsonl or .jsonl.gz")
    _refused(cuts + ["--write-back", str(tmp_path / "cuts.jsonl.gz"), "--overwrite"], capsys,
             r"cuts.jsonl.gz: --write-back is the input")
    source = _kaldi_dir(tmp_path / "data", clips)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("mine")
    kaldi = ["score", "naturalness", str(source), "--out", str(tmp_path / "k.parquet")]
    _refused(kaldi + ["--write-back", str(tmp_path / "mine"), "--overwrite"], capsys,
             r"mine: --write-back is a folder that sdscore did not write")
    _refused(kaldi + ["--write-back", str(source / "split2")], capsys,
             r"data/split2: --write-back is a folder that sdscore did not write")
    _refused(["score", "naturalness", str(source), "--out", "s3://bucket/r.parquet", "--write-back", "x"], capsys,
             r"s3://bucket/r.parquet: --write-back needs a local --out")
    for name in ("r.parquet", "c.parquet", "k.parquet"):
        assert not (tmp_path / name).exists()
    assert (tmp_path / "mine" / "keep.txt").read_text() == "mine"
