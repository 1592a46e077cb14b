"""A host that is no ssh destination shellper uses is refused before anything runs: not the command here
(``--host '-F /dev/null gpu1' stop --all`` once stopped every local session), not ssh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT, SHELLPER_CLI
from support.waiting import wait_gone

BAD = [
    ["--host", "-F /dev/null gpu1", "stop", "--all"],
    ["--host=-F /dev/null gpu1", "stop", "--all"],
    ["stop", "--all", "--host", "-F /dev/null gpu1"],
    ["--host", "-F", "/dev/null", "stop", "--all"],
    ["--host", "box:", "stop", "--all"],
    ["--host", "a$(touch pwned)", "stop", "--all"],
    ["stop", "box:"],
    ["stop", "a$(touch pwned):keep"],
]


@pytest.fixture
def fake_ssh(tmp_path: Path) -> dict[str, str]:
    """$SHELLPER_SSH that leaves a mark if it is ever run."""
    script = tmp_path / "ssh"
    script.write_text(f"#!/bin/sh\ntouch {tmp_path}/ssh-ran\nexit 255\n")
    script.chmod(0o700)
    return {**os.environ, "SHELLPER_SSH": str(script), "SHELLPER_SSH_CONTROL": "none"}


@pytest.mark.parametrize("args", BAD, ids=[" ".join(a) for a in BAD])
def test_nothing_runs_for_a_bad_host(cli_runtime_dir: Path, tmp_path: Path, fake_ssh: dict[str, str],
                                     args: list[str]) -> None:
    d = str(cli_runtime_dir)
    started = subprocess.run([*SHELLPER_CLI, "--dir", d, "run", "--json", "keep", "--", "cat"], capture_output=True,
                             text=True, timeout=60, cwd=ROOT, check=True)
    pid = int(started.stdout.split('"shellper_pid": ')[1].split(",")[0])
    done = subprocess.run([*SHELLPER_CLI, "--dir", d, *args], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=fake_ssh)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "invalid host" in done.stderr or "invalid session name" in done.stderr or "--host" in done.stderr
    assert not wait_gone(pid, 0), "the local session was stopped"
    assert not (tmp_path / "ssh-ran").exists() and not (tmp_path / "pwned").exists()
    subprocess.run([*SHELLPER_CLI, "--dir", d, "stop", "keep"], capture_output=True, timeout=60, check=True)
    assert wait_gone(pid, 30)


@pytest.mark.parametrize("host", ["-F /dev/null gpu1", "box:", "a$(touch pwned)"])
def test_tower_client_refuses_a_bad_host(tmp_path: Path, fake_ssh: dict[str, str], host: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tower_client.cli", "--host", host, "ls"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env=fake_ssh)
    assert done.returncode == 2 and "--host" in done.stderr, (done.stdout, done.stderr)
    assert not (tmp_path / "ssh-ran").exists() and not (tmp_path / "pwned").exists()
