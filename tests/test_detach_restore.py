"""However an attach ends, the person's terminal is left as a fresh one (issue 28): the pen, insert mode,
autowrap, the character sets and shift state, the tab stops and reverse video the session set do not stay.

A real session and ``shellper attach`` in a real terminal (pexpect's PTY), in each attach mode: the terminal
handed to the shellper (the default, with the rendered replay), ``--relay`` and ``--raw``. What the terminal
received, all of it, is fed to a model of the person's terminal (pyte), which must then be in a fresh
terminal's state; and the bytes must end with the restore (shellper.core.terminal.restore), then attach's
message. The shell does not get to undo the state itself: ``read -rsn1`` waits until the attach has ended.
"""

from __future__ import annotations

import io
import os
import re
import signal
import tempfile
from collections.abc import Iterator

import pexpect
import pyte
import pytest
from support.terminals import BASH, DETACH, PROMPT, Terminals, cli_env, finish, wait_all_gone

from shellper.core.terminal.restore import restore_sequence

ROWS, COLS = 24, 80
DIRTY = r"printf 'on-%d\e[1;38;5;196;48;5;22m\e[4h\e[?7l\e[3g\e)0\x0e\e[?5h' $((6*7))"
"""Bold red on green, insert mode, autowrap off, no tab stops, G1 line drawing shifted in, reverse video."""
SHOWN = b"on-42\x1b[1;38;5;196;48;5;22m\x1b[4h\x1b[?7l\x1b[3g\x1b)0\x0e\x1b[?5h"
"""What DIRTY writes (the marker is computed by the shell: the echo of the typed line never matches)."""

MODES = {"handoff": (), "relay": ("--relay",), "raw": ("--raw",)}
"""How each test attaches (``terminals``' parameter): the ends other than a detach take the same path with
``--raw`` as without (only the replay differs), so they run in the first two."""
every_mode = pytest.mark.parametrize("terminals", list(MODES), indirect=True)
handed_and_relayed = pytest.mark.parametrize("terminals", ["handoff", "relay"], indirect=True)


@pytest.fixture
def terminals(request: pytest.FixtureRequest) -> Iterator[Terminals]:
    s = Terminals(tempfile.mkdtemp(prefix="shpr-", dir="/tmp"), cli_env())
    s.attach_opts = MODES[request.param]
    try:
        yield s
    finally:
        s.teardown()


def attach_dirty(terminals: Terminals, name: str, then: str = "read -rsn1") -> tuple[pexpect.spawn, io.BytesIO]:
    """Attach to shell ``name`` and have it leave its terminal dirty; the terminal and all it has received."""
    term = terminals.attach(name, dimensions=(ROWS, COLS))
    received = io.BytesIO()
    term.logfile_read = received  # before the first read: every byte the terminal is shown
    term.expect(re.escape(PROMPT))
    term.send(f"{DIRTY}; {then}\r".encode())
    term.expect(re.escape(SHOWN))
    return term, received


def assert_fresh(shown: bytes) -> None:
    """A model of the person's terminal, fed ``shown``, is in a fresh terminal's state, and what is typed
    next shows as typed: plain letters in the default pen, a tab to the next 8th column."""
    screen = pyte.Screen(COLS, ROWS)
    stream = pyte.ByteStream(screen)
    stream.use_utf8 = False  # in UTF-8 mode pyte ignores the character sets and SO/SI
    stream.feed(shown)
    fresh = pyte.Screen(COLS, ROWS)
    assert screen.cursor.attrs == fresh.cursor.attrs, "the pen"
    assert screen.mode == fresh.mode, "modes: replace (IRM off), autowrap, cursor shown, no reverse video"
    assert sorted(screen.tabstops) == list(range(8, COLS, 8)), "tab stops"
    assert screen.charset == 0, "shift state: G0"
    assert screen.g0_charset == screen.g1_charset == pyte.charsets.LAT1_MAP, "character sets"
    stream.feed(b"\r\nq\tx")
    row = screen.buffer[screen.cursor.y]
    assert (row[0], row[8]) == (fresh.cursor.attrs._replace(data="q"), fresh.cursor.attrs._replace(data="x"))


@every_mode
def test_detach_leaves_a_fresh_terminal(terminals: Terminals) -> None:
    terminals.shell("d")
    term, received = attach_dirty(terminals, "d")
    term.send(DETACH)
    assert finish(term) == 0
    shown = received.getvalue()
    assert_fresh(shown)
    assert re.search(re.escape(restore_sequence(COLS)) + rb"\r+\n\[detached\]\r+\n\Z", shown), shown[-300:]


@handed_and_relayed
def test_exit_leaves_a_fresh_terminal(terminals: Terminals) -> None:
    terminals.shell("x", "--restart", "no")
    term, received = attach_dirty(terminals, "x", then="exit 3")
    assert finish(term) == 3
    shown = received.getvalue()
    assert_fresh(shown)
    assert re.search(re.escape(restore_sequence(COLS)) + rb"\r+\n\[exited: [^\]]*\]\r+\n\Z", shown), shown[-300:]


@handed_and_relayed
def test_a_restarted_child_starts_on_a_fresh_terminal(terminals: Terminals) -> None:
    """The child dies with the terminal dirty and the shellper restarts it: the new one starts on a fresh
    terminal, as the first did (the shellper writes it when it holds the terminal, attach when it relays)."""
    terminals.shell("r", "--restart", "always", "--backoff-initial", "0.1")
    term, received = attach_dirty(terminals, "r", then="exit 3")
    term.expect(re.escape("; restarting"))
    term.expect(re.escape(PROMPT))  # the new shell's
    shown = received.getvalue()
    note = shown.rindex(b"[exited: ")
    assert restore_sequence(COLS) in shown[max(0, note - 400):note], shown[max(0, note - 400):note]
    assert_fresh(shown[: shown.index(b"\n", note) + 1])  # up to the note's end: the note, dim, ends its pen
    term.send(DETACH)
    assert finish(term) == 0


@handed_and_relayed
def test_lost_connection_leaves_a_fresh_terminal(terminals: Terminals) -> None:
    info = terminals.run("k", *BASH)
    term, received = attach_dirty(terminals, "k")
    os.kill(info["pid"], signal.SIGKILL)  # the shellper: the connection ends without a word
    assert finish(term) == 1
    shown = received.getvalue()
    assert_fresh(shown)
    assert re.search(re.escape(restore_sequence(COLS)) + rb"\r+\n\[session closed\]\r+\n\Z", shown), shown[-300:]
    assert not wait_all_gone(terminals.started.pop("k"))  # its shell goes with the hung-up terminal
    terminals.cli("stop", "k")  # the files a killed shellper left, removed as a person would


@handed_and_relayed
def test_sighup_leaves_a_fresh_terminal(terminals: Terminals) -> None:
    """A SIGHUP while the terminal is still there (``kill -HUP``, the shell that ran attach killed)."""
    terminals.shell("h")
    term, received = attach_dirty(terminals, "h")
    os.kill(term.pid, signal.SIGHUP)
    assert finish(term) == 128 + signal.SIGHUP
    shown = received.getvalue()
    assert_fresh(shown)
    assert shown.endswith(restore_sequence(COLS)), shown[-300:]
