"""The client side of a shellper connection, free of I/O: one state machine, in the manner of h11.

The caller moves the bytes; this says what they mean. ``hello()`` gives the HELLO to send and
``send()``/``send_request()`` the bytes of later frames; ``receive_data()`` takes what the socket
delivered (``b""`` for its end); ``next_event()`` hands back, in order, the frames that completed:
WELCOME and REPLAY checked as the handshake, the answer to one of this client's requests as
:class:`Answered`, everything else as the frame itself (so DATA costs nothing beyond its decoding).
The connection ends by raising the typed :class:`ClientError` that says why, from ``next_event()``,
once every frame received before the end has been handed back.

Output positions are absolute offsets and move where the caller hands a frame on (``deliver()``),
not where it was decoded: a client that queues frames resumes from what its caller really got.
The blocking :class:`~shellper.client.blocking.Client`, the asyncio client of ``tower_client`` and
``shellper attach``'s relay are the I/O around this one object.
"""

from __future__ import annotations

import errno
import os
from enum import Enum

from shellper.core import structs
from shellper.core.errors import BadArgument, BadArgumentType, ShellperError
from shellper.core.errors import ClientError as ClientError  # re-exported: its home is core, for the trust checks
from shellper.core.structs import field, record
from shellper.core.trust import NotASocket as NotASocket
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: `shellper attach` starts without typing (see shellper.core.structs)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import TypeVar

    from shellper.core.exitrecord import ExitRecord

    F = TypeVar("F", bound=wire.Frame)


# --------------------------------------------------------------------------------------------- errors


class InvalidRequest(BadArgument):
    """A frame the shellper would refuse as malformed (a fatal ERROR): refused before it is sent, so the
    connection is kept. ``field`` names the bad field. A ValueError too."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SessionNotFound(ClientError):
    """No socket at that path (no such session, or it has stopped)."""


class ConnectionRefused(ClientError):
    """A socket file is there but nothing answers: a stale file, or a shellper that died."""


class SessionGone(ClientError):
    """The shellper closed the connection."""


class Timeout(ClientError):
    """No answer within the deadline."""


class RemoteError(ClientError):
    """The shellper answered with an ERROR frame."""

    def __init__(self, path: str | os.PathLike[str], error: wire.Error) -> None:
        super().__init__(path, f"{error.code}: {error.message}")
        self.error = error


class RequestFailed(RemoteError):
    """The shellper answered a request with a REPLY that is not ok (version 3): ``code`` says why (one of
    ``wire.REPLY_CODES``, or a newer one), ``reply`` is the REPLY. Nothing was done, except for
    ``spawn_failed`` after the checks (the old child was ended; the EXIT says so)."""

    def __init__(self, path: str | os.PathLike[str], reply: wire.Reply) -> None:
        super().__init__(path, wire.Error(code=reply.code, message=reply.message, frame_type=reply.frame_type))
        self.reply = reply
        self.code = reply.code


class BadRequest(RequestFailed, ValueError):
    """The request's fields were refused (``bad_field``, ``missing_field``, ``bad_signal``)."""


class NotRunning(RequestFailed):
    """No child is running to take the request (``not_running``)."""


class Forbidden(RequestFailed):
    """This connection's role may not send the request (``forbidden``)."""


class SpawnFailed(RequestFailed):
    """A SPAWN's command could not start (``spawn_failed``)."""


class SessionStopping(RequestFailed):
    """The session is stopping: the request was not carried out (``stopping``)."""


REQUEST_ERRORS: dict[str, type[RequestFailed]] = {
    "bad_field": BadRequest, "missing_field": BadRequest, "bad_signal": BadRequest, "not_running": NotRunning,
    "forbidden": Forbidden, "spawn_failed": SpawnFailed, "stopping": SessionStopping,
}
"""The typed error for each REPLY code; any other code (``internal``, a newer one) is a RequestFailed."""


def result_int(reply: wire.Reply, key: str) -> int | None:
    """An integer a REPLY's result reports (None if a newer or odd shellper left it out)."""
    value = reply.result.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def request_error(path: str, reply: wire.Reply) -> RequestFailed:
    """The typed error a REPLY that is not ok stands for."""
    return REQUEST_ERRORS.get(reply.code, RequestFailed)(path, reply)


class ShellperDead(ClientError):
    """The shellper behind the socket is no longer running (killed, crashed): its process, checked by its
    identity, is gone, so the session will not answer again."""


