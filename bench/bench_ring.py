"""Ring buffer micro-benchmark: append throughput and full-ring read time.

Run from the repository root: ``python3 -m bench.bench_ring``. Why: the ring sits on the PTY
read path of every session, so its per-append cost bounds how fast a flooding child can be
drained; the read is what every (re)attach pays.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from shellper.core.defaults import DEFAULT_RING_BYTES
from shellper.core.ring import RingBuffer, Scrollback

MiB = 1024 * 1024
TOTAL = 256 * MiB  # bytes pushed per append measurement

# A TUI frame: synchronized-output bracket and hidden cursor around ~2 KiB of cursor moves,
# colours and UTF-8 (Claude-Code-like redraws, no newlines): 4 mode changes per frame.
_FRAME = (
    "\x1b[?2026h\x1b[?25l"
    + "".join(f"\x1b[{row};1H\x1b[38;5;208m⠋ Working… \x1b[0m\x1b[K row {row} tokens: 1234 "
              for row in range(1, 40))
    + "\x1b[?25h\x1b[?2026l"
).encode()
# Worst case for the mode tracker: a cursor toggle pair every ~60 bytes.
_DENSE = "\x1b[12;1H\x1b[38;5;208m⠋ Working… \x1b[0m\x1b[K \x1b[?25l\x1b[?25h tokens: 1234 ".encode()


def _chunk(size: int, pattern: bytes = _FRAME) -> bytes:
    return (pattern * (size // len(pattern) + 1))[:size]


def _throughput(append: Callable[[bytes], None], size: int, pattern: bytes = _FRAME) -> float:
    chunk = _chunk(size, pattern)
    count = TOTAL // size
    for _ in range(DEFAULT_RING_BYTES // size + 1):  # fill first: measure the steady (trimming) state
        append(chunk)
    t0 = time.perf_counter()
    for _ in range(count):
        append(chunk)
    return count * size / MiB / (time.perf_counter() - t0)


def run() -> dict[str, float]:
    """Measurements keyed by name: MiB/s for appends, milliseconds for the read."""
    results: dict[str, float] = {}
    for size in (4 * 1024, 64 * 1024):
        results[f"ring append {size // 1024} KiB (MiB/s)"] = _throughput(RingBuffer().append, size)
        results[f"scrollback append {size // 1024} KiB (MiB/s)"] = _throughput(Scrollback().append, size)
        results[f"scrollback append {size // 1024} KiB, dense modes (MiB/s)"] = _throughput(
            Scrollback().append, size, _DENSE
        )
    ring = RingBuffer()
    chunk = _chunk(64 * 1024)
    while ring.end < 2 * ring.capacity:
        ring.append(chunk)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        data = ring.read(ring.start, 8 * MiB).data
    results["read 8 MiB (ms)"] = (time.perf_counter() - t0) / reps * 1000
    assert len(data) == ring.size
    return results


def main() -> None:
    for name, value in run().items():
        print(f"{name:46} {value:10.1f}")


if __name__ == "__main__":
    main()
