"""Polars schemas of the manifests, one per protocol.

A manifest is a table with one row per scoring unit. Audio columns hold paths; relative paths are
resolved against the manifest's folder by the readers. Rows refer to each other only by id.
"""

from __future__ import annotations

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
#: candidate_paths the candidates and candidate_scenarios their labels (S1/S2/S3).
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
    }
)

SCHEMAS: dict[str, pl.Schema] = {
    "reward": REWARD_PAIRS,
    "judge": JUDGE_ITEMS,
    "consistency": CONSISTENCY_INSTANCES,
    "naturalness": NATURALNESS_ITEMS,
    "arena": BATTLES,
}

#: Columns a row cannot do without, per protocol; everything else may be null.
REQUIRED: dict[str, tuple[str, ...]] = {
    "reward": ("pair_id", "criterion", "chosen", "rejected"),
    "judge": ("item_id", "audio1_path", "audio2_path"),
    "consistency": ("instance_id", "task", "turn_paths"),
    "naturalness": ("item_id", "answer_audio_path"),
    "arena": ("battle_id", "model_a", "model_b", "winner"),
}

#: The column that names a row, per protocol; filled from the row number when a file lacks it.
ID_COLUMN: dict[str, str] = {
    "reward": "pair_id",
    "judge": "item_id",
    "consistency": "instance_id",
    "naturalness": "item_id",
    "arena": "battle_id",
}

#: Columns whose values together must be unique, per protocol (ids repeat across datasets).
UNIQUE_KEY: dict[str, tuple[str, ...]] = {
    "reward": ("pair_id",),
    "judge": ("dataset", "item_id"),
    "consistency": ("dataset", "instance_id"),
    "naturalness": ("item_id",),
    "arena": ("battle_id",),
}

CRITERIA = ("modality", "colloquialness")
LABELS = ("1", "2", "both_good", "both_bad")
TASKS = ("detection", "discrimination")
SCENARIOS = ("S1", "S2", "S3")
WINNERS = ("model_a", "model_b", "tie", "tie (bothbad)")
TURN_ROLES = ("user", "assistant", "system")

#: Allowed values of the enumerated columns, per protocol (null passes unless the column is required).
ALLOWED_VALUES: dict[str, dict[str, tuple[str, ...]]] = {
    "reward": {"criterion": CRITERIA},
    "judge": {name: LABELS for name in ("content", "voice_quality", "paralinguistics", "overall")},
    "consistency": {"task": TASKS, "scenario": SCENARIOS},
    "naturalness": {},
    "arena": {"winner": WINNERS},
}

#: Columns that hold audio paths (resolved relative to the manifest by the readers).
AUDIO_COLUMNS: dict[str, tuple[str, ...]] = {
    "reward": (),  # paths live inside the chosen/rejected turn structs
    "judge": ("instruction_path", "audio1_path", "audio2_path"),
    "consistency": ("turn_paths", "reference_path", "candidate_paths"),
    "naturalness": ("audio_path", "answer_audio_path", "dialogue_path"),
    "arena": (),
}
