"""``shellper tail``, ``ls`` and ``status`` as a person uses them: in a real terminal (pexpect's PTY) or into a
real pipe whose reader leaves. Every session is a real shellper in a private directory, stopped at the end."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from support.paths import REPO, SHELLPER_CLI
from support.sessions import Sessions
from support.waiting import poll_until, wait_gone

from shellper.core.exits import RestartPolicy
from shellper.host.record import read_record

pytestmark = pytest.mark.kills_sessions

TIMEOUT = 20.0
SIGPIPE_STATUS = 141

# Output into the ring, then the modes a full-screen program switches on, then it waits.
FULL_SCREEN = ("import sys, time\n"
               "for i in range(1, 51): print('row', i)\n"
               "sys.stdout.write('\\x1b[?1049h\\x1b[?25l\\x1b[?1000hSCREEN-UP'); sys.stdout.flush()\n"
               "time.sleep(300)\n")
RESET = b"\x1b[?1000l\x1b[?1049l\x1b[?25h"
"""What tail writes after such output: mouse off, main screen, cursor shown (TerminalModes.disable_sequence)."""


def cli(d: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SHELLPER_CLI, "--dir", str(d), *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=env)


def terminal(d: Path, *args: str) -> pexpect.spawn:
    return pexpect.spawn(SHELLPER_CLI[0], [*SHELLPER_CLI[1:], "--dir", str(d), *args], timeout=TIMEOUT,
                         cwd=str(REPO), dimensions=(24, 80))


def finish(term: pexpect.spawn) -> int:
    term.expect(pexpect.EOF)
    term.close()
    return int(term.exitstatus if term.exitstatus is not None else 128 + term.signalstatus)


def ring_has(sessions: Sessions, name: str, text: str) -> bool:
    return text in cli(sessions.dir, "tail", "--plain", name).stdout


@pytest.fixture
def screen(sessions: Sessions) -> Iterator[Sessions]:
    sessions.start("scr", [sys.executable, "-c", FULL_SCREEN])
    poll_until(lambda: ring_has(sessions, "scr", "SCREEN-UP"), TIMEOUT, what="the full-screen output")
    yield sessions


# ---------------------------------------------------------------------------------------------- tail's modes

def test_tail_to_a_terminal_switches_off_the_modes_its_output_switched_on(screen: Sessions) -> None:
    term = terminal(screen.dir, "tail", "scr")
    term.expect_exact(b"SCREEN-UP")
    term.expect_exact(RESET)  # right after the output: nothing else between
    assert term.before == b""
    assert finish(term) == 0


def test_tail_f_interrupted_still_switches_them_off(screen: Sessions) -> None:
    term = terminal(screen.dir, "tail", "-f", "scr")
    term.expect_exact(b"SCREEN-UP")
    term.sendintr()
    term.expect_exact(RESET)
    assert finish(term) == 130


def test_tail_to_a_terminal_gives_back_the_pen_charsets_and_tab_stops(sessions: Sessions) -> None:
    """Output that left a pen, insert mode, no tab stops and line drawing shifted in is followed by what makes
    the terminal fresh again (shellper.core.terminal.restore), as a detach is."""
    from shellper.core.terminal.restore import restore_sequence

    dirty = "sys.stdout.write('PEN-UP\\x1b[1;31m\\x1b[4h\\x1b[3g\\x1b)0\\x0e'); sys.stdout.flush()\n"
    sessions.start("pen", [sys.executable, "-c", f"import sys, time\n{dirty}time.sleep(300)\n"])
    poll_until(lambda: ring_has(sessions, "pen", "PEN-UP"), TIMEOUT, what="the dirty output")
    term = terminal(sessions.dir, "tail", "pen")
    term.expect_exact(b"PEN-UP")
    term.expect_exact(restore_sequence(80))
    assert finish(term) == 0


def test_tail_into_a_pipe_adds_nothing_to_the_output(screen: Sessions) -> None:
    out = subprocess.run([*SHELLPER_CLI, "--dir", str(screen.dir), "tail", "scr"], capture_output=True,
                         timeout=60, cwd=REPO)
    assert out.returncode == 0 and out.stdout.endswith(b"SCREEN-UP"), out.stdout[-80:]


def test_tail_lines(screen: Sessions) -> None:
    term = terminal(screen.dir, "tail", "-n", "3", "--plain", "scr")
    term.expect(pexpect.EOF)
    # --plain: the text a person sees, line by line (the main screen's, then the full-screen program's)
    assert term.before.replace(b"\r\n", b"\n") == b"row 49\nrow 50\nSCREEN-UP\n"
    assert cli(screen.dir, "tail", "--lines", "2", "--plain", "scr").stdout == "row 50\nSCREEN-UP\n"
    assert cli(screen.dir, "tail", "-n", "0", "scr").stdout == ""
    bad = cli(screen.dir, "tail", "-n", "-1", "scr")
    assert bad.returncode == 1 and "--lines -1" in bad.stderr and "Traceback" not in bad.stderr


# ----------------------------------------------------------------------------------------- tail -f's end

def test_tail_f_ends_when_the_session_ends_for_good_with_its_notice_once(sessions: Sessions) -> None:
    sessions.start("once", ["sh", "-c", "echo started; read line; exit 0"])
    poll_until(lambda: ring_has(sessions, "once", "started"), TIMEOUT, what="the child's first line")
    term = terminal(sessions.dir, "tail", "-f", "--plain", "once")
    term.expect_exact(b"started")
    assert cli(sessions.dir, "send", "--enter", "once", "bye").returncode == 0
    assert finish(term) == 0
    shown = term.before.decode()
    assert shown.count("[shellper] child exit 0") == 1 and "not restarted" in shown, shown
    # Over already: the output (with its notice), a line saying nothing follows, and the end.
    again = subprocess.run([*SHELLPER_CLI, "--dir", str(sessions.dir), "tail", "-f", "--plain", "once"],
                           capture_output=True, text=True, timeout=30, cwd=REPO)
    assert again.returncode == 0 and again.stdout.count("[shellper] child exit 0") == 1, again
    assert "has exited; nothing more will follow" in again.stderr


def test_tail_f_follows_a_restart(sessions: Sessions, tmp_path: Path) -> None:
    """A crash with a restart pending is not the end: tail -f shows the restarted child's output."""
    flag = tmp_path / "crashed"
    sessions.start("again", ["sh", "-c", f"if [ -e {flag} ]; then echo second-run; sleep 300; "
                                          f"else echo first-run; touch {flag}; read line; exit 3; fi"])
    poll_until(lambda: ring_has(sessions, "again", "first-run"), TIMEOUT, what="the first run")
    term = terminal(sessions.dir, "tail", "-f", "--plain", "again")
    term.expect_exact(b"first-run")
    assert cli(sessions.dir, "send", "--enter", "again", "crash").returncode == 0
    term.expect_exact(b"restarting in")
    term.expect_exact(b"second-run")
    assert term.isalive()
    term.sendintr()
    assert finish(term) == 130


