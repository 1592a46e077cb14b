"""The screen's state and the operations that write it (sans-IO), as tmux's screen-write.c: the main and
alternate grids, the cursor and its pen, the scroll region, the modes, the tab stops, the title, and the
scrollback; characters drawn (autowrap with xterm's pending wrap, insert mode, charsets, wide and combining
characters), lines scrolled, cells erased, the size changed. shellper.core.terminal.commands calls these
for each sequence; shellper.core.terminal.screen reads the output into them.
"""

from __future__ import annotations

from collections import deque

from shellper.core.defaults import SCREEN_SCROLLBACK_LINES
from shellper.core.terminal.grid import BLANK, WIDE_FILL, Grid, render_row, width
from shellper.core.terminal.pen import DEFAULT, Pen, erase_pen

__all__ = ["DEFAULT_TABS", "MAX_COLS", "MAX_ROWS", "SCROLLBACK_LINES", "Cursor", "ScreenWriter"]

SCROLLBACK_LINES = SCREEN_SCROLLBACK_LINES
"""Main-screen lines kept above the screen (tmux keeps 2000 by default); each is kept rendered, as
ANSI text, so it costs about its visible length."""

MAX_COLS, MAX_ROWS = 1000, 500
"""The largest screen modelled: a PTY may be 65535 x 65535, but a model of that would need billions of
cells. A bigger terminal is drawn this much of the screen (its top left); 2 x 500,000 cells at most."""

_DEC_GRAPHICS = str.maketrans(dict(zip(
    "`abcdefghijklmnopqrstuvwxyz{|}~_",
    "◆▒␉␌␍␊°±␤␋┘┐┌└┼⎺⎻─⎼⎽├┤┴┬│≤≥π≠£· ", strict=True)))
"""The DEC Special Graphics set (``ESC ( 0``): line drawing as xterm shows it."""

DEFAULT_TABS = frozenset(range(8, MAX_COLS, 8))
"""A terminal's tab stops as it starts: every 8 columns."""


class Cursor:
    """Where the next character goes, the pen it is drawn with, and what DECSC saves with them."""

    __slots__ = ("attr", "charsets", "gl", "origin", "pending", "x", "y")

    def __init__(self) -> None:
        self.x = self.y = 0
        self.pending = False
        """A character was written in the last column: the next one starts the next row (xterm's wrap)."""
        self.attr = DEFAULT
        """The pen."""
        self.charsets = ["B", "B"]
        self.gl = 0
        self.origin = False

    def copy(self) -> Cursor:
        c = Cursor()
        c.x, c.y, c.pending, c.attr, c.gl, c.origin = self.x, self.y, self.pending, self.attr, self.gl, self.origin
        c.charsets = list(self.charsets)
        return c


