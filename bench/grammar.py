"""What the escape grammar's consumers cost on a few MiB of output: the strippers, the query filter, the mode
tracker and the ring's trims (the sequence-end finder), each on plain text, a coloured log and a TUI's redraws.

Run from the repository root: ``python -m bench.grammar [--mib N]``. Why: these run on every byte a session
writes (the ring and the tracker) or on every replay and ``tail --plain`` (the strippers, the query filter);
plain text must stay a C-level scan.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from shellper.core.ring import RingBuffer, Scrollback
from shellper.core.terminal.modes import ModeTracker
from shellper.core.terminal.queries import strip_queries
from shellper.core.terminal.text import PlainStream, strip_ansi

MiB = 1024 * 1024
PIECE = 16 * 1024  # a PTY read's size

_LINE = b"2026-12-05 01:00:00 INFO worker[42]: request served in 12 ms, 3 rows, cache hit\r\n"
_COLOURED = (b"\x1b[32m2026-12-05 01:00:00\x1b[0m \x1b[1;34mINFO\x1b[0m worker[42]: "
             b"request served in \x1b[33m12 ms\x1b[0m, 3 rows\r\n")
_REDRAW = ("\x1b[?2026h\x1b[?25l"
           + "".join(f"\x1b[{row};1H\x1b[38;5;208m⠋ Working… \x1b[0m\x1b[K row {row} │ tokens: 1234 "
                     for row in range(1, 40))
           + "\x1b]2;title\x07\x1b[?25h\x1b[?2026l").encode()
WORKLOADS = {"plain log": _LINE, "coloured log": _COLOURED, "TUI redraw": _REDRAW}


def _data(unit: bytes, mib: int) -> bytes:
    return unit * (mib * MiB // len(unit) + 1)


def _pieces(data: bytes) -> list[bytes]:
    return [data[i:i + PIECE] for i in range(0, len(data), PIECE)]


def _best(run: Callable[[], object], rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    return best


def _ring(pieces: list[bytes]) -> None:
    ring = RingBuffer(1 * MiB)  # small: every append past the first MiB trims
    for p in pieces:
        ring.append(p)


def _tracker(pieces: list[bytes]) -> None:
    tracker, offset = ModeTracker(checkpoints=True), 0
    for p in pieces:
        tracker.feed(offset, p)
        offset += len(p)


def _scrollback(pieces: list[bytes]) -> None:
    sb = Scrollback(1 * MiB)
    for p in pieces:
        sb.append(p)


def _plain_stream(pieces: list[bytes]) -> None:
    stream = PlainStream()
    for p in pieces:
        stream.feed(p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=int, default=4)
    mib = ap.parse_args().mib
    print(f"ms/MiB, best of 3, {mib} MiB in {PIECE // 1024} KiB pieces")
    print(f"{'workload':14} {'strip_ansi':>10} {'PlainStream':>11} {'queries':>8} {'modes':>7} {'ring':>6} "
          f"{'scrollback':>10}")
    for name, unit in WORKLOADS.items():
        data = _data(unit, mib)
        pieces = _pieces(data)
        figures = [_best(lambda d=data: strip_ansi(d)), _best(lambda p=pieces: _plain_stream(p)),
                   _best(lambda d=data: strip_queries(d)), _best(lambda p=pieces: _tracker(p)),
                   _best(lambda p=pieces: _ring(p)), _best(lambda p=pieces: _scrollback(p))]
        row = " ".join(f"{f * 1000 / mib:{w}.1f}" for f, w in zip(figures, (10, 11, 8, 7, 6, 10), strict=True))
        print(f"{name:14} {row}")


if __name__ == "__main__":
    main()
