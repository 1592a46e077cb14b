"""The blocking Client and the AsyncClient against one scripted fake shellper: the same connection under
both, so the same stream gives the same frames, answers and errors."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shellper.client.blocking import Client
from shellper.protocol import wire
from shellper.protocol.connection import ClientError, InstanceMismatch, SessionGone
from tower_client.client import AsyncClient

TIMEOUT = 10.0
WELCOME = wire.Welcome(version=2, name="fake", shellper_pid=1, shellper_start_time=1, boot_id="b",
                       instance_id="f" * 32, state="running", cols=80, rows=24, ring_start=0, ring_end=3)
HANDSHAKE = wire.encode(WELCOME) + wire.encode(wire.Replay(offset=0, data=b"abc"))
FATAL = wire.Error(code="replaced", message="another tower took over", fatal=True)

Answer = Callable[[wire.Frame], bytes]
"""What the fake sends back for a frame the client sent."""


def _echo_requests(before: bytes = b"") -> Answer:
    def answer(frame: wire.Frame) -> bytes:
        if isinstance(frame, wire.Status):
            return before + wire.encode(wire.StatusReply(state="running"))
        if isinstance(frame, wire.Ping):
            return before + wire.encode(wire.Pong(nonce=99)) + wire.encode(wire.Pong(nonce=frame.nonce))
        return b""
    return answer


@dataclass
class Fake:
    path: str
    after_hello: bytes
    then: str
    """``serve``: answer what the client sends; ``close``: close; ``reset``: close once the client has
    sent more, unread (a Unix socket's peer then reads ECONNRESET)."""
    answer: Answer

    def serve(self) -> threading.Thread:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(1)
        listener.settimeout(TIMEOUT)

        def run() -> None:
            with listener, contextlib.suppress(OSError):
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(TIMEOUT)
                    decoder = wire.Decoder()
                    while not any(isinstance(e, wire.Hello) for e in decoder.events()):
                        decoder.feed(conn.recv(65536))
                    conn.sendall(HANDSHAKE + self.after_hello)
                    if self.then == "reset":
                        select.select([conn], [], [], TIMEOUT)
                    while self.then == "serve":
                        for event in decoder.events():
                            if isinstance(event, wire.Frame):
                                conn.sendall(self.answer(event))
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        decoder.feed(chunk)

        thread = threading.Thread(target=run, name="fake shellper")
        thread.start()
        return thread


class Driver:
    """One client kind behind one interface: connect, recv, status, ping."""

    def __init__(self, kind: str, path: str) -> None:
        self.kind = kind
        self.path = path
        self.loop = asyncio.new_event_loop() if kind == "async" else None
        self.sync = Client(path, timeout=TIMEOUT) if kind == "sync" else None
        self.aio = AsyncClient(path, request_timeout=TIMEOUT) if kind == "async" else None

    def run(self, coro: Any) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(asyncio.wait_for(coro, TIMEOUT))

    def connect(self, **hello: Any) -> wire.Welcome:
        if self.sync is not None:
            return self.sync.connect(**hello)
        assert self.aio is not None
        return self.run(self.aio.connect(**hello))  # type: ignore[no-any-return]

    def send(self, frame: wire.Frame) -> None:
        if self.sync is not None:
            self.sync.send(frame)
        else:
            assert self.aio is not None
            self.run(self.aio.send(frame))

    def recv(self) -> wire.Frame | None:
        if self.sync is not None:
            return self.sync.recv(TIMEOUT)
        assert self.aio is not None
        return self.run(self.aio.recv(TIMEOUT))  # type: ignore[no-any-return]

    def status(self) -> wire.StatusReply:
        if self.sync is not None:
            reply = self.sync.request(wire.Status(), wire.StatusReply)
            assert isinstance(reply, wire.StatusReply)
            return reply
        assert self.aio is not None
        return self.run(self.aio.status())  # type: ignore[no-any-return]

    def ping(self) -> None:
        if self.sync is not None:
            pong = self.sync.request(wire.Ping(nonce=1), wire.Pong)
            assert pong == wire.Pong(nonce=1)
        else:
            assert self.aio is not None
            self.run(self.aio.ping())  # the AsyncClient's first nonce is 1 too

    @property
    def fatal_error(self) -> wire.Error | None:
        client = self.sync or self.aio
        assert client is not None
        return client.fatal_error

    @property
    def next_offset(self) -> int:
        client = self.sync or self.aio
        assert client is not None
        return client.output.next_offset

    def close(self) -> None:
        if self.sync is not None:
            self.sync.close()
        if self.aio is not None:
            self.run(self.aio.close())
        if self.loop is not None:
            self.loop.close()


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Driver]]:
    made: list[tuple[Driver, threading.Thread]] = []

    def make(after_hello: bytes = b"", then: str = "serve", answer: Answer | None = None) -> Driver:
        path = str(tmp_path / "fake.sock")
        thread = Fake(path, after_hello, then, answer or _echo_requests()).serve()
        d = Driver(request.param, path)
        made.append((d, thread))
        return d

    yield make
    for d, thread in made:
        d.close()
        thread.join(TIMEOUT)
        assert not thread.is_alive()


