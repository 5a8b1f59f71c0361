"""TRACE's original-label mode (Tab. 1): one overall 1 / 2 / tie label per pair. The reply parser on
many reply variants, the bundled and user prompts, a fake judge answering the HCoT human labels
through `score` and `eval` (agreement and κ 1.0), κ against sklearn, unparseable replies kept."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from judge_data import BLUEPRINTS, CAPITAL, COUNT, manifest
from judge_server import ChatServer, completion
from sdscore.corpus import write_manifest
from sdscore.llm_judges.client import ChatClient, RetryPolicy
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.manifests import read_manifest
from sdscore.metrics.fusion import fuse
from sdscore.protocols import registry
from sdscore.protocols.judge import (
    LLMJudge,
    Verdict,
    evaluate_judges,
    judge_settings,
    load_prompt,
    parse_overall_reply,
    results_settings,
    run_eval,
    score_judge,
    scoring_job,
)
from trace_judge_server import HumanLabelResponder, blueprint_builder, hcot_blueprints

HCOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hcot" / "speakbench.json"


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ('{"reasoning": "r", "label": "1"}', "1"),
        ('```json\n{"reasoning": "r", "label": "tie"}\n```', "tie"),
        ('{"label": 2, "reasoning": "second is calmer"}', "2"),
        ('{"reasoning": "x", "overall": "Response 2"}', "2"),
        ('{"label": "both_bad"}', "tie"),
        ('{"label": "Tie", "verdict": "tie"}', "tie"),
        ("1", "1"),
        ("2.", "2"),
        ("Tie", "tie"),
        ("TIE!", "tie"),
        ('"tie"', "tie"),
        ("(1)", "1"),
        ("Response 1", "1"),
        ("Audio 2", "2"),
        ("**Response 2**", "2"),
        ("### Verdict: 1", "1"),
        ("Verdict: tie — both answers are equally weak.", "tie"),
        ("2 - the second response follows the requested whisper.", "2"),
        ("Equal", "tie"),
        ("They are equally good.", "tie"),
        ("After comparing both, the winner is Audio 1.", "1"),
        ("Final answer: [[2]]", "2"),
        ("Label: `1`\nReasoning: better content.", "1"),
        ("I choose Response 2 because it is slower.", "2"),
        ("The first response is better.", "1"),
        ("the SECOND one.", "2"),
        ("Response 2 is clearly better; Response 1 ignores the tone request.", "2"),
        ("It's a tie.", "tie"),
        ("Both responses answer, but Response 2 whispers as asked, so Response 2 is better.", "2"),
        ("Neither is acceptable.", "tie"),
        ("Response 1 is better overall, though some would call it a tie.", "1"),  # it opens with its verdict
    ],
)
def test_overall_reply_variants(text, label):
    parsed = parse_overall_reply(text)
    assert parsed["overall"] == label
    if not text.lstrip().startswith(("{", "```")):
        assert parsed["reasoning"] == text.strip()  # a reply in words is its own reasoning


def test_json_reasoning_is_kept():
    assert parse_overall_reply('{"reasoning": " 2 whispers ", "label": "2"}')["reasoning"] == "2 whispers"
    assert parse_overall_reply('{"label": "1"}')["reasoning"] == ""
    assert json.loads(parse_overall_reply('{"label": "1", "reasoning": {"c": "a"}}')["reasoning"]) == {"c": "a"}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "reply is empty"),
        ("   \n", "reply is empty"),
        ("I cannot decide.", "has no label"),
        ("3", "has no label"),
        ("Response 3", "has no label"),
        ("12", "has no label"),
        ("1.5", "has no label"),
        ("1st place", "has no label"),
        ("1 or 2", "has no label"),
        ("Response 1 and Response 2", "has no label"),
        ('["1", "2"]', "more than one label"),
        ("Verdict: 1. Final answer: 2", "conflicting overall labels"),
        ("Overall Audio 1 is better, yet Audio 2 wins on tone.", "both 1 and 2"),
        ('{"label": "maybe"}', "is not one of"),
        ('{"label": 3}', "is not one of"),
        ('{"label": true}', "is not one of"),
        ('{"reasoning": "x"}', "no overall label"),
        ('{"content": "1", "voice_quality": "2", "paralinguistics": "1"}', "no overall label"),
        ('{"label": "1", "overall": "2"}', "conflicting overall labels"),
        ('{"label": "1"', "not valid JSON"),
    ],
)
def test_malformed_overall_replies_are_refused_with_the_raw_text(text, match):
    with pytest.raises(ReplyError, match=match) as info:
        parse_overall_reply(text)
    assert info.value.raw == text


def test_non_text_and_long_replies():
    with pytest.raises(ReplyError, match="reply content is dict"):
        parse_overall_reply({"label": "1"})
    with pytest.raises(ReplyError, match="…") as info:
        parse_overall_reply("no idea " * 200)
    assert len(str(info.value)) < 400 and info.value.raw == "no idea " * 200


def test_original_prompts_are_bundled_and_replaceable(tmp_path):
    for mode in ("blueprint", "transcript", "audio"):
        prompt = load_prompt(mode, labels="original")
        assert prompt.labels == "original" and '"label"' in prompt.system and '"tie"' in prompt.system
        assert "paralinguistics" not in prompt.user and '"label"' in prompt.user
        assert load_prompt(mode).labels == "typed"
    own = tmp_path / "own.txt"
    own.write_text("[user]\nWhich is better for {instruction}? A: {response_1} B: {response_2}. Say 1, 2 or tie.")
    prompt = load_prompt("transcript", own, labels="original")
    assert prompt.system == load_prompt("transcript", labels="original").system  # bundled original system text
    with pytest.raises(ValueError, match="unknown label mode 'binary'"):
        load_prompt("blueprint", labels="binary")
    client = ChatClient("http://127.0.0.1:9/v1", "m")
    with pytest.raises(ValueError, match="the prompt asks for typed labels but the judge reads original labels"):
        LLMJudge(client, "blueprint", prompt=load_prompt("blueprint"), labels="original")
    with pytest.raises(ValueError, match=r"labels is not a setting of judge='rule' \(RuleJudgeSettings\)"):
        judge_settings("rule", labels="original")
    with pytest.raises(ValueError, match="labels is not a setting of judge='rule'"):
        scoring_job(judge="rule", labels="original")
    with pytest.raises(ValueError, match=r"labels must be one of \['typed', 'original'\], got 'binary'"):
        judge_settings("openai", model="m", labels="binary")


def _judge(server, labels="original", reply_retries=1) -> LLMJudge:
    retry = RetryPolicy(max_retries=0, reply_retries=reply_retries, backoff_base_s=0.0)
    return LLMJudge(ChatClient(server.base_url, "m", retry=retry, concurrency=2, sleep=lambda s: None),
                    "blueprint", labels=labels)


def test_unparseable_reply_is_the_rows_error_with_the_raw_reply_kept():
    garbage = "Both have merits and I will not choose. " * 10

    def respond(index, body, headers):
        user = body["messages"][1]["content"]
        if COUNT in user:
            return completion(garbage)
        return completion('{"reasoning": "clearer", "label": "Response 1"}')

    rows = [("A", CAPITAL, "a1.wav", "a2.wav"), ("X", COUNT, "b1.wav", "b2.wav"), ("D", CAPITAL, "a1.wav", "no.wav")]
    with ChatServer(respond) as server:
        judge = _judge(server)
        out = score_judge(manifest(rows, with_labels=False), judge, blueprints=BLUEPRINTS)
        judge.client.close()
    assert len(server.requests) == 1 + 2  # A once, X asked again once
    a, x, d = out.to_dicts()
    assert (a["overall_pred"], a["content_pred"], a["paralinguistics_pred"]) == ("1", None, None)
    assert a["reasoning"] == "clearer" and a["error"] is None and a["raw_reply"] is None
    assert x["overall_pred"] is None
    assert x["error"].startswith("item X: no valid reply after 2 replies; last: one overall label (1, 2 or tie)")
    assert x["raw_reply"] == garbage  # the whole reply, not the error's excerpt
    assert d["error"] == "item D: no blueprint for the response 2 (no.wav)" and d["raw_reply"] is None
    system = server.requests[0][1]["messages"][0]["content"]
    assert '"label"' in system and "both_good" not in system


def test_typed_mode_keeps_the_raw_reply_too_and_is_otherwise_unchanged():
    with ChatServer(lambda i, b, h: completion("no JSON today")) as server:
        judge = _judge(server, labels="typed", reply_retries=0)
        out = score_judge(manifest([("A", CAPITAL, "a1.wav", "a2.wav")], with_labels=False), judge,
                          blueprints=BLUEPRINTS)
        judge.client.close()
    assert out["raw_reply"].to_list() == ["no JSON today"] and "not valid JSON" in out["error"][0]
    assert "both_good" in server.requests[0][1]["messages"][0]["content"]  # the typed system prompt


def _original_frame(preds, truth, errors=()) -> pl.DataFrame:
    n = len(preds)
    return pl.DataFrame(
        {"item_id": [f"i{k:02d}" for k in range(n)], "content_pred": [None] * n, "voice_quality_pred": [None] * n,
         "paralinguistics_pred": [None] * n,
         "overall_pred": [None if k in errors else p for k, p in enumerate(preds)],
         "reasoning": ["r"] * n, "cost": [None] * n, "error": ["boom" if k in errors else None for k in range(n)],
         "overall": truth},
        schema_overrides={"content_pred": pl.String, "voice_quality_pred": pl.String,
                          "paralinguistics_pred": pl.String, "cost": pl.Float64, "error": pl.String},
    )


def test_original_label_agreement_matches_sklearn_on_the_untyped_scale():
    from sklearn.metrics import accuracy_score, cohen_kappa_score

    rng = np.random.default_rng(4)
    truth = rng.choice(["1", "2", "both_good", "both_bad"], 80).tolist()
    untyped = ["tie" if t.startswith("both") else t for t in truth]
    preds = [t if rng.random() < 0.6 else str(rng.choice(["1", "2", "tie"])) for t in untyped]
    frame = _original_frame(preds, truth, errors=(3, 7))
    metrics = evaluate_judges({"orig": frame}, n_boot=300, seed=2)["judges"]["orig"]  # mode read from the tie labels
    kept = [k for k in range(80) if k not in (3, 7)]
    assert metrics["labels"] == "original"
    assert metrics["accuracy"]["overall"] == pytest.approx(
        sum(preds[k] == untyped[k] for k in kept) / 80)  # errors count as wrong
    kappa = cohen_kappa_score([untyped[k] for k in kept], [preds[k] for k in kept])
    assert metrics["kappa"]["overall"] == pytest.approx(kappa)
    lo, hi = metrics["kappa_ci95"]["overall"]
    assert lo < kappa < hi
    assert metrics["accuracy"]["content"] is None and metrics["kappa"]["paralinguistics"] is None
    assert metrics["confusion"]["labels"] == ["1", "2", "tie"] and set(metrics["confusion"]) == {"labels", "overall"}
    assert metrics["untyped_overall"]["kappa"] == pytest.approx(kappa)
    as_scored = ["(error)" if k in (3, 7) else p for k, p in enumerate(preds)]
    assert metrics["accuracy"]["overall"] == pytest.approx(accuracy_score(untyped, as_scored))
    assert set(metrics["probes"]) == {"p3"}
    winners_on_bad = [preds[k] in ("1", "2") for k in kept if truth[k] == "both_bad"]
    assert metrics["probes"]["p3"]["winner_on_bad"] == pytest.approx(np.mean(winners_on_bad))
    with pytest.raises(ValueError, match=r"item i00 has overall_pred 'both_good', expected one of \['1', '2', 'tie'\]"):
        evaluate_judges({"orig": _original_frame(["both_good"] + preds[1:], truth)}, labels="original", n_boot=10)


class HumanJudge:
    """The HCoT humans' own C/VQ/P labels as a typed judge (no LLM)."""

    needs_blueprints = False
    needs_instruction_blueprint = False
    name = "humans"

    def __init__(self, frame: pl.DataFrame):
        self.labels = {r["item_id"]: (r["content"], r["voice_quality"], r["paralinguistics"]) for r in frame.to_dicts()}

    def judge_many(self, items, progress=None):
        return [Verdict(*self.labels[i.item_id], reasoning="human") for i in items]


