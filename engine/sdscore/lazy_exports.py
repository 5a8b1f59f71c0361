"""Package `__init__`s that re-export their modules' public names without importing the modules.

`sdscore.protocols.reward.RewardPairsScorer` still works, but `import sdscore.protocols.reward`
(which `sdscore --help` does, to read a protocol's options) no longer loads torch: a name's module
is imported when the name is first used (PEP 562 module `__getattr__`).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Iterable, Mapping


class _ExportingPackage(types.ModuleType):
    """A package whose export may share its name with a submodule (`sdscore.features.extract`, the
    function, from `sdscore/features/extract.py`): when the import system binds the submodule on
    the package, the export is kept instead, as an eager `from .extract import extract` did."""

    def __setattr__(self, name: str, value) -> None:
        if (isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}"
                and name in self.__dict__.get("_lazy_export_names", ())):
            value = getattr(value, name)
        super().__setattr__(name, value)


def lazy_exports(package: str, exports: Mapping[str, Iterable[str]]) -> tuple[Callable, Callable, list[str]]:
    """(`__getattr__`, `__dir__`, `__all__`) for `package`, whose public names are `exports`:
    module (absolute, or relative to the package when it starts with '.') → the names it defines.
    A name is imported from its module on first use and then kept in the package's namespace."""
    home = {name: module for module, names in exports.items() for name in names}
    this = sys.modules[package]
    this._lazy_export_names = frozenset(home)
    this.__class__ = _ExportingPackage

    def __getattr__(name: str):
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(home))

    return __getattr__, __dir__, sorted(home)
