"""Merging a separate stderr at boundaries (shellper.core.merge): tables, then random interleavings."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shellper.core.merge import StreamMerger, incomplete_suffix, line_cut


@pytest.mark.parametrize(("data", "expected"), [
    (b"", 0),
    (b"plain\n", 0),
    (b"half\x1b", 1),
    (b"x\x1b[3", 3),
    (b"x\x1b[31m", 0),
    (b"x\x1b[31mred", 0),
    (b"\x1b]0;title", 9),
    (b"\x1b]0;title\x07", 0),
    (b"\x1b]0;title\x1b", 10),
    (b"\x1b]0;title\x1b\\", 0),
    (b"\x1b(", 2),
    (b"\x1b(B", 0),
    ("é".encode()[:1], 1),
    ("é".encode(), 0),
    ("a€".encode()[:-1], 2),
    ("a€".encode()[:-2], 1),
    ("𝄞".encode()[:3], 3),
    ("𝄞".encode(), 0),
    (b"\x80\x80", 0),  # stray continuation bytes: nothing to wait for
    (b"\x1b[31m" + "é".encode()[:1], 1),
    (b"\x1b[" + b"1;" * 3000, 0),  # a sequence longer than the window counts as finished
])
def test_incomplete_suffix(data: bytes, expected: int) -> None:
    assert incomplete_suffix(data) == expected


@pytest.mark.parametrize(("data", "expected"), [
    (b"", 0),
    (b"no end", 0),
    (b"one\n", 4),
    (b"one\ntwo", 4),
    (b"one\ntwo\n", 8),
    (b"one\n\x1b[3", 4),
    (b"one\n\x1b]0;a\nb", 4),  # the second newline is inside an unfinished OSC
])
def test_line_cut(data: bytes, expected: int) -> None:
    assert line_cut(data) == expected


def run(steps: list[tuple[str, bytes | float]], held_max: int = 1 << 20) -> list[bytes]:
    """Feed ("out"|"err", bytes) and ("quiet", now) steps at time 0; what each step let out."""
    merger = StreamMerger(held_max=held_max, quiet=0.03)
    results = []
    for kind, value in steps:
        if kind == "out":
            results.append(merger.out(value, 0.0))  # type: ignore[arg-type]
        elif kind == "err":
            results.append(merger.err(value, 0.0))  # type: ignore[arg-type]
        elif kind == "quiet":
            results.append(merger.on_quiet(value))  # type: ignore[arg-type]
        else:
            results.append(merger.end())
    return results


@pytest.mark.parametrize(("steps", "expected"), [
    # stdout at a line end: a whole stderr line goes out at once
    ([("err", b"E1\n")], [b"E1\n"]),
    # stderr in the middle of a stdout line waits for its end
    ([("out", b"out 1"), ("err", b"E\n"), ("out", b"89\n")], [b"out 1", b"", b"89\nE\n"]),
    # stderr inside a stdout escape sequence waits for the line end
    ([("out", b"\x1b[3"), ("err", b"E\n"), ("out", b"1mx\n")], [b"\x1b[3", b"", b"1mx\nE\n"]),
    # a stderr line written in pieces goes out whole
    ([("err", b"err"), ("out", b"o\n"), ("err", b"or\n")], [b"", b"o\n", b"error\n"]),
    # only stderr's whole lines go out; its unfinished one waits
    ([("out", b"a"), ("err", b"E1\nE2"), ("out", b"\n")], [b"a", b"", b"\nE1\n"]),
    # quiet: an unfinished stderr line (a prompt) goes out after FLUSH_AFTER_QUIET
    ([("err", b">>> "), ("quiet", 0.01), ("quiet", 0.03)], [b"", b"", b">>> "]),
    # quiet in the middle of a stdout line: stderr goes out there
    ([("out", b"progress 5%"), ("err", b"warn\n"), ("quiet", 0.03)], [b"progress 5%", b"", b"warn\n"]),
    # quiet, but stdout stopped inside an escape sequence: nothing goes out before it ends
    ([("out", b"\x1b[3"), ("err", b"E\n"), ("quiet", 1.0), ("out", b"1m"), ("quiet", 1.0)],
     [b"\x1b[3", b"", b"", b"1m", b"E\n"]),
    # quiet never cuts a stderr character or sequence
    ([("err", b"ok " + "é".encode()[:1]), ("quiet", 1.0), ("err", "é".encode()[1:] + b"\n")],
     [b"", b"ok ", "é".encode() + b"\n"]),
    ([("err", b"red\x1b[3"), ("quiet", 1.0)], [b"", b"red"]),
    # the end: everything held goes out
    ([("out", b"x"), ("err", b"tail"), ("end", b"")], [b"x", b"", b"tail"]),
])
def test_merger(steps: list[tuple[str, bytes | float]], expected: list[bytes]) -> None:
    assert run(steps) == expected


def test_held_bound() -> None:
    """Past the bound, held stderr goes out in the middle of a stdout line, but not inside its own sequence."""
    assert run([("out", b"line"), ("err", b"x" * 10), ("err", b"y" * 7 + b"\x1b[")], held_max=16) == \
        [b"line", b"", b"x" * 10 + b"y" * 7]


def test_flush_due() -> None:
    merger = StreamMerger(quiet=0.03)
    assert merger.flush_due() is None  # nothing held: no timer
    merger.out(b"partial", 1.0)
    merger.err(b"E\n", 1.01)
    assert merger.flush_due() == pytest.approx(1.04)
    merger.out(b"\x1b[", 1.02)
    assert merger.flush_due() is None  # stdout inside a sequence: wait for stdout, not for a timer
    assert merger.out(b"m\n", 1.05) == b"m\nE\n"
    assert merger.held == 0 and merger.flush_due() is None


# ------------------------------------------------------------------------------ random interleavings

_TOKENS = st.one_of(
    st.sampled_from([b"a", b"Z", b"0", b" ", b"\r", b"\t"]),
    st.sampled_from(["é", "€", "𝄞", "ж"]).map(str.encode),
    st.sampled_from([b"\x1b[31m", b"\x1b[0m", b"\x1b[1;38;5;196m", b"\x1b[2K", b"\x1b[?25l", b"\x1b(B", b"\x1b7",
                     b"\x1b]0;title\x07", b"\x1b]8;;http://x/\x1b\\"]),
)
_LINE = st.lists(_TOKENS, max_size=8).map(lambda tokens: [*tokens, b"\n"])
_STREAM = st.lists(_LINE, max_size=6)


def _pieces(draw: st.DrawFn, lines: list[list[bytes]]) -> list[bytes]:
    """A stream's bytes cut at random places, as reads from a descriptor cut them."""
    data = b"".join(b"".join(line) for line in lines)
    cuts = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=8))))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _boundaries(lines: list[list[bytes]], *, whole_lines: bool) -> set[int]:
    """Offsets at which a stream may be interrupted: after a whole line, or after a whole token."""
    offsets, at = {0}, 0
    for line in lines:
        for token in line:
            at += len(token)
            if not whole_lines:
                offsets.add(at)
        offsets.add(at)
    return offsets


