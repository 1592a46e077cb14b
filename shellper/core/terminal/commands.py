"""What the screen model does for each control, escape and control sequence (sans-IO), as tmux's input.c:
tables keyed by what identifies a sequence (a CSI's private marker, intermediates and final; an ESC's
intermediates and final; a control's character) to named handlers, which act through the screen's writing
operations (shellper.core.terminal.screen). A sequence in no table is ignored, as a terminal ignores it.
"""

from __future__ import annotations

import re

from shellper.core.terminal import parser as vtparse
from shellper.core.terminal.pen import DEFAULT, apply, intern
from shellper.core.terminal.writer import ScreenWriter

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable

    from shellper.core.terminal.writer import ScreenWriter as Screen  # what the handlers act on


__all__ = ["CONTROLS", "CSI", "ESC", "control", "csi", "esc", "osc", "sequence"]

LINK_MAX = 4096
"""Longest OSC 8 hyperlink (parameters and URI) kept; a longer one is dropped (VTE's limit is 2083)."""

_CONTROL_CHARS = re.compile(f"[\x00-\x1f\x7f{vtparse.C1}]")


def _args(params: str) -> list[int]:
    return [int(p) if p.isdigit() else 0 for p in params.split(";")] if params else []


def _first(params: str) -> int:
    """The first parameter, 0 when absent (as a sequence whose default is 0 reads it)."""
    head = params.split(";", 1)[0]
    return int(head) if head.isdigit() else 0


def _count(params: str) -> int:
    """The first parameter as a count: absent or 0 is 1."""
    return _first(params) or 1


# ------------------------------------------------------------------------------------- cursor movement

def cursor_position(s: Screen, params: str) -> None:
    row, _, col = params.partition(";")  # the commonest sequence of a redraw: no list made
    s.goto(_count(col) - 1, _count(row) - 1)


def cursor_up(s: Screen, params: str) -> None:
    cur = s.cursor
    cur.y = max(s.top if cur.y >= s.top else 0, cur.y - _count(params))


def cursor_down(s: Screen, params: str) -> None:
    cur = s.cursor
    cur.y = min(s.bottom if cur.y <= s.bottom else s.rows - 1, cur.y + _count(params))


def cursor_forward(s: Screen, params: str) -> None:
    s.cursor.x = min(s.cols - 1, s.cursor.x + _count(params))


def cursor_back(s: Screen, params: str) -> None:
    s.cursor.x = max(0, min(s.cursor.x, s.cols - 1) - _count(params))


def cursor_next_line(s: Screen, params: str) -> None:
    s.cursor.x = 0
    cursor_down(s, params)


def cursor_previous_line(s: Screen, params: str) -> None:
    s.cursor.x = 0
    cursor_up(s, params)


def cursor_column(s: Screen, params: str) -> None:
    s.cursor.x = min(s.cols - 1, _count(params) - 1)


def line_position(s: Screen, params: str) -> None:
    s.goto(s.cursor.x, _count(params) - 1)


def save_cursor(s: Screen, params: str) -> None:
    s.save_cursor()


def restore_cursor(s: Screen, params: str) -> None:
    s.restore_cursor()


# ----------------------------------------------------------------------------------------------- erase

def erase_in_display(s: Screen, params: str) -> None:
    how, cur = _first(params), s.cursor
    if how == 0:
        s.erase(cur.y, cur.x, s.cols)
        s.erase_rows(cur.y + 1, s.rows)
    elif how == 1:
        s.erase_rows(0, cur.y)
        s.erase(cur.y, 0, cur.x + 1)
    elif how == 2:
        s.erase_rows(0, s.rows)
    elif how == 3 and s.grid is s.main:
        s.scrollback.clear()


def erase_in_line(s: Screen, params: str) -> None:
    how, cur = _first(params), s.cursor
    if how == 0:
        s.erase(cur.y, cur.x, s.cols)
    elif how == 1:
        s.erase(cur.y, 0, cur.x + 1)
    elif how == 2:
        s.erase(cur.y, 0, s.cols)


def erase_characters(s: Screen, params: str) -> None:
    s.erase(s.cursor.y, s.cursor.x, s.cursor.x + _count(params))


# -------------------------------------------------------------------------------- insert, delete, scroll

def insert_characters(s: Screen, params: str) -> None:
    s.grid.insert_cells(s.cursor.y, s.cursor.x, _count(params), s.erase_pen())


def delete_characters(s: Screen, params: str) -> None:
    s.grid.delete_cells(s.cursor.y, s.cursor.x, _count(params), s.erase_pen())


def insert_lines(s: Screen, params: str) -> None:
    if s.top <= s.cursor.y <= s.bottom:
        s.scroll_down(_count(params), s.cursor.y)
        s.cursor.x = 0


def delete_lines(s: Screen, params: str) -> None:
    if s.top <= s.cursor.y <= s.bottom:  # DL never moves lines into the scrollback
        s.grid.scroll_up(s.cursor.y, s.bottom, _count(params), s.erase_pen(), None)
        s.cursor.x = 0


