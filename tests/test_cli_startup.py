"""`sdscore --help` and every `VERB --help` start light: building the parser imports no model, numeric or
dataframe stack (the protocols' options are argparse declarations; their Scorers load when a command
runs), and the packages that re-export names lazily still give every name they list."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

#: imported only by a command that needs them (scoring, evaluating), never to parse or print help
HEAVY = ("torch", "scipy", "transformers", "numba", "polars", "pyarrow", "matplotlib", "sklearn", "onnxruntime")

#: argument lists that end in --help / --version, one per command and protocol
HELP_COMMANDS = [["--help"], ["--version"], ["score", "--help"], ["eval", "--help"], ["report", "--help"],
                 ["synth", "--help"], ["demo", "--help"], ["corpus", "--help"], ["export", "--help"],
                 ["train", "--help"], ["bench", "--help"], ["serve", "--help"]]
HELP_COMMANDS += [["score", name, "--help"] for name in ("reward", "judge", "consistency", "naturalness", "arena")]
HELP_COMMANDS += [["eval", name, "--help"] for name in ("reward", "judge", "consistency", "naturalness", "arena")]

_PROBE = """
import contextlib, io, json, sys
from sdscore.cli import main
outcomes = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit as exc:
            outcomes.append([argv, exc.code, len(out.getvalue())])
print(json.dumps({"outcomes": outcomes, "heavy": sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)}))
"""


def _probe(commands: list[list[str]]) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(commands), json.dumps(HEAVY)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_help_of_every_command_imports_no_heavy_module():
    report = _probe(HELP_COMMANDS)
    # every command printed its help (or version) and exited 0, so the parser was built and walked
    assert [argv for argv, code, size in report["outcomes"] if code == 0 and size > 0] == HELP_COMMANDS
    assert report["heavy"] == []


def test_the_probe_sees_a_heavy_import():
    """The check above can fail: the reward runtime's scorer, asked for by name, imports the stack the help
    must not (the consistency Scorer, the earlier example, now imports torch only when it scores)."""
    done = subprocess.run([sys.executable, "-c", "import sys; from sdscore.runtime.reward.episode_scorer import RewardScorer; "
                           "print('torch' in sys.modules)"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


_VERB_PROBE = """
import json, sys
from sdscore.cli import main
code = main(json.loads(sys.argv[1]))
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

PROTOCOL_NAMES = ("reward", "judge", "consistency", "naturalness", "arena")
#: what only `eval` metrics use (scipy.stats, sklearn), and torch's compiler stack (torch._dynamo, ~1.4 s)
EVAL_ONLY = ("sdscore.metrics", "scipy.stats", "sklearn")


def _other_protocols(name: str) -> tuple[str, ...]:
    return tuple(f"sdscore.protocols.{other}" for other in PROTOCOL_NAMES if other != name)


