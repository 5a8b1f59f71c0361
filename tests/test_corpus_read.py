"""read_manifest on sdscore's own files: dispatch, protocol inference, lenient types, file-level errors."""

from __future__ import annotations

import json
import re

import polars as pl
import pyarrow as pa
import pytest

from sdscore.corpus import CONSISTENCY_INSTANCES, REWARD_PAIRS, write_manifest
from sdscore.errors import ManifestError
from sdscore.manifests import infer_protocol, manifest_spec, read_manifest


def turn(role: str, audio: str) -> dict:
    return {"role": role, "text": None, "audio_path": audio}


def reward_rows(n: int = 3) -> list[dict]:
    return [
        {
            "pair_id": f"p{i}",
            "criterion": "modality",
            "subset": "synthetic",
            "chosen": [turn("user", "q.wav"), turn("assistant", f"good{i}.wav")],
            "rejected": [turn("user", "q.wav"), turn("assistant", f"bad{i}.wav")],
            "margin": float(i),
        }
        for i in range(n)
    ]


def consistency_rows() -> list[dict]:
    return [
        {
            "instance_id": "d0",
            "task": "detection",
            "dataset": "x",
            "speaker_id": "s",
            "scenario": "S2",
            "turn_paths": ["t0.wav", "t1.wav"],
            "true_turns": [1],
            "reference_path": "ref.wav",
        },
        {
            "instance_id": "m0",
            "task": "discrimination",
            "dataset": "x",
            "speaker_id": "s",
            "turn_paths": ["t0.wav"],
            "masked_turn": 1,
            "candidate_paths": ["a.wav", "b.wav", "c.wav"],
            "candidate_scenarios": ["S2", "S1", "S3"],
        },
    ]


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_own_reward_manifest_round_trips(tmp_path, suffix):
    frame = pl.DataFrame(reward_rows(), schema=REWARD_PAIRS)
    path = write_manifest(frame, tmp_path / f"pairs.{suffix}")
    assert read_manifest(path, resolve_audio=False).equals(frame)


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_own_consistency_manifest(tmp_path, suffix):
    path = write_manifest(pl.DataFrame(consistency_rows()), tmp_path / f"instances.{suffix}")
    out = read_manifest(path)
    assert out.schema == CONSISTENCY_INSTANCES
    assert out["turn_paths"][0].to_list() == [str(tmp_path / "t0.wav"), str(tmp_path / "t1.wav")]
    assert out["candidate_scenarios"][1].to_list() == ["S2", "S1", "S3"]


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_lazy_returns_a_lazyframe(tmp_path, suffix):
    path = write_manifest(pl.DataFrame(reward_rows()), tmp_path / f"pairs.{suffix}")
    out = read_manifest(path, lazy=True)
    assert isinstance(out, pl.LazyFrame)
    assert out.collect().equals(read_manifest(path))


def test_lazy_still_validates(tmp_path):
    rows = reward_rows()
    rows[2]["criterion"] = "pitch"
    path = write_manifest(pl.DataFrame(rows), tmp_path / "pairs.parquet")
    with pytest.raises(
        ManifestError, match=re.escape("pairs.parquet: row 3, column 'criterion': 'pitch' is not one of")
    ):
        read_manifest(path, lazy=True)


def test_jsonl_numbers_and_ids_are_read_leniently(tmp_path):
    rows = reward_rows(2)
    rows[0]["pair_id"], rows[0]["margin"] = 17, 1
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = read_manifest(path)
    assert out["pair_id"].to_list() == ["17", "p1"] and out["margin"].to_list() == [1.0, 1.0]


def test_jsonl_column_that_appears_late_is_kept(tmp_path):
    rows = reward_rows(150)
    for row in rows[:-1]:
        del row["margin"]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert read_manifest(path)["margin"].to_list()[-1] == 149.0


