"""LLM judges against a local server (blueprint, transcript and audio modes), prompt files, make_judge."""

from __future__ import annotations

import base64
import io
import json
import sys
import threading
import types
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from judge_data import BLUEPRINTS, CAPITAL, COUNT, blueprint, manifest
from judge_server import ChatServer, Reply, completion, labels_json

from sdscore.cli import main
from sdscore.corpus import write_manifest
from sdscore.errors import JudgeError
from sdscore.metrics.fusion import fuse
from sdscore.llm_judges.client import ChatClient, Price, RetryPolicy
from sdscore.protocols.judge import (
    JudgeItem,
    LLMJudge,
    LlmJudgeSettings,
    RuleBaselineJudge,
    RuleJudgeSettings,
    judge_settings,
    load_prompt,
    make_judge,
    score_judge,
)
from sdscore.protocols.judge.blueprint_view import trace_view
from sdscore.protocols.judge.interface import instruction_of
from sdscore.protocols.judge.results import results_settings


def _server_judge(server, mode="blueprint", **kwargs) -> LLMJudge:
    retry = RetryPolicy(max_retries=1, reply_retries=1, backoff_base_s=0.0)
    client = ChatClient(
        server.base_url,
        "judge-model",
        retry=retry,
        concurrency=2,
        prices={"judge-model": Price(1.0, 2.0)},
        sleep=lambda s: None,
    )
    return LLMJudge(client, mode, **kwargs)


def test_llm_blueprint_judge_against_a_local_server():
    def respond(index, body, headers):
        user = body["messages"][1]["content"]
        if "Good night" in user and COUNT in user:
            return completion("I refuse to answer in JSON")
        return completion(labels_json("1", "2", "both_bad"), 1000, 100)

    rows = [("A", CAPITAL, "a1.wav", "a2.wav"), ("X", COUNT, "b1.wav", "a2.wav"), ("D", CAPITAL, "a1.wav", "nope.wav")]
    with ChatServer(respond) as server:
        judge = _server_judge(server)
        out = score_judge(manifest(rows, with_labels=False), judge, fusion="s2sarena", blueprints=BLUEPRINTS)
        judge.client.close()
    assert out["item_id"].to_list() == ["A", "X", "D"]
    a = out.row(0, named=True)
    assert (a["content_pred"], a["voice_quality_pred"], a["paralinguistics_pred"]) == ("1", "2", "both_bad")
    assert a["overall_pred"] == fuse("1", "2", "both_bad", rule="s2sarena") == "both_bad"
    assert a["cost"] == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)
    assert out["error"][1].startswith("item X: no valid reply after 2 replies; last: reply is not valid JSON")
    assert out["error"][2] == "item D: no blueprint for the response 2 (nope.wav)"
    system = server.requests[0][1]["messages"][0]
    assert system["role"] == "system" and "both_good" in system["content"]
    first = next(body for _, body in server.requests if CAPITAL in body["messages"][1]["content"])
    prompt = first["messages"][1]["content"]
    assert json.dumps(trace_view(BLUEPRINTS["a1.wav"]), ensure_ascii=False) in prompt
    assert "Response 2 blueprint:\n" + json.dumps(trace_view(BLUEPRINTS["a2.wav"]), ensure_ascii=False) in prompt
    assert '"words"' not in prompt and "vad_segments" not in prompt


def test_llm_transcript_judge_with_asr_instruction_and_the_authors_prompt(tmp_path):
    authors = tmp_path / "authors.txt"
    authors.write_text(
        "[system]\nYou are an evaluator {of} audio.\n[user]\nHere is the user's input prompt: {user_prompt}\n"
        "Here is Audio 1 text transcript: {model_a_transcript}\nHere is Audio 2 text transcript: "
        '{model_b_transcript}\nRespond with keys "instruction_following_audio" ...'
    )
    reply = json.dumps(
        {"reasoning": "r", "content": "2", "voice_quality": "both_good", "instruction_following_audio": "1"}
    )
    blueprints = {**BLUEPRINTS, "q.wav": blueprint("what is the capital of australia")}
    frame = manifest([("A", None, "a1.wav", "a2.wav")], with_labels=False).with_columns(
        instruction_path=pl.lit("q.wav")
    )
    with ChatServer(lambda i, b, h: completion(reply)) as server:
        judge = _server_judge(server, "transcript", prompt=load_prompt("transcript", authors), instruction_source="asr")
        assert judge.needs_instruction_blueprint
        out = score_judge(frame, judge, blueprints=blueprints)
        text_judge = _server_judge(server, "transcript")
        missing = score_judge(frame, text_judge, blueprints=blueprints)
    assert out["paralinguistics_pred"].to_list() == ["1"] and out["error"].to_list() == [None]
    system, user = server.requests[0][1]["messages"]
    assert system["content"] == "You are an evaluator {of} audio."
    assert user["content"].startswith(
        "Here is the user's input prompt: what is the capital of australia\n"
        "Here is Audio 1 text transcript: The capital of Australia is Canberra.\n"
    )
    assert missing["error"][0] == "item A: no instruction to state (or use instruction_source='asr')"


