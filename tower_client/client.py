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
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from shellper.client.blocking import Client, check_role, checked_socket_path, peer_pid
from shellper.core import names
from shellper.core.defaults import DEFAULT_GRACE
from shellper.core.trust import UntrustedSocket
from shellper.host.identity import IdentityError, PidFd, ProcessIdentity, open_verified
from shellper.host.trust import check_server, check_socket_dir, check_socket_file
from shellper.protocol import wire
from shellper.protocol.connection import (
    Answered,
    BadRequest,
    ClientError,
    Connection,
    ConnectionRefused,
    ConnectionView,
    ConnState,
    Forbidden,
    InstanceMismatch,
    NotRunning,
    OutputPosition,
    PeerMismatch,
    ProtocolViolation,
    RemoteError,
    Request,
    RequestFailed,
    SessionGone,
    SessionNotFound,
    SessionStopping,
    ShellperDead,
    SpawnFailed,
    Timeout,
    connect_error,
    result_int,
    send_error,
)
from tower_client.framereader import SinkReader, open_sink_stream
from tower_client.resume import (
    RECEIVE,
    Backoff,
    Deliver,
    GiveUp,
    Phase,
    Reconnect,
    Reconnected,
    Reopen,
    Resume,
    ResumeItem,
    ResumeView,
)

__all__ = [
    "AsyncClient",
    "AsyncResumingClient",
    "Backoff",
    "BadRequest",
    "Client",
    "ClientError",
    "ConnectionRefused",
    "Forbidden",
    "InstanceMismatch",
    "NotRunning",
    "OutputPosition",
    "PeerMismatch",
    "ProtocolViolation",
    "Reconnected",
    "RemoteError",
    "RequestFailed",
    "ResumingClient",
    "SessionGone",
    "SessionNotFound",
    "SessionStopping",
    "ShellperDead",
    "SpawnFailed",
    "Timeout",
    "UntrustedSocket",
    "socket_path",
]

CONNECT_TIMEOUT = 5.0
HANDSHAKE_TIMEOUT = 5.0
REQUEST_TIMEOUT = 5.0
STOP_EXIT_TIMEOUT = 5.0
"""Seconds a resuming client's stop() waits, after the shellper answered STOP (its tree has ended), for the
shellper process itself to be gone."""
CLIENT_NAME = "tower-client"
READ_SIZE = 256 * 1024
MAX_BUFFERED = 8 * 1024 * 1024
"""Bytes of decoded frames an AsyncClient holds for a caller that is not reading. Past this it stops
reading the socket, so the shellper sees a slow client and later catches it up from its ring."""


def socket_path(directory: str | os.PathLike[str], name: str) -> Path:
    """Where session ``name``'s socket is in ``directory``: shellper.core.names.socket_path, as a Path."""
    return Path(names.socket_path(os.fspath(directory), name))


# --------------------------------------------------------------------------------------------- asyncio


