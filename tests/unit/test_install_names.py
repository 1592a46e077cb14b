"""Nobody is told to install shellper by a name that is not ours: on the package index ``shellper`` is another
author's project, ours is ``shellper-pty`` (issue 31)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRONG = re.compile(r"""pip3? install (?:--?\S+ +)*['"]?shellper(?![\w-])|(?<![\w-])shellper\[""")


def _texts() -> list[Path]:
    files = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("protocol/*.md")]
    for package in ("shellper", "tower_client", "examples"):
        files += (ROOT / package).rglob("*.py")
    return files


def test_every_install_advice_names_the_distribution_that_is_ours() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in _texts()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if WRONG.search(line)]
    assert wrong == []


def test_the_check_sees_the_wrong_names() -> None:
    for line in ("pip install shellper==0.1.0", "pip install 'shellper[web]'", "the shellper[web] extra",
                 "pip install --user shellper"):
        assert WRONG.search(line), line
    for line in ("pip install shellper-pty==0.1.0", "pip install 'shellper-pty[web]'", "shellper ls"):
        assert not WRONG.search(line), line
