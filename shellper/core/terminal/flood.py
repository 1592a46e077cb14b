"""The screen model's plain-text fast path (sans-IO): a flood is skipped to the part that can still be seen.

Within text made only of printable ASCII, line feeds and SGR sequences (a ``cat``, a build log, ``seq``),
with the scroll region the whole screen, every line feed once the cursor is at the bottom scrolls the screen
by one. After ``rows + scrollback`` such scrolls nothing from before them is on the screen or in the
scrollback: only the cursor's column and the pen in effect carry over. So the model jumps there, computing
just those two, and draws the rest (bench/NOTES.md, "A screen model").
"""

from __future__ import annotations

import re

from shellper.core.terminal import parser as vtparse
from shellper.core.terminal.pen import Pen, apply

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import TypeVar

    from shellper.core.terminal.writer import ScreenWriter as Screen

    _Text = TypeVar("_Text", str, bytes)

__all__ = ["fast_forward", "fast_forward_bytes", "plain_lines", "plain_tail", "skip"]

_SGR_ONLY = re.compile(r"\x1b\[[0-9;:]*m")
_PRINTABLE_BYTES = bytes(range(0x20, 0x7F))
_SGR_BYTES = re.compile(rb"\x1b\[[0-9;:]*m")
_ESC_NOT_SGR = re.compile(rb"\x1b(?!\[[0-9;:]*m)")
"""Plain text is printable ASCII, line feeds, carriage returns before them, and these (:func:`plain_lines`)."""


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


def _whole_screen(s: Screen) -> bool:
    """The scroll region is the whole screen and a line feed is not a CRLF (LNM): the fast path's premises."""
    return s.top == 0 and s.bottom == s.rows - 1 and not s.newline_mode


def fast_forward_bytes(s: Screen, data: bytes) -> bytes:
    """:func:`fast_forward` for a batch of plain ASCII text, line feeds and SGR sequences (the usual
    flood, a coloured log), done on the bytes: the skipped part is never decoded, only counted."""
    if not _whole_screen(s) or plain_lines(data) < 0:
        return data
    cut = _cut(s, data, b"\n", b"\x1b", b"\r")
    if cut < 0:
        return data
    crlf = data.rfind(b"\r\n", 0, cut)
    x, pending = (0, False) if crlf >= 0 else (s.cursor.x, s.cursor.pending)
    start = crlf + 2 if crlf >= 0 else 0
    written = (cut - start) - data.count(b"\n", start, cut)
    pen = s.cursor.attr
    if b"\x1b" in data:
        written -= sum(map(len, _SGR_BYTES.findall(data, start, cut)))
        pen = _pen_at(data, cut, pen)
    _jump(s, x, pending, written, pen)
    return data[cut:]


def skip(s: Screen, data: bytes, following: bytes, data_lines: int | None = None,
         following_lines: int | None = None) -> bool:
    """Take ``data`` without drawing it when ``following`` (the output right after it) surely scrolls
    all of it away: both plain text (printable ASCII, CRLF, LF, SGR), and ``following`` alone long
    enough (:func:`_cut`). Only the cursor's column and the pen in effect carry over. False: nothing was
    done, and ``data`` is to be fed. ``data_lines`` and ``following_lines`` are :func:`plain_lines` of
    each when the caller has them (a backlog's pieces are each checked once, as ``following`` and then
    as ``data``). This lets a backlog be fed in small pieces, each skipped for the next, as cheaply as
    one large batch is fast-forwarded (and the result is the same)."""
    if not _whole_screen(s):
        return False
    if following_lines is None:
        following_lines = plain_lines(following)
    if following_lines < 0:
        return False
    # Every line feed advances a row: with enough of them, the loop in _cut has nothing to find out.
    if following_lines < _advances_to_forget(s) and _cut(s, following, b"\n", b"\x1b", b"\r") < 0:
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
        x, pending = s.cursor.x, s.cursor.pending
        start, written = 0, len(data) - data_lines
    pen = s.cursor.attr
    if b"\x1b" in data:
        written -= sum(map(len, _SGR_BYTES.findall(data, start)))
        pen = _pen_at(data, len(data), pen)
    _jump(s, x, pending, written, pen)
    return True


