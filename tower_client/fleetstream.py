"""The Fleet's merged stream, and what every part of the Fleet shares: its settings, files and members.

:class:`MergedStream` is the first of the Fleet's parts (:class:`~tower_client.fleet.Fleet` builds on
:class:`~tower_client.fleetfollow.Following`, which builds on this): the queue every session's reader
hands items to, the iteration a Tower takes them from (each output chunk taken makes room for its
session's reader again), the acknowledgements, and the checks every request makes.

An item goes to exactly one stream: a session's own (:class:`SessionStream`, ``fleet.session(name).stream()``)
while one is open for its name, else the merged one. A session stream closed with items not taken hands them
to the merged stream, ahead of that session's later items: each item is delivered once, in its session's order,
and acknowledged the same way wherever it was taken.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tower_client.apply import Report
from tower_client.atomicfile import write_atomic
from tower_client.errors import FleetClosed, FleetError, FleetNotStarted, UnknownSession
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


class Inbox:
    """An unbounded queue for one stream's items: asyncio.Queue's ``put_nowait``, ``get``, ``get_nowait`` and
    ``empty``, without its bookkeeping for bounds and ``join()`` (a Fleet puts and takes every item once)."""

    __slots__ = ("_items", "_waiters")

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        self._wake()

    def get_nowait(self) -> Any:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    async def get(self) -> Any:
        items = self._items
        while not items:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:  # cancelled: a wake-up meant for this getter goes to the next one
                waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                if items:
                    self._wake()
                raise
        return items.popleft()

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class MergedStream:
    """The Fleet's stream and shared state (set by :class:`~tower_client.fleet.Fleet`'s constructor)."""

    dir: str
    owner: str
    policy: FleetPolicy
    registry: RegistryFile
    journal: ProgressJournal
    members: dict[str, Member]
    report: Report | None
    _queue: Inbox
    _watch: DirWatch | None
    _registry_lock: asyncio.Lock
    _tasks: set[asyncio.Task[Any]]
    _started: bool
    _closed: bool
    _closing: asyncio.Task[None] | None
    _agent_relaunches: dict[str, int]
    _launching: set[str]
    _streams: dict[str, SessionStream]

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
        for stream in list(self._streams.values()):
            stream._end()

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
        self._taken(item)
        return item  # type: ignore[no-any-return]

    def _taken(self, item: FleetItem) -> None:
        """The Tower took ``item`` (from either stream): output taken makes room for its session's reader."""
        if isinstance(item, OutputChunk):
            m = self.members.get(item.session)
            if m is not None and m.instance_id == item.instance_id:
                m.pending -= len(item.data)
                if m.pending < MAX_PENDING_BYTES:
                    m.room.set()

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
            stream = self._streams.get(item.session)
            (self._queue if stream is None else stream._queue).put_nowait(item)

    def _open_stream(self, name: str) -> SessionStream:
        self._member(name)
        if name in self._streams:
            raise FleetError(name, f"a stream of session {name!r} is open already: one at a time")
        stream = self._streams[name] = SessionStream(self, name)
        return stream

    def _end_stream_of(self, name: str) -> None:
        """``name`` has left the Fleet (stopped, reaped): its own stream ends after what it holds."""
        stream = self._streams.pop(name, None)
        if stream is not None:
            stream._end()

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


class SessionStream:
    """One session's own stream, as asyncssh's process has its own output: ``async for item in stream`` takes
    that session's items only (output, states, events, the Fleet's notices about it), across its relaunches
    and respawns, while the Fleet's merged stream carries the others (see
    :meth:`~tower_client.fleetsession.SessionHandle.stream`). The iteration ends when the stream is closed, when
    the session leaves the Fleet (stopped with ``forget``, reaped, stopped from outside) after its last
    item, or when the Fleet closes."""

    def __init__(self, fleet: MergedStream, name: str) -> None:
        self.fleet = fleet
        self.name = name
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._ended = False

    def __repr__(self) -> str:
        return f"<SessionStream {self.name!r}{' closed' if self.closed else ''}>"

    @property
    def closed(self) -> bool:
        """No more items come here (closed, the session left, or the Fleet closed)."""
        return self._ended

    def __aiter__(self) -> AsyncIterator[FleetItem]:
        return self

    async def __anext__(self) -> FleetItem:
        """The next item of this session; the iteration ends at once when the Fleet closes (what was not
        taken is not acknowledged: it comes again at the next start), as the merged stream's does."""
        if self.fleet.closed:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _END or self.fleet.closed:
            self._queue.put_nowait(_END)
            raise StopAsyncIteration
        self.fleet._taken(item)
        return item  # type: ignore[no-any-return]

    async def next(self, timeout: float | None = None) -> FleetItem | None:
        """The next item, or None after ``timeout`` seconds with none; FleetClosed once the stream has ended."""
        try:
            async with asyncio.timeout(timeout):
                return await self.__anext__()
        except TimeoutError:
            return None
        except StopAsyncIteration:
            raise FleetClosed(self.name, f"the stream of session {self.name!r} has ended") from None

    def ack(self, item: FleetItem) -> None:
        """``fleet.ack(item)``: the Tower consumed it (the same journal, wherever the item was taken)."""
        self.fleet.ack(item)

    def close(self) -> None:
        """Stop taking this session's items here: the ones not taken, and every later one, go to the merged
        stream (in order). Safe to call again."""
        if self.fleet._streams.get(self.name) is self:
            del self.fleet._streams[self.name]
        left: list[Any] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not _END:
                left.append(item)
        self._end()
        for item in left:
            self.fleet._emit(item)

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._queue.put_nowait(_END)

    async def __aenter__(self) -> SessionStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
