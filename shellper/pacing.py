"""Holding the child's output back while the tower falls behind, so the tower loses nothing.

Terminals and viewers are never waited for: one that falls behind the ring gets a GAP. The tower is
different: it records and serves the session, and output it misses is lost for good. So when the
tower is more than ``limit`` bytes behind, the shellper stops reading the child's output (the child
then blocks in write, which is what a PTY does when nobody reads) until the tower is back within ``limit // 2``.
A tower that takes nothing for ``stall`` seconds is not waited for again until it has caught up:
a hung tower delays the child once, by ``stall``, and then gets a GAP like any other client.
A timer runs only while output is held, so an idle session still costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from shellper.reactor import Handle, Reactor

STALL_SECONDS = 2.0
"""How long a tower may take nothing while output is held for it before it is no longer waited for."""


TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs each shellper ~2.5 ms and 0.5 MiB
if TYPE_CHECKING:
    from typing import Protocol

    class _Reader(Protocol):
        client_id: int
        pos: int


class OutputPacer:
    """The hold/release decision for one session; the session pauses and resumes its PTY reader."""

    def __init__(self, loop: Reactor, limit: int, *, tower: Callable[[], _Reader | None], end: Callable[[], int],
                 pause: Callable[[], None], resume: Callable[[], None], log: Callable[[str], object],
                 stall: float = STALL_SECONDS) -> None:
        self.loop = loop
        self.limit = limit
        self.stall = stall
        self._tower, self._end = tower, end
        self._pause, self._resume, self._log = pause, resume, log
        self.holding = False
        self._timer: Handle | None = None
        self._mark = 0
        self._exempt: _Reader | None = None

    def on_output(self) -> None:
        """New output is in the ring: hold further output if the tower is now too far behind."""
        tower = self._tower()
        if self.holding or tower is None or tower is self._exempt or self._end() - tower.pos < self.limit:
            return
        self.holding = True
        self._mark = tower.pos
        self._pause()
        self._timer = self.loop.call_later(self.stall, self._check_stall)

    def on_progress(self) -> None:
        """The tower took output, or went away: release once it is within half the limit."""
        tower = self._tower()
        if tower is None:
            self.release()
            return
        lag = self._end() - tower.pos
        if tower is self._exempt and lag <= 0:
            self._exempt = None  # caught up: waited for again
        if self.holding and lag <= self.limit // 2:
            self.release()

    def release(self) -> None:
        if self.holding:
            self.forget()
            self._resume()

    def forget(self) -> None:
        """Drop the hold without resuming (the child the reader belonged to is gone)."""
        self.holding = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check_stall(self) -> None:
        self._timer = None
        if not self.holding:
            return
        tower = self._tower()
        if tower is None or tower.pos == self._mark:
            if tower is not None:
                self._exempt = tower
                self._log(f"tower client {tower.client_id} took no output for {self.stall:g} s: output no "
                          "longer waits for it until it catches up")
            self.release()
            return
        self._mark = tower.pos
        self._timer = self.loop.call_later(self.stall, self._check_stall)
