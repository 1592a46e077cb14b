"""Screens compared cell by cell: a program run directly against the same program reattached in a session.

An independent terminal emulator (pyte, a test dependency) renders what a terminal received. pyte has
no alternate screen and mishandles sequences with a ``>``, ``<`` or ``=`` prefix, so :class:`Emulator`
puts a small front in front of it: it keeps the alternate screen, records the modes a terminal keeps
that pyte does not (every DEC private mode on its own, modifyOtherKeys, the title and kitty keyboard
stacks, the keypad) and answers queries as a terminal does, into the program's input. None of it
uses shellper's own mode tracking (shellper.core.terminal.modes), which it checks.

:class:`Terminal` is a pexpect terminal with an emulator on its output: it answers queries as a real
terminal would, and waits for screen content with a deadline (never a sleep).
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pexpect
import pyte
import pytest

__all__ = ["DEFAULT_PRIVATE_MODES", "Cell", "Emulator", "Snapshot", "Terminal", "screen_diff"]

_TOKEN = re.compile(
    r"\x1b\[([<=>?]?)([0-9;:]*)([ -/]*)([@-~])"  # CSI: prefix, parameters, intermediates, final
    r"|\x1b\]([^\x07\x1b]*)(?:\x07|\x1b\\)"  # OSC
    r"|\x1b([P_^X])([^\x1b]*)\x1b\\"  # DCS, APC, PM, SOS
    r"|\x1b(?![\[\]P_^X])([ -/]*[0-~])"  # any other escape (an unfinished CSI, OSC, ... waits for more)
    r"|\x05"  # ENQ
)
_UNFINISHED = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[P_^X][^\x1b]*\x1b?|[ -/]*)?\Z")
_ALT_MODES = (47, 1047, 1049)
DEFAULT_PRIVATE_MODES = frozenset({7, 25})
"""DEC private modes on in a fresh terminal: autowrap, the cursor shown."""


@dataclass(frozen=True)
class Cell:
    char: str
    fg: str
    bg: str
    bold: bool
    reverse: bool
    underscore: bool


@dataclass
class Snapshot:
    """A screen: its rows of cells and the cursor."""

    cols: int
    rows: int
    cells: list[list[Cell]]
    cursor: tuple[int, int]
    cursor_hidden: bool

    def text(self) -> list[str]:
        return ["".join(c.char for c in row).rstrip() for row in self.cells]


def _look(cell: Cell) -> Cell:
    """What a cell shows: a blank's foreground colour and boldness show nothing (unless reversed, when the
    foreground is its background). htop draws its meters' empty part as blanks in a colour, which a drawing
    of the same screen may leave out."""
    if cell.char == " " and not cell.reverse:
        return Cell(" ", "default", cell.bg, False, False, cell.underscore)
    return cell


def screen_diff(expected: Snapshot, actual: Snapshot, attributes: bool = True, cursor: bool = True,
                skip_last: int = 0) -> str:
    """Empty if the screens are the same; else a readable account of every row that differs.

    ``skip_last``: bottom rows left out (a message line a redraw may clear: vim's, less's prompt)."""
    out: list[str] = []
    if (expected.cols, expected.rows) != (actual.cols, actual.rows):
        return f"sizes differ: expected {expected.cols}x{expected.rows}, got {actual.cols}x{actual.rows}"
    for y, (want, got) in enumerate(zip(expected.cells[:expected.rows - skip_last], actual.cells, strict=False)):
        chars_differ = [c.char for c in want] != [c.char for c in got]
        attrs_differ = attributes and [_look(c) for c in want] != [_look(c) for c in got]
        if chars_differ or attrs_differ:
            exp_text, got_text = "".join(c.char for c in want).rstrip(), "".join(c.char for c in got).rstrip()
            out.append(f"row {y:2}: expected {exp_text!r}\n        got      {got_text!r}")
            if not chars_differ:
                x = next(i for i, (a, b) in enumerate(zip(want, got, strict=True)) if _look(a) != _look(b))
                out.append(f"        attributes differ from column {x}: expected {want[x]}, got {got[x]}")
    if cursor and (expected.cursor, expected.cursor_hidden) != (actual.cursor, actual.cursor_hidden):
        out.append(f"cursor: expected {expected.cursor} hidden={expected.cursor_hidden}, "
                   f"got {actual.cursor} hidden={actual.cursor_hidden}")
    if not out:
        return ""
    return "\n".join(out) + "\n--- expected screen:\n" + "\n".join(expected.text()) + \
        "\n--- actual screen:\n" + "\n".join(actual.text())


class _Screen(pyte.Screen):  # type: ignore[misc]
    """pyte's screen with xterm's erases and scrolls: every cell erased or scrolled in becomes a blank in
    the current background colour (back-colour erase, which curses relies on), nothing else of the
    attributes. pyte erases only the cells of a row written before (its rows are sparse) and copies every
    attribute into them."""

    def _blank(self) -> pyte.screens.Char:
        return self.default_char._replace(bg=self.cursor.attrs.bg)

    def _blank_rows(self, rows: range) -> None:
        for y in rows:
            self.buffer.pop(y, None)
            if self.cursor.attrs.bg != self.default_char.bg:
                line = self.buffer[y]
                for x in range(self.columns):
                    line[x] = self._blank()

    def _move_rows(self, first: int, last: int, by: int) -> None:
        """Rows ``first``..``last`` (within the margins) shifted by ``by`` (up if negative); the rows left
        behind blank. pyte's own insert and delete keep a row's old text when its source row was never
        written, and scroll in rows of the default colour."""
        rows = range(first, last + 1)
        old = {y: self.buffer.pop(y) for y in rows if y in self.buffer}
        self.dirty.update(range(self.lines))
        for y, line in old.items():
            if y + by in rows:
                self.buffer[y + by] = line
        self._blank_rows(range(first, first + by) if by > 0 else range(last + by + 1, last + 1))

    def index(self) -> None:
        top, bottom = self.margins or (0, self.lines - 1)
        if self.cursor.y == bottom:
            self._move_rows(top, bottom, -1)
        else:
            self.cursor_down()

    def reverse_index(self) -> None:
        top, bottom = self.margins or (0, self.lines - 1)
        if self.cursor.y == top:
            self._move_rows(top, bottom, 1)
        else:
            self.cursor_up()

    def insert_lines(self, count: int | None = None) -> None:
        top, bottom = self.margins or (0, self.lines - 1)
        if top <= self.cursor.y <= bottom:
            self._move_rows(self.cursor.y, bottom, min(count or 1, bottom - self.cursor.y + 1))
            self.carriage_return()

    def delete_lines(self, count: int | None = None) -> None:
        top, bottom = self.margins or (0, self.lines - 1)
        if top <= self.cursor.y <= bottom:
            self._move_rows(self.cursor.y, bottom, -min(count or 1, bottom - self.cursor.y + 1))
            self.carriage_return()

    def erase_in_display(self, how: int = 0, *args: object, **kwargs: object) -> None:
        self.dirty.update(range(self.lines))
        self._blank_rows({0: range(self.cursor.y + 1, self.lines), 1: range(self.cursor.y)}.get(how, range(self.lines)))
        if how in (0, 1):
            self.erase_in_line(how)

    def erase_in_line(self, how: int = 0, private: bool = False) -> None:
        x = self.cursor.x
        line = self.buffer[self.cursor.y]
        cols = {0: range(x, self.columns), 1: range(x + 1)}.get(how, range(self.columns))
        if self.cursor.attrs.bg == self.default_char.bg:  # default cells: left out of pyte's sparse row
            for col in cols:
                line.pop(col, None)
        else:
            for col in cols:
                line[col] = self._blank()


class Emulator:
    """A terminal of ``cols`` x ``rows``: feed it what a terminal receives, read its screen and modes."""

    def __init__(self, cols: int, rows: int) -> None:
        self.screen = _Screen(cols, rows)
        self.stream = pyte.Stream(self.screen)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""
        self._saved_main: dict[int, dict[int, pyte.screens.Char]] | None = None
        self.private: set[int] = set(DEFAULT_PRIVATE_MODES)
        """DEC private modes on, each on its own (as a terminal that keeps every mouse mode apart)."""
        self.modify_other_keys = 0
        self.titles: list[str] = []
        self.kitty: list[int] = []
        self.kitty_flags = 0
        self.keypad = False
        self.queries: list[str] = []
        """Every query answered (the sequence as received)."""

    # ------------------------------------------------------------------------------------ reading

    @property
    def alt(self) -> bool:
        return self._saved_main is not None

    def snapshot(self) -> Snapshot:
        s = self.screen
        cells = []
        for y in range(s.lines):
            line = s.buffer[y]
            cells.append([Cell(line[x].data, line[x].fg, line[x].bg, line[x].bold, line[x].reverse,
                               line[x].underscore) for x in range(s.columns)])
        return Snapshot(s.columns, s.lines, cells, (s.cursor.x, s.cursor.y), s.cursor.hidden)

    def text(self) -> str:
        return "\n".join(self.snapshot().text())

    def modes_left_on(self) -> list[str]:
        """What differs from a fresh terminal, apart from the screen's content and the title."""
        left = [f"?{m}" for m in sorted(self.private - DEFAULT_PRIVATE_MODES)]
        left += [f"?{m} off" for m in sorted(DEFAULT_PRIVATE_MODES - self.private)]
        if self.modify_other_keys:
            left.append(f"modifyOtherKeys={self.modify_other_keys}")
        if self.titles:
            left.append(f"{len(self.titles)} titles pushed")
        if self.kitty or self.kitty_flags:
            left.append(f"kitty keyboard stack {self.kitty} flags {self.kitty_flags}")
        if self.keypad:
            left.append("application keypad")
        if self.screen.margins is not None and tuple(self.screen.margins) != (0, self.screen.lines - 1):
            left.append(f"scroll region {self.screen.margins}")
        return left

    # ------------------------------------------------------------------------------------ writing

    def resize(self, cols: int, rows: int) -> None:
        self.screen.resize(rows, cols)

    def feed(self, data: bytes) -> bytes:
        """Take what the terminal received; the answers it writes back (to the program's input)."""
        text = self._pending + self._decoder.decode(data)
        self._pending = ""
        answers: list[str] = []
        pos = 0
        for m in _TOKEN.finditer(text):
            if m.start() > pos:
                self._text(text[pos:m.start()])
            pos = m.end()
            answers.append(self._token(m))
        rest = text[pos:]
        cut = _UNFINISHED.search(rest)
        if cut is not None:
            self._pending = rest[cut.start():]
            rest = rest[:cut.start()]
        if rest:
            self._text(rest)
        return "".join(answers).encode()

    def _text(self, text: str) -> None:
        self.stream.feed(text.replace("\x1b", ""))  # a stray ESC not part of any sequence: dropped

    def _answer(self, seq: str, answer: str) -> str:
        self.queries.append(seq)
        return answer

    def _token(self, m: re.Match[str]) -> str:
        seq = m.group()
        if seq == "\x05":
            return self._answer(seq, "")
        if m.group(4) is not None:
            return self._csi(seq, m.group(1), m.group(2), m.group(3), m.group(4))
        if m.group(5) is not None:
            return self._osc(seq, m.group(5))
        if m.group(6) is not None:
            kind, body = m.group(6), m.group(7)
            if kind == "P" and body[:2] == "$q":  # DECRQSS: a setting at its default
                return self._answer(seq, f"\x1bP1$r0{body[2:]}\x1b\\")
            if kind == "P" and body[:2] == "+q":  # XTGETTCAP: "not known"
                return self._answer(seq, f"\x1bP0+r{body[2:]}\x1b\\")
            if kind == "_" and body.startswith("G") and "a=q" in body:
                return self._answer(seq, "\x1b_Gi=1;OK\x1b\\")
            return ""
        esc = m.group(8)
        if esc == "=":
            self.keypad = True
        elif esc == ">":
            self.keypad = False
        elif esc == "c":
            self.__init__(self.screen.columns, self.screen.lines)  # type: ignore[misc]
        else:
            self.stream.feed(seq)
        return ""

    def _csi(self, seq: str, prefix: str, params_text: str, inter: str, final: str) -> str:
        params = [int(p) if p.isdigit() else 0 for p in params_text.split(";")] if params_text else []
        first = params[0] if params else 0
        cur = self.screen.cursor
        if prefix == "?":
            if inter == "$" and final == "p":
                return self._answer(seq, f"\x1b[?{first};{1 if first in self.private else 2}$y")
            if final in "hl" and not inter:
                for mode in params:
                    self._private(mode, final == "h")
                return ""
            if final == "n":
                return self._answer(seq, f"\x1b[?{cur.y + 1};{cur.x + 1};1R" if first == 6 else "\x1b[?0n")
            if final == "u":
                return self._answer(seq, f"\x1b[?{self.kitty[-1] if self.kitty else self.kitty_flags}u")
            if final == "m":
                return self._answer(seq, f"\x1b[>{first};{self.modify_other_keys}m")
            if final == "S":
                return self._answer(seq, f"\x1b[?{first};3;0S")
            if final in "rs":
                return ""  # XTRESTORE / XTSAVE: not kept
            self.stream.feed(seq)
            return ""
        if prefix == ">":
            if final == "m" and not inter:
                if not params or first == 4:
                    self.modify_other_keys = params[1] if len(params) > 1 else 0
            elif final == "n" and first == 4:
                self.modify_other_keys = 0
            elif final == "c":
                return self._answer(seq, "\x1b[>41;380;0c")
            elif final == "q":
                return self._answer(seq, "\x1bP>|screens-test(1)\x1b\\")
            elif final == "u":
                self.kitty.append(first)
            return ""
        if prefix == "<":
            if final == "u":
                del self.kitty[len(self.kitty) - max(first, 1):]
            return ""
        if prefix == "=":
            if final == "u":
                self.kitty_flags = first
            elif final == "c":
                return self._answer(seq, "\x1bP!|00000000\x1b\\")
            return ""
        if inter:
            if inter == "$" and final == "p":
                return self._answer(seq, f"\x1b[{first};0$y")
            if (inter == "$" and final in "wu") or (inter == "&" and final == "u") or (inter == "*" and final == "y"):
                return self._answer(seq, "\x1bP0$r\x1b\\")
            if inter == "!" and final == "p":  # DECSTR
                for mode in (1, 6, 66):
                    self._private(mode, False)
                self._private(25, True)
                self.keypad = False
                self.screen.set_margins()
            return ""  # DECSCUSR and others: not kept
        if final == "n":
            if first == 6:
                return self._answer(seq, f"\x1b[{cur.y + 1};{cur.x + 1}R")
            return self._answer(seq, "\x1b[0n")
        if final == "c":
            return self._answer(seq, "\x1b[?62;22c")
        if final == "x":
            return self._answer(seq, "\x1b[2;1;1;128;128;1;0x")
        if final == "t":
            if first == 22:
                self.titles.append(self.screen.title)
            elif first == 23:
                if self.titles:
                    self.screen.title = self.titles.pop()
            elif first in (11, 13, 14, 15, 16, 18, 19, 20, 21):
                return self._answer(seq, f"\x1b[8;{self.screen.lines};{self.screen.columns}t")
            return ""
        if final in "us" and params:
            return ""  # with parameters these are not SCORC/SCOSC
        self.stream.feed(seq)
        return ""

    def _osc(self, seq: str, body: str) -> str:
        fields = body.split(";")
        if "?" in fields[1:]:
            return self._answer(seq, f"\x1b]{fields[0]};rgb:0000/0000/0000\x1b\\")
        if fields[0] in ("0", "2"):
            self.screen.set_title(body.partition(";")[2])
        return ""

    def _private(self, mode: int, on: bool) -> None:
        if mode in _ALT_MODES:
            self._alt(mode, on)
        elif mode in (5, 6, 7, 25):  # the screen modes pyte keeps: DECSCNM, DECOM, DECAWM, DECTCEM
            self.stream.feed(f"\x1b[?{mode}{'h' if on else 'l'}")
        (self.private.add if on else self.private.discard)(mode)

    def _alt(self, mode: int, on: bool) -> None:
        s = self.screen
        if on and self._saved_main is None:
            if mode == 1049:
                s.save_cursor()
            self._saved_main = {y: dict(line) for y, line in s.buffer.items()}
            s.erase_in_display(2)
        elif not on and self._saved_main is not None:
            saved, self._saved_main = self._saved_main, None
            s.buffer.clear()
            for y, line in saved.items():
                s.buffer[y].update(line)
            if mode == 1049:
                s.restore_cursor()


