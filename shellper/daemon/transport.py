"""A non-blocking Unix stream connection on the reactor, with the asyncio Protocol interface.

Writes go straight to the socket while it takes them; only what it refuses is buffered, and the
protocol is told to pause when that passes a high-water mark and to resume once it drains. Queued
buffers leave with one ``sendmsg`` each wakeup, so many small frames cost one syscall.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections import deque
from collections.abc import Callable

from shellper.daemon.reactor import Handle, Reactor

RECV_SIZE = 256 * 1024
DEFAULT_HIGH_WATER = 256 * 1024
SENDMSG_MAX_BUFFERS = 64
SMALL_WRITE = 4096
COALESCE_LIMIT = 256 * 1024
ACCEPT_RETRY = 0.1
"""Seconds before accepting again after running out of file descriptors."""
DRAIN_READS = 16
"""Reads of what a vanished peer left unread (at most 16 x RECV_SIZE) before its connection is closed."""
CLOSE_DRAIN = 1.0
"""Seconds a closed connection keeps reading (and dropping) what its peer still sends, after our last byte
went out and our side was shut down: a peer still writing then gets no EPIPE and reads our last frames
(a fatal ERROR) and the end of the stream. Its own close ends this sooner."""


TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any, Protocol

    class StreamProtocol(Protocol):
        def connection_made(self, transport: Any) -> None: ...
        def data_received(self, data: bytes) -> None: ...
        def eof_received(self) -> bool | None: ...
        def pause_writing(self) -> None: ...
        def resume_writing(self) -> None: ...
        def connection_lost(self, exc: Exception | None) -> None: ...
        @property
        def wants_fds(self) -> bool: ...
        def fds_received(self, fds: list[int]) -> None: ...


class SocketTransport:
    def __init__(self, reactor: Reactor, sock: socket.socket, protocol: StreamProtocol) -> None:
        sock.setblocking(False)
        self._reactor = reactor
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._buffer: deque[bytearray | memoryview] = deque()
        self._buffered = 0
        self._high = DEFAULT_HIGH_WATER
        self._low = DEFAULT_HIGH_WATER // 4
        self._paused = False
        self._closing = False
        self._closed = False
        self._failed = False
        self._reading = True
        self._reported = False
        self._drain_timer: Handle | None = None
        reactor.add_reader(self._fd, self._read_ready)
        protocol.connection_made(self)

    # ------------------------------------------------------------------------------- asyncio-like API

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._sock if name == "socket" else default

    def set_write_buffer_limits(self, high: int) -> None:
        self._high, self._low = high, high // 4

    def get_write_buffer_size(self) -> int:
        return self._buffered

    def unread_by_peer(self) -> int:
        """Bytes written and not yet read by the peer: what is still buffered here, plus (SIOCOUTQ) what
        the kernel holds that its reader has not consumed. 0: the peer has read everything sent."""
        import fcntl  # only here: a version-1 handshake is all that asks
        import termios

        if self._closed:
            return 0
        try:
            (queued,) = struct.unpack("i", fcntl.ioctl(self._sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))
        except OSError:
            queued = 0
        assert isinstance(queued, int)
        return self._buffered + queued

    def is_closing(self) -> bool:
        return self._closing or self._closed

    def pause_reading(self) -> None:
        if self._reading and not self.is_closing():
            self._reading = False
            self._reactor.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self.is_closing():
            self._reading = True
            self._reactor.add_reader(self._fd, self._read_ready)

    def write(self, data: bytes | memoryview) -> None:
        if self._closed or self._failed or not data:
            return
        if not self._buffer:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._fatal(exc)
                return
            if sent == len(data):
                return
            data = memoryview(data)[sent:]
            self._reactor.add_writer(self._fd, self._write_ready)
        self._queue(data)
        self._buffered += len(data)
        if not self._paused and self._buffered > self._high:
            self._paused = True
            self._protocol.pause_writing()

    def _queue(self, data: bytes | memoryview) -> None:
        """Small frames are copied into a shared bytearray: a million queued PONGs must cost bytes, not
        a Python object each; large payloads are kept by reference, not copied."""
        if len(data) < SMALL_WRITE:
            tail = self._buffer[-1] if self._buffer else None
            if isinstance(tail, bytearray) and len(tail) < COALESCE_LIMIT:
                tail += data
            else:
                self._buffer.append(bytearray(data))
        else:
            self._buffer.append(memoryview(data))

    def close(self) -> None:
        """Stop reading; close once what is buffered has been sent (the protocol hears of it then), after
        draining what the peer still sends for at most CLOSE_DRAIN seconds."""
        if self._closing or self._closed:
            return
        self._closing = True
        self._reactor.remove_reader(self._fd)
        if not self._buffer:
            self._reactor.call_soon(self._shut_down)

    def abort(self) -> None:
        """Close now, dropping whatever is buffered."""
        if not self._closed:
            self._buffer.clear()
            self._buffered = 0
            self._closing = True
            self._reactor.call_soon(self._finish, None)

    # ------------------------------------------------------------------------------- events

    def _read_ready(self) -> None:
        try:
            if self._protocol.wants_fds:  # the handshake: a HELLO may carry a descriptor
                data, fds, _flags, _addr = socket.recv_fds(self._sock, RECV_SIZE, 1, socket.MSG_CMSG_CLOEXEC)
                if fds:
                    self._protocol.fds_received(fds)
            else:  # descriptors sent now are closed by the kernel, unread
                data = self._sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal(exc)
            return
        if data:
            self._protocol.data_received(data)
            return
        self._reactor.remove_reader(self._fd)
        self._protocol.eof_received()
        self.close()

    def _write_ready(self) -> None:
        buffers = list(self._buffer) if len(self._buffer) <= SENDMSG_MAX_BUFFERS else [
            self._buffer[i] for i in range(SENDMSG_MAX_BUFFERS)]
        try:
            sent = self._sock.sendmsg(buffers)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal(exc)
            return
        self._buffered -= sent
        while sent:
            head = self._buffer[0]
            if len(head) <= sent:
                sent -= len(head)
                self._buffer.popleft()
            elif isinstance(head, bytearray):
                del head[:sent]
                sent = 0
            else:
                self._buffer[0] = head[sent:]
                sent = 0
        if not self._buffer:
            self._reactor.remove_writer(self._fd)
            if self._closing:
                self._shut_down()
                return
        if self._paused and self._buffered <= self._low:
            self._paused = False
            self._protocol.resume_writing()

    def _fatal(self, exc: Exception) -> None:
        """The socket failed (typically EPIPE: the peer closed while we wrote). What the peer sent before
        it closed still counts (a client may send input and hang up at once): it is read, then we close."""
        self._buffer.clear()
        self._buffered = 0
        drain = self._reading and not self._closing and not self._failed
        self._failed = True
        self._closing = True
        self._reactor.call_soon(self._drain_and_finish if drain else self._finish, exc)

    def _drain_and_finish(self, exc: Exception) -> None:
        for _ in range(DRAIN_READS):
            try:
                data = self._sock.recv(RECV_SIZE)
            except OSError:
                break
            if not data or self._closed:
                break
            self._protocol.data_received(data)
        self._finish(exc)

    def _shut_down(self) -> None:
        """Everything went out: end our side of the stream (the peer reads it to the end, then EOF), tell
        the protocol the connection is over, and read and drop what the peer still sends until it closes
        or CLOSE_DRAIN passes. Closing with its bytes unread would make its next write fail (EPIPE) and a
        client that stops at a failed write would never read the ERROR that explains it."""
        if self._closed or self._failed:
            self._finish(None)
            return
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._finish(None)
            return
        self._report(None)
        self._reactor.add_reader(self._fd, self._drain_ready)
        self._drain_timer = self._reactor.call_later(CLOSE_DRAIN, self._finish, None)

    def _drain_ready(self) -> None:
        for _ in range(DRAIN_READS):
            try:
                data = self._sock.recv(RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                break
            if not data:
                break
        else:
            return  # more to come: read again at the next wakeup
        self._finish(None)

    def _report(self, exc: Exception | None) -> None:
        if not self._reported:
            self._reported = True
            self._protocol.connection_lost(exc)

    def _finish(self, exc: Exception | None) -> None:
        if self._closed:
            return
        self._closed = True
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        self._reactor.forget_fd(self._fd)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._report(exc)


def listen_unix(reactor: Reactor, path: str, protocol_factory: Callable[[], StreamProtocol],
                backlog: int = 128) -> socket.socket:
    """Bind and listen on ``path``; every accepted connection gets its own protocol and transport."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
    try:
        sock.bind(path)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise

    def accept() -> None:
        for _ in range(backlog):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of fds: leave it queued, look again shortly instead of spinning
                reactor.remove_reader(sock.fileno())
                reactor.call_later(ACCEPT_RETRY, reactor.add_reader, sock.fileno(), accept)
                return
            SocketTransport(reactor, conn, protocol_factory())

    reactor.add_reader(sock.fileno(), accept)
    return sock


def close_listener(reactor: Reactor, sock: socket.socket) -> None:
    reactor.forget_fd(sock.fileno())
    with contextlib.suppress(OSError):
        sock.close()
