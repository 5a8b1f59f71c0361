"""Lhotse manifests made by lhotse itself (CutSet / RecordingSet / SupervisionSet, .jsonl.gz) →
consistency instances per speaker, with each turn loaded as the cut's slice."""

from __future__ import annotations

import gzip
import json

import numpy as np
import polars as pl
import pytest
import sdscore.audio as audio
import soundfile as sf
import soxr
from features_audio import band_rel_rms
from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest
from sdscore.protocols.consistency.spec import SPEC as CONSISTENCY
from sdscore.runtime.run import score_manifest
from sdscore.runtime.scorer import ScoringJob

RATE = 16000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A 30 s stereo FLAC meeting and a 12 s mono WAV call, cut into speaker turns by lhotse."""
    d = tmp_path_factory.mktemp("lhotse")
    rng = np.random.default_rng(3)
    t = np.arange(44100 * 30) / 44100
    voice = 0.3 * np.sin(2 * np.pi * (180 * t + 4 * t**2)) + 0.02 * rng.standard_normal(len(t))
    sf.write(d / "meeting.flac", np.stack([voice, 0.7 * voice], axis=1).astype(np.float32), 44100)
    sf.write(d / "call.wav", (0.1 * rng.standard_normal(22050 * 12)).astype(np.float32), 22050, subtype="PCM_16")
    meeting = Recording.from_file(d / "meeting.flac", recording_id="meeting")
    call = Recording.from_file(d / "call.wav", recording_id="call")
    supervisions = [
        SupervisionSegment(id=f"meeting-{i}", recording_id="meeting", start=0.37 + i * 3.1234567,
                           duration=1.0 + 0.0123 * i, channel=[0, 1], speaker="alice" if i % 2 else "bob", text=f"t{i}")
        for i in range(8)
    ] + [
        SupervisionSegment(id=f"call-{i}", recording_id="call", start=0.5 + 2.5 * i, duration=2.0, channel=0,
                           speaker="alice" if i < 2 else "carol")
        for i in range(4)
    ]
    recordings = RecordingSet.from_recordings([meeting, call])
    sups = SupervisionSet.from_segments(supervisions)
    cuts = CutSet.from_manifests(recordings, sups).trim_to_supervisions(keep_all_channels=True)
    cuts.to_file(d / "cuts.jsonl.gz")
    recordings.to_file(d / "corpus_recordings_test.jsonl.gz")
    sups.to_file(d / "corpus_supervisions_test.jsonl.gz")
    return d, cuts


def test_cutset_of_turns_becomes_one_instance_per_speaker(corpus):
    folder, cuts = corpus
    frame = read_manifest(folder / "cuts.jsonl.gz")
    assert frame["instance_id"].to_list() == ["bob", "alice", "carol"]
    assert frame["task"].to_list() == ["detection"] * 3
    assert frame["scenario"].to_list() == ["S1"] * 3
    assert frame["true_turns"].to_list() == [[], [], []]
    by_id = {cut.supervisions[0].id: cut for cut in cuts}
    assert frame["turn_ids"][1].to_list() == ["meeting-1", "meeting-3", "meeting-5", "meeting-7", "call-0", "call-1"]
    for row in frame.iter_rows(named=True):
        for turn, path, offset, duration in zip(row["turn_ids"], row["turn_paths"], row["turn_paths_offset"],
                                                row["turn_paths_duration"]):
            cut = by_id[turn]
            # the supervision span, clipped to its cut (lhotse rounds the cut to whole frames: < 1 frame apart)
            assert (offset, duration) == pytest.approx((cut.start, cut.duration), abs=0.5 / cut.sampling_rate)
            reference = cut.load_audio()  # lhotse's own loading: [channels, samples] at the file's rate
            native = audio.load(path, cut.sampling_rate, offset=offset, duration=duration)
            np.testing.assert_allclose(native, reference.mean(axis=0), rtol=0, atol=1e-7)
            ours = audio.load(path, RATE, offset=offset, duration=duration)
            ref16 = soxr.resample(reference.mean(axis=0), cut.sampling_rate, RATE, quality="HQ")
            assert len(ours) == len(ref16)
            assert band_rel_rms(ours, ref16, RATE, 0.8 * RATE / 2) < 1e-3


def test_grouped_by_recording_a_speaker_is_one_instance_per_recording(corpus):
    folder, _cuts = corpus
    meeting = {"bob": [f"meeting-{i}" for i in (0, 2, 4, 6)], "alice": [f"meeting-{i}" for i in (1, 3, 5, 7)]}
    for name in ("cuts.jsonl.gz", "corpus_supervisions_test.jsonl.gz"):
        frame = read_manifest(folder / name, lhotse_group_by="recording")
        assert frame["instance_id"].to_list() == ["meeting/bob", "meeting/alice", "call/alice", "call/carol"]
        assert frame["speaker_id"].to_list() == ["bob", "alice", "alice", "carol"]
        assert frame["turn_ids"].to_list() == [meeting["bob"], meeting["alice"], ["call-0", "call-1"],
                                               ["call-2", "call-3"]]
        assert frame["turn_paths"].list.len().to_list() == [4, 4, 2, 2]
    by_speaker = read_manifest(folder / "cuts.jsonl.gz")  # the default: a speaker's turns across the file
    alice = by_speaker.filter(pl.col("instance_id") == "alice")
    assert alice["turn_ids"].to_list() == [meeting["alice"] + ["call-0", "call-1"]]
    with pytest.raises(ValueError, match="unknown Lhotse grouping 'session'; expected one of speaker, recording"):
        read_manifest(folder / "cuts.jsonl.gz", lhotse_group_by="session")


def test_supervision_set_with_its_recording_set_reads_like_the_cuts(corpus):
    folder, _ = corpus
    cuts = read_manifest(folder / "cuts.jsonl.gz")
    pair = read_manifest(folder / "corpus_supervisions_test.jsonl.gz")
    columns = ["instance_id", "turn_paths", "turn_ids"]
    assert pair.select(columns).equals(cuts.select(columns))
    for name in ("turn_paths_offset", "turn_paths_duration"):  # the same up to lhotse's frame rounding of cuts
        np.testing.assert_allclose(pair[name].explode().to_numpy(), cuts[name].explode().to_numpy(), atol=0.5 / 22050)


def test_recording_set_alone_and_supervisions_without_recordings_are_refused(corpus, tmp_path):
    folder, _ = corpus
    with pytest.raises(ManifestError, match="a Lhotse RecordingSet has no speakers"):
        read_manifest(folder / "corpus_recordings_test.jsonl.gz")
    lonely = tmp_path / "x_supervisions_dev.jsonl.gz"
    lonely.write_bytes((folder / "corpus_supervisions_test.jsonl.gz").read_bytes())
    with pytest.raises(ManifestError, match="needs its RecordingSet beside it \\(expected 'x_recordings_dev.jsonl.gz'\\)"):
        read_manifest(lonely)


def _rewrite(source, target, edit) -> None:
    """Copy a lhotse .jsonl.gz, passing each parsed line through edit(index, row) -> row or raw text."""
    with gzip.open(source, "rt") as fin:
        rows = [json.loads(line) for line in fin]
    with gzip.open(target, "wt") as fout:
        for i, row in enumerate(rows):
            new = edit(i, row)
            fout.write((new if isinstance(new, str) else json.dumps(new)) + "\n")


def test_bad_cuts_are_their_speakers_errors_and_other_speakers_go_on(corpus, tmp_path):
    folder, _ = corpus

    def edit(i, row):
        if i == 0:  # bob's first turn: a command source
            row["recording"]["sources"][0] = {"type": "command", "channels": [0, 1], "source": "sox x.flac -t wav - |"}
        if i == 2:  # bob again: a duplicate supervision id
            row["supervisions"][0]["id"] = "meeting-0"
        if i == 8:  # alice's call turn: one channel of a stereo recording
            row["recording"]["channel_ids"] = [0, 1]
        if i == 10:  # carol: no supervision at all
            row["supervisions"] = []
        if i == 11:  # carol: a speed-perturbed recording
            row["recording"]["transforms"] = [{"name": "Speed", "kwargs": {"factor": 1.1}}]
        return row

    bad = tmp_path / "bad_cuts.jsonl.gz"
    _rewrite(folder / "cuts.jsonl.gz", bad, edit)
    frame = read_manifest(bad, errors="collect")
    errors = dict(zip(frame["instance_id"], frame["error"]))
    assert "line 1: recording 'meeting' is a 'command' source" in errors["bob"]
    assert "local files only" in errors["bob"]
    assert "line 3: supervision id 'meeting-0' is listed twice (first on line 1)" in errors["bob"]
    assert "line 9: the cut reads channel(s) [0] of a recording with channels [0, 1]" in errors["alice"]
    assert errors["carol"].startswith("line 12: recording 'call' has audio transforms (Speed)")
    assert frame.filter(pl.col("instance_id") == "carol")["turn_paths"][0].len() == 1
    unassigned = frame.filter(pl.col("speaker_id").is_null())
    assert unassigned["instance_id"].to_list() == ["call-2"]
    assert unassigned["error"][0].startswith("line 11: cut has no supervisions (no speaker)")
    with pytest.raises(ManifestError, match=r"line 1: recording 'meeting' is a 'command' source"):
        read_manifest(bad)


def test_a_line_that_is_not_json_names_its_line(corpus, tmp_path):
    folder, _ = corpus
    bad = tmp_path / "broken_cuts.jsonl.gz"
    _rewrite(folder / "cuts.jsonl.gz", bad, lambda i, row: "{not json" if i == 4 else row)
    with pytest.raises(ManifestError, match=r"broken_cuts.jsonl.gz: line 5 is not valid JSON"):
        read_manifest(bad)


def test_plain_jsonl_and_custom_labels(corpus, tmp_path):
    folder, _ = corpus

    def edit(i, row):
        if row["supervisions"][0]["speaker"] == "carol":
            row["supervisions"][0]["custom"] = {"scenario": "S2", "altered": i == 11}
        return row

    plain = tmp_path / "labelled_cuts.jsonl"
    gz = tmp_path / "labelled.jsonl.gz"
    _rewrite(folder / "cuts.jsonl.gz", gz, edit)
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    frame = read_manifest(plain)
    carol = frame.filter(pl.col("instance_id") == "carol").row(0, named=True)
    assert carol["scenario"] == "S2" and carol["true_turns"] == [1]


class SliceLengthScorer:
    """A consistency Scorer that loads every turn whole and reports its length and sum at 16 kHz."""

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        out = []
        for row in rows.iter_rows(named=True):
            if row["error"] is not None:
                out.append({"instance_id": row["instance_id"], "lengths": None, "sums": None, "error": row["error"]})
                continue
            batch = audio.load_many(row["turn_paths"], RATE)
            out.append({"instance_id": row["instance_id"], "lengths": batch.lengths.tolist(),
                        "sums": [float(w.astype(np.float64).sum()) for w in batch],
                        "error": next((e for e in batch.errors if e), None)})
        return pl.DataFrame(out, schema={"instance_id": pl.String, "lengths": pl.List(pl.Int64),
                                         "sums": pl.List(pl.Float64), "error": pl.String})


def test_scoring_run_sees_each_turn_as_the_cuts_slice(corpus, tmp_path):
    folder, cuts = corpus
    out = tmp_path / "results.parquet"
    summary = score_manifest(ScoringJob(CONSISTENCY, SliceLengthScorer), folder / "cuts.jsonl.gz", out, window_rows=2)
    assert summary.rows == 3 and summary.failed == 0
    results = pl.read_parquet(out)
    manifest = read_manifest(folder / "cuts.jsonl.gz")
    by_id = {cut.supervisions[0].id: cut for cut in cuts}
    for row, turns in zip(results.iter_rows(named=True), manifest["turn_ids"]):
        for length, total, turn in zip(row["lengths"], row["sums"], turns):
            cut = by_id[turn]
            expected = audio.load(cut.recording.sources[0].source, RATE, offset=cut.start, duration=cut.duration)
            assert length == len(expected)
            assert total == pytest.approx(float(expected.astype(np.float64).sum()), abs=1e-6)
    assert not list(tmp_path.glob(".results.parquet.stage-*"))  # the cut slices went with the staging folder
