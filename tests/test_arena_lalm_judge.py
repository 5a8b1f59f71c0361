"""arena's audio judge (`sdscore score arena --judge openai`) against the fake arena judge server
(tests/arena_judge_server.py): the verdict parser, both orders, position bias, per-row errors, the
results feeding `eval arena` end to end, and answer lengths read from the audio."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from arena_judge_server import ArenaJudgeServer
from sdscore.cli import main
from sdscore.corpus import BATTLES, write_manifest
from sdscore.errors import ManifestError
from sdscore.llm_judges.client import Price
from sdscore.llm_judges.pair_preference import parse_preference
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.protocols.arena import evaluate_arena, run_eval
from sdscore.protocols.arena.scorer import (
    RESULTS,
    ArenaAudioJudgeScorer,
    battle_verdict,
    scoring_job,
)
from sdscore.protocols.arena.judge_battles import battles_of_judge_results
from sdscore.protocols.arena.judge_prompt import load_arena_prompt

#: answer clip → (amplitude, seconds); a clip "<model>[_how]" is that model's answer. The fake judge and
#: the synthetic human votes both pick the louder answer; quiet_shouts is the quiet model's one upset
#: (without it every vote follows one order and no Bradley–Terry MLE exists)
CLIPS = {"loud": (0.5, 0.9), "mid": (0.25, 0.5), "quiet": (0.08, 0.3), "quiet_shouts": (0.7, 0.3),
         "loud_mumbles": (0.05, 0.9)}
MODEL = "fake-audio-llm"


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("answers")
    out = {}
    for i, (name, (amplitude, seconds)) in enumerate({**CLIPS, "question": (0.2, 0.4)}.items()):
        rate = (22050, 16000, 44100, 8000)[i % 4]
        t = np.arange(int(seconds * rate)) / rate
        path = folder / f"{name}.{'flac' if i % 2 else 'wav'}"
        sf.write(path, (amplitude * np.sin(2 * np.pi * 300.0 * t)).astype(np.float32), rate)
        out[name] = str(path)
    return out


def _louder(a: str, b: str) -> str:
    return "model_a" if CLIPS[a][0] > CLIPS[b][0] else "model_b"


def _model(clip: str) -> str:
    return clip.split("_")[0]


#: (prompt, clip_a, clip_b): every pair of models, each in both positions, and one upset
PAIRS = [("p1", "loud", "mid"), ("p2", "quiet", "loud"), ("p3", "mid", "quiet"), ("p4", "mid", "loud"),
         ("p5", "loud", "quiet"), ("p6", "quiet", "mid"), ("p7", "quiet_shouts", "loud")]


def _battles(clips, pairs=PAIRS, audio=True, lengths=False, question="audio") -> pl.DataFrame:
    rows = []
    for prompt, a, b in pairs:
        rows.append({
            "battle_id": f"b-{prompt}", "model_a": _model(a), "model_b": _model(b), "winner": _louder(a, b),
            "judge": "human", "prompt_id": prompt, "domain": "education",
            "length_a": CLIPS[a][1] if lengths else None, "length_b": CLIPS[b][1] if lengths else None,
            "audio_a_path": clips[a] if audio else None, "audio_b_path": clips[b] if audio else None,
            "question_path": clips["question"] if question == "audio" else None,
            "question_text": "Say it cheerfully." if question == "text" else None,
        })
    return pl.DataFrame(rows, schema=BATTLES)


def _score(server, frame: pl.DataFrame, **settings) -> pl.DataFrame:
    scorer = ArenaAudioJudgeScorer(MODEL, server.base_url, concurrency=4, **settings)
    try:
        return scorer(frame.with_columns(error=pl.lit(None, pl.String)))
    finally:
        scorer.close()


# --- the verdict parser ---------------------------------------------------------------------------

FIRST = ["First", "first", "FIRST", "First one wins", "First one wins.", "**First**", "1", "1.", "(1)", "A", "[[A]]",
         "Answer: A", "Verdict: First", "Response 1", "Output 1 is better.", "Audio 1", "Option A", "answer #1",
         "The first answer is better.", "I prefer the first response; it is calmer.", "A is better.", "The former.",
         "1st", "Response A, definitely", "Clip 1", "> **Final verdict:** the first one\nIt follows the request."]
SECOND = ["Second", "second!", "SECOND", "Second one wins.", "**Second**", "2", "2.", "(2)", "B", "[[B]]",
          "Answer: B", "Verdict - Second", "Response 2", "Output 2 is better.", "Audio 2", "Option B", "Answer #2",
          "The second answer is better.", "I prefer the second response because it sounds calmer.", "B wins.",
          "the latter", "2nd", "A close call, but B.", "The second one, at 3 seconds, is clearer.", "model b",
          "After listening carefully:\n\n**Answer:** Second\n\nThe first was too quiet."]
TIE = ["Tie", "tie.", "TIE", "It's a tie.", "Both are equally good.", "Neither", "neither wins", "No clear winner.",
       "Draw", "A draw.", "They are equal.", "Equally good.", "**Tie**", "Answer: Tie", "Verdict: tie — both fine",
       "No preference.", "Both bad.", "both answers are equally poor", "Same quality.", "Tied.", "It is a draw!"]
MALFORMED = ["", "   ", "I cannot judge these recordings.", "Both answers have merit.", "Hmm.", "Sorry, no audio.",
             "First or second, hard to say.", "The first is loud but the second is clear; a tie perhaps.",
             "Answer 1 and Answer 2 are both fine, but 2", "C", "Option C", "3", "I like it.", "The answers differ.",
             "42", "Yes", "No", "????", "Answer: maybe", "The request was unclear", "Both answers, first and second."]


@pytest.mark.parametrize("text", FIRST)
def test_parser_reads_first(text):
    assert parse_preference(text) == "first"


@pytest.mark.parametrize("text", SECOND)
def test_parser_reads_second(text):
    assert parse_preference(text) == "second"


@pytest.mark.parametrize("text", TIE)
def test_parser_reads_tie_when_allowed(text):
    assert parse_preference(text) == "tie"
    with pytest.raises(ReplyError, match="the reply is a tie") as caught:
        parse_preference(text, allow_tie=False)
    assert caught.value.raw == text


@pytest.mark.parametrize("text", MALFORMED)
def test_parser_refuses_malformed_replies_and_keeps_them(text):
    with pytest.raises(ReplyError, match=r"a verdict \(first, second or tie\) was asked, the reply has") as caught:
        parse_preference(text)
    assert caught.value.raw == text


def test_parser_refuses_non_text():
    with pytest.raises(ReplyError, match="reply content is NoneType, expected text"):
        parse_preference(None)


def test_verdicts_map_back_to_the_battle():
    assert [battle_verdict("ab", x) for x in ("first", "second", "tie")] == ["model_a", "model_b", "tie"]
    assert [battle_verdict("ba", x) for x in ("first", "second", "tie")] == ["model_b", "model_a", "tie"]


# --- prompts --------------------------------------------------------------------------------------

def test_bundled_prompts_and_user_prompt_errors(tmp_path, clips):
    assert "Tie" in load_arena_prompt(allow_ties=True).sections["user"]
    assert "Tie" not in load_arena_prompt().sections["user"]
    request = load_arena_prompt().request(clips["loud"], clips["mid"], None, "Say it cheerfully.")
    text = "".join(part for part in request.parts if isinstance(part, str))
    assert request.clips == [clips["loud"], clips["mid"]] and "The request (as text): Say it cheerfully." in text
    with pytest.raises(ValueError, match="neither question_path nor question_text"):
        load_arena_prompt().request(clips["loud"], clips["mid"], None, "  ")
    bad = tmp_path / "p.txt"
    bad.write_text("[system]\nJudge.\n[question_audio]\n{audio}\n[question_text]\n{text}\n[user]\n{question} {first}\n")
    with pytest.raises(ValueError, match=r"p.txt: section \[user\] lacks \{second\}"):
        load_arena_prompt(bad)


# --- the scorer against the fake server -----------------------------------------------------------

def test_loud_judge_asks_both_orders_and_agrees_with_the_louder_rule(clips):
    with ArenaJudgeServer("loud") as server:
        results = _score(server, _battles(clips), prices={MODEL: Price(input=1.0, output=2.0)})
        assert len(server.requests) == 2 * len(PAIRS)
        assert all(labels == ["question", "first", "second"] for labels in server.labels)
    assert results.schema == RESULTS and results["error"].to_list() == [None] * len(PAIRS)
    expected = [_louder(a, b) for _, a, b in PAIRS]
    assert results["winner_ab"].to_list() == expected and results["winner_ba"].to_list() == expected
    assert results["winner"].to_list() == expected and results["orders_agree"].all()
    assert results["judge"].unique().to_list() == [MODEL] and results["reference_judge"][0] == "human"
    assert results["orders"][0].to_list() == ["ab", "ba"] and len(results["raw_replies"][0]) == 2
    # per call: 100 text + 500 audio prompt tokens at $1/M, 2 completion tokens at $2/M; two calls
    assert results["cost"][0] == pytest.approx(2 * (600 * 1.0 + 2 * 2.0) / 1e6)


def test_always_first_judge_flips_every_swapped_pair(clips):
    with ArenaJudgeServer("first") as server:
        results = _score(server, _battles(clips))
    assert results["orders_agree"].to_list() == [False] * len(PAIRS) and set(results["winner"]) == {"tie"}
    metrics = evaluate_arena(battles_of_judge_results(results)[0], n_boot=20, l2=0.1, judge=MODEL)
    mine = metrics["by_judge"][MODEL]
    assert mine["position_bias"]["swap_flip_rate"] == 1.0 and mine["position_bias"]["first_position_win_rate"] == 1.0
    assert metrics["judge_agreement"][MODEL]["swapped"] == {"n_swapped_pairs": len(PAIRS), "consistency": 0.0}
    # only its A-B verdicts meet the humans' (same order): always model_a, right where the human picked A
    human_a = np.mean([_louder(a, b) == "model_a" for _, a, b in PAIRS])
    assert metrics["judge_agreement"][MODEL]["vs_human"]["accuracy"] == pytest.approx(human_a)


def test_malformed_replies_are_row_errors_with_raw_text_and_bad_rows_are_not_asked(clips):
    frame = pl.concat([_battles(clips, PAIRS[:2]), _battles(clips, [("p9", "loud", "mid")], audio=False),
                       _battles(clips, [("p8", "loud", "mid")], question=None)])
    with ArenaJudgeServer("malformed") as server:
        results = _score(server, frame)
        # two battles × two orders, each asked 3 times (the client's default 2 re-asks on a bad reply);
        # the battles without audio / question are not sent
        assert len(server.requests) == 2 * 2 * 3
    errors = results["error"].to_list()
    assert errors[0] == ("order ab (1 of 2): no valid reply after 3 replies; last: a verdict (first or second) was "
                         "asked, the reply has none: 'I am unable to compare these recordings.'")
    assert results["raw_replies"][0].to_list() == ["I am unable to compare these recordings."] * 2
    assert errors[2] == "the audio judge needs both answers' audio; audio_a_path and audio_b_path missing"
    assert errors[3] == "the audio judge needs the question: question_path or question_text"
    assert results["reference_winner"].to_list() == frame["winner"].to_list()
    battles, notes = battles_of_judge_results(results)
    assert notes["judge_failures"]["n"] == 4 and battles["judge"].to_list() == ["human"] * 4


def test_chatty_text_question_ties_and_one_order(clips):
    pairs = [("p1", "loud", "loud"), ("p2", "quiet", "mid")]
    with ArenaJudgeServer("chatty") as server:
        results = _score(server, _battles(clips, pairs, question="text"), allow_ties=True, orders="shown")
        assert len(server.requests) == 2 and all(labels == ["first", "second"] for labels in server.labels)
    assert results["winner"].to_list() == ["tie", "model_b"] and results["winner_ba"].to_list() == [None, None]
    assert results["orders_agree"].to_list() == [None, None] and results["answers"][0].to_list() == ["tie"]


def test_random_orders_are_seeded_per_battle(clips):
    frame = _battles(clips)
    with ArenaJudgeServer("loud") as server:
        one = _score(server, frame, orders="random", seed=7)
        again = _score(server, frame[::-1], orders="random", seed=7)
    assert one["orders"].to_list() == again["orders"].to_list()[::-1]
    assert one["winner"].to_list() == [_louder(a, b) for _, a, b in PAIRS]
    assert {o[0] for o in one["orders"].to_list()} == {"ab", "ba"}


def test_scoring_job_checks_settings_up_front(monkeypatch, tmp_path):
    for name in ("SDSCORE_JUDGE_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="the openai judge needs base_url"):
        scoring_job(judge="openai", model="m")
    with pytest.raises(ValueError, match="the openai judge needs a model name"):
        scoring_job(judge="openai", model="", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match=r"orders must be one of \['both', 'shown', 'random'\], got 'all'"):
        scoring_job(judge="openai", model="m", base_url="http://127.0.0.1:9/v1", orders="all")
    with pytest.raises(ValueError, match="unknown arena judge 'human'"):
        scoring_job(judge="human")
    with pytest.raises(ValueError, match="cannot read prompt file"):
        scoring_job(judge="openai", model="m", base_url="http://127.0.0.1:9/v1", prompt_file=tmp_path / "none.txt")
    monkeypatch.setenv("SDSCORE_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    job = scoring_job(judge="openai", model="m", cache_dir=tmp_path)
    assert job.scorer is ArenaAudioJudgeScorer and job.settings["base_url"] == "http://127.0.0.1:9/v1"
    assert job.score_settings()["orders"] == "both" and "cache_dir" not in job.score_settings()


# --- end to end: score, then eval -----------------------------------------------------------------

#: enough battles (and upsets) for every bootstrap resample of `eval arena` to have a finite MLE
MANY = [(f"{prompt}-{k}", a, b) for k in range(6)
        for prompt, a, b in [*PAIRS, ("p8", "mid", "quiet_shouts"), ("p9", "loud_mumbles", "mid")]]


def test_cli_score_then_eval_rates_the_judge_beside_the_humans(clips, tmp_path):
    manifest = tmp_path / "battles.parquet"
    frame = _battles(clips, MANY).with_columns(  # paths relative to the manifest, as users write them
        *(pl.col(c).str.replace(r".*/", "") for c in ("audio_a_path", "audio_b_path", "question_path")))
    for name in (*CLIPS, "question"):
        target = tmp_path / clips[name].rsplit("/", 1)[1]
        target.write_bytes(Path(clips[name]).read_bytes())
    write_manifest(frame, manifest)
    with ArenaJudgeServer("loud") as server:
        code = main(["score", "arena", str(manifest), "--judge", "openai", "--model", MODEL,
                     "--base-url", server.base_url, "--out", str(tmp_path / "judged.parquet")])
        assert code == 0 and len(server.requests) == 2 * len(MANY)
    assert main(["eval", "arena", str(tmp_path / "judged.parquet"), "--out", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["judges"] == [MODEL, "human"] and metrics["judge"] == "human"
    agreement = metrics["judge_agreement"][MODEL]
    assert agreement["vs_human"]["n_battles"] == len(MANY) and agreement["vs_human"]["accuracy"] == 1.0
    assert agreement["vs_human"]["kappa"] == pytest.approx(1.0)
    assert agreement["swapped"] == {"n_swapped_pairs": len(MANY), "consistency": 1.0}
    assert metrics["judge_failures"] == {"n": 0, "battle_ids": []}
    ratings = metrics["by_judge"][MODEL]["bradley_terry"]
    assert ratings["loud"]["rating"] > ratings["mid"]["rating"] > ratings["quiet"]["rating"]
    assert metrics["by_judge"][MODEL]["n_battles"] == 2 * len(MANY) and metrics["n_battles"] == len(MANY)
    # lengths came from the audio: the louder answer is the longer one except in the upsets
    winner_seconds = [CLIPS[a if _louder(a, b) == "model_a" else b][1] for _, a, b in MANY]
    longer_won = [CLIPS[a][1] > CLIPS[b][1] if _louder(a, b) == "model_a" else CLIPS[b][1] > CLIPS[a][1]
                  for _, a, b in MANY if CLIPS[a][1] != CLIPS[b][1]]
    assert metrics["length_bias"]["longer_win_rate"] == pytest.approx(np.mean(longer_won))
    assert metrics["length_bias"]["mean_winner_length"] == pytest.approx(np.mean(winner_seconds), abs=1e-3)
    # the HTML report reads the judge's results as battles too (the humans' rows beside the judge's)
    html = tmp_path / "report.html"
    assert main(["report", "--protocol", "arena", str(tmp_path / "judged.parquet"), "--metrics",
                 str(tmp_path / "m.json"), "--out", str(html)]) == 0
    assert MODEL in html.read_text(encoding="utf-8")


def test_report_reads_judge_results_with_failed_rows_as_battles(clips, tmp_path):
    from sdscore.report_document import _read_results, views

    frame = pl.concat([_battles(clips, PAIRS[:2]), _battles(clips, [("p9", "loud", "mid")], audio=False)])
    with ArenaJudgeServer("loud") as server:
        results = _score(server, frame)
    path = tmp_path / "judged.parquet"
    results.write_parquet(path)
    battles = _read_results(views()["arena"], path)  # what the report reads for the arena view
    assert sorted(set(battles["judge"].to_list())) == sorted({MODEL, "human"})
    assert battles.filter(pl.col("judge") == "human").height == frame.height  # the failed row keeps its human verdict


# --- length bias from the answers' audio ----------------------------------------------------------

def _durations(clips) -> dict[str, float]:
    return {name: sf.info(clips[name]).frames / sf.info(clips[name]).samplerate for name in CLIPS}


def test_length_bias_from_audio_equals_explicit_lengths(clips, tmp_path):
    seconds = _durations(clips)
    from_audio = _battles(clips)
    explicit = _battles(clips, audio=False).with_columns(
        length_a=pl.Series([seconds[a] for _, a, _ in PAIRS]), length_b=pl.Series([seconds[b] for _, _, b in PAIRS]))
    got = evaluate_arena(from_audio, n_boot=20, l2=0.1)
    want = evaluate_arena(explicit, n_boot=20, l2=0.1)
    assert got["length_bias"] == want["length_bias"] and got["length_bias"]["n_decisive"] == len(PAIRS)
    assert "warnings" not in got
    write_manifest(from_audio, tmp_path / "b.jsonl")  # through the reader too
    assert run_eval(tmp_path / "b.jsonl", tmp_path / "m.json", n_boot=20, l2=0.1)["length_bias"] == want["length_bias"]


def test_given_lengths_win_and_unreadable_audio_is_a_warning(clips, tmp_path):
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF....not audio")
    frame = _battles(clips).with_columns(
        audio_a_path=pl.when(pl.col("battle_id") == "b-p1").then(pl.lit(str(broken)))
        .when(pl.col("battle_id") == "b-p2").then(pl.lit(str(tmp_path / "missing.wav")))
        .otherwise(pl.col("audio_a_path")),
        length_b=pl.when(pl.col("battle_id") == "b-p3").then(100.0).otherwise(None))
    metrics = evaluate_arena(frame, n_boot=20, l2=0.1)
    assert metrics["warnings"] == [
        f"battle b-p{k}: cannot read the duration of {path} (audio_a_path: missing or unreadable audio); "
        "it is left out of the length bias" for k, path in ((1, broken), (2, tmp_path / "missing.wav"))]
    bias = metrics["length_bias"]
    assert bias["n_decisive"] == len(PAIRS) - 2 and metrics["n_battles"] == len(PAIRS)
    seconds = _durations(clips)  # b-p3: mid won against quiet, whose length is given: 100 s
    assert bias["mean_loser_length"] == pytest.approx(np.mean(
        [100.0 if p == "p3" else seconds[b if _louder(a, b) == "model_a" else a] for p, a, b in PAIRS[2:]]))


def test_eval_refuses_a_broken_judge_results_file_with_its_name(clips, tmp_path):
    with ArenaJudgeServer("loud") as server:
        results = _score(server, _battles(clips, PAIRS[:2]))
    path = tmp_path / "judged.parquet"
    results.drop("judge").write_parquet(path)
    with pytest.raises(ManifestError, match=r"judged.parquet: an arena judge results file needs column 'judge'"):
        run_eval(path, tmp_path / "m.json")
    results.with_columns(cost=pl.lit("free")).write_parquet(path)
    with pytest.raises(ManifestError, match=r"column 'cost' of an arena judge results file must be Float64, got Str"):
        run_eval(path, tmp_path / "m.json")
    results.with_columns(winner_ab=pl.lit("model_c")).write_parquet(path)
    with pytest.raises(ManifestError, match=r"judged.parquet.*winner"):
        run_eval(path, tmp_path / "m.json")
    path.write_bytes(b"PAR1 not parquet")
    assert main(["eval", "arena", str(path), "--out", str(tmp_path / "m.json")]) == 2
