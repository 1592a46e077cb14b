"""shellper.core.terminal.screen: what a terminal shows after a stream, as tables; fast-forwarding a flood changes
nothing; a rendered screen redraws the same screen in this model and in pyte (an independent emulator)."""

from __future__ import annotations

import random

import pyte
import pytest

from shellper.core.terminal import screen as screen_module
from shellper.core.terminal.screen import Screen, plain_line


def fed(data: bytes, cols: int = 20, rows: int = 5, scrollback: int = 10) -> Screen:
    s = Screen(cols, rows, scrollback)
    s.feed(data)
    return s


CASES = [
    # (what, bytes, screen lines, cursor (x, y))
    ("text and crlf", b"ab\r\ncd", ["ab", "cd", "", "", ""], (2, 1)),
    ("lf keeps the column", b"ab\ncd", ["ab", "  cd", "", "", ""], (4, 1)),
    ("autowrap", b"x" * 22, ["x" * 20, "xx", "", "", ""], (2, 1)),
    ("pending wrap stays at the edge", b"x" * 20, ["x" * 20, "", "", "", ""], (19, 0)),
    ("pending wrap survives a line feed", b"x" * 20 + b"\nY", ["x" * 20, "", "Y", "", ""], (1, 2)),
    ("no autowrap overwrites the last column", b"\x1b[?7l" + b"x" * 19 + b"yz", ["x" * 19 + "z", "", "", "", ""],
     (19, 0)),
    ("cup, el", b"hello\x1b[1;3H\x1b[K", ["he", "", "", "", ""], (2, 0)),
    ("erase display below", b"1\r\n2\r\n3\x1b[2;1H\x1b[J", ["1", "", "", "", ""], (0, 1)),
    ("scroll region keeps the header", b"HEAD\x1b[2;5r\x1b[5;1H" + b"\n".join(b"%d\r" % i for i in range(9)),
     ["HEAD", "5", "6", "7", "8"], (0, 4)),
    ("reverse index at the region top", b"a\r\nb\x1b[1;1H\x1bMtop", ["top", "a", "b", "", ""], (3, 0)),
    ("insert lines", b"a\r\nb\r\nc\x1b[2;1H\x1b[L", ["a", "", "b", "c", ""], (0, 1)),
    ("delete lines", b"a\r\nb\r\nc\x1b[1;1H\x1b[M", ["b", "c", "", "", ""], (0, 0)),
    ("insert and delete characters", b"abcdef\x1b[1;2H\x1b[2@\x1b[1;6H\x1b[P", ["a  bcef", "", "", "", ""], (5, 0)),
    ("erase characters", b"abcdef\x1b[1;2H\x1b[3X", ["a   ef", "", "", "", ""], (1, 0)),
    ("insert mode", b"abc\r\x1b[4hXY\x1b[4l", ["XYabc", "", "", "", ""], (2, 0)),
    ("origin mode", b"\x1b[3;4r\x1b[?6h\x1b[1;1HO\x1b[9;1HP", ["", "", "O", "P", ""], (1, 3)),
    ("alternate screen 1049 restores the main screen and cursor", b"main\x1b[?1049halt\x1b[?1049l!",
     ["main!", "", "", "", ""], (5, 0)),
    ("47 keeps the alternate screen's content", b"m\x1b[?47ha\x1b[?47l\x1b[?47h", [" a", "", "", "", ""], (2, 0)),
    ("1047 clears it on leaving", b"m\x1b[?1047ha\x1b[?1047l\x1b[?1047h", ["", "", "", "", ""], (2, 0)),
    ("dec line drawing", b"\x1b(0lqk\x1b(B-", ["┌─┐-", "", "", "", ""], (4, 0)),
    ("g1 by shift out", b"\x1b)0\x0eq\x0fq", ["─q", "", "", "", ""], (2, 0)),
    ("wide characters take two cells", "日本\r\n".encode() + b"x" * 19 + "語".encode(),
     ["日本", "x" * 19, "語", "", ""], (2, 2)),
    ("combining marks join their character", "e\u0301x".encode(), ["e\u0301x", "", "", "", ""], (2, 0)),
    ("tabs", b"a\tb", ["a       b", "", "", "", ""], (9, 0)),
    ("save and restore cursor", b"\x1b[2;3H\x1b7\x1b[5;5H\x1b8X", ["", "  X", "", "", ""], (3, 1)),
    ("rep repeats the last character", b"a\x1b[3b", ["aaaa", "", "", "", ""], (4, 0)),
    ("a split escape sequence and character", None, ["é", "", "", "", ""], (1, 0)),
    ("queries are not answered and leave no trace", b"\x1b[6n\x1b[c\x1b]11;?\x07\x1b[?2004$pok",
     ["ok", "", "", "", ""], (2, 0)),
    ("full reset", b"junk\x1bcok", ["ok", "", "", "", ""], (2, 0)),
]


