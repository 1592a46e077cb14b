"""What ``pip show shellper-pty`` prints comes from the built wheel's metadata: a License and a Home-page that
every pip shows (before 25.1, pip reads neither License-Expression nor, before 24, Project-URL for the home
page), the project URLs and the license file; and the wheel carries the completions and the man page."""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"  # a copy: the build leaves build/ and *.egg-info behind
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "node_modules", "*.egg-info",
                                                                 "__pycache__", ".mypy_cache", ".ruff_cache"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "No matching distribution found for setuptools" in done.stderr:
        pytest.skip("no package index to get the build backend (setuptools>=77) from")
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("shellper_pty-*.whl")
    yield built
    shutil.rmtree(out)


def test_every_pip_shows_a_license_and_a_home_page(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        (name,) = (n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.HeaderParser().parsestr(z.read(name).decode())
    assert meta["Name"] == "shellper-pty"
    assert meta["License"] == "MIT"  # what every pip's `pip show` prints as License
    assert meta["License-Expression"] is None  # setuptools writes one or the other; with it, old pips show none
    assert meta["Home-page"] == "https://pypi.org/project/shellper-pty/"
    assert "Homepage, https://pypi.org/project/shellper-pty/" in meta.get_all("Project-URL", [])
    assert meta.get_all("License-File") == ["LICENSE"]


def test_the_wheel_carries_the_completions_and_the_manual(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {f"shellper/share/{n}" for n in ("shellper.bash", "_shellper", "shellper.fish", "shellper.1")} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
