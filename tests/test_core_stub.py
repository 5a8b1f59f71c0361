"""The typed stub sdscore/_core.pyi and the built module sdscore._core agree.

Every public name the module exports is declared in the stub and vice versa; for each function the
stub's parameters (names, order, defaults) and whether it returns None match the binding's
signature, which pybind11 writes as the first line of its docstring:
``name(arg: type, ... = default) -> type``.
"""

from __future__ import annotations

import ast
import pathlib
import re
from types import ModuleType

import pytest
import sdscore
from sdscore import _core

STUB = pathlib.Path(sdscore.__file__).with_name("_core.pyi")
NO_DEFAULT = "<no default>"
# The value annotations a stub may check against the module's value.
VALUE_TYPES = {"str": str, "int": int, "float": float, "bool": bool}


def exported_names(module: ModuleType) -> set[str]:
    """The module's public names: no leading underscore, and __version__."""
    return {name for name in dir(module) if not name.startswith("_") or name == "__version__"}


def stub_declarations(source: str) -> dict[str, ast.FunctionDef | ast.AnnAssign]:
    """The stub's top-level public functions and annotated values (private aliases left out)."""
    found: dict[str, ast.FunctionDef | ast.AnnAssign] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            name = node.name
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        else:
            continue
        if not name.startswith("_") or name == "__version__":
            found[name] = node
    return found


def parameters(args: ast.arguments) -> list[tuple[str, object]]:
    """(name, default) of each parameter, NO_DEFAULT where it has none."""
    names = [a.arg for a in args.posonlyargs + args.args]
    defaults = [ast.literal_eval(d) for d in args.defaults]
    padded = [NO_DEFAULT] * (len(names) - len(defaults)) + defaults
    named = list(zip(names, padded))
    named += [
        (a.arg, NO_DEFAULT if d is None else ast.literal_eval(d))
        for a, d in zip(args.kwonlyargs, args.kw_defaults)
    ]
    return named


def returns_none(node: ast.FunctionDef) -> bool:
    return isinstance(node.returns, ast.Constant) and node.returns.value is None


def binding_signature(name: str, func: object) -> ast.FunctionDef:
    """The pybind11 signature line of `func`'s docstring, parsed as a Python def."""
    first_line = (getattr(func, "__doc__", None) or "").split("\n", 1)[0]
    if not first_line.startswith(f"{name}("):
        raise AssertionError(f"{name}: the docstring does not start with its signature: {first_line!r}")
    try:
        tree = ast.parse(f"def {first_line}: ...")
    except SyntaxError as exc:
        raise AssertionError(f"{name}: cannot read the signature {first_line!r} ({exc})") from exc
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def show(params: list[tuple[str, object]]) -> str:
    return ", ".join(n if d == NO_DEFAULT else f"{n}={d!r}" for n, d in params)


def stub_mismatches(source: str, module: ModuleType) -> list[str]:
    """Every disagreement between a stub's text and the built module, one line each."""
    declared = stub_declarations(source)
    exported = exported_names(module)
    problems = [f"{n}: exported by the module but not in the stub" for n in sorted(exported - set(declared))]
    problems += [f"{n}: in the stub but not exported by the module" for n in sorted(set(declared) - exported)]
    for name in sorted(exported & set(declared)):
        node, value = declared[name], getattr(module, name)
        if isinstance(node, ast.AnnAssign):
            if callable(value):
                problems.append(f"{name}: a value in the stub, a function in the module")
                continue
            wanted = VALUE_TYPES.get(ast.unparse(node.annotation))
            if wanted is not None and not isinstance(value, wanted):
                problems.append(f"{name}: the stub says {wanted.__name__}, the module has {value!r}")
            continue
        if not callable(value):
            problems.append(f"{name}: a function in the stub, a value in the module")
            continue
        binding = binding_signature(name, value)
        have, want = parameters(node.args), parameters(binding.args)
        if have != want:
            problems.append(f"{name}: the stub takes ({show(have)}), the binding ({show(want)})")
        if returns_none(node) != returns_none(binding):
            problems.append(
                f"{name}: the stub returns {ast.unparse(node.returns) if node.returns else '?'}, "
                f"the binding {ast.unparse(binding.returns) if binding.returns else '?'}"
            )
    return problems


def test_the_stub_ships_beside_the_module_with_a_py_typed_marker():
    assert STUB.is_file(), f"{STUB} is missing"
    assert STUB.with_name("py.typed").is_file(), "sdscore has no py.typed marker, so checkers skip the stub"


def test_the_stub_matches_the_built_module():
    assert stub_mismatches(STUB.read_text(), _core) == []


def test_every_export_is_a_checked_function_or_the_version():
    declared = stub_declarations(STUB.read_text())
    functions = sorted(n for n, node in declared.items() if isinstance(node, ast.FunctionDef))
    assert len(functions) == 15  # audio 5, mel 4, ops 4, rnn 2
    assert set(declared) - set(functions) == {"__version__"}


def without_line(source: str, start: str) -> str:
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.startswith(start)]
    assert len(hits) == 1, f"{start!r} is not one line of the stub"
    return "".join(lines[: hits[0]] + lines[hits[0] + 1 :])


def replaced(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"{old!r} is not once in the stub"
    return source.replace(old, new)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda s: without_line(s, "def simd_isa("),
            r"^simd_isa: exported by the module but not in the stub$",
        ),
        (
            lambda s: s + "def resample_many(x: int) -> None: ...\n",
            r"^resample_many: in the stub but not exported",
        ),
        (
            lambda s: replaced(s, "sr_in: int, sr_out: int", "sr_in: int, rate_out: int"),
            r"^resample: the stub takes \(x, sr_in, rate_out\), the binding \(x, sr_in, sr_out\)$",
        ),
        (
            lambda s: replaced(s, "num_threads: int = 0,", "num_threads: int = 1,"),
            r"^load_many: .*num_threads=1.*the binding .*num_threads=0",
        ),
        (
            lambda s: replaced(s, 'name: _Path = "<bytes>"', "name: _Path"),
            r"^decode_wav: the stub takes \(data, name, max_seconds=0.0\)",
        ),
        (
            lambda s: replaced(s, "= 1\n) -> None: ...", "= 1\n) -> str: ..."),
            r"^gelu_: the stub returns str, the binding None$",
        ),
        (lambda s: replaced(s, "__version__: str", "__version__: int"), r"^__version__: the stub says int"),
        (
            lambda s: replaced(s, "__version__: str", "def __version__() -> str: ..."),
            r"^__version__: a function in the stub, a value in the module$",
        ),
    ],
    ids=["missing", "extra", "renamed", "default", "lost-default", "return", "value-type", "kind"],
)
def test_a_stub_that_drifts_is_reported(edit, problem):
    problems = stub_mismatches(edit(STUB.read_text()), _core)
    assert len(problems) == 1, problems
    assert re.search(problem, problems[0]), problems[0]


def test_an_unreadable_binding_signature_is_reported():
    class Fake:
        __doc__ = "frob(x: <object at 0x1>) -> None\n\nNot Python."

    with pytest.raises(AssertionError, match=r"frob: cannot read the signature"):
        binding_signature("frob", Fake())
    with pytest.raises(AssertionError, match=r"frob: the docstring does not start with its signature"):
        binding_signature("frob", print)
