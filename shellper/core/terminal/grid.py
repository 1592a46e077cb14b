"""A screen's cells (sans-IO), as tmux's grid.c: rows of characters and their pens, scrolled, erased,
resized; a row rendered as text with SGR and OSC 8, as the scrollback keeps it.

A row is two lists, its characters and its pens (:class:`~shellper.core.terminal.pen.Pen`), so that a run of
text is written into it by slice assignment and a row of default pens is recognised in C.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import groupby

from shellper.core.terminal.pen import DEFAULT, Pen, link_sequence, sgr

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections import deque

__all__ = ["BLANK", "WIDE_FILL", "Grid", "plain_line", "render_row", "width"]

BLANK = " "
WIDE_FILL = ""
"""The cell after a wide character: it holds nothing of its own."""

Row = tuple[list[str], list[Pen]]


class Grid:
    """One screen's cells: characters and their pens, row by row."""

    __slots__ = ("attrs", "chars", "cols", "rows")

    def __init__(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        self.chars = [[BLANK] * cols for _ in range(rows)]
        self.attrs = [[DEFAULT] * cols for _ in range(rows)]

    def blank_row(self, pen: Pen = DEFAULT) -> Row:
        return [BLANK] * self.cols, [pen] * self.cols

    def clear(self) -> None:
        self.chars = [[BLANK] * self.cols for _ in range(self.rows)]
        self.attrs = [[DEFAULT] * self.cols for _ in range(self.rows)]

    def fill(self, pen: Pen) -> None:
        """Every row blank, in ``pen`` (an erased screen's background)."""
        for r in range(self.rows):
            self.chars[r], self.attrs[r] = self.blank_row(pen)

    def resize(self, cols: int, rows: int, keep_bottom: int) -> list[Row]:
        """Change the size; returns the rows removed from the top (to scroll back)."""
        removed: list[Row] = []
        if cols != self.cols:
            for r in range(self.rows):
                if cols < self.cols:
                    del self.chars[r][cols:], self.attrs[r][cols:]
                else:
                    self.chars[r].extend([BLANK] * (cols - self.cols))
                    self.attrs[r].extend([DEFAULT] * (cols - self.cols))
            self.cols = cols
        if rows < self.rows:
            # Rows below the cursor go first (as xterm), then rows at the top scroll away.
            below = min(self.rows - 1 - keep_bottom, self.rows - rows)
            if below > 0:
                del self.chars[-below:], self.attrs[-below:]
            for _ in range(len(self.chars) - rows):
                removed.append((self.chars.pop(0), self.attrs.pop(0)))
        elif rows > self.rows:
            for _ in range(rows - self.rows):
                chars, attrs = self.blank_row()
                self.chars.append(chars)
                self.attrs.append(attrs)
        self.rows = rows
        return removed

    def scroll_up(self, top: int, bottom: int, n: int, pen: Pen, history: deque[str] | None) -> None:
        """Rows ``top``..``bottom`` move up by ``n``; the ones leaving go to ``history`` (rendered) if given."""
        for _ in range(min(n, bottom - top + 1)):
            chars, attrs = self.chars.pop(top), self.attrs.pop(top)
            if history is not None:
                history.append(render_row(chars, attrs))
            chars, attrs = self.blank_row(pen)
            self.chars.insert(bottom, chars)
            self.attrs.insert(bottom, attrs)

    def scroll_down(self, top: int, bottom: int, n: int, pen: Pen) -> None:
        for _ in range(min(n, bottom - top + 1)):
            del self.chars[bottom], self.attrs[bottom]
            chars, attrs = self.blank_row(pen)
            self.chars.insert(top, chars)
            self.attrs.insert(top, attrs)

    def erase(self, y: int, x0: int, x1: int, pen: Pen) -> None:
        """Cells ``x0``..``x1`` (not included) of row ``y`` blank, in ``pen``; a wide character cut is too."""
        chars, attrs = self.chars[y], self.attrs[y]
        x0, x1 = max(0, x0), min(self.cols, x1)
        if x0 >= x1:
            return
        if x0 > 0 and chars[x0] == WIDE_FILL:
            chars[x0 - 1] = BLANK
        if x1 < self.cols and chars[x1] == WIDE_FILL:
            chars[x1] = BLANK
        chars[x0:x1] = [BLANK] * (x1 - x0)
        attrs[x0:x1] = [pen] * (x1 - x0)

    def insert_cells(self, y: int, x: int, n: int, pen: Pen) -> None:
        chars, attrs = self.chars[y], self.attrs[y]
        n = min(n, self.cols - x)
        chars[x:x] = [BLANK] * n
        attrs[x:x] = [pen] * n
        del chars[self.cols:], attrs[self.cols:]

    def delete_cells(self, y: int, x: int, n: int, pen: Pen) -> None:
        chars, attrs = self.chars[y], self.attrs[y]
        n = min(n, self.cols - x)
        del chars[x:x + n], attrs[x:x + n]
        chars.extend([BLANK] * n)
        attrs.extend([pen] * n)

    def row(self, y: int, keep: int = 0) -> str:
        return render_row(self.chars[y], self.attrs[y], keep)


_STYLING = re.compile(r"\x1b\[[0-9;:]*m|\x1b\]8;[^\x07\x1b]*(?:\x1b\\|\x07)")


def plain_line(ansi: str) -> str:
    """A rendered line (as the scrollback keeps it) as plain text."""
    return _STYLING.sub("", ansi)


def width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def render_row(chars: list[str], attrs: list[Pen], keep: int = 0) -> str:
    """One row as text with SGR and OSC 8 sequences; trailing default blanks dropped, except the first
    ``keep`` cells (the cursor's row keeps the blanks before the cursor: a prompt's "$ " stays as the shell
    wrote it). It ends with the default pen and no hyperlink."""
    if attrs == _default_row(len(attrs)):  # stops at the first cell not default
        text = "".join(chars).rstrip(" ")
        return text + " " * (keep - len(text)) if keep > len(text) else text
    end = len(chars)
    while end > keep and chars[end - 1] == BLANK and attrs[end - 1] is DEFAULT:
        end -= 1
    out: list[str] = []
    current, x = DEFAULT, 0
    for pen, cells in groupby(attrs[:end]):  # runs of one pen, found in C (identical pens compare at once)
        n = len(list(cells))
        if pen != current:
            if pen.link == current.link:
                out.append(sgr(pen))
            else:
                out.append(link_sequence(pen.link))
                if pen[:5] != current[:5]:
                    out.append(sgr(pen))
            current = pen
        out.append("".join(chars[x:x + n]))
        x += n
    if current.link:
        out.append(link_sequence(""))
    if current is not DEFAULT and current[:5] != _PLAIN:
        out.append("\x1b[0m")
    return "".join(out)

_PLAIN = DEFAULT[:5]
_default_rows: dict[int, list[Pen]] = {}


def _default_row(cols: int) -> list[Pen]:
    row = _default_rows.get(cols)
    if row is None:
        if len(_default_rows) > 16:
            _default_rows.clear()
        row = _default_rows[cols] = [DEFAULT] * cols
    return row