Case = tuple[list[list[bytes]], list[list[bytes]], list[tuple[str, bytes]]]
"""Stdout's lines (of tokens), stderr's, and the steps that feed them."""


@st.composite
def _interleaving(draw: st.DrawFn, *, quiet: bool) -> Case:
    out_lines, err_lines = draw(_STREAM), draw(_STREAM)
    out, err = _pieces(draw, out_lines), _pieces(draw, err_lines)
    steps: list[tuple[str, bytes]] = []
    while out or err:
        choices = (["out"] if out else []) + (["err"] if err else []) + (["quiet"] if quiet else [])
        kind = draw(st.sampled_from(choices))
        steps.append((kind, out.pop(0) if kind == "out" else err.pop(0) if kind == "err" else b""))
    return out_lines, err_lines, steps


def _merge(steps: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """Feed the steps (a quiet step: time passes); the output as (stream, bytes) segments in order."""
    merger = StreamMerger(held_max=1 << 20, quiet=0.03)
    now, segments = 0.0, []
    for kind, data in steps:
        if kind == "out":
            released = merger.out(data, now)
            segments += [("out", released[:len(data)]), ("err", released[len(data):])]
        elif kind == "err":
            segments.append(("err", merger.err(data, now)))
        else:
            now += 1.0
            segments.append(("err", merger.on_quiet(now)))
    segments.append(("err", merger.end()))
    return [(stream, data) for stream, data in segments if data]


def _check(out_lines: list[list[bytes]], err_lines: list[list[bytes]], segments: list[tuple[str, bytes]],
           *, whole_lines: bool) -> None:
    streams = {"out": out_lines, "err": err_lines}
    emitted = {"out": 0, "err": 0}
    allowed = {name: _boundaries(lines, whole_lines=whole_lines) for name, lines in streams.items()}
    previous = None
    for stream, data in segments:
        if previous is not None and stream != previous:
            assert emitted[previous] in allowed[previous], f"{previous} cut at {emitted[previous]}: {segments}"
        emitted[stream] += len(data)
        previous = stream
    for name, lines in streams.items():  # each stream whole and in order
        assert b"".join(data for stream, data in segments if stream == name) == b"".join(map(b"".join, lines))


@settings(max_examples=200, deadline=None)
@given(_interleaving(quiet=False))
def test_random_interleavings_keep_lines_whole(case: Case) -> None:
    """Stdout and stderr lines (with escape sequences and multi-byte UTF-8), read in random pieces and
    random order: every line of each stream arrives whole, each stream in order."""
    out_lines, err_lines, steps = case
    _check(out_lines, err_lines, _merge(steps), whole_lines=True)


@settings(max_examples=200, deadline=None)
@given(_interleaving(quiet=True))
def test_random_interleavings_with_quiet_flushes_keep_sequences_whole(case: Case) -> None:
    """With quiet pauses anywhere, a line may be interrupted, but never a character or an escape sequence."""
    out_lines, err_lines, steps = case
    _check(out_lines, err_lines, _merge(steps), whole_lines=False)