class ProtocolViolation(ClientError):
    """The shellper sent something this client cannot accept."""


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


class ConnectionMisuse(ShellperError, RuntimeError):
    """This side used the connection out of turn (a second HELLO, bytes fed before the HELLO): a bug."""


def connect_error(path: str, exc: BaseException, timeout: float) -> ClientError:
    """The typed error for what connecting to the session's socket raised."""
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


def send_error(path: str, exc: OSError, timeout: float | None) -> ClientError:
    """The typed error for what sending on the socket raised."""
    if isinstance(exc, TimeoutError):
        return Timeout(path, "send timed out" + (f" after {timeout:g} s" if timeout is not None else ""))
    return SessionGone(path, f"connection lost: {exc.strerror or exc}")


# --------------------------------------------------------------------------------------------- position


@record
class OutputPosition:
    """Where this client is in the session's output stream."""

    next_offset: int = 0
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (offset resumed at, bytes missed)

    def advance(self, frame: object) -> None:
        """Move past a DATA or GAP frame (other frames carry no output)."""
        if type(frame) is wire.Data:
            self.next_offset += len(frame.data)
        elif type(frame) is wire.Gap:
            self.gaps.append((frame.offset, frame.missed))
            self.next_offset = frame.offset


class StreamPosition:
    """What a client has handed on to its caller: the output offset to resume from and the gaps in it,
    the child's last EXIT, the last numbered event (``events_after`` for a resume), and the session's
    state as WELCOME, EXIT and ``state`` events last said it."""

    def __init__(self) -> None:
        self.output = OutputPosition()
        self.exit: wire.Exit | None = None
        self.last_event_seq: int | None = None
        self.session_state: str | None = None

    def deliver(self, frame: object) -> None:
        """The caller took ``frame``: move past it (what is not a frame moves nothing)."""
        if type(frame) is wire.Data:  # the hot path: nothing but the count
            self.output.next_offset += len(frame.data)
        elif type(frame) is wire.Gap:
            self.output.advance(frame)
        elif type(frame) is wire.Exit:
            self.exit = frame
            self.session_state = frame.state or self.session_state
        elif type(frame) is wire.Event and frame.seq > 0:
            self.last_event_seq = max(self.last_event_seq or 0, frame.seq)
            if frame.kind == "state" and isinstance(frame.data.get("state"), str):
                self.session_state = frame.data["state"]


# --------------------------------------------------------------------------------------------- states and rules


class ConnState(Enum):
    """Where a connection is; HANDSHAKE, STREAMING and SENDING say what each state allows."""

    IDLE = "idle"
    """Nothing sent yet: ``hello()`` comes first."""
    AWAIT_WELCOME = "await_welcome"
    AWAIT_REPLAY = "await_replay"
    OPEN = "open"
    CLOSING = "closing"
    """A fatal ERROR came: the shellper closes the connection after it (what came before still comes)."""
    CLOSED = "closed"
    """The stream ended, or this side closed it; ``error`` says how."""
    FAILED = "failed"
    """The handshake was refused or did not match, or the shellper broke the protocol; ``error`` says how."""


HANDSHAKE: dict[ConnState, tuple[type[wire.Frame], ConnState]] = {
    ConnState.AWAIT_WELCOME: (wire.Welcome, ConnState.AWAIT_REPLAY),
    ConnState.AWAIT_REPLAY: (wire.Replay, ConnState.OPEN),
}
"""In a handshake state: the one frame that may come (an ERROR refuses the connection), and the next state."""

STREAMING = frozenset({ConnState.OPEN, ConnState.CLOSING})
"""States in which frames flow to the caller as they come."""

SENDING = frozenset({ConnState.AWAIT_WELCOME, ConnState.AWAIT_REPLAY, ConnState.OPEN, ConnState.CLOSING})
"""States in which this side may send: after its HELLO, before the end."""

END_OF_STREAM: dict[ConnState, str] = {
    ConnState.AWAIT_WELCOME: "the shellper closed the connection during the handshake",
    ConnState.AWAIT_REPLAY: "the shellper closed the connection during the handshake",
    ConnState.OPEN: "the shellper closed the connection",
    ConnState.CLOSING: "closed by the shellper after ERROR {code}: {message}",
}
"""What the end of the stream means in each state it can come in (a SessionGone saying so)."""

