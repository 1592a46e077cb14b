"""A stopped session's log is kept in ``logs/NAME.log`` (the one before in ``logs/NAME.log.1``) for
STOPPED_LOG_DAYS; the session's name is left free of files. Driven through the CLI, real shellpers."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from support.paths import SHELLPER_CLI
from support.sessions import Sessions, files_in, left_in

from shellper.host.logfile import STOPPED_LOG_DAYS


def cli(sessions: Sessions, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*SHELLPER_CLI, "--dir", str(sessions.dir), *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (args, done.stderr)
    return done


def run_and_stop(sessions: Sessions, name: str, marker: str) -> None:
    cli(sessions, "run", name, "--grace", "0.2", "--", "sh", "-c", f"echo {marker}; exec sleep 300")
    cli(sessions, "stop", name)


def test_the_log_survives_stop_in_logs(sessions: Sessions) -> None:
    run_and_stop(sessions, "k", "first")
    logs = sessions.dir / "logs"
    assert left_in(sessions.dir) == [] and sorted(p.name for p in logs.iterdir()) == ["k.log"]
    assert (logs.stat().st_mode & 0o777) == 0o700
    first = (logs / "k.log").read_text()
    assert "started" in first and first.rstrip().endswith("stopped")
    # The next instance of the name logs afresh; its stop moves the older log to .1.
    run_and_stop(sessions, "k", "second")
    assert sorted(p.name for p in logs.iterdir()) == ["k.log", "k.log.1"]
    assert (logs / "k.log.1").read_text() == first
    assert (logs / "k.log").read_text() != first and left_in(sessions.dir) == []


def test_logs_older_than_the_limit_are_removed_by_the_next_stop(sessions: Sessions) -> None:
    logs = sessions.dir / "logs"
    logs.mkdir(mode=0o700)
    old, recent = logs / "old.log", logs / "recent.log"
    old.write_text("old\n")
    recent.write_text("recent\n")
    now = time.time()
    os.utime(old, (now, now - (STOPPED_LOG_DAYS + 1) * 86400))
    os.utime(recent, (now, now - (STOPPED_LOG_DAYS - 1) * 86400))
    run_and_stop(sessions, "p", "x")
    assert sorted(p.name for p in logs.iterdir()) == ["p.log", "recent.log"]


def test_a_logs_symlink_is_not_followed(sessions: Sessions, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (sessions.dir / "logs").symlink_to(elsewhere)
    run_and_stop(sessions, "s", "x")
    assert list(elsewhere.iterdir()) == []  # nothing moved through the link
    assert files_in(sessions.dir) == ["logs"]  # and the log was removed instead
    (sessions.dir / "logs").unlink()
