"""A blocking client for one shellper socket: what the CLI uses, and what tower_client builds on.

It owns one connection and one decoder and tracks the output offset, so a caller always knows where
to resume. Errors are typed and carry the socket path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import stat
import struct
import time

from shellper.core.errors import ShellperError
from shellper.core.structs import field, record
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs each shellper ~2.5 ms and 0.5 MiB
if TYPE_CHECKING:
    from pathlib import Path
    from typing import TypeVar

    F = TypeVar("F", bound=wire.Frame)


class ClientError(ShellperError):
    """Talking to a session failed; ``path`` is its socket."""

    def __init__(self, path: str | os.PathLike[str], message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.message = message


class SessionNotFound(ClientError):
    """No socket at that path (no such session, or it has stopped)."""


class ConnectionRefused(ClientError):
    """A socket file is there but nothing answers: a stale file, or a shellper that died."""


class NotASocket(ClientError):
    """Something other than a socket is at the path (a symlink is never connected through)."""


class SessionGone(ClientError):
    """The shellper closed the connection."""


class Timeout(ClientError):
    """No answer within the deadline."""


class RemoteError(ClientError):
    """The shellper answered with an ERROR frame."""

    def __init__(self, path: str | os.PathLike[str], error: wire.Error) -> None:
        super().__init__(path, f"{error.code}: {error.message}")
        self.error = error


class ProtocolViolation(ClientError):
    """The shellper sent something this client cannot accept."""


@record
class Output:
    """Where this client is in the session's output stream."""

    next_offset: int = 0
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (offset resumed at, bytes missed)

    def advance(self, frame: wire.Frame) -> None:
        """Move past a DATA or GAP frame (other frames carry no output)."""
        if isinstance(frame, wire.Data):
            self.next_offset += len(frame.data)
        elif isinstance(frame, wire.Gap):
            self.gaps.append((frame.offset, frame.missed))
            self.next_offset = frame.offset


def checked_socket_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a str, refusing what str() would turn into some other path: None ("./None"), bytes
    ("b'...'"), an int, "", or a NUL (the kernel would cut the address there)."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"socket path must be a str or os.PathLike, not {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"socket path must be text, not {type(text).__name__}")
    if not text or "\0" in text:
        raise ValueError(f"socket path {text!r} is empty or contains a NUL byte")
    return text


def check_role(role: str) -> str:
    """A role the shellper knows (wire.ROLES), refused here instead of by the shellper after a round trip."""
    if role not in wire.ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(wire.ROLES)}")
    return role


