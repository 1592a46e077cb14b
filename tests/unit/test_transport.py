"""The socket transport (shellper.daemon.transport), rule by rule, on real socket pairs: writes straight through
or queued and coalesced, pausing the writer at the high-water mark and resuming it at the low, pausing
reading, what a failed peer sent still read, close and abort, descriptors passed with data."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from shellper.daemon.reactor import Reactor
from shellper.daemon.transport import (
    COALESCE_LIMIT,
    DRAIN_READS,
    RECV_SIZE,
    SMALL_WRITE,
    SocketTransport,
    close_listener,
    listen_unix,
)

SNDBUF = 64 * 1024
"""Our end's send buffer: small, so a test fills it (and makes the transport queue) with little data."""
FILL = 1024 * 1024
"""A write that the socket cannot take at once: the rest of it is queued."""
TIMEOUT = 10.0
BIG = 1024 * 1024
"""More than a wakeup's one read (RECV_SIZE), less than what a drain reads (DRAIN_READS x RECV_SIZE)."""


@dataclass(eq=False)
class Proto:
    """A stream protocol that records what the transport tells it."""

    wants_fds: bool = False
    transport: Any = None
    data: bytearray = field(default_factory=bytearray)
    events: list[Any] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    lost: list[Exception | None] = field(default_factory=list)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self) -> bool | None:
        self.events.append("eof")
        return None

    def pause_writing(self) -> None:
        self.events.append(("pause", self.transport.get_write_buffer_size()))

    def resume_writing(self) -> None:
        self.events.append(("resume", self.transport.get_write_buffer_size()))

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")
        self.lost.append(exc)

    def fds_received(self, fds: list[int]) -> None:
        self.fds += fds


@dataclass
class Conn:
    """A transport on our end of a socket pair; ``peer`` is the other end, read on the same loop by ``read``."""

    reactor: Reactor
    transport: SocketTransport
    proto: Proto
    ours: socket.socket
    peer: socket.socket
    got: bytearray = field(default_factory=bytearray)
    peer_eof: bool = False

    def read(self) -> None:
        """Have the loop read the peer's end as data arrives (until EOF)."""
        def read_some() -> None:
            try:
                data = self.peer.recv(256 * 1024)
            except BlockingIOError:
                return
            except ConnectionResetError:  # we closed with data unread (a close does not wait for input)
                data = b""
            if data:
                self.got += data
            else:
                self.peer_eof = True
                self.reactor.remove_reader(self.peer.fileno())

        self.peer.setblocking(False)
        self.reactor.add_reader(self.peer.fileno(), read_some)

    def filled(self) -> int:
        """Write until the socket refuses: what the transport then queued."""
        self.transport.write(b"F" * FILL)
        queued = self.transport.get_write_buffer_size()
        assert queued > 0, "the socket took the whole fill: nothing was queued"
        return queued


def run_until(reactor: Reactor, predicate: Callable[[], object], timeout: float = TIMEOUT) -> None:
    """Run the loop until ``predicate`` holds (looked at every millisecond); fail at the deadline."""
    deadline = time.monotonic() + timeout

    def check() -> None:
        if predicate() or time.monotonic() > deadline:
            reactor.stop()
        else:
            reactor.call_later(0.001, check)

    reactor.call_soon(check)
    reactor.run()
    assert predicate(), f"not within {timeout:g} s"


def run_for(reactor: Reactor, seconds: float) -> None:
    """Run the loop for a while: for showing that something does *not* happen."""
    reactor.call_later(seconds, reactor.stop)
    reactor.run()


@pytest.fixture
def reactor() -> Iterator[Reactor]:
    loop = Reactor()
    yield loop
    loop.close()


def connect(reactor: Reactor, wants_fds: bool = False) -> Conn:
    ours, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
    proto = Proto(wants_fds=wants_fds)
    transport = SocketTransport(reactor, ours, proto)
    assert proto.transport is transport
    return Conn(reactor, transport, proto, ours, peer)


@pytest.fixture
def conn(reactor: Reactor) -> Iterator[Conn]:
    c = connect(reactor)
    yield c
    c.ours.close()
    c.peer.close()


# --------------------------------------------------------------------------------------- writing


def test_a_write_the_socket_takes_is_not_queued(conn: Conn) -> None:
    conn.transport.write(b"hello")
    assert conn.transport.get_write_buffer_size() == 0
    assert conn.peer.recv(100) == b"hello"
    conn.transport.write(b"")  # nothing to send: no syscall, no state
    assert conn.transport.get_write_buffer_size() == 0


