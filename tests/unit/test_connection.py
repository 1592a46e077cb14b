"""shellper.protocol.connection on its own: every state's transitions and errors as tables, request
matching, output accounting, and any split of a frame stream."""

from __future__ import annotations

import errno
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.connection import INSTANCE, welcome

from shellper.protocol import wire
from shellper.protocol.connection import (
    END_OF_STREAM,
    HANDSHAKE,
    SENDING,
    STREAMING,
    Answered,
    ClientError,
    Connection,
    ConnectionMisuse,
    ConnectionRefused,
    ConnEvent,
    ConnState,
    InstanceMismatch,
    InvalidRequest,
    PeerMismatch,
    ProtocolViolation,
    RemoteError,
    SessionGone,
    SessionNotFound,
    Timeout,
    connect_error,
    send_error,
)

PATH = "/run/test.sock"
REPLAY = wire.Replay(offset=4, data=b"123456", gap=0)
HANDSHAKE_BYTES = wire.encode(welcome()) + wire.encode(REPLAY)
UNKNOWN = wire.HEADER.pack(0x7E, 3) + b"new"
FATAL = wire.Error(code="replaced", message="another tower", fatal=True)
STATUS_REPLY = wire.StatusReply(state="running")


def feed(conn: Connection, data: bytes) -> list[ConnEvent]:
    """Everything ``data`` completes (``b""``: the end of the stream, which raises)."""
    conn.receive_data(data)
    return list(conn.events())


def in_state(state: ConnState, **hello: Any) -> Connection:
    """A connection brought to ``state`` the way a peer would."""
    conn = Connection(PATH, "tower", "test", max_frame=1024)
    if state is ConnState.IDLE:
        return conn
    conn.hello(**hello)
    steps = {ConnState.AWAIT_WELCOME: b"", ConnState.AWAIT_REPLAY: wire.encode(welcome()),
             ConnState.OPEN: HANDSHAKE_BYTES, ConnState.CLOSING: HANDSHAKE_BYTES + wire.encode(FATAL)}
    if state in steps:
        if steps[state]:
            feed(conn, steps[state])
    elif state is ConnState.CLOSED:
        feed(conn, HANDSHAKE_BYTES)
        with pytest.raises(SessionGone):
            feed(conn, b"")
    else:
        with pytest.raises(ProtocolViolation):
            feed(conn, HANDSHAKE_BYTES + b"\x0b\x00\x00\x00\x01\xc1")  # an ERROR that is not msgpack
    assert conn.state is state
    return conn


# --------------------------------------------------------------------------------------------- transitions

Outcome = type[BaseException] | type[wire.Frame] | type[Answered] | None

