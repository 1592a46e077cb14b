"""ModeTracker: mode tables, split sequences, offsets, preamble/reset, bounded history."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shellper.core.structs import replace
from shellper.core.terminal import parser as vtparse
from shellper.core.terminal.modes import (
    CARRY_MAX,
    CHECKPOINT_BYTES,
    FULL_RESET_SEQUENCE,
    MAX_HISTORY,
    TITLE_MAX,
    ModeOffsetError,
    ModeTracker,
    TerminalModes,
)

D = TerminalModes()


def fed(*chunks: bytes) -> ModeTracker:
    tracker = ModeTracker()
    offset = 0
    for chunk in chunks:
        tracker.feed(offset, chunk)
        offset += len(chunk)
    return tracker


# ------------------------------------------------------------------------- tables

MODE_TABLE: list[tuple[bytes, TerminalModes]] = [
    (b"", D),
    (b"plain text, no escapes\r\n", D),
    (b"\x1b[?1049h", replace(D, alt_screen=True)),
    (b"\x1b[?1047h", replace(D, alt_screen=True)),
    (b"\x1b[?47h", replace(D, alt_screen=True)),
    (b"\x1b[?1049h\x1b[?1049l", D),
    (b"\x1b[?1049h\x1b[?47l", D),
    (b"\x1b[?1049;2004h", replace(D, alt_screen=True, bracketed_paste=True)),
    (b"\x1b[?1;1004;1006;1002h", replace(D, app_cursor_keys=True, focus_reporting=True,
                                         mouse_encoding=1006, mouse_tracking=1002, mouse_modes=(1002, 1006))),
    (b"\x1b[?25l", replace(D, cursor_visible=False)),
    (b"\x1b[?25l\x1b[?25h", D),
    (b"\x1b[?2004h", replace(D, bracketed_paste=True)),
    (b"\x1b[?1004h", replace(D, focus_reporting=True)),
    (b"\x1b[?1h", replace(D, app_cursor_keys=True)),
    (b"\x1b[?9h", replace(D, mouse_tracking=9, mouse_modes=(9,))),
    # last protocol wins (xterm); each stays on by its own number (terminals that keep them apart)
    (b"\x1b[?1000h\x1b[?1003h", replace(D, mouse_tracking=1003, mouse_modes=(1000, 1003))),
    (b"\x1b[?1003h\x1b[?1000l", replace(D, mouse_modes=(1003,))),  # any reset switches tracking off
    (b"\x1b[?1003h\x1b[?1000h\x1b[?1000l\x1b[?1003l", D),
    (b"\x1b[?1006h\x1b[?1015h", replace(D, mouse_encoding=1015, mouse_modes=(1006, 1015))),
    (b"\x1b[?1006h\x1b[?1005l", replace(D, mouse_modes=(1006,))),
    (b"\x1b[?1000;1006h\x1b[?1000l", replace(D, mouse_encoding=1006, mouse_modes=(1006,))),  # encoding apart
    (b"\x1b[?1001h\x1b[?1016h", replace(D, mouse_modes=(1001, 1016))),
    (b"\x1b[?2026h", replace(D, sync_output=True)),
    (b"\x1b[?6h", replace(D, origin_mode=True)),
    (b"\x1b[>4;2m", replace(D, modify_other_keys=2)),
    (b"\x1b[>4;1m\x1b[>4m", D),
    (b"\x1b[>4;2m\x1b[>4n", D),
    (b"\x1b[>4;2m\x1b[>m", D),
    (b"\x1b[>4;2m\x1b[>1;2m\x1b[>0m", replace(D, modify_other_keys=2)),  # other resources: not followed
    (b"\x1b[22;0t\x1b[22;2t\x1b[22t", replace(D, title_stack=3)),
    (b"\x1b[22;0;0t\x1b[22;2t\x1b[22;1t", replace(D, title_stack=3)),  # what vim 9 pushes
    (b"\x1b[22;0t\x1b[23;0t\x1b[23;0t", D),  # a pop of an empty stack does nothing
    (b"\x1b[>1u", replace(D, kitty_keyboard=1, kitty_flags=1)),
    (b"\x1b[>1u\x1b[>3u\x1b[<u", replace(D, kitty_keyboard=1, kitty_flags=3)),
    (b"\x1b[>1u\x1b[>3u\x1b[<5u", D),
    (b"\x1b[=5;1u", replace(D, kitty_flags=5)),
    (b"\x1b[=5;1u\x1b[=2;2u\x1b[=4;3u", replace(D, kitty_flags=3)),
    (b"\x1b[2 q", replace(D, cursor_style=2)),
    (b"\x1b[2 q\x1b[ q", D),
    (b"\x1b[5;20r", replace(D, scroll_region=(5, 20))),
    (b"\x1b[5;20r\x1b[r", D),
    (b"\x1b[5;20r\x1b[;r", D),
    (b"\x1b[;24r", replace(D, scroll_region=(0, 24))),
    (b"\x1b[5;20r\x1b[?6h\x1b[!p", D),  # DECSTR: margins and origin mode too
    (b"\x1b=", replace(D, app_keypad=True)),
    (b"\x1b=\x1b>", D),
    (b"\x1b[?66h", replace(D, app_keypad=True)),
    (b"\x1b]0;my title\x07", replace(D, title=b"my title")),
    (b"\x1b]2;t\xc3\xa9\x1b\\", replace(D, title="té".encode())),
    (b"\x1b]2;a\x07\x1b]0;b\x07", replace(D, title=b"b")),
    (b"\x1b]2;\x07", replace(D, title=b"")),
    (b"\x1b]1;icon only\x07", D),
    (b"\x1b]7;file:///tmp\x07", D),
    (b"\x1b]2;" + b"x" * (TITLE_MAX + 1) + b"\x07", D),  # over the cap: ignored
    (b"\x1b]2;" + b"x" * TITLE_MAX + b"\x07", replace(D, title=b"x" * TITLE_MAX)),
    (b"\x1b[?1049h\x1b[?1000h\x1b]2;t\x07\x1bc", D),  # RIS resets everything
    (b"\x1b[?25l\x1b[?1h\x1b=\x1b[?1049h\x1b[!p", replace(D, alt_screen=True)),  # DECSTR
    # not tracked / not mode sets
    (b"\x1b[1h\x1b[4h", D),  # ANSI (non-private) modes
    (b"\x1b[?1049$p", D),  # DECRQM query
    (b"\x1b[?12h\x1b[?7l", D),  # blink, autowrap: untracked
    (b"\x1b[?1r", D),  # XTRESTORE: untracked
    (b"\x1b[?;h", D),
    (b"\x1b[31m\x1b[2J\x1b[H\x1b(B\x1b7\x1b8", D),
    # 8-bit forms: C1 controls as UTF-8 and as lone bytes; a byte 0x9B that ends a character is not one
    ("\x9b?1049h".encode(), replace(D, alt_screen=True)),
    (b"\x9b?1049h\x9d2;t\x9c", replace(D, alt_screen=True, title=b"t")),
    ("\x9d2;\u00e9\x9c".encode(), replace(D, title="\u00e9".encode())),
    ("\u201b?1049h \u201b?25l".encode(), D),
    (b"\x90q\x1b[?1049h\x98\x9b?25l", replace(D, alt_screen=True, cursor_visible=False)),
]
_IDS = [f"{i}:{data[:24]!r}" for i, (data, _) in enumerate(MODE_TABLE)]


@pytest.mark.parametrize(("data", "expected"), MODE_TABLE, ids=_IDS)
def test_mode_table(data: bytes, expected: TerminalModes) -> None:
    assert fed(data).current() == expected


@pytest.mark.parametrize(("data", "expected"), MODE_TABLE, ids=_IDS)
def test_mode_table_split_at_every_byte(data: bytes, expected: TerminalModes) -> None:
    if len(data) > 64:
        data = data[:64]
        expected = fed(data).current()
    whole = fed(data)
    for cut in range(len(data) + 1):
        split = fed(data[:cut], data[cut:])
        assert split.current() == expected, cut
        assert [split.state_at(i) for i in range(len(data) + 1)] == [
            whole.state_at(i) for i in range(len(data) + 1)
        ], cut
    bytewise = fed(*(data[i : i + 1] for i in range(len(data))))
    assert bytewise.current() == expected


def test_split_title_longer_than_carry_is_dropped_but_tracking_recovers() -> None:
    body = b"y" * (CARRY_MAX + 10)
    tracker = fed(b"\x1b]2;" + body[:100], body[100:], b"\x07", b"\x1b[?2004h")
    assert tracker.current() == replace(D, bracketed_paste=True)
    assert len(tracker._carry) <= CARRY_MAX


def test_carry_stays_bounded_during_huge_unterminated_osc() -> None:
    tracker = ModeTracker()
    tracker.feed(0, b"\x1b]52;c;")
    offset = 7
    for _ in range(1000):
        tracker.feed(offset, b"QUJD" * 256)
        offset += 1024
        assert len(tracker._carry) <= CARRY_MAX
    tracker.feed(offset, b"\x07\x1b[?1h")
    assert tracker.current() == replace(D, app_cursor_keys=True)


# ------------------------------------------------------------------ offsets, preamble

STREAM = (
    b"$ vim\r\n"  # 0..7
    b"\x1b[?1049h"  # 7..15  -> alt from 15
    b"\x1b[?1h\x1b="  # 15..22 -> cursor keys from 20, keypad from 22
    b"\x1b]2;vim\x07"  # 22..30 -> title from 30
    b"~~~~"  # 30..34
    b"\x1b[?1049l\x1b[?1l\x1b>"  # 34..49 -> alt off at 42, keys off at 47, keypad off at 49
    b"$ "  # 49..51
)


@pytest.mark.parametrize(
    ("offset", "preamble"),
    [
        (0, b""),
        (7, b""),
        (14, b""),
        (15, b"\x1b[?1049h"),
        (20, b"\x1b[?1049h\x1b[?1h"),
        (22, b"\x1b[?1049h\x1b[?1h\x1b="),
        (30, b"\x1b]2;vim\x07\x1b[?1049h\x1b[?1h\x1b="),
        (41, b"\x1b]2;vim\x07\x1b[?1049h\x1b[?1h\x1b="),
        (42, b"\x1b]2;vim\x07\x1b[?1h\x1b="),
        (49, b"\x1b]2;vim\x07"),
        (10**9, b"\x1b]2;vim\x07"),
    ],
)
def test_preamble_at_offsets(offset: int, preamble: bytes) -> None:
    for tracker in (fed(STREAM), fed(*(STREAM[i : i + 3] for i in range(0, len(STREAM), 3)))):
        assert tracker.preamble(offset) == preamble


def test_feed_at_nonzero_start_offset() -> None:
    tracker = ModeTracker()
    tracker.feed(1000, b"ab\x1b[?25l")
    assert tracker.state_at(1007) == D
    assert tracker.state_at(1008) == replace(D, cursor_visible=False)


def test_rewinding_feed_raises() -> None:
    tracker = fed(b"0123456789")
    with pytest.raises(ModeOffsetError) as info:
        tracker.feed(5, b"x")
    assert (info.value.offset, info.value.expected) == (5, 10)


def test_discontinuity_drops_carry() -> None:
    tracker = ModeTracker()
    tracker.feed(0, b"\x1b[?10")
    tracker.feed(100, b"49h")  # not a continuation: must not become ?1049h
    assert tracker.current() == D


# --------------------------------------------------------------------- reset / enable


@pytest.mark.parametrize(
    ("data", "reset"),
    [
        (b"", b""),
        (b"\x1b]2;title\x07", b""),  # the title is not undone
        (b"\x1b[?1049h", b"\x1b[?1049l"),
        (b"\x1b[?25l", b"\x1b[?25h"),
        (b"\x1b[?1002;1006h", b"\x1b[?1002l\x1b[?1006l"),
        (
            b"\x1b[?1049;1;2004;1004;1003;1015;25h\x1b=\x1b[?25l",
            b"\x1b[?1003l\x1b[?1015l\x1b[?1004l\x1b[?2004l\x1b[?1l\x1b>\x1b[?1049l\x1b[?25h",
        ),
    ],
)
def test_reset_sequence_table(data: bytes, reset: bytes) -> None:
    assert fed(data).reset_sequence() == reset


_MOUSE_ORDER = (9, 1000, 1001, 1002, 1003, 1005, 1006, 1015, 1016)


def _modes(tracking: int, encoding: int, extra: set[int], **fields: Any) -> TerminalModes:
    """A state a preamble can re-create: every active mouse mode is also among those on by number, and
    a protocol (encoding) is on by number only while one is active (after ``?9h?1000l`` 9 is on by number
    and tracking off: no sequence of sets re-creates that)."""
    extra = {m for m in extra if (tracking if m in (9, 1000, 1001, 1002, 1003) else encoding)}
    on = (extra | {tracking, encoding}) - {0}
    return TerminalModes(mouse_tracking=tracking, mouse_encoding=encoding,
                         mouse_modes=tuple(m for m in _MOUSE_ORDER if m in on), **fields)


def _whole_title(body: bytes) -> bool:
    """Whether the grammar reads ``body`` as one OSC's data: it has no BEL, ESC, CAN, SUB nor C1 control (a
    lone byte 0x80-0x9F is one, to the grammar), any of which ends the OSC."""
    return vtparse.end_of(vtparse.decode(b"\x1b]2;" + body + b"\x07")) == len(vtparse.decode(body)) + 5


MODES = st.builds(
    _modes,
    tracking=st.sampled_from([0, 9, 1000, 1002, 1003]),
    encoding=st.sampled_from([0, 1005, 1006, 1015]),
    extra=st.sets(st.sampled_from(_MOUSE_ORDER)),
    alt_screen=st.booleans(),
    cursor_visible=st.booleans(),
    bracketed_paste=st.booleans(),
    focus_reporting=st.booleans(),
    app_cursor_keys=st.booleans(),
    app_keypad=st.booleans(),
    title=st.none() | st.binary(max_size=20).filter(_whole_title),
    modify_other_keys=st.integers(0, 3),
    kitty_keyboard=st.integers(0, 3),
    kitty_flags=st.integers(0, 31),
    title_stack=st.integers(0, 4),
    cursor_style=st.integers(0, 6),
    scroll_region=st.none() | st.tuples(st.integers(0, 60), st.integers(0, 60)).filter(
        lambda r: r[0] > 1 or r[1] > 0),
    origin_mode=st.booleans(),
)


@given(MODES)
def test_enable_then_disable_round_trips(modes: TerminalModes) -> None:
    tracker = fed(modes.enable_sequence())
    assert tracker.current() == modes
    tracker.feed(len(modes.enable_sequence()), tracker.reset_sequence())
    assert tracker.current() == replace(D, title=modes.title)


@given(MODES)
def test_full_reset_sequence_resets_any_state(modes: TerminalModes) -> None:
    tracker = fed(modes.enable_sequence(), FULL_RESET_SEQUENCE)
    assert tracker.current() == replace(D, title=modes.title, title_stack=modes.title_stack)  # count unknown


# ------------------------------------------------------------------ bounded history


def test_forget_before_folds_history_into_base() -> None:
    tracker = fed(STREAM)
    assert len(tracker) == 7
    tracker.forget_before(22)
    assert len(tracker) == 4
    assert tracker.base_offset == 22
    assert tracker.preamble(22) == b"\x1b[?1049h\x1b[?1h\x1b="
    assert tracker.state_at(0) == tracker.state_at(22)  # before the base: approximated
    assert tracker.preamble(30) == b"\x1b]2;vim\x07\x1b[?1049h\x1b[?1h\x1b="
    tracker.forget_before(10**6)
    assert len(tracker) == 0
    assert tracker.current() == replace(D, title=b"vim")


def test_history_is_capped() -> None:
    tracker = ModeTracker()
    toggle = b"\x1b[?25l.\x1b[?25h."
    offset = 0
    for _ in range(5 * MAX_HISTORY):
        tracker.feed(offset, toggle)
        offset += len(toggle)
        assert len(tracker) <= MAX_HISTORY
    assert len(tracker) >= MAX_HISTORY // 2
    # recent offsets stay exact
    last = offset - len(toggle)
    assert tracker.state_at(last + 6) == replace(D, cursor_visible=False)
    assert tracker.state_at(last + 13) == D
    assert tracker.base_offset > 0


def test_no_change_is_recorded_for_redundant_sets() -> None:
    tracker = fed(b"\x1b[?25h\x1b[?1049l\x1b>" * 50)
    assert len(tracker) == 0


# ------------------------------------------- property: arbitrary chunking of a stream

_MODE_TOKENS: list[tuple[bytes, dict[str, Any]]] = [
    (b"\x1b[?1049h", {"alt_screen": True}),
    (b"\x1b[?1049l", {"alt_screen": False}),
    (b"\x1b[?47h", {"alt_screen": True}),
    (b"\x1b[?1047l", {"alt_screen": False}),
    (b"\x1b[?25l", {"cursor_visible": False}),
    (b"\x1b[?25h", {"cursor_visible": True}),
    (b"\x1b[?2004h", {"bracketed_paste": True}),
    (b"\x1b[?2004l", {"bracketed_paste": False}),
    (b"\x1b[?1000h", {"mouse_tracking": 1000, "_mouse": [(1000, True)]}),
    (b"\x1b[?1002h", {"mouse_tracking": 1002, "_mouse": [(1002, True)]}),
    (b"\x1b[?1003l", {"mouse_tracking": 0, "_mouse": [(1003, False)]}),
    (b"\x1b[?1006h", {"mouse_encoding": 1006, "_mouse": [(1006, True)]}),
    (b"\x1b[?1006l", {"mouse_encoding": 0, "_mouse": [(1006, False)]}),
    (b"\x1b[?2026h", {"sync_output": True}),
    (b"\x1b[?2026l", {"sync_output": False}),
    (b"\x1b[>4;2m", {"modify_other_keys": 2}),
    (b"\x1b[>4m", {"modify_other_keys": 0}),
    (b"\x1b[3;9r", {"scroll_region": (3, 9)}),
    (b"\x1b[r", {"scroll_region": None}),
    (b"\x1b[22;0t", {"_titles": 1}),
    (b"\x1b[23;0t", {"_titles": -1}),
    (b"\x1b[?1004h", {"focus_reporting": True}),
    (b"\x1b[?1004l", {"focus_reporting": False}),
    (b"\x1b[?1h", {"app_cursor_keys": True}),
    (b"\x1b[?1l", {"app_cursor_keys": False}),
    (b"\x1b=", {"app_keypad": True}),
    (b"\x1b>", {"app_keypad": False}),
    (b"\x1b[?1049;2004;1000h", {"alt_screen": True, "bracketed_paste": True, "mouse_tracking": 1000,
                                "_mouse": [(1000, True)]}),
    (b"\x1b[!p", {"cursor_visible": True, "app_cursor_keys": False, "app_keypad": False, "scroll_region": None,
                  "origin_mode": False}),
    (b"\x1bc", {"reset": True}),
]
_NOISE = st.sampled_from([b"\x1b[31m", b"\x1b[2J", b"\x1b[10;20H", b"\x1b(B", b"\x1b]8;;http://x\x07",
                          b"\x1b[?12h", b"\x1b7"])
_TEXT = st.text(max_size=5).map(str.encode).filter(lambda b: b"\x1b" not in b)
_TITLE = st.builds(
    lambda kind, body, term: (b"\x1b]" + kind + b";" + body + term, {"title": body}),
    st.sampled_from([b"0", b"2"]),
    st.binary(max_size=30).filter(_whole_title),
    st.sampled_from([b"\x07", b"\x1b\\"]),
)
TOKENS = st.one_of(
    st.sampled_from(_MODE_TOKENS),
    _TITLE,
    st.tuples(_NOISE | _TEXT, st.just({})),
)


def _model(state: TerminalModes, effect: dict[str, Any]) -> TerminalModes:
    """The state after a token: fields set, mouse modes on or off by number, titles pushed or popped."""
    fields = {k: v for k, v in effect.items() if not k.startswith("_")}
    on = set(state.mouse_modes)
    for mode, is_on in effect.get("_mouse", ()):
        (on.add if is_on else on.discard)(mode)
    titles = max(0, state.title_stack + effect.get("_titles", 0))
    return replace(state, **fields, mouse_modes=tuple(m for m in _MOUSE_ORDER if m in on), title_stack=titles)


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(TOKENS, max_size=40), splits=st.lists(st.integers(1, 16), max_size=60))
def test_tracker_matches_model_for_any_chunking(
    tokens: list[tuple[bytes, dict[str, Any]]], splits: list[int]
) -> None:
    expected: list[tuple[int, TerminalModes]] = [(0, D)]  # state from each token end
    state, offset = D, 0
    for data, effect in tokens:
        offset += len(data)
        state = D if effect.get("reset") else _model(state, effect)
        expected.append((offset, state))
    stream = b"".join(data for data, _ in tokens)

    tracker, pos = ModeTracker(), 0
    for size in [*splits, len(stream)]:
        tracker.feed(pos, stream[pos : pos + size])
        pos = min(len(stream), pos + size)
    assert tracker.current() == state
    for at, modes in expected:
        assert tracker.state_at(at) == modes, at
        assert tracker.preamble(at) == modes.enable_sequence()


def test_title_of_max_length_split_in_the_middle_is_tracked() -> None:
    body = bytes(65 + i % 26 for i in range(TITLE_MAX))
    tracker = fed(b"\x1b]2;" + body[:500], body[500:], b"\x1b", b"\\")
    assert tracker.current() == replace(D, title=body)
    assert tracker.state_at(4 + TITLE_MAX + 1) == D
    assert tracker.state_at(4 + TITLE_MAX + 2) == replace(D, title=body)


# ----------------------------------------------- exact states before the history (checkpoints)


def _toggling_stream(toggles: int) -> bytes:
    """Main-screen text, then a program entering and leaving the alternate screen many times."""
    return b"main screen text\r\n" + b"\x1b[?1049hframe\x1b[?1049l" * toggles + b"back\r\n"


@pytest.mark.parametrize("chunk", [7, 4096, 10**6])
def test_state_before_the_history_is_exact_with_the_output(chunk: int) -> None:
    stream = _toggling_stream(3 * MAX_HISTORY)
    tracker = ModeTracker(checkpoints=True)
    for i in range(0, len(stream), chunk):
        tracker.feed(i, stream[i : i + chunk])
    assert tracker.base_offset > 0  # folded: offset 0 is before the history

    def read(first: int, last: int) -> bytes:
        return stream[first:last]

    assert tracker.state_at(0, read) == D
    assert tracker.preamble(0, read) == b""
    inside = len(b"main screen text\r\n") + len(b"\x1b[?1049h")
    assert tracker.state_at(inside, read) == replace(D, alt_screen=True)
    for offset in range(0, len(stream), 997):  # anywhere: the same as a tracker that kept everything
        whole = ModeTracker()
        whole.feed(0, stream[:offset])
        assert tracker.state_at(offset, read) == whole.current(), offset


def test_without_the_output_a_state_before_the_history_is_the_base() -> None:
    stream = _toggling_stream(3 * MAX_HISTORY)
    tracker = ModeTracker(checkpoints=True)
    tracker.feed(0, stream)
    assert tracker.state_at(0, lambda first, last: None) == tracker.state_at(0)
    tracker.forget_before(tracker.base_offset)  # the ring trimmed: the checkpoints before it go
    assert len(tracker._cp_offsets) == 1


def test_checkpoints_every_so_many_bytes_and_only_when_asked() -> None:
    data = b"x" * 1000
    kept, plain = ModeTracker(checkpoints=True), ModeTracker()
    for i in range(0, 3 * CHECKPOINT_BYTES, len(data)):
        kept.feed(i, data)
        plain.feed(i, data)
    assert len(kept._cp_offsets) == 3
    assert plain._cp_offsets == []


# ----------------------------------------------------------------- a replay for another size


@pytest.mark.parametrize(("data", "sequence"), [
    (b"", b""),
    (b"\x1b[?1049h\x1b[?6h", b""),  # origin mode: kept on resize, as xterm does
    (b"\x1b[1;23r", b"\x1b7\x1b[r\x1b8"),
    (b"\x1b[1;23r\x1b[r", b""),
])
def test_resize_sequence(data: bytes, sequence: bytes) -> None:
    assert fed(data).current().resize_sequence() == sequence


def test_reset_switches_off_everything_vim_switches_on() -> None:
    """What vim 9 writes to an xterm-like terminal, switched off in full, titles popped (issue 18 case 6)."""
    vim = (b"\x1b[22;2t\x1b[22;1t\x1b[22;2t\x1b[?1049h\x1b[>4;2m\x1b[?1h\x1b=\x1b[?2004h\x1b[?1004h"
           b"\x1b[?1000h\x1b[?1006h\x1b[?1002h\x1b[2 q\x1b[1;23r\x1b]2;vim\x07")
    reset = fed(vim).reset_sequence()
    after = fed(vim, reset).current()
    assert after == replace(D, title=b"vim")
    assert reset.count(b"\x1b[23;0t") == 3
    for off in (b"\x1b[?1000l", b"\x1b[?1002l", b"\x1b[?1006l", b"\x1b[>4m", b"\x1b[?2004l", b"\x1b[?1004l",
                b"\x1b[?1l", b"\x1b>", b"\x1b[?1049l", b"\x1b[0 q", b"\x1b7\x1b[r\x1b8"):
        assert off in reset, off
