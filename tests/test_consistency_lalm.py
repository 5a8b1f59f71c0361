"""consistency's LALM judge against the fake LALM server (tests/lalm_server.py): requests, prompts, answers,
option orders, position bias, per-row errors, and one table with an embedding method's results."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import polars as pl
import pytest
import soundfile as sf

from lalm_server import LalmServer, labelled_clips, pitch_hz
from sdscore.cli import main
from sdscore.corpus import CONSISTENCY_INSTANCES, write_manifest
from sdscore.errors import JudgeError
from sdscore.llm_judges.audio_request import AudioClip, AudioRequest
from sdscore.llm_judges.client import ChatClient, RetryPolicy
from sdscore.metrics.consistency import consistency_summary
from sdscore.protocols.consistency import (
    RESULTS,
    LalmConsistencyJudge,
    compare_runs,
    evaluate_consistency,
    load_consistency_prompt,
    run_eval,
    score_consistency,
)
from sdscore.protocols.consistency.scorer import LalmConsistencyScorer

TONES = {"t": 220.0, "alt": 440.0, "ref": 220.0, "s1": 220.0, "s2": 500.0, "s3": 300.0,
         "t2": 220.0, "t3": 220.0}


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, str]:
    """Sine 'voices' at other rates and formats than the endpoint's 16 kHz PCM16 WAV."""
    folder = tmp_path_factory.mktemp("tones")
    out = {}
    for i, (name, hz) in enumerate(TONES.items()):
        rate = (22050, 44100, 8000)[i % 3]
        t = np.arange(int(0.5 * rate)) / rate
        path = folder / (f"{name}.flac" if i % 2 else f"{name}.wav")
        sf.write(path, (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32), rate,
                 subtype="PCM_24" if i % 2 else "FLOAT")
        out[name] = str(path)
    return out


def _detection(clips, instance, scenario, names, true_turns, **extra):
    return {"instance_id": instance, "task": "detection", "dataset": "toy", "speaker_id": "spk", "scenario": scenario,
            "turn_paths": [clips[n] for n in names], "true_turns": true_turns, "reference_path": clips["ref"], **extra}


def _discrimination(clips, instance, **extra):
    return {"instance_id": instance, "task": "discrimination", "dataset": "toy", "speaker_id": "spk",
            "turn_paths": [clips["t"], clips["t2"], clips["t3"]], "reference_path": clips["ref"], "masked_turn": 1,
            "candidate_paths": [clips["s2"], clips["s1"], clips["s3"]], "candidate_scenarios": ["S2", "S1", "S3"],
            **extra}


def _manifest(*rows) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=CONSISTENCY_INSTANCES).with_columns(error=pl.lit(None, pl.String))


def _judge(server, task="auto", retry=None, **kwargs) -> LalmConsistencyJudge:
    client = ChatClient(server.base_url, "fake-lalm", json_mode=False, concurrency=4,
                        retry=retry or RetryPolicy(max_retries=0, reply_retries=0))
    return LalmConsistencyJudge(client, task, **kwargs)


def _score(judge: LalmConsistencyJudge, frame: pl.DataFrame) -> list[dict]:
    try:
        return judge.score(frame.to_dicts())
    finally:
        judge.client.close()


# --- the request layer --------------------------------------------------------------------------


def test_audio_request_resamples_any_input_to_pcm16_at_the_endpoint_rate(clips):
    request = AudioRequest("sys", ("Listen:", AudioClip(clips["s2"]), " then ", AudioClip(clips["t"]), "Done."))
    system, user = request.messages(sample_rate=16000)
    assert system == {"role": "system", "content": "sys"}
    kinds = [part["type"] for part in user["content"]]
    assert kinds == ["text", "input_audio", "text", "input_audio", "text"]
    assert [p["text"] for p in user["content"] if p["type"] == "text"] == ["Listen:", "then", "Done."]
    wav = base64.b64decode(user["content"][1]["input_audio"]["data"])
    info = sf.info(io.BytesIO(wav))
    assert (info.samplerate, info.subtype, info.channels) == (16000, "PCM_16", 1)
    assert pitch_hz(user["content"][1]["input_audio"]["data"]) == pytest.approx(500, abs=5)
    assert request.clips == [clips["s2"], clips["t"]]