REPLIES: dict[wire.FrameType, wire.FrameType] = {
    wire.FrameType.STATUS: wire.FrameType.STATUS_REPLY,
    wire.FrameType.PING: wire.FrameType.PONG,
}
"""The frame that answers each request (an ERROR naming the request's type answers it too)."""

REPLY_KEYS: dict[wire.FrameType, str] = {wire.FrameType.PING: "nonce"}
"""The field a reply repeats from its request and must match; a request without one takes the first reply."""

ID_REPLIES: dict[wire.FrameType, wire.FrameType] = {
    wire.FrameType.RESIZE: wire.FrameType.REPLY,
    wire.FrameType.SIGNAL: wire.FrameType.REPLY,
    wire.FrameType.SPAWN: wire.FrameType.REPLY,
    wire.FrameType.STOP: wire.FrameType.REPLY,
    wire.FrameType.STATUS: wire.FrameType.STATUS_REPLY,
    wire.FrameType.SCREEN: wire.FrameType.SCREEN_REPLY,
    wire.FrameType.LABELS: wire.FrameType.REPLY,
}
"""Version 3: the requests that carry an ``id``, and the frame that answers one that went well (any of
them may be answered by a REPLY that is not ok)."""


@record(frozen=True, eq=False)
class Request:
    """A request this client sent and awaits the answer to (compared by identity)."""

    frame_type: int
    reply_type: int
    key_field: str | None = None
    """The field the reply repeats (REPLY_KEYS), and below its value in the request."""
    key: object = None


@record(frozen=True)
class Answered:
    """The answer to a :class:`Request`: its reply, or the ERROR that refused it (then ``error`` is set)."""

    request: Request
    reply: wire.Frame
    error: RemoteError | None = None


ConnEvent = wire.Frame | Answered


def answers(frame: wire.Frame, request: Request) -> bool:
    """Whether ``frame`` answers ``request``: for a request with an ``id``, a REPLY or its reply type
    with that id; else an ERROR naming its type, or its reply type (repeating its key, for a request that
    has one)."""
    if request.key_field == "id":
        return (type(frame) is wire.Reply or request.reply_type == frame.TYPE) and \
            getattr(frame, "id", None) == request.key
    if isinstance(frame, wire.Error):
        return frame.frame_type == request.frame_type
    if request.reply_type != frame.TYPE:
        return False
    return request.key_field is None or getattr(frame, request.key_field, None) == request.key


# --------------------------------------------------------------------------------------------- the connection


