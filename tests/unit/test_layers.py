"""The layers: every import of shellper and tower_client runs downward, and shellper never imports tower_client.

Read from the source (ast), so imports inside functions and under ``if TYPE_CHECKING:`` count as well as
those at the top: a function-level import is still a dependency, only a later one.

    shellper (the package root: its version; its __main__ is the CLI's)
    core                  pure rules and records
    protocol              the wire; may import core (its errors, its records), never the other way
    host                  the operating system
    client, daemon        side by side: neither imports the other
    cli
    tower_client          may use every shellper layer; shellper never imports it
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RANK = {"shellper": 0, "core": 1, "protocol": 2, "host": 3, "client": 4, "daemon": 4, "cli": 5, "tower_client": 6}
"""A layer may import a layer of lower rank, and itself; layers of equal rank may not import each other."""


def layer(module: str) -> str | None:
    """The layer of a dotted module name, None for a module outside the two packages."""
    top, _, rest = module.partition(".")
    if top == "tower_client":
        return "tower_client"
    if top != "shellper":
        return None
    if rest == "__main__":  # `python -m shellper`: the CLI's entry, which nothing imports
        return "cli"
    sub = rest.partition(".")[0]
    return sub if sub in RANK else "shellper"  # `from shellper import __version__` is the root's


def allowed(importer: str, imported: str) -> bool:
    return importer == imported or RANK[imported] < RANK[importer]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    return imports_in(path.read_text(), module_name(path), path.name == "__init__.py")


def imports_in(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import in ``module``'s source; ``from a import b`` counts as importing
    ``a.b`` where that is a module (else as ``a``), so ``from shellper import host`` is seen as host's."""
    found: list[tuple[int, str]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                is_module = (ROOT / sub.replace(".", "/")).with_suffix(".py").exists() or \
                    (ROOT / sub.replace(".", "/") / "__init__.py").exists()
                found.append((node.lineno, sub if is_module else base))
    return found


SOURCES = sorted([*ROOT.joinpath("shellper").rglob("*.py"), *ROOT.joinpath("tower_client").rglob("*.py")])


def test_every_module_belongs_to_a_layer() -> None:
    by_layer: dict[str, int] = {}
    for path in SOURCES:
        name = layer(module_name(path))
        assert name is not None, path
        by_layer[name] = by_layer.get(name, 0) + 1
    assert set(by_layer) == set(RANK), f"a layer with no module, or a module in no layer: {by_layer}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_downward(path: Path) -> None:
    importer = layer(module_name(path))
    assert importer is not None
    upward = [f"line {line}: {imported} ({layer(imported)})" for line, imported in imports(path)
              if (target := layer(imported)) is not None and not allowed(importer, target)]
    assert upward == [], f"{path.relative_to(ROOT)} ({importer}) imports upward or sideways: {upward}"


def test_shellper_never_imports_tower_client() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in SOURCES if layer(module_name(path)) != "tower_client"
                 for line, imported in imports(path) if layer(imported) == "tower_client"]
    assert offenders == []


@pytest.mark.parametrize(("source", "expected"), [
    ("from shellper.host.paths import SessionPaths\n", ["shellper.host.paths"]),
    ("import shellper.daemon.session\n", ["shellper.daemon.session"]),
    ("from shellper import host\n", ["shellper.host"]),
    ("from shellper import __version__\n", ["shellper"]),
    ("def f():\n    from tower_client.client import Client\n", ["tower_client.client"]),
    ("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from shellper.cli.main import CliError\n", ["shellper.cli.main"]),
    ("from .paths import SessionPaths\n", ["shellper.host.paths"]),
    ("from .. import core\n", ["shellper.core"]),
    ("import os, json\n", ["os", "json"]),
])
def test_the_scanner_sees_every_kind_of_import(source: str, expected: list[str]) -> None:
    """As if in shellper/host/probe.py: top-level, function-level, TYPE_CHECKING, relative and ``from
    package import module`` imports are all found."""
    assert [name for _, name in imports_in(source, "shellper.host.probe")] == expected


@pytest.mark.parametrize(("importer", "imported", "ok"), [
    ("host", "core", True), ("host", "host", True), ("protocol", "core", True), ("core", "protocol", False),
    ("core", "host", False), ("host", "client", False), ("host", "daemon", False), ("client", "daemon", False),
    ("daemon", "client", False), ("daemon", "host", True), ("cli", "daemon", True), ("cli", "client", True),
    ("daemon", "cli", False), ("host", "tower_client", False), ("cli", "tower_client", False),
    ("tower_client", "daemon", True), ("host", "shellper", True), ("shellper", "core", False),
])
def test_the_rule(importer: str, imported: str, ok: bool) -> None:
    assert allowed(importer, imported) is ok


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a name is taken as the longest module it starts with)."""
    modules = {module_name(path) for path in SOURCES}
    graph: dict[str, set[str]] = {}
    for path in SOURCES:
        importer = module_name(path)
        graph[importer] = set()
        for _, name in imports(path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != importer:
                graph[importer].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    """Counting function-level imports too: one deferred to a function still ties the two modules."""
    assert cycles(import_graph()) == []


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b", "c"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["c", "d"], ["a", "b"]]),
])
def test_the_cycle_finder(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(graph) == expected