@pytest.mark.parametrize(("what", "data", "lines", "cursor"), CASES, ids=[c[0] for c in CASES])
def test_screen_after_bytes(what: str, data: bytes | None, lines: list[str], cursor: tuple[int, int]) -> None:
    s = Screen(20, 5, 10)
    if data is None:  # one byte at a time: sequences and UTF-8 split at every point
        for b in b"\x1b[1;1H" + "é".encode():
            s.feed(bytes([b]))
    else:
        s.feed(data)
    assert s.lines() == lines
    assert (s.cursor.x, s.cursor.y) == cursor


def test_scrollback_keeps_main_screen_lines_only_and_is_bounded() -> None:
    s = fed(b"".join(b"%d\r\n" % i for i in range(30)) + b"\x1b[?1049h" + b"alt\r\n" * 9 + b"\x1b[?1049l")
    assert [plain_line(line) for line in s.history()] == [str(i) for i in range(16, 26)]
    assert s.history(3) == ["23", "24", "25"] and s.history(0) == []


def test_behind_adds_the_main_screen_under_an_alternate_one() -> None:
    s = fed(b"".join(b"%d\r\n" % i for i in range(8)) + b"\x1b[?1049hfull screen")
    assert [plain_line(line) for line in s.behind(5)] == ["3", "4", "5", "6", "7"]
    assert s.behind(0) == [] and "full screen" in s.lines()


def test_sgr_is_kept_per_cell_and_rendered() -> None:
    s = fed(b"\x1b[1;31mred\x1b[0m \x1b[38;5;200mX\x1b[48;2;1;2;3mY\x1b[m z")
    assert s.ansi_lines()[0] == "\x1b[0;1;31mred\x1b[0m \x1b[0;38;5;200mX\x1b[0;38;5;200;48;2;1;2;3mY\x1b[0m z"


def flood(rng: random.Random, colours: bool) -> bytes:
    """Plain text (with SGR or without), crlf or lf, long and short lines, now and then a line far longer
    than the screen is wide: what fast-forwarding is for."""
    out = []
    for _ in range(rng.randrange(3000, 6000)):
        line = bytes(33 + rng.randrange(94) for _ in range(rng.choice([0, 1, 19, 20, 21, 39, 40, 41, 99])))
        if rng.random() < 0.01:
            line *= rng.choice([50, 200, 1001])
        if colours and rng.random() < 0.2:
            line = b"\x1b[3%dm" % rng.randrange(8) + line
        out.append(line + rng.choice([b"\n", b"\r\n"]))
    return b"".join(out)


