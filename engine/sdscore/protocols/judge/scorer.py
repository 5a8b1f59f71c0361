"""The judge protocol's scoring: score_judge judges item rows and fuses C/VQ/P into overall;
JudgeScorer, the Scorer that `sdscore score judge` streams a manifest through, sets up one judge
(judges.make_judge: the rule baseline or an LLM at an OpenAI-compatible endpoint) and one blueprint
builder once; scoring_job builds its ScoringJob."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.errors import JudgeError
from sdscore.llm_judges.client import base_url_from_env
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.metrics.fusion import fuse
from sdscore.protocols.judge.interface import Judge, JudgeItem, Progress, Verdict
from sdscore.protocols.judge.judges import make_judge
from sdscore.protocols.judge.llm_judge import LLMJudge
from sdscore.protocols.judge.results import LABEL_COLUMNS, RAW_REPLY, RESULT_SCHEMA, check_fusion
from sdscore.protocols.judge.settings import OPTIONS, LlmJudgeSettings, judge_settings
from sdscore.protocols.judge.spec import SPEC
from sdscore.runtime.scorer import ScoringJob


def _column(frame: pl.DataFrame, name: str) -> list:
    return frame.get_column(name).to_list() if name in frame.columns else [None] * frame.height


def _blueprint(blueprints: Mapping[str, dict] | None, path: str | None, role: str) -> dict | None:
    """The blueprint of path; JudgeError when one is needed but missing or failed."""
    if blueprints is None or path is None:
        return None
    blueprint = blueprints.get(path)
    if blueprint is None:
        raise JudgeError(f"no blueprint for the {role} ({path})")
    if blueprint.get("error"):
        raise JudgeError(f"the {role}'s blueprint failed: {blueprint['error']}")
    return blueprint


def judge_items(
    frame: pl.DataFrame, judge: Judge, blueprints: Mapping[str, dict] | None
) -> list[JudgeItem | JudgeError]:
    """JudgeItems from a JUDGE_ITEMS frame with the blueprints the judge needs, looked up by audio path;
    a needed blueprint that is missing or failed becomes the row's error."""
    responses = blueprints if judge.needs_blueprints else None
    instructions = blueprints if judge.needs_instruction_blueprint else None
    out: list[JudgeItem | JudgeError] = []
    columns = ("item_id", "audio1_path", "audio2_path", "instruction_text", "instruction_path", "error")
    for item_id, audio1, audio2, text, instruction_path, error in zip(*(_column(frame, c) for c in columns)):
        if error is not None:  # the manifest reader refused the row
            out.append(JudgeError(f"item {item_id}: {error}"))
            continue
        try:
            out.append(
                JudgeItem(
                    item_id=str(item_id),
                    audio1_path=audio1,
                    audio2_path=audio2,
                    instruction_text=text,
                    instruction_path=instruction_path,
                    blueprint1=_blueprint(responses, audio1, "response 1"),
                    blueprint2=_blueprint(responses, audio2, "response 2"),
                    instruction_blueprint=_blueprint(instructions, instruction_path, "instruction"),
                )
            )
        except JudgeError as error:
            out.append(JudgeError(f"item {item_id}: {error}"))
    return out


def blueprint_paths(frame: pl.DataFrame, judge: Judge) -> list[str]:
    """The distinct audio files whose blueprints the judge needs, in first-seen order."""
    columns = ["audio1_path", "audio2_path"] if judge.needs_blueprints else []
    if judge.needs_instruction_blueprint:
        columns.append("instruction_path")
    if "error" in frame.columns:  # rows the manifest reader refused need nothing
        frame = frame.filter(pl.col("error").is_null())
    paths = [p for c in columns for p in _column(frame, c) if p]
    return list(dict.fromkeys(paths))


