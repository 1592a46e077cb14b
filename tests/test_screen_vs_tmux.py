"""The screen model's rendered replay against tmux, the reference: the program's bytes written raw into one
tmux pane, the model's render of them into another, then the same continuation into both (the next
character, a tab, text in the pen left set); the two panes' cells (``capture-pane -e``) and cursors must be
the same. What tmux cannot show (reverse video, OSC 8 hyperlinks) is checked as tables of this model."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.terminals import DETACH, Terminals, cli_env, finish

from shellper.core.terminal import pen as pens
from shellper.core.terminal.screen import Screen

COLS, ROWS = 20, 5

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is the reference")


class Tmux:
    """A tmux server of its own (its socket in a temporary directory) whose panes are written bytes raw."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.count = tmp, 0
        self.base = ["tmux", "-S", str(tmp / "sock"), "-f", "/dev/null"]
        # A session that stays: the server would exit with its last session, racing the next new-session.
        self.run("new-session", "-d", "-s", "keep", "sleep 600")

    def run(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], check=True, capture_output=True, text=True, timeout=60).stdout

    def show(self, data: bytes, cols: int = COLS, rows: int = ROWS) -> tuple[str, str]:
        """``data`` written raw into a new pane of ``cols`` x ``rows``: its cells with SGR, and its cursor."""
        self.count += 1
        name = f"c{self.count}"
        path = self.tmp / name
        path.write_bytes(data)
        signal = " ".join([*self.base, "wait-for", "-S", name])
        self.run("new-session", "-d", "-s", name, "-x", str(cols), "-y", str(rows),
                 f"stty raw -echo; cat {path}; {signal}; sleep 600")
        self.run("wait-for", name)  # the pane has all of it: no polling, no sleep
        cells = self.run("capture-pane", "-e", "-p", "-t", name)
        cursor = self.run("display", "-p", "-t", name, "#{cursor_x},#{cursor_y}")
        self.run("kill-session", "-t", name)
        return cells, cursor


@pytest.fixture(scope="module")
def tmux() -> Iterator[Tmux]:
    with tempfile.TemporaryDirectory(prefix="screen-tmux-") as tmp:
        server = Tmux(Path(tmp))
        try:
            yield server
        finally:
            subprocess.run([*server.base, "kill-server"], check=False, capture_output=True, timeout=60)


CASES = [
    # (what, the program's output, what follows it)
    ("a row filled to the last column: the next character starts the next row", b"x" * 20, b"Y"),
    ("the same at the bottom row: the next character scrolls", b"\r\n" * 6 + b"y" * 20, b"Z"),
    ("in a pen, with the pen left set", b"\x1b[7m" + b"w" * 20, b"Q"),
    ("a wide character in the last two columns", "日本".encode() + b"x" * 16 + "語".encode(), b"Q"),
    ("in origin mode, in a scroll region", b"\x1b[2;4r\x1b[?6h\x1b[3;1H" + b"o" * 20, b"Q"),
    ("tab stops cleared, and two set", b"\x1b[3g\x1b[1;4H\x1bH\x1b[1;11H\x1bH\r", b"a\tb\tc"),
    ("one tab stop cleared", b"\x1b[1;9H\x1b[g\r", b"a\tb\tc"),
    ("underline styles, double underline, colon true colour (the issue's repro)",
     b"\x1b[4:3mcurly\x1b[0m \x1b[21mdouble\x1b[0m \x1b[38:2::10:20:30mrgb\x1b[0m \x1b[4:1msingle\x1b[0m\r\n", b"x"),
    ("the pen left set: bold, 256 colours", b"\x1b[1;38;5;196;48;5;22m", b"pen"),
    ("the pen left set: colon forms, underline colour", b"\x1b[38:2::10:20:30;4:3;58:5:9m", b"pen"),
    ("the pen left set: semicolon true colour, 21, underline colour", b"\x1b[38;2;10;20;30;21;58;2;1;2;3m", b"pen"),
    ("the pen left set: 38:5, dim, italic, strike, overline", b"\x1b[38:5:33;2;3;9;53m", b"pen"),
]


@pytest.mark.parametrize(("what", "output", "after"), CASES, ids=[c[0] for c in CASES])
def test_the_rendered_screen_continues_as_the_program_s_own_output_does(tmux: Tmux, what: str, output: bytes,
                                                                        after: bytes) -> None:
    screen = Screen(COLS, ROWS, 0)
    screen.feed(output)
    assert tmux.show(screen.render() + after) == tmux.show(output + after)


# What the issue tried against tmux: the pen repro, a row filled to the last column, tab stops changed, and
# the pen left set; then it waits.
PROGRAM_OUTPUT = (b"\x1b[4:3mcurly\x1b[0m \x1b[21mdouble\x1b[0m \x1b[38:2::10:20:30mrgb\x1b[0m "
                  b"\x1b[4:1msingle\x1b[0m\r\n\x1b[3g\x1b[1;5H\x1bH\x1b[1;13H\x1bH\x1b[3;1H" + b"f" * 80
                  + b"\x1b[1;38:5:196;58:2::1:2:3;4:3m")
PROGRAM = f"import sys\nsys.stdout.buffer.write({PROGRAM_OUTPUT!r})\nsys.stdout.flush()\nsys.stdin.readline()\n"


