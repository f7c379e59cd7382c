"""The boundaries ARCHITECTURE.md states, checked on the source: every module under
`runner/` named there, no import circles (imports under TYPE_CHECKING and inside
functions count), the engine importing nothing else of `runner`, measuring and
publishing importing nothing from training, and DuckDB imported only by the store and
the query layer."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "runner"

DUCKDB_IMPORTERS = {"runner.publish.sql.reader", "runner.report"}  # report: catches duckdb.Error


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(RUNNER.rglob("*.py"))}


def _imports(name: str) -> tuple[set[str], set[str]]:
    """The runner modules `name` imports anywhere in its file, and every imported top name."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    inside, tops = _imports_in(path.read_text(encoding="utf-8"), package)
    inside.discard(name)
    return inside, tops


def _imports_in(source: str, package: str) -> tuple[set[str], set[str]]:
    """Every import statement of `source`, wherever it sits (TYPE_CHECKING blocks and
    function bodies included), resolved against `package`."""
    inside, tops = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                tops.add(alias.name.split(".")[0])
                mod = alias.name
                while mod and mod not in MODULES:
                    mod = mod.rpartition(".")[0]
                if mod:
                    inside.add(mod)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            tops.add(base.split(".")[0])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    inside.add(full)
                elif base in MODULES:
                    inside.add(base)
    return inside, tops


GRAPH = {name: _imports(name)[0] for name in MODULES}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_every_module_under_runner_is_named_in_architecture_md():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = [
        str(p.relative_to(RUNNER))
        for p in MODULES.values()
        if f"`{p.relative_to(RUNNER)}`" not in text and f"`{p.relative_to(ROOT)}`" not in text
    ]
    assert not missing, f"ARCHITECTURE.md does not name: {', '.join(missing)}"


def test_readme_links_to_architecture_md():
    assert "(ARCHITECTURE.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_no_module_under_runner_is_in_an_import_circle():
    circles = _circles(GRAPH)
    assert not circles, f"import circles: {circles}"


def test_the_circle_finder_counts_type_checking_and_call_time_imports():
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .engine import Engine\n"
        "def later():\n    from runner.store import store\n"
    )
    inside, _ = _imports_in(source, "runner.engine")
    assert inside == {"runner.engine.engine", "runner.store.store"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_the_engine_imports_nothing_else_of_runner():
    bad = {
        n: sorted(m for m in GRAPH[n] if not m.startswith("runner.engine"))
        for n in MODULES
        if n.startswith("runner.engine")
    }
    assert not {n: m for n, m in bad.items() if m}


def test_measuring_and_publishing_import_nothing_from_training():
    packages = ("runner.experiments", "runner.runtimes", "runner.store", "runner.publish")
    bad = {
        n: sorted(m for m in GRAPH[n] if m.startswith("runner.train"))
        for n in MODULES
        if n.startswith(packages)
    }
    assert not {n: m for n, m in bad.items() if m}


def test_only_the_store_and_the_query_layer_import_duckdb():
    importers = {n for n in MODULES if "duckdb" in _imports(n)[1]}
    assert {n for n in importers if not n.startswith("runner.store")} <= DUCKDB_IMPORTERS


MAX_MODULES_A_FOLDER = 20
# publish's floors, bottom up: a module may import its own floor and those below it only
PUBLISH_FLOORS = ("runner.publish.metrics", "runner.publish.sql", "runner.publish.stats")
PUBLISH_FLOORS += ("runner.publish.blocks", "runner.publish.site")


def _floor(name: str) -> int | None:
    for i, floor in enumerate(PUBLISH_FLOORS):
        if name == floor or name.startswith(floor + "."):
            return i
    return None


def test_no_folder_under_runner_holds_more_than_twenty_modules():
    counts: dict[str, int] = {}
    for path in MODULES.values():
        folder = str(path.parent.relative_to(ROOT))
        counts[folder] = counts.get(folder, 0) + 1
    assert not {f: n for f, n in counts.items() if n > MAX_MODULES_A_FOLDER}


def test_publish_floors_import_only_downward():
    upward = {
        n: sorted(m for m in GRAPH[n] if (_floor(m) or 0) > _floor(n))
        for n in MODULES
        if _floor(n) is not None
    }
    assert not {n: m for n, m in upward.items() if m}


def test_the_floor_check_sees_an_upward_import():
    assert _floor("runner.publish.sql.reader") < _floor("runner.publish.site.post")
    assert _floor("runner.publish.stats.aa") == 2 and _floor("runner.publish.__init__") is None


def _own_bases(name: str) -> dict[str, list[str]]:
    """class -> the bases it names that are classes of runner (by name, defined anywhere)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    return {
        node.name: [
            ast.unparse(b).rpartition(".")[2]
            for b in node.bases
            if ast.unparse(b).rpartition(".")[2] in OWN_CLASSES
        ]
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }


OWN_CLASSES = {
    node.name
    for path in MODULES.values()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
    if isinstance(node, ast.ClassDef)
}


def test_no_class_inherits_from_two_of_our_classes_or_a_publish_mixin():
    bad = {}
    for name in MODULES:
        for cls, bases in _own_bases(name).items():
            mixin = name.startswith("runner.publish") and any(
                b.endswith(("Queries", "Values")) for b in bases
            )
            if len(bases) > 1 or mixin:
                bad[f"{name}.{cls}"] = bases
    assert not bad, f"composed from our own classes instead of holding them: {bad}"