S = ConnState
TRANSITIONS: list[tuple[str, ConnState, bytes, ConnState, list[Outcome]]] = [
    # id, from, bytes received (b"" = the end), to, what next_event gives (an exception type: raised)
    ("welcome", S.AWAIT_WELCOME, wire.encode(welcome()), S.AWAIT_REPLAY, [wire.Welcome]),
    ("welcome+replay", S.AWAIT_WELCOME, HANDSHAKE_BYTES, S.OPEN, [wire.Welcome, wire.Replay]),
    ("refused", S.AWAIT_WELCOME, wire.encode(FATAL), S.FAILED, [RemoteError]),
    ("refused, not fatal", S.AWAIT_WELCOME, wire.encode(wire.Error(code="x", message="y")), S.FAILED,
     [RemoteError]),
    ("replay first", S.AWAIT_WELCOME, wire.encode(REPLAY), S.FAILED, [ProtocolViolation]),
    ("data first", S.AWAIT_WELCOME, wire.encode_data(b"x"), S.FAILED, [ProtocolViolation]),
    ("unknown skipped", S.AWAIT_WELCOME, UNKNOWN + wire.encode(welcome()), S.AWAIT_REPLAY, [wire.Welcome]),
    ("oversized skipped", S.AWAIT_WELCOME, wire.HEADER.pack(0x01, 2000) + b"z" * 2000 + wire.encode(welcome()),
     S.AWAIT_REPLAY, [wire.Welcome]),
    ("bad welcome", S.AWAIT_WELCOME, b"\x09\x00\x00\x00\x01\xc1", S.FAILED, [ProtocolViolation]),
    ("welcome lacks fields", S.AWAIT_WELCOME, wire.HEADER.pack(0x09, 1) + b"\x80", S.FAILED, [ProtocolViolation]),
    ("end in handshake", S.AWAIT_WELCOME, b"", S.CLOSED, [SessionGone]),
    ("end in a header", S.AWAIT_WELCOME, b"\x09\x00\x00", S.AWAIT_WELCOME, [None]),
    ("replay", S.AWAIT_REPLAY, wire.encode(REPLAY), S.OPEN, [wire.Replay]),
    ("welcome twice", S.AWAIT_REPLAY, wire.encode(welcome()), S.FAILED, [ProtocolViolation]),
    ("refused late", S.AWAIT_REPLAY, wire.encode(FATAL), S.FAILED, [RemoteError]),
    ("end before replay", S.AWAIT_REPLAY, b"", S.CLOSED, [SessionGone]),
    ("data", S.OPEN, wire.encode_data(b"abc"), S.OPEN, [wire.Data]),
    ("gap", S.OPEN, wire.encode(wire.Gap(offset=50, missed=40)), S.OPEN, [wire.Gap]),
    ("exit", S.OPEN, wire.encode(wire.Exit(code=0, signal=None)), S.OPEN, [wire.Exit]),
    ("event", S.OPEN, wire.encode(wire.Event(seq=8, kind="spawned")), S.OPEN, [wire.Event]),
    ("release", S.OPEN, wire.encode(wire.Release(reason="detach")), S.OPEN, [wire.Release]),
    ("error", S.OPEN, wire.encode(wire.Error(code="forbidden", message="no")), S.OPEN, [wire.Error]),
    ("unsolicited pong", S.OPEN, wire.encode(wire.Pong(nonce=3)), S.OPEN, [wire.Pong]),
    ("unsolicited status", S.OPEN, wire.encode(wire.StatusReply(state="running")), S.OPEN, [wire.StatusReply]),
    ("unknown in stream", S.OPEN, UNKNOWN + wire.encode_data(b"a"), S.OPEN, [wire.Data]),
    ("fatal error", S.OPEN, wire.encode(FATAL), S.CLOSING, [wire.Error]),
    ("welcome in stream", S.OPEN, wire.encode(welcome()), S.OPEN, [wire.Welcome]),
    ("bad frame", S.OPEN, b"\x0c\x00\x00\x00\x01\xc1", S.FAILED, [ProtocolViolation]),
    ("end", S.OPEN, b"", S.CLOSED, [SessionGone]),
    ("data then end", S.OPEN, wire.encode_data(b"x"), S.OPEN, [wire.Data]),
    ("closing: data", S.CLOSING, wire.encode_data(b"late"), S.CLOSING, [wire.Data]),
    ("closing: end", S.CLOSING, b"", S.CLOSED, [SessionGone]),
    ("closed: more", S.CLOSED, wire.encode_data(b"x"), S.CLOSED, [SessionGone]),
    ("failed: more", S.FAILED, wire.encode_data(b"x"), S.FAILED, [ProtocolViolation]),
]


@pytest.mark.parametrize(("start", "received", "end", "outcomes"),
                         [pytest.param(*row[1:], id=row[0]) for row in TRANSITIONS])
def test_transitions(start: ConnState, received: bytes, end: ConnState, outcomes: list[Outcome]) -> None:
    conn = in_state(start)
    conn.receive_data(received)
    got: list[Outcome] = []
    for _ in outcomes:
        try:
            event = conn.next_event()
        except ClientError as exc:
            got.append(type(exc))
            break
        got.append(None if event is None else type(event))
    assert got == outcomes
    assert conn.state is end
    assert (conn.error is not None) == (end in (S.CLOSED, S.FAILED))


