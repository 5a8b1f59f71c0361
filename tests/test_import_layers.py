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


#: DESIGN.md's layering, lowest first: a module may import its own layer and the layers below it.
#: The longest matching prefix decides (synth.build assembles the registry's corpora: an upper layer;
#: the rest of synth renders audio and tables below the protocols). runtime.compute_budget and its
#: cgroup reader import only errors: every pool at every layer takes its share from them.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "audio_limits", "embedded_refs", "atomic_write", "output_paths", "progress", "ragged", "lazy_exports", "parent_watch",
     "checkpoint_files", "_native", "storage", "runtime.compute_budget", "runtime.cgroup_quota"),
    ("corpus",),
    ("audio",),
    ("features", "models"),
    ("metrics", "report", "runtime"),
    ("llm_judges", "rl", "synth"),
    ("protocols",),
    ("manifests", "synth.build", "report_document", "demo", "docs_tables", "cli"),
)


def layer_of(module: str) -> int | None:
    """The layer of an sdscore module (None: the package root, whose exports are lazy)."""
    name = module.partition(".")[2]
    best, rank = "", None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
                best, rank = prefix, index
    return rank


def upward_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((module, target) for module, targets in graph.items() for target in targets
                  if None not in (layer_of(module), layer_of(target)) and layer_of(target) > layer_of(module))


def test_every_module_has_a_layer(graph):
    assert sorted(m for m in graph if m != "sdscore" and layer_of(m) is None) == []


def test_no_upward_arrow_by_design_layering(graph):
    assert upward_arrows(graph) == []


def test_protocols_never_import_each_other(graph):
    crossing = sorted((m, t) for m, targets in graph.items() for t in targets
                      if m.startswith("sdscore.protocols.") and t.startswith("sdscore.protocols.")
                      and len(m.split(".")) > 3 and len(t.split(".")) > 3 and m.split(".")[2] != t.split(".")[2])
    assert crossing == []


def test_the_layer_check_sees_an_upward_arrow(tmp_path):
    package = tmp_path / "sdscore"
    for folder in ("audio", "cli", "protocols/toy"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "audio" / "load.py").write_text("from sdscore.cli import main\n")
    (package / "protocols" / "toy" / "options.py").write_text("from sdscore.cli import outputs\n")
    (package / "protocols" / "other.py").write_text("from sdscore.protocols.toy import options\n")
    planted = import_graph(tmp_path)
    assert upward_arrows(planted) == [("sdscore.audio.load", "sdscore.cli"),
                                      ("sdscore.protocols.toy.options", "sdscore.cli")]