@pytest.mark.parametrize(("writes", "queued"), [
    ([100] * 1000, [("bytearray", 100_000)]),  # a million PONGs would cost bytes, not an object each
    ([SMALL_WRITE - 1, SMALL_WRITE - 1], [("bytearray", 2 * (SMALL_WRITE - 1))]),
    ([SMALL_WRITE], [("memoryview", SMALL_WRITE)]),  # large: kept by reference
    ([100, 8192, 100], [("bytearray", 100), ("memoryview", 8192), ("bytearray", 100)]),
    ([4000] * 70, [("bytearray", 66 * 4000), ("bytearray", 4 * 4000)]),  # past COALESCE_LIMIT: a new one
], ids=["many-small", "below-the-limit", "at-the-limit", "small-large-small", "coalesce-limit"])
def test_queued_small_writes_are_coalesced_and_large_ones_kept(reactor: Reactor, conn: Conn, writes: list[int],
                                                               queued: list[tuple[str, int]]) -> None:
    assert 66 * 4000 >= COALESCE_LIMIT > 65 * 4000  # what the last case counts on
    conn.transport.set_write_buffer_limits(1 << 30)  # not paused: this test is about the queue's shape
    fill = conn.filled()
    sent = [bytes([65 + i % 26]) * size for i, size in enumerate(writes)]
    for data in sent:
        conn.transport.write(data)
    buffers = list(conn.transport._buffer)[1:]  # after the fill's rest
    assert [(type(b).__name__, len(b)) for b in buffers] == queued
    for b, data in zip(buffers, [d for d in sent if len(d) >= SMALL_WRITE], strict=False):
        if isinstance(b, memoryview):
            assert b.obj is data  # not copied
    assert conn.transport.get_write_buffer_size() == fill + sum(writes)
    conn.read()
    total = FILL + sum(writes)
    run_until(reactor, lambda: len(conn.got) == total)
    assert bytes(conn.got) == b"F" * FILL + b"".join(sent)  # in order, nothing lost or doubled
    assert conn.transport.get_write_buffer_size() == 0
    assert not conn.proto.events


@pytest.mark.parametrize(("over", "pauses"), [
    (-1, False),
    (0, False),  # at the mark is not past it
    (1, True),
    (100_000, True),
], ids=["below", "at", "just-past", "far-past"])
def test_the_writer_is_paused_past_high_water_and_resumed_at_low(reactor: Reactor, conn: Conn, over: int,
                                                                 pauses: bool) -> None:
    conn.transport.set_write_buffer_limits(1 << 30)
    queued = conn.filled()
    high = queued + 10_000
    conn.transport.set_write_buffer_limits(high)
    conn.transport.write(b"x" * (10_000 + over))
    assert conn.proto.events == ([("pause", queued + 10_000 + over)] if pauses else [])
    conn.transport.write(b"y" * 20_000)  # past the mark now in every case: told once all the same
    assert [e[0] for e in conn.proto.events] == ["pause"]
    conn.read()
    run_until(reactor, lambda: conn.transport.get_write_buffer_size() == 0)
    assert [e[0] for e in conn.proto.events] == ["pause", "resume"]
    assert 0 < conn.proto.events[1][1] <= high // 4  # resumed at the low-water mark (a quarter), not at empty


def test_pause_reading_holds_data_and_resume_delivers_it(reactor: Reactor, conn: Conn) -> None:
    conn.transport.pause_reading()
    conn.transport.pause_reading()  # idempotent
    conn.peer.sendall(b"held")
    run_for(reactor, 0.05)
    assert conn.proto.data == b""
    conn.transport.resume_reading()
    conn.transport.resume_reading()
    run_until(reactor, lambda: conn.proto.data == b"held")


@pytest.mark.parametrize("how", ["close", "abort"])
def test_resume_reading_after_close_does_not_read_again(reactor: Reactor, conn: Conn, how: str) -> None:
    conn.transport.pause_reading()
    conn.transport.set_write_buffer_limits(1 << 30)
    conn.filled()  # close() then waits for the queue to drain
    getattr(conn.transport, how)()
    conn.transport.resume_reading()
    conn.peer.sendall(b"late")
    assert conn.ours.fileno() not in conn.reactor._readers
    conn.read()
    run_until(reactor, lambda: conn.proto.lost)
    assert conn.proto.data == b""


# --------------------------------------------------------------------------------------- failure