def test_every_state_has_a_row_and_every_frame_the_handshake_may_refuse() -> None:
    assert {row[1] for row in TRANSITIONS} == set(ConnState) - {S.IDLE}  # IDLE: see the next tests
    assert set(HANDSHAKE) == {S.AWAIT_WELCOME, S.AWAIT_REPLAY}
    assert STREAMING < SENDING and S.IDLE not in SENDING
    assert set(END_OF_STREAM) == SENDING  # the stream can end in every state that sent a HELLO


def test_idle_only_says_hello() -> None:
    conn = in_state(S.IDLE)
    assert conn.next_event() is None
    with pytest.raises(ConnectionMisuse):
        conn.receive_data(b"\x01")
    with pytest.raises(SessionGone, match="not connected"):
        conn.send(wire.Ping())
    with pytest.raises(SessionGone, match="not connected"):
        conn.send_data(b"x")
    hello = conn.hello(resume_from=5, replay_bytes=0, events_after=2, terminal=True, detach_byte=0x1C)
    assert wire.decode_all(hello) == [wire.Hello(version=wire.PROTOCOL_VERSION, role="tower", resume_from=5,
                                                  replay_bytes=0, events_after=2, client="test", terminal=True,
                                                  detach_byte=0x1C)]
    assert conn.state is S.AWAIT_WELCOME
    with pytest.raises(ConnectionMisuse, match="already sent"):
        conn.hello()


def test_no_terminal_no_detach_byte() -> None:
    hello = Connection(PATH).hello(detach_byte=0x1C)
    assert wire.decode_all(hello) == [wire.Hello(version=wire.PROTOCOL_VERSION, role="tower")]


@pytest.mark.parametrize("state", list(ConnState))
def test_what_may_be_sent_in_each_state(state: ConnState) -> None:
    conn = in_state(state)
    if state in SENDING:
        assert conn.send(wire.Resize(cols=1, rows=2)) == wire.encode(wire.Resize(cols=1, rows=2))
        assert conn.send_data(b"hi") == wire.encode_data(b"hi")
    else:
        with pytest.raises(SessionGone, match="not connected"):
            conn.send(wire.Ping())


@pytest.mark.parametrize("state", list(ConnState))
def test_close_ends_every_state(state: ConnState) -> None:
    conn = in_state(state)
    before = conn.error
    conn.close()
    if before is None:
        assert conn.state is S.CLOSED
        with pytest.raises(SessionGone, match="closed by this client"):
            conn.next_event()
    else:  # already ended: the first reason stays
        assert conn.error is before
        with pytest.raises(type(before)):
            conn.next_event()


@pytest.mark.parametrize(("state", "received", "message"), [
    (S.AWAIT_WELCOME, b"", "the shellper closed the connection during the handshake"),
    (S.AWAIT_REPLAY, b"", "the shellper closed the connection during the handshake"),
    (S.OPEN, b"", "the shellper closed the connection"),
    (S.OPEN, b"\x01\x00\x00\x00\x09abc", "the shellper closed the connection, inside a frame (8 bytes of it came)"),
    (S.CLOSING, b"", "closed by the shellper after ERROR replaced: another tower"),
])
def test_what_the_end_of_the_stream_says(state: ConnState, received: bytes, message: str) -> None:
    conn = in_state(state)
    conn.receive_data(received)
    conn.receive_data(b"")
    with pytest.raises(SessionGone) as info:
        conn.next_event()
    assert (info.value.path, info.value.message) == (PATH, message)
    with pytest.raises(SessionGone) as again:  # and the same every time after
        conn.next_event()
    assert again.value is info.value
    conn.receive_data(b"ignored")


