"""Version 3 over a real shellper's socket: every request with an id gets exactly one answer carrying it,
what it did or why not, also for bad requests and while the session stops; a version-2 client sees none."""

from __future__ import annotations

import select
import time
from typing import Any

import pytest
from support.frames import expect_closed, frames_until_eof, packed, ping, raw_socket, read_until, recv_until
from support.paths import PY
from support.sessions import Sessions
from support.waiting import poll_until, wait_gone

from shellper.client.blocking import Client
from shellper.core import structs
from shellper.core.exits import RestartPolicy
from shellper.protocol import wire
from shellper.protocol.connection import (
    BadRequest,
    Forbidden,
    InvalidRequest,
    NotRunning,
    RequestFailed,
    SessionStopping,
    SpawnFailed,
)

T = wire.FrameType
IGNORES_TERM = [PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "signal.signal(signal.SIGHUP, signal.SIG_IGN); "  # what ignores SIGTERM is hung up first
                "print('ready', flush=True); time.sleep(300)"]


def ask(client: Client, request: wire.Frame) -> Any:
    """The request's one answer (a REPLY, or STATUS_REPLY for STATUS); raises what a refusal stands for."""
    return client.request(request, wire.StatusReply if request.TYPE == T.STATUS else wire.Reply, timeout=20)


def _out_of_range(frame: wire.Frame) -> bool:
    try:
        wire.check_request(frame)
    except wire.BadField:
        return True
    return False


def test_each_request_is_answered_with_what_it_did(sessions: Sessions) -> None:
    info = sessions.start("ok", ["cat"])
    with sessions.connect("ok", replay_bytes=0) as tower:
        assert tower.welcome is not None and tower.welcome.version == 3
        reply = ask(tower, wire.Resize(cols=101, rows=31))
        assert (reply.ok, reply.frame_type, reply.result) == (True, T.RESIZE, {"cols": 101, "rows": 31})
        reply = ask(tower, wire.Signal(signal="winch"))
        assert reply.result == {"signal": "SIGWINCH", "pid": info.child_pid}
        status = ask(tower, wire.Status())
        assert isinstance(status, wire.StatusReply) and status.id is not None and status.info["cols"] == 101
        reply = ask(tower, wire.Spawn(argv=["cat"]))
        spawned = recv_until(tower, wire.Event, where=lambda e: e.kind == "spawned")
        assert reply.result == {"child_pid": spawned.data["child_pid"], "argv": ["cat"]}
        assert reply.result["child_pid"] != info.child_pid
    sessions.stop("ok")


@pytest.mark.parametrize(("request_frame", "role", "error"), [
    (wire.Signal(signal="SEGV"), "tower", BadRequest),
    (wire.Resize(cols=0, rows=24), "tower", BadRequest),
    (wire.Resize(cols=80, rows=65536), "terminal", BadRequest),
    (wire.Stop(grace=-1.0), "tower", BadRequest),
    (wire.Resize(cols=80, rows=24), "viewer", Forbidden),
    (wire.Signal(signal="INT"), "terminal", Forbidden),
    (wire.Spawn(argv=["cat"]), "viewer", Forbidden),
    (wire.Stop(), "terminal", Forbidden),
    (wire.Spawn(argv=["/nonexistent/program"]), "tower", SpawnFailed),
], ids=lambda v: v.__name__ if isinstance(v, type) else v if isinstance(v, str) else v.TYPE.name)
def test_a_refused_request_is_answered_and_the_connection_stays(
        sessions: Sessions, request_frame: wire.Frame, role: str, error: type[RequestFailed]) -> None:
    sessions.start("no", ["cat"])
    with sessions.connect("no", role, replay_bytes=0) as client:
        if _out_of_range(request_frame):
            # The client refuses it before the wire; one that skips the checks gets the shellper's answer.
            with pytest.raises(InvalidRequest):
                ask(client, request_frame)
            client.send_bytes(wire.encode(structs.replace(request_frame, id=900)))
            reply = recv_until(client, wire.Reply)
            assert (reply.id, reply.ok, reply.code, reply.frame_type) == (900, False, "bad_field", request_frame.TYPE)
            ping(client)  # still served
            sessions.stop("no")
            return
        with pytest.raises(error) as refused:
            ask(client, request_frame)
        assert refused.value.reply.frame_type == request_frame.TYPE and refused.value.message
        ping(client)  # still served
        with pytest.raises(error):
            ask(client, request_frame)  # and again: one answer each
    sessions.stop("no")


def test_a_malformed_request_with_a_readable_id_is_answered(sessions: Sessions) -> None:
    sessions.start("mal", ["cat"])
    with raw_socket(sessions.dir / "mal.sock") as sock:
        sock.sendall(wire.encode(wire.Hello(version=3, role="tower", replay_bytes=0))
                     + packed(T.RESIZE, {"cols": "80", "rows": 24, "id": 7})
                     + packed(T.SIGNAL, {"id": 8})
                     + wire.encode(wire.Ping(nonce=1))
                     + packed(T.RESIZE, {"cols": 80, "rows": 24, "id": "9"}))  # no readable id: fatal
        events = frames_until_eof(sock)
    replies = [e for e in events if isinstance(e, wire.Reply)]
    assert [(r.id, r.frame_type, r.ok, r.code) for r in replies] == [(7, 2, False, "bad_field"),
                                                                     (8, 3, False, "missing_field")]
    assert "cols" in replies[0].message and "signal" in replies[1].message
    assert any(isinstance(e, wire.Pong) for e in events)
    error = events[-1]
    assert isinstance(error, wire.Error) and error.fatal and error.code == "bad_field"
    sessions.stop("mal")


