"""Version 3's requests with ids, as tables: which requests get an id, which frame answers each, and the
typed error a REPLY that is not ok becomes (shellper.protocol.connection)."""

from __future__ import annotations

from typing import Any

import pytest

from shellper.core.errors import ShellperError
from shellper.protocol import wire
from shellper.protocol.connection import (
    REQUEST_ERRORS,
    Answered,
    BadRequest,
    Connection,
    ConnEvent,
    Forbidden,
    NotRunning,
    RemoteError,
    RequestFailed,
    SessionGone,
    SessionStopping,
    SpawnFailed,
)

PATH = "/run/test.sock"
T = wire.FrameType


def opened(version: int) -> Connection:
    conn = Connection(PATH, "tower", "test")
    conn.hello()
    welcome = wire.Welcome(version=version, name="t", shellper_pid=100, shellper_start_time=1, boot_id="b",
                           instance_id="a" * 32, state="running", cols=80, rows=24, ring_start=0, ring_end=0)
    conn.receive_data(wire.encode(welcome) + wire.encode(wire.Replay(offset=0)))
    assert [type(e) for e in conn.events()] == [wire.Welcome, wire.Replay]
    return conn


def feed(conn: Connection, *frames: wire.Frame) -> list[ConnEvent]:
    conn.receive_data(b"".join(wire.encode(f) for f in frames))
    return list(conn.events())


REQUESTS = [wire.Resize(cols=100, rows=30), wire.Signal(signal="TERM"), wire.Spawn(argv=["sh"]),
            wire.Stop(grace=1.0), wire.Status()]


@pytest.mark.parametrize("frame", REQUESTS, ids=lambda f: f.TYPE.name)
def test_a_version_3_connection_numbers_its_requests(frame: wire.Frame) -> None:
    conn = opened(3)
    first, data1 = conn.send_request(frame)
    second, data2 = conn.send_request(frame)
    (sent1,), (sent2,) = wire.decode_all(data1), wire.decode_all(data2)
    assert (getattr(sent1, "id", None), getattr(sent2, "id", None)) == (1, 2)
    assert (first.key_field, first.key, second.key) == ("id", 1, 2)
    assert first.reply_type == (T.STATUS_REPLY if frame.TYPE == T.STATUS else T.REPLY)


@pytest.mark.parametrize("frame", REQUESTS, ids=lambda f: f.TYPE.name)
def test_a_version_2_connection_sends_no_id(frame: wire.Frame) -> None:
    conn = opened(2)
    assert not conn.replies
    if frame.TYPE == T.STATUS:
        _, data = conn.send_request(frame)
    else:
        with pytest.raises(ValueError, match="is not a request"):  # version 2 answers none of these
            conn.send_request(frame)
        data = conn.send(frame)
    assert data == wire.encode(frame)


def reply(rid: int, frame_type: int, ok: bool = True, **more: Any) -> wire.Reply:
    return wire.Reply(id=rid, frame_type=frame_type, ok=ok, **more)