# ------------------------------------------------------------------------------------------- broken pipes

@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("command", [["ls"], ["ls", "--json"], ["tail", "scr"], ["tail", "-f", "scr"],
                                     ["status", "scr"]], ids=lambda c: "-".join(c))
def test_a_reader_gone_is_a_quiet_141(screen: Sessions, command: list[str], unbuffered: bool) -> None:
    """The pipe's read end is closed before the command starts: its first write fails, whatever the timing."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([*SHELLPER_CLI, "--dir", str(screen.dir), *command], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, cwd=REPO, env=env)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (SIGPIPE_STATUS, "")


@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "unbuffered"])
def test_tail_into_head_is_a_quiet_141(sessions: Sessions, unbuffered: str) -> None:
    """More output than a pipe holds, so the writer is still writing when head leaves."""
    sessions.start("big", [sys.executable, "-c", "import time\nfor i in range(4000): print('x' * 99)\n"
                                                  "time.sleep(300)"])
    poll_until(lambda: len(cli(sessions.dir, "tail", "big").stdout) >= 400_000, TIMEOUT, what="400 KB of output")
    script = (f"{' '.join(SHELLPER_CLI)} --dir {sessions.dir} tail big | head -1 >/dev/null; "
              "echo status=${PIPESTATUS[0]}")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=dict(os.environ, PYTHONUNBUFFERED=unbuffered))
    assert (done.stdout, done.stderr) == (f"status={SIGPIPE_STATUS}\n", "")


# ------------------------------------------------------------------------------------------------------- ls

def ls_rows(d: Path) -> dict[str, str]:
    """ls -l's lines by session name (the second word of a finished session's line, after its "+")."""
    lines = cli(d, "ls", "-l").stdout.splitlines()
    assert lines[0].split()[0] == "NAME", lines
    return {(line.split()[1] if line.startswith("+") else line.split()[0]): line for line in lines[1:]}


def test_ls_marks_finished_sessions_and_shows_their_commands(sessions: Sessions) -> None:
    sessions.start("live", ["sleep", "300"])
    sessions.start("done", ["sh", "-c", "exit 0"])
    poll_until(lambda: "exited" in ls_rows(sessions.dir)["done"], TIMEOUT, what="the child to exit")
    rows = ls_rows(sessions.dir)
    assert rows["done"].startswith("+ ") and not rows["live"].startswith("+"), rows
    assert "sleep 300" in rows["live"] and "sh -c exit 0" in rows["done"], rows
    header = cli(sessions.dir, "ls").stdout.splitlines()[0]
    assert header.index("COMMAND") < header.index("LAST EXIT")


def test_ls_and_status_count_a_restart_down_live_and_drop_it_once_done(sessions: Sessions, tmp_path: Path) -> None:
    flag = tmp_path / "crashed"
    sessions.start("slow", ["sh", "-c", "exit 3"], policy=_policy(backoff_initial=40.0, jitter=0.0))
    sessions.start("back", ["sh", "-c", f"if [ -e {flag} ]; then sleep 300; else touch {flag}; exit 3; fi"],
                    policy=_policy(backoff_initial=0.2, jitter=0.0))
    poll_until(lambda: "backoff" in ls_rows(sessions.dir).get("slow", ""), TIMEOUT, what="the backoff")
    record = read_record(sessions.dir / "slow.json")
    assert record.next_restart_at is not None
    due = record.next_restart_at
    poll_until(lambda: time.time() > due - 38.5, TIMEOUT, what="1.5 s of the 40 s backoff")  # 40 s said at the exit
    before = time.time()
    row = ls_rows(sessions.dir)["slow"]
    after = time.time()
    shown = int(row.rsplit(" in ", 1)[1].removesuffix(" s"))
    assert math.ceil(record.next_restart_at - after) <= shown <= math.ceil(record.next_restart_at - before), row
    assert shown < 40
    status = cli(sessions.dir, "status", "slow").stdout
    assert f"restart #1 (crash) in {shown} s" in status or f"in {shown - 1} s" in status, status
    poll_until(lambda: "running" in ls_rows(sessions.dir).get("back", "") and "restart #1" in
               ls_rows(sessions.dir)["back"], TIMEOUT, what="the restarted child")
    row = ls_rows(sessions.dir)["back"]
    assert row.endswith("restart #1 (crash)"), row  # no stale "in 0.2 s"
    assert cli(sessions.dir, "status", "back").stdout.count(" in 0.2 s") == 0


def _policy(**fields: float) -> RestartPolicy:
    return RestartPolicy(**fields)  # type: ignore[arg-type]


# -------------------------------------------------------------------------------- a shellper that does not answer

def test_status_and_stop_of_a_stopped_shellper_say_so_and_stop_ends_it(sessions: Sessions) -> None:
    info = sessions.start("frozen", ["sleep", "300"])
    child = read_record(sessions.dir / "frozen.json").child_pid
    assert child is not None
    os.kill(info.pid, signal.SIGSTOP)
    status = cli(sessions.dir, "status", "frozen")
    assert status.returncode == 1 and "Traceback" not in status.stderr
    assert f"pid {info.pid} does not answer: stopped (SIGSTOP)?" in status.stderr, status.stderr
    stop = cli(sessions.dir, "stop", "--grace", "0.5", "frozen")
    assert stop.returncode == 0, stop.stderr
    assert f"pid {info.pid} does not answer: stopped (SIGSTOP)?" in stop.stderr
    assert stop.stdout == "stopped frozen (its shellper did not answer; via signals)\n"
    assert wait_gone(info.pid, TIMEOUT) and wait_gone(child, TIMEOUT)
    assert not [p for p in sessions.dir.iterdir() if p.name.startswith("frozen.")]


def test_a_missing_xdg_runtime_dir_is_warned_about_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "run" / "user" / "1000"
    env = {k: v for k, v in os.environ.items() if k != "SHELLPER_DIR"}
    env["XDG_RUNTIME_DIR"] = str(missing)
    done = subprocess.run([*SHELLPER_CLI, "ls"], capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    fallback = f"/tmp/shellper-{os.geteuid()}"
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"shellper: warning: $XDG_RUNTIME_DIR ({missing}) is not a directory; using {fallback}\n"
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ husk TTL

def _log_has(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text(errors="replace")


@pytest.mark.parametrize(("ttl", "said"), [
    ((), "husk: the session stops itself in 3600 s (husk_ttl)"),  # shellper run's default
    (("--husk-ttl", "none"), "husk: the session stays until a SPAWN or STOP (no husk_ttl)"),
])
def test_run_gives_a_husk_a_default_time_to_live_and_logs_it(tmp_path: Path, ttl: tuple[str, ...], said: str) -> None:
    d = tmp_path / "run"
    started = cli(d, "run", *ttl, "done", "--", "sh", "-c", "exit 0")
    assert started.returncode == 0, started.stderr
    try:
        poll_until(lambda: _log_has(d / "done.log", "husk: "), TIMEOUT, what="the husk's log line")
        assert said in (d / "done.log").read_text(), (d / "done.log").read_text()
    finally:
        assert cli(d, "stop", "done").returncode == 0


def test_a_husk_stops_itself_when_its_time_to_live_is_up(tmp_path: Path) -> None:
    d = tmp_path / "run"
    started = cli(d, "run", "--husk-ttl", "0.5", "brief", "--", "sh", "-c", "exit 0")
    assert started.returncode == 0, started.stderr
    poll_until(lambda: not any((d / f"brief{suffix}").exists() for suffix in (".sock", ".json", ".lock")),
               TIMEOUT, what="the husk to stop itself and remove its files")
