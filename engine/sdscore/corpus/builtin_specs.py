"""The five built-in protocols' manifest specs, and the name → spec lookup of corpus/'s public API.

Only the public entry points (`read_manifest(path, "reward")`, `validate_manifest(frame, "judge")`,
`resolve_audio_paths`, `audio_paths`) accept a built-in protocol's name, for callers that hold no
spec; everything else in sdscore hands a ManifestSpec down (a protocol package's `spec.py`, through
the registry), so a protocol outside this table reads, validates and scores the same way.
"""

from __future__ import annotations

from sdscore.corpus.row_checks import consistency_row_checks, reward_row_checks
from sdscore.corpus.schemas import (
    BATTLES,
    CONSISTENCY_INSTANCES,
    CRITERIA,
    JUDGE_ITEMS,
    LABELS,
    NATURALNESS_ITEMS,
    REWARD_PAIRS,
    SCENARIOS,
    TASKS,
    WINNERS,
    ManifestSpec,
    make_spec,
)
from sdscore.errors import ManifestError

REWARD = make_spec(
    "reward",
    REWARD_PAIRS,
    required=("pair_id", "criterion", "chosen", "rejected"),
    id_column="pair_id",
    unique_key=("pair_id",),
    allowed_values={"criterion": CRITERIA},
    audio_columns=(),  # paths live inside the chosen/rejected turn structs
    row_checks=reward_row_checks,
)
JUDGE = make_spec(
    "judge",
    JUDGE_ITEMS,
    required=("item_id", "audio1_path", "audio2_path"),
    id_column="item_id",
    unique_key=("dataset", "item_id"),
    allowed_values={name: LABELS for name in ("content", "voice_quality", "paralinguistics", "overall")},
    audio_columns=("instruction_path", "audio1_path", "audio2_path"),
)
CONSISTENCY = make_spec(
    "consistency",
    CONSISTENCY_INSTANCES,
    required=("instance_id", "task", "turn_paths"),
    id_column="instance_id",
    unique_key=("dataset", "instance_id"),
    allowed_values={"task": TASKS, "scenario": SCENARIOS},
    audio_columns=("turn_paths", "reference_path", "candidate_paths"),
    row_checks=consistency_row_checks,
)
NATURALNESS = make_spec(
    "naturalness",
    NATURALNESS_ITEMS,
    required=("item_id", "answer_audio_path"),
    id_column="item_id",
    unique_key=("item_id",),
    allowed_values={},
    audio_columns=("audio_path", "answer_audio_path", "dialogue_path"),
)
ARENA = make_spec(
    "arena",
    BATTLES,
    required=("battle_id", "model_a", "model_b", "winner"),
    id_column="battle_id",
    unique_key=("battle_id",),
    allowed_values={"winner": WINNERS},
    audio_columns=("audio_a_path", "audio_b_path", "question_path"),
)

#: The built-in protocols' manifests, by name (what a protocol name given to the public API means).
MANIFESTS: dict[str, ManifestSpec] = {spec.name: spec for spec in (REWARD, JUDGE, CONSISTENCY, NATURALNESS, ARENA)}


def manifest_spec(protocol: str, source: str = "<frame>") -> ManifestSpec:
    """A built-in protocol's spec; a ManifestError naming source and the known protocols if there is none."""
    spec = MANIFESTS.get(protocol)
    if spec is None:
        raise ManifestError(f"{source}: unknown protocol {protocol!r}; expected one of {', '.join(MANIFESTS)}")
    return spec


def spec_of(protocol: str | ManifestSpec, source: str = "<frame>") -> ManifestSpec:
    """The spec given, or the built-in one a protocol name stands for."""
    return protocol if isinstance(protocol, ManifestSpec) else manifest_spec(protocol, source)
