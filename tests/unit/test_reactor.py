"""The reactor (shellper.daemon.reactor), rule by rule: timers on a virtual clock, the wait cap, call_soon order,
futures and coroutine tasks, fd readiness and signals through the wake-up fd.

Timers run on :class:`VirtualTime`: the clock stands still while there is work and, when the loop would
block with nothing ready, jumps to the end of that wait, so a 30-day timer fires at once and at its time.
Readiness and signals use real fds and real signals.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from shellper.daemon.reactor import MAX_WAIT, Future, Lock, Reactor, Task

START = 1000.0
"""Where virtual time starts: a value unlike 0, so a timer measured from 0 by mistake shows."""
SAFETY = 10.0
"""Seconds a test on real time waits for what it expects before failing."""


class WouldBlockForever(AssertionError):
    """The loop asked to wait with no timeout and nothing ready: under real time it would hang."""


class VirtualTime:
    """The reactor's clock and its epoll's ``poll``, so that time passes only when the loop waits.

    A poll returns the fds that are ready now; with none ready and a timeout, the clock jumps by that
    timeout (recorded in ``waits``) instead of the loop sleeping. Everything else is the real epoll."""

    def __init__(self, reactor: Reactor) -> None:
        self.now = START
        self.waits: list[float] = []
        self.polls = 0
        self._epoll = reactor._epoll
        reactor.clock = self
        reactor._epoll = self  # type: ignore[assignment]  # run() binds this object's poll

    def __call__(self) -> float:
        return self.now

    def poll(self, timeout: float = -1) -> list[tuple[int, int]]:
        self.polls += 1
        events = self._epoll.poll(0)
        if events or timeout == 0:
            return events
        if timeout < 0:
            raise WouldBlockForever
        self.waits.append(timeout)
        self.now += timeout
        return []

    def __getattr__(self, name: str) -> Any:  # register, modify, unregister, close
        return getattr(self._epoll, name)


@dataclass
class Recorder:
    """Callbacks that note what ran, when (virtual time) and in which loop iteration."""

    clock: VirtualTime | None = None
    calls: list[Any] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def note(self, what: Any) -> None:
        self.calls.append(what)
        if self.clock is not None:
            self.times.append(self.clock.now)

    def on_error(self, exc: BaseException) -> None:
        self.errors.append(exc)


@pytest.fixture
def reactor() -> Iterator[Reactor]:
    loop = Reactor()
    yield loop
    loop.close()


@pytest.fixture
def vt(reactor: Reactor) -> VirtualTime:
    return VirtualTime(reactor)


def run_until_idle(reactor: Reactor) -> None:
    """Run until the loop has nothing left to do (the virtual clock reports it would block for ever)."""
    with pytest.raises(WouldBlockForever):
        reactor.run()


def run_real(reactor: Reactor) -> None:
    """Run on real time until a callback stops the loop; fail after SAFETY seconds."""
    expired: list[bool] = []
    guard = reactor.call_later(SAFETY, lambda: (expired.append(True), reactor.stop()))
    reactor.run()
    guard.cancel()
    assert not expired, f"the loop was not stopped within {SAFETY:g} s"


# --------------------------------------------------------------------------------------- timers


@pytest.mark.parametrize(("delays", "order"), [
    ([3.0, 1.0, 2.0], [1.0, 2.0, 3.0]),
    ([0.5, 0.25, 10.0, 0.0], [0.0, 0.25, 0.5, 10.0]),
    ([-5.0, 1.0], [-5.0, 1.0]),  # a delay in the past is "now"
    ([2.0, 2.0, 1.0], [1.0, 2.0, 2.0]),  # the same time: both fire then
], ids=["unordered", "fractions", "negative", "equal"])
def test_timers_fire_in_time_order_at_their_time(reactor: Reactor, vt: VirtualTime, delays: list[float],
                                                 order: list[float]) -> None:
    rec = Recorder(vt)
    for delay in delays:
        reactor.call_later(delay, rec.note, delay)
    run_until_idle(reactor)
    assert rec.calls == order
    assert rec.times == pytest.approx([START + max(0.0, d) for d in order])


@pytest.mark.parametrize(("delay", "waits"), [
    (0.0003, [0.001]),  # rounded up to epoll's millisecond, not a busy loop of 0 ms waits
    (1.5, [1.5]),
    (MAX_WAIT, [MAX_WAIT]),
    (30 * 86400.0, [MAX_WAIT, 30 * 86400.0 - MAX_WAIT]),  # a 30-day --husk-ttl: two waits, not an OverflowError
    (60 * 86400.0, [MAX_WAIT, MAX_WAIT, 60 * 86400.0 - 2 * MAX_WAIT]),
], ids=["sub-millisecond", "seconds", "the-cap", "30-days", "60-days"])
def test_a_wait_is_capped_and_rounded_up_and_the_timer_fires_on_time(
        reactor: Reactor, vt: VirtualTime, delay: float, waits: list[float]) -> None:
    rec = Recorder(vt)
    reactor.call_later(delay, rec.note, "due")
    run_until_idle(reactor)
    assert vt.waits == pytest.approx(waits)
    assert all(w <= MAX_WAIT for w in vt.waits)
    assert rec.calls == ["due"]
    assert rec.times[0] >= START + delay  # never early


@pytest.mark.parametrize(("cancel", "fired", "waits"), [
    ([], [1.0, 2.0, 3.0], [1.0, 1.0, 1.0]),
    ([1.0], [2.0, 3.0], [2.0, 1.0]),  # a cancelled first timer is not waited for
    ([2.0], [1.0, 3.0], [1.0, 2.0]),
    ([1.0, 2.0, 3.0], [], []),
], ids=["none", "first", "middle", "all"])
def test_a_cancelled_timer_neither_fires_nor_is_waited_for(reactor: Reactor, vt: VirtualTime, cancel: list[float],
                                                           fired: list[float], waits: list[float]) -> None:
    rec = Recorder(vt)
    handles = {d: reactor.call_later(d, rec.note, d) for d in (1.0, 2.0, 3.0)}
    for d in cancel:
        handles[d].cancel()
    run_until_idle(reactor)
    assert rec.calls == fired
    assert vt.waits == pytest.approx(waits)


def test_a_cancelled_timer_lets_go_of_its_target_at_once(reactor: Reactor, vt: VirtualTime) -> None:
    class Target:
        def hit(self) -> None:
            raise AssertionError("cancelled, yet called")

    target = Target()
    ref = weakref.ref(target)
    handle = reactor.call_later(3600.0, target.hit)
    handle.cancel()
    del target
    gc.collect()
    assert ref() is None  # the handle stays in the heap till its time; the client it named does not
    run_until_idle(reactor)


def test_an_idle_loop_waits_with_no_timeout(reactor: Reactor, vt: VirtualTime) -> None:
    run_until_idle(reactor)  # nothing scheduled: the wait is epoll's "for ever", not a periodic wake-up
    assert vt.waits == []


def test_the_clock_is_monotonic_unless_replaced(reactor: Reactor) -> None:
    assert reactor.clock is time.monotonic
    VirtualTime(reactor).now = 5.5
    assert reactor.time() == 5.5


# --------------------------------------------------------------------------------------- call_soon


def test_call_soon_runs_in_order_and_what_it_schedules_runs_next_iteration(reactor: Reactor, vt: VirtualTime) -> None:
    rec = Recorder(vt)
    iteration: list[int] = []

    def first() -> None:
        rec.note("first")
        iteration.append(vt.polls)
        reactor.call_soon(later)

    def later() -> None:
        rec.note("later")
        iteration.append(vt.polls)

    reactor.call_soon(first)
    reactor.call_soon(rec.note, "second")
    reactor.call_later(0.0, rec.note, "timer")  # due now: after what was already queued
    run_until_idle(reactor)
    assert rec.calls == ["first", "second", "timer", "later"]
    assert iteration[1] == iteration[0] + 1  # fds and timers get a look-in between


@pytest.mark.parametrize("where", ["call_soon", "timer", "reader"])
def test_a_failing_callback_is_reported_and_the_loop_goes_on(reactor: Reactor, vt: VirtualTime, where: str) -> None:
    rec = Recorder(vt)
    reactor.on_error = rec.on_error
    boom = ValueError(where)

    def fail() -> None:
        raise boom

    r, w = os.pipe()
    try:
        if where == "call_soon":
            reactor.call_soon(fail)
        elif where == "timer":
            reactor.call_later(1.0, fail)
        else:
            os.write(w, b"x")
            reactor.add_reader(r, lambda: (reactor.remove_reader(r), fail()))
        reactor.call_later(2.0, rec.note, "after")
        run_until_idle(reactor)
    finally:
        os.close(r)
        os.close(w)
    assert rec.errors == [boom]
    assert rec.calls == ["after"]


def test_without_on_error_a_failing_callback_ends_run(reactor: Reactor, vt: VirtualTime) -> None:
    reactor.call_soon(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        reactor.run()


# --------------------------------------------------------------------------------------- futures


def test_a_future_before_it_is_done() -> None:
    fut: Future[int] = Future()
    assert not fut.done()
    with pytest.raises(RuntimeError, match="not done"):
        fut.result()
    with pytest.raises(RuntimeError, match="not done"):
        fut.exception()


@pytest.mark.parametrize(("settle", "result", "error"), [
    ([("result", 1)], 1, None),
    ([("result", 1), ("result", 2)], 1, None),  # the first outcome stands
    ([("result", 1), ("exception", KeyError("k"))], 1, None),
    ([("exception", KeyError("k"))], None, KeyError),
    ([("exception", KeyError("k")), ("result", 2)], None, KeyError),
    ([("result", None)], None, None),
], ids=["result", "result-twice", "result-then-error", "error", "error-then-result", "none"])
def test_a_future_keeps_its_first_outcome(settle: list[tuple[str, Any]], result: Any,
                                          error: type[BaseException] | None) -> None:
    fut: Future[Any] = Future()
    seen: list[Future[Any]] = []
    fut.add_done_callback(seen.append)
    for how, value in settle:
        fut.set_result(value) if how == "result" else fut.set_exception(value)
    assert fut.done()
    assert seen == [fut]  # called back once, on the first outcome
    if error is None:
        assert fut.exception() is None
        assert fut.result() == result
    else:
        assert isinstance(fut.exception(), error)
        with pytest.raises(error):
            fut.result()


def test_a_callback_added_after_the_future_is_done_runs_at_once() -> None:
    fut: Future[int] = Future()
    fut.set_result(3)
    seen: list[int] = []
    fut.add_done_callback(lambda f: seen.append(f.result()))
    assert seen == [3]


# --------------------------------------------------------------------------------------- tasks


def later(reactor: Reactor, delay: float, value: Any = None, error: BaseException | None = None) -> Future[Any]:
    """A future that gets ``value`` (or fails with ``error``) after ``delay`` virtual seconds."""
    fut: Future[Any] = Future()
    reactor.call_later(delay, fut.set_exception if error is not None else fut.set_result,
                       error if error is not None else value)
    return fut


def test_a_task_resumes_with_what_it_awaited_at_its_time(reactor: Reactor, vt: VirtualTime) -> None:
    got: list[tuple[Any, float]] = []

    async def flow() -> str:
        got.append((await later(reactor, 1.0, "a"), vt.now))
        got.append((await later(reactor, 2.0, "b"), vt.now))
        done: Future[str] = Future()
        done.set_result("already")
        got.append((await done, vt.now))  # a done future does not suspend
        return "end"

    task = reactor.create_task(flow())
    assert isinstance(task, Task) and not task.done()  # it starts on the loop, not in create_task
    run_until_idle(reactor)
    assert got == [("a", START + 1.0), ("b", START + 3.0), ("already", START + 3.0)]
    assert task.result() == "end"


FailureCase = Callable[[Reactor], Coroutine[Future[Any], Any, Any]]


def _raises(reactor: Reactor) -> Coroutine[Future[Any], Any, Any]:
    async def flow() -> None:
        await later(reactor, 1.0)
        raise OSError(5, "stop failed")
    return flow()


def _awaits_failed_future(reactor: Reactor) -> Coroutine[Future[Any], Any, Any]:
    async def flow() -> None:
        await later(reactor, 1.0, error=OSError(5, "stop failed"))
    return flow()


def _catches_failed_future(reactor: Reactor) -> Coroutine[Future[Any], Any, Any]:
    async def flow() -> str:
        try:
            await later(reactor, 1.0, error=OSError(5, "stop failed"))
        except OSError as exc:
            return f"caught {exc.strerror}"
        return "not raised"
    return flow()


def _raises_at_once(reactor: Reactor) -> Coroutine[Future[Any], Any, Any]:
    async def flow() -> None:
        raise OSError(5, "stop failed")
    return flow()


@pytest.mark.parametrize(("make", "result", "reported"), [
    (_raises, OSError, 1),
    (_raises_at_once, OSError, 1),
    (_awaits_failed_future, OSError, 1),  # a plain future's failure was nobody's report yet
    (_catches_failed_future, "caught stop failed", 0),
], ids=["raises", "raises-at-once", "awaits-a-failed-future", "catches-it"])
def test_a_failing_task_fails_its_future_and_is_reported(reactor: Reactor, vt: VirtualTime, make: FailureCase,
                                                         result: Any, reported: int) -> None:
    rec = Recorder(vt)
    reactor.on_error = rec.on_error
    task = reactor.create_task(make(reactor))
    run_until_idle(reactor)
    assert task.done()
    assert len(rec.errors) == reported
    if isinstance(result, type):
        error = task.exception()
        assert isinstance(error, result)
        assert rec.errors == [error]
        with pytest.raises(result):
            task.result()
    else:
        assert task.result() == result


@pytest.mark.parametrize(("rethrow", "reports"), [
    (False, 1),  # the same exception, passing through the awaiting task: reported once
    (True, 2),  # turned into another one: that one is news
], ids=["passes-through", "wrapped"])
def test_a_task_awaiting_a_failed_task_fails_too(reactor: Reactor, vt: VirtualTime, rethrow: bool,
                                                 reports: int) -> None:
    rec = Recorder(vt)
    reactor.on_error = rec.on_error
    inner = reactor.create_task(_raises(reactor))

    async def outer() -> None:
        try:
            await inner
        except OSError as exc:
            if rethrow:
                raise RuntimeError("outer") from exc
            raise

    task = reactor.create_task(outer())
    run_until_idle(reactor)
    assert isinstance(inner.exception(), OSError)
    assert isinstance(task.exception(), RuntimeError if rethrow else OSError)
    assert len(rec.errors) == reports
    assert rec.errors[0] is inner.exception()


def test_a_task_awaiting_a_task_gets_its_result(reactor: Reactor, vt: VirtualTime) -> None:
    async def inner() -> int:
        return await later(reactor, 1.0, 20) + 1

    async def outer() -> int:
        return await reactor.create_task(inner()) * 2

    task = reactor.create_task(outer())
    run_until_idle(reactor)
    assert task.result() == 42


def test_a_failed_task_without_on_error_ends_run(reactor: Reactor, vt: VirtualTime) -> None:
    task = reactor.create_task(_raises(reactor))
    with pytest.raises(OSError, match="stop failed"):
        reactor.run()
    assert isinstance(task.exception(), OSError)  # failed before run() ended, not left pending


def test_the_lock_serialises_tasks_even_when_one_fails(reactor: Reactor, vt: VirtualTime) -> None:
    rec = Recorder(vt)
    reactor.on_error = rec.on_error
    lock = Lock()

    async def holder(name: str, hold: float, fail: bool = False) -> None:
        async with lock:
            rec.note(f"{name} in")
            await later(reactor, hold)
            rec.note(f"{name} out")
            if fail:
                raise ValueError(name)

    for args in (("a", 2.0, True), ("b", 1.0), ("c", 1.0)):
        reactor.create_task(holder(*args))
    run_until_idle(reactor)
    assert rec.calls == ["a in", "a out", "b in", "b out", "c in", "c out"]
    assert rec.times == [START, START + 2, START + 2, START + 3, START + 3, START + 4]
    assert [str(e) for e in rec.errors] == ["a"]


# --------------------------------------------------------------------------------------- wait


@pytest.mark.parametrize(("done_at", "timeout", "outcome", "at"), [
    ([], 5.0, True, 0.0),  # nothing to wait for
    ([1.0, 2.0], 5.0, True, 2.0),  # all done first: True when the last is, not at the timeout
    ([1.0, 9.0], 5.0, False, 5.0),
    ([1.0, None], 5.0, False, 5.0),  # one never done
    ([1.0, 2.0], None, True, 2.0),
    ([1.0, "fail"], 5.0, True, 1.0),  # a failed future is done
], ids=["none", "all-done", "timeout", "never", "no-timeout", "failed-counts"])
def test_wait_is_true_once_all_are_done_or_false_at_the_timeout(
        reactor: Reactor, vt: VirtualTime, done_at: list[Any], timeout: float | None, outcome: bool,
        at: float) -> None:
    rec = Recorder(vt)
    futures: list[Future[Any]] = []
    for when in done_at:
        if when is None:
            futures.append(Future())
        elif when == "fail":
            futures.append(later(reactor, 1.0, error=OSError("gone")))
        else:
            futures.append(later(reactor, when))
    waited = reactor.wait(futures, timeout)
    waited.add_done_callback(lambda f: rec.note(f.result()))
    run_until_idle(reactor)
    assert rec.calls == [outcome]
    assert rec.times == [START + at]


def test_wait_cancels_its_timeout_once_everything_is_done(reactor: Reactor, vt: VirtualTime) -> None:
    waited = reactor.wait([later(reactor, 1.0)], timeout=3600.0)
    run_until_idle(reactor)
    assert waited.result() is True
    assert vt.now == START + 1.0  # the hour-long timer did not keep the loop waiting


# --------------------------------------------------------------------------------------- fds


def test_readable_is_done_once_the_fd_is_readable_and_stops_watching(reactor: Reactor) -> None:
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fut = reactor.readable(r)
        reactor.call_soon(os.write, w, b"x")
        fut.add_done_callback(lambda _: reactor.stop())
        run_real(reactor)
        assert fut.done() and fut.result() is None
        assert r not in reactor._readers and r not in reactor._masks  # no second wake-up for the same fd
    finally:
        os.close(r)
        os.close(w)


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Connected TCP sockets on loopback: urgent (MSG_OOB) data is the EPOLLPRI that a socket can make."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    yield accepted, client
    accepted.close()
    client.close()


@pytest.mark.parametrize(("send", "priority_fires"), [
    ([(b"x", 0)], False),  # ordinary data is EPOLLIN: not what a priority reader waits for
    ([(b"!", socket.MSG_OOB)], True),
    ([(b"x", 0), (b"!", socket.MSG_OOB)], True),
], ids=["data", "urgent", "data-then-urgent"])
def test_priority_readable_waits_for_epollpri_only(reactor: Reactor, tcp_pair: tuple[socket.socket, socket.socket],
                                                   send: list[tuple[bytes, int]], priority_fires: bool) -> None:
    ours, theirs = tcp_pair
    fut = reactor.priority_readable(ours.fileno())
    for data, flags in send:
        theirs.send(data, flags)
    # Both ends are on this host: once send() returns, the data (or its urgent mark) has arrived.
    select.select([ours], [], [ours], SAFETY)
    waited = reactor.wait([fut], timeout=0.2 if not priority_fires else SAFETY)
    waited.add_done_callback(lambda _: reactor.stop())
    run_real(reactor)
    assert fut.done() is priority_fires
    reactor.forget_fd(ours.fileno())
    assert ours.fileno() not in reactor._priority


@pytest.mark.parametrize(("end", "wakes"), [
    ("read", "reader"),  # the writer closed: EPOLLHUP reaches the reader
    ("write", "writer"),  # the reader closed: EPOLLERR reaches the writer
], ids=["hangup", "error"])
def test_an_error_or_hangup_wakes_the_callback_registered(reactor: Reactor, end: str, wakes: str) -> None:
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    fd, other = (r, w) if end == "read" else (w, r)
    os.close(other)
    woken: list[str] = []

    def woke(which: str) -> None:
        woken.append(which)
        reactor.forget_fd(fd)
        reactor.stop()

    try:
        if wakes == "reader":
            reactor.add_reader(fd, woke, "reader")
        else:
            reactor.add_writer(fd, woke, "writer")
        run_real(reactor)
    finally:
        os.close(fd)
    assert woken == [wakes]


def test_reader_and_writer_on_one_fd_share_its_registration(reactor: Reactor) -> None:
    a, b = socket.socketpair()
    try:
        fd = a.fileno()
        reactor.add_reader(fd, lambda: None)
        reactor.add_writer(fd, lambda: None)
        assert reactor._masks[fd] == select.EPOLLIN | select.EPOLLOUT
        reactor.remove_writer(fd)
        assert reactor._masks[fd] == select.EPOLLIN
        reactor.remove_reader(fd)
        assert fd not in reactor._masks
        reactor.remove_reader(fd)  # idempotent
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------------------- signals


SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH)


@pytest.fixture
def saved_signals() -> Iterator[None]:
    """Reactor.close() sets its signals back to SIG_DFL (SIGUSR1's kills): put the test process's back."""
    before = {s: signal.getsignal(s) for s in SIGNALS}
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    yield
    for s, handler in before.items():
        signal.signal(s, handler)
    signal.set_wakeup_fd(wakeup)


@pytest.mark.parametrize("raised", [
    [signal.SIGUSR1],
    [signal.SIGUSR2, signal.SIGUSR1],
    [signal.SIGUSR1, signal.SIGWINCH],  # SIGWINCH has no handler on the loop: its byte is skipped
], ids=["one", "two-in-order", "one-unhandled"])
def test_signals_run_their_handlers_on_the_loop(saved_signals: None, raised: list[int]) -> None:
    reactor = Reactor()
    try:
        handled: list[int] = []
        expected = [s for s in raised if s != signal.SIGWINCH]

        def handler(signum: int) -> None:
            handled.append(signum)
            if len(handled) == len(expected):
                reactor.stop()

        reactor.add_signal_handler(signal.SIGUSR1, lambda: handler(signal.SIGUSR1))
        reactor.add_signal_handler(signal.SIGUSR2, lambda: handler(signal.SIGUSR2))
        signal.signal(signal.SIGWINCH, lambda *_: None)  # a Python handler: the wake-up fd carries it too
        for s in raised:
            os.kill(os.getpid(), s)
            assert handled == []  # not in the signal handler: on the loop
        run_real(reactor)
        assert handled == expected
    finally:
        reactor.close()


def test_close_gives_back_the_wakeup_fd_and_the_default_handlers(saved_signals: None) -> None:
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        signal.set_wakeup_fd(w)
        reactor = Reactor()
        reactor.add_signal_handler(signal.SIGUSR2, lambda: None)
        assert signal.getsignal(signal.SIGUSR2) not in (signal.SIG_DFL, signal.SIG_IGN)
        reactor.close()
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
        assert signal.set_wakeup_fd(-1) == w
    finally:
        os.close(r)
        os.close(w)
