"""Reattach shows the screen the program shows run directly, cell by cell (issue 18).

Each case runs a program twice: directly in a terminal of its own (the reference) and in a session,
attached from a terminal (pexpect) of the same size. Both get the same keys, and each step waits for
the same screen content (tests/support/screens.py: an independent emulator, pyte, with a deadline). Then the
session is detached and reattached from a fresh terminal, of the same size or another (the reference
is resized then too), and the reattached terminal's screen must be the reference's, cell by cell.
A terminal that detached must be left with nothing switched on.

Every program waits for a line before it starts, so it starts while a terminal is attached: its own
questions to the terminal (vim asks several) are answered live, in both runs alike.

``raw`` is ``shellper attach --raw`` (the byte replay); ``rendered`` is the default attach (the screen
model's drawing, PROTOCOL.md 8.6).

Each run is reattached at every size in turn (the same, then bigger), each from a fresh terminal after a
detach, rather than started once per size: starting the program and feeding both emulators its output is
most of a case's time, and a reattach changes nothing the next one depends on but the size (both runs
are resized alike).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.paths import SHELLPER_CLI
from support.screens import Emulator, Terminal, screen_diff
from support.waiting import wait_gone

from shellper.core.defaults import MIN_RING_BYTES
from shellper.host import cgroup

REPO = Path(__file__).resolve().parents[1]
TERM = "xterm-256color"
GATE = "ready> "
DETACH = b"\x1c"
SIZES = {"same": (80, 24), "bigger": (100, 30)}

RAW = pytest.param("raw", id="raw")
RENDERED = pytest.param("rendered", id="rendered")


def _env() -> dict[str, str]:
    """The user's settings out (shellper's, vim's, less's), the run's cgroup parent kept (support.run): without it
    the sessions' cgroups went to the machine's default parent, which stayed after the run."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SHELLPER_", "VIM", "LESS")) or k == cgroup.PARENT_ENV}
    env.update(TERM=TERM, LANG="C.UTF-8", LC_ALL="C.UTF-8", PYTHONPATH=str(REPO), HOME=tempfile.gettempdir())
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    return env


def _gated(argv: list[str]) -> list[str]:
    """``argv`` started once a line is typed (after a prompt that says it waits)."""
    return ["sh", "-c", f'printf "{GATE}"; read _; exec "$@"', "sh", *argv]


def _python(code: str) -> list[str]:
    return _gated([sys.executable, "-c", code])