@pytest.fixture(params=["handoff", "relay"])
def terminals(request: pytest.FixtureRequest) -> Iterator[Terminals]:
    s = Terminals(tempfile.mkdtemp(prefix="shst-", dir="/tmp"), cli_env())
    s.attach_opts = ("--relay",) if request.param == "relay" else ()
    try:
        yield s
    finally:
        s.teardown()


def test_a_reattaching_terminal_is_drawn_what_tmux_shows(tmux: Tmux, terminals: Terminals) -> None:
    """The rendered replay a real attach draws (the shellper writing to the terminal it was handed, or
    ``attach --relay`` relaying it), written into a tmux pane and continued, against the program's bytes."""
    terminals.run("pen", sys.executable, "-c", PROGRAM)
    watch = terminals.follow("pen")
    watch.expect("f" * 80)
    term = terminals.attach("pen")
    term.expect(re.escape(b"\x1b[?25h"))  # the drawing's last sequence
    drawn = term.before + term.after
    term.send(DETACH)
    term.expect(re.escape(b"[detached]"))
    assert finish(term) == 0
    after = b"X\tY\tZ"
    assert tmux.show(drawn + after, 80, 24) == tmux.show(PROGRAM_OUTPUT + after, 80, 24)


def fed(data: bytes) -> Screen:
    screen = Screen(COLS, ROWS, 0)
    screen.feed(data)
    return screen


def test_the_issue_s_pen_repro_reads_as_written() -> None:
    """``shellper screen --ansi`` prints these rows: 4:3 was italic and underline, 21 dropped, 38:2::10:20:30
    black, 4:1 bold and underline."""
    screen = Screen(40, 2, 0)
    screen.feed(PROGRAM_OUTPUT.split(b"\r\n")[0])
    assert screen.ansi_lines()[0] == ("\x1b[0;4:3mcurly\x1b[0m \x1b[0;4:2mdouble\x1b[0m "
                                      "\x1b[0;38;2;10;20;30mrgb\x1b[0m \x1b[0;4msingle\x1b[0m")


def test_reverse_video_is_kept_and_rendered() -> None:
    screen = fed(b"\x1b[?5h")
    assert screen.reverse_video and screen.render().endswith(b"\x1b[?25h")
    assert b"\x1b[?5h" in screen.render() and fed(b"\x1b[?5l" + screen.render()).reverse_video
    assert b"\x1b[?5h" not in fed(b"\x1b[?5h\x1b[?5l").render() and not fed(b"\x1b[?5h\x1bc").reverse_video


def test_hyperlinks_are_kept_per_cell_and_rendered() -> None:
    screen = fed(b"a \x1b]8;id=1;https://example.com/\x1b\\link\x1b]8;;\x1b\\ b \x1b]8;;http://x/\x07\x1b[1mopen")
    link = "\x1b]8;id=1;https://example.com/\x1b\\"
    assert screen.ansi_lines()[0] == ("a " + link + "link\x1b]8;;\x1b\\ b \x1b]8;;http://x/\x1b\\\x1b[0;1mopen"
                                      "\x1b]8;;\x1b\\\x1b[0m")
    assert screen.lines()[0] == "a link b open"
    again = fed(screen.render())
    assert again.ansi_lines() == screen.ansi_lines()
    assert again.cursor.attr == screen.cursor.attr and again.cursor.attr.link == ";http://x/"


PENS = [
    # (SGR parameters, the pen's SGR from any state)
    ("4:3", "\x1b[0;4:3m"),
    ("21", "\x1b[0;4:2m"),
    ("4:1", "\x1b[0;4m"),
    ("4:3;4:0", "\x1b[0m"),
    ("38:2::10:20:30", "\x1b[0;38;2;10;20;30m"),
    ("38:2:10:20:30", "\x1b[0;38;2;10;20;30m"),
    ("38:5:9;48;5;200", "\x1b[0;38;5;9;48;5;200m"),
    ("1;31;42;97", "\x1b[0;1;97;42m"),
    ("58;2;1;2;3;4", "\x1b[0;4;58:2::1:2:3m"),
    ("58:5:9;59", "\x1b[0m"),
    ("1;2;22", "\x1b[0m"),
    ("38;5;300;1", "\x1b[0m"),  # a colour out of range: it and what follows are not read, as xterm
    ("38;2;1;2", "\x1b[0m"),
]


@pytest.mark.parametrize(("params", "expected"), PENS)
def test_sgr_parameters_make_a_pen(params: str, expected: str) -> None:
    pen = pens.apply(pens.DEFAULT, params)
    assert pens.sgr(pen) == expected
    assert pens.apply(pens.DEFAULT, pens.sgr(pen)[2:-1]) == pen


@pytest.mark.parametrize("old", [p for p, _ in PENS] + ["1;2;3;4;5;7;8;9;53;31;42;58:5:1"])
@pytest.mark.parametrize("new", [p for p, _ in PENS] + ["2;4:5;38:5:1"])
def test_the_change_from_one_pen_to_another_makes_the_other(old: str, new: str) -> None:
    a, b = pens.apply(pens.DEFAULT, old), pens.apply(pens.DEFAULT, new)
    change = pens.change(a, b)
    assert pens.apply(a, change[2:-1]) == b if change else a == b
    assert len(change) <= len(pens.sgr(b))

