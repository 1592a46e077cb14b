"""What a program wrote, or a record says, reaches a person's terminal only made harmless (issue 27).

A child prints escape sequences that would clear the screen, write the clipboard (OSC 52) or ask the
terminal something (DSR, DECID), in their 8-bit C1 forms too, then exits nonzero: ``ls``, ``status``,
the session's log, ``tail --plain --bytes`` and ``attach`` (both replays) must not pass them on. A record
whose owner holds OSC 52 is refused, not printed. Every session is a real shellper in a private directory.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from support.paths import REPO, SHELLPER_CLI
from support.sessions import Sessions
from support.waiting import poll_until

from shellper.core.exits import RestartPolicy

pytestmark = pytest.mark.kills_sessions

TIMEOUT = 20.0
DETACH = b"\x1c"

# An erase display, a clipboard write and a DSR in their 8-bit forms (U+009B CSI, U+009D OSC, U+009C ST),
# the same in 7-bit form, BEL and BS: the last line a program printed before it failed.
HOSTILE = "boom \u009b2J \u009d52;c;aGFjaw==\u009c \x1b]52;c;aGFjaw==\x07 \x07\x08 \u009b6n end"
CLIPBOARD = b"aGFjaw=="


def cli(d: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*SHELLPER_CLI, "--dir", str(d), *args], capture_output=True, timeout=60, cwd=REPO)


def harmful(out: bytes) -> list[str]:
    """What in ``out`` a terminal would act on beyond printing and line feeds: ESC, C1 (as UTF-8 or as lone
    bytes), BEL, BS, CR."""
    text = out.decode("utf-8", "surrogateescape")
    return sorted({repr(c) for c in text
                   if c in "\x1b\x07\x08\r" or "\x80" <= c <= "\x9f" or "\udc80" <= c <= "\udc9f"})


def _failed(sessions: Sessions, name: str) -> None:
    script = f"import sys; sys.stdout.write({HOSTILE!r} + '\\n'); sys.stdout.flush(); sys.exit(3)"
    sessions.start(name, [sys.executable, "-c", script], policy=RestartPolicy(mode="no"))
    poll_until(lambda: b"exited" in cli(sessions.dir, "status", name).stdout, TIMEOUT, what="the child's exit")


def test_an_exit_reason_from_hostile_output_is_shown_harmless(sessions: Sessions) -> None:
    _failed(sessions, "bad")
    ls = cli(sessions.dir, "ls", "-l")
    assert b"boom" in ls.stdout and b"end" in ls.stdout, ls.stdout  # LAST EXIT quotes the line...
    assert harmful(ls.stdout) == [], ls.stdout  # ...without what would act on the terminal
    status = cli(sessions.dir, "status", "bad")
    assert b"boom" in status.stdout and harmful(status.stdout) == [], status.stdout
    log = (sessions.dir / "bad.log").read_bytes()
    assert b"boom" in log and harmful(log) == [], log
    record = json.loads((sessions.dir / "bad.json").read_text())
    assert "boom" in record["exits"][-1]["reason"]
    assert harmful(record["exits"][-1]["reason"].encode()) == []


def test_tail_plain_bytes_drops_c1_bel_and_bs(sessions: Sessions) -> None:
    _failed(sessions, "bad")
    out = cli(sessions.dir, "tail", "--plain", "--bytes", "4096", "bad").stdout
    assert b"boom" in out and b"end" in out, out
    assert harmful(out) == [] and CLIPBOARD not in out, out


def test_status_shows_a_hostile_command_line_and_directory_harmless(sessions: Sessions, tmp_path: Path) -> None:
    cwd = tmp_path / "dir\x1b]0;pwned\x07\u009b2J"
    cwd.mkdir()
    sessions.start("argv", ["sh", "-c", "sleep 300", "\x1b]52;c;aGFjaw==\x07", "\u009b2J"], cwd=str(cwd))
    status = cli(sessions.dir, "status", "argv").stdout
    assert b"sleep 300" in status and b"pwned" in status, status  # shown, escaped
    assert harmful(status) == [], status
    ls = cli(sessions.dir, "ls", "-l").stdout
    assert b"sleep 300" in ls and harmful(ls) == [], ls


def _forged_record(sessions: Sessions, name: str, owner: str) -> None:
    """A record of a session whose shellper is gone, copied from a real one, with ``owner`` in it."""
    sessions.start("real", ["sleep", "300"])
    record = json.loads((sessions.dir / "real.json").read_text())
    record.update(name=name, owner=owner, shellper_pid=2**22 - 1, child_pid=None, state="running")
    (sessions.dir / f"{name}.json").write_text(json.dumps(record))


def test_a_record_whose_owner_holds_an_escape_is_refused(sessions: Sessions) -> None:
    _forged_record(sessions, "forged", "evil\x1b]52;c;aGFjaw==\x07")
    ls = cli(sessions.dir, "ls", "-l")
    assert b"forged" in ls.stdout and harmful(ls.stdout + ls.stderr) == [], ls
    assert CLIPBOARD not in ls.stdout
    status = cli(sessions.dir, "status", "forged")
    assert status.returncode != 0 and b"owner" in status.stderr, status  # unreadable: says which field
    assert harmful(status.stdout + status.stderr) == [], status
    tower = subprocess.run([sys.executable, "-m", "tower_client.cli", "--dir", str(sessions.dir), "ls"],
                           capture_output=True, timeout=60, cwd=REPO)
    assert b"forged" in tower.stdout, tower
    assert harmful(tower.stdout + tower.stderr) == [] and CLIPBOARD not in tower.stdout, tower


# A program that asks the terminal questions and writes its clipboard, then waits: the attach's replay must
# not ask again (the answers would be typed into the session) nor write the clipboard again.
QUERIES = ("import sys, time\n"
           "w = sys.stdout.buffer.write\n"
           "w(b'before\\x1b]52;c;aGFjaw==\\x07\\x1bZ\\x1b[6\\x08n\\xc2\\x9b6n\\x1b]2;title\\xc2\\x9b6n\\x07after\\r\\n')\n"
           "w(b'READY\\r\\n'); sys.stdout.flush(); time.sleep(300)\n")
ASKED = [b"\x1b]52;", b"\x1bZ", b"\x1b[6\x08n", b"\xc2\x9b6n", b"\x9b"]


def _attach(sessions: Sessions, *opts: str) -> bytes:
    term = pexpect.spawn(SHELLPER_CLI[0], [*SHELLPER_CLI[1:], "--dir", str(sessions.dir), "attach", *opts, "ask"],
                         timeout=TIMEOUT, cwd=str(REPO), dimensions=(24, 80))
    try:
        term.expect_exact(b"READY")
        seen = term.before + term.after
        term.send(DETACH)
        term.expect_exact(b"[detached]")
        seen += term.before  # the rest of a rendered replay: the title, the cursor
        term.expect(pexpect.EOF)
    finally:
        term.close(force=True)
    return bytes(seen)


def test_a_replay_asks_nothing_and_writes_no_clipboard(sessions: Sessions) -> None:
    sessions.start("ask", [sys.executable, "-c", QUERIES])
    poll_until(lambda: b"READY" in cli(sessions.dir, "tail", "--plain", "ask").stdout, TIMEOUT,
               what="the program's output")
    raw = _attach(sessions, "--raw")
    assert re.search(rb"before.*after", raw, re.S), raw
    assert [q for q in ASKED if q in raw] == [], raw
    # the BS inside the DSR is the program's: it stays; the title stays without the query smuggled into it
    assert b"before\x08\x1b]2;title\x07after" in raw, raw
    rendered = _attach(sessions)
    assert b"beforafter" in rendered and b"\x1b]2;title\x07" in rendered, rendered  # the BS was executed
    assert [q for q in ASKED if q in rendered] == [], rendered


def test_attach_shows_the_exit_reason_harmless(sessions: Sessions) -> None:
    script = (f"import sys; print('WAITING', flush=True); sys.stdin.readline(); "
              f"sys.stdout.write({HOSTILE!r} + '\\n'); sys.stdout.flush(); sys.exit(3)")
    sessions.start("late", [sys.executable, "-c", script], policy=RestartPolicy(mode="no"))
    term = pexpect.spawn(SHELLPER_CLI[0], [*SHELLPER_CLI[1:], "--dir", str(sessions.dir), "attach", "late"],
                         timeout=TIMEOUT, cwd=str(REPO), dimensions=(24, 80))
    try:
        term.expect_exact(b"WAITING")
        term.send(b"\r")
        term.expect_exact(b"[exited: ")
        term.expect_exact(b"(restart mode no)]")
        reason = bytes(term.before)
        term.expect(pexpect.EOF)
    finally:
        term.close(force=True)
    assert b"boom" in reason and harmful(reason) == [], reason