def test_not_running_and_a_husk_stop(sessions: Sessions) -> None:
    info = sessions.start("husk", ["true"], policy=RestartPolicy(mode="no"))
    with sessions.connect("husk", replay_bytes=0) as tower:
        recv_until(tower, wire.Exit)  # in the handshake, or when it comes
        with pytest.raises(NotRunning):
            ask(tower, wire.Signal(signal="TERM"))
        reply = ask(tower, wire.Stop(grace=1.0))
        assert reply.ok and reply.result == {"child_pid": None}
        expect_closed(tower)
    assert wait_gone(info.pid, 10)


def test_while_stopping_every_request_is_answered(sessions: Sessions) -> None:
    """A STOP waits out its grace on a child that ignores SIGTERM; what comes meanwhile is answered:
    RESIZE, SIGNAL and SPAWN with `stopping`, a second STOP with the first one's end, STATUS as always."""
    info = sessions.start("stopping", IGNORES_TERM)
    with sessions.connect("stopping") as tower, sessions.connect("stopping", "terminal") as term:
        read_until(tower, b"ready")
        first, data = tower.conn.send_request(wire.Stop(grace=2.0))
        tower.send_bytes(data)
        status = ask(term, wire.Status())
        poll_until(lambda: ask(term, wire.Status()).state == "stopping", what="the stopping state")
        for request in (wire.Resize(cols=90, rows=20), wire.Signal(signal="KILL"), wire.Spawn(argv=["cat"])):
            with pytest.raises(SessionStopping):
                ask(tower, request)
        with pytest.raises(SessionStopping):
            ask(term, wire.Resize(cols=90, rows=20))
        second = ask(tower, wire.Stop())  # answered when the first stop has ended the tree
        assert second.ok and second.result == {"child_pid": info.child_pid}
        got = expect_closed(tower)  # the frames that came before the second's REPLY too
        assert status.state in ("running", "stopping")
    firsts = [f for f in got if isinstance(f, wire.Reply) and f.id == first.key]
    assert [(f.ok, f.result) for f in firsts] == [(True, {"child_pid": info.child_pid})]
    assert wait_gone(info.pid, 10)


def test_a_version_2_client_gets_no_reply(sessions: Sessions) -> None:
    sessions.start("v2", ["cat"])
    with raw_socket(sessions.dir / "v2.sock") as sock:
        sock.sendall(wire.encode(wire.Hello(version=2, role="tower", replay_bytes=0))
                     + wire.encode(wire.Resize(cols=70, rows=20, id=1))
                     + wire.encode(wire.Status(id=2))
                     + wire.encode(wire.Signal(signal="NOPE", id=3))
                     + wire.encode(wire.Resize(cols=0, rows=20, id=4)))  # version 2: fatal bad_field
        events = frames_until_eof(sock)
    welcome = events[0]
    assert isinstance(welcome, wire.Welcome) and welcome.version == 2
    assert not any(isinstance(e, wire.Reply) for e in events)
    (status,) = [e for e in events if isinstance(e, wire.StatusReply)]
    assert status.id is None and status.info["cols"] == 70
    errors = [(e.code, e.fatal) for e in events if isinstance(e, wire.Error)]
    assert errors == [("bad_signal", False), ("bad_field", True)]
    sessions.stop("v2")


def test_a_reply_is_not_sent_before_the_exit_it_caused(sessions: Sessions) -> None:
    """SPAWN's REPLY comes after the old child's EXIT and the new child's spawned EVENT."""
    sessions.start("order", ["cat"])
    with sessions.connect("order", replay_bytes=0) as tower:
        request, data = tower.conn.send_request(wire.Spawn(argv=["cat"]))
        tower.send_bytes(data)
        kinds: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = tower.recv(timeout=1)
            if isinstance(got, wire.Exit):
                kinds.append("exit")
            elif isinstance(got, wire.Event) and got.kind == "spawned":
                kinds.append("spawned")
            elif isinstance(got, wire.Reply) and got.id == request.key:
                kinds.append("reply")
                break
        assert kinds == ["exit", "spawned", "reply"]
    sessions.stop("order")


def test_a_client_still_writing_reads_the_fatal_error(sessions: Sessions) -> None:
    """The shellper closes a connection after a fatal ERROR; a client that goes on writing meanwhile must
    not be cut off by EPIPE before it reads that ERROR: the shellper shuts its side and drains the peer's
    bytes for a moment (CLOSE_DRAIN) instead of closing at once."""
    sessions.start("epipe", ["cat"])
    with raw_socket(sessions.dir / "epipe.sock") as sock:
        sock.sendall(wire.encode(wire.Hello(version=2, role="tower", replay_bytes=0))
                     + wire.encode(wire.Resize(cols=0, rows=24)))  # version 2: a fatal bad_field
        decoder = wire.Decoder()
        keystroke = wire.encode_data(b"x" * 1024)  # input the client keeps typing meanwhile
        deadline = time.monotonic() + 10
        eof = False
        while not eof:
            assert time.monotonic() < deadline, "the shellper did not close the connection"
            sock.sendall(keystroke)  # BrokenPipeError here is the defect
            while select.select([sock], [], [], 0.005)[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    eof = True
                    break
                decoder.feed(chunk)
        for _ in range(50):  # and right after the end of the stream, too
            sock.sendall(keystroke)
        errors = [e for e in decoder.events() if isinstance(e, wire.Error)]
    assert [(e.code, e.fatal) for e in errors] == [("bad_field", True)]
    sessions.stop("epipe")
