"""Whether this process waits for a CPU longer than it runs: the scheduler's own account of it.

Why: handing a flood's output to clients in small pieces lets a client work while the shellper reads
on, but every hand-off wakes a client, and when the machine is saturated (dozens of sessions flooding
at once) those wakeups cost more CPU than they gain. The kernel counts, per task, the time it ran and
the time it sat runnable waiting for a CPU (``/proc/self/schedstat``, nanoseconds), which tells the two
apart; the figures are in bench/NOTES.md (2026-12-03, "output is handed to the clients every two PTY
reads"). The sample is taken as output passes, never on a timer, so an idle session costs nothing.
"""

from __future__ import annotations

import os

SCHEDSTAT = "/proc/self/schedstat"
SAMPLE_BYTES = 256 << 10
"""Output between two samples: often enough to follow a burst of floods, rarely enough that the /proc read
costs next to nothing (bench/NOTES.md, "Sampling the scheduler")."""


def read_schedstat(path: str = SCHEDSTAT) -> tuple[int, int] | None:
    """(ns run, ns waited for a CPU) so far, or None where the kernel does not say (no such file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fields = os.read(fd, 256).split()
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return int(fields[0]), int(fields[1])
    except (IndexError, ValueError):
        return None


def waited_longer_than_ran(before: tuple[int, int], after: tuple[int, int]) -> bool:
    """Between two samples, did the process wait for a CPU longer than it ran?"""
    return after[1] - before[1] > after[0] - before[0]


class Starvation:
    """``starved`` says whether, over the last :data:`SAMPLE_BYTES` of output, this process waited for
    a CPU longer than it ran; False where the kernel keeps no such account."""

    def __init__(self, path: str = SCHEDSTAT, sample_bytes: int = SAMPLE_BYTES) -> None:
        self._path = path
        self._sample_bytes = sample_bytes
        self._since = 0
        self._last = read_schedstat(path)
        self.starved = False

    def output(self, nbytes: int) -> None:
        """Count output; every ``sample_bytes`` of it, sample and decide again."""
        self._since += nbytes
        if self._since < self._sample_bytes or self._last is None:
            return
        self._since = 0
        now = read_schedstat(self._path)
        if now is None:
            self._last = None
            self.starved = False
            return
        self.starved = waited_longer_than_ran(self._last, now)
        self._last = now