def _wav(path: Path, seconds: float, rate: int = 22050) -> str:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)
    return str(path)


def test_llm_audio_judge_sends_wav_parts(tmp_path):
    paths = [_wav(tmp_path / f"{name}.wav", s) for name, s in (("q", 0.5), ("r1", 1.0), ("r2", 1.5))]
    frame = manifest(
        [("A", CAPITAL, paths[1], paths[2]), ("B", CAPITAL, paths[1], str(tmp_path / "gone.wav"))], with_labels=False
    ).with_columns(instruction_path=pl.lit(paths[0]))
    progress = []
    with ChatServer(lambda i, b, h: completion(labels_json())) as server:
        judge = _server_judge(server, "audio")
        assert not judge.needs_blueprints
        out = score_judge(frame, judge, progress=lambda *a: progress.append(a))
        asr = _server_judge(server, "audio", instruction_source="asr")
        spoken = score_judge(frame.head(1), asr, blueprints={paths[0]: blueprint("say the capital slowly")})
    assert out["error"][0] is None and "gone.wav" in out["error"][1]
    assert progress[-1] == ("judge: llm-audio", 2, 2)
    assert spoken["error"][0] is None
    assert "say the capital slowly" in server.requests[1][1]["messages"][1]["content"][0]["text"]
    parts = server.requests[0][1]["messages"][1]["content"]
    assert [p["type"] for p in parts] == ["text", "input_audio", "text", "input_audio", "text", "input_audio", "text"]
    assert CAPITAL in parts[0]["text"]
    durations = []
    for part in parts[1::2]:
        assert part["input_audio"]["format"] == "wav"
        samples, rate = sf.read(io.BytesIO(base64.b64decode(part["input_audio"]["data"])))
        durations.append(len(samples) / rate)
        assert rate == 16000
    assert durations == pytest.approx([0.5, 1.0, 1.5], abs=1e-3)


@pytest.mark.parametrize(
    ("text", "mode", "match"),
    [
        ("[user]\nno slots here", "blueprint", r"blueprint user template lacks \{response_1\}, \{response_2\}"),
        ("intro\n[user]\n{response_1} {response_2}", "transcript", "text before the first"),
        ("[user]\n{response_1}{response_2}\n[user]\nagain", "transcript", r"section \[user\] appears twice"),
        ("[system]\nonly a system", "transcript", r"no \[user\] section"),
        ("{instruction} {audio_1} {audio_2} {response_1}", "audio", r"\{response_1\} cannot be filled in audio mode"),
    ],
)
def test_prompt_files_are_checked(tmp_path, text, mode, match):
    path = tmp_path / "prompt.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_prompt(mode, path)


def test_prompt_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="unknown prompt mode 'video'"):
        load_prompt("video")
    with pytest.raises(ValueError, match="cannot read prompt file"):
        load_prompt("blueprint", tmp_path / "none.txt")
    with pytest.raises(ValueError, match="is for transcript mode but the judge runs in blueprint mode"):
        LLMJudge(ChatClient("http://127.0.0.1:9/v1", "m"), "blueprint", prompt=load_prompt("transcript"))
    with pytest.raises(ValueError, match="unknown instruction_source 'audio'"):
        RuleBaselineJudge(text_similarity="jaccard", instruction_source="audio")
    item = JudgeItem("z", "a.wav", "b.wav")
    with pytest.raises(JudgeError, match="item z: instruction_source='asr' needs the instruction audio's blueprint"):
        instruction_of(item, "asr")
    result = RuleBaselineJudge(text_similarity="jaccard", instruction_source="asr").judge_many([item])
    assert str(result[0]) == "item z: instruction_source='asr' needs the instruction audio's blueprint"