def test_fake_judge_answering_the_human_labels_agrees_fully_through_score_and_eval(tmp_path, monkeypatch):
    if not HCOT.exists():
        pytest.skip(f"HCoT labels not found at {HCOT}")
    frame = read_manifest(HCOT, protocol="judge")
    blueprints = hcot_blueprints(frame["audio1_path"].to_list() + frame["audio2_path"].to_list())
    module = types.ModuleType("sdscore.features.blueprint")
    module.BlueprintBuilder = blueprint_builder(blueprints)
    monkeypatch.setitem(sys.modules, "sdscore.features.blueprint", module)
    human = {(f"answer in {r['audio1_path']}", f"answer in {r['audio2_path']}"):
             "tie" if r["overall"].startswith("both") else r["overall"] for r in frame.to_dicts()}
    path = tmp_path / "speakbench.parquet"
    write_manifest(frame, path)
    responder = HumanLabelResponder(human)
    with ChatServer(responder) as server:
        registry.score("judge", path, tmp_path / "original.parquet", judge="openai", base_url=server.base_url,
                       model="fake", labels="original", concurrency=8)
    assert len(responder.prompts) == frame.height
    out = pl.read_parquet(tmp_path / "original.parquet")
    assert out["error"].null_count() == frame.height and out["content_pred"].null_count() == frame.height
    settings = results_settings(tmp_path / "original.parquet")
    assert (settings["labels"], settings["drop_groups"], settings["mode"]) == ("original", [], "blueprint")
    typed = score_judge(frame, HumanJudge(frame))  # the typed side of the hackability comparison
    typed.write_parquet(tmp_path / "typed.parquet")  # no provenance: its label mode is read from the labels
    metrics = run_eval([tmp_path / "original.parquet", tmp_path / "typed.parquet"], tmp_path / "m.json", n_boot=200)
    original = metrics["judges"]["original"]
    assert original["labels"] == "original" and original["n_errors"] == 0
    assert original["accuracy"]["overall"] == 1.0 and original["kappa"]["overall"] == pytest.approx(1.0)
    assert original["kappa_ci95"]["overall"] == pytest.approx([1.0, 1.0])
    assert original["overall_ci95"] == [1.0, 1.0]
    assert original["confusion"]["overall"] == [[183, 0, 0], [0, 183, 0], [0, 0, 131]]
    assert original["probes"]["p3"]["winner_on_bad"] == 0.0
    humans = metrics["judges"]["typed"]
    assert humans["labels"] == "typed" and humans["accuracy"]["overall"] == pytest.approx(485 / 497)
    fused = [fuse(r["content"], r["voice_quality"], r["paralinguistics"]) for r in frame.to_dicts()]
    hits = sum(("tie" if f.startswith("both") else f) == ("tie" if t.startswith("both") else t)
               for f, t in zip(fused, frame["overall"]))
    assert humans["untyped_overall"]["accuracy"] == pytest.approx(hits / 497)
    assert metrics["mcnemar"][0]["scale"] == "untyped" and 0.0 <= metrics["mcnemar"][0]["p_value"] <= 1.0
    # the HTML report shows both judges on the untyped scale (the hackability table)
    from sdscore.cli import main

    html = tmp_path / "report.html"
    assert main(["report", "--protocol", "judge", str(tmp_path / "original.parquet"), str(tmp_path / "typed.parquet"),
                 "--metrics", str(tmp_path / "m.json"), "--out", str(html)]) == 0
    page = html.read_text(encoding="utf-8")
    assert "Every judge on the untyped 3-way scale" in page
    assert page.count("untyped_overall") >= 2 * 4  # accuracy, κ and its CI cells of both judges carry their paths