class ScreenWriter:
    """A screen of ``cols`` x ``rows`` and what writes it; :class:`~shellper.core.terminal.screen.Screen`
    reads output into it."""

    def __init__(self, cols: int = 80, rows: int = 24, scrollback_lines: int = SCROLLBACK_LINES) -> None:
        cols, rows = max(1, min(cols, MAX_COLS)), max(1, min(rows, MAX_ROWS))
        self.cols, self.rows = cols, rows
        self.scrollback: deque[str] = deque(maxlen=scrollback_lines)
        self.scrollback_lines = scrollback_lines
        self.reset()

    def reset(self) -> None:
        """RIS: everything but the size and the scrollback as a terminal starts."""
        self.main = Grid(self.cols, self.rows)
        self.alt = Grid(self.cols, self.rows)
        self.grid = self.main
        self.cursor = Cursor()
        self.saved = {False: Cursor(), True: Cursor()}
        """DECSC's saved cursor, one per screen (as xterm)."""
        self.top, self.bottom = 0, self.rows - 1
        self.autowrap, self.insert, self.newline_mode, self.cursor_visible = True, False, False, True
        self.reverse_video = False
        self.title = ""
        self.tabs = set(DEFAULT_TABS)
        self._last_char = ""

    @property
    def alternate(self) -> bool:
        return self.grid is self.alt
    # --------------------------------------------------------------------------------------- drawing

    def draw(self, run: str) -> None:
        cur = self.cursor
        if cur.charsets[cur.gl] == "0":
            run = run.translate(_DEC_GRAPHICS)
        elif not run.isascii():
            self._draw_wide(run)
            return
        self._last_char = run[-1]
        grid, cols, attr = self.grid, self.cols, cur.attr
        while run:
            if cur.pending:
                if self.autowrap:
                    self.wrap()
                cur.pending = False
            chars, attrs = grid.chars[cur.y], grid.attrs[cur.y]
            x = cur.x
            n = min(len(run), cols - x)
            if self.insert:
                del chars[cols - n:], attrs[cols - n:]
                chars[x:x] = run[:n]
                attrs[x:x] = [attr] * n
            else:
                if x + n < cols and chars[x + n] == WIDE_FILL:
                    chars[x + n] = BLANK
                if x and chars[x] == WIDE_FILL:
                    chars[x - 1] = BLANK
                chars[x:x + n] = run[:n]
                attrs[x:x + n] = [attr] * n
            run = run[n:]
            if x + n >= cols:
                cur.x = cols - 1
                if self.autowrap:
                    cur.pending = True
                elif run:
                    chars[cols - 1] = run[-1]
                    run = ""
            else:
                cur.x = x + n

    def _draw_wide(self, run: str) -> None:
        cur = self.cursor
        grid, cols = self.grid, self.cols
        for ch in run:
            size = width(ch)
            if size == 0:
                # A combining mark joins the character before the cursor.
                x = cur.x if cur.pending else cur.x - 1
                chars = grid.chars[cur.y]
                while x > 0 and chars[x] == WIDE_FILL:
                    x -= 1
                if x >= 0:
                    chars[x] += ch
                continue
            self._last_char = ch
            if cur.pending and self.autowrap:
                self.wrap()
            cur.pending = False
            if size == 2 and cur.x == cols - 1:
                if not self.autowrap:
                    continue
                grid.chars[cur.y][cur.x] = BLANK
                self.wrap()
            self._put(ch, size)

    def _put(self, ch: str, size: int) -> None:
        """One character of ``size`` cells at the cursor, which it moves on."""
        cur, grid, cols = self.cursor, self.grid, self.cols
        chars, attrs = grid.chars[cur.y], grid.attrs[cur.y]
        x = cur.x
        if self.insert:
            del chars[cols - size:], attrs[cols - size:]
            chars[x:x] = [ch, WIDE_FILL][:size]
            attrs[x:x] = [cur.attr] * size
        else:
            if chars[x] == WIDE_FILL and x:
                chars[x - 1] = BLANK
            end = x + size
            if end < cols and chars[end] == WIDE_FILL:
                chars[end] = BLANK
            chars[x] = ch
            attrs[x] = cur.attr
            if size == 2:
                chars[x + 1] = WIDE_FILL
                attrs[x + 1] = cur.attr
        if x + size >= cols:
            cur.x = cols - 1
            cur.pending = self.autowrap
        else:
            cur.x = x + size

    def repeat(self, n: int) -> None:
        """REP: the last character drawn, ``n`` times more."""
        if self._last_char:
            self.draw(self._last_char * min(n, 65535))

    def wrap(self) -> None:
        self.cursor.x = 0
        self.index()

    def index(self) -> None:
        cur = self.cursor
        if cur.y == self.bottom:
            self.scroll_up(1)
        elif cur.y < self.rows - 1:
            cur.y += 1

    def reverse_index(self) -> None:
        cur = self.cursor
        if cur.y == self.top:
            self.scroll_down(1)
        elif cur.y > 0:
            cur.y -= 1

    def scroll_up(self, n: int, top: int | None = None) -> None:
        """The scroll region's rows (from ``top``) up by ``n``; on the main screen, rows scrolled off the
        top of the screen go to the scrollback."""
        top = self.top if top is None else top
        history = self.scrollback if self.grid is self.main and top == 0 else None
        self.grid.scroll_up(top, self.bottom, n, self.erase_pen(), history)

    def scroll_down(self, n: int, top: int | None = None) -> None:
        self.grid.scroll_down(self.top if top is None else top, self.bottom, n, self.erase_pen())

    def erase_pen(self) -> Pen:
        """Erased cells take the current background (xterm's bce), nothing else."""
        pen = self.cursor.attr
        return DEFAULT if pen is DEFAULT or not pen.bg else erase_pen(pen)

    def erase(self, y: int, x0: int, x1: int) -> None:
        self.grid.erase(y, x0, x1, self.erase_pen())

    def erase_rows(self, first: int, end: int) -> None:
        pen = self.erase_pen()
        for y in range(first, end):
            self.grid.erase(y, 0, self.cols, pen)

    # ---------------------------------------------------------------------------------------- cursor

    def goto(self, x: int, y: int) -> None:
        """Cursor to (x, y), within the scroll region in origin mode (where y counts from its top)."""
        cur = self.cursor
        y = min(self.bottom, self.top + max(0, y)) if cur.origin else min(self.rows - 1, max(0, y))
        cur.x, cur.y = min(self.cols - 1, max(0, x)), y
        cur.pending = False

    def save_cursor(self) -> None:
        self.saved[self.alternate] = self.cursor.copy()

    def restore_cursor(self) -> None:
        cur = self.saved[self.alternate].copy()
        cur.x, cur.y = min(cur.x, self.cols - 1), min(cur.y, self.rows - 1)
        self.cursor = cur

    # ----------------------------------------------------------------------------------------- modes

    def set_alternate(self, mode: int, on: bool) -> None:
        """Enter or leave the alternate screen by private mode 47, 1047 or 1049."""
        if on == self.alternate:
            return
        if on:
            if mode == 1049:
                self.saved[False] = self.cursor.copy()
                self.alt.clear()
            self.grid = self.alt
            return
        if mode == 1047:
            self.alt.clear()
        self.grid = self.main
        if mode == 1049:
            self.restore_cursor()

    def soft_reset(self) -> None:
        """DECSTR."""
        cur = self.cursor
        self.insert, self.autowrap, self.cursor_visible = False, True, True
        self.top, self.bottom = 0, self.rows - 1
        cur.origin, cur.attr, cur.charsets, cur.gl = False, DEFAULT, ["B", "B"], 0
        self.saved[self.alternate] = Cursor()

    # ---------------------------------------------------------------------------------------- resize

    def resize(self, cols: int, rows: int) -> None:
        """The terminal was resized (no reflow: rows are cut or padded, as tmux without reflow)."""
        cols, rows = max(1, min(cols, MAX_COLS)), max(1, min(rows, MAX_ROWS))
        if (cols, rows) == (self.cols, self.rows):
            return
        cur = self.cursor
        for grid in (self.main, self.alt):
            keep = cur.y if grid is self.grid else rows - 1
            removed = grid.resize(cols, rows, keep)
            if grid is self.main:
                for chars, attrs in removed:
                    self.scrollback.append(render_row(chars, attrs))
            if grid is self.grid:
                cur.y = max(0, cur.y - len(removed))
        self.cols, self.rows = cols, rows
        self.top, self.bottom = 0, rows - 1
        cur.x, cur.y = min(cur.x, cols - 1), min(cur.y, rows - 1)
        cur.pending = False
        for saved in self.saved.values():
            saved.x, saved.y = min(saved.x, cols - 1), min(saved.y, rows - 1)

    def history(self, count: int | None = None) -> list[str]:
        """The last ``count`` (default: all) scrollback lines, rendered with SGR sequences, oldest first."""
        lines = list(self.scrollback)
        return lines if count is None else lines[max(0, len(lines) - count):] if count else []
