"""`sdscore score consistency --lhotse-group-by speaker|recording`: a Lhotse manifest's turns become one
instance per speaker across the file (the default) or one per speaker of each recording; the grouping is
a reader option the runtime passes through and records (a resume with another grouping is refused, naming
it), --write-back matches the results the same way, and any other manifest refuses the option."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet
from sdscore.cli import main
from sdscore.corpus.lhotse_format import GROUPINGS
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest
from sdscore.protocols.consistency.options import LHOTSE_GROUPINGS
from sdscore.runtime.provenance import read_provenance
from sdscore.runtime.sharded_output import ShardedOutput


@pytest.fixture(scope="module")
def two_talks(tmp_path_factory):
    """Two recordings (talk, talk2) in which the same speaker A has three turns each, as a CutSet."""
    d = tmp_path_factory.mktemp("two_talks")
    rng = np.random.default_rng(5)
    sf.write(d / "talk.wav", (0.1 * rng.standard_normal(16000 * 8)).astype(np.float32), 16000)
    talk = Recording.from_file(d / "talk.wav", recording_id="talk")
    talk2 = Recording.from_file(d / "talk.wav", recording_id="talk2")
    turns = [SupervisionSegment(id=f"{rec}-{i}", recording_id=rec, start=2.5 * i, duration=2.0, speaker="A",
                                custom={"note": f"{rec}{i}"}) for rec in ("talk", "talk2") for i in range(3)]
    cuts = CutSet.from_manifests(RecordingSet.from_recordings([talk, talk2]), SupervisionSet.from_segments(turns))
    cuts.to_file(d / "cuts.jsonl.gz")
    return d / "cuts.jsonl.gz"


def _score(manifest, out, *options: str) -> list[str]:
    return ["score", "consistency", str(manifest), "--out", str(out), "--cache-dir", str(out.parent / "cache"),
            *options]


def _refused(argv, capsys, message):
    """The CLI stops with exit code 2 and prints `message` (a regex) as its one-line error."""
    capsys.readouterr()
    assert main(argv) == 2
    printed = " ".join("".join(capsys.readouterr()).split())
    assert re.search(message, printed), printed


def test_the_cli_choices_are_the_readers_groupings():
    assert LHOTSE_GROUPINGS == GROUPINGS


def test_grouped_by_recording_a_shared_speaker_is_two_instances_and_writes_back(two_talks, tmp_path):
    by_speaker = tmp_path / "speaker.parquet"
    assert main(_score(two_talks, by_speaker)) == 0
    results = pl.read_parquet(by_speaker)
    assert results["instance_id"].to_list() == ["A"]  # every turn of A, both recordings
    assert results["turn_scores"].list.len().to_list() == [6]
    assert "read_options" not in read_provenance(by_speaker)  # the default reads as before the option
    explicit = tmp_path / "explicit.parquet"
    assert main(_score(two_talks, explicit, "--lhotse-group-by", "speaker")) == 0
    assert pl.read_parquet(explicit).equals(results)

    by_recording = tmp_path / "recording.parquet"
    scored = tmp_path / "scored" / "cuts.jsonl.gz"
    assert main(_score(two_talks, by_recording, "--lhotse-group-by", "recording", "--write-back", str(scored))) == 0
    results = pl.read_parquet(by_recording)
    assert results["instance_id"].to_list() == ["talk/A", "talk2/A"]
    assert results["turn_scores"].list.len().to_list() == [3, 3]
    assert results["error"].null_count() == 2
    assert read_provenance(by_recording)["read_options"] == {"lhotse_group_by": "recording"}
    # the written-back CutSet, read by lhotse: each supervision carries its recording's instance and turn score
    scores = dict(zip(results["instance_id"], results["turn_scores"].to_list()))
    supervisions = [s for cut in CutSet.from_file(scored) for s in cut.supervisions]
    assert [s.id for s in supervisions] == [f"{rec}-{i}" for rec in ("talk", "talk2") for i in range(3)]
    for s in supervisions:
        assert s.custom["instance_id"] == f"{s.recording_id}/A"
        assert s.custom["turn_score"] == scores[s.custom["instance_id"]][int(s.id[-1])]
        assert s.custom["note"] == s.recording_id + s.id[-1]  # the supervision's own fields stay


def test_resume_with_another_grouping_is_refused_naming_it(two_talks, tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.parquet"
    real = ShardedOutput.write_shard

    def stops_after_one_shard(self, k, frame):
        if k > 0:
            raise KeyboardInterrupt
        real(self, k, frame)

    monkeypatch.setattr(ShardedOutput, "write_shard", stops_after_one_shard)
    grouped = _score(two_talks, out, "--window-rows", "1", "--lhotse-group-by", "recording")
    assert main(grouped) == 130
    monkeypatch.setattr(ShardedOutput, "write_shard", real)
    assert sorted(p.name for p in (tmp_path / "r.parquet.parts").iterdir()) == ["part-000000.parquet", "run.json"]
    _refused(_score(two_talks, out, "--window-rows", "1", "--resume"), capsys,
             r"r.parquet.parts: the unfinished run was made with different settings.*"
             r"read_options \(\{'lhotse_group_by': 'recording'\} then, None now\)")
    _refused(_score(two_talks, out, "--resume", "--lhotse-group-by", "speaker"), capsys,
             r"read_options.lhotse_group_by \('recording' then, 'speaker' now\)")
    assert not out.exists()
    capsys.readouterr()
    assert main([*grouped, "--resume"]) == 0
    assert "1 shards kept from the interrupted run" in " ".join("".join(capsys.readouterr()).split())
    assert pl.read_parquet(out)["instance_id"].to_list() == ["talk/A", "talk2/A"]
    assert main(_score(two_talks, tmp_path / "whole.parquet", "--lhotse-group-by", "recording")) == 0
    assert pl.read_parquet(out).equals(pl.read_parquet(tmp_path / "whole.parquet"))  # as one uninterrupted run


def test_a_manifest_that_is_not_lhotse_refuses_the_grouping(two_talks, tmp_path, capsys):
    frame = read_manifest(two_talks, "consistency", lhotse_group_by="recording", resolve_audio=False)
    frame.write_parquet(tmp_path / "grouped.parquet")  # the grouped instances, as a plain Parquet manifest
    for grouping in ("recording", "speaker"):
        _refused(_score(tmp_path / "grouped.parquet", tmp_path / "r.parquet", "--lhotse-group-by", grouping), capsys,
                 r"grouped.parquet: lhotse_group_by \(--lhotse-group-by\) groups the turns of a Lhotse CutSet or "
                 r"SupervisionSet, and this manifest is not one; leave it out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grouped.parquet"]  # no results, shards or lock left
    with pytest.raises(ManifestError, match=r"grouped.parquet: lhotse_group_by .* this manifest is not one"):
        read_manifest(tmp_path / "grouped.parquet", "consistency", lhotse_group_by="speaker")
    assert main(_score(tmp_path / "grouped.parquet", tmp_path / "r.parquet")) == 0  # without it, scored as it is
    assert pl.read_parquet(tmp_path / "r.parquet")["instance_id"].to_list() == ["talk/A", "talk2/A"]