@pytest.mark.parametrize(("err", "ends_with"), [
    (ConnectionResetError(errno.ECONNRESET, "reset"), "the shellper closed the connection"),
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), "connection lost: Broken pipe"),
    (OSError(errno.EIO, "I/O error"), "connection lost: I/O error"),
])
def test_a_failed_read_ends_the_stream(err: OSError, ends_with: str) -> None:
    conn = in_state(S.OPEN)
    conn.receive_data(wire.encode_data(b"before"))
    conn.connection_lost(err)
    assert isinstance(conn.next_event(), wire.Data)  # what came before is still handed back
    with pytest.raises(SessionGone) as info:
        conn.next_event()
    assert info.value.message == ends_with and conn.state is S.CLOSED


@pytest.mark.parametrize(("hello", "peer", "changes", "error", "found"), [
    ({"expect_instance_id": "b" * 32}, None, {}, InstanceMismatch, INSTANCE),
    ({"expect_instance_id": INSTANCE}, None, {}, None, None),
    ({"expect_pid": 100}, 100, {}, None, None),
    ({"expect_pid": 100}, 101, {}, PeerMismatch, 101),
    ({"expect_pid": 100}, None, {}, PeerMismatch, None),
    ({"expect_pid": 100}, 100, {"shellper_pid": 102}, PeerMismatch, 102),
    ({"expect_instance_id": INSTANCE, "expect_pid": 100}, 100, {"instance_id": "c" * 32}, InstanceMismatch,
     "c" * 32),
])
def test_who_answers_is_checked(hello: dict[str, Any], peer: int | None, changes: dict[str, Any],
                                error: type[ClientError] | None, found: object) -> None:
    conn = Connection(PATH)
    conn.hello(peer_pid=peer, **hello)
    conn.receive_data(wire.encode(welcome(**changes)))
    if error is None:
        assert isinstance(conn.next_event(), wire.Welcome) and conn.state is S.AWAIT_REPLAY
        return
    with pytest.raises(error) as info:
        conn.next_event()
    assert info.value.found == found and info.value.path == PATH  # type: ignore[attr-defined]
    assert conn.state is S.FAILED and conn.welcome is None


# --------------------------------------------------------------------------------------------- accounting


@pytest.mark.parametrize(("replay", "events_after", "offset", "gaps", "seq"), [
    (wire.Replay(offset=4, data=b"123456"), None, 10, [], 7),
    (wire.Replay(offset=0), 3, 0, [], 3),
    (wire.Replay(offset=100, data=b"xy", gap=60), 0, 102, [(100, 60)], 0),
])
def test_the_handshake_sets_the_position(replay: wire.Replay, events_after: int | None, offset: int,
                                         gaps: list[tuple[int, int]], seq: int) -> None:
    conn = Connection(PATH)
    conn.hello(events_after=events_after)
    feed(conn, wire.encode(welcome()) + wire.encode(replay))
    assert (conn.output.next_offset, conn.output.gaps, conn.last_event_seq) == (offset, gaps, seq)
    assert conn.welcome == welcome() and conn.replay == replay


def _request() -> Any:
    return in_state(S.OPEN).send_request(wire.Status())[0]


DELIVERIES: list[tuple[str, object, int, list[tuple[int, int]], int | None, bool]] = [
    # id, what the caller takes, then: next_offset, gaps, last_event_seq, exit set
    ("data", wire.Data(b"abc"), 13, [], 7, False),
    ("gap", wire.Gap(offset=60, missed=50), 60, [(60, 50)], 7, False),
    ("exit", wire.Exit(code=1, signal=None), 10, [], 7, True),
    ("newer event", wire.Event(seq=9, kind="exited"), 10, [], 9, False),
    ("older event", wire.Event(seq=2, kind="exited"), 10, [], 7, False),
    ("unnumbered event", wire.Event(seq=0, kind="x"), 10, [], 7, False),
    ("error", wire.Error(code="x", message="y"), 10, [], 7, False),
    ("answered", Answered(_request(), STATUS_REPLY), 10, [], 7, False),
    ("not a frame", "nothing", 10, [], 7, False),
]


