"""RingBuffer / Scrollback: exactness against a bytes model, bounded memory, safe cuts."""

from __future__ import annotations

import random
import tracemalloc
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shellper.core.ring import (
    FORWARD_WINDOW,
    LOOKBACK_WINDOW,
    Chunk,
    OffsetError,
    RingBuffer,
    Scrollback,
    sequence_end,
)
from shellper.core.terminal.modes import FULL_RESET_SEQUENCE, TerminalModes

# --------------------------------------------------------------------------- basics


def test_empty_ring() -> None:
    ring = RingBuffer(16)
    assert (ring.start, ring.end, ring.size, len(ring), ring.capacity) == (0, 0, 0, 0, 16)
    assert ring.read(0, 100) == Chunk(0, b"", 0)


@pytest.mark.parametrize("capacity", [0, -1])
def test_capacity_must_be_positive(capacity: int) -> None:
    with pytest.raises(ValueError):
        RingBuffer(capacity)


@pytest.mark.parametrize(
    ("appends", "offset", "max_bytes", "expected"),
    [
        ([b"hello"], 0, 100, Chunk(0, b"hello", 0)),
        ([b"hello"], 2, 100, Chunk(2, b"llo", 0)),
        ([b"hello"], 5, 100, Chunk(5, b"", 0)),
        ([b"hello"], 0, 3, Chunk(0, b"hel", 0)),
        ([b"hello"], 1, 0, Chunk(1, b"", 0)),
        ([b"ab", b"", b"cd"], 1, 2, Chunk(1, b"bc", 0)),
        # capacity 8: 12 bytes appended, the oldest 4 are gone
        ([b"0123456789", b"ab"], 0, 100, Chunk(4, b"456789ab", 4)),
        ([b"0123456789", b"ab"], 3, 100, Chunk(4, b"456789ab", 1)),
        ([b"0123456789", b"ab"], 4, 100, Chunk(4, b"456789ab", 0)),
        ([b"0123456789", b"ab"], 9, 2, Chunk(9, b"9a", 0)),
        ([b"0123456789", b"ab"], 0, 3, Chunk(4, b"456", 4)),
        # one append larger than the whole storage keeps only its tail
        ([b"x" * 5000 + b"01234567"], 0, 100, Chunk(5000, b"01234567", 5000)),
        # many small appends wrapping the storage several times
        ([bytes([65 + i % 26]) for i in range(2000)], 1990, 100,
         Chunk(1992, bytes(65 + i % 26 for i in range(1992, 2000)), 2)),
    ],
)
def test_read_table(appends: list[bytes], offset: int, max_bytes: int, expected: Chunk) -> None:
    ring = RingBuffer(8)
    for data in appends:
        ring.append(data)
    assert ring.read(offset, max_bytes) == expected
    assert ring.end == sum(map(len, appends))


def test_read_across_the_physical_wrap_is_contiguous() -> None:
    ring = RingBuffer(100)
    stream = bytes(i % 251 for i in range(10_000))
    for i in range(0, len(stream), 37):
        ring.append(stream[i : i + 37])
        got = ring.read(ring.start, 1000)
        assert got.data == stream[ring.start : ring.end]


@pytest.mark.parametrize("offset", [-1, 11, 10**12])
def test_offset_error_carries_offset_and_end(offset: int) -> None:
    ring = RingBuffer(8)
    ring.append(b"0123456789")
    with pytest.raises(OffsetError) as info:
        ring.read(offset, 1)
    assert (info.value.offset, info.value.end) == (offset, 10)
    assert isinstance(info.value, ValueError)


def test_negative_max_bytes_rejected() -> None:
    with pytest.raises(ValueError):
        RingBuffer(8).read(0, -1)


def test_clear_keeps_offsets_increasing() -> None:
    ring = RingBuffer(8)
    ring.append(b"abcdef")
    ring.clear()
    assert (ring.start, ring.end, len(ring)) == (6, 6, 0)
    assert ring.read(2, 10) == Chunk(6, b"", 4)
    ring.append(b"XY")
    assert ring.read(0, 10) == Chunk(6, b"XY", 6)
    assert ring.end == 8


