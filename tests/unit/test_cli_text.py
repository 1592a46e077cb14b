"""Pure helpers behind ``tail -n`` and the restart countdowns ``ls`` and ``status`` show, as tables."""

from __future__ import annotations

import pytest

from shellper.core.exitrecord import ExitClass, ExitRecord, exit_line
from shellper.core.states import SessionState
from shellper.core.terminal.text import last_lines


@pytest.mark.parametrize(("data", "count", "expected"), [
    (b"a\nb\nc\n", 1, b"c\n"),
    (b"a\nb\nc\n", 2, b"b\nc\n"),
    (b"a\nb\nc\n", 3, b"a\nb\nc\n"),
    (b"a\nb\nc\n", 9, b"a\nb\nc\n"),
    (b"a\nb\nc", 1, b"c"),  # an unfinished last line counts as one
    (b"a\r\nb\r\n", 1, b"b\r\n"),
    (b"a\nb\n", 0, b""),
    (b"", 3, b""),
    (b"\n\n", 1, b"\n"),
    (b"no newline", 1, b"no newline"),
])
def test_last_lines(data: bytes, count: int, expected: bytes) -> None:
    assert last_lines(data, count) == expected


def _exit(reason: str, restart_in: float | None) -> ExitRecord:
    return ExitRecord(exit_class=ExitClass.CRASH, state=SessionState.BACKOFF, reason=reason, time=1000.0,
                      restart_in=restart_in)


CRASH = "crash: exit 3 after 0.52 s; restart #2 (crash)"


@pytest.mark.parametrize(("last", "state", "next_restart_at", "now", "expected"), [
    (_exit(f"{CRASH} in 0.87 s", 0.87), "backoff", 1000.87, 1000.0, f"{CRASH} in 1 s"),
    (_exit(f"{CRASH} in 30 s", 30.0), "backoff", 1030.0, 1012.5, f"{CRASH} in 18 s"),  # live, rounded up
    (_exit(f"{CRASH} in 30 s", 30.0), "backoff", 1030.0, 1031.0, f"{CRASH} due now"),
    (_exit(f"{CRASH} in 0.87 s", 0.87), "running", None, 1005.0, CRASH),  # restarted: no stale countdown
    (_exit(f"{CRASH} in 0.87 s", 0.87), "running", 1000.87, 1005.0, CRASH),
    (_exit(f"{CRASH} in 0.87 s", 0.87), "stale", None, 1005.0, CRASH),
    (_exit(f"{CRASH} in 0.87 s", 0.87), "backoff", None, 1000.0, CRASH),  # nothing pending known
    (_exit("crash: exit 3; not restarted", None), "exited", None, 1005.0, "crash: exit 3; not restarted"),
    (_exit("crash: exit 3; restart soon", 2.0), "backoff", 1002.0, 1000.0, "crash: exit 3; restart soon"),
    (ExitRecord(exit_class=ExitClass.CLEAN, state=SessionState.EXITED, reason="clean exit 0; not restarted",
                time=1000.0, code=0), "running", None, 1005.0, "clean exit 0; not restarted; started again since"),
])
def test_exit_line(last: ExitRecord, state: str, next_restart_at: float | None, now: float, expected: str) -> None:
    assert exit_line(last, state, next_restart_at, now) == expected
