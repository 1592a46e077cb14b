"""A small event loop for the shellper: file descriptors, one-shot timers, signals, and coroutines.

Why not asyncio: importing it costs a shellper more memory and start-up time than everything else
together (it pulls in ssl, concurrent.futures, and more), and its transports add a layer of calls to
every byte on the hot path. The shellper needs only this: callbacks when an fd is readable or
writable, one-shot timers, signals delivered through a wake-up pipe, and a few sequential flows
(stop, respawn) written as coroutines awaiting futures. With nothing to do, ``run`` blocks in one
``epoll_wait`` with no timeout: an idle session costs nothing.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import os
import select
import signal
import time
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterable

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any, TypeVar
    from typing import Generic as _Generic

    T = TypeVar("T")
else:
    T = None

    class _Generic:
        """Stands in for typing.Generic: ``Future[None]`` is only ever written in annotations."""

        __slots__ = ()

        def __class_getitem__(cls, _item: object) -> type:
            return cls

_IN, _OUT = select.EPOLLIN, select.EPOLLOUT
# As selectors reads epoll: an error or hang-up wakes both the reader and the writer of that fd.
MAX_WAIT = 2_147_483.0
"""Longest single epoll wait, in seconds (its timeout is a C int of milliseconds: ~24.8 days). A timer
further off (a 30-day --husk-ttl, a huge --grace) is reached by waiting again, not by an OverflowError
that would end the loop."""
_READABLE = ~select.EPOLLOUT
_WRITABLE = ~select.EPOLLIN


def _nothing(*_: object) -> None:
    """What a cancelled Handle calls (never, in fact)."""


class Handle:
    """A scheduled one-shot callback; ``cancel()`` makes it a no-op."""

    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        # It stays in the heap until its time comes: it must not keep its target (a client) alive till then.
        self.callback, self.args = _nothing, ()

    def __lt__(self, other: Handle) -> bool:
        return self.when < other.when


class Future(_Generic[T]):
    """A result, or the exception instead of one, that arrives later; coroutines ``await`` it."""

    __slots__ = ("_callbacks", "_done", "_error", "_result")

    def __init__(self) -> None:
        self._done = False
        self._result: T | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Future[T]], None]] = []

    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        """The result; raises the exception if the future failed."""
        if not self._done:
            raise RuntimeError("future is not done")
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def exception(self) -> BaseException | None:
        """What the future failed with; None if it has a result."""
        if not self._done:
            raise RuntimeError("future is not done")
        return self._error

    def set_result(self, value: T) -> None:
        if self._done:
            return
        self._done, self._result = True, value
        self._call_back()

    def set_exception(self, error: BaseException) -> None:
        if self._done:
            return
        self._done, self._error = True, error
        self._call_back()

    def _call_back(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

    def add_done_callback(self, cb: Callable[[Future[T]], None]) -> None:
        if self._done:
            cb(self)
        else:
            self._callbacks.append(cb)

    def __await__(self) -> Generator[Future[T], None, T]:
        if not self._done:
            yield self
        return self.result()


class Task(Future[T]):
    """The future of a coroutine run by ``Reactor.create_task``: what it returned, or what it raised."""

    __slots__ = ()


class Lock:
    """Mutual exclusion between coroutines on one reactor (two SPAWNs must not make two children)."""

    def __init__(self) -> None:
        self._locked = False
        self._waiters: deque[Future[None]] = deque()

    async def __aenter__(self) -> None:
        if self._locked:
            fut: Future[None] = Future()
            self._waiters.append(fut)
            await fut  # ownership is handed over by release()
        self._locked = True

    async def __aexit__(self, *exc: object) -> None:
        if self._waiters:
            self._waiters.popleft().set_result(None)
        else:
            self._locked = False


class Reactor:
    """One thread, one epoll: readers, writers, timers, signals, and coroutine tasks."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        """Seconds on a monotonic scale, by which timers fall due: replaceable (a test's virtual clock)
        before ``run``, which reads it once."""
        self._epoll = select.epoll()
        self._masks: dict[int, int] = {}  # what each registered fd is registered for
        self._readers: dict[int, tuple[Callable[..., object], tuple[Any, ...]]] = {}
        self._writers: dict[int, tuple[Callable[..., object], tuple[Any, ...]]] = {}
        self._priority: set[int] = set()
        """Readers woken by EPOLLPRI instead of EPOLLIN (a cgroup.events file signals a change that way)."""
        self._timers: list[Handle] = []
        self._ready: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self._signal_handlers: dict[int, Callable[[], object]] = {}
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_wakeup_fd: int | None = None
        self._running = False
        self.add_reader(self._wake_r, self._on_wakeup)
        self.on_error: Callable[[BaseException], None] = _reraise

    # ------------------------------------------------------------------------------- fds

    def _update(self, fd: int) -> None:
        reading = (select.EPOLLPRI if fd in self._priority else _IN) if fd in self._readers else 0
        mask = reading | (_OUT if fd in self._writers else 0)
        old = self._masks.get(fd)
        if old is None:
            if mask:
                self._epoll.register(fd, mask)
                self._masks[fd] = mask
        elif not mask:
            del self._masks[fd]
            self._epoll.unregister(fd)
        elif old != mask:
            self._epoll.modify(fd, mask)
            self._masks[fd] = mask

    def add_reader(self, fd: int, callback: Callable[..., object], *args: Any) -> None:
        self._readers[fd] = (callback, args)
        self._update(fd)

    def remove_reader(self, fd: int) -> None:
        if self._readers.pop(fd, None) is not None:
            self._update(fd)
        self._priority.discard(fd)

    def add_writer(self, fd: int, callback: Callable[..., object], *args: Any) -> None:
        self._writers[fd] = (callback, args)
        self._update(fd)

    def remove_writer(self, fd: int) -> None:
        if self._writers.pop(fd, None) is not None:
            self._update(fd)

    def forget_fd(self, fd: int) -> None:
        """Drop every callback for ``fd`` (call before closing it)."""
        self._readers.pop(fd, None)
        self._writers.pop(fd, None)
        self._priority.discard(fd)
        if self._masks.pop(fd, None) is not None:
            with contextlib.suppress(ValueError, OSError):
                self._epoll.unregister(fd)

    # ------------------------------------------------------------------------------- time

    def time(self) -> float:
        return self.clock()

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Handle:
        handle = Handle(self.clock() + max(0.0, delay), callback, args)
        heapq.heappush(self._timers, handle)
        return handle

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        self._ready.append((callback, args))

    # ------------------------------------------------------------------------------- signals

    def add_signal_handler(self, signum: int, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the loop when ``signum`` arrives (via the wake-up pipe)."""
        if self._old_wakeup_fd is None:
            self._old_wakeup_fd = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        self._signal_handlers[signum] = callback
        signal.signal(signum, _note_signal)
        signal.siginterrupt(signum, False)

    def _on_wakeup(self) -> None:
        try:
            data = os.read(self._wake_r, 4096)
        except BlockingIOError:
            return
        for signum in data:
            handler = self._signal_handlers.get(signum)
            if handler is not None:
                self._ready.append((handler, ()))

    # ------------------------------------------------------------------------------- coroutines

    def create_task(self, coro: Coroutine[Future[Any], Any, Any]) -> Task[Any]:
        """Run a coroutine that awaits reactor Futures; the task it returns is done when the coroutine is.

        A coroutine that raises fails its task (awaiting it, or its ``result()``, raises the same exception)
        and is reported to ``on_error`` at once, so no failure goes unseen when nobody awaits the task: the
        one exception is that a task failing with the very exception of a task it awaited is not reported
        again."""
        task: Task[Any] = Task()
        awaited: list[Future[Any] | None] = [None]

        def step() -> None:
            try:
                waiting = coro.send(None)  # Future.__await__ itself takes the awaited result (or raises)
            except StopIteration as stop:
                task.set_result(stop.value)
                return
            except BaseException as exc:
                last = awaited[0]
                try:
                    if not (isinstance(last, Task) and last._error is exc):
                        self.on_error(exc)
                finally:
                    task.set_exception(exc)
                return
            awaited[0] = waiting
            waiting.add_done_callback(resume)

        def resume(_: Future[Any]) -> None:
            self.call_soon(step)

        self.call_soon(step)
        return task

    def wait(self, futures: Iterable[Future[Any]], timeout: float | None) -> Future[bool]:
        """A future that is True once every future is done (failed ones too), or False when ``timeout``
        passes first."""
        pending = [f for f in futures if not f.done()]
        outcome: Future[bool] = Future()
        if not pending:
            outcome.set_result(True)
            return outcome
        left = [len(pending)]
        timer = self.call_later(timeout, outcome.set_result, False) if timeout is not None else None

        def one_done(_: Future[Any]) -> None:
            left[0] -= 1
            if left[0] == 0:
                if timer is not None:
                    timer.cancel()
                outcome.set_result(True)

        for fut in pending:
            fut.add_done_callback(one_done)
        return outcome

    def readable(self, fd: int) -> Future[None]:
        """A future done once ``fd`` is readable (e.g. a pidfd whose process exited)."""
        fut: Future[None] = Future()

        def ready() -> None:
            self.remove_reader(fd)
            fut.set_result(None)

        self.add_reader(fd, ready)
        return fut

    def priority_readable(self, fd: int) -> Future[None]:
        """A future done once ``fd`` signals EPOLLPRI (a kernfs file such as cgroup.events has changed)."""
        self._priority.add(fd)
        return self.readable(fd)

    # ------------------------------------------------------------------------------- run

    def stop(self) -> None:
        self._running = False

    def run(self) -> None:
        """Dispatch until ``stop()``. Blocks without a timeout when nothing is scheduled."""
        self._running = True
        poll, clock = self._epoll.poll, self.clock
        readers, writers, timers, ready = self._readers, self._writers, self._timers, self._ready
        while self._running:
            if ready:
                timeout = 0.0
            elif timers:
                while timers and timers[0].cancelled:
                    heapq.heappop(timers)
                # rounded up to epoll's millisecond, so a timer due in 0.3 ms is not a busy loop
                timeout = (min(MAX_WAIT, math.ceil(max(0.0, timers[0].when - clock()) * 1e3) * 1e-3)
                           if timers else -1)
            else:
                timeout = -1
            for fd, mask in poll(timeout):
                try:
                    if mask & _READABLE and fd in readers:
                        cb, args = readers[fd]
                        cb(*args)
                    if mask & _WRITABLE and fd in writers:
                        cb, args = writers[fd]
                        cb(*args)
                except Exception as exc:
                    self.on_error(exc)
            if timers:
                now = clock()
                while timers and timers[0].when <= now:
                    handle = heapq.heappop(timers)
                    if not handle.cancelled:
                        ready.append((handle.callback, handle.args))
            for _ in range(len(ready)):
                cb, args = ready.popleft()
                try:
                    cb(*args)
                except Exception as exc:
                    self.on_error(exc)

    def close(self) -> None:
        for signum in self._signal_handlers:
            signal.signal(signum, signal.SIG_DFL)
        if self._old_wakeup_fd is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


def _note_signal(signum: int, frame: object) -> None:
    """The real work happens on the loop; the wake-up fd has already carried the signal number."""


def _reraise(exc: BaseException) -> None:
    raise exc