def _frames_until_gone(d: Driver) -> tuple[list[wire.Frame], SessionGone]:
    frames: list[wire.Frame] = []
    while True:
        try:
            frame = d.recv()
        except SessionGone as exc:
            return frames, exc
        assert frame is not None, "no frame and no end within the timeout"
        frames.append(frame)


@pytest.mark.parametrize(("after_hello", "then", "frames", "message"), [
    (wire.encode_data(b"de"), "close", [wire.Data(b"de")], "the shellper closed the connection"),
    (wire.encode_data(b"de") + b"\x01\x00\x00\x00\x05xy", "close", [wire.Data(b"de")],
     "the shellper closed the connection, inside a frame (7 bytes of it came)"),
    (wire.encode(FATAL), "close", [FATAL], "closed by the shellper after ERROR replaced: another tower took over"),
    (wire.encode_data(b"de"), "reset", [wire.Data(b"de")], "the shellper closed the connection"),
], ids=["end", "end inside a frame", "fatal error", "reset"])
def test_how_the_stream_ends(driver: Callable[..., Driver], after_hello: bytes, then: str,
                             frames: list[wire.Frame], message: str) -> None:
    d = driver(after_hello, then)
    d.connect()
    if then == "reset":
        d.send(wire.Ping(nonce=1))  # left unread: the fake's close then resets the connection
    got, end = _frames_until_gone(d)
    assert got == frames and end.message == message
    assert d.next_offset == 3 + sum(len(f.data) for f in frames if isinstance(f, wire.Data))
    assert d.fatal_error == (FATAL if FATAL in frames else None)


def test_a_request_is_answered_and_the_frames_before_its_answer_are_kept(driver: Callable[..., Driver]) -> None:
    d = driver(answer=_echo_requests(before=wire.encode_data(b"first")))
    d.connect()
    assert d.status() == wire.StatusReply(state="running")
    assert d.recv() == wire.Data(b"first")
    d.ping()  # a PONG with another nonce comes first: it is not the answer
    assert [d.recv(), d.recv()] == [wire.Data(b"first"), wire.Pong(nonce=99)]
    assert d.next_offset == 3 + 2 * len(b"first")


def test_a_refused_request_raises_the_remote_error(driver: Callable[..., Driver]) -> None:
    refusal = wire.Error(code="forbidden", message="not you", frame_type=wire.FrameType.STATUS)
    d = driver(answer=lambda f: wire.encode(refusal) if isinstance(f, wire.Status) else b"")
    d.connect()
    with pytest.raises(ClientError) as info:
        d.status()
    assert info.value.message == "forbidden: not you"


def test_another_instance_is_refused(driver: Callable[..., Driver]) -> None:
    d = driver()
    with pytest.raises(InstanceMismatch) as info:
        d.connect(expect_instance_id="0" * 32)
    assert info.value.found == WELCOME.instance_id
