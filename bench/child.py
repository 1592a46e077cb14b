"""The programs the benchmark runs inside a raw PTY, dtach and shellper: one script, so all three see
exactly the same bytes.

    child.py flood BYTES [--now] [--banner]   wait for a byte of input (or start at once with --now),
                                              write BYTES of 99 'x' + newline lines, then MARKER; repeat
                                              on every further input byte; exit on end of input
             [--done-file PATH]               create PATH once the --now flood's last write returned
    child.py echo [--banner]                  write back every input byte at once

``--banner`` writes BANNER at start (a replaying client shows it); ``--ready-file PATH`` creates PATH
(for dtach, which replays nothing). Either says: the terminal is raw and the child awaits input.

Both put their terminal in raw mode first: no echo of the "go" byte and no newline translation, so
the byte counts are exact and the same whatever sits between the child and the harness. Kept to the
standard library and free of imports from the project, so its start-up costs the same everywhere.
"""

from __future__ import annotations

import argparse
import os
import sys
import termios
import tty

MARKER = b"\n#BENCH-END#\n"
"""Ends every flood; never appears in the flood data."""
BANNER = b"#BENCH-READY#\n"
"""Written once at start-up with --banner: a replaying client shows it, so the harness knows it is attached."""
LINE = b"x" * 99 + b"\n"
BLOCK = LINE * 655  # 65,500 bytes per write


def flood_bytes(total: int) -> int:
    """What a flood of ``total`` puts on the terminal, marker included."""
    return total + len(MARKER)


def _raw() -> None:
    if os.isatty(0):
        tty.setraw(0, termios.TCSANOW)


def _write_all(data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def flood(total: int) -> None:
    left = total
    while left >= len(BLOCK):
        _write_all(BLOCK)
        left -= len(BLOCK)
    if left:
        _write_all(BLOCK[:left])
    _write_all(MARKER)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.child")
    sub = parser.add_subparsers(dest="mode", required=True)
    f = sub.add_parser("flood")
    f.add_argument("bytes", type=int)
    f.add_argument("--now", action="store_true", help="flood once at start, without waiting for input")
    f.add_argument("--done-file", help="with --now: create this file once the flood is written")
    e = sub.add_parser("echo")
    for p in (f, e):
        p.add_argument("--banner", action="store_true")
        p.add_argument("--ready-file", help="create this file once the terminal is raw and input is awaited")
    args = parser.parse_args(argv)
    _raw()
    if args.banner:
        _write_all(BANNER)
    if args.ready_file:
        open(args.ready_file, "xb").close()
    if args.mode == "echo":
        while True:
            data = os.read(0, 65536)
            if not data:
                return 0
            _write_all(data)
    if args.now:
        flood(args.bytes)
        if args.done_file:
            open(args.done_file, "xb").close()
    while True:
        go = os.read(0, 1)
        if not go:
            return 0
        flood(args.bytes)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BrokenPipeError, OSError):
        sys.exit(1)
