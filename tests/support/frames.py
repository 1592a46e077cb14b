"""Talking to a session in frames: raw sockets and bytes, and waiting on a client for output or a frame."""

from __future__ import annotations

import re
import select
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from shellper.client.blocking import Client, SessionGone
from shellper.protocol import wire
from support.waiting import poll_until


def collect_output(client: Client, seen: bytearray, done: Callable[[bytearray], bool], what: bytes,
                   timeout: float = 10.0, others: list[wire.Frame] | None = None) -> None:
    """Add the output received to ``seen`` until ``done(seen)``; fail at the deadline, naming ``what``.
    Frames other than DATA are appended to ``others`` when given (else dropped)."""
    deadline = time.monotonic() + timeout
    while not done(seen):
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"{what!r} not seen within {timeout:g} s; got {bytes(seen[-300:])!r}")
        frame = client.recv(timeout=left)
        if isinstance(frame, wire.Data):
            seen += frame.data
        elif frame is not None and others is not None:
            others.append(frame)


def read_until(client: Client, needle: bytes, timeout: float = 10.0) -> bytes:
    """Collect output (REPLAY data first) until ``needle`` appears; fail at the deadline."""
    assert client.replay is not None
    seen = bytearray(client.replay.data)
    collect_output(client, seen, lambda got: needle in got, needle, timeout)
    return bytes(seen)


def recv_until(client: Client, kind: type[wire.Frame], timeout: float = 10.0,
               where: Any = None) -> Any:
    """The next frame of ``kind`` (matching ``where`` if given); fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"no {kind.TYPE.name} frame within {timeout:g} s")
        frame = client.recv(timeout=left)
        if isinstance(frame, kind) and (where is None or where(frame)):
            return frame


def raw_socket(path: Path, timeout: float = 10.0) -> socket.socket:
    """A connected socket, no HELLO sent. A full listen backlog (EAGAIN) is waited out."""
    def attempt() -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except BlockingIOError:
            sock.close()
            return None
        except BaseException:
            sock.close()
            raise
        return sock
    connected: socket.socket = poll_until(attempt, timeout, what=f"a connection to {path}")
    return connected


def hello(role: str = "tower", **fields: Any) -> bytes:
    return wire.encode(wire.Hello(version=wire.PROTOCOL_VERSION, role=role, client="raw", **fields))


def frame(frame_type: int, payload: bytes) -> bytes:
    return struct.pack(">BI", frame_type, len(payload)) + payload


def packed(frame_type: int, payload: Any) -> bytes:
    return frame(frame_type, msgpack.packb(payload, use_bin_type=True))


def frames_until_eof(sock: socket.socket, timeout: float = 10.0) -> list[wire.DecodedEvent]:
    """Every frame the shellper sends until it closes the connection; fails the test at the deadline."""
    decoder = wire.Decoder()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"the shellper did not close the connection within {timeout:g} s; "
                        f"got {list(decoder.events())!r}")
        readable, _, _ = select.select([sock], [], [], left)
        if not readable:
            continue
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            events = list(decoder.events())
            decoder.close()  # the shellper never stops mid-frame
            return events
        decoder.feed(chunk)


def only_error(events: list[wire.DecodedEvent]) -> wire.Error:
    """The one fatal ERROR a refused connection gets, and nothing after it."""
    errors = [e for e in events if isinstance(e, wire.Error)]
    assert len(errors) == 1, events
    assert events[-1] is errors[0], f"frames after the fatal ERROR: {events}"
    assert errors[0].fatal is True
    return errors[0]


def next_error(client: Client, timeout: float = 10.0) -> wire.Error:
    err = recv_until(client, wire.Error, timeout)
    assert isinstance(err, wire.Error)
    return err


def ping(client: Client, nonce: int = 99) -> None:
    """A round trip: proves the connection is still served and everything sent before was handled."""
    client.send(wire.Ping(nonce=nonce))
    pong = recv_until(client, wire.Pong, where=lambda p: p.nonce == nonce)
    assert pong.nonce == nonce


def expect_closed(client: Client, timeout: float = 10.0) -> list[wire.Frame]:
    """Frames until the shellper closes the connection."""
    got: list[wire.Frame] = []
    deadline = time.monotonic() + timeout
    with pytest.raises(SessionGone):
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"connection not closed within {timeout:g} s; got {got}")
            f = client.recv(timeout=left)
            if f is not None:
                got.append(f)
    return got


def status(client: Client) -> wire.StatusReply:
    reply = client.request(wire.Status(), wire.StatusReply)
    assert isinstance(reply, wire.StatusReply)
    return reply


def output_until(client: Client, needle: bytes, timeout: float = 10.0,
                 others: list[wire.Frame] | None = None) -> bytes:
    """Output received from now on (not the REPLAY) until ``needle`` appears; fail at the deadline.

    Frames other than DATA are appended to ``others`` when given (else dropped).
    """
    seen = bytearray()
    collect_output(client, seen, lambda got: needle in got, needle, timeout, others)
    return bytes(seen)


def output_search(client: Client, pattern: bytes, seen: bytearray, timeout: float = 10.0) -> re.Match[bytes]:
    """Add output to ``seen`` (the caller's running buffer) until ``pattern`` matches in it."""
    collect_output(client, seen, lambda got: re.search(pattern, got) is not None, pattern, timeout)
    m = re.search(pattern, seen)
    assert m is not None
    return m


def echo_roundtrip(client: Client, token: bytes) -> None:
    """Input through ``client`` to a ``cat`` child comes back as output: the session still works."""
    client.write(token + b"\n")
    output_until(client, token + b"\r\n" + token + b"\r\n")  # the tty's echo, then cat's copy


TREE_CHILD = "trap '' TERM HUP; sleep 300 & echo TREE $$ $!; wait"


def tree_pids(client: Client) -> tuple[int, int]:
    """The pids a TREE_CHILD prints: the shell (the child) and its background ``sleep``."""
    assert client.replay is not None
    m = output_search(client, rb"TREE (\d+) (\d+)\r\n", bytearray(client.replay.data))
    return int(m.group(1)), int(m.group(2))


def ring_tail(path: str | Path, nbytes: int = 4096) -> bytes:
    """The session's last ``nbytes`` of output (its REPLAY to a viewer), as ``shellper tail --bytes`` prints them,
    without starting a process: a CLI command costs ~60 ms of CPU, and a poll runs it many times."""
    with Client(path, wire.Role.VIEWER, client_name="test-poll", timeout=10) as client:
        client.connect(replay_bytes=nbytes)
        assert client.replay is not None
        return client.replay.data


def wait_output(path: str | Path, needle: bytes, timeout: float = 10.0, nbytes: int = 4096) -> bytes:
    """Poll the session's last ``nbytes`` of output until ``needle`` is in them; what they were then."""
    def found() -> bytes | None:
        tail = ring_tail(path, nbytes)
        return tail if needle in tail else None

    return poll_until(found, timeout, what=f"{needle!r} in the output")  # type: ignore[no-any-return]
