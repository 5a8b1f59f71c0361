"""Settings declared once (runtime/settings.py): a frozen dataclass per Scorer gives the CLI options, the
API's keyword check and the run record; each converted protocol's record equals the hand-written one."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdscore.protocols.arena.spec import SPEC as ARENA
from sdscore.protocols.registry import protocol
from sdscore.runtime.scorer import ScoringJob
from sdscore.runtime.settings import (
    Options,
    SettingsError,
    add_options,
    build,
    run_record,
    setting,
    settings_from_args,
    volatile_names,
)


@dataclass(frozen=True)
class FastSettings:
    model: str | None = setting(help="model name")
    level: int = setting(3, help="how hard")
    style: str = setting("plain", choices=("plain", "fancy"), help="which style")
    seed: int = setting(0, help="seed of style fancy", needs={"style": ("fancy",)})
    keep: bool = setting(True, cli="--no-keep", help="drop it")
    cache_dir: Path | None = setting(None, volatile=True, help="cache")
    weights: tuple | None = setting(None, cli=None)


@dataclass(frozen=True)
class SlowSettings:
    depth: float = setting(1.5, help="depth")
    cache_dir: Path | None = setting(None, volatile=True, help="cache")


OPTIONS = Options({"fast": FastSettings, "slow": SlowSettings}, mode="kind", mode_default="fast",
                  mode_help="which scorer", groups={"fast": "fast scorer (--kind fast)"})


class FastScorer:
    settings_class = FastSettings

    def __init__(self, *args, **settings):
        self.settings = build(FastSettings, *args, **settings)

    def __call__(self, rows):  # the runtime never calls it in these tests
        raise NotImplementedError


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_options(parser, OPTIONS)
    return parser.parse_args(list(argv))


def test_options_are_generated_from_the_classes():
    parser = argparse.ArgumentParser()
    add_options(parser, OPTIONS)
    flags = {flag: action for action in parser._actions for flag in action.option_strings}
    assert {"--kind", "--model", "--level", "--style", "--seed", "--no-keep", "--cache-dir", "--depth"} <= set(flags)
    assert "--weights" not in flags  # an API-only setting
    assert flags["--level"].default == 3 and flags["--level"].type is int and flags["--level"].help == "how hard"
    assert flags["--style"].choices == ["plain", "fancy"] and flags["--kind"].default == "fast"
    assert flags["--no-keep"].dest == "keep" and flags["--no-keep"].default is True
    assert flags["--cache-dir"].type is Path and flags["--depth"].type is float
    titles = [group.title for group in parser._action_groups]
    assert "fast scorer (--kind fast)" in titles


def test_settings_from_args_build_the_mode_s_object():
    mode, settings = settings_from_args(OPTIONS, _parse("--model", "m", "--level", "5", "--no-keep"))
    assert mode == "fast" and settings == FastSettings(model="m", level=5, keep=False)
    mode, settings = settings_from_args(OPTIONS, _parse("--kind", "slow", "--depth", "2", "--cache-dir", "c"))
    assert mode == "slow" and settings == SlowSettings(depth=2.0, cache_dir=Path("c"))


def test_an_option_of_another_mode_is_refused():
    with pytest.raises(SettingsError, match=r"--model, --level are for --kind fast; with --kind slow they would be "
                                            r"ignored: drop them or choose that mode"):
        settings_from_args(OPTIONS, _parse("--kind", "slow", "--model", "m", "--level", "4"))
    with pytest.raises(SettingsError, match=r"--seed is for --style fancy; with --style plain it would be ignored"):
        settings_from_args(OPTIONS, _parse("--seed", "3"))
    assert settings_from_args(OPTIONS, _parse("--style", "fancy", "--seed", "3"))[1].seed == 3


def test_unknown_keyword_is_refused_naming_the_valid_ones():
    with pytest.raises(SettingsError, match=r"unknown setting 'levle' for FastSettings; valid: model, level, style, "
                                            r"seed, keep, cache_dir, weights"):
        build(FastSettings, levle=3)
    with pytest.raises(ValueError, match="unknown settings 'a', 'b'"):  # a ValueError too, as before
        FastScorer(model="m", a=1, b=2)


def test_types_choices_and_arity_are_checked():
    with pytest.raises(SettingsError, match=r"^level must be int, got '3' \(a setting of FastSettings\)$"):
        build(FastSettings, level="3", model="m")
    with pytest.raises(SettingsError, match=r"level must be int, got True"):
        build(FastSettings, level=True, model="m")
    with pytest.raises(SettingsError, match=r"style must be one of \['plain', 'fancy'\], got 'bold'"):
        build(FastSettings, style="bold", model="m")
    with pytest.raises(SettingsError, match=r"weights must be tuple \| None, got 'ab'"):
        build(FastSettings, weights="ab", model="m")
    with pytest.raises(SettingsError, match="FastSettings needs 'model'"):
        build(FastSettings, level=2)
    with pytest.raises(SettingsError, match="setting 'model' given twice"):
        build(FastSettings, "m", model="n")
    with pytest.raises(SettingsError, match="takes at most 7 positional settings, got 8"):
        build(FastSettings, *range(8))
    assert build(SlowSettings, depth=2) == SlowSettings(depth=2)  # an int is a float
    assert build(FastSettings, "m", 4) == FastSettings(model="m", level=4)  # positional: fields in order
    assert build(FastSettings, cache_dir="c", model="m").cache_dir == "c"  # a path may be text


def test_the_run_record_leaves_volatile_settings_out():
    assert volatile_names(FastSettings) == ("cache_dir",)
    record = run_record(FastSettings(model="m", cache_dir=Path("/c"), weights=(1, 2)))
    assert record == {"keep": True, "level": 3, "model": "m", "seed": 0, "style": "plain", "weights": [1, 2]}
    assert list(record) == sorted(record)


def test_a_job_checks_and_records_from_the_settings_class():
    job = ScoringJob(ARENA, FastScorer, {"model": "m", "cache_dir": "/a"})
    resumed = ScoringJob(ARENA, FastScorer, {"model": "m", "cache_dir": "/b"})
    assert job.score_settings() == resumed.score_settings()  # a volatile change resumes
    assert job.score_settings() != ScoringJob(ARENA, FastScorer, {"model": "m", "level": 4}).score_settings()
    with pytest.raises(SettingsError, match="unknown setting 'levle' for FastSettings"):
        ScoringJob(ARENA, FastScorer, {"levle": 4})


def test_a_setting_declared_twice_differently_is_refused():
    @dataclass(frozen=True)
    class Other:
        depth: float = setting(2.5, help="depth")

    with pytest.raises(TypeError, match="setting 'depth' is declared differently"):
        add_options(argparse.ArgumentParser(), Options({"slow": SlowSettings, "other": Other}, mode="kind"))


# ---- each converted protocol: the run record of a command line equals the hand-written one ----------------
# Computed by the code before the conversion (commit 2af0131: options.score_settings + the Scorer's
# signature); `--resume` of a run started then must still find the same record.
URL = "http://127.0.0.1:9/v1"
OLD_RECORDS = [
    ("arena", ["--judge", "openai", "--model", "m", "--base-url", URL],
     "sdscore.protocols.arena.scorer:ArenaAudioJudgeScorer",
     {"allow_ties": False, "audio_rate": 16000, "base_url": URL, "max_audio_seconds": 600.0,
      "max_request_bytes": 20971520, "model": "m", "orders": "both", "prices": None, "prompt_file": None, "seed": 0}),
    ("arena", ["--judge", "openai", "--model", "judge-7b", "--base-url", URL, "--orders", "random", "--seed", "7",
               "--allow-ties", "--cache-dir", "/tmp/c", "--concurrency", "3", "--timeout", "9", "--audio-rate",
               "24000", "--max-request-bytes", "1000", "--max-audio-seconds", "30"],
     "sdscore.protocols.arena.scorer:ArenaAudioJudgeScorer",
     {"allow_ties": True, "audio_rate": 24000, "base_url": URL, "max_audio_seconds": 30.0,
      "max_request_bytes": 1000, "model": "judge-7b", "orders": "random", "prices": None, "prompt_file": None,
      "seed": 7}),
    ("consistency", [], "sdscore.protocols.consistency.scorer:ConsistencyScorer",
     {"embedder": "ge2e", "max_audio_seconds": 600.0, "method": "pairwise", "model_dir": None, "threshold": 0.56}),
    ("consistency", ["--embedder", "ecapa", "--model-dir", "/tmp/ecapa", "--method", "centroid-raw", "--threshold",
                     "0.25", "--cache-dir", "/tmp/c", "--max-audio-seconds", "12"],
     "sdscore.protocols.consistency.scorer:ConsistencyScorer",
     {"embedder": "ecapa", "max_audio_seconds": 12.0, "method": "centroid-raw", "model_dir": "/tmp/ecapa",
      "threshold": 0.25}),
    ("consistency", ["--judge", "openai", "--model", "m", "--base-url", URL],
     "sdscore.protocols.consistency.scorer:LalmConsistencyScorer",
     {"audio_rate": 16000, "base_url": URL, "max_audio_seconds": 600.0, "max_request_bytes": 20971520, "model": "m",
      "per_turn": False, "permutations": "one", "prices": None, "prompt_file": None, "reference": True, "seed": 0,
      "task": "auto", "text_context": False}),
    ("consistency", ["--judge", "openai", "--model", "lalm", "--base-url", URL, "--task", "ranking", "--per-turn",
                     "--permutations", "all", "--concurrency", "2", "--timeout", "5", "--audio-rate", "8000",
                     "--max-request-bytes", "999", "--max-audio-seconds", "0", "--cache-dir", "/tmp/c"],
     "sdscore.protocols.consistency.scorer:LalmConsistencyScorer",
     {"audio_rate": 8000, "base_url": URL, "max_audio_seconds": 0.0, "max_request_bytes": 999, "model": "lalm",
      "per_turn": True, "permutations": "all", "prices": None, "prompt_file": None, "reference": True, "seed": 0,
      "task": "ranking", "text_context": False}),
]


@pytest.mark.parametrize(("name", "argv", "scorer", "record"), OLD_RECORDS,
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(OLD_RECORDS)])
def test_the_generated_run_record_equals_the_hand_written_one(name, argv, scorer, record):
    entry = protocol(name)
    parser = argparse.ArgumentParser()
    entry.options().add_score_options(parser)
    job = entry.scoring_job(**entry.options().score_settings(parser.parse_args(argv)))
    assert job.scorer_name == scorer
    assert job.score_settings() == record


def test_arena_options_keep_their_flags_and_defaults():
    parser = argparse.ArgumentParser(add_help=False)
    protocol("arena").options().add_score_options(parser)
    flags = {flag: action for action in parser._actions for flag in action.option_strings}
    assert sorted(flags) == ["--allow-ties", "--audio-rate", "--base-url", "--cache-dir", "--concurrency", "--judge",
                             "--max-audio-seconds", "--max-request-bytes", "--model", "--orders", "--prompt-file",
                             "--seed", "--temperature", "--timeout"]
    assert flags["--judge"].required and flags["--model"].required and flags["--timeout"].metavar == "SECONDS"
    assert flags["--timeout"].dest == "timeout_s" and flags["--orders"].default == "both"
    with pytest.raises(SettingsError, match="--seed is for --orders random"):
        protocol("arena").options().score_settings(parser.parse_args(["--judge", "openai", "--model", "m",
                                                                        "--seed", "2"]))


def test_consistency_options_keep_their_flags_and_mode_checks():
    parser = argparse.ArgumentParser(add_help=False)
    options = protocol("consistency").options()
    options.add_score_options(parser)
    flags = {flag: action for action in parser._actions for flag in action.option_strings}
    assert flags["--no-reference"].dest == "reference" and flags["--with-text-context"].dest == "text_context"
    assert flags["--judge"].default == "embedding" and flags["--embedder"].choices == ["ge2e", "ecapa", "wavlm"]
    settings = options.score_settings(parser.parse_args(["--judge", "openai", "--no-reference", "--with-text-context"]))
    assert settings["reference"] is False and settings["text_context"] is True
    with pytest.raises(SettingsError, match="--base-url is for --judge openai; with --judge embedding it would be"):
        options.score_settings(parser.parse_args(["--base-url", URL]))
    with pytest.raises(SettingsError, match="--seed is for --permutations one; with --permutations all"):
        options.score_settings(parser.parse_args(["--judge", "openai", "--permutations", "all", "--seed", "1"]))