@dataclass
class Run:
    """One program run twice: ``direct`` (the reference) and in a session, seen through ``attached``."""

    dir: str
    name: str
    mode: str
    how: str
    env: dict[str, str]
    direct: Terminal
    attached: Terminal | None = None
    terminals: list[Terminal] = field(default_factory=list)
    pid: int = 0

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SHELLPER_CLI, "--dir", self.dir, *args], capture_output=True, text=True,
                              env=self.env, cwd=REPO, timeout=30, stdin=subprocess.DEVNULL)

    def attach(self, cols: int, rows: int) -> Terminal:
        opts = ["--raw"] if self.mode == "raw" else []
        if self.how == "relay":
            opts.append("--relay")
        term = Terminal.spawn([*SHELLPER_CLI, "--dir", self.dir, "attach", self.name, *opts], cols, rows,
                              self.env, str(REPO))
        self.terminals.append(term)
        self.attached = term
        return term

    def both(self) -> tuple[Terminal, Terminal]:
        assert self.attached is not None
        return self.direct, self.attached

    def send(self, keys: bytes | str) -> None:
        """The same keys to the program run directly and to the session."""
        for term in self.both():
            term.send(keys)

    def wait_text(self, text: str) -> None:
        for term in self.both():
            term.wait_text(text)

    def wait_top(self, text: str) -> None:
        for term in self.both():
            term.wait_for(lambda e: e.text().startswith(text), f"{text!r} on the first row")

    def start(self, cols: int = 80, rows: int = 24) -> None:
        """Attach, wait for both prompts, type the line that starts the program."""
        self.attach(cols, rows)
        self.wait_text(GATE.strip())
        self.send("\r")

    def detach(self) -> Terminal:
        term = self.attached
        assert term is not None
        term.send(DETACH)
        term.drain_until_end()
        self.attached = None
        return term

    def reattach(self, cols: int, rows: int) -> Terminal:
        """A fresh terminal of ``cols`` x ``rows``; the reference is resized to it too."""
        if (cols, rows) != (self.direct.emulator.screen.columns, self.direct.emulator.screen.lines):
            self.direct.resize(cols, rows)
        return self.attach(cols, rows)

    def same_screen(self, attributes: bool = True, cursor: bool = True, skip_last: int = 0,
                    timeout: float = 10.0) -> None:
        """The reattached screen is the reference's, cell by cell (waiting, with a deadline, for it to come).

        A reattach makes the program redraw (a SIGWINCH even at the same size: shellper.host.child.resize),
        which the reference does not: ``skip_last`` leaves out the message line such a redraw clears."""
        assert self.attached is not None
        self.attached.wait_same(self.direct.emulator.snapshot(), attributes, cursor, timeout, skip_last=skip_last)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    """The runs a test makes: their terminals closed, their sessions stopped and gone afterwards."""
    made: list[Run] = []
    try:
        yield made
    finally:
        left = []
        for run in made:
            for term in [run.direct, *run.terminals]:
                term.close()
            run.cli("stop", run.name, "--grace", "0.1")
            if run.pid and not wait_gone(run.pid):
                left.append(run.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run.pid, signal.SIGKILL)
            shutil.rmtree(run.dir, ignore_errors=True)
        assert not left, f"shellpers still running after stop: {left}"


def _run(runs: list[Run], argv: list[str], mode: str, how: str = "handoff", cols: int = 80, rows: int = 24,
         ring: int | None = None) -> Run:
    """``argv`` run directly and in a session (started, both at the prompt, the start line typed)."""
    env = _env()
    directory = tempfile.mkdtemp(prefix="shsc-", dir="/tmp")
    name = "s"
    opts = ["--term", TERM, "--cols", str(cols), "--rows", str(rows), "--grace", "0.1"]
    if ring is not None:
        opts += ["--ring-bytes", str(ring)]
    direct = Terminal.spawn(argv, cols, rows, env, str(REPO))
    run = Run(directory, name, mode, how, env, direct)
    runs.append(run)
    proc = run.cli("run", "--json", *opts, name, "--", *argv)
    assert proc.returncode == 0, proc.stderr
    run.pid = json.loads(proc.stdout.strip().splitlines()[-1])["pid"]
    run.start(cols, rows)
    return run


def _modes_left(term: Terminal) -> list[str]:
    return term.emulator.modes_left_on()


# ------------------------------------------------------------------------------------ the harness


def test_the_harness_sees_a_difference() -> None:
    """The comparison is not vacuous: a changed cell, attribute or cursor is reported, readably."""
    a, b = Emulator(20, 3), Emulator(20, 3)
    a.feed(b"hello\r\nworld")
    b.feed(b"hello\r\nwor1d")
    diff = screen_diff(a.snapshot(), b.snapshot())
    assert "row  1: expected 'world'" in diff and "got      'wor1d'" in diff
    c = Emulator(20, 3)
    c.feed(b"hello\r\n\x1b[1mworld")
    assert "attributes differ from column 0" in screen_diff(a.snapshot(), c.snapshot())
    assert screen_diff(a.snapshot(), c.snapshot(), attributes=False) == ""
    d = Emulator(20, 3)
    d.feed(b"hello\r\nworld\x1b[H")
    assert "cursor: expected (5, 1)" in screen_diff(a.snapshot(), d.snapshot())


