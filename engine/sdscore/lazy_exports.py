"""Package `__init__`s that re-export their modules' public names without importing the modules.

`sdscore.protocols.reward.RewardPairsScorer` still works, but `import sdscore.protocols.reward`
(which `sdscore --help` does, to read a protocol's options) no longer loads torch: a name's module
is imported when the name is first used (PEP 562 module `__getattr__`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_exports(package: str, exports: Mapping[str, Iterable[str]]) -> tuple[Callable, Callable, list[str]]:
    """(`__getattr__`, `__dir__`, `__all__`) for `package`, whose public names are `exports`:
    module (absolute, or relative to the package when it starts with '.') → the names it defines.
    A name is imported from its module on first use and then kept in the package's namespace."""
    home = {name: module for module, names in exports.items() for name in names}

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