def test_jsonl_bad_value_deep_in_the_file_is_a_row_problem(tmp_path):
    rows = reward_rows(200)
    rows[150]["margin"] = "wide"
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ManifestError, match=re.escape("pairs.jsonl: row 151, column 'margin': 'wide' is not a number")):
        read_manifest(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_value_without_its_columns_shape_is_that_rows_problem(tmp_path, suffix):
    """Text where turns belong, an object where a scalar belongs: that row's error, the others kept."""
    rows = reward_rows(5)
    rows[1]["chosen"] = "[{not json"
    rows[3]["category"] = {"nested": 1}
    rows[3]["rejected"][0] = "a string turn"
    path = tmp_path / f"pairs{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        path.write_text(json.dumps(rows))
    frame = read_manifest(path, errors="collect")
    errors = frame["error"].to_list()
    assert [i for i, e in enumerate(errors) if e] == [1, 3]
    assert "column 'chosen': is str, expected a list" in errors[1]
    assert "column 'category': is dict, expected a value" in errors[3]
    assert "column 'rejected': element 0 is str, expected an object" in errors[3]
    with pytest.raises(ManifestError, match=r"row 2, column 'chosen': is str, expected a list"):
        read_manifest(path)


@pytest.mark.parametrize("first", ["null", "[1, 2]", "7", '"a row"'])
def test_a_first_line_that_is_no_object_is_that_rows_problem(tmp_path, first):
    """`null` as the first line once made the whole file read as empty (rc 0, every row lost), and
    pyarrow's JSON reader crashes the process on it: it is row 1's error, the other rows kept."""
    rows = reward_rows(3)
    path = tmp_path / "pairs.jsonl"
    path.write_text(first + "\n" + "".join(json.dumps(row) + "\n" for row in rows))
    frame = read_manifest(path, "reward", errors="collect")
    assert frame.height == 4 and frame["error"][0].startswith("row is ") and frame["error"][1:].null_count() == 3
    assert frame["pair_id"][1:].to_list() == [r["pair_id"] for r in rows]


@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_jsonl_invalid_utf8_is_named_by_line(tmp_path, chunk):
    """pyarrow's JSON reader let invalid UTF-8 through into the strings; the run then failed later
    with a raw polars error (found by the CLI fuzz test)."""
    from sdscore.corpus.native_format import check_utf8

    rows = reward_rows(3)
    rows[0]["pair_id"] = "pair-é-€"  # multi-byte characters that a small chunk splits
    lines = [json.dumps(row, ensure_ascii=False).encode() for row in rows]
    lines[1] = lines[1].replace(b'"pair_id": "', b'"pair_id": "\xe2\x28', 1)
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(ManifestError, match=r"pairs\.jsonl: line 2 is not valid UTF-8 text"):
        check_utf8(str(path), "pairs.jsonl", chunk_bytes=chunk)
    with pytest.raises(ManifestError, match=r"line 2 is not valid UTF-8 text"):
        read_manifest(path)


def test_jsonl_broken_line_is_named(tmp_path):
    rows = reward_rows(3)
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1])[:-5] + "\n" + json.dumps(rows[2]) + "\n")
    with pytest.raises(ManifestError, match=r"pairs\.jsonl: line 2 is not valid JSON"):
        read_manifest(path)