@pytest.mark.parametrize(("sent", "setup", "delivered"), [
    ([b"last words"], "", b"last words"),  # sent just before hanging up: still counts
    ([b"one", b"two"], "", b"onetwo"),
    ([], "", b""),
    ([b"held back"], "pause_reading", b""),  # reading was paused (its input not wanted): not drained
    ([b"too late"], "closing", b""),  # we were closing: not reading any more
    ([b"queued"], "queued", b"queued"),  # the failure comes in the writer, sending what was queued
    ([b"L" * BIG], "", b"L" * BIG),  # more than the one read a wakeup makes: drained before the close
], ids=["sent-then-hung-up", "two-sends", "nothing-sent", "reading-paused", "closing", "queued-write", "big"])
def test_what_a_failed_peer_sent_is_still_read(reactor: Reactor, conn: Conn, sent: list[bytes], setup: str,
                                               delivered: bytes) -> None:
    assert RECV_SIZE < BIG <= DRAIN_READS * RECV_SIZE
    if sum(map(len, sent)) > 64 * 1024:  # the peer must be able to send it all before hanging up
        conn.peer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * BIG)
        if conn.peer.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < 2 * BIG:
            pytest.skip("net.core.wmem_max is too small for the peer to send it all at once")
    conn.transport.set_write_buffer_limits(1 << 30)
    if setup == "pause_reading":
        conn.transport.pause_reading()
    elif setup in ("closing", "queued"):
        conn.filled()
    for data in sent:
        conn.peer.sendall(data)
    conn.peer.close()
    if setup == "closing":
        conn.transport.close()
    elif setup != "queued":
        conn.transport.write(b"x")  # EPIPE: the failure comes first, before the loop reads anything
    run_until(reactor, lambda: conn.proto.lost)
    assert conn.proto.data == delivered
    assert conn.proto.events[-1] == "lost" and conn.proto.events.count("lost") == 1
    assert isinstance(conn.proto.lost[0], BrokenPipeError | ConnectionResetError)
    assert conn.ours.fileno() == -1  # closed
    assert conn.transport.is_closing() and conn.transport.get_write_buffer_size() == 0
    conn.transport.write(b"after")  # a no-op, not an error
    conn.transport.close()
    conn.transport.abort()
    run_for(reactor, 0.01)
    assert conn.proto.events.count("lost") == 1


# --------------------------------------------------------------------------------------- closing


@pytest.mark.parametrize(("queue", "how", "peer_gets_all"), [
    (False, "close", True),
    (True, "close", True),  # close() sends what is queued first
    (False, "abort", True),
    (True, "abort", False),  # abort() drops it
    (True, "close-close", True),
    (True, "close-abort", False),
], ids=["close", "close-queued", "abort", "abort-queued", "close-twice", "close-then-abort"])
def test_close_sends_what_is_queued_and_abort_drops_it(reactor: Reactor, conn: Conn, queue: bool, how: str,
                                                       peer_gets_all: bool) -> None:
    conn.transport.set_write_buffer_limits(1 << 30)
    conn.transport.write(b"first")
    expected = b"first"
    if queue:
        conn.filled()
        expected += b"F" * FILL
    for step in how.split("-"):
        getattr(conn.transport, step)()
        assert conn.transport.is_closing()
    if how.endswith("abort"):
        assert conn.transport.get_write_buffer_size() == 0
    assert not conn.proto.lost  # not within the call: on the loop
    conn.read()
    run_until(reactor, lambda: conn.proto.lost and conn.peer_eof)
    assert conn.proto.events == ["lost"] and conn.proto.lost == [None]
    assert (bytes(conn.got) == expected) is peer_gets_all
    assert expected.startswith(bytes(conn.got))


def test_the_peer_s_eof_closes_after_eof_received(reactor: Reactor, conn: Conn) -> None:
    conn.peer.sendall(b"bye")
    conn.peer.shutdown(socket.SHUT_WR)
    run_until(reactor, lambda: conn.proto.lost)
    assert conn.proto.data == b"bye"
    assert conn.proto.events == ["eof", "lost"] and conn.proto.lost == [None]


# --------------------------------------------------------------------------------------- descriptors


@pytest.mark.parametrize("wants_fds", [True, False], ids=["handshake", "after"])
def test_a_descriptor_is_received_only_while_the_protocol_wants_one(reactor: Reactor, wants_fds: bool) -> None:
    c = connect(reactor, wants_fds=wants_fds)
    r, w = os.pipe()
    try:
        socket.send_fds(c.peer, [b"hello"], [r])
        run_until(reactor, lambda: c.proto.data == b"hello")
        assert len(c.proto.fds) == (1 if wants_fds else 0)  # otherwise the kernel closes it, unread
        for fd in c.proto.fds:
            assert os.path.sameopenfile(fd, r)
            os.close(fd)
    finally:
        os.close(r)
        os.close(w)
        c.ours.close()
        c.peer.close()


# --------------------------------------------------------------------------------------- listening


def test_listen_unix_gives_each_connection_its_own_protocol(reactor: Reactor, tmp_path: Any) -> None:
    made: list[Proto] = []

    def factory() -> Proto:
        made.append(Proto())
        return made[-1]

    path = str(tmp_path / "l.sock")
    listener = listen_unix(reactor, path, factory)
    clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
    try:
        for i, client in enumerate(clients):
            client.connect(path)
            client.sendall(b"%d" % i)
        run_until(reactor, lambda: len(made) == 3 and all(p.data for p in made))
        assert sorted(bytes(p.data) for p in made) == [b"0", b"1", b"2"]
        for p in made:
            p.transport.abort()
        run_until(reactor, lambda: all(p.lost for p in made))
    finally:
        close_listener(reactor, listener)
        for client in clients:
            client.close()
    assert listener.fileno() == -1
