"""The README's first lines and its Python example, followed as written: a user's guide that works."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pexpect
from support.waiting import poll_until

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
TIMEOUT = 20.0


def _block(heading: str, language: str) -> str:
    section = README.split(f"\n## {heading}\n", 1)[1]
    found = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert found, f"no {language} block under {heading}"
    return found.group(1)


def _env(directory: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # where `pip install .` put the shellper command
    return dict(os.environ, SHELLPER_DIR=str(directory), PATH=f"{bin_dir}:{os.environ['PATH']}",
                PYTHONPATH=str(REPO))


def test_the_quick_start_is_ten_lines_and_works_as_written(cli_runtime_dir: Path) -> None:
    lines = _block("Quick start", "sh").splitlines()
    assert len(lines) <= 10
    commands = [line.split("#", 1)[0].strip() for line in lines]
    assert commands[0].startswith("pip install .")
    env = _env(cli_runtime_dir)
    attached = 0
    for command, line in zip(commands[1:], lines[1:], strict=True):
        if not command:
            assert "Ctrl-\\ detaches" in line
            continue
        argv = shlex.split(command)
        if argv[1] == "attach":  # a person at a terminal: type, see it, Ctrl-\ detaches
            term = pexpect.spawn(argv[0], argv[1:], env=env, timeout=TIMEOUT)
            marker = f"quick-{attached}"
            term.sendline(f"echo {marker}-$((6*7))")
            term.expect(f"{marker}-42")
            if attached:
                assert b"quick-0-42" in term.before  # the first visit, replayed
            term.send("\x1c")
            term.expect(pexpect.EOF)
            term.close()
            assert term.exitstatus == 0
            attached += 1
            continue
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, (command, done.stderr)
        if argv[1] == "ls":
            assert re.search(r"^[ +] *work\s+running", done.stdout, re.M), done.stdout
    assert attached == 2
    assert not list(cli_runtime_dir.glob("work.sock"))  # stopped


def test_the_python_example_runs(cli_runtime_dir: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _block("From Python", "python")], capture_output=True, text=True,
                          env=_env(cli_runtime_dir), timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^hello\r?$", done.stdout, re.M), done.stdout
    # The example sends STOP and goes: the shellper ends its tree and removes its files after that.
    poll_until(lambda: sorted(p.name for p in cli_runtime_dir.iterdir()) == ["logs"], 20,
               what="the stopped session's files to go, but its kept log")
