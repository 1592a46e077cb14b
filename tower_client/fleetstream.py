"""The Fleet's merged stream, and what every part of the Fleet shares: its settings, files and members.

:class:`MergedStream` is the first of the Fleet's parts (:class:`~tower_client.fleet.Fleet` builds on
:class:`~tower_client.fleetfollow.Following`, which builds on this): the queue every session's reader
hands items to, the iteration a Tower takes them from (each output chunk taken makes room for its
session's reader again), the acknowledgements, and the checks every request makes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tower_client.apply import Report
from tower_client.atomicfile import write_atomic
from tower_client.errors import FleetClosed, FleetNotStarted, UnknownSession
from tower_client.fleetmember import Member
from tower_client.inotify import DirWatch
from tower_client.options import FleetPolicy
from tower_client.progress import ProgressJournal
from tower_client.registry_file import RegistryFile
from tower_client.stream import FleetItem, Missed, OutputChunk, SessionEvent, StateChange

MAX_PENDING_BYTES = 1024 * 1024
"""Output of one session handed to the merged stream and not yet taken by the Tower. Past it, that
session's reader waits: its client stops reading, and the shellper holds the child (as for any tower
that does not keep up) instead of the Tower's memory growing."""

_END = object()


class MergedStream:
    """The Fleet's stream and shared state (set by :class:`~tower_client.fleet.Fleet`'s constructor)."""

    dir: str
    owner: str
    policy: FleetPolicy
    registry: RegistryFile
    journal: ProgressJournal
    members: dict[str, Member]
    report: Report | None
    _queue: asyncio.Queue[Any]
    _watch: DirWatch | None
    _registry_lock: asyncio.Lock
    _tasks: set[asyncio.Task[Any]]
    _started: bool
    _closed: bool
    _closing: asyncio.Task[None] | None
    _agent_relaunches: dict[str, int]
    _launching: set[str]

    @property
    def closed(self) -> bool:
        """close() or shutdown() was called: requests raise FleetClosed, the stream has ended."""
        return self._closed

    def _check_live(self, name: str | None = None) -> None:
        """Requests need a started Fleet that is not closed: before start() it has not adopted what runs (a
        session launched then would be attached twice), after close() nothing watches or reads any more."""
        if self._closed:
            raise FleetClosed(name, "this Fleet is closed")
        if not self._started:
            raise FleetNotStarted(name, "this Fleet is not started: await fleet.start() (or async with fleet) first")

    def _end_stream(self) -> None:
        """The Fleet is closed: its stream ends now, waking a reader waiting for the next item."""
        self._closed = True
        self._queue.put_nowait(_END)

    def __aiter__(self) -> AsyncIterator[FleetItem]:
        return self

    async def __anext__(self) -> FleetItem:
        """The next item; the iteration ends when the Fleet is closed (items not taken by then are not
        acknowledged, so they come again at the next start)."""
        if self._closed:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _END or self._closed:
            self._queue.put_nowait(_END)
            raise StopAsyncIteration
        if isinstance(item, OutputChunk):
            m = self.members.get(item.session)
            if m is not None and m.instance_id == item.instance_id:
                m.pending -= len(item.data)
                if m.pending < MAX_PENDING_BYTES:
                    m.room.set()
        return item  # type: ignore[no-any-return]

    async def next(self, timeout: float | None = None) -> FleetItem | None:
        """The next item, or None after ``timeout`` seconds with none; FleetClosed once the Fleet is closed."""
        if not self._queue.empty() or timeout is None:  # one waiting already: no timer to set up and cancel
            try:
                return await self.__anext__()
            except StopAsyncIteration:
                raise FleetClosed(None, "this Fleet is closed: its stream has ended") from None
        try:
            async with asyncio.timeout(timeout):
                return await self.__anext__()
        except TimeoutError:
            return None
        except StopAsyncIteration:
            raise FleetClosed(None, "this Fleet is closed: its stream has ended") from None

    def ack(self, item: FleetItem) -> None:
        """The Tower has consumed ``item`` (and everything of its session before it). Committed in the
        background; ``await sync()`` to wait until it is on disk."""
        if isinstance(item, OutputChunk):
            self.journal.ack_output(item.session, item.instance_id, item.end)
        elif isinstance(item, Missed):
            self.journal.ack_output(item.session, item.instance_id, item.offset)
        elif isinstance(item, StateChange | SessionEvent) and item.seq:
            self.journal.ack_event(item.session, item.instance_id, item.seq)

    async def sync(self) -> None:
        await self.journal.sync()

    def _emit(self, item: FleetItem) -> None:
        if not self._closed:  # nobody reads a closed Fleet's stream
            self._queue.put_nowait(item)

    def _member(self, name: str) -> Member:
        self._check_live(name)
        m = self.members.get(name)
        if m is None:
            raise UnknownSession(name, f"no session {name!r} in this fleet")
        return m

    async def _bounded(self, jobs: Sequence[Any]) -> list[Any]:
        limit = asyncio.Semaphore(self.policy.concurrency)

        async def one(job: Any) -> Any:
            async with limit:
                return await job

        return list(await asyncio.gather(*(one(j) for j in jobs), return_exceptions=True))

    def _later(self, job: Any) -> None:
        task = asyncio.get_running_loop().create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _save_registry(self) -> None:
        async with self._registry_lock:
            data = self.registry.encode()
            await asyncio.to_thread(write_atomic, self.registry.path, data)