def score_judge(
    frame: pl.DataFrame,
    judge: Judge,
    fusion: str = "speakbench",
    blueprints: Mapping[str, dict] | None = None,
    progress: Progress | None = None,
) -> pl.DataFrame:
    """One row per input row: C/VQ/P labels, fused overall (or the judge's own overall label in the
    original-label mode, C/VQ/P null), reasoning, cost, error, for an LLM judge raw_reply (the reply of
    a row whose reply did not parse), and the manifest's label columns; blueprints (audio path →
    blueprint) are built with build_blueprints when not given."""
    check_fusion(fusion)
    if blueprints is None and (judge.needs_blueprints or judge.needs_instruction_blueprint):
        from sdscore.features.blueprint import build_blueprints

        paths = blueprint_paths(frame, judge)
        blueprints = dict(zip(paths, build_blueprints(paths)))
    items = judge_items(frame, judge, blueprints)
    ready = [item for item in items if isinstance(item, JudgeItem)]
    verdicts = judge.judge_many(ready, progress) if ready else []
    if len(verdicts) != len(ready):
        raise JudgeError(f"judge {judge.name} returned {len(verdicts)} verdicts for {len(ready)} items")
    given = iter(verdicts)
    results: list[Verdict | JudgeError] = [next(given) if isinstance(i, JudgeItem) else i for i in items]
    schema = RESULT_SCHEMA
    if getattr(judge, "keeps_replies", False):
        schema = pl.Schema({**RESULT_SCHEMA, RAW_REPLY: pl.String})
    rows: dict[str, list] = {name: [] for name in schema}
    for item_id, result in zip(_column(frame, "item_id"), results):
        rows["item_id"].append(None if item_id is None else str(item_id))
        if isinstance(result, Verdict):
            labels = (result.content, result.voice_quality, result.paralinguistics)
            overall = result.overall if result.overall is not None else fuse(*labels, rule=fusion)
            values = [*labels, overall, result.reasoning, result.cost, None, None]
        else:
            raw = result.raw if isinstance(result, ReplyError) else None
            values = [None] * 6 + [str(result) or type(result).__name__, raw]
        for name, value in zip(list(schema)[1:], values):
            rows[name].append(value)
    out = pl.DataFrame(rows, schema=schema)
    labels = [name for name in LABEL_COLUMNS if name in frame.columns]
    return out.with_columns(frame.select(labels).cast(pl.String)) if labels else out


class JudgeScorer:
    """Settings: judge ("rule" | "openai") and that judge's settings class (judge/settings.py):
    RuleJudgeSettings (fusion, instruction_source, cache_dir — blueprints and replies, keyed by content —,
    pitch, max_audio_seconds), or LlmJudgeSettings (those, the endpoint, prompt, deadline, parallelism and
    prices of JudgeConfig, mode, labels, drop_groups). Keyword arguments only; checked (SettingsError)."""

    settings_class = OPTIONS

    def __init__(self, judge: str = "rule", **settings: Any):
        from sdscore.features.blueprint import BlueprintBuilder

        s = judge_settings(judge, **settings)
        self.fusion = s.fusion
        self.judge = make_judge(s)
        cache = None if s.cache_dir is None else Path(s.cache_dir) / "blueprints"
        try:
            self.blueprints = BlueprintBuilder(cache_dir=cache, max_audio_seconds=s.max_audio_seconds, pitch=s.pitch)
        except BaseException:
            self._close_judge()
            raise

    def __call__(self, rows: pl.DataFrame, progress: Progress | None = None) -> pl.DataFrame:
        """progress: as the judge answers items (an LLM judge: each reply; the runtime counts rows by it)."""
        paths = blueprint_paths(rows, self.judge)
        blueprints = dict(zip(paths, self.blueprints.build(paths))) if paths else None
        return score_judge(rows, self.judge, self.fusion, blueprints, progress)

    def _close_judge(self) -> None:
        if isinstance(self.judge, LLMJudge):
            self.judge.client.close()

    def close(self) -> None:
        self.blueprints.close()
        self._close_judge()


def scoring_job(**settings: Any) -> ScoringJob:
    """The ScoringJob of `sdscore score judge` (settings: judge and JudgeScorer's), checked up front
    (judge_settings: a keyword of the other judge, an unknown name, type or choice); an LLM judge is
    built once and closed, so a missing endpoint or model, or a bad prompt file, stops the run before any
    scoring. The endpoint goes into the run record (it is part of what produced the scores); cache_dir,
    concurrency and timeout_s are volatile (a resumed run may change them)."""
    settings = {k: v for k, v in settings.items() if v is not None}
    judge = settings.pop("judge", "rule")
    config = judge_settings(judge, **settings)
    if isinstance(config, LlmJudgeSettings):
        if config.base_url is None:
            settings["base_url"] = base_url_from_env()
        settings["drop_groups"] = config.drop_groups  # one spelling in the provenance: FEATURE_GROUPS' order
        make_judge(config).client.close()
    for name in ("prompt_file", "cache_dir"):
        if name in settings:
            settings[name] = os.path.abspath(settings[name])
    return ScoringJob(SPEC, JudgeScorer, {"judge": judge, **settings})
