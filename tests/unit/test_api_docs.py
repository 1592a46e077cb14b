"""The API reference (``make docs``, pdoc over ``tower_client``): every name the facade exports is there with a
docstring of its own, and every cross-reference in the docstrings (``:class:`~tower_client.fleet.Fleet```)
names something that exists. pdoc leaves a reference it cannot resolve as plain text, silently: this is
the check that it has none, cheap enough for every ``make check`` and ``make test``."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

import tower_client

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r":(?:mod|class|meth|func|attr|exc|data|obj):`(?:[^`<]*<)?~?([\w.]+)>?`")


def resolve(dotted: str, module: str, scope: str = "") -> object | None:
    """The object ``dotted`` names from ``module`` (and within its class ``scope``), or None."""
    candidates = [dotted]
    if "." not in dotted or not dotted.startswith(("shellper", "tower_client")):
        candidates += [f"{module}.{scope}.{dotted}" if scope else "", f"{module}.{dotted}"]
    for name in filter(None, candidates):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj: object = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr) if not isinstance(obj, type) else inspect.getattr_static(obj, attr)
            except AttributeError:
                break
            return obj
    return None


def references(path: Path) -> list[tuple[int, str, str]]:
    """(line, the reference, the class it is written in or "") for every role in the file's docstrings."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.ClassDef) else scope
            if isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant) \
                    and isinstance(child.value.value, str):
                found.extend((child.lineno, m.group(1), scope) for m in ROLE.finditer(child.value.value))
            visit(child, inner)

    visit(ast.parse(path.read_text()), "")
    return found


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES = sorted(ROOT.joinpath("tower_client").rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_every_cross_reference_in_the_docstrings_resolves(path: Path) -> None:
    module = module_of(path)
    broken = [f"{path.name}:{line}: {ref}" for line, ref, scope in references(path)
              if resolve(ref, module, scope) is None]
    assert broken == []


def test_the_check_sees_a_broken_reference() -> None:
    assert resolve("tower_client.fleet.Fleet", "tower_client.sink") is not None
    assert resolve("sync", "tower_client.fleetstream", "SessionStream") is None
    assert resolve("next", "tower_client.fleetstream", "SessionStream") is not None
    assert resolve("tower_client.fleet.Fleat", "tower_client.sink") is None


@pytest.mark.parametrize("name", tower_client.__all__)
def test_every_exported_name_resolves_and_has_a_docstring_of_its_own(name: str) -> None:
    obj = getattr(tower_client, name)  # a lazy one is imported here
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return  # a type alias (FleetItem): documented where it is defined, pdoc shows its value
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    assert doc and doc.strip(), f"tower_client.{name} has no docstring"
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        pytest.fail(f"tower_client.{name}'s docstring is the one dataclass makes up: {doc[:60]}")
