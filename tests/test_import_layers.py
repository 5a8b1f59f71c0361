"""DESIGN.md's layering, read from the code's own import statements (ast, nothing imported): the lower
layers never import a protocol package, and no module of engine/sdscore is in an import circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[1] / "engine"
#: layers below the protocols: they receive a ManifestSpec or a view and never import sdscore.protocols
LOWER = ("report", "runtime", "corpus", "audio", "features", "models", "metrics", "llm_judges")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """module → the sdscore modules it imports anywhere in its text (function-level imports too), for
    every module under root/sdscore. `from P import N` counts as importing P.N where that is a module."""
    modules = {_module_name(p, root): p for p in (root / "sdscore").rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names if alias.name.startswith("sdscore"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                if base == "sdscore" or base.startswith("sdscore."):
                    for alias in node.names:
                        full = f"{base}.{alias.name}"
                        targets.add(full if full in modules else known(base))
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph():
    return import_graph(ENGINE)


def test_lower_layers_import_no_protocol(graph):
    upward = sorted((module, target) for module, targets in graph.items() for target in targets
                    if module.partition(".")[2].split(".")[0] in LOWER and target.startswith("sdscore.protocols"))
    assert upward == []
    assert any(module.startswith("sdscore.report.") for module in graph)  # the walk read the lower layers


def test_no_import_circle_in_engine(graph):
    assert circles(graph) == []


def test_the_checks_see_a_circle_and_an_upward_arrow(tmp_path):
    """The two checks above can fail: a planted circle and a planted report -> protocols import are found."""
    package = tmp_path / "sdscore"
    for folder in ("report", "protocols/toy"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "report" / "view.py").write_text("def build():\n    from sdscore.protocols.toy import scorer\n")
    (package / "protocols" / "toy" / "scorer.py").write_text("from . import jobs\n")
    (package / "protocols" / "toy" / "jobs.py").write_text("from sdscore.protocols.toy.scorer import X\n")
    planted = import_graph(tmp_path)
    assert planted["sdscore.report.view"] == {"sdscore.protocols.toy.scorer"}
    assert circles(planted) == [["sdscore.protocols.toy.jobs", "sdscore.protocols.toy.scorer"]]