def seeds(count: int) -> list[object]:
    """Seeds 0 .. count - 1 for the seeded cases, each a random workload through the same paths: the first half
    (every kind a seed picks by its remainder by 2 and 4) in make test and make check, the rest in make soak."""
    return [seed if seed < count // 2 else pytest.param(seed, marks=pytest.mark.slow) for seed in range(count)]


@pytest.mark.parametrize("seed", seeds(24))
def test_fast_forward_changes_nothing(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    head = rng.choice([b"", b"\x1b[2;4r", b"\x1b[?1049h", b"x" * 20, b"\x1b[?7l", b"\x1b(0"])
    data = head + flood(rng, colours=seed % 2 == 1) + b"end"
    if seed % 4 == 2:  # a pattern without any line feed (as tests/support/soak_child.py writes), after a line or not
        data = head + bytes(33 + (i * 7) % 94 for i in range(rng.randrange(60_000, 90_000)))
    chunk = rng.choice([4096, 65536, len(data)])
    slow, fast = Screen(20, 5, 50), Screen(20, 5, 50)
    monkeypatch.setattr(screen_module, "FAST_FORWARD_MIN", 10**12)
    for i in range(0, len(data), chunk):
        slow.feed(data[i:i + chunk])
    monkeypatch.setattr(screen_module, "FAST_FORWARD_MIN", 1024)
    for i in range(0, len(data), chunk):
        fast.feed(data[i:i + chunk])
    assert fast.ansi_lines() == slow.ansi_lines()
    assert fast.history() == slow.history()
    assert (fast.cursor.x, fast.cursor.y, fast.cursor.pending, fast.cursor.attr) == \
        (slow.cursor.x, slow.cursor.y, slow.cursor.pending, slow.cursor.attr)


RENDER_CASES = [
    b"".join(b"line %d\r\n" % i for i in range(30)) + b"\x1b[1;32m$ \x1b[0m",
    b"main\r\n\x1b[?1049h\x1b[2;4r\x1b[3;1Hin alt\x1b[5;7H",
    b"\x1b[7mSTATUS\x1b[0m\x1b[2;5r\x1b[5;1H" + b"".join(b"%d\r\n" % i for i in range(50)),
    "wide 日本 and \x1b[4munderlined\x1b[0m".encode() + b"\x1b]2;a title\x07",
    b"\x1b[?25l" + b"x" * 20 + b"\x1b[3;3H\x1b(0q",
]


@pytest.mark.parametrize("data", RENDER_CASES)
def test_render_redraws_the_same_screen(data: bytes) -> None:
    original = fed(data, scrollback=100)
    again = fed(b"garbage\x1b[?1049h\x1b[5;6r\x1b[?6h" + original.render(scrollback=100), scrollback=100)
    assert again.lines() == original.lines() and again.ansi_lines() == original.ansi_lines()
    assert (again.cursor.x, again.cursor.y) == (original.cursor.x, original.cursor.y)
    assert (again.top, again.bottom, again.alternate, again.title, again.cursor_visible) == \
        (original.top, original.bottom, original.alternate, original.title, original.cursor_visible)
    assert again.history()[-len(original.history()):] == original.history()
    # pyte, independent of this model, shows the same text and cursor
    screen = pyte.Screen(20, 5)
    pyte.ByteStream(screen).feed(original.render())
    assert [line.rstrip() for line in screen.display] == original.lines()
    assert (screen.cursor.x, screen.cursor.y) == (original.cursor.x, original.cursor.y)


def test_a_drawing_over_its_limit_loses_its_oldest_scrollback_lines_only() -> None:
    # PROTOCOL.md 8.6: a rendered replay travels in one frame, so it is bounded; the lines a person
    # scrolled away longest ago go first, never the screen
    original = fed(b"".join(b"\x1b[3%dmline %d\x1b[0m\r\n" % (i % 8, i) for i in range(60)) + b"$ ", scrollback=50)
    whole = original.render(scrollback=50, input_modes=b"\x1b[?2004h")
    limit = len(whole) - 200
    cut = original.render(scrollback=50, input_modes=b"\x1b[?2004h", limit=limit)
    assert len(cut) <= limit < len(whole) and cut.endswith(b"\x1b[?2004h")
    assert b"line 55" in cut and b"line 6\x1b" not in cut  # the newest kept, the oldest left out
    again = fed(cut, scrollback=50)
    assert again.ansi_lines() == original.ansi_lines() and again.history()[-5:] == original.history()[-5:]
    assert original.render(scrollback=50, limit=len(whole)) == original.render(scrollback=50)
    # no room for any scrollback: the screen alone, whole, even over the limit (the caller does without it)
    assert original.render(scrollback=50, limit=10) == original.render()


def test_a_huge_terminal_is_modelled_up_to_a_bound() -> None:
    s = Screen(65535, 65535)
    s.feed(b"x")
    s.resize(65535, 3)
    assert (s.cols, s.rows) == (screen_module.MAX_COLS, 3) and s.lines()[0] == "x"


def test_resize_keeps_the_bottom_and_moves_rows_to_the_scrollback() -> None:
    s = fed(b"".join(b"%d\r\n" % i for i in range(5)) + b"5")
    s.resize(10, 3)
    assert s.lines() == ["3", "4", "5"] and (s.cursor.x, s.cursor.y) == (1, 2)
    assert [plain_line(line) for line in s.history()][-3:] == ["0", "1", "2"]
    s.resize(30, 6)
    assert s.lines() == ["3", "4", "5", "", "", ""] and (s.cols, s.rows, s.bottom) == (30, 6, 5)


def _model_and_direct(steps: list[tuple[str, object]], capacity: int = 64 * 1024) -> tuple[Screen, Screen]:
    """The same output and resizes through the daemon's ScreenModel (fed from a ring, late) and straight."""
    from shellper.core.ring import Scrollback
    from shellper.daemon.screenfeed import ScreenModel

    ring = Scrollback(capacity)
    model = ScreenModel(ring, capacity, 20, 5)
    direct = Screen(20, 5)
    for kind, value in steps:
        if kind == "out":
            assert isinstance(value, bytes)
            model.before_append(len(value))
            ring.append(value)
            model.after_append(ring.end - len(value), value)
            direct.feed(value)
            assert model.fed >= ring.start, "the ring dropped bytes the model had not seen"
        else:
            assert isinstance(value, tuple)
            model.resize(*value)
            direct.resize(*value)
    return model.catch_up(), direct


@pytest.mark.parametrize("steps", [
    [("out", b"abc\r\n" * 3), ("size", (10, 3)), ("out", b"0123456789xy"), ("size", (30, 6)), ("out", b"!")],
    [("size", (12, 4)), ("out", b"before any output is seen"), ("size", (12, 4)), ("size", (8, 2))],
    [("out", b"".join(b"\x1b[3%dmline %d\x1b[0m\r\n" % (i % 8, i) for i in range(20000))), ("size", (15, 5)),
     ("out", b"\x1b[?1049h" + b"frame\r\n" * 5000), ("out", b"x" * 100_000)],
], ids=["resizes between output", "resizes with no output yet", "more than the ring, and one huge append"])
def test_the_daemon_model_sees_every_byte_at_the_size_it_was_drawn(steps: list[tuple[str, object]]) -> None:
    model, direct = _model_and_direct(steps)
    assert model.ansi_lines() == direct.ansi_lines() and (model.cols, model.rows) == (direct.cols, direct.rows)
    assert (model.cursor.x, model.cursor.y) == (direct.cursor.x, direct.cursor.y)
    assert model.history() == direct.history()


def _full(data: bytes, monkeypatch: pytest.MonkeyPatch, cols: int = 20, rows: int = 5) -> Screen:
    """The reference: every byte emulated, in one feed, with no fast path."""
    monkeypatch.setattr(screen_module, "FAST_FORWARD_MIN", 10**12)
    s = Screen(cols, rows, 50)
    s.feed(data)
    monkeypatch.setattr(screen_module, "FAST_FORWARD_MIN", 1024)
    return s


def _same(a: Screen, b: Screen) -> None:
    assert a.ansi_lines() == b.ansi_lines() and a.history() == b.history()
    assert (a.cursor.x, a.cursor.y, a.cursor.pending, a.cursor.attr) == \
        (b.cursor.x, b.cursor.y, b.cursor.pending, b.cursor.attr)
    assert (a.top, a.bottom, a.alternate, a.title, a.autowrap) == (b.top, b.bottom, b.alternate, b.title, b.autowrap)


@pytest.mark.parametrize("seed", seeds(16))
def test_skipping_a_piece_for_the_next_changes_nothing(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    head = rng.choice([b"", b"\x1b[2;4r", b"\x1b[?1049h", b"x" * 20, b"\x1b[?7l", b"\x1b[1;31m", b"\xe6\x97"])
    data = flood(rng, colours=seed % 2 == 1)
    cut = rng.randrange(1, len(data))
    if seed % 2 == 0:  # at a line's end, else anywhere (inside an SGR sequence or a CRLF too)
        cut = data.index(b"\n", cut) + 1 if b"\n" in data[cut:] else cut
    tail = rng.choice([b"end", b"\x1b[2J\x1b[Hredraw", b"\x1b[?1049l", b""])
    piece, following = head + data[:cut], data[cut:] + tail
    # modes set by earlier output, which a skipped piece keeps (LNM, IRM, DECAWM, charsets, the alt screen)
    mode = random.Random(seed + 100).choice([b"", b"\x1b[4h", b"\x1b[20h", b"\x1b[?7l", b"\x1b(0", b"\x1b[?1049h"])
    reference = _full(mode + piece + following, monkeypatch)
    s = Screen(20, 5, 50)
    s.feed(mode)
    skipped = s.skip(piece, following)
    if not skipped:
        s.feed(piece)
    s.feed(following)
    _same(s, reference)
    # what may be skipped: plain text both sides, in the whole screen, after a complete character
    if head in (b"", b"x" * 20, b"\x1b[1;31m") and tail in (b"end", b"") and seed % 2 == 0:
        assert skipped or len(following) < 50_000


@pytest.mark.parametrize("seed", seeds(12))
def test_the_model_fed_in_pieces_shows_what_full_emulation_does(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain floods, redraw floods and mode changes through the daemon's ScreenModel, fed in small pieces
    (most skipped) as appends come: the screen is the one every byte emulated gives, and no append makes the
    model feed more than the append's size and a piece (the bound on a catch-up's pause)."""
    from shellper.core.ring import Scrollback
    from shellper.daemon import screenfeed as daemon_screen
    monkeypatch.setattr(daemon_screen, "FEED_PIECE", rng_piece := random.Random(seed).choice([1000, 4096, 30_000]))
    monkeypatch.setattr(daemon_screen, "FEED_SLICE", random.Random(seed).choice([300, 1000]))
    rng = random.Random(seed)
    parts = []
    for _ in range(rng.randrange(2, 6)):
        kind = rng.randrange(4)
        if kind == 0:
            parts.append(flood(rng, colours=rng.random() < 0.5))
        elif kind == 1:  # a full-screen program redrawing frames
            parts.append(b"".join(b"\x1b[H\x1b[2J\x1b[7mframe %d\x1b[0m\r\n" % i + b"row\r\n" * 3
                                  for i in range(rng.randrange(200, 2000))))
        else:
            parts.append(rng.choice([b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b[2;4r", b"\x1b[r", b"\x1b[?7l",
                                     b"\x1b[?7h", b"\x1b]2;title\x07", b"\x1b(0q\x1b(B", "日本".encode()]))
    data = b"".join(parts)
    ring = Scrollback(64 * 1024)
    model = daemon_screen.ScreenModel(ring, 64 * 1024, 20, 5)
    model.screen_now().scrollback = type(model.screen_now().scrollback)(maxlen=50)
    model.screen_now().scrollback_lines = 50
    at = 0
    while at < len(data):
        size = rng.choice([1, 100, 4096, 16384])
        before = model.fed
        model.before_append(size)
        assert model.fed - before < size + rng_piece
        ring.append(data[at:at + size])
        model.after_append(ring.end - len(data[at:at + size]), data[at:at + size])
        assert model.fed >= ring.start
        at += size
    _same(model.catch_up(), _full(data, monkeypatch))


PLAIN_LINES = [
    # (bytes, plain_lines: the line feeds when plain, else -1)
    (b"", 0),
    (b"x" * 99 + b"\n", 1),
    (b"a\nb\n\n", 3),
    (b"a\r\nb\r\n", 2),
    (b"\x1b[1;31mred\x1b[0m\r\n", 1),
    (b"\x1b[38:2::1:2:3mtruecolour\x1b[m\n", 1),
    (b"a\rb\n", -1),  # a carriage return not before a line feed overwrites
    (b"a\r", -1),  # one that may be: cut before its line feed
    (b"a\tb\n", -1),  # a tab moves the cursor by more than a character
    (b"\x1b[2J\n", -1),  # not SGR
    (b"\x1b[1;31", -1),  # an SGR cut short
    (b"\x1b\n", -1),
    (b"caf\xc3\xa9\n", -1),  # not ASCII
    (b"\x07\n", -1),
    (b"\x7f\n", -1),
]


@pytest.mark.parametrize(("data", "expected"), PLAIN_LINES)
def test_plain_lines(data: bytes, expected: int) -> None:
    assert screen_module.plain_lines(data) == expected


def test_a_flood_is_read_and_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The piece looked ahead at is kept for when it is fed: a plain flood's bytes are checked for plainness
    once each (twice, before, which was a third of the model's cost on the bench's flood)."""
    from shellper.core.ring import Scrollback
    from shellper.daemon import screenfeed as daemon_screen
    checked = 0
    real = screen_module.plain_lines

    def counting(data: bytes) -> int:
        nonlocal checked
        checked += len(data)
        return real(data)

    monkeypatch.setattr(screen_module, "plain_lines", counting)
    capacity = 8 * 1024 * 1024
    ring = Scrollback(capacity)
    model = daemon_screen.ScreenModel(ring, capacity, 80, 24)
    chunk = (b"x" * 99 + b"\n") * 655
    for _ in range(400):  # 26 MiB
        model.before_append(len(chunk))
        ring.append(chunk)
    assert model.fed > 20 * 1024 * 1024
    assert model.fed <= checked <= model.fed + daemon_screen.FEED_PIECE
    assert model.catch_up().lines()[-2] == "x" * 80


@pytest.mark.parametrize("data", [
    b"", b"\x1b[?1049h", b"\x1b[?1049h\x1b[?1049l", b"\x1b[?47h", b"\x1b[?1047h", b"\x1b[?25l", b"\x1b]2;hello\x07",
    b"\x1b]0;x\x1b\\", b"\x1b[2;4r", b"\x1b[2;4r\x1b[r", b"\x1b[?6h", b"\x1b[?6h\x1b[?6l", b"\x1b[2;4r\x1b[?1049h",
    b"\x1b[?25l\x1bc", b"\x1b[?25l\x1b[!p", b"\x1b[?1049h\x1b[?25l\x1b[?1049l\x1b[3;4r\x1b[?6h\x1b]2;t\x07",
])
def test_the_screen_and_the_mode_tracker_agree_on_the_modes_both_track(data: bytes) -> None:
    """The overlap of the two models (issue 28): ScreenModel.modes is the screen's values for SCREEN_MODES,
    the ring tracker's for the rest; where both track a mode they must not disagree, or a terminal would be
    given one after a rendered replay and the other after a gap."""
    from shellper.core.ring import Scrollback
    from shellper.daemon.screenfeed import SCREEN_MODES, ScreenModel
    ring = Scrollback(64 * 1024)
    model = ScreenModel(ring, 64 * 1024, 20, 5)
    ring.append(b"\x1b[?2004h" + data)
    modes, tracked = model.modes(), ring.modes.current()
    assert [getattr(modes, name) for name in SCREEN_MODES] == [getattr(tracked, name) for name in SCREEN_MODES]
    assert modes.bracketed_paste == tracked.bracketed_paste == (b"\x1b[?2004h" in model.rendered(0))
    assert b"\x1b[?1049h" not in model.input_modes() and b"\x1b[?25l" not in model.input_modes()
