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
    """The check above can fail: a protocol's Scorer, asked for by name, imports the stack the help must not."""
    done = subprocess.run([sys.executable, "-c", "import sys, sdscore.protocols.consistency as c; c.ConsistencyScorer; "
                           "print('torch' in sys.modules)"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


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