class AsyncClient(ConnectionView):
    """One asyncio connection to a shellper: ``await connect()``, then ``async for frame in client``.

    The I/O around a :class:`~shellper.protocol.connection.Connection`: what arrives is fed to it in the
    event loop's read callback (no task per connection), which answers ``status()``/``ping()`` waiters
    with the replies it matches and queues the rest (bounded by MAX_BUFFERED bytes: past it the socket
    is not read) for ``recv()`` / iteration; ``on_frames``, if set, is called there once frames are
    queued. REPLAY is consumed by ``connect()`` and kept in ``replay``; iteration yields DATA, GAP, EXIT,
    EVENT, ERROR and any unsolicited reply, and ends when the shellper closes the connection
    (``closed_error`` says why).
    """

    def __init__(self, path: str | os.PathLike[str], role: str = wire.Role.TOWER, *, client_name: str = CLIENT_NAME,
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
        self.max_frame = max_frame
        self.conn = Connection(self.path, role, client_name, max_frame)
        self.output = self.conn.output
        self.closed_error: ClientError | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._live = False
        """The handshake is done and the connection has not ended: arriving bytes are decoded into frames."""
        self._ended: asyncio.Future[None] | None = None
        """Done once the live connection has ended (the shellper's end, an error, close())."""
        self._paused = False
        self._frames: deque[tuple[wire.Frame, int]] = deque()
        self._buffered = 0
        self._have = asyncio.Event()
        self.on_frames: Callable[[], None] | None = None
        """Called from the read callback once frames are queued (a Fleet takes them there, not in a task)."""
        self._waiters: dict[Request, asyncio.Future[wire.Frame]] = {}
        self._nonce = 0

    # ----------------------------------------------------------------------------------- connect

    async def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                      events_after: int | None = None, expect_instance_id: str | None = None,
                      expect_pid: int | None = None, rendered: int | None = None,
                      size: tuple[int, int] | None = None) -> wire.Welcome:
        """Connect, send HELLO, wait for WELCOME and REPLAY; optionally insist on who answered.

        ``expect_instance_id`` (from the session record) refuses an impostor at a recycled pid or a new
        instance under the same name; ``expect_pid`` checks SO_PEERCRED and WELCOME.shellper_pid.
        ``rendered`` (a terminal or viewer without ``resume_from``): the screen drawn in ``replay.preamble``
        after at most that many scrollback lines, instead of the bytes (protocol 8.6); ``size``: a terminal's
        (cols, rows), which the session takes before that drawing is made.
        """
        if self._writer is not None:
            raise ClientError(self.path, "already connected")
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await self._open_stream()
        except (OSError, TimeoutError) as exc:
            raise connect_error(self.path, exc, self.connect_timeout) from None
        self._writer = writer
        conn = self.conn = Connection(self.path, self.role, self.client_name, self.max_frame)
        self.output = conn.output
        self._ended = asyncio.get_running_loop().create_future()
        try:
            self._write(conn.hello(resume_from=resume_from, replay_bytes=replay_bytes, events_after=events_after,
                                   expect_instance_id=expect_instance_id, expect_pid=expect_pid,
                                   peer_pid=self.peer_pid() if expect_pid is not None else None,
                                   rendered=rendered, size=size))
            if isinstance(reader, SinkReader):  # from now on (the HELLO is sent) bytes go to the connection
                reader.sink, reader.failed = self._received, self._failed
            else:  # a subclass's plain StreamReader: a task moves its bytes to the same place
                self._pipe(reader)
            try:
                async with asyncio.timeout(self.handshake_timeout):
                    while conn.state is not ConnState.OPEN:
                        if conn.next_event() is None:  # WELCOME, then REPLAY: the connection keeps them
                            self._have.clear()
                            await self._have.wait()
            except TimeoutError:
                raise Timeout(self.path, f"no WELCOME/REPLAY within {self.handshake_timeout:g} s") from None
        except BaseException:
            await self.close()
            raise
        assert conn.welcome is not None
        self._live = True
        self._pump()  # what came with the REPLAY
        return conn.welcome

    async def _open_stream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The connected stream the handshake runs on (tower_client.remote_clients' runs over ssh instead, to a
        bridge that checks there). The checks of every client's connect (shellper.host.trust.connect_session)
        around a non-blocking one: nothing is sent to a socket in a directory others could have planted
        it in, nor to a server that is not ours."""
        check_socket_dir(self.path)
        check_socket_file(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        try:
            await asyncio.get_running_loop().sock_connect(sock, self.path)
            check_server(sock, self.path)  # closes it if it refuses
            return await open_sink_stream(sock)
        except BaseException:
            sock.close()
            raise

    def _pipe(self, reader: asyncio.StreamReader) -> None:
        """Feed a plain StreamReader's bytes to ``_received`` from a task (until the connection ends)."""
        async def pipe() -> None:
            while self._ended is not None and not self._ended.done():
                try:
                    chunk = await reader.read(READ_SIZE)
                except OSError as exc:
                    self._failed(exc)
                    return
                self._received(chunk)
                if not chunk:
                    return

        task = asyncio.get_running_loop().create_task(pipe(), name=f"shellper-client {self.path}")
        assert self._ended is not None
        self._ended.add_done_callback(lambda _: task.cancel())

    # ----------------------------------------------------------------------------------- reading

    def _received(self, chunk: bytes) -> None:
        """Bytes from the socket (``b""``: its end), in the event loop's read callback: before the handshake is
        done they wait for connect(); then they are decoded into frames at once."""
        if self._ended is None or self._ended.done():
            return  # closed by this client: nothing more is read
        conn = self.conn
        if self._live:
            frame = conn.sole_data_frame(chunk) if chunk else None
            if frame is not None:  # one whole DATA frame, the common case: no decoder
                size = len(frame.data)
                self._frames.append((frame, size))
                self._buffered += size
                self._queued(True)
                return
            conn.receive_data(chunk)
            self._pump()
        else:
            conn.receive_data(chunk)
            self._have.set()

    def _failed(self, exc: Exception) -> None:
        """Reading the socket failed (a reset, an error): the connection's end like any other."""
        if self._ended is None or self._ended.done():
            return
        self.conn.connection_lost(exc if isinstance(exc, OSError) else OSError(str(exc)))
        if self._live:
            self._pump()
        else:
            self._have.set()

    def _pump(self) -> None:
        """Take every frame the connection holds: replies to their waiters, the rest queued for recv()."""
        conn, frames = self.conn, self._frames
        queued = len(frames)
        try:
            while (event := conn.next_event()) is not None:
                if type(event) is wire.Data:  # the hot path
                    size = len(event.data)
                    frames.append((event, size))
                    self._buffered += size
                elif isinstance(event, Answered):
                    self._answer(event)
                else:
                    frames.append((event, 64))
                    self._buffered += 64
        except ClientError as exc:
            self._end(exc)
        self._queued(len(frames) > queued)

    def _queued(self, more: bool) -> None:
        """Frames were queued (``more``): past MAX_BUFFERED bytes the socket is not read until recv() has taken
        some; ``on_frames`` may take them now; else recv() is woken."""
        if self._buffered >= self.max_buffered and not self._paused and self._live:  # the reader is behind
            self._paused = True
            self._transport_call("pause_reading")
        if more and self.on_frames is not None:
            try:
                self.on_frames()
            except Exception as exc:  # a taker's bug must not end the transport: asyncio reports it
                asyncio.get_running_loop().call_exception_handler(
                    {"message": f"on_frames of {self.path} failed", "exception": exc})
        if self._frames or not self._live:
            self._have.set()

    def _transport_call(self, what: str) -> None:
        transport = self._writer.transport if self._writer is not None else None
        if transport is not None and not transport.is_closing():
            with contextlib.suppress(RuntimeError, AttributeError):
                getattr(transport, what)()

    def _end(self, error: ClientError) -> None:
        """The live connection has ended with ``error`` (once): recv() raises it after the frames queued,
        every request waiting fails with it."""
        if self._ended is None or self._ended.done():
            return
        self._live = False
        self.closed_error = error
        self._ended.set_result(None)
        self._have.set()
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(error)
        self._waiters.clear()

    def _answer(self, answered: Answered) -> None:
        fut = self._waiters.pop(answered.request, None)
        if fut is None or fut.done():
            return
        if answered.error is not None:
            fut.set_exception(answered.error)
        else:
            fut.set_result(answered.reply)

    async def recv(self, timeout: float | None = None) -> wire.Frame | None:
        """The next frame (offsets, EXIT and event seq tracked), or None after ``timeout`` seconds.

        Raises ``closed_error`` (SessionGone, ProtocolViolation, ...) once the connection has ended and
        every frame received before that has been handed out.
        """
        while not self._frames:
            if not self._live:
                raise self.closed_error or SessionGone(self.path, "not connected")
            self._have.clear()
            if timeout is None:  # a Fleet's reader, once a frame: no timer to set up and cancel
                await self._have.wait()
                continue
            try:
                async with asyncio.timeout(timeout):
                    await self._have.wait()
            except TimeoutError:
                return None
        return self.take()

    def take(self) -> wire.Frame:
        """The next frame queued (IndexError if none: ``has_frames`` says), delivered: what recv() returns."""
        frame, size = self._frames.popleft()
        self._buffered -= size
        if self._paused and self._buffered < self.max_buffered:
            self._paused = False
            self._transport_call("resume_reading")
        self.conn.deliver(frame)
        return frame

    @property
    def has_frames(self) -> bool:
        return bool(self._frames)

    def __aiter__(self) -> AsyncIterator[wire.Frame]:
        return self

    async def __anext__(self) -> wire.Frame:
        try:
            frame = await self.recv()
        except SessionGone:
            raise StopAsyncIteration from None
        assert frame is not None
        return frame

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
            raise send_error(self.path, exc, timeout) from None

    async def send(self, frame: wire.Frame, timeout: float | None = None) -> None:
        await self.send_bytes(self.conn.send(frame), self.request_timeout if timeout is None else timeout)

    async def write(self, data: bytes, timeout: float | None = None) -> None:
        """Input for the child. No default timeout: a slow child legitimately holds input back."""
        await self.send_bytes(self.conn.send_data(data), timeout)

    async def resize(self, cols: int, rows: int, timeout: float | None = None) -> None:
        """Set the PTY's size; raises BadRequest (out of range), Forbidden (a viewer), SessionStopping."""
        await self._ask(self.conn.checked(wire.Resize(cols=cols, rows=rows)), timeout)

    async def signal(self, name: str, timeout: float | None = None) -> int | None:
        """Signal the child's process group (tower only); ``name`` is one of wire.SIGNALS. Returns the pid
        signalled (the child's, its group's); raises NotRunning, BadRequest, Forbidden, SessionStopping."""
        reply = await self._ask(self.conn.checked(wire.Signal(signal=name)), timeout)
        return None if reply is None else result_int(reply, "pid")

    async def spawn(self, argv: list[str] | None = None, *, cwd: str | None = None,
                    env: dict[str, str] | None = None, clear_ring: bool = False,
                    timeout: float | None = None) -> int | None:
        """Replace the child; returns the new child's pid once it runs. Raises SpawnFailed (the command
        cannot start), SessionStopping, Forbidden. No deadline by default: the shellper answers once the
        old tree has ended, which takes up to its stop grace."""
        reply = await self._ask(self.conn.checked(wire.Spawn(argv=argv, cwd=cwd, env=env, clear_ring=clear_ring)),
                                timeout, deadline=False)
        return None if reply is None else result_int(reply, "child_pid")

    async def stop(self, grace: float | None = None, timeout: float | None = None) -> None:
        """End the session: the shellper terminates its tree, then exits. Returns once the tree has ended
        (the stream then ends); no deadline by default (the grace, then the kill rounds)."""
        await self._ask(self.conn.checked(wire.Stop(grace=grace)), timeout, deadline=False)

    async def status(self, timeout: float | None = None) -> wire.StatusReply:
        reply = await self._request(wire.Status(), timeout)
        assert isinstance(reply, wire.StatusReply)
        return reply

    async def _ask(self, frame: wire.Frame, timeout: float | None, *, deadline: bool = True) -> wire.Reply | None:
        """A request's REPLY (its refusal raised as the typed error); None from a version-2 shellper."""
        if not self.conn.replies:
            await self.send(frame, timeout)
            return None
        reply = await self._request(frame, timeout, deadline=deadline)
        assert isinstance(reply, wire.Reply)
        return reply

    async def ping(self, timeout: float | None = None) -> float:
        """Round-trip time in seconds."""
        self._nonce += 1
        started = time.monotonic()
        await self._request(wire.Ping(nonce=self._nonce), timeout)
        return time.monotonic() - started

    async def _request(self, frame: wire.Frame, timeout: float | None, *, deadline: bool = True) -> wire.Frame:
        """Send a request and await the answer the connection matches to it (``deadline``: by default
        within ``request_timeout``; else without one unless ``timeout`` is given)."""
        limit = timeout if timeout is not None or not deadline else self.request_timeout
        if self.closed_error is not None:
            raise self.closed_error
        request, data = self.conn.send_request(frame)
        fut: asyncio.Future[wire.Frame] = asyncio.get_running_loop().create_future()
        self._waiters[request] = fut
        try:
            await self.send_bytes(data, limit)
            async with asyncio.timeout(limit):
                return await asyncio.shield(fut)
        except TimeoutError:
            raise Timeout(self.path, f"no reply to {frame.TYPE.name} within {limit or 0:g} s") from None
        finally:
            if not fut.done():
                fut.cancel()
            self._waiters.pop(request, None)
            self.conn.cancel(request)

    # ----------------------------------------------------------------------------------- teardown

    def peer_pid(self) -> int | None:
        sock = self._writer.get_extra_info("socket") if self._writer is not None else None
        return peer_pid(sock) if sock is not None else None

    def abort(self) -> None:
        """Drop the connection at once (no flush). The reader sees the loss like any other."""
        if self._writer is not None:
            self._writer.transport.abort()

    async def close(self) -> None:
        if self._live:
            self._end(SessionGone(self.path, "closed by this client"))
        elif self._ended is not None and not self._ended.done():  # a handshake that failed: nothing to say
            self._ended.set_result(None)
        self.conn.close()
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