def test_audio_request_size_cap(clips):
    request = AudioRequest("sys", (AudioClip(clips["t"]), AudioClip(clips["s1"])))
    with pytest.raises(JudgeError, match=r"over the 30 KiB cap \(max_request_bytes\) at .*s1.* \(2 clips at 16000 Hz\)"):
        request.messages(max_request_bytes=30 * 1024)
    assert len(request.messages(max_request_bytes=10 * 2**20)[1]["content"]) == 2
    with pytest.raises(TypeError, match="request part 0 is int"):
        AudioRequest("sys", (3,))


# --- prompts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["detection", "localization", "discrimination", "ranking", "per_turn",
                                    "per_turn_discrimination", "per_turn_ranking"])
def test_bundled_prompts_load(family):
    prompt = load_consistency_prompt(family)
    assert prompt.source == f"bundled {family} prompt" and prompt.sections["system"]


def test_user_prompt_file_and_its_errors(tmp_path, clips):
    good = tmp_path / "mine.txt"
    good.write_text("[system]\nS\n[reference]\nREF {audio}\n[turn]\n#{number} {audio}\n[user]\n{reference}\n"
                    "Same voice in {turns} for {target_speaker}? {json: {\"a\": 1}}\n")
    prompt = load_consistency_prompt("detection", good)
    request, numbers = prompt.turns_request([clips["t"], clips["t2"]], clips["ref"], "Ann")
    text = [p for p in request.parts if isinstance(p, str)]
    assert numbers == {1: 1 - 1, 2: 1} and "for Ann?" in "".join(text) and '{json: {"a": 1}}' in "".join(text)
    assert [p.path for p in request.parts if isinstance(p, AudioClip)] == [clips["ref"], clips["t"], clips["t2"]]
    bad = tmp_path / "bad.txt"
    bad.write_text("[system]\nS\n[reference]\n{audio}\n[turn]\nTurn {number}\n[user]\n{turns}\n")
    with pytest.raises(ValueError, match=r"bad.txt: section \[turn\] lacks \{audio\}"):
        load_consistency_prompt("detection", bad)
    bad.write_text("[system]\nS\n[user]\n{turns}\n")
    with pytest.raises(ValueError, match=r"missing section\(s\) \[turn\], \[reference\]"):
        load_consistency_prompt("detection", bad)
    bad.write_text("[system]\nS\n[reference]\n{audio}\n[turn]\n{number}{audio}\n[user]\n{turns}\n[turns]\nx\n")
    with pytest.raises(ValueError, match=r"unknown section\(s\) \[turns\]"):
        load_consistency_prompt("detection", bad)
    with pytest.raises(ValueError, match=r"mine.txt: the text-context condition needs \[context_turn\]"):
        load_consistency_prompt("detection", good, with_text_context=True)


# --- answers from the fake LALM -----------------------------------------------------------------


def test_tone_judge_answers_every_task(clips):
    frame = _manifest(
        _detection(clips, "d1", "S1", ["t", "t2", "t3"], []),
        _detection(clips, "d2", "S2", ["t", "alt", "t3"], [1]),
        _discrimination(clips, "x1"),
    )
    with LalmServer("tone") as server:
        auto = _score(_judge(server), frame)
        local = _score(_judge(server, "localization"), frame.head(2))
        ranked = _score(_judge(server, "ranking"), frame.tail(1))
    assert [r["inconsistent_pred"] for r in auto[:2]] == [False, True] and auto[2]["choice"] == "S1"
    assert [r["flagged_turns"] for r in local] == [[], [1]] and local[1]["answers"] == ["2"]
    assert ranked[0]["ranking"] == ["S1", "S3", "S2"]  # 220 Hz, then 300, then 500 against 220
    order = ranked[0]["option_orders"][0]
    assert sorted(order) == [0, 1, 2] and ranked[0]["answers"][0] == ">".join("ABC"[order.index(c)] for c in (1, 2, 0))
    assert all(r["error"] is None for r in auto + local + ranked) and auto[0]["raw_replies"] == ["YES"]


def test_scorer_writes_results_rows_that_evaluate(clips, tmp_path):
    frame = _manifest(_detection(clips, "d1", "S1", ["t", "t2"], []), _detection(clips, "d2", "S2", ["t", "alt"], [1]),
                      _detection(clips, "d3", "S3", ["alt", "t"], [0]), _discrimination(clips, "x1"))
    with LalmServer("chatty") as server:
        scorer = LalmConsistencyScorer("fake-lalm", server.base_url, task="auto")
        try:
            results = scorer(frame)
        finally:
            scorer.close()
    assert results.schema == RESULTS and results.height == 4
    assert results["method"].unique().to_list() == ["lalm"] and results["model"].unique().to_list() == ["fake-lalm"]
    summary = consistency_summary(results)
    assert summary["detection"] == {"S1": 1.0, "S2": 1.0, "S3": 1.0, "balanced": 1.0}
    assert summary["discrimination"]["accuracy"]["average"] == 1.0 and summary["discrimination"]["ndcg@1"] is None