def test_the_emulator_keeps_the_alternate_screen_and_the_modes_pyte_does_not() -> None:
    e = Emulator(20, 3)
    e.feed(b"main\x1b[?1049h\x1b[Halt")
    assert e.alt and e.text().startswith("alt")
    e.feed(b"\x1b[?1049l")
    assert e.text().startswith("main") and not e.alt
    answers = e.feed(b"\x1b[>4;2m\x1b[22;0t\x1b[?1000h\x1b[?1002h\x1b[?1002l\x1b[>1u\x1b=\x1b[6n")
    assert answers == b"\x1b[1;5R"
    assert e.modes_left_on() == ["?1000", "modifyOtherKeys=2", "1 titles pushed",
                                 "kitty keyboard stack [1] flags 0", "application keypad"]


# ------------------------------------------------------------------------------------ issue 18's cases

# Case 1: a row drawn once, then more than the replay window of later output below it. The session's ring is
# the smallest allowed (64 KiB), so ~280 KB of later output is four times what any byte replay could hold: the
# row can come back only from the screen model (and the test's pure-Python emulators need not read megabytes).
HEADER_ONCE = r"""
import sys
w = sys.stdout.write
w("\x1b[?1049h\x1b[H\x1b[2J\x1b[7mSTATUS HEADER drawn once\x1b[0m\x1b[2;24r")
for i in range(4000):
    w("\x1b[24;1Hline %06d %s\n" % (i, "y" * 50))
w("\x1b[24;1Hdone")
sys.stdout.flush()
sys.stdin.readline()
"""


@pytest.mark.parametrize("mode", [RENDERED])
def test_case1_a_row_drawn_once_before_more_than_the_replay_window(runs: list[Run], mode: str) -> None:
    run = _run(runs, _python(HEADER_ONCE), mode, ring=MIN_RING_BYTES)
    for term in run.both():
        term.wait_text("done", timeout=30)
    for size in SIZES.values():
        run.detach()
        run.reattach(*size)
        run.same_screen()


def test_a_relaying_terminal_is_drawn_the_screen_at_its_own_size(runs: list[Run]) -> None:
    """``attach --relay`` says its terminal's size in HELLO, so the session takes it before the screen is drawn:
    the terminal shows the session's screen at its own size (60x20 here, smaller than the session's 80x24, where
    a drawing made at the old size would wrap every row; the program never redraws)."""
    wide = ('import sys\nfor i in range(30): print("row %02d " % i + "z" * 68)\n'
            'print("done", end="", flush=True)\nsys.stdin.readline()')
    run = _run(runs, _python(wide), "rendered", "relay")
    for term in run.both():
        term.wait_text("done")
    run.detach()
    term = run.attach(60, 20)
    term.wait_text("done")
    shown = run.cli("screen", run.name, "--json")
    assert shown.returncode == 0, shown.stderr
    screen = json.loads(shown.stdout)
    assert (screen["cols"], screen["rows"]) == (60, 20)
    expected = [line.rstrip() for line in screen["lines"]]
    term.wait_for(lambda e: [row.rstrip() for row in e.snapshot().text()] == expected,
                  f"the session's screen at 60x20: {expected}")


# Case 2: shell text, then vim scrolled through a long file (more than the replay window), then quit.
# vim asks for no version (t_RV): its answer starts rounds of key queries (XTGETTCAP) that may still be
# going when it quits, and the shell after it would echo the late answers, in either run, at its own moment.
SHELL_THEN_VIM = r"""
for i in $(seq 1 8); do echo "shell line $i before vim"; done
seq -f 'file line %06g' 1 60000 > "$1"
vim --cmd 'set t_RV=' -u NONE -i NONE -N -n "$1"
echo "after vim"
read _
"""


@pytest.mark.parametrize("mode", [RENDERED])
def test_case2_shell_text_before_vim_with_many_scrolls(runs: list[Run], mode: str, tmp_path: Path) -> None:
    """The ring at its smallest, so that fewer pages push the shell's text out of it (and out of a raw replay):
    each page is redrawn through two pure-Python emulators, most of this test's CPU."""
    _need("vim")
    run = _run(runs, _gated(["sh", "-c", SHELL_THEN_VIM, "sh", str(tmp_path / "long.txt")]), mode,
               ring=MIN_RING_BYTES)
    run.wait_text("file line 000001")
    run.send("\x06" * 400)  # ^F: 400 pages
    run.send("G")
    for term in run.both():
        term.wait_text("file line 060000", timeout=60)
    run.send(":q!\r")
    run.wait_text("after vim")
    status = json.loads(run.cli("status", run.name, "--json").stdout)
    assert status["ring_start"] > MIN_RING_BYTES, status  # the shell's text before vim left the ring long ago
    for size in SIZES.values():
        run.detach()
        run.reattach(*size)
        run.same_screen()


