"""Child programs for the fault, hostile-input and soak tests: ``python soak_child.py MODE [ARGS]``.

Each mode is a small, deterministic program whose output the tests can check byte for byte:

* ``pattern N``: raw mode (no echo, no CR/LF translation), print ``READY\\n``, wait for one input byte,
  write N bytes of :data:`PATTERN` (N=0: forever), print ``\\nDONE <seconds>\\n``, then wait for EOF.
* ``tree``: fork grandchildren that ignore SIGHUP and SIGTERM (one in the child's process group, one in
  a group of its own, one double-forked, one in a session of its own), print ``PIDS p1 p2 ...`` and
  then idle (``tree idle``) or, after one input byte, flood (``tree flood``).
* ``ticker INTERVAL``: print ``t<seq>`` lines every INTERVAL seconds and echo input lines back as
  ``in:<line>``; an input line ``exit N`` exits with status N, ``burst N`` prints about N bytes at once.
* ``drain INTERVAL``: discard all input, print a tick every INTERVAL seconds (a target for fuzzers).
* ``crash``: die at once with SIGSEGV.

Timing here is the *workload* (how fast a child writes), never test synchronisation.
"""

from __future__ import annotations

import os
import resource
import select
import signal
import sys
import termios
import time
import tty

PATTERN = bytes(33 + (i * 7) % 94 for i in range(4093))
"""Printable, no LF/CR (raw mode passes it unchanged), prime length so chunk edges never line up."""


def pattern_at(offset: int, length: int) -> bytes:
    """The ``length`` pattern bytes that start at stream index ``offset`` (offset 0 = first pattern byte)."""
    start = offset % len(PATTERN)
    reps = (start + length) // len(PATTERN) + 1
    return (PATTERN * reps)[start:start + length]


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _raw() -> None:
    if os.isatty(0):
        tty.setraw(0, termios.TCSANOW)


def _wait_eof() -> None:
    while True:
        try:
            if not os.read(0, 65536):
                return
        except OSError:
            return


def pattern(total: int) -> None:
    _raw()
    _write_all(1, b"READY\n")
    os.read(0, 1)
    block = PATTERN * (65536 // len(PATTERN) + 1)
    started = time.monotonic()
    written = 0
    while total == 0 or written < total:
        start = written % len(PATTERN)
        n = 65536 if total == 0 else min(65536, total - written)
        _write_all(1, memoryview(block)[start:start + n] if start + n <= len(block) else pattern_at(written, n))
        written += n
    _write_all(1, b"\nDONE %.3f\n" % (time.monotonic() - started))
    _wait_eof()


def _immortal() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _idle_forever() -> None:
    while True:
        signal.pause()


def tree(then: str) -> None:
    """Grandchildren that a plain hang-up or SIGTERM would not end."""
    _raw()
    pids: list[int] = []
    r, w = os.pipe()
    for kind in ("group", "own-group", "double-fork", "own-session"):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _immortal()
            if kind == "own-group":
                os.setpgid(0, 0)
            elif kind == "own-session":
                os.setsid()
            elif kind == "double-fork" and os.fork():
                os._exit(0)
            os.write(w, b"%d\n" % os.getpid())
            os.close(w)
            _idle_forever()
        if kind == "double-fork":
            os.waitpid(pid, 0)
        else:
            pids.append(pid)
    os.close(w)
    reported = []
    with os.fdopen(r, "rb") as f:
        for line in f:
            reported.append(int(line))
    _write_all(1, b"PIDS " + b" ".join(b"%d" % p for p in sorted(reported)) + b"\n")
    if then == "flood":
        os.read(0, 1)
        block = PATTERN * 16
        while True:
            _write_all(1, block)
    _idle_forever()


def ticker(interval: float) -> None:
    seq = 0
    buf = b""
    next_tick = time.monotonic()
    while True:
        timeout = max(0.0, next_tick - time.monotonic())
        readable, _, _ = select.select([0], [], [], timeout)
        if readable:
            chunk = os.read(0, 4096)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                line = line.rstrip(b"\r")
                if line.startswith(b"exit "):
                    sys.exit(int(line[5:]))
                if line.startswith(b"burst "):
                    _write_all(1, (PATTERN[:79] + b"\n") * (int(line[6:]) // 80))
                    continue
                _write_all(1, b"in:" + line + b"\n")
        if time.monotonic() >= next_tick:
            _write_all(1, b"t%d\n" % seq)
            seq += 1
            next_tick += interval


def drain(interval: float) -> None:
    _raw()
    _write_all(1, b"READY\n")
    seq = 0
    next_tick = time.monotonic()
    while True:
        readable, _, _ = select.select([0], [], [], max(0.0, next_tick - time.monotonic()))
        if readable and not os.read(0, 65536):
            return
        if time.monotonic() >= next_tick:
            _write_all(1, b"t%d\n" % seq)
            seq += 1
            next_tick += interval


def main(argv: list[str]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # crashes here are on purpose: no core files
    mode = argv[0]
    if mode == "pattern":
        pattern(int(argv[1]))
    elif mode == "tree":
        tree(argv[1] if len(argv) > 1 else "idle")
    elif mode == "ticker":
        ticker(float(argv[1]))
    elif mode == "drain":
        drain(float(argv[1]))
    elif mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
