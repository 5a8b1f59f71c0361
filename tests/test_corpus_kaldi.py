"""Kaldi data directories (wav.scp, segments, text, utt2spk) → naturalness items, slices included."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import sdscore.audio as audio
import soundfile as sf
from sdscore import corpus
from sdscore.errors import ManifestError
from sdscore.manifests import manifest_spec, manifest_specs, read_manifest
from sdscore.runtime.manifest_windows import ManifestWindows


def write_data_dir(folder, *, wav_scp: str, segments: str | None = None, text: str | None = None,
                   utt2spk: str | None = None):
    """A Kaldi data directory laid out as https://kaldi-asr.org/doc/data_prep.html documents it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in (("wav.scp", wav_scp), ("segments", segments), ("text", text), ("utt2spk", utt2spk)):
        if body is not None:
            (folder / name).write_text(body)
    return folder


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    d = tmp_path_factory.mktemp("kaldi_audio")
    rng = np.random.default_rng(7)
    long = (0.1 * rng.standard_normal(22050 * 20)).astype(np.float32)
    sf.write(d / "session1.flac", long, 22050)
    sf.write(d / "answer2.wav", (0.1 * rng.standard_normal(16000)).astype(np.float32), 16000, subtype="PCM_16")
    return d


def test_segments_become_slices_of_the_recordings(recordings, tmp_path):
    data = write_data_dir(
        tmp_path / "data" / "test",
        wav_scp=f"sess1 {recordings / 'session1.flac'}\nans2 {recordings / 'answer2.wav'}\n",
        segments="sess1-utt1 sess1 0.50 2.25\nsess1-utt2 sess1 10.125 12.0\nans2-utt1 ans2 0 -1\n",
        text="sess1-utt1 HELLO THERE\nsess1-utt2 HOW ARE YOU\nans2-utt1 FINE THANKS\n",
        utt2spk="sess1-utt1 spk1\nsess1-utt2 spk2\nans2-utt1 spk1\n",
    )
    frame = read_manifest(data)
    assert frame["item_id"].to_list() == ["sess1-utt1", "sess1-utt2", "ans2-utt1"]
    assert frame["conversation_id"].to_list() == ["sess1", "sess1", "ans2"]
    assert frame["transcript_answer"].to_list() == ["HELLO THERE", "HOW ARE YOU", "FINE THANKS"]
    assert frame["speaker"].to_list() == ["spk1", "spk2", "spk1"]
    assert frame["answer_audio_path_offset"].to_list() == [0.5, 10.125, 0.0]
    assert frame["answer_audio_path_duration"].to_list() == [1.75, 1.875, None]
    # the slice is exactly the frame range of the recording (read at its own rate)
    x, _ = sf.read(recordings / "session1.flac", dtype="float32")
    row = frame.row(1, named=True)
    y = audio.load(row["answer_audio_path"], 22050, offset=row["answer_audio_path_offset"],
                   duration=row["answer_audio_path_duration"])
    np.testing.assert_array_equal(y, x[round(10.125 * 22050): round(12.0 * 22050)])
    # the wav.scp file itself reads the same as its folder
    assert read_manifest(data / "wav.scp").equals(frame)


def test_without_segments_each_recording_is_one_item_with_paths_relative_to_the_folder(recordings, tmp_path):
    data = write_data_dir(tmp_path / "d", wav_scp="a1 audio/answer2.wav\n\nb2 audio/other.wav\n",
                          text="a1 yes\n")
    (data / "audio").mkdir()
    (data / "audio" / "answer2.wav").write_bytes((recordings / "answer2.wav").read_bytes())
    frame = read_manifest(data)
    assert frame["item_id"].to_list() == ["a1", "b2"]
    assert frame["answer_audio_path"].to_list() == [str(data / "audio" / "answer2.wav"), str(data / "audio" / "other.wav")]
    assert frame["transcript_answer"].to_list() == ["yes", None]
    assert frame["answer_audio_path_offset"].to_list() == [None, None]


def test_a_command_pipe_is_refused_with_its_line_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    data = write_data_dir(tmp_path / "d", wav_scp=f"ok /x/a.wav\npiped touch {marker} |\n")
    frame = read_manifest(data, errors="collect")
    assert frame["error"][0] is None
    assert "wav.scp line 2: 'piped' is a command pipe" in frame["error"][1]
    assert "does not run commands" in frame["error"][1]
    with pytest.raises(ManifestError, match=r"row 2.*wav.scp line 2: 'piped' is a command pipe"):
        read_manifest(data)
    assert not marker.exists()