ANSWERS: list[tuple[str, list[wire.Frame], list[wire.Frame], list[tuple[int, Any]]]] = [
    # name, requests sent (ids 1, 2, ...), frames received, what each becomes: (request index or -1, type)
    ("ok", [wire.Resize(cols=1, rows=1)], [reply(1, 2, result={"cols": 1, "rows": 1})], [(0, wire.Reply)]),
    ("out of order", [wire.Signal(signal="INT"), wire.Spawn()], [reply(2, 10), reply(1, 3)],
     [(1, wire.Reply), (0, wire.Reply)]),
    ("unknown id is a plain frame", [wire.Stop()], [reply(9, 15), reply(1, 15)], [(-1, wire.Reply), (0, wire.Reply)]),
    ("status by id", [wire.Status(), wire.Status()],
     [wire.StatusReply(state="running", id=2), wire.StatusReply(state="exited", id=1)],
     [(1, wire.StatusReply), (0, wire.StatusReply)]),
    ("a status reply without id answers no numbered STATUS", [wire.Status()],
     [wire.StatusReply(state="running"), wire.StatusReply(state="running", id=1)],
     [(-1, wire.StatusReply), (0, wire.StatusReply)]),
    ("an ERROR naming the type answers no numbered request", [wire.Signal(signal="INT")],
     [wire.Error(code="bad_signal", message="x", frame_type=3), reply(1, 3)], [(-1, wire.Error), (0, wire.Reply)]),
    ("status refused by REPLY", [wire.Status()], [reply(1, 13, ok=False, code="internal")], [(0, RequestFailed)]),
    ("not running", [wire.Signal(signal="INT")], [reply(1, 3, ok=False, code="not_running")], [(0, NotRunning)]),
    ("bad signal", [wire.Signal(signal="INT")], [reply(1, 3, ok=False, code="bad_signal")], [(0, BadRequest)]),
    ("bad field", [wire.Resize(cols=1, rows=1)], [reply(1, 2, ok=False, code="bad_field")], [(0, BadRequest)]),
    ("missing field", [wire.Spawn()], [reply(1, 10, ok=False, code="missing_field")], [(0, BadRequest)]),
    ("forbidden", [wire.Stop()], [reply(1, 15, ok=False, code="forbidden")], [(0, Forbidden)]),
    ("spawn failed", [wire.Spawn()], [reply(1, 10, ok=False, code="spawn_failed")], [(0, SpawnFailed)]),
    ("stopping", [wire.Spawn()], [reply(1, 10, ok=False, code="stopping")], [(0, SessionStopping)]),
    ("a code from the future", [wire.Spawn()], [reply(1, 10, ok=False, code="new_thing")], [(0, RequestFailed)]),
]


@pytest.mark.parametrize(("asked", "received", "becomes"), [pytest.param(*r[1:], id=r[0]) for r in ANSWERS])
def test_answers_find_their_requests_by_id(asked: list[wire.Frame], received: list[wire.Frame],
                                           becomes: list[tuple[int, Any]]) -> None:
    conn = opened(3)
    requests = [conn.send_request(f)[0] for f in asked]
    got = []
    for event in feed(conn, *received):
        if isinstance(event, Answered):
            got.append((requests.index(event.request), type(event.error) if event.error else type(event.reply)))
            if event.error is not None:
                assert isinstance(event.error, RemoteError) and event.error.error.code == event.error.code
                assert isinstance(event.error, RequestFailed) and event.error.reply is event.reply
        else:
            got.append((-1, type(event)))
    assert got == becomes
    answered = {i for i, _ in becomes if i >= 0}
    assert conn.pending == [r for i, r in enumerate(requests) if i not in answered]


def test_every_reply_code_has_its_error_and_all_are_shellper_errors() -> None:
    assert set(REQUEST_ERRORS) == set(wire.REPLY_CODES) - {"internal"}
    for cls in {*REQUEST_ERRORS.values(), RequestFailed}:
        assert issubclass(cls, ShellperError) and issubclass(cls, RemoteError)
    assert issubclass(BadRequest, ValueError)


def test_the_end_answers_what_is_pending() -> None:
    """No request waits for ever: the end of the stream ends them all (the driver raises its error)."""
    conn = opened(3)
    conn.send_request(wire.Stop())
    conn.send_request(wire.Spawn())
    with pytest.raises(SessionGone):
        feed(conn)
        conn.receive_data(b"")
        list(conn.events())
    assert conn.pending == []


@pytest.mark.parametrize(("payload", "request_id"), [
    ({"cols": "80", "rows": 24, "id": 9}, 9),
    ({"rows": 24, "id": 0}, 0),
    ({"cols": 80, "rows": 24, "id": "9"}, None),
    ({"cols": 80, "rows": 24, "id": -1}, None),
    ({"cols": 80, "rows": 24, "id": True}, None),
    ({"cols": "80", "rows": 24}, None),
])
def test_a_malformed_request_keeps_a_readable_id(payload: dict[str, Any], request_id: int | None) -> None:
    with pytest.raises(wire.ProtocolError) as caught:
        wire.decode_payload(T.RESIZE, wire.msgpack.packb(payload))
    assert caught.value.request_id == request_id


def test_a_malformed_frame_that_is_no_request_has_no_id() -> None:
    with pytest.raises(wire.ProtocolError) as caught:
        wire.decode_payload(T.PING, wire.msgpack.packb({"nonce": "x", "id": 3}))
    assert caught.value.request_id is None