def test_jsonl_broken_first_line_is_named(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n{nope\n")
    with pytest.raises(ManifestError, match=r"pairs\.jsonl: line 2 is not valid JSON"):
        read_manifest(path)


@pytest.mark.parametrize(
    ("columns", "protocol"),
    [
        (["pair_id", "criterion", "chosen", "rejected"], "reward"),
        (["criterion", "chosen", "rejected"], "reward"),
        (["item_id", "audio1_path", "audio2_path", "content"], "judge"),
        (["task", "turn_paths"], "consistency"),
        (["answer_audio_path", "audio_path"], "naturalness"),
        (["model_a", "model_b", "winner"], "arena"),
    ],
)
def test_protocol_is_inferred_from_columns(columns, protocol):
    assert infer_protocol(columns) == protocol


def test_ambiguous_columns_list_the_candidates():
    with pytest.raises(
        ManifestError, match=r"m\.parquet: the columns fit several protocols \(judge, arena\); pass protocol="
    ):
        infer_protocol(["audio1_path", "audio2_path", "model_a", "model_b", "winner"], "m.parquet")


def test_unknown_columns_say_what_each_protocol_needs():
    with pytest.raises(
        ManifestError,
        match=r"m\.csv: cannot tell the protocol from the columns \(foo, bar\); pass protocol= one of reward",
    ):
        infer_protocol(["foo", "bar"], "m.csv")


def test_explicit_protocol_resolves_ambiguity(tmp_path):
    path = tmp_path / "items.csv"
    path.write_text("item_id,audio1_path,audio2_path,model_a,model_b,winner\n1,a.wav,b.wav,x,y,model_a\n")
    with pytest.raises(ManifestError, match="fit several protocols"):
        read_manifest(path)
    assert read_manifest(path, "judge").columns[-1] == "winner"


def test_unknown_protocol_argument(tmp_path):
    path = write_manifest(pl.DataFrame(reward_rows()), tmp_path / "pairs.parquet")
    with pytest.raises(ManifestError, match=r"pairs\.parquet: unknown protocol 'rewad'; expected one of"):
        read_manifest(path, "rewad")


def test_corpus_takes_manifest_specs_not_protocol_names(tmp_path):
    from sdscore import corpus

    path = write_manifest(pl.DataFrame(reward_rows()), tmp_path / "pairs.parquet")
    named = r"takes a ManifestSpec \(a protocol package's spec\.SPEC\), not 'reward'; sdscore\.manifest_spec\('reward'\)"
    with pytest.raises(TypeError, match=r"sdscore\.corpus\.read_manifest " + named):
        corpus.read_manifest(path, "reward")
    with pytest.raises(TypeError, match=r"sdscore\.corpus\.read_manifest " + named):
        corpus.read_manifest(path, ["reward"])
    frame = read_manifest(path, "reward")
    with pytest.raises(TypeError, match=r"sdscore\.corpus\.validate_manifest " + named):
        corpus.validate_manifest(frame, "reward")
    with pytest.raises(TypeError, match=r"sdscore\.corpus\.audio_paths " + named):
        corpus.audio_paths(frame, "reward")
    with pytest.raises(TypeError, match=r"sdscore\.corpus\.resolve_audio_paths takes a ManifestSpec .*not None$"):
        corpus.resolve_audio_paths(frame, None, str(tmp_path))


def test_corpus_infers_among_the_specs_handed_in(tmp_path):
    from sdscore import corpus

    path = write_manifest(pl.DataFrame(reward_rows()), tmp_path / "pairs.parquet")
    reward, arena = manifest_spec("reward"), manifest_spec("arena")
    assert corpus.read_manifest(path, (arena, reward)).equals(read_manifest(path, "reward"))
    assert corpus.infer_spec(["criterion", "chosen", "rejected"], [arena, reward]) is reward
    with pytest.raises(ManifestError, match=r"pairs\.parquet: cannot tell the protocol from the columns \(pair_id, "
                                            r".*\); pass protocol= one of arena \(required columns — arena: battle_id"):
        corpus.read_manifest(path, [arena])
    with pytest.raises(ValueError, match="no candidate ManifestSpec given to choose from"):
        corpus.read_manifest(path, ())


def test_missing_file(tmp_path):
    with pytest.raises(ManifestError, match=r"nothere\.parquet: no such file or folder"):
        read_manifest(tmp_path / "nothere.parquet")


def test_unsupported_suffix(tmp_path):
    path = tmp_path / "pairs.xlsx"
    path.write_bytes(b"PK")
    with pytest.raises(ManifestError, match=r"pairs\.xlsx: unsupported manifest type '\.xlsx'; expected \.parquet"):
        read_manifest(path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("m.parquet", b"garbage", r"m\.parquet: not a readable Parquet file"),
        ("m.arrow", b"garbage", r"m\.arrow: not a readable Arrow file"),
        ("m.json", b"[{", r"m\.json: not valid JSON \(.* at line 1, column 3\)"),
        ("m.json", b'{"a": 1}', r"m\.json: expected a JSON array of rows, found dict"),
        ("m.json", b'[{"winner": "tie"}, 3]', r"m\.json: row 2 is int, expected an object"),
        ("m.csv", b"model_a,model_b,winner\na,b,tie,extra\n", r"m\.csv: could not read the manifest \("),
    ],
)
def test_unreadable_files(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ManifestError, match=message):
        read_manifest(path)


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.json"])
def test_empty_file_needs_a_protocol(tmp_path, name):
    path = tmp_path / name
    path.write_text("" if name.endswith("jsonl") else "[]")
    with pytest.raises(ManifestError, match=f"{re.escape(name)}: the file holds no rows; pass protocol="):
        read_manifest(path)
    out = read_manifest(path, "arena")
    assert out.height == 0 and out.schema == manifest_spec("arena").schema


def test_arrow_ipc_file(tmp_path):
    table = pa.Table.from_pylist([{"model_a": "a", "model_b": "b", "winner": "tie"}])
    with pa.ipc.new_file(tmp_path / "battles.arrow", table.schema) as writer:
        writer.write_table(table)
    assert read_manifest(tmp_path / "battles.arrow")["winner"].to_list() == ["tie"]


def test_reading_never_opens_audio(tmp_path):
    rows = reward_rows()
    rows[0]["chosen"][1]["audio_path"] = "missing/definitely_not_here.wav"
    path = write_manifest(pl.DataFrame(rows), tmp_path / "pairs.parquet")
    assert read_manifest(path)["chosen"][0][1]["audio_path"] == str(tmp_path / "missing/definitely_not_here.wav")


def test_collect_table_reads_a_side_table_or_says_why_in_one_line(tmp_path):
    from sdscore.corpus.read import collect_table

    good = tmp_path / "segments.csv"
    good.write_text("conversation_id,text\nc1,hello\n")
    table, frame = collect_table(good, "segments table")
    assert frame.to_dicts() == [{"conversation_id": "c1", "text": "hello"}] and table.base_dir == str(tmp_path)
    bad = tmp_path / "broken.csv"
    bad.write_text('a,b\n1,2\n3,4,5,6\n"x\n')  # polars' parse error runs to several lines of advice
    with pytest.raises(ManifestError, match=r"broken\.csv: could not read the segments table \(could not parse") as error:
        collect_table(bad, "segments table")
    assert "\n" not in str(error.value)
