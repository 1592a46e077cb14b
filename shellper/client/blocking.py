"""A blocking client for one shellper socket: what the CLI uses, and what tower_client builds on.

The socket and the waiting are here; what the bytes mean (the handshake, the output offset a caller
resumes from, the answers to requests, the typed errors, which carry the socket path) is the
sans-IO connection's (shellper.protocol.connection).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import time
from collections import deque

from shellper.core.errors import BadArgument, BadArgumentType
from shellper.core.trust import UntrustedSocket
from shellper.host.trust import connect_session
from shellper.protocol import wire
from shellper.protocol.connection import (
    Answered,
    BadRequest,
    ClientError,
    Connection,
    ConnectionRefused,
    ConnectionView,
    ConnEvent,
    ConnState,
    Forbidden,
    InstanceMismatch,
    InvalidRequest,
    NotASocket,
    NotRunning,
    OutputPosition,
    ProtocolViolation,
    RemoteError,
    RequestFailed,
    SessionGone,
    SessionNotFound,
    SessionStopping,
    SpawnFailed,
    Timeout,
    connect_error,
    result_int,
    send_error,
)

__all__ = [
    "BadRequest",
    "Client",
    "ClientError",
    "ConnectionRefused",
    "Forbidden",
    "InstanceMismatch",
    "InvalidRequest",
    "NotASocket",
    "NotRunning",
    "OutputPosition",
    "ProtocolViolation",
    "RemoteError",
    "RequestFailed",
    "SessionGone",
    "SessionNotFound",
    "SessionStopping",
    "SpawnFailed",
    "Timeout",
    "UntrustedSocket",
    "check_role",
    "checked_socket_path",
]


def checked_socket_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a str, refusing what str() would turn into some other path: None ("./None"), bytes
    ("b'...'"), an int, "", or a NUL (the kernel would cut the address there)."""
    if not isinstance(path, str | os.PathLike):
        raise BadArgumentType(f"socket path must be a str or os.PathLike, not {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise BadArgumentType(f"socket path must be text, not {type(text).__name__}")
    if not text or "\0" in text:
        raise BadArgument(f"socket path {text!r} is empty or contains a NUL byte")
    return text


def check_role(role: str) -> str:
    """A role the shellper knows (wire.ROLES), refused here instead of by the shellper after a round trip."""
    if role not in wire.ROLES:
        raise BadArgument(f"role {role!r} is not one of {', '.join(wire.ROLES)}")
    return role


class Client(ConnectionView):
    """One connection: ``connect()`` does the handshake; then ``recv()`` frames and ``send()`` them.

    The I/O around a :class:`~shellper.protocol.connection.Connection`, which keeps the protocol state:
    ``welcome``, ``replay``, ``output``, ``exit``, ``fatal_error`` and ``last_event_seq`` are its.
    """

    def __init__(self, path: str | os.PathLike[str], role: str = wire.Role.TOWER, *, client_name: str = "",
                 timeout: float = 5.0) -> None:
        self.path = checked_socket_path(path)
        check_role(role)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise BadArgument(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.role = role
        self.client_name = client_name
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.conn = Connection(self.path, role, client_name)
        self.output = self.conn.output
        self._pending: deque[wire.Frame] = deque()  # frames read while a request() awaited its answer

    # ----------------------------------------------------------------------------------- connect

    def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                events_after: int | None = None, terminal_fd: int | None = None,
                detach_byte: int | None = None, expect_instance_id: str | None = None,
                rendered: int | None = None, size: tuple[int, int] | None = None) -> wire.Welcome:
        """Connect, send HELLO, and wait for WELCOME and REPLAY (both always come). On any failure the
        socket is closed again: the caller has nothing to clean up.

        ``terminal_fd`` offers the shellper a terminal to read and write itself (protocol 7.4); it keeps
        a copy only if ``WELCOME.terminal`` says so, and the caller still owns and closes ``terminal_fd``.
        ``expect_instance_id`` refuses (InstanceMismatch) any other shellper instance than that one.
        ``size``: a relaying terminal's (cols, rows), which the session takes before the replay is drawn.
        """
        sock = self._open_socket()
        self.sock = sock
        conn = self.conn = Connection(self.path, self.role, self.client_name)
        self.output = conn.output
        self._pending.clear()
        try:
            hello = conn.hello(resume_from=resume_from, replay_bytes=replay_bytes, events_after=events_after,
                               terminal=terminal_fd is not None, detach_byte=detach_byte,
                               expect_instance_id=expect_instance_id, rendered=rendered, size=size)
            if terminal_fd is not None:
                self._send_with_fd(hello, terminal_fd)
            else:
                self.send_bytes(hello)
            deadline = time.monotonic() + self.timeout
            while conn.state is not ConnState.OPEN:
                self._next_event(deadline)  # WELCOME, then REPLAY: the connection checks and keeps them
        except BaseException:  # a failed handshake leaves no socket open behind it
            self.close()
            raise
        assert conn.welcome is not None
        return conn.welcome

    def _open_socket(self) -> socket.socket:
        """The connected socket the handshake runs on (shellper.client.remote's runs over ssh instead, to a
        bridge that makes the same checks there)."""
        try:  # the directory, the file and the server checked: nothing is sent to a socket others planted
            return connect_session(self.path, self.timeout)
        except OSError as exc:
            raise connect_error(self.path, exc, self.timeout) from None

    # ----------------------------------------------------------------------------------- I/O

    def send(self, frame: wire.Frame) -> None:
        self.send_bytes(self.conn.send(frame))

    def send_bytes(self, data: bytes) -> None:
        if self.sock is None:
            raise SessionGone(self.path, "not connected")
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise send_error(self.path, exc, self.timeout) from None

    def _send_with_fd(self, data: bytes, fd: int) -> None:
        """The descriptor rides on the first bytes sent; the rest, if any, follows plainly."""
        assert self.sock is not None
        try:
            sent = socket.send_fds(self.sock, [data], [fd])
        except OSError as exc:
            raise send_error(self.path, exc, self.timeout) from None
        if sent < len(data):
            self.send_bytes(data[sent:])

    def write(self, data: bytes) -> None:
        """Input for the child."""
        self.send_bytes(self.conn.send_data(data))

    def recv(self, timeout: float | None = None) -> wire.Frame | None:
        """The next frame (output offsets tracked), or None if nothing came within ``timeout``.

        Raises SessionGone when the shellper closes the connection.
        """
        if self._pending:
            frame = self._pending.popleft()
        else:
            event = self.conn.next_event()
            if event is None:
                try:
                    event = self._next_event(None if timeout is None else time.monotonic() + timeout)
                except Timeout:
                    return None
            frame = event.reply if isinstance(event, Answered) else event  # a request's, if none awaits it
        self.conn.deliver(frame)
        return frame

    def request(self, frame: wire.Frame, reply: type[wire.Frame], timeout: float | None = None, *,
                deadline: bool = True) -> wire.Frame:
        """Send ``frame`` and return its answer, a frame of type ``reply`` (RemoteError if the shellper
        refused it); the frames that came before it are kept for recv(). Within ``timeout`` (by default
        the client's); ``deadline=False`` without one unless ``timeout`` is given."""
        ticket, data = self.conn.send_request(frame, reply.TYPE)
        limit = timeout if timeout is not None or not deadline else self.timeout
        until = None if limit is None else time.monotonic() + limit
        before: list[wire.Frame] = []
        try:
            self.send_bytes(data)
            while True:
                event = self._next_event(until)
                if isinstance(event, Answered):
                    if event.request is ticket:
                        if event.error is not None:
                            raise event.error
                        return event.reply
                    event = event.reply
                before.append(event)
        finally:
            self.conn.cancel(ticket)
            self._pending.extend(before)

    def _next_event(self, deadline: float | None) -> ConnEvent:
        conn = self.conn
        while (event := conn.next_event()) is None:
            self._fill(deadline)
        return event

    def _fill(self, deadline: float | None) -> None:
        if self.sock is None:
            raise SessionGone(self.path, "not connected")
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(self.path, "no frame before the deadline")
            readable, _, _ = select.select([self.sock], [], [], left)
            if not readable:
                raise Timeout(self.path, "no frame before the deadline")
        else:
            select.select([self.sock], [], [])
        try:
            chunk = self.sock.recv(1024 * 1024)
        except BlockingIOError:
            return
        except TimeoutError:
            raise Timeout(self.path, "no frame before the deadline") from None
        except OSError as exc:
            self.conn.connection_lost(exc)
            return
        self.conn.receive_data(chunk)

    # ----------------------------------------------------------------------------------- requests

    def resize(self, cols: int, rows: int, timeout: float | None = None) -> None:
        """Set the PTY's size; raises BadRequest (out of range, before sending), Forbidden (a viewer),
        SessionStopping."""
        self._ask(self.conn.checked(wire.Resize(cols=cols, rows=rows)), timeout)

    def signal(self, name: str, timeout: float | None = None) -> int | None:
        """Signal the child's process group (tower only); returns the pid signalled. Raises NotRunning,
        BadRequest, Forbidden, SessionStopping."""
        reply = self._ask(self.conn.checked(wire.Signal(signal=name)), timeout)
        return None if reply is None else result_int(reply, "pid")

    def spawn(self, argv: list[str] | None = None, *, cwd: str | None = None, env: dict[str, str] | None = None,
              clear_ring: bool = False, timeout: float | None = None) -> int | None:
        """Replace the child; returns the new child's pid once it runs. Raises SpawnFailed, SessionStopping,
        Forbidden. No deadline by default: the answer comes once the old tree has ended."""
        reply = self._ask(self.conn.checked(wire.Spawn(argv=argv, cwd=cwd, env=env, clear_ring=clear_ring)),
                          timeout, deadline=False)
        return None if reply is None else result_int(reply, "child_pid")

    def stop(self, grace: float | None = None, timeout: float | None = None) -> None:
        """End the session; returns once the shellper has ended the tree (then it closes the connection).
        No deadline by default."""
        self._ask(self.conn.checked(wire.Stop(grace=grace)), timeout, deadline=False)

    def status(self, timeout: float | None = None) -> wire.StatusReply:
        reply = self.request(wire.Status(), wire.StatusReply, timeout)
        assert isinstance(reply, wire.StatusReply)
        return reply

    def _ask(self, frame: wire.Frame, timeout: float | None, *, deadline: bool = True) -> wire.Reply | None:
        """A request's REPLY (its refusal raised as the typed error); None from a version-2 shellper,
        which does not answer: the request is only sent."""
        if not self.conn.replies:
            self.send(frame)
            return None
        reply = self.request(frame, wire.Reply, timeout, deadline=deadline)
        assert isinstance(reply, wire.Reply)
        return reply

    def peer_pid(self) -> int | None:
        """The pid of the process serving the socket (SO_PEERCRED); None when not connected."""
        return peer_pid(self.sock) if self.sock is not None else None

    def fileno(self) -> int:
        if self.sock is None:
            raise SessionGone(self.path, "not connected")
        return self.sock.fileno()

    def close(self) -> None:
        self.conn.close()
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid = int(struct.unpack("3i", creds)[0])
    return pid if pid > 0 else None
