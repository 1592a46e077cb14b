"""A dropped ssh connection under ``attach HOST:NAME`` and ``tail -f HOST:NAME`` (shellper.cli.remoteterm):
said in one line, the terminal given back as a detach leaves it, a status of its own, and the remote side
gone at once, not at the session's next output."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import termios
from pathlib import Path

import pexpect
import psutil
import pytest
from support.paths import SHELLPER_CLI
from support.remote import TIMEOUT, shellper
from support.sshd import SshWorld
from support.waiting import poll_until

from shellper.host import ssh

LOST = b"shellper: connection to alpha lost"


def clients_of(name: str) -> list[str]:
    """The session's clients but the ``status`` that asks."""
    status = json.loads(shellper("status", f"alpha:{name}", "--json").stdout)
    return [c["client"] for c in status["clients"] if c["client"] != "shellper-cli:status"]


def ssh_child(pid: int) -> int | None:
    """The ssh that the local shellper ``pid`` runs (ours: its child)."""
    return next((int(c.pid) for c in psutil.Process(pid).children() if c.name() == "ssh"), None)


@pytest.mark.parametrize("drop", ["kill the ssh client", "kill the shared connection"])
def test_a_dropped_attach_says_so_and_gives_the_terminal_back(remote: SshWorld, drop: str) -> None:
    started = shellper("--host", "alpha", "run", "sh", "--containment", "none", "--env", "PS1=rsh> ",
                       "--env", "HISTFILE=", "--", "bash", "--norc", "--noprofile", "-i")
    assert started.returncode == 0, started.stderr
    term = pexpect.spawn(SHELLPER_CLI[0], [*SHELLPER_CLI[1:], "attach", "alpha:sh"],
                         env={**os.environ, "TERM": "xterm"}, timeout=TIMEOUT, dimensions=(24, 80))
    try:
        term.expect_exact("rsh> ")
        term.send("printf '\\033[?1049h\\033[?1000hmodes=%s\\n' on\r")  # the alternate screen, mouse reports
        term.expect_exact("modes=on")
        assert clients_of("sh") == ["shellper-attach"]
        if drop == "kill the ssh client":
            pid = ssh_child(term.pid)  # killed outright: it cannot set the terminal back itself
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        else:
            pid = ssh.master_pid("alpha")  # the connection this test's commands made (ssh.ensure_master)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        term.expect_exact(LOST)
        assert b"\x1b[?1049l" in term.before and b"\x1b[?1000l" in term.before  # the detach's restore, first
        attrs = termios.tcgetattr(term.child_fd)  # the terminal's settings, read from its other side
        assert attrs[3] & termios.ICANON and attrs[3] & termios.ECHO, "the terminal was left raw"
        term.expect(pexpect.EOF)
        term.close()
        assert term.exitstatus == ssh.CONNECTION_LOST
    finally:
        term.close(force=True)
    poll_until(lambda: clients_of("sh") == [], 5, what="the remote attach to end with its connection")


def test_a_dropped_tail_follow_ends_at_once_on_both_sides(remote: SshWorld) -> None:
    """Not a terminal (a script's pipe): the remote ``tail -f`` has no terminal to hang up, and the session
    writes nothing; it sees its channel close and ends, so the session no longer counts it."""
    assert shellper("--host", "alpha", "run", "quiet", "--containment", "none", "--", "cat").returncode == 0
    follow = subprocess.Popen([*SHELLPER_CLI, "tail", "-f", "alpha:quiet"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        poll_until(lambda: clients_of("quiet") == ["shellper-cli:tail"], TIMEOUT, what="the remote tail -f")
        pid = ssh.master_pid("alpha")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # this test's commands' shared connection
        _, err = follow.communicate(timeout=TIMEOUT)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.communicate()
    assert follow.returncode == ssh.CONNECTION_LOST, err
    assert err.strip() == LOST, err
    poll_until(lambda: clients_of("quiet") == [], 5, what="the remote tail -f to end with its connection")


def test_tail_follow_ends_when_its_reader_does(cli_runtime_dir: Path) -> None:
    """Here too: ``tail -f`` into a pipe whose reader has gone ends then, not at the next output."""
    d = str(cli_runtime_dir)
    run = [*SHELLPER_CLI, "--dir", d]
    subprocess.run([*run, "run", "still", "--", "cat"], check=True, capture_output=True, timeout=60)
    reader_r, reader_w = os.pipe()
    follow = subprocess.Popen([*run, "tail", "-f", "still"], stdout=reader_w, stderr=subprocess.DEVNULL)
    os.close(reader_w)
    try:

        def tails() -> list[str]:
            said = subprocess.run([*run, "status", "still", "--json"], capture_output=True, text=True, timeout=60)
            return [c["client"] for c in json.loads(said.stdout)["clients"] if c["client"] != "shellper-cli:status"]

        poll_until(lambda: tails() == ["shellper-cli:tail"], TIMEOUT, what="tail -f to connect")
        os.close(reader_r)  # the reader goes; the session writes nothing
        assert follow.wait(TIMEOUT) == 0
        assert tails() == []
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
        with contextlib.suppress(OSError):
            os.close(reader_r)
        subprocess.run([*run, "stop", "still"], capture_output=True, timeout=60)
