"""The house's shape, checked from the source (ast): no class over 400 lines, and no object changes its class
after it is made (a connection's protocol is a codec it holds, not a class it turns into)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.joinpath("shellper").rglob("*.py"), *ROOT.joinpath("tower_client").rglob("*.py")])
MOST_LINES = 400


def class_lengths(source: str) -> dict[str, int]:
    return {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None}


def class_swaps(source: str) -> list[int]:
    """Lines assigning to ``<anything>.__class__``."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Assign | ast.AugAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Attribute) and target.attr == "__class__"]


def test_the_checks_see_what_they_look_for() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MOST_LINES))
    assert class_lengths(f"class Big:\n{body}\n") == {"Big": MOST_LINES + 1}
    assert class_swaps("class A:\n    def f(self):\n        self.__class__ = B\n") == [3]


def test_no_class_over_the_limit() -> None:
    over = [f"{path.relative_to(ROOT)}: {name} ({length} lines)" for path in SOURCES
            for name, length in class_lengths(path.read_text()).items() if length > MOST_LINES]
    assert not over, over


def test_no_object_changes_its_class() -> None:
    swaps = [f"{path.relative_to(ROOT)}:{line}" for path in SOURCES for line in class_swaps(path.read_text())]
    assert not swaps, swaps