# Case 3: main-screen text, then a program entering and leaving the alternate screen many times.
ALT_TOGGLES = r"""
import sys
w = sys.stdout.write
for i in range(6):
    w("main screen line %d\r\n" % i)
for i in range(3000):
    w("\x1b[?1049h\x1b[H\x1b[2Jframe %d\x1b[?1049l" % i)
w("back on the main screen\r\n")
sys.stdout.flush()
sys.stdin.readline()
"""


@pytest.mark.parametrize("mode", [RAW, RENDERED])
def test_case3_main_screen_text_before_many_alternate_screen_toggles(runs: list[Run], mode: str) -> None:
    run = _run(runs, _python(ALT_TOGGLES), mode)
    for term in run.both():  # 3,000 frames through each pure-Python emulator first: 10 s was short at load 20
        term.wait_text("back on the main screen", timeout=30)
    for size in SIZES.values():
        run.detach()
        run.reattach(*size)
        run.same_screen(timeout=30)  # the raw replay: 3,000 frames through the pure-Python emulator first


def _vim_file(tmp_path: Path, lines: int = 300) -> str:
    path = tmp_path / "text.txt"
    path.write_text("".join(f"text line {i:04d} {'abc ' * (i % 9)}\n" for i in range(1, lines + 1)))
    return str(path)


VIM = ["vim", "-u", "NONE", "-i", "NONE", "-N", "-n", "+set nomore", "+set laststatus=2"]


# Case 4: vim reattached from a bigger terminal; a stale scroll region from the replayed bytes would cut
# its scrolling short.
@pytest.mark.parametrize("mode", [RAW, RENDERED])
def test_case4_vim_reattached_to_another_size(runs: list[Run], mode: str, tmp_path: Path) -> None:
    _need("vim")
    run = _run(runs, _gated([*VIM, _vim_file(tmp_path)]), mode)
    run.wait_text("text line 0001")
    run.send("\x05" * 5)  # ^E: scrolls (vim sets a scroll region for it)
    run.wait_top("text line 0006")
    run.send("40G")
    run.wait_text("text line 0040")
    for i, size in enumerate(SIZES.values()):
        first, second = f"MARK{2 * i + 1}", f"MARK{2 * i + 2}"
        run.detach()
        run.reattach(*size)
        run.send(f":call setline('.', '{first} ' . getline('.'))\r")  # a mark a redraw keeps
        run.wait_text(f"{first} {'MARK2 MARK1 ' if i else ''}text line 0040")
        run.same_screen(skip_last=1)
        run.send("\x05" * 3 + "\x19")  # after the reattach: scroll down three lines and up one
        run.send(f":call setline('.', '{second} ' . getline('.'))\r")
        run.wait_text(f"{second} {first}")
        run.same_screen(skip_last=1)


# Case 5: queries in the replayed output must not be answered again (the answers would be typed input).
QUERIES = r"""
import os, re, select, sys, termios, time, tty
print("main text before the queries", flush=True)
old = termios.tcgetattr(0)
tty.setraw(0)
os.write(1, b"\x1b[6n\x1b[c\x1b[?2004$p\x1b]10;?\x07\x1b]11;?\x1b\\\x1b[>q\x1b[5n")
answer = re.compile(rb"\x1b\[\d+;\d+R|\x1b\[\?[\d;]*c|\x1b\[\?[\d;]*\$y|\x1b\]1[01];[^\x07\x1b]*(?:\x07|\x1b\\)"
                    rb"|\x1bP>\|[^\x1b]*\x1b\\|\x1b\[0n")
got, deadline = b"", time.monotonic() + 10
while len(answer.findall(got)) < 7 and time.monotonic() < deadline:
    if select.select([0], [], [], deadline - time.monotonic())[0]:
        got += os.read(0, 1024)
termios.tcsetattr(0, termios.TCSADRAIN, old)
print("\r\nanswers: %d" % len(answer.findall(got)), flush=True)
for line in sys.stdin:
    print("typed: %r" % line.rstrip("\n"), flush=True)
"""


