"""DESIGN.md: one package per protocol with the same file names in each. Every built-in protocol of the
registry has spec.py, settings.py, scorer.py (its Scorer and `scoring_job`), evaluate.py
(`evaluate_files`), report_view.py, demo_stage.py and options.py, and the registry entry names them."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

from sdscore.protocols.registry import PROTOCOLS

#: the files every protocol package has (choices.py, a protocol's light option values, is optional)
STANDARD_FILES = ("spec.py", "settings.py", "scorer.py", "evaluate.py", "report_view.py", "demo_stage.py",
                  "options.py")
#: the built-in protocols: the registry's entries whose package is under sdscore.protocols
BUILTIN = tuple(name for name, entry in PROTOCOLS.items() if entry.package.startswith("sdscore.protocols."))


def missing_standard_files(folder: Path) -> list[str]:
    """The standard file names that the package folder lacks."""
    return [name for name in STANDARD_FILES if not (folder / name).is_file()]


def _folder(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not a package"
    return Path(next(iter(spec.submodule_search_locations)))


def test_the_registry_has_builtin_protocols():
    assert len(BUILTIN) >= 5 and "reward" in BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_protocol_package_has_the_standard_files(name):
    assert missing_standard_files(_folder(PROTOCOLS[name].package)) == []


@pytest.mark.parametrize("name", BUILTIN)
def test_the_registry_entry_names_the_standard_modules(name):
    entry = PROTOCOLS[name]
    assert entry.spec.partition(":")[0] == f"{entry.package}.spec"
    assert entry.demo_stage == f"{entry.package}.demo_stage"
    assert entry.report_view_module().__name__ == f"{entry.package}.report_view"
    assert entry.options().__name__ == f"{entry.package}.options"


@pytest.mark.parametrize("name", BUILTIN)
def test_scoring_job_is_defined_in_scorer_and_evaluate_files_in_evaluate(name):
    """The functions the registry calls live in the standard modules (the package may re-export them)."""
    package = PROTOCOLS[name].package
    defined = {}
    for module, function in (("scorer", "scoring_job"), ("evaluate", "evaluate_files")):
        found = getattr(importlib.import_module(f"{package}.{module}"), function, None)
        defined[function] = None if found is None else found.__module__
    assert defined == {"scoring_job": f"{package}.scorer", "evaluate_files": f"{package}.evaluate"}


def test_the_file_check_finds_a_missing_file(tmp_path):
    """The check above can fail: a package without evaluate.py (its evaluation under another name) is found."""
    for name in STANDARD_FILES:
        (tmp_path / name).write_text("")
    assert missing_standard_files(tmp_path) == []
    (tmp_path / "evaluate.py").rename(tmp_path / "evaluation.py")
    (tmp_path / "scorer.py").unlink()
    assert missing_standard_files(tmp_path) == ["scorer.py", "evaluate.py"]
