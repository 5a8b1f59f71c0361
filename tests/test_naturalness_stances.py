"""Interpersonal stances (`sdscore score naturalness --judge openai`, SPEARBench §III-C6): the reply
parser on many reply shapes, the Scorer against the fake stance judge (a real HTTP server on
127.0.0.1) and scripted servers, malformed replies kept with their raw text, the eval's same / more
negative / more positive % and Fig. 5, and --temperature on every protocol's judge."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from judge_server import ChatServer, completion
from sdscore.llm_judges.client import judge_client
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.llm_judges.settings import AudioJudgeConfig
from sdscore.protocols.naturalness.demo_stance_judge import MODEL, FakeStanceJudge, ratings
from sdscore.protocols.naturalness.evaluate import evaluate_files, evaluate_naturalness, format_table
from sdscore.protocols.naturalness.scorer import scoring_job
from sdscore.protocols.naturalness.stance_dimensions import NAMES, column
from sdscore.protocols.naturalness.stance_eval import NO_STANCES
from sdscore.protocols.naturalness.stance_replies import parse_stances, rating_of
from sdscore.protocols.naturalness.stance_scorer import STANCE_RESULTS, StanceJudgeScorer, load_stance_prompt
from sdscore.runtime.settings import SettingsError, run_record

Q = {name: 1 for name in NAMES}
A = {name: 0 for name in NAMES} | {"focus": -1, "warmth": 1}


def _json(q=Q, a=A) -> str:
    return json.dumps({"question": q, "answer": a})


def _lines(values: dict) -> str:
    return "\n".join(f"- {name}: {v:+d}" for name, v in values.items())


# --- the reply parser: every shape below reads as Q (question) and A (answer) --------------------------

READABLE = [
    _json(),
    "```json\n" + _json() + "\n```",
    "```\n" + _json() + "\n```",
    "Here are my ratings:\n" + _json() + "\nThe reply sounds withdrawn.",
    json.dumps({"reasoning": "calm voices", "question": Q, "answer": A, "confidence": 0.8}),  # extra keys
    json.dumps({"question": {**Q, "humour": 1}, "answer": {**A, "volume": "loud"}}),  # unknown dimensions
    json.dumps({"Question": {k.capitalize(): v for k, v in Q.items()}, "ANSWER": A}),  # case
    json.dumps({"question_speaker": Q, "answer_speaker": A}),
    json.dumps({"asker": Q, "responder": A}),
    json.dumps({"question": [Q[n] for n in NAMES], "answer": [A[n] for n in NAMES]}),  # lists in order
    json.dumps({n: {"question": Q[n], "answer": A[n]} for n in NAMES}),  # per dimension
    json.dumps([{"dimension": n, "question": Q[n], "answer": A[n]} for n in NAMES]),  # a list of objects
    json.dumps({"ratings": {"question": Q, "answer": A}}),  # wrapped
    json.dumps({"question": {n: str(v) for n, v in Q.items()}, "answer": {n: f"{v:+d}" for n, v in A.items()}}),
    json.dumps({"question": {n: float(v) for n, v in Q.items()}, "answer": A}),  # 1.0
    json.dumps({"question": {n: "positive" for n in NAMES},
                "answer": {n: {-1: "negative", 0: "neutral", 1: "positive"}[v] for n, v in A.items()}}),
    json.dumps({"question": Q, "answer": {**A, "focus": "withdrawn", "warmth": "warm (+1)"}}),  # poles
    json.dumps({**{f"question_{n}": v for n, v in Q.items()}, **{f"answer_{n}": v for n, v in A.items()}}),  # flat
    "Question speaker:\n" + _lines(Q) + "\n\nAnswer speaker:\n" + _lines(A),  # prose
    "**Question**\n" + "\n".join(f"* **{n}**: {v}" for n, v in Q.items()) + "\n**Answer**\n"
    + "\n".join(f"* **{n}**: {v}" for n, v in A.items()),  # markdown prose
    "\n".join(f"Question {n}: {Q[n]}\nAnswer {n}: {A[n]}" for n in NAMES),  # role on each line
    "\n".join(f"{n}: question {Q[n]}, answer {A[n]}" for n in NAMES),  # both roles on a line
    "Question speaker:\n" + _lines(Q) + "\nAnswer speaker:\n" + _lines(A).replace("-1", "−1"),  # a minus sign
]

MALFORMED = [
    "",
    "I cannot rate these recordings.",
    json.dumps({"question": Q}),  # the answer missing
    json.dumps({"question": Q, "answer": {n: v for n, v in A.items() if n != "honesty"}}),  # one dimension missing
    json.dumps({"question": Q, "answer": {**A, "focus": 2}}),  # out of range
    json.dumps({"question": {n: 5 for n in NAMES}, "answer": {n: 3 for n in NAMES}}),  # a 1-5 scale
    json.dumps({"question": Q, "answer": {**A, "focus": 0.5}}),
    json.dumps({"question": Q, "answer": {**A, "focus": True}}),
    json.dumps({"question": Q, "answer": {**A, "focus": "somewhat"}}),
    json.dumps({"question": Q, "answer": {**A, "focus": None}}),
    json.dumps({"question": [1, 0, 1], "answer": A}),  # a short list
    json.dumps({"question": Q, "answer": "fine"}),
    "Question speaker:\n" + _lines(Q) + "\nAnswer speaker:\n- focus: +1\n- focus: -1",  # rated twice
    json.dumps([1, 2, 3]),
    '{"question": {"politeness": 1,',  # cut off
]


@pytest.mark.parametrize("reply", READABLE, ids=range(len(READABLE)))
def test_parser_reads_every_reply_shape(reply):
    parsed = parse_stances(reply)
    assert parsed == {"question": Q, "answer": A}


@pytest.mark.parametrize("reply", MALFORMED, ids=range(len(MALFORMED)))
def test_parser_refuses_malformed_replies_and_keeps_the_raw_text(reply):
    with pytest.raises(ReplyError, match=r"the stance reply (holds no rating|misses|does not read)") as caught:
        parse_stances(reply)
    assert caught.value.raw == reply


def test_parser_names_what_is_missing_and_refuses_non_text():
    reply = json.dumps({"question": Q, "answer": {n: v for n, v in A.items() if n not in ("focus", "honesty")}})
    with pytest.raises(ReplyError, match=r"misses answer focus, answer honesty"):
        parse_stances(reply)
    with pytest.raises(ReplyError, match=r"outside the ratings -1, 0, \+1"):
        parse_stances(json.dumps({"question": Q, "answer": {**A, "calmness": -3}}))
    with pytest.raises(ReplyError, match=r"reply content is dict, expected text"):
        parse_stances({"question": Q})


def test_rating_of_reads_numbers_words_and_poles_and_refuses_the_rest():
    assert [rating_of(v, "warmth") for v in (1, -1, 0, 1.0, "+1", "-1", "0", "warm", "cold", "Neutral", "NEGATIVE",
                                            "+1 (warm)", "cold, distant")] == [1, -1, 0, 1, 1, -1, 0, 1, -1, 0, -1, 1, -1]
    assert rating_of("withdrawn", "focus") == -1 and rating_of("restrained", "disinhibition") == 1
    for bad in (2, -2, 0.5, float("nan"), True, None, "warmish", "", [1]):
        with pytest.raises(ValueError, match=r"warmth: .*(not a rating|outside)"):
            rating_of(bad, "warmth")


# --- the Scorer -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, str]:
    """Tones at known levels: the fake judge compares the answer's level with the question's."""
    folder = tmp_path_factory.mktemp("stance-clips")
    out = {}
    for name, amplitude in {"question": 0.1, "same": 0.1, "loud": 0.5, "quiet": 0.02}.items():
        t = np.arange(8000) / 16000
        path = folder / f"{name}.wav"
        sf.write(path, (amplitude * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32), 16000)
        out[name] = str(path)
    return out


def _rows(clips, answers=(("human", "same"), ("loud-model", "loud"), ("quiet-model", "quiet"))) -> pl.DataFrame:
    rows = [{"item_id": f"{system}-1", "conversation_id": "c1", "system": None if system == "human" else system,
             "audio_path": clips["question"], "answer_audio_path": clips[answer], "transcript_question": "A: well?",
             "error": None} for system, answer in answers]
    return pl.DataFrame(rows, schema={"item_id": pl.String, "conversation_id": pl.String, "system": pl.String,
                                      "audio_path": pl.String, "answer_audio_path": pl.String,
                                      "transcript_question": pl.String, "error": pl.String})


def _score(base_url: str, frame: pl.DataFrame, **settings) -> pl.DataFrame:
    scorer = StanceJudgeScorer(MODEL, base_url, concurrency=2, **settings)
    try:
        return scorer(frame)
    finally:
        scorer.close()


def test_fake_judge_rates_louder_answers_less_calm_and_quieter_ones_less_focused(clips):
    with FakeStanceJudge() as judge:
        out = _score(judge.base_url, _rows(clips))
    assert out.schema == STANCE_RESULTS and out["error"].to_list() == [None] * 3
    assert out["system"].to_list() == ["human", "loud-model", "quiet-model"]
    assert out["question_key"].to_list() == [clips["question"]] * 3 and out["stance_judge"].to_list() == [MODEL] * 3
    by_system = {row["system"]: row for row in out.to_dicts()}
    for system, expected in (("human", ratings(0, 0)), ("loud-model", ratings(0, 14)), ("quiet-model", ratings(0, -14))):
        for role in ("question", "answer"):
            assert {n: by_system[system][column(role, n)] for n in NAMES} == expected[role]
    assert by_system["loud-model"][column("answer", "calmness")] == -1
    assert by_system["quiet-model"][column("answer", "focus")] == -1
    assert json.loads(by_system["human"]["raw_reply"].strip("`json\n")) == ratings(0, 0)


def test_malformed_replies_are_row_errors_with_raw_text_and_bad_rows_are_not_asked(clips):
    server = ChatServer(lambda index, body, headers: completion("I am unable to rate these recordings."))
    frame = _rows(clips)
    frame = frame.with_columns(pl.when(pl.col("item_id") == "quiet-model-1").then(None)
                               .otherwise(pl.col("audio_path")).alias("audio_path"))
    with server:
        out = _score(server.base_url, frame)
    rows = out.to_dicts()
    assert rows[0]["raw_reply"] == "I am unable to rate these recordings."
    assert "no valid reply after 3 replies" in rows[0]["error"] and "holds no rating" in rows[0]["error"]
    assert all(rows[0][column("answer", n)] is None for n in NAMES)
    assert rows[2]["error"] == ("the stance judge needs the question and the answer clip; audio_path empty")
    assert len(server.requests) == 2 * 3  # two rows asked, each three times (the client's re-asks)


def test_temperature_is_sent_only_when_given_and_requests_carry_both_clips(clips):
    server = ChatServer(lambda index, body, headers: completion(_json()))
    with server:
        _score(server.base_url, _rows(clips, (("human", "same"),)), temperature=0.0)
        _score(server.base_url, _rows(clips, (("human", "loud"),)))
    (_, with_t), (_, without) = server.requests
    assert with_t["temperature"] == 0.0 and "temperature" not in without
    parts = with_t["messages"][-1]["content"]
    assert [p["type"] for p in parts].count("input_audio") == 2
    assert "politeness: +1 = polite, -1 = rude" in " ".join(p.get("text", "") for p in parts)


def test_user_prompt_files_are_checked(tmp_path):
    assert load_stance_prompt().source == "bundled stances.txt"
    bad = tmp_path / "stances.txt"
    bad.write_text("[system]\nrate\n[user]\n{question} then {answer}\n")
    with pytest.raises(ValueError, match=r"section \[user\] lacks \{dimensions\}"):
        load_stance_prompt(bad)
    good = tmp_path / "mine.txt"
    good.write_text("[system]\nYou rate stances.\n[user]\nQ: {question}\nA: {answer}\nRate:\n{dimensions}\n")
    assert load_stance_prompt(good).request("q.wav", "a.wav").clips == ["q.wav", "a.wav"]


def test_scoring_job_checks_the_judge_up_front(monkeypatch, tmp_path):
    for variable in ("SDSCORE_JUDGE_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ValueError, match=r"the openai judge needs base_url"):
        scoring_job(judge="openai", model="m")
    with pytest.raises(SettingsError, match=r"StanceJudgeSettings needs 'model'"):
        scoring_job(judge="openai", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match=r"unknown naturalness judge 'vap'; expected 'features' or 'openai'"):
        scoring_job(judge="vap")
    with pytest.raises(SettingsError, match=r"whisper_dir"):
        scoring_job(judge="openai", model="m", base_url="http://127.0.0.1:9/v1", whisper_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"temperature must be a finite number >= 0, got -1"):
        scoring_job(judge="openai", model="m", base_url="http://127.0.0.1:9/v1", temperature=-1.0)
    job = scoring_job(judge="openai", model="m", base_url="http://127.0.0.1:9/v1")
    assert job.scorer_name.endswith("StanceJudgeScorer") and "temperature" not in job.score_settings()
    job = scoring_job(judge="openai", model="m", base_url="http://127.0.0.1:9/v1", temperature=0.0)
    assert job.score_settings()["temperature"] == 0.0


def test_cli_refuses_judge_options_in_the_features_mode_and_bad_temperatures(tmp_path, capsys):
    from sdscore.cli import main

    manifest = tmp_path / "m.parquet"
    pl.DataFrame({"item_id": ["a"], "answer_audio_path": ["a.wav"]}).write_parquet(manifest)
    assert main(["score", "naturalness", str(manifest), "--out", str(tmp_path / "o.parquet"),
                 "--temperature", "0"]) != 0
    assert "--temperature is for --judge openai" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["score", "naturalness", str(manifest), "--out", str(tmp_path / "o.parquet"), "--judge", "openai",
              "--model", "m", "--temperature", "-0.5"])
    assert "expected a number >= 0, got '-0.5'" in capsys.readouterr().err


# --- --temperature on every protocol's judge -----------------------------------------------------------------


def test_judge_config_temperature_reaches_every_protocols_client_and_stays_out_of_old_records():
    from sdscore.protocols.arena.scorer import ArenaAudioJudgeScorer
    from sdscore.protocols.consistency.scorer import LalmConsistencyScorer
    from sdscore.protocols.judge.judges import make_judge
    from sdscore.protocols.judge.settings import LlmJudgeSettings
    from sdscore.protocols.reward.audio_judge import RewardAudioJudgeScorer

    url = "http://127.0.0.1:9/v1"
    for temperature, params in ((0.0, {"temperature": 0.0}), (None, {})):
        given = {} if temperature is None else {"temperature": temperature}
        scorers = [ArenaAudioJudgeScorer("m", url, **given), LalmConsistencyScorer("m", url, **given),
                   RewardAudioJudgeScorer("m", url, **given), StanceJudgeScorer("m", url, **given)]
        clients = [scorers[0].client, scorers[1].judge.client, scorers[2].judge.client, scorers[3].client,
                   make_judge(LlmJudgeSettings(model="m", base_url=url, **given)).client]
        for client in clients:
            assert {k: v for k, v in client.params.items() if k == "temperature"} == params
            client.close()
    assert "temperature" not in run_record(AudioJudgeConfig(model="m"))
    assert run_record(AudioJudgeConfig(model="m", temperature=0.0))["temperature"] == 0.0
    with pytest.raises(ValueError, match=r"temperature must be a finite number >= 0, got True"):
        judge_client("m", url, temperature=True)


# --- eval: Table III's Stances section and Fig. 5 -------------------------------------------------------------


def _stance_row(system, key, q, a, error=None) -> dict:
    row = {"item_id": f"{system}-{key}", "conversation_id": "c", "system": system, "question_key": key,
           "stance_judge": "j", "raw_reply": "r", "cost": None, "error": error}
    for role, values in (("question", q), ("answer", a)):
        row.update({column(role, n): None if error else values[n] for n in NAMES})
    return row


def _stances() -> pl.DataFrame:
    zero = {n: 0 for n in NAMES}
    rows = [
        _stance_row("human", "k1", zero, zero),
        _stance_row("human", "k2", zero, zero | {"warmth": 1}),
        # model: k1 one dimension lower, k2 two higher; one failed row
        _stance_row("model", "k1", zero, zero | {"focus": -1}),
        _stance_row("model", "k2", zero, zero | {"warmth": 1, "politeness": 1}),
        _stance_row("model", "k3", zero, zero, error="judge failed"),
    ]
    return pl.DataFrame(rows, schema=STANCE_RESULTS)


def test_same_more_negative_more_positive_per_dimension_pooled_and_against_the_human():
    metrics = evaluate_naturalness(pl.DataFrame(schema={"system": pl.String}), stances=_stances())
    human, model = metrics["systems"]["human"], metrics["systems"]["model"]
    assert human["stance_same_pct"] == {"value": pytest.approx(95.0), "n": 20}  # 19 of 20 pairs equal
    assert human["stance_more_positive_pct"]["value"] == pytest.approx(5.0)
    assert model["stance_same_pct"]["value"] == pytest.approx(85.0)
    assert model["stance_more_negative_pct"]["value"] == pytest.approx(5.0)
    assert model["stance_more_positive_pct"]["value"] == pytest.approx(10.0)
    st = model["stances"]
    assert st["n_scored"] == 2 and st["n_errors"] == 1
    assert st["per_dimension"]["focus"] == {"same": 50.0, "more_negative": 50.0, "more_positive": 0.0}
    assert st["positive_pct"]["warmth"] == 50.0 and st["positive_pct"]["focus"] == 0.0
    vs = st["vs_reference"]  # against the human's answer: k1 focus lower, k2 politeness higher
    assert vs["n_questions"] == 2 and vs["same"]["value"] == pytest.approx(90.0)
    assert vs["more_negative"]["value"] == pytest.approx(5.0) and vs["per_dimension"]["politeness"]["more_positive"] == 50.0
    assert "vs_reference" not in human["stances"]
    assert human["latency_ms"]["reason"] == ("system 'human' has no row in the feature results (only stance results "
                                             "were given)")
    assert "Same%" in format_table(metrics)


def test_eval_files_reads_stance_files_beside_feature_files_and_draws_fig5(tmp_path):
    stances = tmp_path / "stances.parquet"
    _stances().write_parquet(stances)
    features = tmp_path / "features.parquet"
    pl.DataFrame({"item_id": ["f1"], "system": ["other"], "question_key": ["k1"], "latency_ms": [500.0],
                  "error": [None]}, schema_overrides={"error": pl.String}).write_parquet(features)
    metrics = evaluate_files([features, stances], tmp_path / "m.json", plot=tmp_path / "figures")
    assert list(metrics["systems"]) == ["human", "model", "other"]
    assert metrics["stance_results_files"] == [str(stances)]
    assert metrics["systems"]["other"]["stance_same_pct"] == {"value": None, "n": 0, "reason": NO_STANCES}
    assert metrics["systems"]["other"]["latency_ms"]["value"] == 500.0
    assert metrics["figures"]["fig5_stances"]["path"].endswith("fig5_stances.png")
    assert (tmp_path / "figures" / "fig5_stances.png").stat().st_size > 0
    only_features = evaluate_files([features], tmp_path / "m2.json", plot=tmp_path / "figures2")
    assert only_features["figures"]["fig5_stances"]["skipped"].startswith("no stance ratings")
