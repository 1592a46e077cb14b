"""The screen model drawn back as bytes (sans-IO): what takes a terminal, in any state, to the model's screen.

First up to ``scrollback`` lines of the main screen's history are printed so that they scroll into the
terminal's own scrollback, then the main screen's rows; then, if the program is on the alternate screen, it
is entered and drawn; then the tab stops, the scroll region, reverse video, the title, the cursor (with a
pending wrap: the last column's character written again, so the next character starts the next row), the
modes, the character sets, and last the pen the program left set (shellper.core.terminal.pen).
"""

from __future__ import annotations

from shellper.core.terminal.grid import WIDE_FILL, render_row
from shellper.core.terminal.pen import DEFAULT, Pen, change
from shellper.core.terminal.writer import DEFAULT_TABS

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.core.terminal.writer import ScreenWriter as Screen

__all__ = ["RESET", "render"]

RESET = "\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b[20l\x1b[?5l\x1b(B\x1b)B\x0f\x1b[0m\x1b]8;;\x1b\\\x1b[?1049l\x1b[H\x1b[2J"
"""What any terminal state is taken to before the screen is drawn (the modes the model renders, off)."""


def render(s: Screen, scrollback: int = 0, limit: int | None = None) -> bytes:
    """Bytes that take a terminal of the screen's size, in any state, to the screen ``s``.

    ``limit``: a drawing longer than this many bytes loses its oldest scrollback lines, as many as it takes
    (the newest ones and the screen are what a person looks at). The screen itself is never cut: a drawing
    over ``limit`` with no scrollback left is returned whole, for the caller to do without it."""
    history = s.history(scrollback)
    data = _render(s, history)
    if limit is None or len(data) <= limit or not history:
        return data
    excess, drop = len(data) - limit, 0
    while drop < len(history) and excess > 0:
        excess -= len(history[drop].encode("utf-8", "replace")) + 2  # and its "\r\n"
        drop += 1
    return _render(s, history[drop:])


def _render(s: Screen, history: list[str]) -> bytes:
    out = [RESET]
    _rows(s, history, out)
    _tab_stops(s, out)
    if (s.top, s.bottom) != (0, s.rows - 1):
        out.append(f"\x1b[{s.top + 1};{s.bottom + 1}r")
    if s.reverse_video:
        out.append("\x1b[?5h")
    if s.title:
        out.append(f"\x1b]2;{s.title}\x07")
    pen = _cursor(s, out)
    if not s.autowrap:
        out.append("\x1b[?7l")
    if s.insert:
        out.append("\x1b[4h")
    if s.newline_mode:
        out.append("\x1b[20h")
    cur = s.cursor
    if cur.charsets != ["B", "B"]:
        out.append(f"\x1b({cur.charsets[0]}\x1b){cur.charsets[1]}")
    if cur.gl:
        out.append("\x0e")
    out.append(change(pen, cur.attr))
    out.append("\x1b[?25h" if s.cursor_visible else "\x1b[?25l")
    return "".join(out).encode("utf-8", "replace")


def _rows(s: Screen, history: list[str], out: list[str]) -> None:
    main_cursor = s.saved[False] if s.alternate else s.cursor
    main_rows = [render_row(c, a, main_cursor.x if y == main_cursor.y else 0)
                 for y, (c, a) in enumerate(zip(s.main.chars, s.main.attrs, strict=True))]
    if history:
        out.append("\r\n".join(history + main_rows))
    else:
        for y, row in enumerate(main_rows):
            if row:
                out.append(f"\x1b[{y + 1}H{row}")
    if s.alternate:
        out.append(f"\x1b[{main_cursor.y + 1};{main_cursor.x + 1}H\x1b[?1049h\x1b[H\x1b[2J")
        for y, (c, a) in enumerate(zip(s.alt.chars, s.alt.attrs, strict=True)):
            row = render_row(c, a, s.cursor.x if y == s.cursor.y else 0)
            if row:
                out.append(f"\x1b[{y + 1}H{row}")


def _tab_stops(s: Screen, out: list[str]) -> None:
    """The tab stops, when the program changed them (TBC, HTS): all cleared, then each set."""
    stops = sorted(t for t in s.tabs if t < s.cols)
    if stops != sorted(t for t in DEFAULT_TABS if t < s.cols):
        out.append("\x1b[3g" + "".join(f"\x1b[1;{t + 1}H\x1bH" for t in stops))


def _cursor(s: Screen, out: list[str]) -> Pen:
    """The cursor placed, in origin mode if on; a pending wrap is made again by writing the character
    that set it. Returns the pen the terminal is left with."""
    cur = s.cursor
    y = cur.y
    if cur.origin:
        out.append("\x1b[?6h")
        y -= s.top
    if not (cur.pending and s.autowrap):
        out.append(f"\x1b[{y + 1};{cur.x + 1}H")
        return DEFAULT
    chars, attrs = s.grid.chars[cur.y], s.grid.attrs[cur.y]
    x = cur.x
    while x > 0 and chars[x] == WIDE_FILL:
        x -= 1
    pen = attrs[x]
    out.append(f"\x1b[{y + 1};{x + 1}H{change(DEFAULT, pen)}{chars[x] or ' '}")
    return pen