def test_always_first_judge_shows_full_position_bias_and_leaves_embeddings_unchanged(clips, tmp_path):
    """The issue's check: --permutations all with a judge that always picks option A gives position bias
    1.0, and an embedding run evaluated beside it keeps exactly its own metrics."""
    rows = [_discrimination(clips, f"x{i}") for i in range(3)]
    frame = _manifest(*rows)
    with LalmServer("first") as server:
        judged = _score(_judge(server, "discrimination", permutations="all"), frame)
        assert len(server.requests) == 3 * 6
    for row in judged:
        assert sorted(map(tuple, row["option_orders"])) == sorted(
            [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)])
        assert row["answers"] == ["A"] * 6
    lalm = pl.DataFrame([{**r, "task": "discrimination", "instance_id": f"x{i}", "dataset": "toy", "method": "lalm",
                          "model": "always-first"} for i, r in enumerate(judged)], schema=RESULTS)
    options = evaluate_consistency(lalm)["options"]
    assert options["position_bias"] == 1.0 and options["position_shares"] == {"A": 1.0, "B": 0.0, "C": 0.0}
    assert options["order_agreement"] == pytest.approx(1 / 3) and options["order_consistent"] == 0.0

    hz_of = {path: TONES[name] for name, path in clips.items()}

    class Table:
        dim, name = 2, "table"

        def try_embed_files(self, paths, progress=None):
            angles = [np.log(hz_of[p] / 220.0) for p in paths]
            return np.array([[np.cos(a), np.sin(a)] for a in angles], np.float32), [None] * len(paths)

    lalm.write_parquet(tmp_path / "lalm.parquet")
    score_consistency(frame, Table(), "pairwise").write_parquet(tmp_path / "emb.parquet")
    alone = run_eval(tmp_path / "emb.parquet", tmp_path / "alone.json")
    both = compare_runs([tmp_path / "emb.parquet", tmp_path / "lalm.parquet"], tmp_path / "both.json")
    beside = {k: v for k, v in both["runs"]["pairwise (table)"].items() if k != "results_file"}
    assert json.loads(json.dumps(beside)) == json.loads(json.dumps(alone))
    table = {row["run"]: row for row in both["table"]}
    assert table["lalm (always-first)"]["position_bias"] == 1.0 and table["pairwise (table)"]["position_bias"] is None


def test_orders_are_seeded_per_row_and_independent_of_batching(clips):
    frame = _manifest(*[_discrimination(clips, f"x{i}") for i in range(6)])
    with LalmServer("last") as server:
        together = _score(_judge(server, "discrimination", seed=7), frame)
        alone = [_score(_judge(server, "discrimination", seed=7), frame.slice(i, 1))[0] for i in range(6)]
        other = _score(_judge(server, "discrimination", seed=8), frame)
    assert [r["option_orders"] for r in together] == [r["option_orders"] for r in alone]
    assert [r["option_orders"] for r in together] != [r["option_orders"] for r in other]
    assert len({tuple(r["option_orders"][0]) for r in together}) > 1  # rows do not all share one order
    for row in together:  # the last option shown is the pick
        assert row["choice"] == ["S2", "S1", "S3"][row["option_orders"][0][-1]] and row["answers"] == ["C"]


def test_malformed_reply_is_the_rows_error_with_raw_text_and_other_rows_go_on(clips):
    frame = _manifest(_detection(clips, "d1", "S1", ["t", "t2"], []),
                      {**_detection(clips, "bad", "S1", ["t"], []), "turn_paths": [clips["t"], "/nowhere/gone.wav"]})
    with LalmServer("malformed") as server:
        results = _score(_judge(server, retry=RetryPolicy(max_retries=0, reply_retries=1)), frame)
        assert len(server.requests) == 2  # asked again once; the missing file never reached the server
    assert results[0]["error"].startswith("no valid reply after 2 replies; last: a YES/NO answer was asked")
    assert results[0]["raw_replies"] == ["I am unable to judge these recordings."]
    assert "inconsistent_pred" not in results[0]
    assert "gone.wav" in results[1]["error"] and results[1]["raw_replies"] == [None]