def scroll_up(s: Screen, params: str) -> None:
    s.scroll_up(_count(params))


def scroll_down(s: Screen, params: str) -> None:
    s.scroll_down(_count(params))


def set_scroll_region(s: Screen, params: str) -> None:
    args = _args(params)
    top = (args[0] if args else 0) or 1
    bottom = (args[1] if len(args) > 1 else 0) or s.rows
    if top < bottom <= s.rows:
        s.top, s.bottom = top - 1, bottom - 1
        s.goto(0, 0)


def repeat_character(s: Screen, params: str) -> None:
    s.repeat(_count(params))


# -------------------------------------------------------------------------------------------- tab stops

def tab_clear(s: Screen, params: str) -> None:
    how = _first(params)
    if how == 0:
        s.tabs.discard(s.cursor.x)
    elif how == 3:
        s.tabs.clear()


def tab_forward(s: Screen, params: str) -> None:
    for _ in range(_count(params)):
        horizontal_tab(s)


def tab_backward(s: Screen, params: str) -> None:
    cur = s.cursor
    for _ in range(_count(params)):
        cur.x = max([t for t in s.tabs if t < cur.x] or [0])


# ------------------------------------------------------------------------------------------------ modes

def set_mode(s: Screen, params: str) -> None:
    _ansi_modes(s, params, True)


def reset_mode(s: Screen, params: str) -> None:
    _ansi_modes(s, params, False)


def _ansi_modes(s: Screen, params: str, on: bool) -> None:
    for mode in _args(params):
        if mode == 4:
            s.insert = on
        elif mode == 20:
            s.newline_mode = on


def set_private_mode(s: Screen, params: str) -> None:
    for mode in _args(params):
        _private_mode(s, mode, True)


def reset_private_mode(s: Screen, params: str) -> None:
    for mode in _args(params):
        _private_mode(s, mode, False)


def _private_mode(s: Screen, mode: int, on: bool) -> None:
    cur = s.cursor
    if mode == 5:
        s.reverse_video = on
    elif mode == 6:
        cur.origin = on
        s.goto(0, 0)
    elif mode == 7:
        s.autowrap = on
        if not on:
            cur.pending = False
    elif mode == 25:
        s.cursor_visible = on
    elif mode in (47, 1047, 1049):
        s.set_alternate(mode, on)
    elif mode == 1048:
        if on:
            s.save_cursor()
        else:
            s.restore_cursor()


def select_graphic_rendition(s: Screen, params: str) -> None:
    s.cursor.attr = apply(s.cursor.attr, params)


def soft_reset(s: Screen, params: str) -> None:
    s.soft_reset()


CSI: dict[tuple[str, str, str], Callable[[Screen, str], None]] = {
    ("", "", "A"): cursor_up, ("", "", "B"): cursor_down, ("", "", "C"): cursor_forward,
    ("", "", "a"): cursor_forward, ("", "", "D"): cursor_back, ("", "", "E"): cursor_next_line,
    ("", "", "F"): cursor_previous_line, ("", "", "G"): cursor_column, ("", "", "`"): cursor_column,
    ("", "", "H"): cursor_position, ("", "", "f"): cursor_position, ("", "", "d"): line_position,
    ("", "", "s"): save_cursor, ("", "", "u"): restore_cursor,
    ("", "", "J"): erase_in_display, ("", "", "K"): erase_in_line, ("", "", "X"): erase_characters,
    ("", "", "@"): insert_characters, ("", "", "P"): delete_characters, ("", "", "L"): insert_lines,
    ("", "", "M"): delete_lines, ("", "", "S"): scroll_up, ("", "", "T"): scroll_down,
    ("", "", "r"): set_scroll_region, ("", "", "b"): repeat_character,
    ("", "", "g"): tab_clear, ("", "", "I"): tab_forward, ("", "", "Z"): tab_backward,
    ("", "", "h"): set_mode, ("", "", "l"): reset_mode, ("?", "", "h"): set_private_mode,
    ("?", "", "l"): reset_private_mode, ("", "", "m"): select_graphic_rendition, ("", "!", "p"): soft_reset,
}
"""Control sequences by (private marker, intermediates, final)."""

KEEPS_PENDING_WRAP = frozenset("mXsubghlST")
"""Finals of plain CSI sequences after which a pending wrap stays pending (as xterm): every other one, known
or not, ends it."""


_PLAIN_CSI = {final: handler for (private, intermediates, final), handler in CSI.items()
              if not private and not intermediates}
"""The commonest part of :data:`CSI`, by final alone: one lookup without building a key."""