# ------------------------------------------------------------------- cut alignment

ST = b"\x1b\\"


@pytest.mark.parametrize(
    ("name", "capacity", "appends", "start"),
    [
        # naive cut = 12 - 8 = 4 lands inside ESC[1;31m (offsets 1..7): move past it
        ("inside CSI", 8, [b"a\x1b[1;31mXYZW"], 8),
        ("inside CSI split over appends", 8, [b"a\x1b[1;", b"31mXYZW"], 8),
        ("cut just after ESC", 3, [b"ab\x1bMcd"], 4),
        ("cut just after ESC[", 6, [b"ab\x1b[2Jcdef"], 6),
        ("cut at the ESC itself", 6, [b"abcd\x1b[mXYZ"], 4),
        ("sequence ended before the cut", 3, [b"\x1b[mabcdef"], 6),
        ("inside OSC title (BEL)", 6, [b"\x1b]2;hello world\x07tail"], 16),
        ("inside OSC title (ST)", 6, [b"\x1b]0;hello world" + ST + b"tail"], 17),
        ("between ESC and \\ of ST", 5, [b"\x1b]2;title\x1b", b"\\tail"], 11),
        ("inside DCS", 8, [b"\x1bPq#0;2;0;0;0#0!10~" + ST + b"done"], 21),
        ("inside charset designation", 5, [b"x\x1b(Bwxyz"], 4),
        ("CSI aborted by ESC", 8, [b"\x1b[12\x1b[mXYZW"], 4),
        ("inside 3-byte UTF-8", 8, ["€€€".encode()], 3),
        ("inside 4-byte UTF-8", 6, ["😀😀".encode()], 4),
        ("inside 2-byte UTF-8", 5, ["éééé".encode()], 4),
        ("plain ASCII: exact cut", 5, [b"0123456789"], 5),
        # bytes that continue no character are each a token of their own (0x80-0x9F: C1 controls)
        ("invalid UTF-8: a cut before a lone continuation byte stays", 4, [b"a\x80\x80\x80\x80\x80\x80"], 3),
    ],
)
def test_trim_alignment(name: str, capacity: int, appends: list[bytes], start: int) -> None:
    ring = RingBuffer(capacity)
    for data in appends:
        ring.append(data)
    stream = b"".join(appends)
    assert ring.start == start, name
    assert ring.read(0, 1000).data == stream[start:]


@pytest.mark.parametrize("trim", [False, True])
def test_a_look_back_that_begins_inside_a_character_reads_no_c1_control_there(trim: bool) -> None:
    # U+201B ends in 0x9B, an 8-bit CSI when read alone: a look-back window beginning on that byte must not see
    # a CSI cut short at the cut (what follows is text). In a trim, the bytes before the window are overwritten.
    head = b"a" * 11 + "\u201b".encode() + b"1" + b"1;" * 255
    cut = len(head)
    assert cut - LOOKBACK_WINDOW == 13  # the window's first byte is 0x9B
    data = head + b"m" + b"z" * 599
    if trim:
        ring = RingBuffer(len(data) - cut)
        ring.append(data[:600])
        ring.append(data[600:])
        assert ring.start == cut
    else:
        ring = RingBuffer(1 << 16)
        ring.append(data)
        assert ring.safe_start(cut) == cut


def test_unfinished_sequence_longer_than_forward_window_falls_back_to_raw_cut() -> None:
    data = b"\x1bP" + b"q" * (FORWARD_WINDOW + 100)  # a huge DCS, unterminated within bounds
    ring = RingBuffer(len(data) - 10)  # naive cut at 10, 10 bytes after the ESC
    ring.append(data)
    assert ring.start == 10