def test_text_context_interleaves_interlocutors_and_maps_turn_numbers(clips):
    row = _detection(clips, "d", "S2", ["t", "alt"], [1], speaker_name="Ann",
                     dialogue_speakers=["Ann", "Bob", "Ann", "Bob"],
                     dialogue_texts=[None, "How was the trip?", None, "Nice."])
    with LalmServer("tone") as server:
        results = _score(_judge(server, "localization", text_context=True), _manifest(row))
        _, body = server.requests[0]
    text, labelled = labelled_clips(body)
    assert "Turn 2 (Bob, as text): How was the trip?" in text and "Turn 3 (Ann):" in text
    assert [label for label, _, _ in labelled] == ["reference", "turn 1", "turn 3"]
    assert results[0]["flagged_turns"] == [1] and results[0]["error"] is None  # shown turn 3 = Ann's 2nd turn
    bad = {**row, "dialogue_texts": [None, "Hi", "Hello", "Nice."]}
    with LalmServer("tone") as server:
        results = _score(_judge(server, "localization", text_context=True), _manifest(bad))
    assert results[0]["error"] == "dialogue_texts leaves 1 turns to audio (null) but turn_paths has 2"


def test_per_turn_and_no_reference(clips):
    frame = _manifest(_detection(clips, "d", "S2", ["t", "alt", "t2"], [1]), _discrimination(clips, "x"))
    with LalmServer("tone") as server:
        per_turn = _score(_judge(server, per_turn=True), frame)
        assert sorted(server.families) == ["per_turn"] * 3 + ["per_turn_discrimination"]
    assert per_turn[0]["flagged_turns"] == [1] and per_turn[0]["answers"] == ["YES", "NO", "YES"]
    assert per_turn[1]["choice"] == "S1"
    with LalmServer("tone") as server:
        no_ref = _score(_judge(server, "detection", reference=False), frame.head(1))
        text, labelled = labelled_clips(server.requests[0][1])
    assert [label for label, _, _ in labelled] == ["turn 1", "turn 2", "turn 3"] and no_ref[0]["inconsistent_pred"]
    with pytest.raises(ValueError, match="per-turn judging compares each turn with the reference"):
        LalmConsistencyJudge(ChatClient("http://127.0.0.1:9/v1", "m"), per_turn=True, reference=False)


def test_row_errors_before_any_call(clips):
    frame = _manifest(_detection(clips, "no-ref", "S1", ["t"], [], reference_path=None),
                      _discrimination(clips, "x", masked_turn=None),
                      _discrimination(clips, "two-labels", candidate_scenarios=["S1", "S1", "S3"]))
    with LalmServer("tone") as server:
        results = _score(_judge(server), frame)
        wrong_task = _score(_judge(server, "ranking"), frame.head(1))
        assert server.requests == []
    assert results[0]["error"] == "no reference_path (judge with --no-reference to leave the reference out)"
    assert results[1]["error"] == "masked_turn is needed to show where the candidates belong"
    assert results[2]["error"] == "candidate_scenarios must be distinct labels, got ['S1', 'S1', 'S3']"
    assert wrong_task[0]["error"] == "--task ranking asks discrimination rows; this row is a detection instance"


def test_slow_judge_times_out_into_the_rows_error(clips):
    with LalmServer("tone", delay_s=1.0) as server:
        client = ChatClient(server.base_url, "fake-lalm", json_mode=False, timeout_s=0.3,
                            retry=RetryPolicy(max_retries=1, reply_retries=0, backoff_base_s=0.0))
        results = _score(LalmConsistencyJudge(client, "detection"),
                         _manifest(_detection(clips, "d", "S1", ["t"], [])))
    assert "request failed after 2 attempts; last: timed out after 0.3 s" in results[0]["error"]