@pytest.mark.parametrize(
    "segments, problem",
    [
        ("u1 rec1 1.0\n", r"segments line 1: expected '<utterance-id> <recording-id> <start> <end>', found 3 fields"),
        ("u1 rec1 one 2\n", r"segments line 1: start 'one' and end '2' must be numbers of seconds"),
        ("u1 rec1 2.0 1.5\n", r"segments line 1: end 1.5 must be after start 2.0"),
        ("u1 rec1 -1 1.5\n", r"segments line 1: start -1 must be a non-negative number of seconds"),
        ("u1 nosuch 0 1\n", r"segments line 1: recording 'nosuch' is not in wav.scp"),
    ],
)
def test_bad_segment_lines_are_their_rows_errors(tmp_path, segments, problem):
    data = write_data_dir(tmp_path / "d", wav_scp="rec1 /x/a.wav\n", segments="good rec1 0 1\n" + segments)
    frame = read_manifest(data, errors="collect")
    assert frame.height == 2 and frame["error"][0] is None
    assert frame["error"][1] is not None
    with pytest.raises(ManifestError, match=problem.replace("line 1", "line 2")):
        read_manifest(data)


def test_duplicate_keys(tmp_path):
    dup_rec = write_data_dir(tmp_path / "a", wav_scp="r1 /x/a.wav\nr2 /x/b.wav\nr1 /x/c.wav\n")
    with pytest.raises(ManifestError, match=r"wav.scp: line 3: recording 'r1' is listed twice \(first on line 1\)"):
        read_manifest(dup_rec)
    dup_utt = write_data_dir(tmp_path / "b", wav_scp="r1 /x/a.wav\n", segments="u1 r1 0 1\nu2 r1 1 2\nu1 r1 2 3\n")
    frame = read_manifest(dup_utt, errors="collect")
    assert frame["error"][:2].to_list() == [None, None]
    assert frame["error"][2] == "column 'item_id': 'u1' repeats row 1"
    dup_text = write_data_dir(tmp_path / "c", wav_scp="r1 /x/a.wav\n", text="r1 a\nr1 b\n")
    with pytest.raises(ManifestError, match=r"text: line 2: utterance 'r1' is listed twice"):
        read_manifest(dup_text)


def test_text_or_utt2spk_for_an_unknown_utterance_is_refused(tmp_path):
    data = write_data_dir(tmp_path / "d", wav_scp="r1 /x/a.wav\n", segments="u1 r1 0 1\n", utt2spk="u1 s\nu9 s\n")
    with pytest.raises(ManifestError, match=r"utt2spk: line 2: utterance 'u9' is not in segments"):
        read_manifest(data)


def test_a_line_without_a_path_and_a_folder_without_wav_scp(tmp_path):
    data = write_data_dir(tmp_path / "d", wav_scp="r1 /x/a.wav\nr2\n")
    with pytest.raises(ManifestError, match=r"wav.scp line 2: no file name after the recording id 'r2'"):
        read_manifest(data)
    with pytest.raises(ManifestError, match="holds .*Kaldi rows for protocol 'naturalness', not 'reward'"):
        read_manifest(data, protocol="reward")
    with pytest.raises(ManifestError, match="holds .*Kaldi rows for protocol 'naturalness', not one of reward, arena"):
        corpus.read_manifest(data, (manifest_spec("reward"), manifest_spec("arena")))


def test_runtime_cuts_the_segments_and_marks_missing_audio_and_bad_slices(recordings, tmp_path):
    data = write_data_dir(
        tmp_path / "d",
        wav_scp=f"s1 {recordings / 'session1.flac'}\nmissing {tmp_path / 'gone.wav'}\n",
        segments="u1 s1 3.0 4.5\nu2 missing 0 1\nu3 s1 19.5 25\nu4 s1 30 31\nu5 s1 5 -1\n",
    )
    (tmp_path / "stage").mkdir()
    windows = ManifestWindows(data, tuple(manifest_specs().values()), tmp_path / "stage")  # the format names its spec
    frame = windows.window(0, windows.n_rows)
    x, _ = sf.read(recordings / "session1.flac", dtype="float32")
    y, rate = sf.read(frame["answer_audio_path"][0], dtype="float32")
    assert rate == 22050
    np.testing.assert_array_equal(y, x[3 * 22050: 4 * 22050 + 11025])
    errors = frame["error"].to_list()
    assert errors[0] is None and errors[4] is None
    assert errors[1] == f"column 'answer_audio_path': {tmp_path / 'gone.wav'}: no such file"
    assert "slice 19.5–25 s ends beyond the end of the file (20 s)" in errors[2]
    assert "slice offset 30 s is at or beyond the end of the file (20 s)" in errors[3]
    tail, _ = sf.read(frame["answer_audio_path"][4], dtype="float32")
    np.testing.assert_array_equal(tail, x[5 * 22050:])
    assert isinstance(frame, pl.DataFrame)