class Connection(StreamPosition):
    """One client connection's protocol state; the module's docstring says how it is driven."""

    def __init__(self, path: str, role: str = wire.Role.TOWER, client_name: str = "",
                 max_frame: int = wire.MAX_FRAME_SIZE) -> None:
        super().__init__()
        self.path = path
        self.role = role
        self.client_name = client_name
        self.decoder = wire.Decoder(max_frame)
        self.state = ConnState.IDLE
        self.error: ClientError | None = None
        """Why the connection ended (what ``next_event()`` raises); None while it lasts."""
        self.welcome: wire.Welcome | None = None
        self.replay: wire.Replay | None = None
        self.fatal_error: wire.Error | None = None
        """The fatal ERROR the shellper sent, if it did: it closes the connection after it."""
        self.pending: list[Request] = []
        self._next_id = 0
        self._streaming = False  # the state is in STREAMING: read for every DATA frame
        self._eof = False
        self._read_error: ClientError | None = None
        self._expect_instance: str | None = None
        self._expect_pid: int | None = None
        self._peer_pid: int | None = None
        self._events_after: int | None = None

    # ------------------------------------------------------------------------------- sending

    def hello(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
              events_after: int | None = None, terminal: bool = False, detach_byte: int | None = None,
              expect_instance_id: str | None = None, expect_pid: int | None = None,
              peer_pid: int | None = None, rendered: int | None = None,
              size: tuple[int, int] | None = None) -> bytes:
        """The HELLO that opens the connection. ``terminal``: these bytes carry the client's terminal
        (protocol 7.4), and typing ``detach_byte`` ends the attach. WELCOME must then name the instance
        ``expect_instance_id`` and, with ``expect_pid``, that pid, which ``peer_pid`` (what the socket
        says is at the other end) must be too. ``size``: the (cols, rows) of a terminal that relays, which
        the session takes before the replay (InvalidRequest when out of range)."""
        if self.state is not ConnState.IDLE:
            raise ConnectionMisuse(f"{self.path}: HELLO was already sent ({self.state.value})")
        cols, rows = size if size is not None else (None, None)
        hello = wire.Hello(
            version=wire.PROTOCOL_VERSION, role=self.role, resume_from=resume_from, replay_bytes=replay_bytes,
            events_after=events_after, client=self.client_name, terminal=True if terminal else None,
            detach_byte=detach_byte if terminal else None, rendered=rendered, cols=cols, rows=rows)
        self._check(hello)
        data = wire.encode(hello)
        self._expect_instance, self._expect_pid, self._peer_pid = expect_instance_id, expect_pid, peer_pid
        self._events_after = events_after
        self.state = ConnState.AWAIT_WELCOME
        return data

    def send(self, frame: wire.Frame) -> bytes:
        """The bytes of a frame for the shellper. InvalidRequest, before anything is sent, for a frame the
        shellper would refuse with a fatal ERROR (a field of the wrong type, RESIZE 0x0, a negative STOP
        grace): the mistake is the caller's, and the connection stays usable."""
        if self.state not in SENDING:
            raise self._not_connected()
        self._check(frame)
        return wire.encode(frame)

    def _check(self, frame: wire.Frame) -> None:
        try:
            wire.check_fields(frame)
            wire.check_request(frame)
        except wire.BadField as exc:
            raise InvalidRequest(f"{self.path}: not sent: {exc}", exc.field_name) from None

    def checked(self, frame: F) -> F:
        """``frame``, a request a client's method built from its caller's arguments, held to what the
        shellper would refuse: the fields and ranges, as ``send()`` holds every frame, and beyond them a
        signal it does not know and a SPAWN with an empty command, which it refuses without costing the
        connection but after a round trip (an empty argv once ended the child). InvalidRequest names the
        field. The one place the clients' request methods are checked, blocking and asyncio alike."""
        self._check(frame)
        if isinstance(frame, wire.Signal) and wire.bare_signal(frame.signal) is None:
            raise InvalidRequest(f"{self.path}: not sent: signal {frame.signal!r} is not one of "
                                 f"{', '.join(wire.SIGNALS)}", "signal")
        if isinstance(frame, wire.Spawn) and frame.argv is not None and not frame.argv:
            raise InvalidRequest(f"{self.path}: not sent: argv must be a non-empty list of strings or None, "
                                 "got []", "argv")
        return frame

    def send_data(self, data: bytes | bytearray | memoryview) -> bytes:
        """The bytes of input for the child (a DATA frame, built without a frame object). Input must be bytes
        (BadArgumentType, a TypeError): a str would need an encoding the shellper cannot guess."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise BadArgumentType(f"input must be bytes, not {type(data).__name__} (encode text first)")
        if self.state not in SENDING:
            raise self._not_connected()
        return wire.encode_data(data)

    @property
    def replies(self) -> bool:
        """The shellper answers every request that carries an ``id`` (WELCOME said version 3 or later)."""
        return self.welcome is not None and self.welcome.version >= wire.REPLY_VERSION

    def send_request(self, frame: wire.Frame, reply_type: int | None = None) -> tuple[Request, bytes]:
        """A request whose answer ``next_event()`` hands back as :class:`Answered`, and its bytes.
        ``reply_type``: the frame type that answers it, by default the one REPLIES names. On a version-3
        connection, a request that may carry an ``id`` gets the next one, and its answer is matched by it
        (a REPLY, or STATUS_REPLY for STATUS; a REPLY that is not ok comes as ``Answered.error``)."""
        numbered = ID_REPLIES.get(frame.TYPE)
        if self.replies and numbered is not None and reply_type in (None, numbered, wire.FrameType.REPLY):
            if self.state not in SENDING:
                raise self._not_connected()
            frame = structs.replace(frame, id=self._next_id + 1)
            data = self.send(frame)
            self._next_id += 1
            request = Request(frame.TYPE, numbered, "id", self._next_id)
            self.pending.append(request)
            return request, data
        data = self.send(frame)
        reply = reply_type if reply_type is not None else REPLIES.get(frame.TYPE)
        if reply is None:
            raise BadArgument(f"{frame.TYPE.name} is not a request (no reply type given)")
        key_field = REPLY_KEYS.get(frame.TYPE)
        request = Request(frame.TYPE, reply, key_field, getattr(frame, key_field) if key_field else None)
        self.pending.append(request)
        return request, data

    def cancel(self, request: Request) -> None:
        """Stop awaiting ``request``: a late answer is then handed back as an ordinary frame."""
        if request in self.pending:
            self.pending.remove(request)

    def _not_connected(self) -> SessionGone:
        why = f" ({self.error.message})" if self.error is not None else ""
        return SessionGone(self.path, f"not connected{why}")

    # ------------------------------------------------------------------------------- receiving

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes the socket delivered; ``b""``: the shellper closed its end."""
        if self.state is ConnState.IDLE:
            raise ConnectionMisuse(f"{self.path}: bytes received before the HELLO was sent")
        if not data:
            self._eof = True
        elif not self._eof:
            self.decoder.feed(data)

    def connection_lost(self, exc: OSError) -> None:
        """Reading the socket failed. A reset is the shellper's end like any other."""
        if exc.errno != errno.ECONNRESET and self._read_error is None:
            self._read_error = SessionGone(self.path, f"connection lost: {exc.strerror or exc}")
        self._eof = True

    def sole_data(self, chunk: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview | None:
        """The payload if ``chunk`` is exactly one whole DATA frame and nothing else is buffered (a
        keystroke's echo, the common case): taken and delivered at once, without the decoder. None
        otherwise, with nothing consumed: ``receive_data`` it as usual."""
        if not self._streaming or self._eof:
            return None
        payload = self.decoder.sole_data(chunk)
        if payload is not None:
            self.output.next_offset += len(payload)
        return payload

    def sole_data_frame(self, chunk: bytes) -> wire.Data | None:
        """As ``sole_data``, for a caller that queues frames and delivers each as it hands it out: the DATA
        frame, not delivered yet. None otherwise, with nothing consumed: ``receive_data`` it as usual."""
        if not self._streaming or self._eof:
            return None
        payload = self.decoder.sole_data(chunk)
        return None if payload is None else wire.Data(bytes(payload))

    def next_event(self) -> ConnEvent | None:
        """The next frame (or :class:`Answered`), None until more bytes arrive. Raises the connection's
        :attr:`error` once it has ended (a refused or mismatched handshake, a protocol violation, the end
        of the stream as SessionGone), and again every time it is called after."""
        if self.error is not None:
            raise self.error
        try:
            event = self.decoder.next_event()
        except wire.ProtocolError as exc:
            raise self._end(ConnState.FAILED, ProtocolViolation(self.path, str(exc))) from None
        if type(event) is wire.Data and self._streaming:
            return event
        return self._dispatch(event)

    def next_output(self, into: list[bytes]) -> ConnEvent | None:
        """As ``next_event()``, for a caller that shows what it receives at once (attach's relay): DATA
        payloads are appended to ``into`` and the next other event is returned (None: more bytes are
        needed), everything delivered as it is taken. One call per run of DATA frames."""
        if self.error is not None:
            raise self.error
        decoder, output = self.decoder, self.output
        while True:
            try:
                event = decoder.next_event()
            except wire.ProtocolError as exc:
                raise self._end(ConnState.FAILED, ProtocolViolation(self.path, str(exc))) from None
            if type(event) is wire.Data and self._streaming:
                data = event.data
            else:
                taken = self._dispatch(event)  # skips unknown frames, maybe to a DATA frame
                if type(taken) is not wire.Data or not self._streaming:
                    self.deliver(taken)
                    return taken
                data = taken.data
            into.append(data)
            output.next_offset += len(data)

    def events(self) -> Iterator[ConnEvent]:
        """Every event now complete (raising at the end, as ``next_event()``)."""
        while (event := self.next_event()) is not None:
            yield event

    def close(self) -> None:
        """This side closes the connection: from now on ``next_event()`` raises SessionGone."""
        if self.error is None:
            self._end(ConnState.CLOSED, SessionGone(self.path, "closed by this client"))

    def _dispatch(self, event: wire.DecodedEvent | None) -> ConnEvent | None:
        while event is not None and not isinstance(event, wire.Frame):  # Skipped, Unknown: a newer peer's
            event = self.decoder.next_event()
        if event is None:
            if self._eof:
                raise self._end(ConnState.CLOSED, self._read_error or self._end_of_stream())
            return None
        step = HANDSHAKE.get(self.state)
        if step is not None:
            return self._handshake(event, *step)
        if self.pending:
            for request in self.pending:
                if answers(event, request):
                    self.pending.remove(request)
                    self._note_fatal(event)
                    error: RemoteError | None = None
                    if isinstance(event, wire.Error):
                        error = RemoteError(self.path, event)
                    elif type(event) is wire.Reply and not event.ok:
                        error = request_error(self.path, event)
                    return Answered(request, event, error)
        self._note_fatal(event)
        return event

    def _handshake(self, frame: wire.Frame, kind: type[wire.Frame], after: ConnState) -> wire.Frame:
        if isinstance(frame, wire.Error):
            raise self._end(ConnState.FAILED, RemoteError(self.path, frame))
        if not isinstance(frame, kind):
            raise self._end(ConnState.FAILED, ProtocolViolation(
                self.path, f"expected {kind.TYPE.name}, got {frame.TYPE.name}"))
        if isinstance(frame, wire.Welcome):
            mismatch = self._mismatch(frame)
            if mismatch is not None:
                raise self._end(ConnState.FAILED, mismatch)
            self.welcome = frame
            self.last_event_seq = self._events_after if self._events_after is not None else frame.event_seq
            self.session_state = frame.state
        elif isinstance(frame, wire.Replay):
            self.replay = frame
            self.output.next_offset = frame.offset + len(frame.data)
            if frame.gap:
                self.output.gaps.append((frame.offset, frame.gap))
        self.state = after
        self._streaming = after in STREAMING
        return frame

    def _mismatch(self, welcome: wire.Welcome) -> ClientError | None:
        expected = self._expect_instance
        if expected is not None and welcome.instance_id != expected:
            return InstanceMismatch(self.path, expected, welcome.instance_id)
        pid = self._expect_pid
        if pid is not None and (self._peer_pid != pid or welcome.shellper_pid != pid):
            return PeerMismatch(self.path, pid, self._peer_pid if self._peer_pid != pid else welcome.shellper_pid)
        return None

    def _note_fatal(self, frame: wire.Frame) -> None:
        if isinstance(frame, wire.Error) and frame.fatal and self.state is ConnState.OPEN:
            self.fatal_error = frame
            self.state = ConnState.CLOSING

    def _end_of_stream(self) -> SessionGone:
        message = END_OF_STREAM[self.state]
        if self.fatal_error is not None:
            message = message.format(code=self.fatal_error.code, message=self.fatal_error.message)
        if self.decoder.buffered:
            message += f", inside a frame ({self.decoder.buffered} bytes of it came)"
        return SessionGone(self.path, message)

    def _end(self, state: ConnState, error: ClientError) -> ClientError:
        self.state = state
        self.error = error
        self._streaming = False
        self.pending.clear()
        return error


class ConnectionView:
    """What a client that drives a :class:`Connection` (in ``conn``) shows of it."""

    conn: Connection

    @property
    def welcome(self) -> wire.Welcome | None:
        return self.conn.welcome

    @property
    def replay(self) -> wire.Replay | None:
        return self.conn.replay

    @property
    def exit(self) -> wire.Exit | None:
        return self.conn.exit

    @property
    def last_event_seq(self) -> int | None:
        return self.conn.last_event_seq

    @property
    def session_state(self) -> str | None:
        """The session's state as the frames handed out so far say (WELCOME, EXIT, ``state`` events)."""
        return self.conn.session_state

    @property
    def exited(self) -> bool:
        """The child is not running: WELCOME said so, or an EXIT was received (a late EXIT is never lost)."""
        if self.exit is not None:
            return True
        welcome = self.conn.welcome
        return welcome is not None and welcome.child_pid is None and welcome.exit is not None

    @property
    def last_exit(self) -> ExitRecord | None:
        """The child's last exit as a typed record: the latest EXIT's, else the one WELCOME reported.
        Raises ExitRecordError if the shellper sent a malformed one."""
        if self.exit is not None:
            return self.exit.exit_record()
        welcome = self.conn.welcome
        return welcome.exit_record() if welcome is not None else None

    @property
    def replies(self) -> bool:
        """The shellper answers each request (protocol version 3): the request methods return what it did
        or raise the typed error of its refusal. A version-2 shellper does not: they return None once the
        request is sent (a refusal then comes as an ERROR frame in the stream)."""
        return self.conn.replies

    @property
    def fatal_error(self) -> wire.Error | None:
        return self.conn.fatal_error

    @property
    def decoder(self) -> wire.Decoder:
        return self.conn.decoder
