"""restore_sequence: what attach writes last takes a model terminal (pyte), whatever the session left set in
it, back to a fresh terminal's pen, modes, character sets, shift state and tab stops, the cursor kept."""

from __future__ import annotations

import pyte
import pytest

from shellper.core.terminal.restore import DEFAULT_COLUMNS, restore_sequence, tab_stops_sequence

ROWS = 24


def model(columns: int, shown: bytes) -> pyte.Screen:
    screen = pyte.Screen(columns, ROWS)
    stream = pyte.ByteStream(screen)
    stream.use_utf8 = False  # in UTF-8 mode pyte ignores the character sets and SO/SI
    stream.feed(shown)
    return screen


def assert_fresh(screen: pyte.Screen) -> None:
    fresh = pyte.Screen(screen.columns, screen.lines)
    assert screen.cursor.attrs == fresh.cursor.attrs
    assert screen.mode == fresh.mode
    assert sorted(screen.tabstops) == list(range(8, screen.columns, 8))
    assert (screen.charset, screen.g0_charset, screen.g1_charset) == (0, pyte.charsets.LAT1_MAP, pyte.charsets.LAT1_MAP)


DIRTY = [
    (b"", "nothing set"),
    (b"\x1b[1;38;5;196;48;5;22m\x1b[4h\x1b[?7l\x1b[3g\x1b)0\x0e\x1b[?5h", "issue 28's repro, with reverse video"),
    (b"\x1b(0", "G0 line drawing"),
    (b"\x1b)0\x0e\x1b(0\x0f", "G1 shifted out and in, G0 line drawing"),
    (b"\x1b[5G\x1bH\x1b[13G\x1bH\x1b[30G", "extra tab stops"),
    (b"\x1b[9G\x1b[0g\x1b[17G\x1b[g", "tab stops cleared one by one"),
    (b"\x1b[7;5;3;4;9m\x1b[38;2;1;2;3m\x1b[48;5;99m", "reverse, blink, italics, underline, strikethrough, colours"),
    (b"\x1b[5;20Hhello\x1b[4h\x1b[?7l", "text, then insert mode and no autowrap"),
    (b"\x1b[24;80Hx", "the last cell written"),
]


@pytest.mark.parametrize("dirty", [d for d, _ in DIRTY], ids=[why for _, why in DIRTY])
def test_restore_leaves_a_fresh_terminal_with_the_cursor_kept(dirty: bytes) -> None:
    before = model(80, dirty)
    after = model(80, dirty + restore_sequence(80))
    assert_fresh(after)
    # (pyte's x == 80 is a pending wrap, which DECRC may not bring back: the cursor stays in the last column)
    assert (after.cursor.x, after.cursor.y) == (min(before.cursor.x, 79), before.cursor.y)
    assert after.display == before.display  # nothing drawn, nothing erased


@pytest.mark.parametrize("columns", [1, 7, 8, 9, 16, 17, 80, 132, 1000])
def test_tab_stops_every_8_columns_at_any_width(columns: int) -> None:
    assert_fresh(model(columns, b"\x1b[3g\x1b[3G\x1bH" + restore_sequence(columns)))


def test_an_unknown_width_is_taken_as_80_columns() -> None:
    assert restore_sequence(None) == restore_sequence(DEFAULT_COLUMNS)
    assert tab_stops_sequence(0) == tab_stops_sequence(-3) == tab_stops_sequence(DEFAULT_COLUMNS)


def test_short_enough_to_write_on_every_detach() -> None:
    assert len(restore_sequence(80)) < 128