@pytest.mark.parametrize(("taken", "offset", "gaps", "seq", "exited"),
                         [pytest.param(*row[1:], id=row[0]) for row in DELIVERIES])
def test_deliver_moves_the_position(taken: object, offset: int, gaps: list[tuple[int, int]], seq: int,
                                    exited: bool) -> None:
    conn = in_state(S.OPEN)
    conn.deliver(taken)
    assert (conn.output.next_offset, conn.output.gaps, conn.last_event_seq) == (offset, gaps, seq)
    assert (conn.exit is taken) == exited


def test_receiving_does_not_move_the_position_delivering_does() -> None:
    conn = in_state(S.OPEN)
    events = feed(conn, wire.encode_data(b"a" * 5) + wire.encode(wire.Gap(offset=30, missed=15)))
    assert conn.output.next_offset == 10
    for event in events:
        conn.deliver(event)
    assert conn.output.next_offset == 30 and conn.output.gaps == [(30, 15)]


@pytest.mark.parametrize(("state", "buffered", "chunk", "taken"), [
    (S.OPEN, b"", wire.encode_data(b"echo"), b"echo"),
    (S.CLOSING, b"", wire.encode_data(b"echo"), b"echo"),
    (S.OPEN, b"\x01\x00", wire.encode_data(b"echo"), None),  # something is buffered: decode as usual
    (S.OPEN, b"", wire.encode_data(b"a") + wire.encode_data(b"b"), None),  # two frames
    (S.OPEN, b"", wire.encode(wire.Gap(offset=1, missed=1)), None),
    (S.OPEN, b"", wire.encode_data(b""), None),
    (S.AWAIT_REPLAY, b"", wire.encode_data(b"echo"), None),  # not yet streaming
    (S.CLOSED, b"", wire.encode_data(b"echo"), None),
])
def test_sole_data(state: ConnState, buffered: bytes, chunk: bytes, taken: bytes | None) -> None:
    conn = in_state(state)
    if buffered:
        conn.receive_data(buffered)
    before = conn.output.next_offset
    got = conn.sole_data(chunk)
    assert (bytes(got) if got is not None else None) == taken
    assert conn.output.next_offset == before + len(taken or b"")


def test_sole_data_after_the_end() -> None:
    conn = in_state(S.OPEN)
    conn.receive_data(b"")
    assert conn.sole_data(wire.encode_data(b"x")) is None


def test_next_output_batches_data_and_delivers_all() -> None:
    conn = in_state(S.OPEN)
    exit_frame = wire.Exit(code=0, signal=None)
    conn.receive_data(wire.encode_data(b"ab") + UNKNOWN + wire.encode_data(b"cd") + wire.encode(exit_frame)
                      + wire.encode_data(b"ef"))
    batch: list[bytes] = []
    assert conn.next_output(batch) == exit_frame
    assert batch == [b"ab", b"cd"] and conn.exit == exit_frame and conn.output.next_offset == 14
    batch.clear()
    assert conn.next_output(batch) is None and batch == [b"ef"] and conn.output.next_offset == 16
    conn.receive_data(b"\x04\x00\x00\x00\x01\xc1")
    with pytest.raises(ProtocolViolation):
        conn.next_output(batch)
    with pytest.raises(ProtocolViolation):
        conn.next_output(batch)


# --------------------------------------------------------------------------------------------- requests


def _ask(conn: Connection, *frames: wire.Frame) -> list[Any]:
    return [conn.send_request(f)[0] for f in frames]


