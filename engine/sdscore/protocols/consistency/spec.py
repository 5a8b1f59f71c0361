"""The consistency protocol's manifest: one row per task instance (SpeakerSleuth), with its own row
checks (turn and candidate lists, scenarios, altered and masked turns)."""

from __future__ import annotations

import polars as pl

from sdscore.corpus.row_checks import RowCheck, first_bad_element, list_text, path_list_checks, quoted
from sdscore.corpus.schemas import CONSISTENCY_INSTANCES, SCENARIOS, TASKS, make_spec


def consistency_row_checks() -> list[RowCheck]:
    """SpeakerSleuth's instances: turn and candidate lists, scenarios, altered and masked turns."""
    task, scenario = pl.col("task"), pl.col("scenario")
    turns, true_turns = pl.col("turn_paths"), pl.col("true_turns")
    n_turns = turns.list.len()
    candidates, labels = pl.col("candidate_paths"), pl.col("candidate_scenarios")
    detection, discrimination = task == "detection", task == "discrimination"
    out_of_range = (true_turns.list.min() < 0) | (true_turns.list.max() >= n_turns)
    masked = pl.col("masked_turn")
    return path_list_checks("turn_paths") + [
        RowCheck("scenario", detection & scenario.is_null(), pl.lit("is missing (detection rows need S1, S2 or S3)")),
        RowCheck(
            "true_turns",
            out_of_range,
            pl.format("{} is outside turns 0..{} ({} turn_paths)", list_text(true_turns), n_turns - 1, n_turns),
        ),
        RowCheck(
            "true_turns",
            detection & (scenario == "S1") & (true_turns.list.len() > 0),
            pl.format("scenario S1 is consistent but true_turns lists {}", list_text(true_turns)),
        ),
        RowCheck(
            "true_turns",
            detection & scenario.is_in(["S2", "S3"]) & (true_turns.list.len() == 0),
            pl.format("is empty but scenario {} alters a turn", scenario),
        ),
        RowCheck(
            "candidate_paths",
            discrimination & candidates.is_null(),
            pl.lit("is missing (discrimination rows need candidates)"),
        ),
        *path_list_checks("candidate_paths"),
        RowCheck(
            "candidate_scenarios",
            labels.is_not_null() & candidates.is_not_null() & (labels.list.len() != candidates.list.len()),
            pl.format("has {} entries but candidate_paths has {}", labels.list.len(), candidates.list.len()),
        ),
        _unless_graded(first_bad_element(
            "candidate_scenarios",
            ~pl.element().is_in(SCENARIOS),
            lambda n, label: pl.format(
                "the entry at index {} is {}, not one of {} (any labels need candidate_relevances)",
                n - 1, quoted(label), pl.lit(", ".join(SCENARIOS)),
            ),
        )),
        RowCheck(
            "candidate_relevances",
            pl.col("candidate_relevances").is_not_null() & candidates.is_not_null()
            & (pl.col("candidate_relevances").list.len() != candidates.list.len()),
            pl.format("has {} entries but candidate_paths has {}", pl.col("candidate_relevances").list.len(),
                      candidates.list.len()),
        ),
        RowCheck(
            "masked_turn",
            (masked < 0) | (masked > n_turns.fill_null(0)),
            pl.format("{} is outside 0..{} ({} turn_paths besides the masked turn)", masked, n_turns, n_turns),
        ),
    ]


def _unless_graded(check: RowCheck) -> RowCheck:
    """A candidate-label check that rows grading their candidates (candidate_relevances) skip."""
    return RowCheck(check.column, check.failed & pl.col("candidate_relevances").is_null(), check.message)


SPEC = make_spec(
    "consistency",
    CONSISTENCY_INSTANCES,
    required=("instance_id", "task", "turn_paths"),
    id_column="instance_id",
    unique_key=("dataset", "instance_id"),
    allowed_values={"task": TASKS, "scenario": SCENARIOS},
    audio_columns=("turn_paths", "reference_path", "candidate_paths"),
    row_checks=consistency_row_checks,
)