def _cut(s: Screen, buf: _Text, lf: _Text, esc: _Text, cr: _Text) -> int:
    """Where a tail of plain text begins that surely scrolls all that came before it out of the screen
    and the scrollback (-1: the text has no such tail). It must advance the cursor by a row at least
    ``2 * rows + scrollback`` times (a row for the stale rows below the cursor, a row for the screen,
    the scrollback): each line feed does, and each ``cols`` characters of a line without escape
    sequences wrap at least once more. A pattern without any line feed is cut inside its line."""
    need = _advances_to_forget(s)
    cols, advances, end = s.cols, 0, len(buf)
    while True:
        lf_at = buf.rfind(lf, 0, end)
        length = end - lf_at - 1
        if length and buf[end - 1:end] == cr:
            length -= 1
        wraps = 0
        if s.autowrap and length > cols and buf.find(esc, lf_at + 1, end) < 0:
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


def _advances_to_forget(s: Screen) -> int:
    """Rows the cursor advances by after which nothing from before can be seen (:func:`_cut`)."""
    return 2 * s.rows + s.scrollback_lines + 1


def _pen_at(data: bytes, end: int, pen: Pen) -> Pen:
    """The pen in effect at ``end`` of plain text with SGR sequences that started with ``pen``: only the
    sequences after the last full reset count (a reset keeps the hyperlink, so it is the start's)."""
    reset = max(data.rfind(b"\x1b[0m", 0, end), data.rfind(b"\x1b[m", 0, end))
    start = 0
    if reset >= 0:
        pen, start = apply(pen, ""), reset
    for sgr in _SGR_BYTES.findall(data, start, end):
        pen = apply(pen, sgr[2:-1].decode("ascii"))
    return pen


def _jump(s: Screen, x: int, pending: bool, written: int, pen: Pen) -> None:
    """Fast-forwarding's end: the cursor at the bottom row, ``written`` characters after (x, pending)
    without a carriage return, and a screen and scrollback of nothing from before."""
    # A line feed leaves the column and a pending wrap as they are, so the cursor's place depends only on
    # how many characters were written since the last carriage return: no need to step line by line.
    cols = s.cols
    if s.autowrap:
        p = (cols if pending else x) + written  # a pending wrap is the column just past the last one
        x, pending = (cols - 1, True) if p and p % cols == 0 else (p % cols, False)
    else:
        x = min(cols - 1, x + written)
    cur = s.cursor
    cur.x, cur.y, cur.pending, cur.attr = x, s.rows - 1, pending, pen
    s.grid.fill(s.erase_pen())
    if s.grid is s.main:
        s.scrollback.clear()


def plain_tail(text: str) -> int:
    """Where the tail of ``text`` begins that holds no escape sequence but SGR (maybe all of it)."""
    esc = text.rfind("\x1b")
    while esc >= 0:  # the plain tail may contain SGR sequences: step back over them
        if _SGR_ONLY.match(text, esc) is None:
            m = re.compile(vtparse.TOKEN).match(text, esc)  # ends a sequence where the screen's grammar does
            return m.end() if m is not None else esc + 1
        esc = text.rfind("\x1b", 0, esc)
    return 0


def fast_forward(s: Screen, plain: str) -> str:
    """Skip the part of a long tail of plain text (:func:`plain_tail`) whose effect cannot be seen any
    more; what is returned is still to be run."""
    if not _whole_screen(s):
        return plain
    # \r is common (onlcr): it may stand only in \r\n, which leaves column 0.
    stripped = _SGR_ONLY.sub("", plain) if "\x1b" in plain else plain
    bare = stripped.replace("\r\n", "").replace("\n", "")
    if not (bare.isascii() and bare.isprintable()):  # C loops: a regex search is several times slower
        return plain
    cut = _cut(s, plain, "\n", "\x1b", "\r")
    if cut < 0:
        return plain
    skipped = plain[:cut]
    pen = s.cursor.attr
    if "\x1b" in skipped:
        for sgr in _SGR_ONLY.findall(skipped):
            pen = apply(pen, sgr[2:-1])
        skipped = _SGR_ONLY.sub("", skipped)
    # Column at the cut: from the last \r\n before it (column 0), else from where the cursor was.
    x, pending = s.cursor.x, s.cursor.pending
    crlf = skipped.rfind("\r\n")
    if crlf >= 0:
        x, pending, skipped = 0, False, skipped[crlf + 2:]
    _jump(s, x, pending, len(skipped) - skipped.count("\n"), pen)
    return plain[cut:]