def _check_not_a_link(path: str) -> None:
    """NotASocket if lstat finds a symlink or another non-socket at ``path``: connect() would follow a
    symlink to whatever it names, and report a file as "nothing is listening"."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return  # connect() says what is wrong
    if stat.S_ISLNK(mode):
        raise NotASocket(path, "is a symlink, not a session socket; shellper never connects through one: "
                         "remove it if it is not needed")
    if not stat.S_ISSOCK(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a regular file" if stat.S_ISREG(mode) else "a FIFO or device"
        raise NotASocket(path, f"is {kind}, not a session socket: remove it if it is not needed")


class Client:
    """One connection: ``connect()`` does the handshake; then ``recv()`` frames and ``send()`` them."""

    def __init__(self, path: str | os.PathLike[str], role: str = "tower", *, client_name: str = "",
                 timeout: float = 5.0) -> None:
        self.path = checked_socket_path(path)
        check_role(role)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.role = role
        self.client_name = client_name
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.decoder = wire.Decoder()
        self.welcome: wire.Welcome | None = None
        self.replay: wire.Replay | None = None
        self.output = Output()
        self.exit: wire.Exit | None = None
        self._pending: list[wire.DecodedEvent] = []

    # ----------------------------------------------------------------------------------- connect

    def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                events_after: int | None = None, terminal_fd: int | None = None,
                detach_byte: int | None = None) -> wire.Welcome:
        """Connect, send HELLO, and wait for WELCOME and REPLAY (both always come). On any failure the
        socket is closed again: the caller has nothing to clean up.

        ``terminal_fd`` offers the shellper a terminal to read and write itself (protocol 7.4); it keeps
        a copy only if ``WELCOME.terminal`` says so, and the caller still owns and closes ``terminal_fd``.
        """
        _check_not_a_link(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except FileNotFoundError:
            sock.close()
            raise SessionNotFound(self.path, "no such session socket") from None
        except ConnectionRefusedError:
            sock.close()
            raise ConnectionRefused(self.path, "nothing is listening (stale socket)") from None
        except PermissionError:
            sock.close()
            raise ClientError(self.path, "permission denied") from None
        except TimeoutError:
            sock.close()
            raise Timeout(self.path, f"connect timed out after {self.timeout:g} s") from None
        except OSError as exc:
            sock.close()
            raise ClientError(self.path, f"connect failed: {exc.strerror or exc}") from None
        self.sock = sock
        try:
            hello = wire.encode(wire.Hello(
                version=wire.PROTOCOL_VERSION, role=self.role, resume_from=resume_from, replay_bytes=replay_bytes,
                events_after=events_after, client=self.client_name, terminal=terminal_fd is not None or None,
                detach_byte=detach_byte if terminal_fd is not None else None))
            if terminal_fd is not None:
                self._send_with_fd(hello, terminal_fd)
            else:
                self.send_bytes(hello)
            deadline = time.monotonic() + self.timeout
            welcome = self._expect(wire.Welcome, deadline)
            self.welcome = welcome
            self.replay = self._expect(wire.Replay, deadline)
        except BaseException:  # a failed handshake leaves no socket open behind it
            self.close()
            raise
        self.output.next_offset = self.replay.offset + len(self.replay.data)
        if self.replay.gap:
            self.output.gaps.append((self.replay.offset, self.replay.gap))
        return welcome

    def _expect(self, kind: type[F], deadline: float) -> F:
        while True:
            frame = self._next_raw(deadline)
            if isinstance(frame, wire.Error):
                raise RemoteError(self.path, frame)
            if isinstance(frame, kind):
                return frame
            if isinstance(frame, wire.Frame):
                raise ProtocolViolation(self.path, f"expected {kind.TYPE.name}, got {frame.TYPE.name}")

    # ----------------------------------------------------------------------------------- I/O

    def send(self, frame: wire.Frame) -> None:
        self.send_bytes(wire.encode(frame))

    def send_bytes(self, data: bytes) -> None:
        if self.sock is None:
            raise SessionGone(self.path, "not connected")
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise Timeout(self.path, f"send timed out after {self.timeout:g} s") from None
        except OSError as exc:
            raise SessionGone(self.path, f"connection lost: {exc.strerror or exc}") from None

    def _send_with_fd(self, data: bytes, fd: int) -> None:
        """The descriptor rides on the first bytes sent; the rest, if any, follows plainly."""
        assert self.sock is not None
        try:
            sent = socket.send_fds(self.sock, [data], [fd])
        except TimeoutError:
            raise Timeout(self.path, f"send timed out after {self.timeout:g} s") from None
        except OSError as exc:
            raise SessionGone(self.path, f"connection lost: {exc.strerror or exc}") from None
        if sent < len(data):
            self.send_bytes(data[sent:])

    def write(self, data: bytes) -> None:
        """Input for the child."""
        self.send_bytes(wire.encode_data(data))

    def recv(self, timeout: float | None = None) -> wire.Frame | None:
        """The next frame (output offsets tracked), or None if nothing came within ``timeout``.

        Raises SessionGone when the shellper closes the connection.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            frame = self._next_raw(deadline)
        except Timeout:
            return None
        while not isinstance(frame, wire.Frame):  # Skipped / Unknown: a newer peer's frame, ignored
            frame = self._next_raw(deadline)
        self.output.advance(frame)
        if isinstance(frame, wire.Exit):
            self.exit = frame
        return frame

    def request(self, frame: wire.Frame, reply: type[wire.Frame], timeout: float | None = None) -> wire.Frame:
        """Send ``frame`` and return the first frame of type ``reply``; other frames are kept for recv()."""
        self.send(frame)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        skipped: list[wire.DecodedEvent] = []
        try:
            while True:
                got = self._next_raw(deadline)
                if isinstance(got, reply):
                    return got
                if isinstance(got, wire.Error) and got.frame_type == frame.TYPE:
                    raise RemoteError(self.path, got)
                skipped.append(got)
        finally:
            self._pending[:0] = skipped

    def _next_raw(self, deadline: float | None) -> wire.DecodedEvent:
        if self._pending:
            return self._pending.pop(0)
        while True:
            try:
                event = self.decoder.next_event()
            except wire.ProtocolError as exc:
                raise ProtocolViolation(self.path, str(exc)) from None
            if event is not None:
                return event
            self._fill(deadline)

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
            if exc.errno == errno.ECONNRESET:
                chunk = b""
            else:
                raise SessionGone(self.path, f"connection lost: {exc.strerror or exc}") from None
        if not chunk:
            raise SessionGone(self.path, "the shellper closed the connection")
        self.decoder.feed(chunk)

    def fileno(self) -> int:
        if self.sock is None:
            raise SessionGone(self.path, "not connected")
        return self.sock.fileno()

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def socket_path(directory: str | os.PathLike[str], name: str) -> Path:
    from pathlib import Path  # here: `shellper attach` starts without pathlib

    return Path(directory) / f"{name}.sock"


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid = int(struct.unpack("3i", creds)[0])
    return pid if pid > 0 else None
