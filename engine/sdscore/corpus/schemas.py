"""Polars schemas of the built-in protocols' manifests, and ManifestSpec: what a manifest is.

A manifest is a table with one row per scoring unit. Audio columns hold paths; relative paths are
resolved against the manifest's folder by the readers. Rows refer to each other only by id.
The column schemas live here because corpus/'s format readers convert into them (SDiaReward →
REWARD_PAIRS, HCoT → JUDGE_ITEMS, ...); each protocol's ManifestSpec, built from its schema, lives
in its own package (protocols/<name>/spec.py) and is handed down: corpus/ never looks one up by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import polars as pl

#: One spoken turn of an episode: who speaks, what is said, and/or the audio of it.
TURN = pl.Struct({"role": pl.String, "text": pl.String, "audio_path": pl.String})

#: reward — one row per preference pair (SDiaReward / ESDR-Bench).
REWARD_PAIRS = pl.Schema(
    {
        "pair_id": pl.String,
        "criterion": pl.String,  # "modality" | "colloquialness"
        "subset": pl.String,  # e.g. wild, semi-wild, scripted, colloquial, synthetic
        "category": pl.String,  # nullable secondary category
        "source": pl.String,  # nullable corpus of origin
        "chosen": pl.List(TURN),
        "rejected": pl.List(TURN),
        "margin": pl.Float64,  # nullable; Bradley–Terry margin
    }
)

#: judge — one row per instruction with two responses (TRACE / HCoT).
JUDGE_ITEMS = pl.Schema(
    {
        "item_id": pl.String,
        "dataset": pl.String,
        "instruction_id": pl.String,
        "instruction_text": pl.String,
        "instruction_path": pl.String,
        "model_a": pl.String,
        "model_b": pl.String,
        "audio1_path": pl.String,
        "audio2_path": pl.String,
        # human labels, each in {"1", "2", "both_good", "both_bad"}; nullable
        "content": pl.String,
        "voice_quality": pl.String,
        "paralinguistics": pl.String,
        "overall": pl.String,
    }
)

#: consistency — one row per task instance (SpeakerSleuth).
#: detection rows: turn_paths are the speaker's N turns, true_turns the altered ones (0-based).
#: discrimination rows: turn_paths are the unmasked context turns, masked_turn the masked index,
#: candidate_paths the candidates and candidate_scenarios their labels (S1/S2/S3, or any distinct
#: labels when candidate_relevances grades them, e.g. voice-cloning systems ranked by people).
#: dialogue_speakers/dialogue_texts give the interlocutors' turns as text for the text-context condition.
CONSISTENCY_INSTANCES = pl.Schema(
    {
        "instance_id": pl.String,
        "task": pl.String,  # "detection" | "discrimination"
        "dataset": pl.String,
        "speaker_id": pl.String,
        "scenario": pl.String,  # S1 | S2 | S3 on detection rows, null on discrimination rows
        "turn_paths": pl.List(pl.String),
        "true_turns": pl.List(pl.Int64),
        "reference_path": pl.String,  # nullable
        "masked_turn": pl.Int64,  # nullable
        "candidate_paths": pl.List(pl.String),  # nullable
        "candidate_scenarios": pl.List(pl.String),  # nullable
        # optional, for LALM judges and graded ranking:
        "speaker_name": pl.String,  # the target speaker's name in prompts (default: speaker_id)
        "dialogue_speakers": pl.List(pl.String),  # every turn's speaker, in dialogue order
        "dialogue_texts": pl.List(pl.String),  # every turn's text; null where the target speaks (turn_paths, in order)
        "candidate_relevances": pl.List(pl.Float64),  # graded relevance per candidate (then labels are free)
    }
)

#: naturalness — one row per question/answer item (SPEARBench metadata CSV columns, plus
#: dialogue_path: an optional two-channel file, channel 0 the asker and channel 1 the answerer).
NATURALNESS_ITEMS = pl.Schema(
    {
        "item_id": pl.String,
        "conversation_id": pl.String,
        "audio_path": pl.String,  # question (with context) audio
        "answer_audio_path": pl.String,
        "dialogue_path": pl.String,  # nullable
        "context_end_time": pl.Float64,
        "question_end_time": pl.Float64,
        "answer_start_time": pl.Float64,  # relative to question end; < 0 means interruption
        "answer_duration": pl.Float64,
        "speakers": pl.String,
        "transcript_question": pl.String,
        "transcript_answer": pl.String,
        "finish_reason": pl.String,
        "subset": pl.String,  # nullable: e.g. a Seamless Interaction conversation's improvised / naturalistic
        "split": pl.String,  # nullable: e.g. train / dev / test
        "system": pl.String,  # nullable: the system whose answer this is; null = the original human answer
        "relationship": pl.String,  # nullable: the speakers' relationship (Seamless Interaction's annotation)
        "conversation_prompt": pl.String,  # nullable: the prompt the participants were given
    }
)

#: arena — one row per battle (S2S-Arena / Chatbot Arena).
BATTLES = pl.Schema(
    {
        "battle_id": pl.String,
        "model_a": pl.String,
        "model_b": pl.String,
        "winner": pl.String,  # "model_a" | "model_b" | "tie" | "tie (bothbad)"
        "domain": pl.String,  # nullable
        "judge": pl.String,  # nullable: "human" or a judge model's name
        "prompt_id": pl.String,  # nullable; the same prompt across swapped orders
        "length_a": pl.Float64,  # nullable: response durations in seconds
        "length_b": pl.Float64,
        "audio_a_path": pl.String,  # nullable: the answers' audio (an audio judge hears them; durations)
        "audio_b_path": pl.String,
        "question_path": pl.String,  # nullable: the question's audio, or its text below
        "question_text": pl.String,
    }
)

CRITERIA = ("modality", "colloquialness")
LABELS = ("1", "2", "both_good", "both_bad")
TASKS = ("detection", "discrimination")
SCENARIOS = ("S1", "S2", "S3")
WINNERS = ("model_a", "model_b", "tie", "tie (bothbad)")
TURN_ROLES = ("user", "assistant", "system")


def no_row_checks() -> list:
    """The row checks of a spec that asks for none beyond its columns, enumerations and unique key."""
    return []


@dataclass(frozen=True)
class ManifestSpec:
    """Everything the readers and the validator know about one protocol's manifest: a value that a
    protocol hands down (corpus/ validates, reads and resolves audio with the spec it is given)."""

    #: The protocol's name (the run record, messages and format hints name it).
    name: str
    #: The typed columns, in output order.
    schema: pl.Schema = field(compare=False)
    #: Columns a row cannot do without; everything else may be null.
    required: tuple[str, ...]
    #: The column that names a row; filled from the row number when a file lacks it.
    id_column: str
    #: Columns whose values together must be unique (ids repeat across datasets).
    unique_key: tuple[str, ...]
    #: Allowed values of the enumerated columns (null passes unless the column is required).
    allowed_values: Mapping[str, tuple[str, ...]] = field(compare=False)
    #: Columns that hold audio paths (resolved relative to the manifest by the readers).
    audio_columns: tuple[str, ...]
    #: The protocol's own row checks beyond the above: a module-level function (picklable, so
    #: worker processes validate with it) returning sdscore.corpus.row_checks.RowCheck values.
    row_checks: Callable[[], list] = field(default=no_row_checks, compare=False)
    #: Result columns held as fractions that the protocol's report shows in percent (WER, CER): the
    #: Kaldi scp files (`--format scp`, a Kaldi `--write-back`) write them x100 as `<column>_pct.scp`.
    percent_columns: tuple[str, ...] = field(default=(), compare=False)


def make_spec(
    name: str,
    schema: pl.Schema,
    *,
    required: tuple[str, ...],
    id_column: str,
    unique_key: tuple[str, ...],
    allowed_values: Mapping[str, tuple[str, ...]],
    audio_columns: tuple[str, ...],
    row_checks: Callable[[], list] = no_row_checks,
    percent_columns: tuple[str, ...] = (),
) -> ManifestSpec:
    """A ManifestSpec (allowed_values copied into a plain dict, so the spec pickles)."""
    return ManifestSpec(name, schema, required, id_column, unique_key, dict(allowed_values), audio_columns,
                        row_checks, tuple(percent_columns))


def require_spec(spec: object, function: str) -> ManifestSpec:
    """spec, when it is a ManifestSpec; a TypeError saying where a protocol's name is taken otherwise."""
    if isinstance(spec, ManifestSpec):
        return spec
    hint = f"; sdscore.manifest_spec({spec!r}) gives a protocol's spec by name" if isinstance(spec, str) else ""
    raise TypeError(f"{function} takes a ManifestSpec (a protocol package's spec.SPEC), not {spec!r}{hint}")
