"""The examples use the facade only: ``from tower_client import ...`` and the standard library, nothing private."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["tower.py", "tower_demo.py", "web.py"]
THIRD_PARTY = {"uvicorn"}  # examples/web.py's server: the shellper-pty[web] extra


def private_imports(source: str) -> list[str]:
    """Every import of ``source`` that is neither the standard library, a declared third party, nor the
    ``tower_client`` package itself (a submodule such as ``tower_client.fleet``, or any of ``shellper``)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [("." * node.level) + (node.module or "")]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            if name == "tower_client" or name == "__future__":
                continue
            if top in sys.stdlib_module_names or top in THIRD_PARTY:
                continue
            bad.append(name)
    return bad


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_example_imports_only_the_facade(example: str) -> None:
    assert private_imports((ROOT / "examples" / example).read_text()) == []


def test_the_check_sees_a_private_import() -> None:
    assert private_imports("from tower_client.fleet import Fleet\nimport shellper.core\nfrom . import x\n"
                           "import tower_client\nimport os.path\n") == ["tower_client.fleet", "shellper.core", "."]