def test_make_judge_arguments(monkeypatch):
    monkeypatch.delenv("SDSCORE_JUDGE_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match=r"unknown judge 'gpt'; expected one of \['rule', 'openai'\]"):
        judge_settings("gpt")
    with pytest.raises(ValueError, match="the openai judge needs base_url"):
        make_judge(LlmJudgeSettings(model="m"))
    with pytest.raises(ValueError, match=r"the openai judge needs a model name \(--model\)"):
        make_judge(judge_settings("openai", base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(TypeError, match="make_judge takes RuleJudgeSettings or LlmJudgeSettings .*got dict"):
        make_judge({"judge": "openai", "model": "m"})
    assert isinstance(make_judge(), RuleBaselineJudge)  # the rule baseline's defaults
    assert isinstance(make_judge(RuleJudgeSettings(instruction_source="asr")), RuleBaselineJudge)
    monkeypatch.setenv("SDSCORE_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    judge = make_judge(judge_settings("openai", model="m", mode="transcript"))
    assert judge.client.url == "http://127.0.0.1:9/v1/chat/completions" and judge.name == "llm-transcript"
    judge.client.close()


def test_an_echoed_api_key_reaches_neither_results_nor_cache(tmp_path, monkeypatch):
    key = "sk-llm-S3CRET-9876543210"
    monkeypatch.setenv("SDSCORE_JUDGE_API_KEY", key)

    def respond(index, body, headers):
        if COUNT in body["messages"][1]["content"]:  # an invalid label quoting the key: the row's error
            return completion(labels_json(content=headers["authorization"]))
        return completion(labels_json(reasoning=f"the key was {headers['authorization']}"))

    rows = [("A", CAPITAL, "a1.wav", "a2.wav"), ("X", COUNT, "b1.wav", "b2.wav")]
    retry = RetryPolicy(max_retries=0, reply_retries=0)
    with ChatServer(respond) as server:
        for _ in range(2):  # the second run reads the cache
            client = ChatClient(server.base_url, "judge-model", retry=retry, cache_dir=tmp_path / "replies")
            with client:
                out = score_judge(manifest(rows, with_labels=False), LLMJudge(client), blueprints=BLUEPRINTS)
            assert out["reasoning"][0] == "the key was Bearer [redacted]"
            assert "content label 'Bearer [redacted]'" in out["error"][1]
            assert "S3CRET" not in repr(out.to_dicts())
    assert len(server.requests) == 3  # row A once (then cached), row X (not valid, so never cached) twice
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and all(b"S3CRET" not in p.read_bytes() for p in files)


def test_cli_timeout_reaches_the_client(tmp_path, monkeypatch):
    """`sdscore score judge --timeout 0.3` against a server that trickles: the row fails on the deadline."""
    class BlueprintBuilder:  # no audio analysis: the blueprints are the hand-written ones
        def __init__(self, cache_dir=None, **options):
            pass

        def build(self, paths):
            return [BLUEPRINTS[Path(p).name] for p in paths]

        def close(self):
            pass

    module = types.ModuleType("sdscore.features.blueprint")
    module.BlueprintBuilder = BlueprintBuilder
    monkeypatch.setitem(sys.modules, "sdscore.features.blueprint", module)
    path, out = tmp_path / "items.parquet", tmp_path / "llm.parquet"
    write_manifest(manifest([("A", CAPITAL, "a1.wav", "a2.wav")], with_labels=False), path)
    trickle = Reply(body=completion(labels_json()).body, trickle_s=0.2, trickle_body=True)
    codes: list = []

    def run(argv):
        try:
            codes.append(main(argv))
        except BaseException as error:  # noqa: BLE001 - shown by the assert below
            codes.append(error)
    with ChatServer(lambda index, body, headers: trickle) as server:
        argv = ["score", "judge", str(path), "--out", str(out), "--judge", "openai", "--base-url", server.base_url,
                "--model", "judge-model", "--timeout", "0.3"]
        thread = threading.Thread(target=run, args=(argv,), daemon=True)
        thread.start()
        thread.join(60)  # 5 attempts of 0.3 s and their backoff (under 8 s); the old per-read timeout: ~3 min
        assert not thread.is_alive(), "sdscore score judge --timeout 0.3 did not return"
    assert codes == [1]
    error = pl.read_parquet(out)["error"][0]
    assert "timed out after 0.3 s (the deadline" in error
    assert "timeout_s" not in results_settings(out)  # a deadline does not change a score: resumable with another


def test_audio_mode_refuses_files_over_the_cap_per_item(tmp_path):
    """An audio-mode judge sends whole files as base64: one longer than the cap fails its item, not the run."""
    short, long = _wav(tmp_path / "short.wav", 1.0), _wav(tmp_path / "long.wav", 3.0)
    frame = manifest([("A", CAPITAL, short, short), ("B", CAPITAL, short, long)], with_labels=False)
    with ChatServer(lambda i, b, h: completion(labels_json())) as server:
        judge = make_judge(LlmJudgeSettings(base_url=server.base_url, model="m", mode="audio", max_audio_seconds=2.0))
        out = score_judge(frame, judge)
        judge.client.close()
    assert out["error"][0] is None
    assert "long.wav: 3 s exceeds the configured cap of 2 s" in out["error"][1]
    assert len(server.requests) == 1