@dataclass
class Terminal:
    """A pexpect terminal with an emulator on its output, answering queries as a terminal does."""

    child: pexpect.spawn
    emulator: Emulator
    received: bytearray = field(default_factory=bytearray)
    answer: bool = True

    @classmethod
    def spawn(cls, argv: list[str], cols: int, rows: int, env: dict[str, str], cwd: str) -> Terminal:
        child = pexpect.spawn(argv[0], argv[1:], env=env, cwd=cwd, dimensions=(rows, cols), timeout=10)
        child.ptyproc.delayafterclose = 0
        child.delaybeforesend = None
        return cls(child, Emulator(cols, rows))

    def pump(self, timeout: float) -> bool:
        """Take what the program wrote, waiting up to ``timeout`` for something; False at its end."""
        try:
            data = self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False
        self.received += data
        answers = self.emulator.feed(data)
        if answers and self.answer:
            self.child.send(answers)
        return True

    def wait_for(self, predicate: Callable[[Emulator], bool], what: str, timeout: float = 10.0) -> None:
        """Read output until ``predicate`` holds for the screen; fail with the screen at the deadline."""
        deadline = time.monotonic() + timeout
        while not predicate(self.emulator):
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"timed out after {timeout:g} s waiting for {what}; the screen:\n{self.emulator.text()}")
            if not self.pump(min(left, 0.5)) and not predicate(self.emulator):
                pytest.fail(f"the program ended while waiting for {what}; the screen:\n{self.emulator.text()}")

    def wait_text(self, text: str, timeout: float = 10.0) -> None:
        self.wait_for(lambda e: text in e.text(), repr(text), timeout)

    def wait_same(self, expected: Snapshot, attributes: bool = True, cursor: bool = True,
                  timeout: float = 10.0, skip_last: int = 0) -> None:
        """Read output until the screen is ``expected`` cell by cell; at the deadline fail with the diff."""
        deadline = time.monotonic() + timeout
        while True:
            diff = screen_diff(expected, self.emulator.snapshot(), attributes, cursor, skip_last)
            if not diff:
                return
            left = deadline - time.monotonic()
            if left <= 0 or not self.pump(min(left, 0.5)):
                pytest.fail(f"the screens differ:\n{diff}")

    def drain_until_end(self, timeout: float = 10.0) -> None:
        """Read everything up to the program's end (the terminal's last bytes: a reset, a note)."""
        deadline = time.monotonic() + timeout
        while self.pump(max(0.01, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                pytest.fail("the program did not end")

    def send(self, keys: bytes | str) -> None:
        self.child.send(keys)

    def resize(self, cols: int, rows: int) -> None:
        self.emulator.resize(cols, rows)
        self.child.setwinsize(rows, cols)

    def close(self) -> None:
        if not self.child.closed:
            if self.child.isalive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.child.pid, signal.SIGKILL)
                self.child.wait()
            self.child.close()