@pytest.mark.parametrize("mode", [RAW, RENDERED])
@pytest.mark.parametrize("how", ["handoff", "relay"])
def test_case5_queries_in_the_replay_are_not_answered_again(runs: list[Run], mode: str, how: str) -> None:
    run = _run(runs, _python(QUERIES), mode, how)
    run.wait_text("answers: 7")
    for size in SIZES:
        run.detach()
        term = run.reattach(*SIZES[size])
        run.same_screen()
        run.send(f"ping {size}\r")
        run.wait_text(f"typed: 'ping {size}'")
        run.same_screen()
        assert term.emulator.queries == [], f"the terminal reattached at the {size} size was asked again"


# Case 6: a detach leaves the outer terminal with nothing switched on and every pushed title popped.
EVERYTHING_ON = {
    "1000": b"\x1b[?1000h", "1002": b"\x1b[?1002h", "1003": b"\x1b[?1003h", "1006": b"\x1b[?1006h",
    "all": (b"\x1b[22;0t\x1b[22;2t\x1b[22;1t\x1b]2;title\x07\x1b[?1049h\x1b[>4;2m\x1b[?1000h\x1b[?1002h"
            b"\x1b[?1003h\x1b[?1006h\x1b[?1015h\x1b[?2004h\x1b[?1004h\x1b[?1h\x1b=\x1b[?25l\x1b[>1u\x1b[2 q"
            b"\x1b[?2026h\x1b[?2026l\x1b[3;20r"),
}


# Each mouse mode alone through the hand-off, one after another in one run (each switched off by the program
# before the next: the replay then holds the earlier ones' switching too); everything at once both ways.
MICE = [m for m in EVERYTHING_ON if m != "all"]
SWITCHED_HOW = [("mice", "handoff"), ("all", "handoff"), ("all", "relay")]
SWITCH_ON_IN_TURN = r"""
import os, sys
for name, on in %r:
    os.write(1, on + b"switched on " + name.encode() + b"\r\n")
    sys.stdin.readline()
    os.write(1, on.replace(b"h", b"l"))
"""


@pytest.mark.parametrize("mode", [RAW, RENDERED])
@pytest.mark.parametrize(("switched", "how"), SWITCHED_HOW)
def test_case6_detach_switches_off_what_the_session_switched_on(runs: list[Run], mode: str, how: str,
                                                                 switched: str) -> None:
    each = MICE if switched == "mice" else [switched]
    code = SWITCH_ON_IN_TURN % [(name, EVERYTHING_ON[name]) for name in each]
    run = _run(runs, _python(code), mode, how)
    for i, name in enumerate(each):
        run.wait_text(f"switched on {name}")
        assert _modes_left(run.direct)  # the program did switch something on
        first = run.detach()
        assert _modes_left(first) == [], name
        again = run.reattach(80, 24)
        again.wait_text(f"switched on {name}")
        assert _modes_left(again) == _modes_left(run.direct), name
        run.detach()
        assert _modes_left(again) == [], name
        if i + 1 < len(each):  # on to the next: the program switches this one off and the next on
            run.reattach(80, 24)
            run.send("\r")


@pytest.mark.parametrize("mode", [RAW, RENDERED])
@pytest.mark.parametrize("how", ["handoff", "relay"])
def test_case6_detach_from_vim_leaves_nothing_on(runs: list[Run], mode: str, how: str, tmp_path: Path) -> None:
    _need("vim")
    run = _run(runs, _gated([*VIM, "+set mouse=a", "+set title", _vim_file(tmp_path)]), mode, how)
    run.wait_text("text line 0001")
    assert _modes_left(run.direct)
    first = run.detach()
    assert _modes_left(first) == [], first.emulator.queries
    again = run.reattach(80, 24)
    again.wait_text("text line 0001")
    run.detach()
    assert _modes_left(again) == []


