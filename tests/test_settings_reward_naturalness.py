"""reward and naturalness settings declared once (protocols/reward/settings.py, protocols/naturalness/
settings.py): the CLI options, the Scorers' keyword checks and the run record come from the classes; the
records of command lines equal the hand-written ones `--resume` compared before the conversion."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdscore.protocols.naturalness.settings import NaturalnessSettings
from sdscore.protocols.registry import protocol
from sdscore.protocols.reward.settings import RewardJudgeSettings, RewardModelSettings
from sdscore.runtime.settings import Options, SettingsError, add_options, run_record, setting, volatile_names

URL = "http://127.0.0.1:9/v1"
REWARD_MODEL = "sdscore.protocols.reward.scorer:RewardPairsScorer"
REWARD_JUDGE = "sdscore.protocols.reward.audio_judge:RewardAudioJudgeScorer"
NATURALNESS = "sdscore.protocols.naturalness.scorer:NaturalnessScorer"
# Computed by the code before the conversion (options.score_settings + the Scorers' signatures, with
# ScoringJob's volatile names): a run started then must still resume.
OLD_RECORDS = [
    ("reward", ["--model", "/tmp/rm"], REWARD_MODEL,
     {"backend": "auto", "base": None, "device": "auto", "dtype": "auto", "max_audio_seconds": 600.0, "max_batch": 16,
      "max_tokens": None, "model": "/tmp/rm", "store_pooled": False, "system_prompt": None}),
    ("reward", ["--model", "/tmp/rm", "--base", "/tmp/base", "--system-prompt", "/tmp/sp.txt", "--backend", "torch",
                "--device", "cpu", "--dtype", "float32", "--max-batch", "4", "--max-tokens", "900",
                "--no-prefix-sharing", "--store-pooled", "--max-audio-seconds", "30"], REWARD_MODEL,
     {"backend": "torch", "base": "/tmp/base", "device": "cpu", "dtype": "float32", "max_audio_seconds": 30.0,
      "max_batch": 4, "max_tokens": 900, "model": "/tmp/rm", "store_pooled": True, "system_prompt": "/tmp/sp.txt"}),
    ("reward", ["--judge", "openai", "--model", "m", "--base-url", URL], REWARD_JUDGE,
     {"audio_rate": 16000, "base_url": URL, "max_audio_seconds": 600.0, "max_request_bytes": 20971520, "model": "m",
      "orders": "both", "prices": None, "prompt_file": None, "seed": 0}),
    ("reward", ["--judge", "openai", "--model", "pair-7b", "--base-url", URL, "--orders", "shown", "--seed", "5",
                "--concurrency", "2", "--cache-dir", "/tmp/c", "--timeout", "7", "--audio-rate", "24000",
                "--max-request-bytes", "1000", "--max-audio-seconds", "0"], REWARD_JUDGE,
     {"audio_rate": 24000, "base_url": URL, "max_audio_seconds": 0.0, "max_request_bytes": 1000, "model": "pair-7b",
      "orders": "shown", "prices": None, "prompt_file": None, "seed": 5}),
    ("naturalness", [], NATURALNESS,
     {"dialect_dir": None, "emotion_dir": None, "lid_dir": None, "max_audio_seconds": 600.0, "mos_dir": None,
      "whisper_dir": None}),
    ("naturalness", ["--whisper-dir", "/tmp/w", "--lid-dir", "/tmp/l", "--dialect-dir", "/tmp/d", "--emotion-dir",
                     "/tmp/e", "--mos-dir", "/tmp/m", "--jobs", "3", "--cache-dir", "/tmp/c", "--max-audio-seconds",
                     "12", "--emotional-naturalness-dir", "/tmp/n"], NATURALNESS,
     {"dialect_dir": "/tmp/d", "emotion_dir": "/tmp/e", "emotional_naturalness_dir": "/tmp/n", "lid_dir": "/tmp/l",
      "max_audio_seconds": 12.0, "mos_dir": "/tmp/m", "whisper_dir": "/tmp/w"}),
]


def _parser(name: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    protocol(name).options().add_score_options(parser)
    return parser


def _score_settings(name: str, *argv: str) -> dict:
    return protocol(name).options().score_settings(_parser(name).parse_args(list(argv)))


def _flags(name: str) -> dict[str, argparse.Action]:
    return {flag: action for action in _parser(name)._actions for flag in action.option_strings}


def _group_flags(name: str, title: str) -> list[str]:
    group = next(g for g in _parser(name)._action_groups if g.title == title)
    return [flag for action in group._group_actions for flag in action.option_strings]


@pytest.mark.parametrize(("name", "argv", "scorer", "record"), OLD_RECORDS,
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(OLD_RECORDS)])
def test_the_generated_run_record_equals_the_hand_written_one(monkeypatch, name, argv, scorer, record):
    for variable in ("SDSCORE_JUDGE_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    job = protocol(name).scoring_job(**_score_settings(name, *argv))
    assert job.scorer_name == scorer
    assert job.score_settings() == record


# ---- the command line: flags, defaults, help and groups come from the classes ---------------------------


def test_reward_options_keep_their_flags_defaults_and_help():
    flags = _flags("reward")
    assert sorted(flags) == ["--audio-rate", "--backend", "--base", "--base-url", "--cache-dir", "--concurrency",
                             "--device", "--dtype", "--judge", "--max-audio-seconds", "--max-batch",
                             "--max-request-bytes", "--max-tokens", "--model", "--no-prefix-sharing", "--orders",
                             "--prompt-file", "--seed", "--store-pooled", "--system-prompt", "--temperature", "--timeout"]
    assert flags["--judge"].default == "reward-model" and flags["--judge"].choices == ["reward-model", "openai"]
    assert flags["--backend"].choices == ["auto", "torch", "onnxruntime", "tensorrt"]
    assert flags["--no-prefix-sharing"].dest == "share_prefixes" and flags["--no-prefix-sharing"].default is True
    assert flags["--max-batch"].default == 16 and flags["--max-batch"].type is int
    assert flags["--timeout"].dest == "timeout_s" and flags["--timeout"].metavar == "SECONDS"
    assert flags["--model"].type is str  # one flag for the reward model's folder and the judge's model name
    assert flags["--max-batch"].help == "episodes per forward"
    assert flags["--cache-dir"].help == "cache of validated replies (keyed by request content)"
    assert flags["--max-request-bytes"].help.endswith("a pair over it fails")
    assert "--num-threads" not in flags  # an API-only setting
    assert sorted(_group_flags("reward", "audio-LLM judge (--judge openai)")) == [
        "--audio-rate", "--base-url", "--cache-dir", "--concurrency", "--max-request-bytes", "--orders",
        "--prompt-file", "--seed", "--temperature", "--timeout"]


def test_naturalness_options_keep_their_flags_defaults_and_groups():
    flags = _flags("naturalness")
    assert sorted(flags) == ["--audio-rate", "--base-url", "--cache-dir", "--concurrency", "--dialect-dir",
                             "--emotion-dir", "--emotional-naturalness-dir", "--jobs", "--judge", "--lid-dir",
                             "--max-audio-seconds", "--max-request-bytes", "--model", "--mos-dir", "--prompt-file",
                             "--temperature", "--timeout", "--turn-taking-model", "--whisper-dir"]
    assert flags["--judge"].default == "features" and flags["--judge"].choices == ["features", "openai"]
    assert _group_flags("naturalness", "stance judge (--judge openai)") == [
        "--model", "--base-url", "--prompt-file", "--concurrency", "--timeout", "--temperature", "--audio-rate",
        "--max-request-bytes"]
    assert flags["--jobs"].type is int and flags["--jobs"].default is None and flags["--mos-dir"].type is Path
    assert flags["--max-audio-seconds"].default == 600.0
    assert flags["--lid-dir"].help == "an audio language-ID classifier (e.g. MMS-LID); default: py3langid on the transcript"
    assert _group_flags("naturalness", "local model folders (none ships; the columns stay null with the reason)") == [
        "--whisper-dir", "--lid-dir", "--dialect-dir", "--emotion-dir", "--emotional-naturalness-dir", "--mos-dir",
        "--turn-taking-model"]


def test_a_setting_s_group_puts_its_option_under_that_title():
    @dataclass(frozen=True)
    class Grouped:
        a_dir: Path | None = setting(None, group="folders", help="a")
        b_dir: Path | None = setting(None, group="folders", help="b")
        level: int = setting(1, help="level")

    parser = argparse.ArgumentParser(add_help=False)
    add_options(parser, Options({"only": Grouped}))
    titles = {g.title: [a.dest for a in g._group_actions] for g in parser._action_groups}
    assert titles["folders"] == ["a_dir", "b_dir"] and "level" not in titles["folders"]


def test_an_option_of_the_other_reward_mode_is_refused():
    with pytest.raises(SettingsError, match=r"--device, --max-batch are for --judge reward-model; with --judge "
                                            r"openai they would be ignored: drop them or choose that mode"):
        _score_settings("reward", "--judge", "openai", "--model", "m", "--device", "cpu", "--max-batch", "2")
    with pytest.raises(SettingsError, match=r"--no-prefix-sharing is for --judge reward-model; with --judge openai"):
        _score_settings("reward", "--judge", "openai", "--model", "m", "--no-prefix-sharing")
    with pytest.raises(SettingsError, match=r"--base-url, --cache-dir are for --judge openai; with --judge "
                                            r"reward-model they would be ignored"):
        _score_settings("reward", "--base-url", URL, "--cache-dir", "c")
    with pytest.raises(SettingsError, match=r"--seed is for --orders shown; with --orders both it would be ignored"):
        _score_settings("reward", "--judge", "openai", "--model", "m", "--seed", "3")
    shown = _score_settings("reward", "--judge", "openai", "--model", "m", "--orders", "shown", "--seed", "3")
    assert shown["judge"] == "openai" and shown["seed"] == 3 and shown["timeout_s"] == 120.0
    both = _score_settings("reward", "--model", "m", "--max-audio-seconds", "5", "--no-prefix-sharing")
    assert both["judge"] == "reward-model" and both["share_prefixes"] is False and both["max_audio_seconds"] == 5.0


# ---- the API: the Scorers' keyword checks ----------------------------------------------------------------


def test_an_unknown_keyword_names_the_valid_ones():
    from sdscore.protocols.naturalness.scorer import NaturalnessScorer
    from sdscore.protocols.reward.audio_judge import RewardAudioJudgeScorer
    from sdscore.protocols.reward.scorer import RewardPairsScorer

    with pytest.raises(SettingsError, match=r"unknown setting 'max_batches' for RewardModelSettings; valid: model, "
                                            r"base, system_prompt, backend, device, dtype, max_batch, max_tokens, "
                                            r"share_prefixes, store_pooled, max_audio_seconds, num_threads$"):
        RewardPairsScorer(max_batches=4)
    with pytest.raises(SettingsError, match=r"unknown setting 'device' for RewardJudgeSettings; valid: model, "
                                            r"base_url, prompt_file, .*, orders, seed$"):
        RewardAudioJudgeScorer("m", URL, device="cpu")
    with pytest.raises(SettingsError, match=r"unknown setting 'whisper' for NaturalnessSettings; valid: whisper_dir, "
                                            r"lid_dir, dialect_dir, emotion_dir, emotional_naturalness_dir, mos_dir, "
                                            r"turn_taking_model, jobs, cache_dir, "
                                            r"max_audio_seconds$"):
        NaturalnessScorer(whisper="w")


def test_the_jobs_check_types_and_choices():
    from sdscore.protocols.naturalness.scorer import scoring_job as naturalness_job
    from sdscore.protocols.reward.scorer import scoring_job as reward_job

    with pytest.raises(SettingsError, match=r"backend must be one of \['auto', 'torch', 'onnxruntime', 'tensorrt'\], "
                                            r"got 'trt' \(a setting of RewardModelSettings\)"):
        reward_job(model="/tmp/rm", backend="trt")
    with pytest.raises(SettingsError, match=r"store_pooled must be bool, got 'yes'"):
        reward_job(model="/tmp/rm", store_pooled="yes")
    with pytest.raises(SettingsError, match=r"unknown setting 'device' for RewardJudgeSettings"):
        reward_job(judge="openai", model="m", base_url=URL, device="cpu")
    with pytest.raises(SettingsError, match=r"orders must be one of \['both', 'shown'\], got 'random'"):
        reward_job(judge="openai", model="m", base_url=URL, orders="random")
    with pytest.raises(ValueError, match=r"jobs must be a whole number >= 1, got 0"):
        naturalness_job(jobs=0)
    with pytest.raises(SettingsError, match=r"max_audio_seconds must be float, got '9'"):
        naturalness_job(max_audio_seconds="9")


# ---- the run record: volatile settings left out -----------------------------------------------------------


def test_the_run_record_leaves_volatile_settings_out():
    assert volatile_names(RewardModelSettings) == ("share_prefixes", "num_threads")
    assert volatile_names(RewardJudgeSettings) == ("concurrency", "cache_dir", "timeout_s")
    assert volatile_names(NaturalnessSettings) == ("jobs", "cache_dir")
    assert run_record(RewardModelSettings(share_prefixes=False, num_threads=3)) == run_record(RewardModelSettings())
    assert run_record(RewardModelSettings(max_batch=4)) != run_record(RewardModelSettings())  # kept: as before
    judge = run_record(RewardJudgeSettings(model="m", concurrency=2, cache_dir=Path("/c"), timeout_s=5.0))
    assert judge == run_record(RewardJudgeSettings(model="m"))
    assert "seed" in judge and "orders" in judge
    assert run_record(NaturalnessSettings(jobs=2, cache_dir=Path("/c"))) == run_record(NaturalnessSettings())


def test_a_resumed_naturalness_run_may_change_jobs_and_cache_but_not_a_model():
    from sdscore.protocols.naturalness.scorer import scoring_job

    first = scoring_job(jobs=1, cache_dir="/a")
    assert first.volatile == () and first.score_settings() == scoring_job(jobs=4).score_settings()
    assert first.score_settings() != scoring_job(mos_dir="/m").score_settings()