def test_esc_older_than_lookback_is_not_seen() -> None:
    """Documented limit: a sequence whose ESC is > LOOKBACK_WINDOW before the cut."""
    title = b"t" * (LOOKBACK_WINDOW + 100)
    data = b"\x1b]2;" + title + b"\x07rest"
    ring = RingBuffer(len(data) - (LOOKBACK_WINDOW + 50))
    ring.append(data)
    assert ring.start == LOOKBACK_WINDOW + 50


def test_start_may_exceed_end_minus_capacity_but_within_forward_window() -> None:
    ring = RingBuffer(10)
    ring.append(b"\x1b]2;" + b"x" * 300 + b"\x07abc")
    assert ring.start == ring.end - 3
    assert ring.start - (ring.end - ring.capacity) <= FORWARD_WINDOW


@pytest.mark.parametrize(
    ("buf", "end"),
    [
        (b"\x1b", None),
        (b"\x1b[", None),
        (b"\x1b[?1049", None),
        (b"\x1b[?1049h", 8),
        (b"\x1b[38;5;1mX", 9),
        (b"\x1b]0;t", None),
        (b"\x1b]0;t\x07X", 6),
        (b"\x1b]0;t\x1b", None),
        (b"\x1b]0;t\x1b\\X", 7),
        (b"\x1b]0;t\x1b[m", 5),  # OSC interrupted by a new sequence
        (b"\x1b]0;t\x18X", 5),  # CAN aborts: it ends the OSC, and is a control of its own
        (b"\x1bPq" + ST, 5),
        (b"\x1b7X", 2),
        (b"\x1b(BX", 3),
        (b"\x1b(", None),
        (b"\x1b\x1b[m", 1),
        (b"\x1b\nX", None),  # LF is executed inside the sequence, and ESC X begins an SOS
        (b"\x1b[12\nX", 6),  # LF is executed inside the CSI, which X ends (as a DEC parser reads it)
        (b"\x1b[12\x85X", 4),  # a C1 control aborts it
        (b"\xc2\x9b6nX", 4),  # an 8-bit CSI (U+009B)
        (b"\x9b6nX", 3),  # a lone byte 0x9B is one too
        (b"\x1b]0;t\xc2\x9c", 7),  # ST in its 8-bit form
    ],
)
def test_sequence_end_table(buf: bytes, end: int | None) -> None:
    assert sequence_end(buf, 0) == end


@pytest.mark.parametrize(
    ("offset", "aligned"),
    [(0, 0), (1, 1), (2, 8), (5, 8), (8, 8), (9, 9), (10, 12), (11, 12), (12, 12), (15, 15), (99, 15),
     (-5, 0)],
)
def test_safe_start_table(offset: int, aligned: int) -> None:
    ring = RingBuffer(64)
    ring.append(b"a\x1b[1;31mb\xe2\x82\xacxyz")  # a ESC[1;31m b € x y z
    assert ring.safe_start(offset) == aligned


# ------------------------------------------------------------------ bounded memory


def test_one_gib_newline_free_flood_keeps_storage_fixed() -> None:
    ring = RingBuffer()
    storage = ring._buf
    chunk = (b"\x1b[1;1H\x1b[32mspinner \xe2\xa0\x8b working\x1b[0m\x1b[K" * 2048)[: 64 * 1024]
    for _ in range(16 * 1024):  # 1 GiB
        ring.append(chunk)
    assert ring.end == 1 << 30
    assert ring._buf is storage
    assert len(ring._buf) == ring.capacity + LOOKBACK_WINDOW
    assert ring.end - ring.capacity <= ring.start <= ring.end - ring.capacity + FORWARD_WINDOW
    # the retained bytes are exactly the stream's tail from a safe start
    tail = ring.read(ring.start, ring.capacity).data
    assert len(tail) == ring.size
    assert tail == (chunk * 129)[-len(tail) :]
    assert ring.safe_start(ring.start) == ring.start


