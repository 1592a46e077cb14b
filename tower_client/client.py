"""Clients for a Tower: the blocking one from shellper, an asyncio one, and resuming wrappers of both.

Output offsets are absolute and tracked at the point where the *caller* receives a frame, never where
the socket delivered it: a Tower that reconnects with ``resume_from=output.next_offset`` therefore gets
exactly the bytes it has not handed on yet, including anything that was still buffered in a client it
dropped. Every error is a :class:`~shellper.client.blocking.ClientError` subclass carrying the socket path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TypeVar

from shellper.client.blocking import (
    Client,
    ClientError,
    ConnectionRefused,
    Output,
    ProtocolViolation,
    RemoteError,
    SessionGone,
    SessionNotFound,
    Timeout,
    check_role,
    checked_socket_path,
    peer_pid,
    socket_path,
)
from shellper.core.exitrecord import ExitRecord
from shellper.core.states import SessionState
from shellper.protocol import wire

__all__ = [
    "AsyncClient",
    "AsyncResumingClient",
    "Backoff",
    "Client",
    "ClientError",
    "ConnectionRefused",
    "InstanceMismatch",
    "Output",
    "PeerMismatch",
    "ProtocolViolation",
    "Reconnected",
    "RemoteError",
    "ResumingClient",
    "SessionGone",
    "SessionNotFound",
    "Timeout",
    "socket_path",
]

F = TypeVar("F", bound=wire.Frame)

CONNECT_TIMEOUT = 5.0
HANDSHAKE_TIMEOUT = 5.0
REQUEST_TIMEOUT = 5.0
CLIENT_NAME = "tower-client"
READ_SIZE = 256 * 1024
MAX_BUFFERED = 8 * 1024 * 1024
"""Bytes of decoded frames an AsyncClient holds for a caller that is not reading. Past this it stops
reading the socket, so the shellper sees a slow client and later catches it up from its ring."""
ENDED_STATES = (SessionState.STOPPING,)
"""EXIT states after which the shellper goes away on purpose: a resuming client does not reconnect."""
RESUMABLE_ERRORS = ("too_slow",)
"""Fatal ERROR codes after which reconnecting makes sense. Any other (``replaced`` by another tower,
``forbidden``, a protocol error) would only repeat, or fight another tower, so resuming stops."""


class InstanceMismatch(ClientError):
    """The socket answered as another shellper instance than expected: offsets do not carry over."""

    def __init__(self, path: str | os.PathLike[str], expected: str, found: str) -> None:
        super().__init__(path, f"expected shellper instance {expected}, found {found}")
        self.expected = expected
        self.found = found


class PeerMismatch(ClientError):
    """The process serving the socket is not the pid the session record names."""

    def __init__(self, path: str | os.PathLike[str], expected: int, found: int | None) -> None:
        super().__init__(path, f"expected the shellper pid {expected} at the other end, found {found}")
        self.expected = expected
        self.found = found


def _connect_error(path: str, exc: BaseException, timeout: float) -> ClientError:
    if isinstance(exc, FileNotFoundError):
        return SessionNotFound(path, "no such session socket")
    if isinstance(exc, ConnectionRefusedError):
        return ConnectionRefused(path, "nothing is listening (stale socket)")
    if isinstance(exc, TimeoutError):
        return Timeout(path, f"connect timed out after {timeout:g} s")
    if isinstance(exc, PermissionError):
        return ClientError(path, "permission denied")
    if isinstance(exc, OSError):
        return ClientError(path, f"connect failed: {exc.strerror or exc}")
    return ClientError(path, f"connect failed: {exc}")


# --------------------------------------------------------------------------------------------- asyncio


def checked_input(data: bytes) -> bytes:
    """Input must be bytes: a str would need an encoding the shellper cannot guess."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"input must be bytes, not {type(data).__name__} (encode text first)")
    return data


