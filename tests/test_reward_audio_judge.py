"""reward's zero-shot audio-LLM judge (score reward --judge openai) against the fake pair judge
(tests/reward_judge_server.py): the answer parser, requests, both orders, position consistency, row
errors, and `eval reward` on the judge's results."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
import soundfile as sf

from reward_judge_server import RewardJudgeServer, labelled_clips
from sdscore.cli import main
from sdscore.corpus import REWARD_PAIRS, write_manifest
from sdscore.llm_judges.client import ChatClient, RetryPolicy
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.protocols.reward import evaluate_reward
from sdscore.protocols.reward.audio_judge import JUDGE_RESULT_SCHEMA, PairwiseAudioJudge, RewardAudioJudgeScorer
from sdscore.protocols.reward.audio_judge_answers import parse_dialogue_choice
from sdscore.protocols.reward.audio_judge_prompts import load_pair_prompt
from sdscore.protocols.reward.scorer import scoring_job

# --- the answer parser ----------------------------------------------------------------------------

ANSWERS = {
    "1": 1, "2": 2, "2.": 2, " 1\n": 1, "**2**": 2, "`1`": 1, "(2)": 2, "Dialogue 1": 1, "dialogue 2.": 2,
    "DIALOGUE 2": 2, "Dialogue two": 2, "Conversation 1 is the winner.": 1, "Version 1 — it flows naturally.": 1,
    "Answer: 2": 2, "Final answer: Dialogue 1": 1, "### Verdict: **1**": 1, "Preferred dialogue: 2": 2,
    "Winner - Dialogue 2": 2, "Sure. Dialogue 2": 2, "The first one.": 1, "second": 2, "The former.": 1,
    "The second dialogue is better.": 2, "I prefer dialogue 2 because the prosody is natural.": 2,
    "After listening to both, I would choose the second.": 2,
    "Dialogue 1 sounds more natural than Dialogue 2.": 1,
    "Overall, Dialogue 2 is clearly better than Dialogue 1 in rhythm.": 2,
    "Dialogue 2 is more colloquial than dialogue 1, with fillers.": 2,
    "Both dialogues are good, but I prefer Dialogue 1.": 1,
    '{"better": 2}': 2, '{"preference": "Dialogue 1"}': 1,
    "1\n\nThe first dialogue has natural pauses while the second sounds synthesized.": 1,
    "After listening to both:\n\n**Verdict:** Dialogue 2\n\nIt is clearly the livelier one.": 2,
    "Both have fillers. Final answer: the first": 1,
}
MALFORMED = [
    "", "   ", "I cannot tell them apart.", "Both are equally natural.", "Dialogue 1 and Dialogue 2 are equally good.",
    "Neither.", "tie", "3", "Dialogue 3", "12", "1 or 2", "1 and 2 are both fine", "The dialogues sound the same.",
    "Dialogue 1 vs Dialogue 2: hard to say.", "Dialogue 1 has fillers; Dialogue 2 has none.", "I rate it 4/5.",
]


@pytest.mark.parametrize("reply,expected", list(ANSWERS.items()))
def test_parser_reads_the_dialogue_a_reply_prefers(reply, expected):
    assert parse_dialogue_choice(reply) == expected


@pytest.mark.parametrize("reply", MALFORMED)
def test_parser_refuses_replies_that_do_not_choose_and_keeps_them(reply):
    with pytest.raises(ReplyError, match="a choice of dialogue 1 or 2 was asked") as caught:
        parse_dialogue_choice(reply)
    assert caught.value.raw == reply


def test_parser_refuses_non_text():
    with pytest.raises(ReplyError, match="reply content is NoneType"):
        parse_dialogue_choice(None)


# --- pairs of sine "episodes" whose loudness is known -----------------------------------------------

# (chosen amplitude, rejected amplitude, criterion, category, source): the louder rule picks chosen iff
# chosen is louder (4 of 6 pairs).
PAIRS = [(0.5, 0.1, "modality", "a", "s1"), (0.5, 0.2, "modality", "a", "s2"), (0.1, 0.4, "modality", "b", "s1"),
         (0.3, 0.2, "colloquialness", "b", "s2"), (0.2, 0.6, "colloquialness", "c", "s1"),
         (0.4, 0.1, "colloquialness", "c", "s2")]


def _tone(folder, name: str, amplitude: float, hz: float, rate: int, seconds: float = 0.3) -> str:
    t = np.arange(int(seconds * rate)) / rate
    path = folder / f"{name}.{'flac' if rate == 22050 else 'wav'}"
    sf.write(path, (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32), rate)
    return str(path)


def _episode(folder, name: str, amplitude: float, hz: float) -> list[dict]:
    return [{"role": "user", "text": f"{name} question", "audio_path": _tone(folder, f"{name}-u", amplitude, hz, 22050)},
            {"role": "assistant", "text": f"{name} answer", "audio_path": _tone(folder, f"{name}-a", amplitude, hz, 16000)}]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> pl.DataFrame:
    folder = tmp_path_factory.mktemp("pair-tones")
    rows = []
    for i, (c, r, criterion, category, source) in enumerate(PAIRS):
        rows.append({"pair_id": f"p{i}", "criterion": criterion, "subset": None, "category": category,
                     "source": source, "chosen": _episode(folder, f"c{i}", c, 300.0 + 40 * i),
                     "rejected": _episode(folder, f"r{i}", r, 700.0 + 40 * i), "margin": None})
    return pl.DataFrame(rows, schema=REWARD_PAIRS).with_columns(error=pl.lit(None, pl.String))


def _expected_correct() -> list[bool]:
    return [c > r for c, r, *_ in PAIRS]


def _judge(server, **kwargs) -> PairwiseAudioJudge:
    client = ChatClient(server.base_url, "fake-pair-judge", json_mode=False, concurrency=4,
                        retry=RetryPolicy(max_retries=0, reply_retries=0))
    return PairwiseAudioJudge(client, **kwargs)


def _score(judge: PairwiseAudioJudge, frame: pl.DataFrame) -> list[dict]:
    try:
        return judge.score(frame.to_dicts())
    finally:
        judge.client.close()


def test_requests_hold_both_dialogues_labelled_in_order_with_transcripts(pairs):
    with RewardJudgeServer("louder") as server:
        _score(_judge(server), pairs.head(1))
        bodies = [body for _, body in server.requests]
    assert len(bodies) == 2  # both orders (they arrive in any order)
    bodies.sort(key=lambda body: "Transcript: r0" in labelled_clips(body)[0].split("Dialogue 2, turn 1")[0])
    for body, first in zip(bodies, ("c0", "r0")):
        text, clips = labelled_clips(body)
        assert [(c["dialogue"], c["turn"], c["role"]) for c in clips] == [
            (1, 1, "user"), (1, 2, "assistant"), (2, 1, "user"), (2, 2, "assistant")]
        assert f"Transcript: {first} question" in text.split("Dialogue 2, turn 1")[0]
        assert "natural human conversation" in text and "1 or 2" in text  # the modality prompt
        assert body["messages"][0]["role"] == "system"
    rms_first = [c["rms"] for c in labelled_clips(bodies[0])[1] if c["dialogue"] == 1]
    assert rms_first == pytest.approx([0.5 / np.sqrt(2)] * 2, rel=0.02)  # chosen (0.5) shown first in call 1


@pytest.mark.parametrize("policy", ["louder", "chatty"])
def test_louder_judge_accuracy_equals_the_hand_computation(pairs, policy):
    with RewardJudgeServer(policy) as server:
        scorer = RewardAudioJudgeScorer("fake-pair-judge", server.base_url, concurrency=3)
        try:
            results = scorer(pairs)
        finally:
            scorer.close()
        assert len(server.requests) == 2 * len(PAIRS)
    assert results.schema == JUDGE_RESULT_SCHEMA and results.height == len(PAIRS)
    assert results["error"].null_count() == len(PAIRS)
    expected = _expected_correct()
    assert results["correct"].to_list() == expected
    assert results["chosen_reward"].to_list() == [1.0 if e else 0.0 for e in expected]
    assert results["shown_first"].to_list() == [["chosen", "rejected"]] * len(PAIRS)
    assert results["position_consistent"].to_list() == [True] * len(PAIRS)
    assert results["subset"].to_list() == ["modality"] * 3 + ["colloquial"] * 3
    metrics = evaluate_reward(results)
    assert metrics["overall_micro"] == pytest.approx(np.mean(expected))
    assert metrics["by_category"]["a"]["accuracy"] == 1.0 and metrics["by_category"]["b"]["accuracy"] == 0.5
    assert metrics["by_source"]["s1"]["accuracy"] == pytest.approx(1 / 3) and metrics["by_source"]["s2"]["accuracy"] == 1.0
    assert metrics["judge_positions"]["position_consistency"] == 1.0
    assert metrics["judge_positions"]["first_position_share"] == 0.5


def test_longer_judge_reads_bare_numbers(tmp_path):
    quiet = [{"role": "user", "text": "q", "audio_path": _tone(tmp_path, "short", 0.3, 300, 16000, 0.2)}]
    loud = [{"role": "user", "text": "q", "audio_path": _tone(tmp_path, "long", 0.3, 300, 16000, 0.6)}]
    frame = pl.DataFrame([{"pair_id": "x", "criterion": "modality", "chosen": quiet, "rejected": loud},
                          {"pair_id": "y", "criterion": "modality", "chosen": loud, "rejected": quiet}], schema=REWARD_PAIRS)
    with RewardJudgeServer("longer") as server:
        judged = _score(_judge(server), frame)
    assert [r["answers"] for r in judged] == [["2", "1"], ["1", "2"]]
    assert [r["picked"] for r in judged] == [["rejected", "rejected"], ["chosen", "chosen"]]
    assert [r["chosen_reward"] for r in judged] == [0.0, 1.0]


def test_always_first_judge_has_position_consistency_zero(pairs):
    with RewardJudgeServer("first") as server:
        judged = _score(_judge(server), pairs)
    assert all(r["picked"] == ["chosen", "rejected"] and r["position_consistent"] is False for r in judged)
    assert all(r["chosen_reward"] == r["rejected_reward"] == 0.5 for r in judged)  # a tie: wrong
    results = pl.DataFrame([{**row, **r, "margin": 0.0, "correct": False}
                            for row, r in zip(pairs.select("pair_id", "criterion", "category", "source").to_dicts(),
                                              judged)])
    metrics = evaluate_reward(results)
    assert metrics["overall_micro"] == 0.0
    assert metrics["judge_positions"] == {
        "n_pairs_both_orders": len(PAIRS), "position_consistency": 0.0, "n_answers": 2 * len(PAIRS),
        "first_position_share": 1.0, "accuracy_chosen_first": 1.0, "accuracy_rejected_first": 0.0}


def test_shown_order_asks_once_in_a_seeded_recorded_order(pairs):
    with RewardJudgeServer("first") as server:
        one = _score(_judge(server, orders="shown", seed=7), pairs)
        again = _score(_judge(server, orders="shown", seed=7), pairs.reverse())
        assert len(server.requests) == 2 * len(PAIRS)
    firsts = [r["shown_first"][0] for r in one]
    assert [r["shown_first"][0] for r in again][::-1] == firsts  # per pair_id, not per batch position
    assert {"chosen", "rejected"} == set(firsts)
    assert [r["chosen_reward"] for r in one] == [1.0 if f == "chosen" else 0.0 for f in firsts]
    assert all(r["position_consistent"] is None for r in one)


def test_malformed_replies_and_bad_pairs_fail_only_their_rows(pairs, tmp_path):
    broken = pairs.to_dicts()
    broken[4]["rejected"][1]["audio_path"] = str(tmp_path / "missing.wav")
    broken[5]["chosen"] = []
    frame = pl.DataFrame(broken, schema=pairs.schema)
    with RewardJudgeServer("mixed", malformed_hz=300.0 + 40 * 2) as server:  # pair p2's chosen clips
        scorer = RewardAudioJudgeScorer("fake-pair-judge", server.base_url, concurrency=2)
        try:
            results = scorer(frame)
        finally:
            scorer.close()
    errors = results["error"].to_list()
    assert errors[:2] == [None, None] and errors[3] is None
    assert errors[2].startswith("call 1 of 2 (chosen shown first): no valid reply after 3 replies")  # re-asked
    assert "a choice of dialogue 1 or 2 was asked, the reply has a tie or no preference" in errors[2]
    row = results.row(2, named=True)
    assert row["raw_replies"][0] == "I cannot decide between them." and row["answers"] == [None, "1"]
    assert row["chosen_reward"] is None and row["correct"] is None
    assert "missing.wav" in errors[4] and errors[5] == "dialogue 1 has no turns"
    metrics = evaluate_reward(results)
    assert metrics["n_errors"] == 3 and metrics["overall_micro"] == 1.0


def test_user_prompt_file_and_its_errors(tmp_path, pairs):
    good = tmp_path / "mine.txt"
    good.write_text("[system]\nS\n[turn]\nDialogue {dialogue}, turn {number} ({role}) {audio} says {text}\n"
                    "[dialogue]\n## {number}\n{turns}\n[user]\n{criterion}: {dialogues} Which? 1 or 2\n")
    with RewardJudgeServer("louder") as server:
        judged = _score(_judge(server, prompt_file=str(good)), pairs.head(1))
        text = server.texts[0]
    assert judged[0]["chosen_reward"] == 1.0 and text.startswith("modality: ## 1") and "says c0 question" in text
    bad = tmp_path / "bad.txt"
    bad.write_text("[system]\nS\n[turn]\n{number}\n[dialogue]\n{number}{turns}\n[user]\n{dialogues}\n")
    with pytest.raises(ValueError, match=r"bad.txt: section \[turn\] lacks \{dialogue\}, \{role\}, \{audio\}"):
        load_pair_prompt(prompt_file=bad)
    bad.write_text("[system]\nS\n[user]\nx\n")
    with pytest.raises(ValueError, match=r"missing section\(s\) \[dialogue\], \[turn\]"):
        load_pair_prompt(prompt_file=bad)
    with pytest.raises(ValueError, match="no bundled pair prompt for criterion 'style'"):
        load_pair_prompt("style")


def test_settings_are_checked_before_any_pair(monkeypatch):
    for name in ("SDSCORE_JUDGE_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="the openai judge needs base_url"):
        scoring_job(judge="openai", model="m")
    with pytest.raises(ValueError, match="needs a model name"):
        scoring_job(judge="openai", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="orders must be one of"):
        scoring_job(judge="openai", model="m", base_url="http://127.0.0.1:9/v1", orders="random")
    with pytest.raises(ValueError, match="unknown reward judge 'gpt'"):
        scoring_job(judge="gpt")


def test_cli_score_then_eval_reward_end_to_end(pairs, tmp_path):
    manifest = tmp_path / "pairs.parquet"
    write_manifest(pairs.drop("error"), manifest)
    results, metrics_path = tmp_path / "judge.parquet", tmp_path / "metrics.json"
    with RewardJudgeServer("louder") as server:
        code = main(["score", "reward", str(manifest), "--out", str(results), "--judge", "openai",
                     "--model", "fake-pair-judge", "--base-url", server.base_url, "--cache-dir", str(tmp_path / "c")])
        assert code == 0 and len(server.requests) == 2 * len(PAIRS)
        # a second run answers from the reply cache
        assert main(["score", "reward", str(manifest), "--out", str(tmp_path / "again.parquet"), "--judge", "openai",
                     "--model", "fake-pair-judge", "--base-url", server.base_url,
                     "--cache-dir", str(tmp_path / "c")]) == 0
        assert len(server.requests) == 2 * len(PAIRS)
    assert main(["eval", "reward", str(results), "--out", str(metrics_path)]) == 0
    metrics = json.loads(metrics_path.read_text())
    expected = _expected_correct()
    assert metrics["n"] == len(PAIRS) and metrics["n_errors"] == 0
    assert metrics["modality_micro"] == pytest.approx(np.mean(expected[:3]))
    assert metrics["colloquial"] == pytest.approx(np.mean(expected[3:]))
    assert metrics["overall_macro"] == pytest.approx((np.mean(expected[:3]) + np.mean(expected[3:])) / 2)
    assert metrics["judge_positions"]["position_consistency"] == 1.0
    assert set(metrics["by_category"]) == {"a", "b", "c"}
    written = pl.read_parquet(results)
    assert written["judge_model"].unique().to_list() == ["fake-pair-judge"]


def test_worker_processes_give_the_same_results(pairs, tmp_path):
    manifest = tmp_path / "pairs.parquet"
    write_manifest(pairs.drop("error"), manifest)
    with RewardJudgeServer("louder") as server:
        args = ["--judge", "openai", "--model", "fake-pair-judge", "--base-url", server.base_url, "--window-rows", "2"]
        assert main(["score", "reward", str(manifest), "--out", str(tmp_path / "one.parquet"), *args]) == 0
        assert main(["score", "reward", str(manifest), "--out", str(tmp_path / "two.parquet"), "--workers", "2",
                     *args]) == 0
    one, two = (pl.read_parquet(tmp_path / f"{n}.parquet").drop("cost") for n in ("one", "two"))
    assert one.equals(two) and one["correct"].to_list() == _expected_correct()