def test_append_allocates_nothing_that_survives() -> None:
    ring = RingBuffer(1 << 20)
    chunk = b"\x1b[Hx" * 4096
    ring.append(chunk)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2000):  # 32 MiB through a 1 MiB ring
            ring.append(chunk)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current - before < 4096
    assert peak - before < 64 * 1024  # only the small look-back/forward windows, transiently


def test_single_oversized_append_keeps_only_tail() -> None:
    ring = RingBuffer(1000)
    data = (bytes(range(32, 122)) * 33_334)[:3_000_000]  # i % 90 + 32 for i in range(3_000_000), built whole
    ring.append(b"prefix")
    ring.append(data)
    assert len(ring._buf) == 1000 + LOOKBACK_WINDOW
    assert ring.read(0, 10_000) == Chunk(ring.end - 1000, data[-1000:], ring.end - 1000)


# ------------------------------------------------- property: model of a token stream


_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\n\r\t"),
    min_size=1,
    max_size=6,
).map(str.encode)
_CSI = st.builds(
    lambda params, final: b"\x1b[" + params.encode() + final.encode(),
    st.from_regex(r"\A[?]?[0-9]{0,4}(;[0-9]{1,4}){0,3}\Z"),
    st.sampled_from("mHJKABCDhlrt"),
)
_OSC = st.builds(
    lambda kind, body, term: b"\x1b]" + kind + b";" + body.encode() + term,
    st.sampled_from([b"0", b"2", b"8;", b"7"]),
    # no C1 control (Cc): U+0080-U+009F ends an OSC, as ESC does
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x2FFF, blacklist_categories=("Cs", "Cc")),
            max_size=20),
    st.sampled_from([b"\x07", ST]),
)
_ESC2 = st.sampled_from([b"\x1b7", b"\x1b8", b"\x1b=", b"\x1b>", b"\x1bM", b"\x1b(B", b"\x1b#8", b"\x1bc"])
_DCS = st.just(b"\x1bPq#0;2;0;0;0#0!10~-" + ST)
TOKENS = st.one_of(_TEXT, _TEXT, _CSI, _OSC, _ESC2, _DCS)


@dataclass
class Model:
    """Everything ever appended, plus the safe cut points: token and character starts."""

    stream: bytearray = field(default_factory=bytearray)
    boundaries: set[int] = field(default_factory=lambda: {0})
    cleared_at: int = 0


_OPS = st.one_of(
    st.tuples(
        st.just("tokens"),
        st.lists(TOKENS, min_size=1, max_size=30),
        st.lists(st.integers(1, 50), max_size=15),
    ),
    st.tuples(st.just("read"), st.floats(0, 1), st.integers(0, 300)),
    st.tuples(st.just("clear")),
)


def _check_invariants(ring: RingBuffer, model: Model) -> None:
    end = len(model.stream)
    assert ring.end == end
    assert len(ring) <= ring.capacity
    assert ring.start >= model.cleared_at
    assert ring.start >= end - ring.capacity
    assert ring.start <= max(model.cleared_at, end - ring.capacity + FORWARD_WINDOW)
    assert ring.start in model.boundaries or ring.start == end
    held = ring.read(ring.start, ring.capacity).data
    assert held == bytes(model.stream[ring.start :])
    if held:
        assert not 0x80 <= held[0] <= 0xBF  # never starts inside a UTF-8 character


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(64, 400), ops=st.lists(_OPS, max_size=20))
def test_ring_matches_bytes_model(capacity: int, ops: list[tuple[Any, ...]]) -> None:
    ring = RingBuffer(capacity)
    model = Model()
    for op in ops:
        if op[0] == "tokens":
            tokens: list[bytes] = op[1]
            data = b"".join(tokens)
            base = len(model.stream)
            for tok in tokens:
                if tok[0] != 0x1B:  # text: any character start is a safe cut
                    model.boundaries.update(base + i for i, c in enumerate(tok) if not 0x80 <= c <= 0xBF)
                base += len(tok)
                model.boundaries.add(base)
            pos = 0
            for size in [*op[2], len(data)]:
                ring.append(data[pos : pos + size])
                model.stream += data[pos : pos + size]
                pos += size
                _check_invariants(ring, model)
        elif op[0] == "read":
            offset, max_bytes = int(op[1] * len(model.stream)), op[2]
            first = max(offset, ring.start)
            expected = Chunk(first, bytes(model.stream[first : first + max_bytes]), first - offset)
            assert ring.read(offset, max_bytes) == expected
        else:
            ring.clear()
            model.cleared_at = len(model.stream)
        _check_invariants(ring, model)


