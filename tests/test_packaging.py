"""What an installed shellper offers besides its code: entry points, typing marker, licence, metadata."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata, resources
from pathlib import Path

from shellper import __version__

REPO = Path(__file__).resolve().parent.parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO)


def test_python_m_shellper_is_the_cli() -> None:
    done = _run(sys.executable, "-m", "shellper", "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"shellper {__version__}", done
    done = _run(sys.executable, "-m", "shellper", "--help")
    assert done.returncode == 0 and "attach" in done.stdout and "usage: shellper" in done.stdout


def test_tower_client_version() -> None:
    script = Path(sys.executable).with_name("tower-client")
    done = _run(str(script), "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"tower-client (shellper) {__version__}", done


def test_both_packages_are_marked_typed() -> None:
    for package in ("shellper", "tower_client"):
        assert resources.files(package).joinpath("py.typed").is_file(), package
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    # shellper's data also holds the shipped completions and man page (share/*, tests/test_completions.py)
    assert project["tool"]["setuptools"]["package-data"] == {"shellper": ["py.typed", "share/*"],
                                                             "tower_client": ["py.typed"]}


def test_licence_file_matches_the_metadata() -> None:
    # The License field comes from setup.cfg (pyproject.toml says why); the installed metadata has it.
    assert "license" in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dynamic"]
    assert metadata.metadata("shellper-pty")["License"] == "MIT"
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n")
    classifiers = metadata.metadata("shellper-pty").get_all("Classifier") or []
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert {f"Programming Language :: Python :: 3.{minor}" for minor in (11, 12, 13)} <= set(classifiers)


def test_lint_tools_are_an_extra_of_their_own() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {r.split(">")[0] for r in extras["lint"]} == {"ruff", "mypy"}
    assert not {r.split(">")[0] for r in extras["test"]} & {"ruff", "mypy"}
