"""TRACE's feature-group ablation (App. H, Tab. 12) as a judge option: each group's fields leave the
blueprints in the prompt the judge receives and nothing else changes; the groups left out are
recorded in the results' provenance (Python API and CLI); bad requests are refused up front."""

from __future__ import annotations

import json
import sys
import types

import polars as pl
import pytest
from judge_data import BLUEPRINTS, CAPITAL, COUNT, RULE_ROWS, manifest
from judge_server import ChatServer, completion, labels_json
from sdscore.cli import main
from sdscore.corpus import write_manifest
from sdscore.llm_judges.client import ChatClient, RetryPolicy
from sdscore.protocols import registry
from sdscore.protocols.judge import (
    FEATURE_GROUPS,
    LLMJudge,
    LlmJudgeSettings,
    judge_settings,
    results_settings,
    run_eval,
    score_judge,
)
from sdscore.protocols.judge.blueprint_view import check_groups, trace_view
from sdscore.protocols.judge.scorer import scoring_job
from trace_judge_server import blueprint_builder, split_blueprint_prompt

ROWS = [("A", CAPITAL, "a1.wav", "a2.wav"), ("B", COUNT, "b1.wav", "b2.wav")]
#: the paper's groups and the fields each one holds (Fig. 7 keys)
PAPER_GROUPS = {
    "emotion": "agent_emotion",
    "accent": "agent_accent",
    "quality": "agent_audio_quality",
    "properties": "agent_audio_properties",
}


def _prompts(drop) -> list[tuple[str, str, dict, dict]]:
    """(system, prompt without the blueprints, blueprint 1, blueprint 2) per item, as the server saw them."""
    blueprints = {**BLUEPRINTS, "b1.wav": {**BLUEPRINTS["b1.wav"], "accent": {"us": 0.7, "in": 0.3}}}
    with ChatServer(lambda i, b, h: completion(labels_json())) as server:
        client = ChatClient(server.base_url, "m", retry=RetryPolicy(max_retries=0, reply_retries=0), concurrency=1)
        with client:
            out = score_judge(manifest(ROWS, with_labels=False), LLMJudge(client, drop_groups=drop),
                              blueprints=blueprints)
    assert out["error"].to_list() == [None, None]
    seen = []
    for _, body in sorted(server.requests, key=lambda r: r[1]["messages"][1]["content"].find(COUNT)):
        rest, first, second = split_blueprint_prompt(body["messages"][1]["content"])
        seen.append((body["messages"][0]["content"], rest, first, second))
    return seen


def test_the_groups_are_the_papers():
    assert FEATURE_GROUPS == PAPER_GROUPS
    full = trace_view(BLUEPRINTS["b1.wav"])
    assert set(full) == {"agent_response", *PAPER_GROUPS.values()}  # every field but the transcript is in a group


@pytest.mark.parametrize("drop", [("emotion",), ("accent",), ("quality",), ("properties",), ("accent", "emotion")])
def test_dropping_a_group_removes_its_fields_from_the_prompt_and_nothing_else(drop):
    full, ablated = _prompts(()), _prompts(drop)
    gone = {PAPER_GROUPS[g] for g in drop}
    b1 = trace_view(BLUEPRINTS["b1.wav"])
    assert full[1][2]["agent_emotion"] == b1["agent_emotion"] and full[1][2]["agent_accent"] == {"us": 0.7, "in": 0.3}
    for (system, rest, first, second), (system0, rest0, first0, second0) in zip(ablated, full):
        assert system == system0 and rest == rest0  # instruction, field descriptions, reply request: unchanged
        for shown, whole in ((first, first0), (second, second0)):
            assert gone.isdisjoint(shown)
            assert shown == {key: value for key, value in whole.items() if key not in gone}
            assert list(shown) == [key for key in whole if key not in gone]  # the order kept


def test_fig7_layout_blueprints_are_ablated_alike():
    nested = trace_view(BLUEPRINTS["a1.wav"])
    assert trace_view(nested, ["quality"]) == {k: v for k, v in nested.items() if k != "agent_audio_quality"}


def test_group_names_are_checked():
    assert check_groups("properties, emotion") == ("emotion", "properties")  # FEATURE_GROUPS' order, one spelling
    assert check_groups(["quality", "quality"]) == ("quality",) and check_groups("") == () == check_groups(None)
    with pytest.raises(ValueError, match=r"unknown blueprint feature group\(s\) \['prosody'\]"):
        check_groups("prosody,quality")
    client = ChatClient("http://127.0.0.1:9/v1", "m")
    with pytest.raises(ValueError, match="needs the blueprint mode, not transcript"):
        LLMJudge(client, "transcript", drop_groups=["emotion"])
    with pytest.raises(ValueError, match=r"drop_groups is not a setting of judge='rule' \(RuleJudgeSettings\)"):
        judge_settings("rule", drop_groups="emotion")
    with pytest.raises(ValueError, match="drop_groups is not a setting of judge='rule'"):
        scoring_job(judge="rule", drop_groups=["emotion"])
    with pytest.raises(ValueError, match=r"unknown blueprint feature group\(s\) \['loudness'\]"):
        LlmJudgeSettings(model="m", drop_groups="loudness")
    with pytest.raises(ValueError, match="unknown blueprint feature group"):
        scoring_job(judge="openai", base_url="http://127.0.0.1:9/v1", model="m", drop_groups="loudness")


def test_ablation_runs_record_their_groups_and_evaluate_side_by_side(tmp_path, monkeypatch):
    module = types.ModuleType("sdscore.features.blueprint")
    module.BlueprintBuilder = blueprint_builder(BLUEPRINTS)
    monkeypatch.setitem(sys.modules, "sdscore.features.blueprint", module)
    path = tmp_path / "items.parquet"
    write_manifest(manifest(RULE_ROWS[:3]), path)
    with ChatServer(lambda i, b, h: completion(labels_json("1", "both_good", "2"))) as server:
        common = {"judge": "openai", "base_url": server.base_url, "model": "m"}
        registry.score("judge", path, tmp_path / "full.parquet", **common)
        registry.score("judge", path, tmp_path / "no-quality.parquet", drop_groups="quality", **common)
        code = main(["score", "judge", str(path), "--out", str(tmp_path / "no-props-emotion.parquet"),
                     "--judge", "openai", "--base-url", server.base_url, "--model", "m",
                     "--drop-group", "properties,emotion"])
    assert code == 0
    recorded = {name: results_settings(tmp_path / f"{name}.parquet")["drop_groups"]
                for name in ("full", "no-quality", "no-props-emotion")}
    assert recorded == {"full": [], "no-quality": ["quality"], "no-props-emotion": ["emotion", "properties"]}
    shown = [split_blueprint_prompt(body["messages"][1]["content"])[1] for _, body in server.requests]
    assert [sorted(set(PAPER_GROUPS.values()) - set(bp)) for bp in shown] == (
        [[]] * 3 + [["agent_audio_quality"]] * 3 + [["agent_audio_properties", "agent_emotion"]] * 3)
    metrics = run_eval([tmp_path / f"{n}.parquet" for n in recorded], tmp_path / "m.json", n_boot=50)
    assert set(metrics["judges"]) == set(recorded)
    assert all(m["labels"] == "typed" and m["n_errors"] == 0 for m in metrics["judges"].values())
    assert pl.read_parquet(tmp_path / "full.parquet")["raw_reply"].null_count() == 3  # every reply parsed
    assert json.loads((tmp_path / "m.json").read_text())["judges"]["no-quality"]["accuracy"]["overall"] is not None