# ---------------------------------------------------------------------- Scrollback


def test_scrollback_fresh_replay_carries_preamble_for_trimmed_alt_screen_enter() -> None:
    sb = Scrollback(64)
    sb.append(b"$ vim\r\n\x1b[?1049h\x1b[?1h\x1b=\x1b[?2004h")  # enters TUI modes
    sb.append(b"\x1b[H" + b"~\r\n" * 100)  # the enter sequence is trimmed away
    assert sb.ring.start > 30
    replay = sb.replay()
    assert replay.offset == sb.ring.start
    assert replay.gap == 0
    assert replay.data == sb.ring.read(sb.ring.start, 100).data
    assert replay.preamble == b"\x1b[?1049h\x1b[?1h\x1b=\x1b[?2004h"
    assert replay.end == sb.end
    # the tracker's history was folded as the ring trimmed
    assert len(sb.modes) == 0
    assert sb.modes.base_offset == sb.ring.start


def test_scrollback_resume_without_gap_sends_no_preamble() -> None:
    sb = Scrollback(1024)
    sb.append(b"\x1b[?1049hscreen")
    seen = sb.end
    sb.append(b"more")
    replay = sb.replay(seen, resume=True)
    assert (replay.offset, replay.gap, replay.preamble, replay.data) == (seen, 0, b"", b"more")
    # the same offset for a fresh terminal needs the modes
    assert sb.replay(seen).preamble == b"\x1b[?1049h"


@pytest.mark.parametrize(
    ("resume", "preamble"),
    [(True, FULL_RESET_SEQUENCE + b"\x1b[?1000h\x1b[?1006h"), (False, b"\x1b[?1000h\x1b[?1006h")],
)
def test_scrollback_replay_with_gap(resume: bool, preamble: bytes) -> None:
    sb = Scrollback(32)
    sb.append(b"\x1b[?1000h\x1b[?1006h")
    sb.append(b"x" * 100)
    replay = sb.replay(3, resume=resume)
    assert replay.gap == sb.start - 3
    assert replay.offset == sb.start
    assert replay.preamble == preamble


def test_scrollback_live_read_and_safe_start_delegate_to_ring() -> None:
    sb = Scrollback(8)
    sb.append(b"0123456789\x1b[1mab")
    assert (sb.start, sb.end) == (8, 16)
    assert sb.read(0, 100) == Chunk(8, b"89\x1b[1mab", 8)
    assert (sb.safe_start(10), sb.safe_start(12), sb.safe_start(0)) == (10, 14, 8)
    assert sb.read(sb.end, 5) == Chunk(sb.end, b"", 0)


def test_scrollback_replay_respects_max_bytes_and_reports_end() -> None:
    sb = Scrollback(1024)
    sb.append(b"0123456789")
    replay = sb.replay(None, 4)
    assert (replay.offset, replay.data, replay.end) == (0, b"0123", 10)
    with pytest.raises(OffsetError):
        sb.replay(11)


def test_scrollback_replay_of_the_newest_bytes_starts_at_safe_boundary() -> None:
    """As a shellper replays a client's replay_bytes: from the safe start at or after end - replay_bytes."""
    sb = Scrollback(1024)
    sb.append(b"\x1b[?25labc\x1b[31mdef")
    replay = sb.replay(sb.safe_start(sb.ring.end - 6))  # naive start (offset 11) is inside ESC[31m
    assert replay.data == b"def"
    assert replay.preamble == b"\x1b[?25l"
    assert sb.replay(sb.safe_start(max(sb.ring.start, sb.ring.end - 1000))).data == b"\x1b[?25labc\x1b[31mdef"


