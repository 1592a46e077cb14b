"""Exit classification and restarts with real children: the shellper stops retrying on its own."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from support.frames import read_until, recv_until
from support.paths import PY
from support.sessions import Sessions, files_in, left_in
from support.waiting import poll_until, wait_gone

from shellper.client.blocking import Client
from shellper.core.exits import RestartPolicy
from shellper.host.record import read_record
from shellper.protocol import wire

FAST = {"backoff_initial": 0.02, "backoff_max": 0.1, "jitter": 0.0}
"""Short backoffs so a crash loop plays out in well under a second; the breaker bounds are what we test."""


def policy(**overrides: Any) -> RestartPolicy:
    return RestartPolicy(**{**FAST, **overrides})


def events_until(client: Client, kind: str, timeout: float = 15.0) -> list[wire.Event]:
    """Every EVENT up to and including the first of ``kind``."""
    seen: list[wire.Event] = []
    while True:
        event = recv_until(client, wire.Event, timeout)
        seen.append(event)
        if event.kind == kind:
            return seen


def kinds(events: list[wire.Event], kind: str) -> list[wire.Event]:
    return [e for e in events if e.kind == kind]


def settle(sessions: Sessions, name: str, state: str) -> dict[str, Any]:
    """Poll STATUS until the session reaches ``state``; returns its info."""
    def check() -> dict[str, Any] | None:
        with sessions.connect(name, "viewer", replay_bytes=0) as c:
            reply = c.request(wire.Status(), wire.StatusReply)
        assert isinstance(reply, wire.StatusReply)
        return reply.info if reply.state == state else None
    info: dict[str, Any] = poll_until(check, 15, what=f"state {state}")
    return info


def crash_until_fatal(sessions: Sessions, name: str, code: int, runs: int) -> None:
    """Start a child that exits ``code`` at once, and wait until the breaker gives up after ``runs`` runs."""
    sessions.start(name, ["sh", "-c", f"exit {code}"],
                   policy=policy(breaker_count=runs, min_uptime=5, breaker_window=60, same_error_count=0))
    settle(sessions, name, "fatal")


def test_segfault_restarts_then_breaker_goes_fatal(sessions: Sessions) -> None:
    crash = [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    sessions.start("segv", crash, policy=policy(breaker_count=3, min_uptime=5, breaker_window=60))
    with sessions.connect("segv", events_after=0) as tower:
        events = events_until(tower, "gave_up")
    exits = kinds(events, "exited")
    assert len(kinds(events, "spawned")) == 3 == len(exits)
    assert all(e.data["class"] == "crash" and e.data["signal"] == "SIGSEGV" for e in exits)
    assert [e.data["state"] for e in exits] == ["backoff", "backoff", "fatal"]
    assert "crash loop" in kinds(events, "gave_up")[0].data["reason"]
    info = settle(sessions, "segv", "fatal")
    assert info["child_pid"] is None and info["exit_count"] == 3
    sessions.stop("segv")


def test_fast_exit_loop_is_bounded(sessions: Sessions) -> None:
    bound = 4
    sessions.start("loop", ["sh", "-c", "exit 1"],
                   policy=policy(breaker_count=bound, min_uptime=2, breaker_window=30, same_error_count=0))
    with sessions.connect("loop", events_after=0) as tower:
        events = events_until(tower, "gave_up")
        spawned = len(kinds(events, "spawned"))
        assert spawned == bound, f"{spawned} spawns for a breaker of {bound}"
        # Nothing spawns after giving up: a PING round trip proves no event was still on its way.
        tower.request(wire.Ping(nonce=5), wire.Pong)
        assert tower.recv(timeout=0) is None
    record = read_record(sessions.dir / "loop.json")
    assert record.state == "fatal" and record.exit_count == bound
    assert all(e.exit_class == "crash" and e.code == 1 for e in record.exits)
    sessions.stop("loop")


def test_a_restart_whose_command_vanished_is_fatal_at_once(sessions: Sessions) -> None:
    """An exec failure on restart is permanent: no backoff, no breaker count, fatal with its reason."""
    program = sessions.dir / "agent.sh"
    program.write_text("#!/bin/sh\nread line\nexit 1\n")
    program.chmod(0o700)
    sessions.start("nocmd", [str(program)], policy=policy())
    with sessions.connect("nocmd", replay_bytes=0) as tower:
        program.unlink()  # the agent was uninstalled while it ran
        tower.write(b"go\r")
        exit_frame = recv_until(tower, wire.Exit, where=lambda f: f.exit_class == "permanent")
        assert exit_frame.state == "fatal"
        assert "exec failed: " in exit_frame.reason and "no such file" in exit_frame.reason, exit_frame.reason
    info = settle(sessions, "nocmd", "fatal")
    assert info["restarts"] == 1  # the one attempt that found nothing to run; none after it
    sessions.stop("nocmd")


def test_launch_of_missing_command_fails_and_leaves_nothing(sessions: Sessions) -> None:
    from shellper.client.launch import LaunchError

    with pytest.raises(LaunchError, match="nonexistent"):
        sessions.start("bad", ["/nonexistent/agent"])
    assert files_in(sessions.dir) == []  # a launch that failed keeps no log either


@pytest.mark.parametrize("stderr_mode", [None, "pty"])
def test_session_id_in_use_is_fatal_by_pattern(sessions: Sessions, stderr_mode: str | None) -> None:
    """With one terminal (the default) the evidence is the output's last lines, plain; with a stderr of its
    own, that stderr."""
    script = ("import sys; print('\\x1b[32mstarting\\x1b[0m', flush=True); "
              "sys.stderr.write('\\x1b[31mError: Session ID 1234 is already in use\\x1b[0m\\n'); sys.exit(1)")
    options: dict[str, Any] = {} if stderr_mode is None else {"stderr_mode": stderr_mode}
    sessions.start("collide", [PY, "-c", script], policy=policy(), **options)
    with sessions.connect("collide", events_after=0) as tower:
        events = events_until(tower, "gave_up")
    exits = kinds(events, "exited")
    assert len(exits) == 1 and len(kinds(events, "spawned")) == 1
    assert exits[0].data["class"] == "permanent"
    assert "already in use" in exits[0].data["reason"]
    tail = exits[0].data["stderr_tail"]
    assert "already in use" in tail
    if stderr_mode is None:
        assert "starting" in tail and "\x1b" not in tail, tail  # the output's plain text
    else:
        assert "starting" not in tail, tail  # stderr alone
    sessions.stop("collide")


def test_clean_exit_is_not_restarted(sessions: Sessions) -> None:
    sessions.start("clean", ["sh", "-c", "echo bye; exit 0"], policy=policy())
    info = settle(sessions, "clean", "exited")
    assert info["last_exit"]["class"] == "clean" and info["restarts"] == 0
    with sessions.connect("clean") as viewer:
        assert viewer.welcome is not None and viewer.welcome.exit is not None
        out = read_until(viewer, b"not restarted")  # the notice people attached see
        assert b"bye" in out
    sessions.stop("clean")


def test_sigkill_from_outside_is_a_crash_and_restarts(sessions: Sessions) -> None:
    info = sessions.start("victim", ["sleep", "300"], policy=policy())
    assert info.child_pid is not None
    with sessions.connect("victim", replay_bytes=0) as tower:
        os.kill(info.child_pid, signal.SIGKILL)
        exit_frame = recv_until(tower, wire.Exit)
        assert exit_frame.exit_class == "crash" and exit_frame.signal == "SIGKILL"
        assert exit_frame.state == "backoff"
        spawned = recv_until(tower, wire.Event, where=lambda e: e.kind == "spawned")
        assert spawned.data["child_pid"] != info.child_pid
    sessions.stop("victim")


def test_sigterm_through_client_is_requested_and_not_restarted(sessions: Sessions) -> None:
    sessions.start("term", ["sleep", "300"], policy=policy())
    with sessions.connect("term", replay_bytes=0) as tower:
        tower.send(wire.Signal(signal="TERM"))
        exit_frame = recv_until(tower, wire.Exit)
    assert exit_frame.exit_class == "requested" and exit_frame.state == "exited"
    settle(sessions, "term", "exited")
    sessions.stop("term")


@pytest.mark.parametrize(("script", "options", "expected"), [
    # Each run outlives healthy_uptime, so every restart waits the initial delay again and the
    # breaker never opens; a crash loop of the same length without healthy runs would be fatal.
    pytest.param("sleep 0.4; exit 1", dict(backoff_initial=0.05, healthy_uptime=0.3, min_uptime=0.3, breaker_count=2,
                                           breaker_window=10), [0.05, 0.05, 0.05], id="healthy-runs-reset-it"),
    pytest.param("exit 2", dict(backoff_initial=0.02, min_uptime=3, breaker_count=4, breaker_window=60),
                 [0.02, 0.04, 0.08], id="it-grows-without-healthy-runs"),
])
def test_the_backoff(sessions: Sessions, script: str, options: dict[str, Any], expected: list[float],
                     tmp_path: Path) -> None:
    pol = policy(backoff_max=5.0, same_error_count=0, **options)
    # Each run first reads a line from a FIFO, written only once the tower is connected: an EXIT sent before
    # (the first run's, 20 ms after the start, on a loaded machine) would be missed. One line per run.
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    sessions.start("backoff", ["sh", "-c", f'read _ < "$0"; {script}', str(gate)], policy=pol)
    with sessions.connect("backoff", replay_bytes=0) as tower:
        lines = os.open(gate, os.O_RDWR)  # a FIFO opened read-write: never blocks, and holds the lines for the runs
        try:
            os.write(lines, b"\n" * 3)
            delays = [recv_until(tower, wire.Exit).restart_in for _ in range(3)]
        finally:
            os.close(lines)
    assert delays == expected
    sessions.stop("backoff")


def test_bash_is_interactive_with_stderr_captured(sessions: Sessions) -> None:
    sessions.start("bash", ["bash", "--norc", "--noprofile", "-i"], stderr_mode="pty",
                   env={"PATH": os.environ["PATH"], "PS1": "PROMPT$ "})
    with sessions.connect("bash") as tower:
        read_until(tower, b"PROMPT$ ")
        tower.write(b"echo flags=$-=$((40 + 2))\r")  # the echoed command line cannot match the needle
        out = read_until(tower, b"=42\r\n")
        tower.write(b"echo to-stderr >&2\r")
        read_until(tower, b"to-stderr\r\n")
        flags = re.search(rb"flags=([A-Za-z]+)=42", out)
        assert flags is not None and b"i" in flags.group(1)  # interactive although fd 2 is another terminal
        tower.write(b"exit 7\r")
        exit_frame = recv_until(tower, wire.Exit)
    assert exit_frame.code == 7 and "to-stderr" in exit_frame.stderr_tail
    sessions.stop("bash")


def test_python_repl_is_interactive_with_stderr_captured(sessions: Sessions) -> None:
    sessions.start("py", [sys.executable, "-q", "-i"], stderr_mode="pty")
    with sessions.connect("py") as tower:
        read_until(tower, b">>> ")
        tower.write(b"print(6 * 7)\r")
        read_until(tower, b"42\r\n")
        tower.write(b"1/0\r")
        read_until(tower, b"ZeroDivisionError")
        tower.write(b"raise SystemExit(5)\r")
        exit_frame = recv_until(tower, wire.Exit)
    assert exit_frame.code == 5 and "ZeroDivisionError" in exit_frame.stderr_tail
    sessions.stop("py")


def test_tower_connecting_late_reads_every_exit(sessions: Sessions) -> None:
    crash_until_fatal(sessions, "late", 9, runs=3)
    with sessions.connect("late", events_after=0) as tower:
        assert tower.welcome is not None and tower.welcome.state == "fatal"
        assert tower.welcome.exit is not None and tower.welcome.exit["code"] == 9
        last_exit = recv_until(tower, wire.Exit)
        assert last_exit.state == "fatal"
        events = events_until(tower, "gave_up")
    exits = kinds(events, "exited")
    assert [e.data["code"] for e in exits] == [9, 9, 9]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    record = read_record(sessions.dir / "late.json")
    assert [e.code for e in record.exits] == [9, 9, 9] and record.state == "fatal"
    sessions.stop("late")


def test_spawn_from_tower_revives_a_fatal_session(sessions: Sessions) -> None:
    crash_until_fatal(sessions, "revive", 1, runs=2)
    with sessions.connect("revive", replay_bytes=0) as tower:
        tower.send(wire.Spawn(argv=["cat"]))
        spawned = recv_until(tower, wire.Event, where=lambda e: e.kind == "spawned")
        assert spawned.data["argv"] == ["cat"]
    info = settle(sessions, "revive", "running")
    assert info["argv"] == ["cat"]
    sessions.stop("revive")


def test_husk_ttl_stops_an_exited_session(sessions: Sessions) -> None:

    info = sessions.start("husk", ["true"], husk_ttl=0.2, policy=policy())
    assert wait_gone(info.pid, 15)
    assert left_in(sessions.dir) == []
