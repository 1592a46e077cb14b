"""The rendered replay, ``shellper screen`` and ``tail --plain``, driven as a person would: a real session, a
real terminal (pexpect's PTY), and what that terminal received rendered by pyte, an emulator independent of
the shellper's own screen model, and compared cell by cell with the program's output rendered directly."""

from __future__ import annotations

import io
import json
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pyte
import pytest
from support.frames import wait_output
from support.terminals import DETACH, PROMPT, Terminals, cli_env, finish

# Draws a status row once, scrolls far more than the ring keeps below it, then waits: the header is
# only on the screen, no longer in any byte window.
HEADER_PROGRAM = r"""
import sys
w = sys.stdout.write
w("\x1b[H\x1b[2J\x1b[7mSTATUS drawn once\x1b[0m\x1b[2;24r\x1b[24;1H")
for i in range(4000):
    w("\r\nline %05d %s" % (i, "y" * 50))
w("\r\nREADY")
sys.stdout.flush()
sys.stdin.readline()
"""

# Asks the terminal where its cursor is, then waits: a terminal that received the query would answer it
# into the program's input.
QUERY_PROGRAM = r"""
import sys
sys.stdout.write("before the query\r\n\x1b[6nafter the query\r\n")
sys.stdout.flush()
line = sys.stdin.readline()
sys.stdout.write("GOT %r\r\n" % line)
sys.stdout.flush()
sys.stdin.readline()
"""


def header_program_screen() -> list[str]:
    """What the header program leaves on a terminal of 80x24, rendered by pyte from its own bytes."""
    out = ["\x1b[H\x1b[2J\x1b[7mSTATUS drawn once\x1b[0m\x1b[2;24r\x1b[24;1H"]
    out += [f"\r\nline {i:05d} {'y' * 50}" for i in range(4000)]
    out.append("\r\nREADY")
    return render("".join(out).encode())


def render(data: bytes, cols: int = 80, rows: int = 24) -> list[str]:
    """``data`` drawn by pyte. It does not know the kitty keyboard's and modifyOtherKeys' sequences (in the
    resets) and would print them: they are taken out first, as a terminal that knows them shows nothing."""
    screen = pyte.Screen(cols, rows)
    pyte.ByteStream(screen).feed(re.sub(rb"\x1b\[[<=>][0-9;]*[a-z]", b"", data))
    return [line.rstrip() for line in screen.display]


@pytest.fixture(params=["handoff", "relay"])
def terminals(request: pytest.FixtureRequest) -> Iterator[Terminals]:
    s = Terminals(tempfile.mkdtemp(prefix="shsr-", dir="/tmp"), cli_env())
    s.attach_opts = ("--relay",) if request.param == "relay" else ()
    try:
        yield s
    finally:
        s.teardown()


def attach_and_capture(terminals: Terminals, name: str, until: bytes, *opts: str) -> tuple[pexpect.spawn, bytes]:
    """Attach; every byte the terminal received once the drawing ends with ``until``."""
    term = terminals.attach(name, *opts)
    received = io.BytesIO()
    term.logfile_read = received
    term.expect(re.escape(until))
    return term, received.getvalue()


def detach(term: pexpect.spawn) -> None:
    term.send(DETACH)
    term.expect(re.escape(b"[detached]"))
    assert finish(term) == 0


def test_header_drawn_once_comes_back_cell_by_cell(terminals: Terminals) -> None:
    terminals.run("hdr", sys.executable, "-c", HEADER_PROGRAM, opts=("--ring-bytes", "64K"))
    watch = terminals.follow("hdr")
    watch.expect("READY")
    for _ in range(2):  # attach, detach, attach again: the same screen both times
        term, received = attach_and_capture(terminals, "hdr", b"\x1b[?25h")
        assert render(received) == header_program_screen()
        detach(term)


@pytest.mark.parametrize("replay", ["rendered", "raw"])
def test_a_terminal_that_fell_behind_is_drawn_the_screen_after_the_gap(terminals: Terminals, replay: str) -> None:
    """A terminal too slow for a flood loses output (a GAP); after it, the screen of the moment is drawn from
    the model, so the header drawn once before the flood is there again (a byte catch-up from the gap's end
    could not show it). Handed over, the shellper draws it; relayed, the GAP carries the drawing. ``--raw``
    gets the modes at the gap's end instead, with its cursor kept: the header it was shown stays."""
    program = "import sys\nsys.stdin.readline()\n" + HEADER_PROGRAM.replace("range(4000)", "range(30_000)")
    terminals.run("gap", sys.executable, "-c", program, opts=("--ring-bytes", "64K"))
    received = io.BytesIO()
    term = terminals.attach("gap", *(("--raw",) if replay == "raw" else ()))
    term.logfile_read = received
    term.maxread = 65536
    term.expect(re.escape(b"\x1b[?25h") if replay == "rendered" else b"")  # attached
    term.send(b"\r")  # start the flood, then read nothing until it is all in the ring
    wait_output(Path(terminals.dir) / "gap.sock", b"READY", 60, nbytes=256)  # the flood's end (support.frames)
    term.expect(rb"\[shellper: \d+ bytes skipped\]")
    term.expect(b"READY")  # the last row (the reset before a drawing shows the cursor too)
    expected = [line.rstrip() for line in json.loads(terminals.cli("screen", "gap", "--json").stdout)["lines"]]
    assert expected[0] == "STATUS drawn once" and expected[-1] == "READY"
    shown = received.getvalue()
    if replay == "rendered":
        term.expect(re.escape(b"\x1b[?25h"))  # the drawing's last sequence
        shown = received.getvalue()
        assert render(shown[shown.rindex(b"bytes skipped]"):]) == expected
    else:  # the bytes, with a gap in them: the header and the last row are what they must be
        rows = render(shown)
        assert (rows[0], rows[-1]) == (expected[0], expected[-1]), rows
    detach(term)