def _exit_limit(replies: bool, grace: float | None) -> float:
    """How long a stop waits for the shellper's exit: STOP_EXIT_TIMEOUT after its answer (the tree has
    ended); a version-2 shellper does not answer, so its grace period comes first."""
    return STOP_EXIT_TIMEOUT if replies else STOP_EXIT_TIMEOUT + (DEFAULT_GRACE if grace is None else grace)


C = TypeVar("C", Client, AsyncClient)


class _Resuming(ResumeView, Generic[C]):
    """What the blocking and the asyncio resuming clients share that is not I/O: their settings, the
    live connection's client, what follows each handshake (``_opened``), who answered, and what follows
    a lost connection (``_lose``). What each connection asks for, and every decision about the stream
    (what to hand out, when to reconnect, when to give up), is their :class:`~tower_client.resume.Resume`'s:
    each driver's ``recv`` loops on its ``next_step()`` and does the I/O it names."""

    client: C | None

    def _settle(self, path: str | os.PathLike[str], role: str, client_name: str, backoff: Backoff | None,
                expect_instance_id: str | None) -> None:
        self.path = checked_socket_path(path)
        check_role(role)
        self.role = role
        self.client_name = client_name
        self.state = Resume(self.path, expect_instance_id, backoff or Backoff())
        self.client = None
        self._shellper: ProcessIdentity | None = None

    def _note_shellper(self, welcome: wire.Welcome, peer: int | None) -> None:
        """Who answered, by the identity of the process at the other end of the socket (SO_PEERCRED, so
        in our pid namespace) with WELCOME's start time: checked when the connection is lost."""
        ident = ProcessIdentity.of(peer) if peer is not None else None
        if ident is not None and ident.boot_id == welcome.boot_id and ident.start_time == welcome.shellper_start_time:
            self._shellper = ident

    def _opened(self, client: C, welcome: wire.Welcome) -> wire.Welcome:
        """A connection's handshake is done: the stream takes its REPLAY, who answered is noted, and it is
        the live connection from now on."""
        assert client.replay is not None
        self.state.connected(welcome, client.replay, client.last_event_seq)
        self._note_shellper(welcome, client.peer_pid())
        self.client = client
        return welcome

    def _gone(self) -> bool:
        """The shellper this client talked to is no longer running (dead or a zombie): a stale socket
        will never answer again, so there is no point in waiting out the backoff."""
        return self._shellper is not None and not self._shellper.is_alive()

    def _pin_shellper(self) -> PidFd | None:
        """A pidfd on the shellper this client verified at connect (None if none was, or it is gone): opened
        before a STOP, so that waiting for its exit can never wait on a recycled pid."""
        if self._shellper is None:
            return None
        try:
            return open_verified(self._shellper)
        except IdentityError:
            return None

    def _current(self) -> C:
        if self.client is None:
            raise SessionGone(self.path, "not connected (reconnecting or ended)")
        return self.client

    def _lose(self, error: SessionGone) -> C:
        """The live connection ended with ``error``: the stream is told, and its client, no longer the
        current one, is returned for the caller to close."""
        client = self._current()
        self.client = None
        self.state.lost(error, client.fatal_error)
        return client

    def _stopping(self) -> tuple[C, PidFd | None]:
        """Before a STOP: the live client, the stream told not to resume, and a pidfd on the shellper."""
        client = self._current()
        self.state.stopping = True
        return client, self._pin_shellper()