# ------------------------------------------------------------------------------------ more programs


def _need(program: str) -> None:
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed (make test installs it where it may: apt-get as root)")


@pytest.mark.parametrize("mode", [RAW, RENDERED])
def test_less_reattached(runs: list[Run], mode: str, tmp_path: Path) -> None:
    _need("less")
    run = _run(runs, _gated(["less", _vim_file(tmp_path)]), mode)
    run.wait_text("text line 0001")
    run.send("  ")
    run.wait_text("text line 0060")
    run.send("/line 0100\r")
    run.wait_text("text line 0110")
    for size in SIZES:
        run.detach()
        run.reattach(*SIZES[size])
        if size == "bigger":  # less redraws for the new size (and may drop keys typed meanwhile): wait for it
            run.wait_text("text line 0128")
        run.same_screen(skip_last=1)


CURSES_TUI = r"""
import curses

def main(scr):
    curses.curs_set(0)
    items = ["item %03d" % i for i in range(200)]
    top = sel = 0
    while True:
        rows, cols = scr.getmaxyx()
        scr.erase()
        scr.addstr(0, 0, "A small TUI: j/k move, q quits"[:cols - 1], curses.A_REVERSE)
        for y in range(1, rows - 1):
            i = top + y - 1
            if i < len(items):
                scr.addstr(y, 2, items[i], curses.A_BOLD if i == sel else curses.A_NORMAL)
        scr.addstr(rows - 1, 0, ("selected %d of %d, %dx%d" % (sel, len(items), cols, rows))[:cols - 1])
        scr.refresh()
        key = scr.getch()
        if key == ord("q"):
            return
        if key == ord("j"):
            sel = min(sel + 1, len(items) - 1)
        elif key == ord("k"):
            sel = max(sel - 1, 0)
        top = min(max(top, sel - (rows - 3)), sel)

curses.wrapper(main)
"""


@pytest.mark.parametrize("mode", [RAW, RENDERED])
def test_python_curses_tui_reattached(runs: list[Run], mode: str) -> None:
    run = _run(runs, _python(CURSES_TUI), mode)
    run.wait_text("selected 0 of 200")
    run.send("j" * 40)
    run.wait_text("selected 40 of 200")
    for i, size in enumerate(SIZES):
        run.detach()
        cols, rows = SIZES[size]
        run.reattach(cols, rows)
        run.send("k")
        run.wait_text(f"selected {39 - i} of 200, {cols}x{rows}")
        # The raw replay draws the 80-column output into the wider terminal: its erases paint curses' colours
        # up to column 100, where the reference's resize added default cells. Characters only, then.
        run.same_screen(attributes=mode == "rendered" or size == "same")


@pytest.mark.parametrize("mode", [RAW, RENDERED])
def test_htop_reattached_shows_what_a_terminal_attached_all_along_shows(runs: list[Run], mode: str) -> None:
    """htop's screen depends on the machine and the moment (and it redraws with new figures when reattached),
    so the reference is a viewer attached all along: once both have had the output, the screens are one."""
    _need("htop")
    run = _run(runs, _gated(["htop", "-d", "600", "-p", "1"]), mode)
    for term in run.both():
        term.wait_text("PID")
    viewer = Terminal.spawn([*SHELLPER_CLI, "--dir", run.dir, "attach", run.name, "-r"], 80, 24, run.env, str(REPO))
    run.terminals.append(viewer)
    viewer.wait_text("PID")
    run.detach()
    again = run.reattach(80, 24)
    deadline = time.monotonic() + 10
    while diff := screen_diff(viewer.emulator.snapshot(), again.emulator.snapshot()):
        if time.monotonic() > deadline:
            pytest.fail(f"the reattached screen is not the viewer's:\n{diff}")
        again.pump(0.05)
        viewer.pump(0.05)
    run.detach()
    assert _modes_left(again) == []