def checked_request(frame: F) -> F:
    """The request methods' arguments, checked as the shellper would (wire.check_request, wire.bare_signal),
    so a mistake raises here instead of costing the connection (a fatal ERROR bad_field)."""
    try:
        wire.check_request(frame)
    except wire.BadField as exc:
        raise ValueError(str(exc)) from None
    if isinstance(frame, wire.Signal) and wire.bare_signal(frame.signal) is None:
        raise ValueError(f"signal {frame.signal!r} is not one of {', '.join(wire.SIGNALS)}")
    if isinstance(frame, wire.Spawn):  # types only: what the shellper's decoder would refuse
        if frame.argv is not None and (not isinstance(frame.argv, list | tuple) or not frame.argv
                                       or not all(isinstance(a, str) for a in frame.argv)):
            raise ValueError(f"argv must be a non-empty list of strings or None, got {frame.argv!r:.80}")
        if frame.cwd is not None and not isinstance(frame.cwd, str):
            raise ValueError(f"cwd must be a string or None, got {frame.cwd!r:.80}")
        if frame.env is not None and (not isinstance(frame.env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in frame.env.items())):
            raise ValueError(f"env must be a dict of strings or None, got {frame.env!r:.80}")
    return frame


class AsyncClient:
    """One asyncio connection to a shellper: ``await connect()``, then ``async for frame in client``.

    A reader task decodes frames as they arrive, answers ``status()``/``ping()`` waiters directly and
    queues the rest (bounded by MAX_BUFFERED bytes) for ``recv()`` / iteration. REPLAY is consumed by
    ``connect()`` and kept in ``replay``; iteration yields DATA, GAP, EXIT, EVENT, ERROR and any
    unsolicited reply, and ends when the shellper closes the connection (``closed_error`` says why).
    """

    def __init__(self, path: str | os.PathLike[str], role: str = "tower", *, client_name: str = CLIENT_NAME,
                 connect_timeout: float = CONNECT_TIMEOUT, handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 request_timeout: float = REQUEST_TIMEOUT, max_buffered: int = MAX_BUFFERED,
                 max_frame: int = wire.MAX_FRAME_SIZE) -> None:
        check_role(role)
        self.path = checked_socket_path(path)
        self.role = role
        self.client_name = client_name
        self.connect_timeout = connect_timeout
        self.handshake_timeout = handshake_timeout
        self.request_timeout = request_timeout
        self.max_buffered = max_buffered
        self.decoder = wire.Decoder(max_frame)
        self.welcome: wire.Welcome | None = None
        self.replay: wire.Replay | None = None
        self.output = Output()
        self.exit: wire.Exit | None = None
        self.last_event_seq: int | None = None
        self.fatal_error: wire.Error | None = None
        self.closed_error: ClientError | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._frames: deque[tuple[wire.Frame, int]] = deque()
        self._buffered = 0
        self._have = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._status_waiters: deque[asyncio.Future[wire.StatusReply]] = deque()
        self._pong_waiters: dict[int, asyncio.Future[wire.Pong]] = {}
        self._nonce = 0

    # ----------------------------------------------------------------------------------- connect

    async def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                      events_after: int | None = None, expect_instance_id: str | None = None,
                      expect_pid: int | None = None) -> wire.Welcome:
        """Connect, send HELLO, wait for WELCOME and REPLAY; optionally insist on who answered.

        ``expect_instance_id`` (from the session record) refuses an impostor at a recycled pid or a new
        instance under the same name; ``expect_pid`` checks SO_PEERCRED and WELCOME.shellper_pid.
        """
        if self._writer is not None:
            raise ClientError(self.path, "already connected")
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_unix_connection(self.path)
        except (OSError, TimeoutError) as exc:
            raise _connect_error(self.path, exc, self.connect_timeout) from None
        self._reader, self._writer = reader, writer
        try:
            self._write(wire.encode(wire.Hello(
                version=wire.PROTOCOL_VERSION, role=self.role, resume_from=resume_from,
                replay_bytes=replay_bytes, events_after=events_after, client=self.client_name)))
            try:
                async with asyncio.timeout(self.handshake_timeout):
                    welcome = await self._expect(wire.Welcome)
                    replay = await self._expect(wire.Replay)
            except TimeoutError:
                raise Timeout(self.path, f"no WELCOME/REPLAY within {self.handshake_timeout:g} s") from None
            self._verify(welcome, expect_instance_id, expect_pid)
        except BaseException:
            await self.close()
            raise
        self.welcome, self.replay = welcome, replay
        self.output.next_offset = replay.offset + len(replay.data)
        if replay.gap:
            self.output.gaps.append((replay.offset, replay.gap))
        self.last_event_seq = events_after if events_after is not None else welcome.event_seq
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._read_loop(), name=f"shellper-client {self.path}")
        return welcome

    def _verify(self, welcome: wire.Welcome, instance_id: str | None, pid: int | None) -> None:
        if instance_id is not None and welcome.instance_id != instance_id:
            raise InstanceMismatch(self.path, instance_id, welcome.instance_id)
        if pid is not None:
            seen = self.peer_pid()
            if seen != pid or welcome.shellper_pid != pid:
                raise PeerMismatch(self.path, pid, seen if seen != pid else welcome.shellper_pid)

    async def _expect(self, kind: type[F]) -> F:
        """The next frame during the handshake (before the reader task runs); it must be ``kind``."""
        while True:
            event = self._decode_next()
            if event is None:
                assert self._reader is not None
                try:
                    chunk = await self._reader.read(READ_SIZE)
                except OSError as exc:
                    raise SessionGone(self.path, f"connection lost: {exc.strerror or exc}") from None
                if not chunk:
                    raise SessionGone(self.path, "the shellper closed the connection during the handshake")
                self.decoder.feed(chunk)
                continue
            if not isinstance(event, wire.Frame):
                continue
            if isinstance(event, wire.Error):
                raise RemoteError(self.path, event)
            if not isinstance(event, kind):
                raise ProtocolViolation(self.path, f"expected {kind.TYPE.name}, got {event.TYPE.name}")
            return event

    def _decode_next(self) -> wire.DecodedEvent | None:
        try:
            return self.decoder.next_event()
        except wire.ProtocolError as exc:
            raise ProtocolViolation(self.path, str(exc)) from None

    # ----------------------------------------------------------------------------------- reading

    async def _read_loop(self) -> None:
        assert self._reader is not None
        error: ClientError = SessionGone(self.path, "the shellper closed the connection")
        try:
            while True:
                while (event := self._decode_next()) is not None:
                    if isinstance(event, wire.Frame) and not self._answer(event):
                        await self._push(event)
                try:
                    chunk = await self._reader.read(READ_SIZE)
                except OSError as exc:
                    error = SessionGone(self.path, f"connection lost: {exc.strerror or exc}")
                    break
                if not chunk:
                    try:
                        self.decoder.close()
                    except wire.ProtocolError as exc:
                        error = ProtocolViolation(self.path, str(exc))
                    break
                self.decoder.feed(chunk)
        except ClientError as exc:
            error = exc
        except asyncio.CancelledError:
            error = SessionGone(self.path, "closed by this client")
            raise
        finally:
            if self.fatal_error is not None and isinstance(error, SessionGone):
                error = SessionGone(self.path, f"closed by the shellper after ERROR {self.fatal_error.code}: "
                                    f"{self.fatal_error.message}")
            self.closed_error = error
            self._have.set()
            self._room.set()
            waiters: list[asyncio.Future[wire.StatusReply] | asyncio.Future[wire.Pong]] = [
                *self._status_waiters, *self._pong_waiters.values()]
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(error)
            self._status_waiters.clear()
            self._pong_waiters.clear()

    def _answer(self, frame: wire.Frame) -> bool:
        """Hand a reply to its waiter; True if consumed. Fatal errors are remembered (and still queued)."""
        if isinstance(frame, wire.StatusReply):
            while self._status_waiters:
                fut = self._status_waiters.popleft()
                if not fut.done():
                    fut.set_result(frame)
                    return True
        elif isinstance(frame, wire.Pong) and frame.nonce in self._pong_waiters:
            fut_p = self._pong_waiters.pop(frame.nonce)
            if not fut_p.done():
                fut_p.set_result(frame)
            return True
        elif isinstance(frame, wire.Error):
            if frame.fatal:
                self.fatal_error = frame
            elif frame.frame_type == wire.FrameType.STATUS and self._status_waiters:
                self._status_waiters.popleft().set_exception(RemoteError(self.path, frame))
                return True
            elif frame.frame_type == wire.FrameType.PING and self._pong_waiters:
                nonce = next(iter(self._pong_waiters))
                self._pong_waiters.pop(nonce).set_exception(RemoteError(self.path, frame))
                return True
        return False

    async def _push(self, frame: wire.Frame) -> None:
        size = len(frame.data) if isinstance(frame, wire.Data) else 64
        self._frames.append((frame, size))
        self._buffered += size
        self._have.set()
        if self._buffered >= self.max_buffered:
            self._room.clear()
            await self._room.wait()

    async def recv(self, timeout: float | None = None) -> wire.Frame | None:
        """The next frame (offsets, EXIT and event seq tracked), or None after ``timeout`` seconds.

        Raises ``closed_error`` (SessionGone, ProtocolViolation, ...) once the connection has ended and
        every frame received before that has been handed out.
        """
        if self._task is None and not self._frames:
            raise self.closed_error or SessionGone(self.path, "not connected")
        while not self._frames:
            if self._task is None or self._task.done():
                raise self.closed_error or SessionGone(self.path, "not connected")
            self._have.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._have.wait()
            except TimeoutError:
                return None
        frame, size = self._frames.popleft()
        self._buffered -= size
        if self._buffered < self.max_buffered:
            self._room.set()
        self._account(frame)
        return frame

    def _account(self, frame: wire.Frame) -> None:
        self.output.advance(frame)
        if isinstance(frame, wire.Exit):
            self.exit = frame
        elif isinstance(frame, wire.Event) and frame.seq > 0:
            self.last_event_seq = max(self.last_event_seq or 0, frame.seq)

    def __aiter__(self) -> AsyncIterator[wire.Frame]:
        return self

    async def __anext__(self) -> wire.Frame:
        try:
            frame = await self.recv()
        except SessionGone:
            raise StopAsyncIteration from None
        assert frame is not None
        return frame

    @property
    def exited(self) -> bool:
        """The child is not running: WELCOME said so, or an EXIT was received (a late EXIT is never lost)."""
        if self.exit is not None:
            return True
        return self.welcome is not None and self.welcome.child_pid is None and self.welcome.exit is not None

    @property
    def last_exit(self) -> ExitRecord | None:
        """The child's last exit as a typed record: the latest EXIT's, else the one WELCOME reported.
        Raises ExitRecordError if the shellper sent a malformed one."""
        if self.exit is not None:
            return self.exit.exit_record()
        return self.welcome.exit_record() if self.welcome is not None else None

    # ----------------------------------------------------------------------------------- writing

    def _write(self, data: bytes) -> None:
        if self._writer is None or self._writer.is_closing():
            raise SessionGone(self.path, "not connected")
        self._writer.write(data)

    async def send_bytes(self, data: bytes, timeout: float | None = None) -> None:
        self._write(data)
        assert self._writer is not None
        try:
            async with asyncio.timeout(timeout):
                await self._writer.drain()
        except TimeoutError:
            raise Timeout(self.path, f"send did not drain within {timeout:g} s") from None
        except OSError as exc:
            raise SessionGone(self.path, f"connection lost: {exc.strerror or exc}") from None

    async def send(self, frame: wire.Frame, timeout: float | None = None) -> None:
        await self.send_bytes(wire.encode(frame), self.request_timeout if timeout is None else timeout)

    async def write(self, data: bytes, timeout: float | None = None) -> None:
        """Input for the child. No default timeout: a slow child legitimately holds input back."""
        await self.send_bytes(wire.encode_data(checked_input(data)), timeout)

    async def resize(self, cols: int, rows: int) -> None:
        await self.send(checked_request(wire.Resize(cols=cols, rows=rows)))

    async def signal(self, name: str) -> None:
        """Signal the child's process group (tower only); ``name`` is one of wire.SIGNALS."""
        await self.send(checked_request(wire.Signal(signal=name)))

    async def spawn(self, argv: list[str] | None = None, *, cwd: str | None = None,
                    env: dict[str, str] | None = None, clear_ring: bool = False) -> None:
        await self.send(checked_request(wire.Spawn(argv=argv, cwd=cwd, env=env, clear_ring=clear_ring)))

    async def stop(self, grace: float | None = None) -> None:
        """Ask the shellper to end the session: it terminates its own tree, then exits."""
        await self.send(checked_request(wire.Stop(grace=grace)))

    async def status(self, timeout: float | None = None) -> wire.StatusReply:
        fut: asyncio.Future[wire.StatusReply] = asyncio.get_running_loop().create_future()
        self._status_waiters.append(fut)
        return await self._request(wire.Status(), fut, timeout)

    async def ping(self, timeout: float | None = None) -> float:
        """Round-trip time in seconds."""
        self._nonce += 1
        fut: asyncio.Future[wire.Pong] = asyncio.get_running_loop().create_future()
        self._pong_waiters[self._nonce] = fut
        started = time.monotonic()
        await self._request(wire.Ping(nonce=self._nonce), fut, timeout)
        return time.monotonic() - started

    async def _request(self, frame: wire.Frame, fut: asyncio.Future[F], timeout: float | None) -> F:
        limit = self.request_timeout if timeout is None else timeout
        try:
            if self.closed_error is not None:
                raise self.closed_error
            await self.send(frame, limit)
            async with asyncio.timeout(limit):
                return await asyncio.shield(fut)
        except TimeoutError:
            raise Timeout(self.path, f"no reply to {frame.TYPE.name} within {limit:g} s") from None
        finally:
            if not fut.done():
                fut.cancel()

    # ----------------------------------------------------------------------------------- teardown

    def peer_pid(self) -> int | None:
        sock = self._writer.get_extra_info("socket") if self._writer is not None else None
        return peer_pid(sock) if sock is not None else None

    def abort(self) -> None:
        """Drop the connection at once (no flush). The reader sees the loss like any other."""
        if self._writer is not None:
            self._writer.transport.abort()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif task is not None and self.closed_error is None:
            self.closed_error = SessionGone(self.path, "closed by this client")
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# --------------------------------------------------------------------------------------------- resuming


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnect attempts: initial * factor**n, capped; give up after max_attempts."""

    initial: float = 0.05
    factor: float = 2.0
    max_delay: float = 2.0
    max_attempts: int = 8

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay, self.initial * self.factor ** max(0, attempt - 1)))


@dataclass(frozen=True)
class Reconnected:
    """Yielded by a resuming client right after it reconnected, before the resumed output."""

    welcome: wire.Welcome
    resumed_from: int
    gap: int
    attempts: int
    preamble: bytes = b""
    """Terminal modes to re-establish (a full reset first when ``gap``): for a terminal, not output."""


ResumeItem = wire.Frame | Reconnected


class _ResumeState:
    """What both resuming clients share: where the stream is, and whether it may be resumed."""

    def __init__(self, path: str, expect_instance_id: str | None, backoff: Backoff) -> None:
        self.path = path
        self.instance_id = expect_instance_id
        self.backoff = backoff
        self.output = Output()
        self.last_event_seq: int | None = None
        self.exit: wire.Exit | None = None
        self.reconnects = 0
        self.ended: ClientError | None = None

    def adopt_handshake(self, welcome: wire.Welcome, replay: wire.Replay, first: bool,
                        attempts: int) -> list[ResumeItem]:
        """Items that present a (re)connection's REPLAY as ordinary stream frames."""
        if self.instance_id is None:
            self.instance_id = welcome.instance_id
        items: list[ResumeItem] = []
        if first:
            self.output.next_offset = replay.offset - replay.gap
        else:
            asked = self.output.next_offset
            if replay.offset - replay.gap != asked:
                raise ProtocolViolation(self.path, f"asked to resume at {asked}, REPLAY starts at "
                                        f"{replay.offset} with a gap of {replay.gap}")
            self.reconnects += 1
            items.append(Reconnected(welcome, asked, replay.gap, attempts, replay.preamble))
        if replay.gap:
            items.append(wire.Gap(offset=replay.offset, missed=replay.gap))
        if replay.data:
            items.append(wire.Data(replay.data))
        return items

    def account(self, item: ResumeItem) -> None:
        if isinstance(item, wire.Frame):
            self.output.advance(item)
        if isinstance(item, wire.Exit):
            self.exit = item
        elif isinstance(item, wire.Event) and item.seq > 0:
            self.last_event_seq = max(self.last_event_seq or 0, item.seq)

    def resumable(self, fatal: wire.Error | None) -> bool:
        if self.exit is not None and self.exit.state in ENDED_STATES:
            return False
        return fatal is None or fatal.code in RESUMABLE_ERRORS

    @staticmethod
    def retryable(exc: ClientError) -> bool:
        """Connection-level failures are retried; a different instance or a refusal is final."""
        retry = SessionNotFound | ConnectionRefused | Timeout | SessionGone
        return isinstance(exc, retry) and not isinstance(exc, InstanceMismatch)


