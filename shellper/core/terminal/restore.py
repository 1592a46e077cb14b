"""What ``shellper attach`` writes last, so the person's terminal is left as a fresh one (sans-IO).

Why: attach shows the session's output as it was written, so whatever state that output set is the person's
terminal's state too. :class:`~shellper.core.terminal.modes.ModeTracker` follows the modes a program switches
on and off; the state here is what it does not follow (the pen, insert mode, autowrap, the character sets
and the shift state, the tab stops, reverse video), and is written whole on every detach, exit or lost
connection: it costs a few dozen bytes, is a no-op for a session that never changed it, and tmux, which
draws the terminal itself, leaves none of it behind either.
"""

from __future__ import annotations

__all__ = ["DEFAULT_COLUMNS", "PEN_AND_MODES", "TAB_WIDTH", "restore_sequence", "tab_stops_sequence"]

TAB_WIDTH = 8
"""A fresh terminal's tab stops: every 8 columns (the 9th, the 17th, ...)."""

DEFAULT_COLUMNS = 80
"""The width assumed where the terminal reports none."""

PEN_AND_MODES = (
    b"\x1b[m"  # SGR 0: the default pen (colours, bold, underline, ... off)
    b"\x1b[4l"  # IRM off: characters replace, not insert
    b"\x1b[?7h"  # DECAWM on: a full row wraps
    b"\x1b[?5l"  # DECSCNM off: no reverse video
    # G0 and G1 both ASCII, as xterm, VTE and tmux start (the Linux console's G1 is line drawing, but
    # what uses G1 there designates it first), and SI: G0 into GL, so letters are letters again.
    b"\x1b(B\x1b)B\x0f"
)
"""The pen and the modes, whatever they were. First in :func:`restore_sequence`: the DECSC there saves them,
and its DECRC must bring back the default pen and character sets, not the session's."""


def tab_stops_sequence(columns: int) -> bytes:
    """Tab stops every :data:`TAB_WIDTH` columns on a terminal ``columns`` wide, the cursor kept.

    TBC (clear all) then an HTS every 8 columns along the row is what xterm, VTE and tmux's own screens all
    honour; the DECST8C after it (``CSI ? 5 W``), which tmux ignores, lets xterm and VTE set the stops past
    today's width too, for a window widened later.
    """
    if columns < 1:
        columns = DEFAULT_COLUMNS
    stops = (columns - 1) // TAB_WIDTH
    # DECSC/DECRC keep the cursor (CR then CUF moves it); CR also ends a pending wrap, so CUF starts at column 1.
    return b"\x1b7\x1b[3g\r" + b"\x1b[%dC\x1bH" % TAB_WIDTH * stops + b"\x1b8\x1b[?5W"


def restore_sequence(columns: int | None) -> bytes:
    """Everything :mod:`shellper.core.terminal.modes`' reset leaves as the session set it, back to a fresh
    terminal's, for a terminal ``columns`` wide (None: unknown, :data:`DEFAULT_COLUMNS`). Written after that
    reset: its DECRC would bring back the session's pen and character sets."""
    return PEN_AND_MODES + tab_stops_sequence(columns or DEFAULT_COLUMNS)
