"""A terminal screen model (sans-IO): what a terminal shows after a stream of output bytes.

Why: a byte window of the output cannot always rebuild the screen (a status row drawn once, the main
screen's text before a long alternate-screen session). The shellper feeds this model the same output
as its ring, so a reattaching terminal can be drawn the screen of the moment, and a Tower or
``shellper screen`` can read it as text.

No emulator library on PyPI was fast enough for Python 3.11 (bench/NOTES.md, "A screen model"), so this
is a small VT/xterm emulator written for throughput: printable runs are written into rows by slice
assignment, and a long run of plain text (no escape sequence but colours) is fast-forwarded to its
last lines when what scrolled away before them cannot be seen any more (:meth:`Screen._fast_forward`).

Covered: main and alternate screens (47, 1047, 1048, 1049), cursor and DECSC/DECRC, scroll regions
(DECSTBM) and origin mode, autowrap with xterm's pending wrap, insert mode, G0/G1 charsets with DEC
line drawing, wide and combining characters, SGR (kept per cell as one canonical parameter string),
insert/delete of lines and characters, erase, tabs, REP, title (OSC 0/2), and a bounded scrollback of
main-screen lines (:data:`SCROLLBACK_LINES`). Queries are never answered: the model only watches.
Not modelled: reflow on resize, left/right margins, double-width lines, the title stack.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections import deque

from shellper.core.defaults import SCREEN_SCROLLBACK_LINES
from shellper.core.terminal import parser as vtparse

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import TypeVar

    _Text = TypeVar("_Text", str, bytes)

__all__ = ["SCROLLBACK_LINES", "Screen", "plain_line"]

SCROLLBACK_LINES = SCREEN_SCROLLBACK_LINES
"""Main-screen lines kept above the screen (tmux keeps 2000 by default); each is kept rendered, as
ANSI text, so it costs about its visible length."""

MAX_COLS, MAX_ROWS = 1000, 500
"""The largest screen modelled: a PTY may be 65535 x 65535, but a model of that would need billions of
cells. A bigger terminal is drawn this much of the screen (its top left); 2 x 500,000 cells at most."""

CARRY_MAX = 4096
"""Longest unfinished escape sequence kept between feeds; a longer one (a huge OSC) is dropped."""

FAST_FORWARD_MIN = 32 * 1024
"""Characters of plain text below which fast-forwarding is not tried (finding where to start costs)."""

_TOKEN = re.compile(
    # The grammar is shellper.core.terminal.parser's; the commonest well-formed sequences come first, as groups a
    # branch in _run tells apart at once, and everything else (8-bit C1 forms, C0 controls inside a
    # sequence, aborted ones) is one token of the grammar, classified by vtparse.parse. Both end a
    # sequence in the same place.
    r"([^\x00-\x1f\x7f-\x9f]+)"  # 1: printable run
    r"|\x1b\[([\x3c-\x3f]?[\x30-\x3b]*)([\x20-\x2f]*)([\x40-\x7e])"  # 2, 3, 4: CSI params, intermediates, final
    r"|\x1b\]([^\x00-\x1f\x7f-\x9f]*)(?:\x07|\x1b\\)"  # 5: OSC
    r"|\x1b([\x20-\x2f]+)([\x30-\x7e])"  # 6, 7: ESC with intermediates (charsets, DECALN)
    r"|\x1b([\x30-\x4f\x51-\x57\x59\x5a\x5c\x60-\x7e])"  # 8: ESC final
    r"|([\x00-\x1a\x1c-\x1f\x7f])"  # 9: a C0 control (not ESC)
    r"|(" + vtparse.SEQUENCE + r")",  # 10: any other token of the grammar
    re.S,
)
_CONTROLS = re.compile(f"[\x00-\x1f\x7f{vtparse.C1}]")
_SGR_ONLY = re.compile(r"\x1b\[[0-9;:]*m")
_PRINTABLE_BYTES = bytes(range(0x20, 0x7F))
_SGR_BYTES = re.compile(rb"\x1b\[[0-9;:]*m")
_ESC_NOT_SGR = re.compile(rb"\x1b(?!\[[0-9;:]*m)")
"""Plain text is printable ASCII, line feeds, carriage returns before them, and these (:func:`plain_lines`)."""

_DEC_GRAPHICS = str.maketrans(dict(zip(
    "`abcdefghijklmnopqrstuvwxyz{|}~_",
    "◆▒␉␌␍␊°±␤␋┘┐┌└┼⎺⎻─⎼⎽├┤┴┬│≤≥π≠£· ", strict=True)))
"""The DEC Special Graphics set (``ESC ( 0``): line drawing as xterm shows it."""

_COLOUR_BASES = {30: 30, 40: 40, 90: 90, 100: 100}


def _sgr_apply(attr: str, params: str) -> str:
    """The canonical SGR parameter string after applying ``params`` to ``attr`` ('' = default)."""
    flags: dict[str, str] = {}
    fg = bg = ul = ""
    if attr:
        for part in attr.split(";"):
            key, _, value = part.partition("=")
            if key == "f":
                fg = value
            elif key == "b":
                bg = value
            elif key == "u":
                ul = value
            else:
                flags[key] = ""
    items = [p for p in params.replace(":", ";").split(";")] if params else ["0"]
    i = 0
    while i < len(items):
        raw = items[i]
        n = int(raw) if raw.isdigit() else 0
        i += 1
        if n == 0:
            flags.clear()
            fg = bg = ul = ""
        elif n in (38, 48, 58):
            kind = items[i] if i < len(items) else ""
            if kind == "5" and i + 1 < len(items):
                value, i = "5:" + items[i + 1], i + 2
            elif kind == "2" and i + 3 < len(items):
                value, i = "2:" + ":".join(items[i + 1:i + 4]), i + 4
            else:
                break
            if n == 38:
                fg = value
            elif n == 48:
                bg = value
            else:
                ul = value
        elif 30 <= n <= 37 or 90 <= n <= 97:
            fg = str(n)
        elif 40 <= n <= 47 or 100 <= n <= 107:
            bg = str(n)
        elif n == 39:
            fg = ""
        elif n == 49:
            bg = ""
        elif n == 59:
            ul = ""
        elif n in (1, 2, 3, 4, 5, 7, 8, 9, 53):
            flags[str(n)] = ""
        elif n == 22:
            flags.pop("1", None)
            flags.pop("2", None)
        elif n == 23:
            flags.pop("3", None)
        elif n == 24:
            flags.pop("4", None)
        elif n == 25:
            flags.pop("5", None)
        elif n == 27:
            flags.pop("7", None)
        elif n == 28:
            flags.pop("8", None)
        elif n == 29:
            flags.pop("9", None)
        elif n == 55:
            flags.pop("53", None)
    parts = sorted(flags, key=int)
    if fg:
        parts.append("f=" + fg)
    if bg:
        parts.append("b=" + bg)
    if ul:
        parts.append("u=" + ul)
    return ";".join(parts)


def _sgr_sequence(attr: str) -> str:
    """The SGR escape sequence that sets exactly ``attr`` (from any state)."""
    if not attr:
        return "\x1b[0m"
    out = ["0"]
    for part in attr.split(";"):
        key, _, value = part.partition("=")
        if key in ("f", "b", "u"):
            base = {"f": "38", "b": "48", "u": "58"}[key]
            if value.startswith("5:"):
                out.append(f"{base};5;{value[2:]}")
            elif value.startswith("2:"):
                out.append(f"{base};2;{value[2:].replace(':', ';')}")
            else:
                out.append(value)
        else:
            out.append(key)
    return "\x1b[" + ";".join(out) + "m"


_BLANK = " "
_WIDE_FILL = ""
"""The cell after a wide character: it holds nothing of its own."""


class _Grid:
    """One screen's cells: characters and their SGR strings, row by row."""

    __slots__ = ("attrs", "chars", "cols", "rows")

    def __init__(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        self.chars = [[_BLANK] * cols for _ in range(rows)]
        self.attrs = [[""] * cols for _ in range(rows)]

    def blank_row(self, attr: str = "") -> tuple[list[str], list[str]]:
        return [_BLANK] * self.cols, [attr] * self.cols

    def resize(self, cols: int, rows: int, keep_bottom: int) -> list[tuple[list[str], list[str]]]:
        """Change the size; returns the rows removed from the top (to scroll back)."""
        removed: list[tuple[list[str], list[str]]] = []
        if cols != self.cols:
            for r in range(self.rows):
                if cols < self.cols:
                    del self.chars[r][cols:], self.attrs[r][cols:]
                else:
                    self.chars[r].extend([_BLANK] * (cols - self.cols))
                    self.attrs[r].extend([""] * (cols - self.cols))
            self.cols = cols
        if rows < self.rows:
            # Rows below the cursor go first (as xterm), then rows at the top scroll away.
            below = min(self.rows - 1 - keep_bottom, self.rows - rows)
            if below > 0:
                del self.chars[-below:], self.attrs[-below:]
            top = len(self.chars) - rows
            for _ in range(top):
                removed.append((self.chars.pop(0), self.attrs.pop(0)))
        elif rows > self.rows:
            for _ in range(rows - self.rows):
                chars, attrs = self.blank_row()
                self.chars.append(chars)
                self.attrs.append(attrs)
        self.rows = rows
        return removed


class _Cursor:
    __slots__ = ("attr", "charsets", "gl", "origin", "pending", "x", "y")

    def __init__(self) -> None:
        self.x = self.y = 0
        self.pending = False
        self.attr = ""
        self.charsets = ["B", "B"]
        self.gl = 0
        self.origin = False

    def copy(self) -> _Cursor:
        c = _Cursor()
        c.x, c.y, c.pending, c.attr, c.gl, c.origin = self.x, self.y, self.pending, self.attr, self.gl, self.origin
        c.charsets = list(self.charsets)
        return c


def plain_line(ansi: str) -> str:
    """A rendered line (as the scrollback keeps it) as plain text."""
    return re.sub(r"\x1b\[[0-9;]*m", "", ansi)


class Screen:
    """The screen a terminal of ``cols`` x ``rows`` shows after the bytes given to :meth:`feed`."""

    def __init__(self, cols: int = 80, rows: int = 24, scrollback_lines: int = SCROLLBACK_LINES) -> None:
        cols, rows = max(1, min(cols, MAX_COLS)), max(1, min(rows, MAX_ROWS))
        self.cols, self.rows = cols, rows
        self.main = _Grid(cols, rows)
        self.alt = _Grid(cols, rows)
        self.grid = self.main
        self.cursor = _Cursor()
        self.saved = {False: _Cursor(), True: _Cursor()}
        """DECSC's saved cursor, one per screen (as xterm)."""
        self.top, self.bottom = 0, rows - 1
        self.autowrap = True
        self.insert = False
        self.newline_mode = False
        self.cursor_visible = True
        self.title = ""
        self.tabs = set(range(8, 1024, 8))
        self.scrollback: deque[str] = deque(maxlen=scrollback_lines)
        self.scrollback_lines = scrollback_lines
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._carry = ""
        self._last_char = ""
        self._sgr_cache: dict[tuple[str, str], str] = {}

    @property
    def alternate(self) -> bool:
        return self.grid is self.alt

    # ----------------------------------------------------------------------------------------- input

    def feed(self, data: bytes) -> None:
        """Take output bytes (any split: escape sequences and UTF-8 characters may straddle feeds)."""
        if len(data) >= FAST_FORWARD_MIN and not self._carry and not self._decoder.getstate()[0]:
            data = self._fast_forward_bytes(data)
        text, self._carry = vtparse.hold_back(self._carry + self._decoder.decode(data), CARRY_MAX)
        if len(text) >= FAST_FORWARD_MIN:
            text = self._fast_forward(text)
        self._run(text)

    def _run(self, text: str) -> None:
        for m in _TOKEN.finditer(text):
            run = m.group(1)
            if run is not None:
                self._draw(run)
                continue
            final = m.group(4)
            if final is not None:
                self._csi(m.group(2), m.group(3), final)
            elif m.group(9) is not None:
                self._control(m.group(9))
            elif m.group(8) is not None:
                self._esc(m.group(8))
            elif m.group(7) is not None:
                self._esc_intermediate(m.group(6), m.group(7))
            elif m.group(5) is not None:
                self._osc(m.group(5))
            elif m.group(10) is not None:
                self._sequence(m.group(10))

    def _sequence(self, token: str) -> None:
        """A token of the grammar none of the fast forms took: its C0 controls are executed, then it."""
        seq = vtparse.parse(token)
        for control in seq.controls:
            self._control(control)
        if not seq.dispatched:
            return
        kind = seq.kind
        if kind is vtparse.Kind.CSI:
            self._csi(seq.private + seq.params, seq.intermediates, seq.final)
        elif kind is vtparse.Kind.ESC:
            if seq.intermediates:
                self._esc_intermediate(seq.intermediates, seq.final)
            else:
                self._esc(seq.final)
        elif kind is vtparse.Kind.OSC:
            self._osc(seq.data)
        elif kind is vtparse.Kind.CONTROL:
            self._control(seq.data)

    def _fast_forward_bytes(self, data: bytes) -> bytes:
        """:meth:`_fast_forward` for a batch of plain ASCII text, line feeds and SGR sequences (the usual
        flood, a coloured log), done on the bytes: the skipped part is never decoded, only counted."""
        if (self.top != 0 or self.bottom != self.rows - 1 or self.newline_mode  # LNM: a line feed is a CRLF
                or plain_lines(data) < 0):
            return data
        cut = self._cut(data, b"\n", b"\x1b", b"\r")
        if cut < 0:
            return data
        crlf = data.rfind(b"\r\n", 0, cut)
        x, pending = (0, False) if crlf >= 0 else (self.cursor.x, self.cursor.pending)
        start = crlf + 2 if crlf >= 0 else 0
        written = (cut - start) - data.count(b"\n", start, cut)
        attr = self.cursor.attr
        if b"\x1b" in data:
            written -= sum(map(len, _SGR_BYTES.findall(data, start, cut)))
            attr = self._sgr_at(data, cut, attr)
        self._jump(x, pending, written, attr)
        return data[cut:]

    def skip(self, data: bytes, following: bytes, data_lines: int | None = None,
             following_lines: int | None = None) -> bool:
        """Take ``data`` without drawing it when ``following`` (the output right after it) surely scrolls
        all of it away: both plain text (printable ASCII, CRLF, LF, SGR), and ``following`` alone long
        enough (:meth:`_cut`). Only the cursor's column and the SGR in effect carry over. False: nothing was
        done, and ``data`` is to be fed. ``data_lines`` and ``following_lines`` are :func:`plain_lines` of
        each when the caller has them (a backlog's pieces are each checked once, as ``following`` and then
        as ``data``). This lets a backlog be fed in small pieces, each skipped for the next, as cheaply as
        one large batch is fast-forwarded (and the result is the same)."""
        if (self._carry or self._decoder.getstate()[0] or self.top != 0 or self.bottom != self.rows - 1
                or self.newline_mode):
            return False
        if following_lines is None:
            following_lines = plain_lines(following)
        if following_lines < 0:
            return False
        # Every line feed advances a row: with enough of them, the loop in _cut has nothing to find out.
        if following_lines < self._advances_to_forget() and self._cut(following, b"\n", b"\x1b", b"\r") < 0:
            return False
        if data_lines is None:
            data_lines = plain_lines(data)
        if data_lines < 0:
            return False
        crlf = data.rfind(b"\r\n") if b"\r" in data else -1  # memchr first: a search for two bytes is slower
        if crlf >= 0:
            x, pending, start = 0, False, crlf + 2
            written = (len(data) - start) - data.count(b"\n", start)
        else:
            x, pending = self.cursor.x, self.cursor.pending
            start, written = 0, len(data) - data_lines
        attr = self.cursor.attr
        if b"\x1b" in data:
            written -= sum(map(len, _SGR_BYTES.findall(data, start)))
            attr = self._sgr_at(data, len(data), attr)
        self._jump(x, pending, written, attr)
        return True

    def _cut(self, buf: _Text, lf: _Text, esc: _Text, cr: _Text) -> int:
        """Where a tail of plain text begins that surely scrolls all that came before it out of the screen
        and the scrollback (-1: the text has no such tail). It must advance the cursor by a row at least
        ``2 * rows + scrollback`` times (a row for the stale rows below the cursor, a row for the screen,
        the scrollback): each line feed does, and each ``cols`` characters of a line without escape
        sequences wrap at least once more. A pattern without any line feed is cut inside its line."""
        need = self._advances_to_forget()
        cols, advances, end = self.cols, 0, len(buf)
        while True:
            lf_at = buf.rfind(lf, 0, end)
            length = end - lf_at - 1
            if length and buf[end - 1:end] == cr:
                length -= 1
            wraps = 0
            if self.autowrap and length > cols and buf.find(esc, lf_at + 1, end) < 0:
                wraps = (length - 1) // cols
                left = need - advances
                if wraps >= left:  # within this line: a tail of left * cols + 1 characters wraps left times
                    return end - (end - lf_at - 1 - length) - (left * cols + 1)
            advances += wraps
            if lf_at < 0:
                return -1
            advances += 1
            if advances >= need:  # the tail starts with this line feed (and the CR before it, if any)
                return lf_at - 1 if lf_at and buf[lf_at - 1:lf_at] == cr else lf_at
            end = lf_at

    def _advances_to_forget(self) -> int:
        """Rows the cursor advances by after which nothing from before can be seen (:meth:`_cut`)."""
        return 2 * self.rows + self.scrollback_lines + 1

    def _sgr_at(self, data: bytes, end: int, attr: str) -> str:
        """The SGR in effect at ``end`` of plain text with SGR sequences that started with ``attr``: only
        the sequences after the last full reset count."""
        reset = max(data.rfind(b"\x1b[0m", 0, end), data.rfind(b"\x1b[m", 0, end))
        if reset >= 0:
            attr, start = "", reset
        else:
            start = 0
        for sgr in _SGR_BYTES.findall(data, start, end):
            attr = self._sgr(attr, sgr[2:-1].decode("ascii"))
        return attr

    def _jump(self, x: int, pending: bool, written: int, attr: str) -> None:
        """Fast-forwarding's end: the cursor at the bottom row, ``written`` characters after (x, pending)
        without a carriage return, and a screen and scrollback of nothing from before."""
        # A line feed leaves the column and a pending wrap as they are, so the cursor's place depends only on
        # how many characters were written since the last carriage return: no need to step line by line.
        cols = self.cols
        if self.autowrap:
            p = (cols if pending else x) + written  # a pending wrap is the column just past the last one
            x, pending = (cols - 1, True) if p and p % cols == 0 else (p % cols, False)
        else:
            x = min(cols - 1, x + written)
        self.cursor.x, self.cursor.y, self.cursor.pending, self.cursor.attr = x, self.rows - 1, pending, attr
        grid = self.grid
        for r in range(self.rows):
            grid.chars[r], grid.attrs[r] = grid.blank_row(self._erase_attr())
        if grid is self.main:
            self.scrollback.clear()

    def _fast_forward(self, text: str) -> str:
        """Skip the part of a long plain-text tail whose effect cannot be seen any more.

        Within text made only of printable ASCII, line feeds and SGR sequences (a ``cat``, a build log,
        ``seq``), with the scroll region the whole screen, every line feed once the cursor is at the
        bottom scrolls the screen by one. After ``rows + scrollback`` such scrolls nothing from before
        them is on the screen or in the scrollback: only the cursor's column and the SGR in effect
        carry over. So the model jumps there, computing just those two, and draws the rest.
        """
        esc = text.rfind("\x1b")
        start = 0
        while esc >= 0:  # the plain tail may contain SGR sequences: step back over them
            m = _SGR_ONLY.match(text, esc)
            if m is None:
                start = esc
                m2 = _TOKEN.match(text, esc)
                start = m2.end() if m2 is not None else esc + 1
                break
            esc = text.rfind("\x1b", 0, esc)
        plain = text[start:]
        if len(plain) < FAST_FORWARD_MIN:
            return text
        if start:  # the state the plain tail starts from
            self._run(text[:start])
            text = plain
        if self.top != 0 or self.bottom != self.rows - 1 or self.newline_mode:
            return text
        # \r is common (onlcr): it may stand only in \r\n, which leaves column 0.
        stripped = _SGR_ONLY.sub("", plain) if "\x1b" in plain else plain
        bare = stripped.replace("\r\n", "").replace("\n", "")
        if not (bare.isascii() and bare.isprintable()):  # C loops: a regex search is several times slower
            return text
        cut = self._cut(plain, "\n", "\x1b", "\r")
        if cut < 0:
            return text
        skipped = plain[:cut]
        attr = self.cursor.attr
        if "\x1b" in skipped:
            for sgr in _SGR_ONLY.findall(skipped):
                attr = self._sgr(attr, sgr[2:-1])
            skipped = _SGR_ONLY.sub("", skipped)
        # Column at the cut: from the last \r\n before it (column 0), else from where the cursor was.
        x, pending = self.cursor.x, self.cursor.pending
        crlf = skipped.rfind("\r\n")
        if crlf >= 0:
            x, pending, skipped = 0, False, skipped[crlf + 2:]
        self._jump(x, pending, len(skipped) - skipped.count("\n"), attr)
        return plain[cut:]

    # --------------------------------------------------------------------------------------- drawing

    def _draw(self, run: str) -> None:
        cur = self.cursor
        charset = cur.charsets[cur.gl]
        if charset == "0":
            run = run.translate(_DEC_GRAPHICS)
        elif not run.isascii():
            self._draw_wide(run)
            return
        self._last_char = run[-1]
        grid, cols, attr = self.grid, self.cols, cur.attr
        while run:
            if cur.pending:
                if self.autowrap:
                    self._wrap()
                cur.pending = False
            chars, attrs = grid.chars[cur.y], grid.attrs[cur.y]
            x = cur.x
            n = min(len(run), cols - x)
            if self.insert:
                del chars[cols - n:], attrs[cols - n:]
                chars[x:x] = run[:n]
                attrs[x:x] = [attr] * n
            else:
                if x + n < cols and chars[x + n] == _WIDE_FILL:
                    chars[x + n] = _BLANK
                if x and chars[x] == _WIDE_FILL:
                    chars[x - 1] = _BLANK
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
            width = _width(ch)
            if width == 0:
                # A combining mark joins the character before the cursor.
                x = cur.x if cur.pending else cur.x - 1
                chars = grid.chars[cur.y]
                while x > 0 and chars[x] == _WIDE_FILL:
                    x -= 1
                if x >= 0:
                    chars[x] += ch
                continue
            self._last_char = ch
            if cur.pending and self.autowrap:
                self._wrap()
            cur.pending = False
            if width == 2 and cur.x == cols - 1:
                if self.autowrap:
                    grid.chars[cur.y][cur.x] = _BLANK
                    self._wrap()
                else:
                    continue
            chars, attrs = grid.chars[cur.y], grid.attrs[cur.y]
            x = cur.x
            if self.insert:
                del chars[cols - width:], attrs[cols - width:]
                chars[x:x] = [ch, _WIDE_FILL][:width]
                attrs[x:x] = [cur.attr] * width
            else:
                if chars[x] == _WIDE_FILL and x:
                    chars[x - 1] = _BLANK
                end = x + width
                if end < cols and chars[end] == _WIDE_FILL:
                    chars[end] = _BLANK
                chars[x] = ch
                attrs[x] = cur.attr
                if width == 2:
                    chars[x + 1] = _WIDE_FILL
                    attrs[x + 1] = cur.attr
            if x + width >= cols:
                cur.x = cols - 1
                cur.pending = self.autowrap
            else:
                cur.x = x + width

    def _wrap(self) -> None:
        self.cursor.x = 0
        self._index()

    def _index(self) -> None:
        cur = self.cursor
        if cur.y == self.bottom:
            self._scroll_up(1)
        elif cur.y < self.rows - 1:
            cur.y += 1

    def _reverse_index(self) -> None:
        cur = self.cursor
        if cur.y == self.top:
            self._scroll_down(1)
        elif cur.y > 0:
            cur.y -= 1

    def _scroll_up(self, n: int, top: int | None = None) -> None:
        grid = self.grid
        top = self.top if top is None else top
        n = min(n, self.bottom - top + 1)
        to_history = grid is self.main and top == 0
        for _ in range(n):
            chars, attrs = grid.chars.pop(top), grid.attrs.pop(top)
            if to_history:
                self.scrollback.append(_render_row(chars, attrs))
            chars, attrs = grid.blank_row(self._erase_attr())
            grid.chars.insert(self.bottom, chars)
            grid.attrs.insert(self.bottom, attrs)

    def _scroll_down(self, n: int, top: int | None = None) -> None:
        grid = self.grid
        top = self.top if top is None else top
        n = min(n, self.bottom - top + 1)
        for _ in range(n):
            del grid.chars[self.bottom], grid.attrs[self.bottom]
            chars, attrs = grid.blank_row(self._erase_attr())
            grid.chars.insert(top, chars)
            grid.attrs.insert(top, attrs)

    def _erase_attr(self) -> str:
        """Erased cells take the current background (xterm's bce), nothing else."""
        attr = self.cursor.attr
        if "b=" not in attr:
            return ""
        return ";".join(p for p in attr.split(";") if p.startswith("b="))

    def _erase(self, y: int, x0: int, x1: int) -> None:
        chars, attrs = self.grid.chars[y], self.grid.attrs[y]
        x0, x1 = max(0, x0), min(self.cols, x1)
        if x0 >= x1:
            return
        if x0 > 0 and chars[x0] == _WIDE_FILL:
            chars[x0 - 1] = _BLANK
        if x1 < self.cols and chars[x1] == _WIDE_FILL:
            chars[x1] = _BLANK
        chars[x0:x1] = [_BLANK] * (x1 - x0)
        attrs[x0:x1] = [self._erase_attr()] * (x1 - x0)

    # --------------------------------------------------------------------------------------- controls

    def _control(self, ch: str) -> None:
        cur = self.cursor
        if ch == "\n" or ch == "\x0b" or ch == "\x0c":
            self._index()  # a pending wrap stays pending (as xterm and tmux)
            if self.newline_mode:
                cur.x = 0
                cur.pending = False
        elif ch == "\r":
            cur.x = 0
            cur.pending = False
        elif ch == "\x08":
            if cur.pending:
                cur.pending = False
            elif cur.x > 0:
                cur.x -= 1
        elif ch == "\t":
            cur.x = min([t for t in self.tabs if t > cur.x and t < self.cols] or [self.cols - 1])
            cur.pending = False
        elif ch == "\x0e":
            cur.gl = 1
        elif ch == "\x0f":
            cur.gl = 0
        elif ch == "\x84":
            self._index()
        elif ch == "\x85":
            cur.x = 0
            cur.pending = False
            self._index()
        elif ch == "\x8d":
            self._reverse_index()

    def _esc(self, final: str) -> None:
        cur = self.cursor
        if final == "7":
            self.saved[self.alternate] = cur.copy()
        elif final == "8":
            self._restore_cursor()
        elif final == "D":
            self._index()
        elif final == "E":
            cur.x = 0
            cur.pending = False
            self._index()
        elif final == "M":
            self._reverse_index()
        elif final == "H":
            self.tabs.add(cur.x)
        elif final == "c":
            self._reset()

    def _esc_intermediate(self, inter: str, final: str) -> None:
        if inter in "()*+" and len(inter) == 1:
            index = "()*+".index(inter)
            if index < 2:
                self.cursor.charsets[index] = final
        elif inter == "#" and final == "8":  # DECALN: fill with E
            grid = self.grid
            for r in range(self.rows):
                grid.chars[r], grid.attrs[r] = ["E"] * self.cols, [""] * self.cols
            self.top, self.bottom = 0, self.rows - 1
            self.cursor.x = self.cursor.y = 0

    def _osc(self, body: str) -> None:
        code, _, text = body.partition(";")
        if code in ("0", "2"):
            self.title = _CONTROLS.sub("", text)  # a terminal ignores them in an OSC; redrawn, they would act

    def _restore_cursor(self) -> None:
        saved = self.saved[self.alternate]
        cur = saved.copy()
        cur.x, cur.y = min(cur.x, self.cols - 1), min(cur.y, self.rows - 1)
        self.cursor = cur

    def _reset(self) -> None:
        self.main = _Grid(self.cols, self.rows)
        self.alt = _Grid(self.cols, self.rows)
        self.grid = self.main
        self.cursor = _Cursor()
        self.saved = {False: _Cursor(), True: _Cursor()}
        self.top, self.bottom = 0, self.rows - 1
        self.autowrap, self.insert, self.newline_mode, self.cursor_visible = True, False, False, True
        self.title = ""
        self.tabs = set(range(8, 1024, 8))

    def _sgr(self, attr: str, params: str) -> str:
        key = (attr, params)
        value = self._sgr_cache.get(key)
        if value is None:
            if len(self._sgr_cache) > 4096:
                self._sgr_cache.clear()
            value = self._sgr_cache[key] = _sgr_apply(attr, params)
        return value

    def _csi(self, params: str, inter: str, final: str) -> None:
        cur = self.cursor
        if final == "m":
            if not inter and not params.startswith((">", "?", "<", "=")):
                cur.attr = self._sgr(cur.attr, params)
            return
        private = params[:1] if params[:1] in ("?", ">", "<", "=") else ""
        if private:
            params = params[1:]
        if inter:
            if inter == "!" and final == "p":  # DECSTR
                self._soft_reset()
            return
        args = [int(p) if p.isdigit() else 0 for p in params.split(";")] if params else []
        first = args[0] if args else 0
        n = first or 1
        if private == "?":
            if final in ("h", "l"):
                for mode in args:
                    self._dec_mode(mode, final == "h")
            return
        if private:
            return
        cols, rows = self.cols, self.rows
        if final in ("H", "f"):
            row = (args[0] if args else 0) or 1
            col = (args[1] if len(args) > 1 else 0) or 1
            self._goto(col - 1, row - 1)
        elif final == "A":
            top = self.top if cur.y >= self.top else 0
            cur.y = max(top, cur.y - n)
        elif final == "B":
            bottom = self.bottom if cur.y <= self.bottom else rows - 1
            cur.y = min(bottom, cur.y + n)
        elif final in ("C", "a"):
            cur.x = min(cols - 1, cur.x + n)
        elif final == "D":
            cur.x = max(0, min(cur.x, cols - 1) - n)
        elif final == "E":
            cur.x = 0
            cur.y = min(self.bottom if cur.y <= self.bottom else rows - 1, cur.y + n)
        elif final == "F":
            cur.x = 0
            cur.y = max(self.top if cur.y >= self.top else 0, cur.y - n)
        elif final in ("G", "`"):
            cur.x = min(cols - 1, n - 1)
        elif final == "d":
            self._goto(cur.x, n - 1)
        elif final == "J":
            self._erase_display(first)
        elif final == "K":
            if first == 0:
                self._erase(cur.y, cur.x, cols)
            elif first == 1:
                self._erase(cur.y, 0, cur.x + 1)
            elif first == 2:
                self._erase(cur.y, 0, cols)
        elif final == "X":
            self._erase(cur.y, cur.x, cur.x + n)
        elif final == "@":
            chars, attrs = self.grid.chars[cur.y], self.grid.attrs[cur.y]
            n = min(n, cols - cur.x)
            chars[cur.x:cur.x] = [_BLANK] * n
            attrs[cur.x:cur.x] = [self._erase_attr()] * n
            del chars[cols:], attrs[cols:]
        elif final == "P":
            chars, attrs = self.grid.chars[cur.y], self.grid.attrs[cur.y]
            n = min(n, cols - cur.x)
            del chars[cur.x:cur.x + n], attrs[cur.x:cur.x + n]
            chars.extend([_BLANK] * n)
            attrs.extend([self._erase_attr()] * n)
        elif final == "L":
            if self.top <= cur.y <= self.bottom:
                self._scroll_down(n, cur.y)
                cur.x = 0
        elif final == "M":
            if self.top <= cur.y <= self.bottom:  # DL never moves lines into the scrollback
                self._delete_lines(n)
                cur.x = 0
        elif final == "S":
            self._scroll_up(n)
        elif final == "T":
            self._scroll_down(n)
        elif final == "r":
            top = (args[0] if args else 0) or 1
            bottom = (args[1] if len(args) > 1 else 0) or rows
            if top < bottom <= rows:
                self.top, self.bottom = top - 1, bottom - 1
                self._goto(0, 0)
        elif final == "s":
            self.saved[self.alternate] = cur.copy()
        elif final == "u":
            self._restore_cursor()
        elif final == "b":
            if self._last_char:
                self._draw(self._last_char * min(n, 65535))
        elif final == "g":
            if first == 0:
                self.tabs.discard(cur.x)
            elif first == 3:
                self.tabs.clear()
        elif final == "I":
            for _ in range(n):
                self._control("\t")
        elif final == "Z":
            for _ in range(n):
                cur.x = max([t for t in self.tabs if t < cur.x] or [0])
        elif final in ("h", "l"):
            for mode in args:
                if mode == 4:
                    self.insert = final == "h"
                elif mode == 20:
                    self.newline_mode = final == "h"
        if final not in ("m", "X", "s", "u", "b", "g", "h", "l", "S", "T"):
            cur.pending = False

    def _delete_lines(self, n: int) -> None:
        grid, cur = self.grid, self.cursor
        n = min(n, self.bottom - cur.y + 1)
        for _ in range(n):
            del grid.chars[cur.y], grid.attrs[cur.y]
            chars, attrs = grid.blank_row(self._erase_attr())
            grid.chars.insert(self.bottom, chars)
            grid.attrs.insert(self.bottom, attrs)

    def _goto(self, x: int, y: int) -> None:
        cur = self.cursor
        y = min(self.bottom, self.top + max(0, y)) if cur.origin else min(self.rows - 1, max(0, y))
        cur.x, cur.y = min(self.cols - 1, max(0, x)), y
        cur.pending = False

    def _erase_display(self, how: int) -> None:
        cur = self.cursor
        if how == 0:
            self._erase(cur.y, cur.x, self.cols)
            for y in range(cur.y + 1, self.rows):
                self._erase(y, 0, self.cols)
        elif how == 1:
            for y in range(cur.y):
                self._erase(y, 0, self.cols)
            self._erase(cur.y, 0, cur.x + 1)
        elif how == 2:
            for y in range(self.rows):
                self._erase(y, 0, self.cols)
        elif how == 3 and self.grid is self.main:
            self.scrollback.clear()

    def _soft_reset(self) -> None:
        cur = self.cursor
        self.insert, self.autowrap, self.cursor_visible = False, True, True
        self.top, self.bottom = 0, self.rows - 1
        cur.origin, cur.attr, cur.charsets, cur.gl = False, "", ["B", "B"], 0
        self.saved[self.alternate] = _Cursor()

    def _dec_mode(self, mode: int, on: bool) -> None:
        cur = self.cursor
        if mode == 6:
            cur.origin = on
            self._goto(0, 0)
        elif mode == 7:
            self.autowrap = on
            if not on:
                cur.pending = False
        elif mode == 25:
            self.cursor_visible = on
        elif mode in (47, 1047, 1049):
            if on == self.alternate:
                return
            if on:
                if mode == 1049:
                    self.saved[False] = cur.copy()
                self.grid = self.alt
                if mode == 1049:
                    self.alt.chars = [[_BLANK] * self.cols for _ in range(self.rows)]
                    self.alt.attrs = [[""] * self.cols for _ in range(self.rows)]
            else:
                if mode == 1047:
                    self.alt.chars = [[_BLANK] * self.cols for _ in range(self.rows)]
                    self.alt.attrs = [[""] * self.cols for _ in range(self.rows)]
                self.grid = self.main
                if mode == 1049:
                    self._restore_cursor()
        elif mode == 1048:
            if on:
                self.saved[self.alternate] = cur.copy()
            else:
                self._restore_cursor()

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
                    self.scrollback.append(_render_row(chars, attrs))
            if grid is self.grid:
                cur.y = max(0, cur.y - len(removed))
        self.cols, self.rows = cols, rows
        self.top, self.bottom = 0, rows - 1
        cur.x, cur.y = min(cur.x, cols - 1), min(cur.y, rows - 1)
        cur.pending = False
        for saved in self.saved.values():
            saved.x, saved.y = min(saved.x, cols - 1), min(saved.y, rows - 1)

    # ---------------------------------------------------------------------------------------- output

    def lines(self) -> list[str]:
        """The screen as plain text, one string per row, trailing blanks removed."""
        return ["".join(chars).rstrip() for chars in self.grid.chars]

    def ansi_lines(self) -> list[str]:
        """The screen's rows with SGR sequences (each ends at default attributes)."""
        return [_render_row(c, a) for c, a in zip(self.grid.chars, self.grid.attrs, strict=True)]

    def history(self, count: int | None = None) -> list[str]:
        """The last ``count`` (default: all) scrollback lines, rendered with SGR sequences, oldest first."""
        lines = list(self.scrollback)
        return lines if count is None else lines[max(0, len(lines) - count):] if count else []

    def behind(self, count: int) -> list[str]:
        """What lies above the screen a person sees, the last ``count`` lines: the scrollback, and on the
        alternate screen, the main screen's rows after it (its empty rows at the bottom left out)."""
        lines = list(self.scrollback)
        if self.alternate:
            rows = [_render_row(c, a) for c, a in zip(self.main.chars, self.main.attrs, strict=True)]
            while rows and not rows[-1]:
                rows.pop()
            lines += rows
        return lines[max(0, len(lines) - count):] if count else []

    def render(self, scrollback: int = 0, input_modes: bytes = b"") -> bytes:
        """Bytes that take a terminal of this size, in any state, to this screen.

        First up to ``scrollback`` lines of the main screen's history are printed so that they scroll
        into the terminal's own scrollback, then the main screen's rows; then, if the program is on the
        alternate screen, it is entered and drawn; then the scroll region, modes, charsets, title, SGR
        and cursor. ``input_modes`` (mouse, bracketed paste...: shellper.core.terminal.modes) goes last.
        """
        out = ["\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b[20l\x1b(B\x1b)B\x0f\x1b[0m\x1b[?1049l\x1b[H\x1b[2J"]
        history = self.history(scrollback)
        main_cursor = self.saved[False] if self.alternate else self.cursor
        main_rows = [_render_row(c, a, main_cursor.x if y == main_cursor.y else 0)
                     for y, (c, a) in enumerate(zip(self.main.chars, self.main.attrs, strict=True))]
        if history:
            out.append("\r\n".join(history + main_rows))
        else:
            for y, row in enumerate(main_rows):
                if row:
                    out.append(f"\x1b[{y + 1}H{row}")
        if self.alternate:
            out.append(f"\x1b[{main_cursor.y + 1};{main_cursor.x + 1}H\x1b[?1049h\x1b[H\x1b[2J")
            for y, (c, a) in enumerate(zip(self.alt.chars, self.alt.attrs, strict=True)):
                row = _render_row(c, a, self.cursor.x if y == self.cursor.y else 0)
                if row:
                    out.append(f"\x1b[{y + 1}H{row}")
        cur = self.cursor
        if (self.top, self.bottom) != (0, self.rows - 1):
            out.append(f"\x1b[{self.top + 1};{self.bottom + 1}r")
        if not self.autowrap:
            out.append("\x1b[?7l")
        if self.insert:
            out.append("\x1b[4h")
        if self.newline_mode:
            out.append("\x1b[20h")
        if cur.charsets != ["B", "B"]:
            out.append(f"\x1b({cur.charsets[0]}\x1b){cur.charsets[1]}")
        if cur.gl:
            out.append("\x0e")
        if self.title:
            out.append(f"\x1b]2;{self.title}\x07")
        out.append(_sgr_sequence(cur.attr))
        y = cur.y
        if cur.origin:
            out.append("\x1b[?6h")
            y -= self.top
        out.append(f"\x1b[{y + 1};{cur.x + 1}H")
        out.append("\x1b[?25h" if self.cursor_visible else "\x1b[?25l")
        return "".join(out).encode("utf-8", "replace") + input_modes

    def text(self) -> str:
        return "\n".join(self.lines()).rstrip("\n") + "\n"


def plain_lines(data: bytes) -> int:
    """How many line feeds ``data`` holds if it is plain text (printable ASCII, line feeds, a carriage return
    only before a line feed, complete SGR sequences), else -1. One pass in C over the bytes (deleting the
    printable ones); the checks after it look at what is left, which for a flood is the line feeds alone."""
    rest = data.translate(None, _PRINTABLE_BYTES)
    lfs = rest.count(b"\n")
    if lfs == len(rest):
        return lfs
    crs, escapes = rest.count(b"\r"), rest.count(b"\x1b")
    if (lfs + crs + escapes != len(rest) or (crs and crs != data.count(b"\r\n"))
            or (escapes and _ESC_NOT_SGR.search(data) is not None)):
        return -1
    return lfs


def _width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _render_row(chars: list[str], attrs: list[str], keep: int = 0) -> str:
    """One row as text with SGR sequences; trailing default blanks dropped, except the first ``keep`` cells
    (the cursor's row keeps the blanks before the cursor: a prompt's "$ " stays as the shell wrote it)."""
    if not any(attrs):
        text = "".join(chars).rstrip(" ")
        return text + " " * (keep - len(text)) if keep > len(text) else text
    end = len(chars)
    while end > keep and chars[end - 1] == _BLANK and not attrs[end - 1]:
        end -= 1
    out, current = [], ""
    for ch, attr in zip(chars[:end], attrs[:end], strict=True):
        if attr != current:
            out.append(_sgr_sequence(attr))
            current = attr
        out.append(ch)
    if current:
        out.append("\x1b[0m")
    return "".join(out)