def test_scrollback_clear_returns_reset_and_forgets_modes() -> None:
    sb = Scrollback(1024)
    sb.append(b"\x1b[?1049h\x1b[?1002h")
    assert sb.clear() == b"\x1b[?1002l\x1b[?1049l"
    assert sb.modes.current() == TerminalModes()
    sb.append(b"new child")
    assert sb.replay().preamble == b""
    assert sb.replay().data == b"new child"


def test_scrollback_oversized_append_folds_modes_inside_it() -> None:
    sb = Scrollback(16)
    sb.append(b"\x1b[?2004h" + b"y" * 100 + b"\x1b[?2004l\x1b[?25l" + b"z" * 40)
    assert sb.modes.state_at(sb.ring.start) == TerminalModes(cursor_visible=False)
    assert len(sb.modes) == 0


# ------------------------------------------------------------- what a terminal is shown (issue 18)


@pytest.mark.parametrize(("output", "resized", "shown"), [
    (b"text\x1b[6n more", False, b"text more"),  # the query is not asked again
    (b"\x1b[?1049h\x1b[1;23rvim\x1b[c", False, b"\x1b[?1049h\x1b[1;23rvim"),
    (b"\x1b[?1049h\x1b[1;23rvim\x1b[c", True, b"\x1b[?1049h\x1b[1;23rvim\x1b7\x1b[r\x1b8"),  # the stale region reset
    (b"\x1b[1;23rvim\x1b[r$ ", True, b"\x1b[1;23rvim\x1b[r$ "),  # none set at the end: nothing to reset
])
def test_shown_to_a_terminal(output: bytes, resized: bool, shown: bytes) -> None:
    scrollback = Scrollback(1024)
    scrollback.append(output)
    replay = scrollback.replay(0)
    assert replay.data == output  # a tower's replay is the output as it was
    assert scrollback.shown(replay, resized) == shown


def test_shown_replay_starts_in_the_modes_of_its_start_after_many_toggles() -> None:
    """Issue 18 case 3: main-screen text, then more alternate-screen toggles than the tracker's history holds."""
    scrollback = Scrollback(1024 * 1024)
    scrollback.append(b"main text\r\n")
    for _ in range(3000):
        scrollback.append(b"\x1b[?1049hframe\x1b[?1049l")
    assert scrollback.modes.base_offset > 0
    replay = scrollback.replay(0)
    assert replay.preamble == b""  # the main screen, as at offset 0
    middle = 11 + 8  # just after the first ?1049h
    assert scrollback.replay(middle).preamble == b"\x1b[?1049h"


@pytest.mark.parametrize("seed", range(8))
def test_rfind_is_a_search_of_the_bytes_held(seed: int) -> None:
    """Searched in place (the storage wraps), it finds what a search of a copy of the held bytes does, for
    ranges anywhere in what the ring holds and a little beyond it."""
    rng = random.Random(seed)
    ring = RingBuffer(700)
    wrapped = 0
    for _ in range(30):
        ring.append(b"".join(rng.choice([b"a", b"\n", b"xyz", b"\n\n"]) for _ in range(rng.randrange(1, 200))))
        for _ in range(40):
            a, b = (rng.randrange(max(0, ring.start - 20), ring.end + 20) for _ in range(2))
            first, last = min(a, b), max(a, b)
            lo, hi = max(first, ring.start), min(last, ring.end)
            held = ring.read(lo, hi - lo).data if lo < hi else b""
            at = held.rfind(b"\n")
            assert ring.rfind(b"\n", first, last) == (lo + at if at >= 0 else -1), (first, last)
            wrapped += lo % (700 + LOOKBACK_WINDOW) + len(held) > 700 + LOOKBACK_WINDOW and at >= 0
    assert wrapped  # some searches crossed the storage's end