REQUESTS: list[tuple[str, list[wire.Frame], list[wire.Frame], list[tuple[int, type[Any]]]]] = [
    # id, requests sent, frames received, what each received frame becomes: (request index or -1, type)
    ("status", [wire.Status()], [STATUS_REPLY], [(0, wire.StatusReply)]),
    ("status refused", [wire.Status()], [wire.Error(code="x", message="y", frame_type=wire.FrameType.STATUS)],
     [(0, RemoteError)]),
    ("another's error", [wire.Status()], [wire.Error(code="x", message="y", frame_type=wire.FrameType.PING),
                                          STATUS_REPLY], [(-1, wire.Error), (0, wire.StatusReply)]),
    ("error naming nothing", [wire.Status()], [wire.Error(code="x", message="y")], [(-1, wire.Error)]),
    ("pong by nonce", [wire.Ping(nonce=1), wire.Ping(nonce=2)], [wire.Pong(nonce=2), wire.Pong(nonce=1)],
     [(1, wire.Pong), (0, wire.Pong)]),
    ("stale pong", [wire.Ping(nonce=5)], [wire.Pong(nonce=4), wire.Pong(nonce=5)],
     [(-1, wire.Pong), (0, wire.Pong)]),
    ("ping refused", [wire.Ping(nonce=5)], [wire.Error(code="x", message="y", frame_type=wire.FrameType.PING)],
     [(0, RemoteError)]),
    ("statuses in order", [wire.Status(), wire.Status()], [STATUS_REPLY, wire.StatusReply(state="backoff")],
     [(0, wire.StatusReply), (1, wire.StatusReply)]),
    ("data between", [wire.Status()], [wire.Data(b"x"), STATUS_REPLY, wire.Data(b"y")],
     [(-1, wire.Data), (0, wire.StatusReply), (-1, wire.Data)]),
    ("one reply each", [wire.Status()], [STATUS_REPLY, STATUS_REPLY], [(0, wire.StatusReply), (-1, wire.StatusReply)]),
    ("pong is no status", [wire.Status()], [wire.Pong(nonce=None)], [(-1, wire.Pong)]),
]


@pytest.mark.parametrize(("asked", "received", "becomes"), [pytest.param(*r[1:], id=r[0]) for r in REQUESTS])
def test_replies_find_their_requests(asked: list[wire.Frame], received: list[wire.Frame],
                                     becomes: list[tuple[int, type[Any]]]) -> None:
    conn = in_state(S.OPEN)
    requests = _ask(conn, *asked)
    events = feed(conn, b"".join(wire.encode(f) for f in received))
    got: list[tuple[int, type[Any]]] = []
    for event in events:
        if isinstance(event, Answered):
            kind = type(event.error) if event.error is not None else type(event.reply)
            assert event.error is None or event.error.error is event.reply
            got.append((requests.index(event.request), kind))
        else:
            got.append((-1, type(event)))
    assert got == becomes
    answered = {i for i, _ in becomes if i >= 0}
    assert conn.pending == [r for i, r in enumerate(requests) if i not in answered]


def test_a_cancelled_request_takes_no_reply() -> None:
    conn = in_state(S.OPEN)
    (request,) = _ask(conn, wire.Status())
    conn.cancel(request)
    conn.cancel(request)  # twice is harmless
    assert feed(conn, wire.encode(STATUS_REPLY)) == [STATUS_REPLY]


def test_a_fatal_error_answering_a_request_also_closes() -> None:
    conn = in_state(S.OPEN)
    (request,) = _ask(conn, wire.Status())
    fatal = wire.Error(code="bad_payload", message="no", frame_type=wire.FrameType.STATUS, fatal=True)
    (event,) = feed(conn, wire.encode(fatal))
    assert isinstance(event, Answered) and event.request is request and isinstance(event.error, RemoteError)
    assert conn.state is S.CLOSING and conn.fatal_error == fatal


def test_the_end_forgets_pending_requests() -> None:
    conn = in_state(S.OPEN)
    _ask(conn, wire.Status(), wire.Ping(nonce=1))
    with pytest.raises(SessionGone):
        feed(conn, b"")
    assert conn.pending == []


def test_a_request_needs_a_reply_type() -> None:
    conn = in_state(S.OPEN)
    with pytest.raises(ValueError, match="STOP is not a request"):
        conn.send_request(wire.Stop())
    request, data = conn.send_request(wire.Stop(), wire.FrameType.EXIT)  # what the blocking Client allows
    assert data == wire.encode(wire.Stop())
    (event,) = feed(conn, wire.encode(wire.Exit(code=0, signal=None)))
    assert isinstance(event, Answered) and event.request is request
    with pytest.raises(SessionGone):
        in_state(S.CLOSED).send_request(wire.Status())