class AsyncResumingClient(_Resuming[AsyncClient]):
    """An AsyncClient that reconnects with bounded backoff and resumes where the caller left off.

    Yields the stream as frames, the first REPLAY included (as GAP if the ring had already dropped
    bytes, then DATA); after each reconnection a :class:`Reconnected` marker comes first, then a GAP
    if the ring no longer held everything since ``output.next_offset``. Only the same shellper
    instance is resumed (another instance has other offsets: InstanceMismatch). It stops, without
    reconnecting, after an EXIT whose state is stopping/stopped, and after a fatal ERROR such as
    ``replaced`` (another tower took over: two resuming towers must not fight). What to do when is
    :class:`~tower_client.resume.Resume`'s; this only connects, reads and sleeps.
    """

    def __init__(self, path: str | os.PathLike[str], role: str = wire.Role.TOWER, *, client_name: str = CLIENT_NAME,
                 backoff: Backoff | None = None, expect_instance_id: str | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT, handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        self._settle(path, role, client_name, backoff, expect_instance_id)
        self._timeouts = (connect_timeout, handshake_timeout, request_timeout)
        self.on_frames: Callable[[], None] | None = None
        """Given to each connection's AsyncClient: called in the read callback once frames are queued, so a
        caller can take them with :meth:`take_ready` there (a Fleet does), without a task step per read."""

    def _new_client(self) -> AsyncClient:
        """A client for the next connection (tower_client.remote_clients' reaches another host)."""
        c, h, r = self._timeouts
        return AsyncClient(self.path, self.role, client_name=self.client_name, connect_timeout=c,
                           handshake_timeout=h, request_timeout=r)

    async def _open(self, ask: Reopen) -> wire.Welcome:
        client = self._new_client()
        try:
            welcome = self._opened(client, await client.connect(
                resume_from=ask.resume_from, replay_bytes=ask.replay_bytes, events_after=ask.events_after,
                expect_instance_id=ask.expect_instance_id))
        except BaseException:
            await client.close()
            raise
        client.on_frames = self.on_frames
        return welcome

    async def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                      events_after: int | None = None) -> wire.Welcome:
        """First connection (no retries: a session that is not there is the caller's business)."""
        return await self._open(self.state.first(resume_from, replay_bytes, events_after))

    async def _reconnect(self, step: Reconnect) -> None:
        """One reconnection attempt, as the stream's :class:`~tower_client.resume.Reconnect` says."""
        await asyncio.sleep(step.delay)
        try:
            await self._open(step.ask)
        except ClientError as exc:
            self.state.failed(exc, self._gone())

    async def recv(self, timeout: float | None = None) -> ResumeItem | None:
        """The next frame or Reconnected marker; None after ``timeout`` with nothing to hand out."""
        st = self.state
        while True:
            step = st.next_step()
            if step is RECEIVE:  # once a frame: ahead of match's class patterns, which cost more
                client = self.client
                assert client is not None  # the stream is live only with a client
                try:
                    frame = await client.recv(timeout)
                except SessionGone as exc:
                    await self._lose(exc).close()
                    continue
                return None if frame is None else st.received(frame)
            match step:
                case Deliver(item):
                    return item
                case Reconnect() as step:
                    await self._reconnect(step)
                case GiveUp(error):
                    raise error

    def take_frames_with(self, on_frames: Callable[[], None] | None) -> None:
        """Have ``on_frames`` called in the read callback once the live connection (and every later one) has
        queued frames: it takes them with :meth:`take_ready`."""
        self.on_frames = on_frames
        if self.client is not None:
            self.client.on_frames = on_frames

    def take_ready(self) -> ResumeItem | None:
        """The next item if it is at hand without waiting (one the stream queued, or a frame the live
        connection has decoded), as recv() would return it; None when recv() would have to wait, reconnect
        or raise (then call recv())."""
        st = self.state
        if st.items:
            step = st.next_step()
            assert isinstance(step, Deliver)
            return step.item
        client = self.client
        if client is not None and client.has_frames and st.phase is Phase.LIVE:
            return st.received(client.take())
        return None

    def __aiter__(self) -> AsyncIterator[ResumeItem]:
        return self

    async def __anext__(self) -> ResumeItem:
        try:
            item = await self.recv()
        except SessionGone:
            raise StopAsyncIteration from None
        assert item is not None
        return item

    async def write(self, data: bytes, timeout: float | None = None) -> None:
        await self._current().write(data, timeout)

    async def resize(self, cols: int, rows: int, timeout: float | None = None) -> None:
        await self._current().resize(cols, rows, timeout)

    async def signal(self, name: str, timeout: float | None = None) -> int | None:
        return await self._current().signal(name, timeout)

    async def spawn(self, argv: list[str] | None = None, *, cwd: str | None = None,
                    env: dict[str, str] | None = None, clear_ring: bool = False,
                    timeout: float | None = None) -> int | None:
        return await self._current().spawn(argv, cwd=cwd, env=env, clear_ring=clear_ring, timeout=timeout)

    async def stop(self, grace: float | None = None, timeout: float | None = None) -> None:
        """End the session; the stream then ends cleanly (no reconnection), also when no child was running.
        Returns once the shellper process is gone (its pidfd, opened before the STOP, says so), not when its
        tree has ended and it is still exiting: a ``find_holders`` right after must not count it. Timeout if
        it is still there STOP_EXIT_TIMEOUT seconds after answering."""
        client, pidfd = self._stopping()
        try:
            await client.stop(grace, timeout)
            if pidfd is None:  # whose process it is is not known here (over ssh): the connection's end, then
                await self._closed_by_peer(client)
                return
            loop = asyncio.get_running_loop()
            gone: asyncio.Future[None] = loop.create_future()

            def readable() -> None:
                if not gone.done():
                    gone.set_result(None)

            limit = _exit_limit(client.conn.replies, grace)
            loop.add_reader(pidfd.fileno(), readable)
            try:
                async with asyncio.timeout(limit):
                    await gone
            except TimeoutError:
                raise Timeout(self.path, f"shellper {pidfd.pid} still runs {limit:g} s after it was "
                              "asked to stop") from None
            finally:
                loop.remove_reader(pidfd.fileno())
        finally:
            if pidfd is not None:
                pidfd.close()

    async def _closed_by_peer(self, client: AsyncClient) -> None:
        """Wait (at most STOP_EXIT_TIMEOUT) until the shellper closed the connection: it is exiting."""
        ended = client._ended
        if ended is None or ended.done():
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(STOP_EXIT_TIMEOUT):
                await asyncio.shield(ended)

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
        self.state.close()

    async def __aenter__(self) -> AsyncResumingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class ResumingClient(_Resuming[Client]):
    """The blocking twin of :class:`AsyncResumingClient`, built on shellper's :class:`Client`."""

    def __init__(self, path: str | os.PathLike[str], role: str = wire.Role.TOWER, *, client_name: str = CLIENT_NAME,
                 backoff: Backoff | None = None, expect_instance_id: str | None = None,
                 timeout: float = CONNECT_TIMEOUT) -> None:
        self._settle(path, role, client_name, backoff, expect_instance_id)
        self.timeout = timeout

    def _new_client(self) -> Client:
        """A client for the next connection (tower_client.remote_clients' reaches another host)."""
        return Client(self.path, self.role, client_name=self.client_name, timeout=self.timeout)

    def _open(self, ask: Reopen) -> wire.Welcome:
        client = self._new_client()
        try:
            return self._opened(client, client.connect(
                resume_from=ask.resume_from, replay_bytes=ask.replay_bytes, events_after=ask.events_after,
                expect_instance_id=ask.expect_instance_id))
        except BaseException:
            client.close()
            raise

    def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                events_after: int | None = None) -> wire.Welcome:
        return self._open(self.state.first(resume_from, replay_bytes, events_after))

    def recv(self, timeout: float | None = None) -> ResumeItem | None:
        st = self.state
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = st.next_step()
            if step is RECEIVE:  # once a frame: ahead of match's class patterns, which cost more
                client = self.client
                assert client is not None  # the stream is live only with a client
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    frame = client.recv(left)
                except SessionGone as exc:
                    self._lose(exc).close()
                    continue
                return None if frame is None else st.received(frame)
            match step:
                case Deliver(item):
                    return item
                case Reconnect(delay, ask):
                    time.sleep(delay)  # the backoff between attempts, not synchronisation
                    try:
                        self._open(ask)
                    except ClientError as exc:
                        st.failed(exc, self._gone())
                case GiveUp(error):
                    raise error

    def __iter__(self) -> Iterator[ResumeItem]:
        while True:
            try:
                item = self.recv()
            except SessionGone:
                return
            assert item is not None
            yield item

    def send(self, frame: wire.Frame) -> None:
        self._current().send(frame)

    def write(self, data: bytes) -> None:
        self._current().write(data)

    def resize(self, cols: int, rows: int, timeout: float | None = None) -> None:
        self._current().resize(cols, rows, timeout)

    def signal(self, name: str, timeout: float | None = None) -> int | None:
        return self._current().signal(name, timeout)

    def spawn(self, argv: list[str] | None = None, *, cwd: str | None = None, env: dict[str, str] | None = None,
              clear_ring: bool = False, timeout: float | None = None) -> int | None:
        return self._current().spawn(argv, cwd=cwd, env=env, clear_ring=clear_ring, timeout=timeout)

    def status(self, timeout: float | None = None) -> wire.StatusReply:
        return self._current().status(timeout)

    def stop(self, grace: float | None = None, timeout: float | None = None) -> None:
        """End the session; the stream then ends cleanly (no reconnection), also when no child was running.
        Returns once the shellper process is gone, as AsyncResumingClient.stop."""
        client, pidfd = self._stopping()
        try:
            client.stop(grace, timeout)
            limit = _exit_limit(client.conn.replies, grace)
            if pidfd is not None and not pidfd.wait_dead(limit):
                raise Timeout(self.path, f"shellper {pidfd.pid} still runs {limit:g} s after it was asked to stop")
        finally:
            if pidfd is not None:
                pidfd.close()

    def abort(self) -> None:
        """Drop the current connection as if the network failed (the next recv resumes)."""
        if self.client is not None and self.client.sock is not None:
            with contextlib.suppress(OSError):
                self.client.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        self.state.close()

    def __enter__(self) -> ResumingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