class _ResumeView:
    """What both resuming clients expose of their shared resume state."""

    state: _ResumeState
    _items: deque[ResumeItem]

    def _ready_item(self) -> ResumeItem | None:
        """An item already queued (accounted as it leaves), or the error that ended the stream."""
        if self._items:
            item = self._items.popleft()
            self.state.account(item)
            return item
        if self.state.ended is not None:
            raise self.state.ended
        return None

    @property
    def output(self) -> Output:
        return self.state.output

    @property
    def reconnects(self) -> int:
        return self.state.reconnects

    @property
    def exit(self) -> wire.Exit | None:
        return self.state.exit


class AsyncResumingClient(_ResumeView):
    """An AsyncClient that reconnects with bounded backoff and resumes where the caller left off.

    Yields the stream as frames, the first REPLAY included (as GAP if the ring had already dropped
    bytes, then DATA); after each reconnection a :class:`Reconnected` marker comes first, then a GAP
    if the ring no longer held everything since ``output.next_offset``. Only the same shellper
    instance is resumed (another instance has other offsets: InstanceMismatch). It stops, without
    reconnecting, after an EXIT whose state is stopping/stopped, and after a fatal ERROR such as
    ``replaced`` (another tower took over: two resuming towers must not fight).
    """

    def __init__(self, path: str | os.PathLike[str], role: str = "tower", *, client_name: str = CLIENT_NAME,
                 backoff: Backoff | None = None, expect_instance_id: str | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT, handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        self.path = checked_socket_path(path)
        check_role(role)
        self.role = role
        self.client_name = client_name
        self._timeouts = (connect_timeout, handshake_timeout, request_timeout)
        self.state = _ResumeState(self.path, expect_instance_id, backoff or Backoff())
        self.client: AsyncClient | None = None
        self._items: deque[ResumeItem] = deque()

    def _new_client(self) -> AsyncClient:
        c, h, r = self._timeouts
        return AsyncClient(self.path, self.role, client_name=self.client_name, connect_timeout=c,
                           handshake_timeout=h, request_timeout=r)

    async def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                      events_after: int | None = None) -> wire.Welcome:
        """First connection (no retries: a session that is not there is the caller's business)."""
        client = self._new_client()
        welcome = await client.connect(resume_from=resume_from, replay_bytes=replay_bytes,
                                       events_after=events_after, expect_instance_id=self.state.instance_id)
        assert client.replay is not None
        self.state.last_event_seq = client.last_event_seq
        self._items.extend(self.state.adopt_handshake(welcome, client.replay, True, 0))
        self.client = client
        return welcome

    async def _reconnect(self) -> None:
        st = self.state
        attempt = 0
        while True:
            attempt += 1
            await asyncio.sleep(st.backoff.delay(attempt))
            client = self._new_client()
            try:
                welcome = await client.connect(resume_from=st.output.next_offset,
                                               events_after=st.last_event_seq,
                                               expect_instance_id=st.instance_id)
            except ClientError as exc:
                if not st.retryable(exc) or attempt >= st.backoff.max_attempts:
                    st.ended = exc
                    raise
                continue
            assert client.replay is not None
            try:
                self._items.extend(st.adopt_handshake(welcome, client.replay, False, attempt))
            except ClientError as exc:
                await client.close()
                st.ended = exc
                raise
            self.client = client
            return

    async def recv(self, timeout: float | None = None) -> ResumeItem | None:
        """The next frame or Reconnected marker; None after ``timeout`` with nothing to hand out."""
        st = self.state
        while True:
            item = self._ready_item()
            if item is not None:
                return item
            if self.client is None:
                raise SessionGone(self.path, "not connected")
            try:
                frame = await self.client.recv(timeout)
            except SessionGone as exc:
                fatal = self.client.fatal_error
                await self.client.close()
                self.client = None
                if not st.resumable(fatal):
                    st.ended = exc
                    raise
                await self._reconnect()
                continue
            if frame is None:
                return None
            st.account(frame)
            return frame

    def __aiter__(self) -> AsyncIterator[ResumeItem]:
        return self

    async def __anext__(self) -> ResumeItem:
        try:
            item = await self.recv()
        except SessionGone:
            raise StopAsyncIteration from None
        assert item is not None
        return item

    def _current(self) -> AsyncClient:
        if self.client is None:
            raise SessionGone(self.path, "not connected (reconnecting or ended)")
        return self.client

    async def write(self, data: bytes, timeout: float | None = None) -> None:
        await self._current().write(data, timeout)

    async def resize(self, cols: int, rows: int) -> None:
        await self._current().resize(cols, rows)

    async def signal(self, name: str) -> None:
        await self._current().signal(name)

    async def spawn(self, argv: list[str] | None = None, *, cwd: str | None = None,
                    env: dict[str, str] | None = None, clear_ring: bool = False) -> None:
        await self._current().spawn(argv, cwd=cwd, env=env, clear_ring=clear_ring)

    async def stop(self, grace: float | None = None) -> None:
        await self._current().stop(grace)

    async def status(self, timeout: float | None = None) -> wire.StatusReply:
        return await self._current().status(timeout)

    async def ping(self, timeout: float | None = None) -> float:
        return await self._current().ping(timeout)

    def abort(self) -> None:
        """Drop the current connection as if the network failed (the next recv resumes)."""
        if self.client is not None:
            self.client.abort()

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None
        if self.state.ended is None:
            self.state.ended = SessionGone(self.path, "closed by this client")

    async def __aenter__(self) -> AsyncResumingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class ResumingClient(_ResumeView):
    """The blocking twin of :class:`AsyncResumingClient`, built on shellper's :class:`Client`."""

    def __init__(self, path: str | os.PathLike[str], role: str = "tower", *, client_name: str = CLIENT_NAME,
                 backoff: Backoff | None = None, expect_instance_id: str | None = None,
                 timeout: float = CONNECT_TIMEOUT) -> None:
        self.path = checked_socket_path(path)
        check_role(role)
        self.role = role
        self.client_name = client_name
        self.timeout = timeout
        self.state = _ResumeState(self.path, expect_instance_id, backoff or Backoff())
        self.client: Client | None = None
        self._items: deque[ResumeItem] = deque()
        self._last_fatal: wire.Error | None = None

    def _open(self, first: bool, attempts: int, **hello: int | None) -> wire.Welcome:
        client = Client(self.path, self.role, client_name=self.client_name, timeout=self.timeout)
        try:
            welcome = client.connect(**hello)
            if self.state.instance_id is not None and welcome.instance_id != self.state.instance_id:
                raise InstanceMismatch(self.path, self.state.instance_id, welcome.instance_id)
            assert client.replay is not None
            items = self.state.adopt_handshake(welcome, client.replay, first, attempts)
        except BaseException:
            client.close()
            raise
        if first:
            events_after = hello.get("events_after")
            self.state.last_event_seq = events_after if events_after is not None else welcome.event_seq
        self._items.extend(items)
        self.client = client
        return welcome

    def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                events_after: int | None = None) -> wire.Welcome:
        return self._open(True, 0, resume_from=resume_from, replay_bytes=replay_bytes,
                          events_after=events_after)

    def _reconnect(self) -> None:
        st = self.state
        attempt = 0
        while True:
            attempt += 1
            time.sleep(st.backoff.delay(attempt))  # backoff between attempts, not synchronisation
            try:
                self._open(False, attempt, resume_from=st.output.next_offset, events_after=st.last_event_seq)
                return
            except ClientError as exc:
                if not st.retryable(exc) or attempt >= st.backoff.max_attempts:
                    st.ended = exc
                    raise

    def recv(self, timeout: float | None = None) -> ResumeItem | None:
        st = self.state
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            item = self._ready_item()
            if item is not None:
                return item
            if self.client is None:
                raise SessionGone(self.path, "not connected")
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                frame = self.client.recv(left)
            except SessionGone as exc:
                self.client.close()
                self.client = None
                if not st.resumable(self._last_fatal):
                    st.ended = exc
                    raise
                self._last_fatal = None
                self._reconnect()
                continue
            if frame is None:
                return None
            if isinstance(frame, wire.Error) and frame.fatal:
                self._last_fatal = frame
            st.account(frame)
            return frame

    def __iter__(self) -> Iterator[ResumeItem]:
        while True:
            try:
                item = self.recv()
            except SessionGone:
                return
            assert item is not None
            yield item

    def _current(self) -> Client:
        if self.client is None:
            raise SessionGone(self.path, "not connected (reconnecting or ended)")
        return self.client

    def send(self, frame: wire.Frame) -> None:
        self._current().send(frame)

    def write(self, data: bytes) -> None:
        self._current().write(checked_input(data))

    def stop(self, grace: float | None = None) -> None:
        self.send(checked_request(wire.Stop(grace=grace)))

    def abort(self) -> None:
        """Drop the current connection as if the network failed (the next recv resumes)."""
        if self.client is not None and self.client.sock is not None:
            with contextlib.suppress(OSError):
                self.client.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.state.ended is None:
            self.state.ended = SessionGone(self.path, "closed by this client")

    def __enter__(self) -> ResumingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