def test_cli_score_and_eval_in_one_table(clips, tmp_path):
    manifest = tmp_path / "m.parquet"
    write_manifest(_manifest(_detection(clips, "d1", "S1", ["t", "t2"], []),
                             _detection(clips, "d2", "S2", ["t", "alt"], [1]),
                             _discrimination(clips, "x1")).drop("error"), manifest)
    with LalmServer("tone") as server:
        code = main(["score", "consistency", str(manifest), "--judge", "openai", "--model", "fake-lalm",
                     "--base-url", server.base_url, "--task", "auto", "--permutations", "all",
                     "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "lalm.parquet")])
        assert code == 0 and len(server.requests) == 2 + 6
    results = pl.read_parquet(tmp_path / "lalm.parquet")
    assert results["error"].to_list() == [None] * 3 and results["choice"][2] == "S1"
    assert main(["eval", "consistency", str(tmp_path / "lalm.parquet"), "--out", str(tmp_path / "one.json")]) == 0
    metrics = json.loads((tmp_path / "one.json").read_text())
    assert metrics["method"] == "lalm" and metrics["options"]["position_bias"] == pytest.approx(0.0)
    assert metrics["options"]["order_consistent"] == 1.0 and metrics["detection"]["balanced"] is None


def test_scoring_job_checks_lalm_settings_up_front(monkeypatch, tmp_path):
    from sdscore.protocols.consistency import scoring_job

    for name in ("SDSCORE_JUDGE_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="the openai judge needs base_url"):
        scoring_job(judge="openai", model="m")
    with pytest.raises(ValueError, match="the openai judge needs a model name"):
        scoring_job(judge="openai", model="", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="a prompt file is for one question; name the task"):
        scoring_job(judge="openai", model="m", base_url="http://127.0.0.1:9/v1", prompt_file=tmp_path / "p.txt")
    with pytest.raises(ValueError, match="unknown consistency judge 'gpt'"):
        scoring_job(judge="gpt")
    monkeypatch.setenv("SDSCORE_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    job = scoring_job(judge="openai", model="m", task="ranking", permutations="all", cache_dir=tmp_path)
    assert job.scorer is LalmConsistencyScorer and job.settings["base_url"] == "http://127.0.0.1:9/v1"
    assert job.score_settings()["permutations"] == "all" and "cache_dir" not in job.score_settings()
    # the threshold in force is recorded (the method's default here), so --resume never mixes two defaults
    assert scoring_job(method="centroid-raw").settings == {"method": "centroid-raw", "threshold": 0.3}


def test_user_prompt_file_on_the_command_line(clips, tmp_path):
    prompt = tmp_path / "yesno.txt"
    prompt.write_text("[system]\nJudge voices.\n[reference]\nAnchor: {audio}\n[turn]\nTurn {number}: {audio}\n"
                      "[user]\n{reference}\n{turns}\nOne voice for {target_speaker}? Say YES or NO.\n")
    manifest = tmp_path / "m.parquet"
    write_manifest(_manifest(_detection(clips, "d2", "S2", ["t", "alt"], [1])).drop("error"), manifest)
    with LalmServer("tone") as server:
        code = main(["score", "consistency", str(manifest), "--judge", "openai", "--model", "fake-lalm",
                     "--base-url", server.base_url, "--task", "detection", "--prompt-file", str(prompt),
                     "--out", str(tmp_path / "r.parquet")])
        system = server.requests[0][1]["messages"][0]["content"]
        text, _ = labelled_clips(server.requests[0][1])
    assert code == 0 and system == "Judge voices." and "One voice for spk? Say YES or NO." in text
    assert pl.read_parquet(tmp_path / "r.parquet")["inconsistent_pred"].to_list() == [True]


@pytest.mark.parametrize(("task", "per_turn", "expected"), [
    ("detection", False, {"answers": ["YES"], "inconsistent_pred": False}),
    ("localization", False, {"answers": ["2"], "flagged_turns": [1]}),
    ("detection", True, {"answers": ["YES", "YES"], "flagged_turns": []}),
    ("discrimination", False, {"answers": ["B"]}),
    ("ranking", True, {"answers": ["B>A>C"]}),
])
def test_canned_replies_per_family(clips, task, per_turn, expected):
    row = _detection(clips, "d", "S1", ["t", "t2"], []) if task in ("detection", "localization") \
        else _discrimination(clips, "x")
    with LalmServer("canned") as server:
        result = _score(_judge(server, task, per_turn=per_turn), _manifest(row))[0]
        families = set(server.families)
    assert families == {("per_turn_" if per_turn and task not in ("detection", "localization") else "")
                        + ("per_turn" if per_turn and task in ("detection", "localization") else task)}
    assert {k: result[k] for k in expected} == expected and result["error"] is None
    if task in ("discrimination", "ranking"):  # option B is whichever candidate was shown second
        shown_second = result["option_orders"][0][1]
        picked = result.get("choice") or result["ranking"][0]
        assert picked == ["S2", "S1", "S3"][shown_second]