def test_main_screen_text_comes_back_after_vim_quits(terminals: Terminals) -> None:
    terminals.shell("vi")
    term = terminals.attach("vi")
    term.expect(re.escape(PROMPT))
    term.send(b"for i in 1 2 3; do echo shell-line-$((i*11)); done\r")
    term.expect("shell-line-33")
    term.send(b"seq 1 3000 > /tmp/shsr-vim-$$.txt; vim -u NONE -N -n /tmp/shsr-vim-$$.txt\r")
    term.expect(b"3000L")  # vim's status line: the file is shown
    for _ in range(40):
        term.send(b"\x06")  # Ctrl-F: a page down, many scrolls
    term.send(b"G")
    term.expect(b"3000")
    term.send(b":q!\r")
    term.expect(re.escape(b"\x1b[?1049l"))
    term.expect(re.escape(PROMPT))
    term.send(b"rm -f /tmp/shsr-vim-$$.txt; echo done-$((6*7))\r")
    term.expect("done-42")
    detach(term)
    term, received = attach_and_capture(terminals, "vi", b"\x1b[?25h")
    shown = render(received)
    text = "\n".join(shown)
    assert [line for line in shown if line.startswith("shell-line-")] == ["shell-line-11", "shell-line-22",
                                                                         "shell-line-33"], text
    assert "done-42" in text and shown.index("done-42") > shown.index("shell-line-33"), text
    detach(term)


def test_a_query_in_the_output_is_not_sent_again(terminals: Terminals) -> None:
    terminals.run("q", sys.executable, "-c", QUERY_PROGRAM)
    watch = terminals.follow("q")
    watch.expect("after the query")
    term, received = attach_and_capture(terminals, "q", b"\x1b[?25h")
    assert b"\x1b[6n" not in received
    assert render(received)[:2] == ["before the query", "after the query"]
    term.send(b"typed\r")
    term.expect(re.escape(b"GOT 'typed\\n'"))  # the program read what was typed, and nothing before it
    detach(term)


def test_raw_replays_the_bytes(terminals: Terminals) -> None:
    terminals.run("raw", sys.executable, "-c", HEADER_PROGRAM, opts=("--ring-bytes", "64K"))
    watch = terminals.follow("raw")
    watch.expect("READY")
    term, received = attach_and_capture(terminals, "raw", b"READY", "--raw")
    assert b"line 03999" in received and b"STATUS drawn once" not in received  # the header was never replayed
    detach(term)


def test_screen_and_tail_plain_show_what_a_person_sees(terminals: Terminals) -> None:
    program = ("import sys\nfor i in range(40): sys.stdout.write('row %d\\r\\n' % i)\n"
               "sys.stdout.write('\\x1b[1;31mred\\x1b[0m \\x1b]2;the title\\x07\\x1b[6nplain')\n"
               "sys.stdout.flush()\nsys.stdin.readline()\n")
    terminals.run("scr", sys.executable, "-c", program)
    watch = terminals.follow("scr")
    watch.expect("plain")
    lines = terminals.cli("screen", "scr").stdout.split("\n")
    assert lines[:23] == [f"row {i}" for i in range(17, 40)] and lines[23] == "red plain"
    ansi = terminals.cli("screen", "scr", "--ansi").stdout
    assert "\x1b[0;1;31mred\x1b[0m plain" in ansi
    info = json.loads(terminals.cli("screen", "scr", "--json", "--scrollback", "2").stdout)
    assert info["scrollback"] == ["row 15", "row 16"] and info["title"] == "the title"
    assert (info["cursor_x"], info["cursor_y"], info["cols"], info["rows"]) == (9, 23, 80, 24)
    assert not info["alternate"] and info["offset"] > 0
    tail = terminals.cli("tail", "scr", "--plain").stdout
    assert tail == "".join(f"row {i}\n" for i in range(40)) + "red plain\n"
    assert terminals.cli("tail", "scr", "--plain", "-n", "2").stdout == "row 39\nred plain\n"


def test_a_bigger_terminal_gets_the_screen_drawn_at_its_size(terminals: Terminals) -> None:
    program = ("import sys\nsys.stdout.write('\\x1b[2;10r' + ''.join('row %d\\r\\n' % i for i in range(30)) + 'end')\n"
               "sys.stdout.flush()\nsys.stdin.readline()\n")
    terminals.run("big", sys.executable, "-c", program)
    watch = terminals.follow("big")
    watch.expect("end")
    term = terminals.attach("big", dimensions=(30, 100))
    received = io.BytesIO()
    term.logfile_read = received
    term.expect(re.escape(b"\x1b[?25h"))
    info = json.loads(terminals.cli("screen", "big", "--json").stdout)
    # handed over, or relayed (the size is in HELLO): the session takes the terminal's size before the drawing
    assert (info["cols"], info["rows"]) == (100, 30)
    shown = render(received.getvalue(), 100, 30)
    assert shown == info["lines"]
    assert "end" in shown
    detach(term)