# --------------------------------------------------------------------------------------------- error mapping


@pytest.mark.parametrize(("exc", "error", "message"), [
    (FileNotFoundError(errno.ENOENT, "x"), SessionNotFound, "no such session socket"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "x"), ConnectionRefused, "nothing is listening (stale socket)"),
    (TimeoutError(), Timeout, "connect timed out after 2.5 s"),
    (PermissionError(errno.EACCES, "x"), ClientError, "permission denied"),
    (OSError(errno.ENAMETOOLONG, "File name too long"), ClientError, "connect failed: File name too long"),
    (RuntimeError("odd"), ClientError, "connect failed: odd"),
])
def test_connect_errors(exc: BaseException, error: type[ClientError], message: str) -> None:
    got = connect_error(PATH, exc, 2.5)
    assert type(got) is error and (got.path, got.message) == (PATH, message)


@pytest.mark.parametrize(("exc", "timeout", "error", "message"), [
    (TimeoutError(), 3.0, Timeout, "send timed out after 3 s"),
    (TimeoutError(), None, Timeout, "send timed out"),
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), None, SessionGone, "connection lost: Broken pipe"),
])
def test_send_errors(exc: OSError, timeout: float | None, error: type[ClientError], message: str) -> None:
    got = send_error(PATH, exc, timeout)
    assert type(got) is error and got.message == message


def test_errors_are_shellper_errors_with_their_path() -> None:
    from shellper.core.errors import ShellperError

    remote = RemoteError(PATH, FATAL)
    assert isinstance(remote, ShellperError) and str(remote) == f"{PATH}: replaced: another tower"
    assert isinstance(ConnectionMisuse("x"), ShellperError | RuntimeError)


# --------------------------------------------------------------------------------------------- any split

_payload = st.binary(max_size=300)
_stream_frame = st.one_of(
    _payload.map(wire.Data),
    st.builds(wire.Gap, offset=st.integers(0, 2**40), missed=st.integers(0, 2**20)),
    st.builds(wire.Event, seq=st.integers(0, 100), kind=st.sampled_from(["spawned", "resized"])),
    st.builds(wire.Event, seq=st.integers(0, 100), kind=st.just("exited"),  # whose data is an exit record
              data=st.just(wire.Exit(code=0, signal=None).to_map())),
    st.builds(wire.Exit, code=st.none() | st.integers(0, 255), signal=st.none(),
              state=st.sampled_from(["", "backoff"])),
    st.builds(wire.Pong, nonce=st.none() | st.integers(0, 3)),
    st.builds(wire.StatusReply, state=st.just("running")),
    st.builds(wire.Error, code=st.just("x"), message=st.just("y"), frame_type=st.none() | st.just(0x0D)),
    st.builds(wire.Release, reason=st.just("exit")),
    _payload.map(lambda b: wire.Unknown(0x7F, len(b))),  # stands for an unknown frame type's bytes
)


def _encode(frame: Any) -> bytes:
    if isinstance(frame, wire.Unknown):
        return wire.HEADER.pack(frame.frame_type, frame.length) + b"u" * frame.length
    return wire.encode(frame)


def _chunks(stream: bytes, data: st.DataObject) -> list[bytes]:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=16)))
    return [stream[a:b] for a, b in itertools.pairwise([0, *cuts, len(stream)]) if b > a]  # b"" is the end


def _reference(frames: list[Any]) -> tuple[list[Any], int]:
    """The stream fed whole, with a PING (nonce 1) and a STATUS awaiting answers: its events, and the
    position once all are delivered."""
    conn = in_state(S.OPEN)
    _ask(conn, wire.Ping(nonce=1), wire.Status())
    conn.receive_data(b"".join(_encode(f) for f in frames) or b"\x01")  # not b"": that is the end
    events = list(conn.events())
    for event in events:
        conn.deliver(event)
    return events, conn.output.next_offset


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=st.lists(_stream_frame, max_size=10), data=st.data(),
       how=st.sampled_from(["next_event", "sole_data", "next_output"]))
