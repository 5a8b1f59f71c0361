"""validate_manifest: every rule's error names the file, the row and the column; collect mode keeps rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdscore.corpus import ERROR_COLUMN, REWARD_PAIRS
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest, validate_manifest


def turn(role: str = "user", text: str | None = None, audio: str | None = "a.wav") -> dict:
    return {"role": role, "text": text, "audio_path": audio}


def reward_row(pair_id: str, **changes) -> dict:
    row = {
        "pair_id": pair_id,
        "criterion": "modality",
        "chosen": [turn("user"), turn("assistant", audio="good.wav")],
        "rejected": [turn("user"), turn("assistant", audio="bad.wav")],
    }
    return {**row, **changes}


def consistency_row(instance_id: str, **changes) -> dict:
    row = {
        "instance_id": instance_id,
        "task": "detection",
        "dataset": "d",
        "speaker_id": "spk",
        "scenario": "S2",
        "turn_paths": ["t0.wav", "t1.wav", "t2.wav"],
        "true_turns": [1],
    }
    return {**row, **changes}


def discrimination_row(instance_id: str, **changes) -> dict:
    row = consistency_row(
        instance_id,
        task="discrimination",
        scenario=None,
        true_turns=None,
        masked_turn=1,
        candidate_paths=["c0.wav", "c1.wav", "c2.wav"],
        candidate_scenarios=["S3", "S1", "S2"],
    )
    return {**row, **changes}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def expect(message: str) -> str:
    """A match pattern for one exact problem line."""
    return re.escape(message)


# --- arguments -------------------------------------------------------------------------------


def test_unknown_protocol_is_named():
    with pytest.raises(ManifestError, match=r"m\.jsonl: unknown protocol 'rewards'; expected one of reward, judge"):
        validate_manifest(pl.DataFrame({"a": [1]}), "rewards", "m.jsonl")


def test_errors_mode_must_be_known():
    with pytest.raises(ValueError, match="errors must be 'raise' or 'collect', not 'ignore'"):
        validate_manifest(pl.DataFrame({"a": [1]}), "reward", "m", errors="ignore")


def test_max_errors_must_be_positive():
    with pytest.raises(ValueError, match="max_errors must be at least 1, not 0"):
        validate_manifest(pl.DataFrame({"a": [1]}), "reward", "m", max_errors=0)


# --- file-level problems -----------------------------------------------------------------------


def test_missing_required_columns_are_listed(tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", [{"pair_id": "1", "criterion": "modality", "chosen": []}])
    with pytest.raises(ManifestError, match=r"pairs\.jsonl: missing required column 'rejected' for protocol 'reward'"):
        read_manifest(path, "reward")


def test_missing_required_columns_raise_in_collect_mode_too():
    frame = pl.DataFrame({"battle_id": ["1"], "model_a": ["a"]})
    with pytest.raises(ManifestError, match=r"b\.csv: missing required columns 'model_b', 'winner'"):
        validate_manifest(frame, "arena", "b.csv", errors="collect")


def test_text_where_a_list_belongs_is_a_file_error(tmp_path):
    path = tmp_path / "instances.csv"
    path.write_text("instance_id,task,turn_paths\n1,detection,a.wav\n")
    with pytest.raises(
        ManifestError,
        match=r"instances\.csv: column 'turn_paths' is String, expected a list of text \(CSV cannot hold lists",
    ):
        read_manifest(path, "consistency")


def test_a_nested_turn_field_is_a_file_error():
    frame = pl.DataFrame([reward_row("1", chosen=[{"role": "user", "text": ["a", "b"]}])])
    with pytest.raises(
        ManifestError, match=r"p\.parquet: column 'chosen': turn field 'text' is List\(String\), expected text"
    ):
        validate_manifest(frame, "reward", "p.parquet")


def test_turns_that_are_not_structs_are_a_file_error():
    frame = pl.DataFrame({"pair_id": ["1"], "criterion": ["modality"], "chosen": [["a"]], "rejected": [["b"]]})
    with pytest.raises(ManifestError, match=r"p: column 'chosen' is List\(String\), expected a list of turn"):
        validate_manifest(frame, "reward", "p")


def test_sdiareward_turns_inside_an_sdscore_frame_are_refused():
    chosen = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    frame = pl.DataFrame([{"pair_id": "1", "criterion": "modality", "chosen": chosen, "rejected": chosen}])
    with pytest.raises(ManifestError, match=r"p: column 'chosen' holds SDiaReward turns \{role, content\}"):
        validate_manifest(frame, "reward", "p")


# --- row-level problems: file, row, column -------------------------------------------------------


def test_bad_criterion_names_file_row_and_column(tmp_path):
    rows = [reward_row(str(i)) for i in range(16)] + [reward_row("16", criterion="modalty")]
    path = write_jsonl(tmp_path / "pairs.jsonl", rows)
    with pytest.raises(
        ManifestError,
        match=expect("pairs.jsonl: row 17, column 'criterion': 'modalty' is not one of modality, colloquialness"),
    ):
        read_manifest(path)


def test_jsonl_rows_after_blank_lines_also_give_the_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(reward_row("0")) + "\n\n" + json.dumps(reward_row("1", criterion="x")) + "\n")
    with pytest.raises(
        ManifestError, match=expect("pairs.jsonl: row 2 (line 3), column 'criterion': 'x' is not one of")
    ):
        read_manifest(path)


def test_required_value_missing():
    frame = pl.DataFrame([reward_row("1"), reward_row("2", criterion=None)])
    with pytest.raises(ManifestError, match=expect("p.parquet: row 2, column 'criterion': is missing")):
        validate_manifest(frame, "reward", "p.parquet")


def test_required_value_blank():
    frame = pl.DataFrame({"item_id": ["1"], "audio1_path": ["  "], "audio2_path": ["b.wav"]})
    with pytest.raises(ManifestError, match=expect("j.json: row 1, column 'audio1_path': is empty")):
        validate_manifest(frame, "judge", "j.json")


def test_number_that_does_not_parse(tmp_path):
    path = tmp_path / "meta.csv"
    path.write_text("answer_audio_path,answer_start_time\na.wav,0.5\nb.wav,soon\n")
    with pytest.raises(
        ManifestError, match=expect("meta.csv: row 2, column 'answer_start_time': 'soon' is not a number")
    ):
        read_manifest(path)


def test_integer_that_is_fractional():
    frame = pl.DataFrame([discrimination_row("1", masked_turn=1.5)])
    with pytest.raises(ManifestError, match=expect("c: row 1, column 'masked_turn': '1.5' is not an integer")):
        validate_manifest(frame, "consistency", "c")


def test_list_element_that_is_not_an_integer():
    frame = pl.DataFrame([consistency_row("1", true_turns=["1", "x"])])
    with pytest.raises(
        ManifestError, match=expect("c: row 1, column 'true_turns': the element at index 1 is 'x', not an integer")
    ):
        validate_manifest(frame, "consistency", "c")


@pytest.mark.parametrize("column", ["content", "voice_quality", "paralinguistics", "overall"])
def test_judge_labels_must_be_known(column):
    frame = pl.DataFrame({"item_id": ["1"], "audio1_path": ["a"], "audio2_path": ["b"], column: ["3"]})
    with pytest.raises(
        ManifestError, match=expect(f"h.json: row 1, column '{column}': '3' is not one of 1, 2, both_good, both_bad")
    ):
        validate_manifest(frame, "judge", "h.json")


def test_winner_must_be_known():
    frame = pl.DataFrame({"battle_id": ["1", "2"], "model_a": ["a"] * 2, "model_b": ["b"] * 2, "winner": ["tie", "a"]})
    with pytest.raises(
        ManifestError,
        match=expect("b.csv: row 2, column 'winner': 'a' is not one of model_a, model_b, tie, tie (bothbad)"),
    ):
        validate_manifest(frame, "arena", "b.csv")


def test_task_must_be_known():
    frame = pl.DataFrame([consistency_row("1", task="detect")])
    with pytest.raises(
        ManifestError, match=expect("c: row 1, column 'task': 'detect' is not one of detection, discrimination")
    ):
        validate_manifest(frame, "consistency", "c")


def test_scenario_must_be_known():
    frame = pl.DataFrame([consistency_row("1", scenario="S4")])
    with pytest.raises(ManifestError, match=expect("c: row 1, column 'scenario': 'S4' is not one of S1, S2, S3")):
        validate_manifest(frame, "consistency", "c")


def test_turn_list_must_not_be_empty():
    frame = pl.DataFrame([reward_row("1", rejected=[])], schema=REWARD_PAIRS)
    with pytest.raises(ManifestError, match=expect("p: row 1, column 'rejected': has no turns")):
        validate_manifest(frame, "reward", "p")


def test_turn_role_must_be_known():
    frame = pl.DataFrame([reward_row("1", chosen=[turn("user"), turn("bot")])], schema=REWARD_PAIRS)
    with pytest.raises(
        ManifestError,
        match=expect("p: row 1, column 'chosen': turn 2 has role 'bot', not one of user, assistant, system"),
    ):
        validate_manifest(frame, "reward", "p")


def test_turn_role_must_be_present():
    frame = pl.DataFrame([reward_row("1", rejected=[turn(None)])], schema=REWARD_PAIRS)
    with pytest.raises(ManifestError, match=expect("p: row 1, column 'rejected': turn 1 has role null")):
        validate_manifest(frame, "reward", "p")


def test_turn_needs_text_or_audio():
    frame = pl.DataFrame([reward_row("1", chosen=[turn("user"), turn("assistant", audio=None)])], schema=REWARD_PAIRS)
    with pytest.raises(
        ManifestError, match=expect("p: row 1, column 'chosen': turn 2 has neither text nor audio_path")
    ):
        validate_manifest(frame, "reward", "p")


def test_text_only_turns_are_fine():
    frame = pl.DataFrame([reward_row("1", chosen=[turn("system", text="be brief", audio=None), turn("user")])])
    assert validate_manifest(frame, "reward", "p").height == 1


def test_turn_paths_must_not_be_empty():
    frame = pl.DataFrame(
        [consistency_row("1", turn_paths=[], true_turns=[])], schema_overrides={"turn_paths": pl.List(pl.String)}
    )
    with pytest.raises(ManifestError, match=expect("c: row 1, column 'turn_paths': has no paths")):
        validate_manifest(frame, "consistency", "c")


def test_turn_paths_must_not_hold_nulls():
    frame = pl.DataFrame([consistency_row("1", turn_paths=["a.wav", None, "c.wav"])])
    with pytest.raises(ManifestError, match=expect("c: row 1, column 'turn_paths': the path at index 1 is missing")):
        validate_manifest(frame, "consistency", "c")


def test_detection_rows_need_a_scenario():
    frame = pl.DataFrame([consistency_row("1", scenario=None)])
    with pytest.raises(
        ManifestError, match=expect("c: row 1, column 'scenario': is missing (detection rows need S1, S2 or S3)")
    ):
        validate_manifest(frame, "consistency", "c")


def test_true_turns_within_range():
    frame = pl.DataFrame([consistency_row("1", true_turns=[3])])
    with pytest.raises(
        ManifestError, match=expect("c: row 1, column 'true_turns': [3] is outside turns 0..2 (3 turn_paths)")
    ):
        validate_manifest(frame, "consistency", "c")


def test_true_turns_not_negative():
    frame = pl.DataFrame([consistency_row("1", true_turns=[-1])])
    with pytest.raises(ManifestError, match=expect("c: row 1, column 'true_turns': [-1] is outside turns 0..2")):
        validate_manifest(frame, "consistency", "c")


def test_consistent_scenario_lists_no_altered_turns():
    frame = pl.DataFrame([consistency_row("1", scenario="S1", true_turns=[0])])
    with pytest.raises(
        ManifestError, match=expect("c: row 1, column 'true_turns': scenario S1 is consistent but true_turns lists [0]")
    ):
        validate_manifest(frame, "consistency", "c")


def test_altered_scenario_lists_its_turn():
    frame = pl.DataFrame([consistency_row("1", scenario="S3", true_turns=[])])
    with pytest.raises(
        ManifestError, match=expect("c: row 1, column 'true_turns': is empty but scenario S3 alters a turn")
    ):
        validate_manifest(frame, "consistency", "c")


def test_discrimination_rows_need_candidates():
    frame = pl.DataFrame([discrimination_row("1", candidate_paths=None, candidate_scenarios=None)])
    with pytest.raises(
        ManifestError,
        match=expect("c: row 1, column 'candidate_paths': is missing (discrimination rows need candidates)"),
    ):
        validate_manifest(frame, "consistency", "c")


def test_candidate_lists_have_the_same_length():
    frame = pl.DataFrame([discrimination_row("1", candidate_scenarios=["S1", "S2"])])
    with pytest.raises(
        ManifestError, match=expect("c: row 1, column 'candidate_scenarios': has 2 entries but candidate_paths has 3")
    ):
        validate_manifest(frame, "consistency", "c")


def test_candidate_scenarios_must_be_known():
    frame = pl.DataFrame([discrimination_row("1", candidate_scenarios=["S1", "S9", "S2"])])
    with pytest.raises(
        ManifestError,
        match=expect("c: row 1, column 'candidate_scenarios': the entry at index 1 is 'S9', not one of S1, S2, S3"),
    ):
        validate_manifest(frame, "consistency", "c")


def test_masked_turn_within_range():
    frame = pl.DataFrame([discrimination_row("1", masked_turn=4)])
    with pytest.raises(
        ManifestError,
        match=expect("c: row 1, column 'masked_turn': 4 is outside 0..3 (3 turn_paths besides the masked turn)"),
    ):
        validate_manifest(frame, "consistency", "c")


def test_valid_consistency_rows_pass():
    frame = pl.DataFrame(
        [consistency_row("1"), consistency_row("2", scenario="S1", true_turns=[]), discrimination_row("3")]
    )
    out = validate_manifest(frame, "consistency", "c")
    assert out["masked_turn"].to_list() == [None, None, 1]


def test_duplicate_ids_name_the_first_row():
    frame = pl.DataFrame([reward_row("a"), reward_row("b"), reward_row("a")])
    with pytest.raises(ManifestError, match=expect("p: row 3, column 'pair_id': 'a' repeats row 1")):
        validate_manifest(frame, "reward", "p")


def test_judge_ids_repeat_only_within_a_dataset():
    frame = pl.DataFrame(
        {"item_id": ["1", "1", "1"], "dataset": ["x", "y", "x"], "audio1_path": ["a"] * 3, "audio2_path": ["b"] * 3}
    )
    with pytest.raises(
        ManifestError, match=expect("j: row 3, column 'item_id': '1' repeats row 1 (same dataset 'x')")
    ) as caught:
        validate_manifest(frame, "judge", "j")
    assert "row 2" not in str(caught.value)


# --- reporting -------------------------------------------------------------------------------------


def test_problems_are_reported_together():
    frame = pl.DataFrame([reward_row("1", criterion="a"), reward_row("2"), reward_row("3", criterion="b")])
    with pytest.raises(
        ManifestError, match=r"p: 2 problems:\n  p: row 1, column 'criterion'.*\n  p: row 3, column 'criterion'"
    ):
        validate_manifest(frame, "reward", "p")


def test_report_stops_at_max_errors():
    frame = pl.DataFrame([reward_row(str(i), criterion="bad") for i in range(50)])
    with pytest.raises(ManifestError, match=r"p: 50 problems \(first 5 shown\):") as caught:
        validate_manifest(frame, "reward", "p", max_errors=5)
    assert str(caught.value).count("\n") == 5
    assert "row 5," in str(caught.value) and "row 6," not in str(caught.value)


def test_custom_row_locator_labels_rows():
    frame = pl.DataFrame([reward_row("1", criterion="x")])
    with pytest.raises(ManifestError, match=expect("p: item #0, column 'criterion'")):
        validate_manifest(frame, "reward", "p", locate_rows=lambda rows: [f"item #{r}" for r in rows])


# --- collect mode ------------------------------------------------------------------------------------


def test_collect_mode_keeps_every_row_and_marks_bad_ones():
    rows = [reward_row("1"), reward_row("2", criterion="modalty", chosen=[]), reward_row("3"), reward_row("1")]
    out = validate_manifest(pl.DataFrame(rows, schema=REWARD_PAIRS), "reward", "p", errors="collect")
    assert out.height == 4
    assert out["pair_id"].to_list() == ["1", "2", "3", "1"]
    errors = out[ERROR_COLUMN].to_list()
    assert errors[0] is None and errors[2] is None
    assert errors[1] == (
        "column 'criterion': 'modalty' is not one of modality, colloquialness; column 'chosen': has no turns"
    )
    assert errors[3] == "column 'pair_id': '1' repeats row 1"


def test_collect_mode_nulls_values_that_do_not_cast():
    frame = pl.DataFrame(
        {
            "battle_id": ["1", "2"],
            "model_a": ["a"] * 2,
            "model_b": ["b"] * 2,
            "winner": ["tie"] * 2,
            "length_a": ["2.5", "long"],
        }
    )
    out = validate_manifest(frame, "arena", "b.csv", errors="collect")
    assert out["length_a"].to_list() == [2.5, None]
    assert out[ERROR_COLUMN].to_list() == [None, "column 'length_a': 'long' is not a number"]


def test_collect_mode_on_a_clean_frame_adds_a_null_error_column():
    out = validate_manifest(pl.DataFrame([reward_row("1")]), "reward", "p", errors="collect")
    assert out[ERROR_COLUMN].to_list() == [None]
    assert out.schema[ERROR_COLUMN] == pl.String


def test_collect_mode_replaces_an_old_error_column():
    frame = pl.DataFrame([reward_row("1")]).with_columns(error=pl.lit("stale"))
    assert validate_manifest(frame, "reward", "p", errors="collect")[ERROR_COLUMN].to_list() == [None]


def test_lazy_frames_stay_lazy():
    lazy = pl.DataFrame([reward_row("1"), reward_row("2", criterion="x")]).lazy()
    out = validate_manifest(lazy, "reward", "p", errors="collect")
    assert isinstance(out, pl.LazyFrame)
    assert out.collect()[ERROR_COLUMN].to_list()[1].startswith("column 'criterion'")
    with pytest.raises(ManifestError, match=expect("p: row 2, column 'criterion'")):
        validate_manifest(lazy, "reward", "p")


# --- typing ---------------------------------------------------------------------------------------------


def test_result_has_schema_columns_first_and_extras_after():
    frame = pl.DataFrame([reward_row("1")]).with_columns(note=pl.lit("kept"), margin=pl.lit(1))
    out = validate_manifest(frame, "reward", "p")
    assert out.columns == [*REWARD_PAIRS.names(), "note"]
    assert out.schema["margin"] == pl.Float64 and out["note"].to_list() == ["kept"]
    assert dict(list(out.schema.items())[: len(REWARD_PAIRS)]) == dict(REWARD_PAIRS)


def test_turn_structs_are_rebuilt_by_field_name():
    chosen = [{"audio_path": "a.wav", "extra": 1, "role": "user"}]
    out = validate_manifest(pl.DataFrame([reward_row("1", chosen=chosen)]), "reward", "p")
    assert out["chosen"].to_list() == [[{"role": "user", "text": None, "audio_path": "a.wav"}]]


def test_a_list_where_text_belongs_is_a_file_error():
    frame = pl.DataFrame({"item_id": [[1, 2]], "audio1_path": ["a"], "audio2_path": ["b"]})
    with pytest.raises(ManifestError, match=expect("j.parquet: column 'item_id' is List(Int64), expected text")):
        validate_manifest(frame, "judge", "j.parquet")


WINNERS = ["model_a", "model_b", "tie", "tie (bothbad)"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from([*WINNERS, "model_c", "", None]),
            st.one_of(st.none(), st.floats(0, 100).map(str), st.sampled_from(["long", "1e3", " 2"])),
        ),
        min_size=1,
        max_size=40,
    )
)
@settings(max_examples=60, deadline=None)
def test_collect_mode_never_loses_rows_and_flags_exactly_the_bad_ones(rows):
    frame = pl.DataFrame(
        {
            "battle_id": [str(i) for i in range(len(rows))],
            "model_a": ["a"] * len(rows),
            "model_b": ["b"] * len(rows),
            "winner": [winner for winner, _ in rows],
            "length_a": [length for _, length in rows],
        },
        schema_overrides={"winner": pl.String, "length_a": pl.String},
    )
    out = validate_manifest(frame, "arena", "b.csv", errors="collect")
    assert out["battle_id"].to_list() == frame["battle_id"].to_list()
    for (winner, length), error in zip(rows, out[ERROR_COLUMN].to_list(), strict=True):
        parses = length is None or pl.Series([length]).cast(pl.Float64, strict=False)[0] is not None
        assert (error is None) == (winner in WINNERS and parses)
