"""`sdscore score judge` settings declared once (protocols/judge/settings.py): one class per --judge, from
which the CLI options, make_judge's and JudgeScorer's keyword checks and the run record come."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sdscore.protocols.judge.choices import FUSIONS
from sdscore.protocols.judge.scorer import JudgeScorer, scoring_job
from sdscore.protocols.judge.settings import OPTIONS, LlmJudgeSettings, RuleJudgeSettings, judge_settings
from sdscore.protocols.judge.spec import SPEC
from sdscore.protocols.registry import protocol
from sdscore.runtime.scorer import ScoringJob
from sdscore.runtime.settings import SettingsError, build_mode, run_record, volatile_names

URL = "http://127.0.0.1:9/v1"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    protocol("judge").options().add_score_options(parser)
    return parser


def _score_settings(*argv: str) -> dict:
    return protocol("judge").options().score_settings(_parser().parse_args(list(argv)))


def test_the_options_keep_their_flags_defaults_and_choices():
    flags = {flag: action for action in _parser()._actions for flag in action.option_strings}
    assert sorted(flags) == ["--base-url", "--cache-dir", "--concurrency", "--drop-group", "--fusion",
                             "--instruction-source", "--judge", "--labels", "--max-audio-seconds", "--mode", "--model",
                             "--pitch", "--prompt-file", "--temperature", "--timeout"]
    assert flags["--judge"].choices == ["rule", "openai"] and flags["--judge"].default == "rule"
    assert flags["--fusion"].choices == ["speakbench", "speakbench-paper", "s2sarena", "majority"]
    assert flags["--fusion"].default == "speakbench" and flags["--mode"].default == "blueprint"
    assert flags["--mode"].choices == ["blueprint", "transcript", "audio"]
    assert flags["--labels"].choices == ["typed", "original"] and flags["--labels"].default == "typed"
    assert flags["--instruction-source"].choices == ["text", "asr"] and flags["--pitch"].choices == ["aubio", "yin"]
    assert flags["--drop-group"].metavar == "GROUP[,GROUP]" and flags["--drop-group"].dest == "drop_groups"
    assert flags["--timeout"].metavar == "SECONDS" and flags["--timeout"].dest == "timeout_s"
    assert flags["--timeout"].default == 120.0 and flags["--concurrency"].default == 8
    assert flags["--max-audio-seconds"].default == 600.0 and flags["--cache-dir"].type is Path


def test_the_light_fusion_names_are_the_fusion_rules():
    from sdscore.metrics.fusion import FUSION_RULES

    assert FUSIONS == FUSION_RULES


def test_an_option_of_the_other_judge_is_refused():
    with pytest.raises(SettingsError, match=r"^--labels, --drop-group are for --judge openai; with --judge rule they "
                                            r"would be ignored: drop them or choose that mode$"):
        _score_settings("--labels", "original", "--drop-group", "emotion")
    with pytest.raises(SettingsError, match="--model, --base-url are for --judge openai; with --judge rule"):
        _score_settings("--model", "m", "--base-url", URL)
    assert _score_settings("--fusion", "majority") == {
        "judge": "rule", "fusion": "majority", "instruction_source": "text", "cache_dir": None, "pitch": "yin",
        "max_audio_seconds": 600.0}


def test_api_keywords_are_checked_naming_the_valid_ones():
    with pytest.raises(SettingsError, match=r"unknown setting 'modle' for LlmJudgeSettings; valid: model, base_url, "
                                            r"prompt_file, concurrency, cache_dir, timeout_s, prices, temperature, fusion, "
                                            r"instruction_source, pitch, max_audio_seconds, mode, labels, drop_groups"):
        judge_settings("openai", modle="m")
    with pytest.raises(SettingsError, match=r"^labels, model are not a setting of judge='rule' \(RuleJudgeSettings\); "
                                            r"valid: cache_dir, fusion, instruction_source, max_audio_seconds, pitch$"):
        judge_settings("rule", model="m", labels="original")
    with pytest.raises(SettingsError, match=r"unknown judge 'gpt'; expected one of \['rule', 'openai'\]"):
        judge_settings("gpt")
    with pytest.raises(SettingsError, match=r"mode must be one of \['blueprint', 'transcript', 'audio'\], got 'video'"):
        judge_settings("openai", model="m", mode="video")
    with pytest.raises(SettingsError, match=r"concurrency must be int, got '4' \(a setting of LlmJudgeSettings\)"):
        judge_settings("openai", model="m", concurrency="4")
    with pytest.raises(SettingsError, match="unknown setting 'fusoin' for RuleJudgeSettings"):
        JudgeScorer(fusoin="majority")  # the Scorer checks its keywords before loading anything
    with pytest.raises(SettingsError, match="model is not a setting of judge='rule'"):
        scoring_job(model="m")


def test_feature_groups_have_one_spelling():
    assert LlmJudgeSettings(model="m", drop_groups="properties, emotion").drop_groups == ("emotion", "properties")
    assert judge_settings("openai", model="m", drop_groups=["quality", "quality"]).drop_groups == ("quality",)
    given = _score_settings("--judge", "openai", "--drop-group", "quality,emotion")
    assert given["drop_groups"] == ("emotion", "quality")
    with pytest.raises(ValueError, match=r"unknown blueprint feature group\(s\) \['pitch'\]"):
        _score_settings("--judge", "openai", "--drop-group", "pitch")


def test_the_run_record_leaves_volatile_settings_out():
    assert volatile_names(RuleJudgeSettings) == ("cache_dir",)
    assert volatile_names(LlmJudgeSettings) == ("concurrency", "cache_dir", "timeout_s")
    record = run_record(LlmJudgeSettings(model="m", cache_dir=Path("/c"), concurrency=2, timeout_s=5.0))
    assert not {"cache_dir", "concurrency", "timeout_s"} & set(record) and record["model"] == "m"
    first = scoring_job(judge="openai", model="m", base_url=URL, cache_dir="/a", concurrency=2, timeout_s=5.0)
    resumed = scoring_job(judge="openai", model="m", base_url=URL, cache_dir="/b", concurrency=9, timeout_s=60.0)
    assert first.score_settings() == resumed.score_settings()  # a volatile change resumes
    assert first.score_settings() != scoring_job(judge="openai", model="m", base_url=URL, mode="audio").score_settings()
    rule = scoring_job(cache_dir="/a")
    assert rule.score_settings() == scoring_job(cache_dir="/b").score_settings()
    assert rule.settings_class is RuleJudgeSettings and first.settings_class is LlmJudgeSettings


def test_a_job_records_its_judge_beside_that_judge_s_settings():
    job = ScoringJob(SPEC, JudgeScorer, {"fusion": "majority"})  # no judge: the default one
    assert job.score_settings() == {"fusion": "majority", "instruction_source": "text", "judge": "rule",
                                    "max_audio_seconds": 600.0, "pitch": "yin"}
    assert list(job.score_settings()) == sorted(job.score_settings())
    with pytest.raises(SettingsError, match=r"unknown judge 'gpt'; expected one of \['rule', 'openai'\]"):
        ScoringJob(SPEC, JudgeScorer, {"judge": "gpt"})
    with pytest.raises(SettingsError, match="prompt_file is not a setting of judge='rule'"):
        ScoringJob(SPEC, JudgeScorer, {"judge": "rule", "prompt_file": "p.txt"})
    assert build_mode(OPTIONS, None, {}) == RuleJudgeSettings()


# Computed by the code before the conversion (commit 007a68f: options.score_settings + JudgeScorer's
# signature); `--resume` of an LLM-judge run started then must still find the same record. A rule-judge run
# records only the rule judge's settings now (it recorded the LLM judge's defaults too: model None, mode
# "blueprint", ...), so a rule run interrupted before this change is scored again, not resumed.
OLD_RECORDS = [
    (["--judge", "openai", "--model", "m", "--base-url", URL],
     {"base_url": URL, "drop_groups": [], "fusion": "speakbench", "instruction_source": "text", "judge": "openai",
      "labels": "typed", "max_audio_seconds": 600.0, "mode": "blueprint", "model": "m", "pitch": "yin",
      "prices": None, "prompt_file": None}),
    (["--judge", "openai", "--model", "gpt", "--base-url", URL, "--mode", "transcript", "--labels", "original",
      "--fusion", "s2sarena", "--instruction-source", "asr", "--concurrency", "3", "--timeout", "9", "--cache-dir",
      "/tmp/c", "--pitch", "aubio", "--max-audio-seconds", "0"],
     {"base_url": URL, "drop_groups": [], "fusion": "s2sarena", "instruction_source": "asr", "judge": "openai",
      "labels": "original", "max_audio_seconds": 0.0, "mode": "transcript", "model": "gpt", "pitch": "aubio",
      "prices": None, "prompt_file": None}),
    (["--judge", "openai", "--model", "gpt", "--base-url", URL, "--drop-group", "quality,emotion"],
     {"base_url": URL, "drop_groups": ["emotion", "quality"], "fusion": "speakbench", "instruction_source": "text",
      "judge": "openai", "labels": "typed", "max_audio_seconds": 600.0, "mode": "blueprint", "model": "gpt",
      "pitch": "yin", "prices": None, "prompt_file": None}),
]


@pytest.mark.parametrize(("argv", "record"), OLD_RECORDS, ids=[str(i) for i in range(len(OLD_RECORDS))])
def test_an_llm_judge_s_run_record_equals_the_hand_written_one(argv, record):
    job = scoring_job(**_score_settings(*argv))
    assert job.scorer_name == "sdscore.protocols.judge.scorer:JudgeScorer"
    assert job.score_settings() == record


def test_the_api_s_run_record_keeps_prices_and_the_endpoint_from_the_environment(monkeypatch):
    monkeypatch.setenv("SDSCORE_JUDGE_BASE_URL", URL)
    job = scoring_job(judge="openai", model="m", prices={"m": (1.0, 2.0)}, drop_groups=("emotion",))
    # as the code before the conversion recorded it (commit 007a68f)
    assert job.score_settings() == {
        "base_url": URL, "drop_groups": ["emotion"], "fusion": "speakbench", "instruction_source": "text",
        "judge": "openai", "labels": "typed", "max_audio_seconds": 600.0, "mode": "blueprint", "model": "m",
        "pitch": "yin", "prices": {"m": [1.0, 2.0]}, "prompt_file": None}
