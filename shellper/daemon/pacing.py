"""Holding the child's output back while a client that is reading falls behind, so it loses nothing.

Paced clients are the tower (it records and serves the session: output it misses is lost for good)
and terminals (a person reading a flood expects all of it, as in a plain terminal). Viewers are never
waited for: one that falls behind the ring gets a GAP. When a paced client is more than ``limit``
bytes behind, the shellper stops reading the child's output (the child then blocks in write, which is
what a PTY does when nobody reads) until every paced client is back within ``limit // 2``.
A client that takes nothing for ``stall`` seconds is not waited for again until it has caught up:
a hung tower or a terminal stopped with ^S delays the child once, by ``stall``, and then gets a GAP
like any other client. A timer runs only while output is held, so an idle session still costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from shellper.daemon.reactor import Handle, Reactor

STALL_SECONDS = 2.0
"""How long a paced client may take nothing while output is held for it before it is no longer waited for."""


TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Protocol

    from shellper.protocol.wire import Role

    class _Reader(Protocol):
        client_id: int

        @property
        def role(self) -> Role | None: ...
        @property
        def pos(self) -> int: ...


class OutputPacer:
    """The hold/release decision for one session; the session pauses and resumes its PTY reader."""

    def __init__(self, loop: Reactor, limit: int, *, readers: Callable[[], Iterable[_Reader]],
                 end: Callable[[], int], pause: Callable[[], None], resume: Callable[[], None],
                 log: Callable[[str], object], stall: float = STALL_SECONDS) -> None:
        self.loop = loop
        self.limit = limit
        self.stall = stall
        self._readers, self._end = readers, end
        self._pause, self._resume, self._log = pause, resume, log
        self.holding = False
        self._timer: Handle | None = None
        self._marks: dict[int, int] = {}
        self._exempt: set[int] = set()
        """Client ids that stalled and are not waited for until they catch up."""

    def on_output(self, end: int | None = None) -> None:
        """New output is in the ring (which now ends at ``end``, when the caller has it): hold further output
        if a paced client is now too far behind."""
        if self.holding:
            return
        end, limit, exempt = self._end() if end is None else end, self.limit, self._exempt
        for reader in self._readers():
            if end - reader.pos >= limit and reader.client_id not in exempt:
                self.holding = True
                self._mark()
                self._pause()
                self._timer = self.loop.call_later(self.stall, self._check_stall)
                return

    def on_progress(self) -> None:
        """A paced client took output, or went away: release once all are within half the limit."""
        if not self.holding and not self._exempt:
            return
        end = self._end()
        readers = list(self._readers())
        if self._exempt:
            self._exempt = {r.client_id for r in readers if r.client_id in self._exempt and end - r.pos > 0}
        if self.holding and not self._lagging(readers, end):
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

    def _lagging(self, readers: list[_Reader], end: int) -> list[_Reader]:
        """The paced clients output is held for: more than half the limit behind, not exempt."""
        half = self.limit // 2
        return [r for r in readers if end - r.pos > half and r.client_id not in self._exempt]

    def _mark(self) -> None:
        self._marks = {r.client_id: r.pos for r in self._readers()}

    def _check_stall(self) -> None:
        self._timer = None
        if not self.holding:
            return
        for reader in self._lagging(list(self._readers()), self._end()):
            if self._marks.get(reader.client_id) == reader.pos:
                self._exempt.add(reader.client_id)
                self._log(f"{reader.role} client {reader.client_id} took no output for {self.stall:g} s: output "
                          "no longer waits for it until it catches up")
        if not self._lagging(list(self._readers()), self._end()):
            self.release()
            return
        self._mark()
        self._timer = self.loop.call_later(self.stall, self._check_stall)