def csi(s: Screen, params: str, intermediates: str, final: str) -> None:
    """A control sequence; ``params`` starts with its private marker, if any."""
    if not intermediates and not (params and params[0] in "<=>?"):
        handler = _PLAIN_CSI.get(final)
        if handler is not None:
            handler(s, params)
        if final not in KEEPS_PENDING_WRAP:
            s.cursor.pending = False
        return
    private = params[:1] if params[:1] in ("?", ">", "<", "=") else ""
    handler = CSI.get((private, intermediates, final))
    if handler is not None:
        handler(s, params[1:] if private else params)


# ------------------------------------------------------------------------------------ escape sequences

def next_line(s: Screen) -> None:
    carriage_return(s)
    s.index()


def set_tab_stop(s: Screen) -> None:
    s.tabs.add(s.cursor.x)


def screen_alignment(s: Screen) -> None:
    """DECALN: the screen filled with E, the scroll region the whole screen, the cursor home."""
    grid = s.grid
    for r in range(s.rows):
        grid.chars[r], grid.attrs[r] = ["E"] * s.cols, [DEFAULT] * s.cols
    s.top, s.bottom = 0, s.rows - 1
    s.cursor.x = s.cursor.y = 0


def full_reset(s: Screen) -> None:
    s.reset()


ESC: dict[tuple[str, str], Callable[[Screen], None]] = {
    ("", "7"): ScreenWriter.save_cursor, ("", "8"): ScreenWriter.restore_cursor, ("", "D"): ScreenWriter.index,
    ("", "E"): next_line, ("", "M"): ScreenWriter.reverse_index, ("", "H"): set_tab_stop, ("", "c"): full_reset,
    ("#", "8"): screen_alignment,
}
"""Escape sequences by (intermediates, final); the character set designations are :func:`designate`."""


def designate(s: Screen, intermediate: str, final: str) -> None:
    """SCS: ``ESC ( F`` and ``ESC ) F`` choose G0's and G1's set (``0``: DEC line drawing)."""
    s.cursor.charsets["()".index(intermediate)] = final


def esc(s: Screen, intermediates: str, final: str) -> None:
    handler = ESC.get((intermediates, final))
    if handler is not None:
        handler(s)
    elif intermediates in ("(", ")"):
        designate(s, intermediates, final)


# ------------------------------------------------------------------------------------------- controls

def line_feed(s: Screen) -> None:
    s.index()  # a pending wrap stays pending (as xterm and tmux)
    if s.newline_mode:
        carriage_return(s)


def carriage_return(s: Screen) -> None:
    s.cursor.x = 0
    s.cursor.pending = False


def backspace(s: Screen) -> None:
    cur = s.cursor
    if cur.pending:
        cur.pending = False
    elif cur.x > 0:
        cur.x -= 1


def horizontal_tab(s: Screen) -> None:
    cur = s.cursor
    cur.x = min([t for t in s.tabs if cur.x < t < s.cols] or [s.cols - 1])
    cur.pending = False


def shift_out(s: Screen) -> None:
    s.cursor.gl = 1


def shift_in(s: Screen) -> None:
    s.cursor.gl = 0


CONTROLS: dict[str, Callable[[Screen], None]] = {
    "\n": line_feed, "\x0b": line_feed, "\x0c": line_feed, "\r": carriage_return, "\x08": backspace,
    "\t": horizontal_tab, "\x0e": shift_out, "\x0f": shift_in, "\x84": ScreenWriter.index, "\x85": next_line,
    "\x88": set_tab_stop, "\x8d": ScreenWriter.reverse_index,
}
"""C0 and C1 controls by character."""


def control(s: Screen, ch: str) -> None:
    handler = CONTROLS.get(ch)
    if handler is not None:
        handler(s)


# ------------------------------------------------------------------------------------- strings, others

def osc(s: Screen, body: str) -> None:
    """OSC 0 and 2 set the title, OSC 8 the hyperlink the next characters are drawn with."""
    code, _, text = body.partition(";")
    if code in ("0", "2"):
        s.title = _CONTROL_CHARS.sub("", text)  # a terminal ignores them in an OSC; redrawn, they would act
    elif code == "8":
        uri = text.partition(";")[2]
        link = _CONTROL_CHARS.sub("", text) if uri and len(text) <= LINK_MAX else ""
        if link != s.cursor.attr.link:
            s.cursor.attr = intern(s.cursor.attr._replace(link=link))


def sequence(s: Screen, token: str) -> None:
    """A token of the grammar none of the screen's fast forms took: its C0 controls are executed, then it."""
    seq = vtparse.parse(token)
    for ch in seq.controls:
        control(s, ch)
    if not seq.dispatched:
        return
    kind = seq.kind
    if kind is vtparse.Kind.CSI:
        csi(s, seq.private + seq.params, seq.intermediates, seq.final)
    elif kind is vtparse.Kind.ESC:
        esc(s, seq.intermediates, seq.final)
    elif kind is vtparse.Kind.OSC:
        osc(s, seq.data)
    elif kind is vtparse.Kind.CONTROL:
        control(s, seq.data)