def _run_verb(argv: list[str]) -> tuple[int, set[str]]:
    """(exit code, every module imported) of `sdscore ARGV` run in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", _VERB_PROBE, json.dumps(argv)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    return report["code"], set(report["modules"])


def _loaded(modules: set[str], names) -> list[str]:
    """The names among `names` that are loaded, as themselves or through a submodule."""
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


@pytest.fixture(scope="module")
def scored_reward(tiny_corpus, tmp_path_factory):
    """(results file, modules) of `score reward` on the tiny corpus with the bundled compact model."""
    out = tmp_path_factory.mktemp("startup") / "reward.parquet"
    code, modules = _run_verb(["score", "reward", str(tiny_corpus / "reward_pairs.parquet"), "--out", str(out)])
    assert code == 0
    return out, modules


def test_score_reward_imports_only_its_protocol(scored_reward):
    """`score reward` loads torch and the reward package (what it runs), none of the other four protocols'
    packages (the parser declares only the options of the protocol named), nothing only `eval` uses and
    not torch._dynamo (the compact model's meta-device weight check builds nothing that needs it)."""
    _, modules = scored_reward
    assert _loaded(modules, ("torch", "sdscore.protocols.reward")) == ["sdscore.protocols.reward", "torch"]
    assert _loaded(modules, _other_protocols("reward") + EVAL_ONLY + ("torch._dynamo",)) == []


def test_score_consistency_imports_only_its_protocol_and_no_librosa(tiny_corpus, tmp_path):
    """GE2E's mel filters come from sdscore.models.log_mel (equal to librosa's within 1e-6), so scoring
    loads neither librosa nor, through it, numba and scipy.stats."""
    out = tmp_path / "consistency.parquet"
    code, modules = _run_verb(["score", "consistency", str(tiny_corpus / "consistency.parquet"), "--out", str(out)])
    assert code == 0 and out.is_file()
    assert "sdscore.protocols.consistency" in modules and "torch" in modules
    assert _loaded(modules, _other_protocols("consistency") + EVAL_ONLY + ("librosa", "numba")) == []


def test_eval_reward_imports_no_torch_and_no_other_protocol(scored_reward, tmp_path):
    results, _ = scored_reward
    code, modules = _run_verb(["eval", "reward", str(results), "--out", str(tmp_path / "metrics.json")])
    assert code == 0 and (tmp_path / "metrics.json").is_file()
    assert _loaded(modules, ("sdscore.protocols.reward", "sdscore.metrics")) == ["sdscore.metrics", "sdscore.protocols.reward"]
    assert _loaded(modules, _other_protocols("reward") + ("torch",)) == []


def test_eval_arena_imports_no_torch_and_no_other_protocol(tiny_corpus, tmp_path):
    code, modules = _run_verb(["eval", "arena", str(tiny_corpus / "battles.parquet"), "--out",
                               str(tmp_path / "metrics.json")])
    assert code == 0 and (tmp_path / "metrics.json").is_file()
    assert "sdscore.protocols.arena" in modules
    assert _loaded(modules, _other_protocols("arena") + ("torch",)) == []


def test_consistency_metrics_import_no_torch():
    """`eval consistency` reads the scorer module's RESULTS and flag_turns; torch loads only to score."""
    code = "import sys, sdscore.protocols.consistency.evaluate; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False"]


def test_the_parser_of_one_protocol_declares_only_its_options():
    """A `score`/`eval` command line of one protocol builds that protocol's options only; without one
    (help, docs tables) every protocol's options are declared."""
    from sdscore.cli import build_parser, selected_protocol

    assert selected_protocol(["score", "reward", "x.parquet"]) == "reward"
    assert selected_protocol(["eval", "arena"]) == "arena"
    assert selected_protocol(["score", "--help"]) is None and selected_protocol(["corpus", "reward"]) is None
    assert selected_protocol(None) is None

    def options(parser, verb, name):
        sub = next(a for a in parser._subparsers._group_actions if a.dest == "command").choices[verb]
        kind = next(a for a in sub._subparsers._group_actions if a.dest == "protocol").choices[name]
        return {o for a in kind._actions for o in a.option_strings}

    one, full = build_parser(["score", "reward", "x.parquet"]), build_parser()
    assert options(one, "score", "reward") == options(full, "score", "reward")
    assert options(one, "score", "judge") == {"-h", "--help"} != options(full, "score", "judge")
    assert options(one, "eval", "arena") == {"-h", "--help"} != options(full, "eval", "arena")


LAZY_PACKAGES = ["sdscore.protocols.reward", "sdscore.protocols.judge", "sdscore.protocols.consistency",
                 "sdscore.protocols.naturalness", "sdscore.protocols.arena", "sdscore.features", "sdscore.llm_judges"]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_listed_name_of_a_lazy_package_resolves(package):
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert module.__all__ and missing == []
    assert set(module.__all__) <= set(dir(module))


def test_a_lazy_package_refuses_an_unknown_name():
    import sdscore.protocols.reward as reward

    with pytest.raises(AttributeError, match=r"module 'sdscore.protocols.reward' has no attribute 'NoSuchName'"):
        reward.NoSuchName  # noqa: B018 - the attribute access is the test


def test_a_submodule_named_like_no_export_still_imports_through_the_package():
    from sdscore.features import process_extractor

    assert process_extractor.__name__ == "sdscore.features.process_extractor"


@pytest.mark.parametrize("first", [
    "from sdscore.features import REGISTRY, extract",     # another export loads the submodule first
    "import sdscore.features.extract",                    # the submodule itself is imported first
])
def test_an_export_named_like_its_submodule_stays_the_export(first):
    """`sdscore.features.extract` is the function even after `features/extract.py` was imported
    (the import system binds a submodule on its package; the fresh-clone CI caught the module
    there: "'module' object is not callable")."""
    code = f"{first}\nfrom sdscore.features import extract\nimport types\nprint(callable(extract), " \
           "isinstance(extract, types.ModuleType))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "False"], done.stderr[-2000:]
