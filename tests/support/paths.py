"""Where things are: the checkout, the interpreter running the tests, and the ``shellper`` command."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The checkout (its ``shellper`` and ``tower_client`` packages are what the tests run)."""
REPO = str(ROOT)
"""ROOT as a string, for ``PYTHONPATH`` and ``cwd=``."""
PY = sys.executable
_SCRIPT = Path(PY).with_name("shellper")
SHELLPER_CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "shellper.cli"]
"""How a person runs ``shellper``: the installed console script (shellper.cli.entry.entry) when there is one."""
