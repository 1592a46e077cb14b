"""Commit subjects say what changed in under 72 characters (the why goes in the body): checked for every commit
since the habit was made a rule, so a long subject fails `make check` before it is pushed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SINCE = "eb1c6b4"
"""The last commit before the rule was checked (issue 28's habits): the subjects after it are held to it;
older ones are history."""
MOST = 72


def subjects() -> list[str] | None:
    """Subjects of the commits after :data:`SINCE`, None where this is not a clone that holds it."""
    if shutil.which("git") is None or not ROOT.joinpath(".git").exists():
        return None
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{SINCE}^{{commit}}"], capture_output=True)
    if known.returncode != 0:
        return None
    done = subprocess.run(["git", "-C", str(ROOT), "log", "--format=%s", f"{SINCE}..HEAD"],
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def too_long(lines: list[str]) -> list[str]:
    return [line for line in lines if len(line) > MOST]


def test_the_rule_sees_a_long_subject() -> None:
    assert too_long(["x" * MOST, "y" * (MOST + 1)]) == ["y" * (MOST + 1)]


def test_commit_subjects_are_short() -> None:
    found = subjects()
    if found is None:
        pytest.skip(f"not a git clone holding {SINCE} (a source archive): nothing to check")
    assert found, "the log after SINCE holds at least the rule's own commit"
    assert not too_long(found), too_long(found)