def test_any_split_gives_the_same_events(frames: list[Any], data: st.DataObject, how: str) -> None:
    expected, end = _reference(frames)
    # every known frame comes out, in order: as itself, or as the answer to a request
    assert [e.reply if isinstance(e, Answered) else e for e in expected] == [
        f for f in frames if not isinstance(f, wire.Unknown)]
    conn = Connection(PATH, max_frame=1024)
    conn.hello()
    got: list[Any] = []
    batch: list[bytes] = []
    for chunk in _chunks(HANDSHAKE_BYTES + b"".join(_encode(f) for f in frames), data):
        if how == "sole_data" and (payload := conn.sole_data(chunk)) is not None:
            got.append(wire.Data(bytes(payload)))  # delivered by sole_data
            continue
        conn.receive_data(chunk)
        while True:
            streaming = conn.state in STREAMING
            if how == "next_output" and streaming:
                event = conn.next_output(batch)  # delivers what it takes
                got.extend(wire.Data(b) for b in batch)
                batch.clear()
            else:
                event = conn.next_event()
                if streaming:
                    conn.deliver(event)
            if event is None:
                break
            if conn.state is S.OPEN and isinstance(event, wire.Replay):
                _ask(conn, wire.Ping(nonce=1), wire.Status())
            elif streaming:
                got.append(event)
    assert [("answered", e.request.frame_type, e.reply) if isinstance(e, Answered) else e for e in got] == [
        ("answered", e.request.frame_type, e.reply) if isinstance(e, Answered) else e for e in expected]
    assert conn.output.next_offset == end
    with pytest.raises(SessionGone):
        feed(conn, b"")


@pytest.mark.parametrize(("frame", "field"), [
    (wire.Signal(signal="BOGUS"), "signal"), (wire.Signal(signal=9), "signal"),  # type: ignore[arg-type]
    (wire.Spawn(argv=[]), "argv"), (wire.Spawn(argv="cat"), "argv"),  # type: ignore[arg-type]
    (wire.Resize(cols=0, rows=24), "cols"), (wire.Stop(grace=-1.0), "grace"),
])
def test_a_request_method_s_frame_is_checked_by_the_connection(frame: wire.Frame, field: str) -> None:
    """The one check every client's request methods use (blocking, asyncio, the Fleet's spawn)."""
    with pytest.raises(InvalidRequest) as refused:
        Connection("s.sock").checked(frame)
    assert refused.value.field == field and "not sent" in str(refused.value)


def test_what_send_lets_through_a_request_method_refuses() -> None:
    """``send()`` leaves an unknown signal and an empty argv to the shellper (which answers them without
    ending the connection); the request methods refuse them before a round trip."""
    conn = Connection("s.sock")
    conn.hello()
    for frame in (wire.Signal(signal="BOGUS"), wire.Spawn(argv=[])):
        assert conn.send(frame)
        with pytest.raises(InvalidRequest):
            conn.checked(frame)


@pytest.mark.parametrize("data", ["text", None, 5])
def test_input_must_be_bytes_whichever_client_sends_it(data: object) -> None:
    """Checked by the connection for every client (the asyncio one used to check on its own, the blocking
    one failed inside the encoder), before the connection's state: the caller's mistake comes first."""
    from shellper.core.errors import BadArgumentType

    conn = Connection("s.sock")
    with pytest.raises(BadArgumentType, match="input must be bytes"):
        conn.send_data(data)  # type: ignore[arg-type]
    conn.hello()
    with pytest.raises(BadArgumentType, match="input must be bytes"):
        conn.send_data(data)  # type: ignore[arg-type]
    assert conn.send_data(b"ok")
