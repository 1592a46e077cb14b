"""PROTOCOL.md 10.1, against a live shellper: a frame that fails several checks gets the error of the first
check in the spec's order, and every frame only the shellper sends (RELEASE too) is refused the same way."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import time
from typing import Any

import msgpack
import pytest
from support.sessions import Sessions

from shellper.protocol import wire

BOOT_ID = "0d6ec1b5-6a4e-4b0e-9c36-3f1f8a2b7c11"


def _frame(frame_type: int, payload: bytes) -> bytes:
    return struct.pack(">BI", frame_type, len(payload)) + payload


def _packed(frame_type: int, payload: Any) -> bytes:
    return _frame(frame_type, msgpack.packb(payload, use_bin_type=True))


def _hello(role: str) -> bytes:
    return wire.encode(wire.Hello(version=wire.PROTOCOL_VERSION, role=role, replay_bytes=0, client="spec"))


def _first_error(sock: socket.socket, timeout: float = 10.0) -> tuple[wire.Error, list[wire.DecodedEvent]]:
    """Read until the first ERROR (and what came before it); fail at the deadline."""
    decoder = wire.Decoder()
    got: list[wire.DecodedEvent] = []
    deadline = time.monotonic() + timeout
    while True:
        errors = [e for e in got if isinstance(e, wire.Error)]
        if errors:
            return errors[0], got
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"no ERROR within {timeout:g} s; got {got!r}")
        if select.select([sock], [], [], left)[0]:
            chunk = sock.recv(1 << 20)
            assert chunk, f"closed without an ERROR; got {got!r}"
            decoder.feed(chunk)
            got += list(decoder.events())


def _answer(sessions: Sessions, name: str, before_hello: bool, role: str, payload: bytes) -> tuple[str, bool]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    with contextlib.closing(sock):
        sock.connect(str(sessions.dir / f"{name}.sock"))
        sock.sendall(payload if before_hello else _hello(role) + payload)
        err, _ = _first_error(sock)
        return err.code, err.fatal


R, SIG, ST, H = wire.FrameType.RESIZE, wire.FrameType.SIGNAL, wire.FrameType.STOP, wire.FrameType.HELLO
ORDER_CASES = [
    # id, before the HELLO, role, the frame, (code, fatal) of the first failing check
    ("bad payload before not_hello", True, "", _frame(R, b"\xc1"), ("bad_payload", True)),
    ("missing field before not_hello", True, "", _packed(R, {"cols": 80}), ("missing_field", True)),
    ("a valid frame that is not HELLO", True, "", _packed(R, {"cols": 80, "rows": 24}), ("not_hello", True)),
    ("bad payload before the second-HELLO check", False, "tower", _frame(H, b"\x81\x01\x02"), ("bad_payload", True)),
    ("bad field before role: viewer's RESIZE", False, "viewer", _packed(R, {"cols": "80", "rows": 24}),
     ("bad_field", True)),
    ("role before range: viewer's RESIZE 0x0", False, "viewer", _packed(R, {"cols": 0, "rows": 0}),
     ("forbidden", False)),
    ("role before range: terminal's STOP grace -1", False, "terminal", _packed(ST, {"grace": -1.0}),
     ("forbidden", False)),
    ("role before the signal name: terminal's SIGNAL SEGV", False, "terminal", _packed(SIG, {"signal": "SEGV"}),
     ("forbidden", False)),
    ("range for the tower: RESIZE 0x0", False, "tower", _packed(R, {"cols": 0, "rows": 24}), ("bad_field", True)),
    ("non-string key deep in a tower's SPAWN: bad_payload", False, "tower",
     _packed(wire.FrameType.SPAWN, {"env": {b"PATH": "/bin"}}), ("bad_payload", True)),
    ("non-string key inside a viewer's EVENT: bad_payload before direction", False, "viewer",
     _packed(wire.FrameType.EVENT, {"seq": 1, "kind": "x", "data": {1: 2}}), ("bad_payload", True)),
]


def test_the_first_failing_check_in_the_spec_order_answers(sessions: Sessions) -> None:
    sessions.start("order", ["cat"])
    got = {case[0]: _answer(sessions, "order", case[1], case[2], case[3]) for case in ORDER_CASES}
    assert got == {case[0]: case[4] for case in ORDER_CASES}
    sessions.stop("order")


def test_every_frame_only_the_shellper_sends_is_refused_release_too(sessions: Sessions) -> None:
    """PROTOCOL.md 7.2: WELCOME, REPLAY, EXIT, ERROR, EVENT, STATUS_REPLY, GAP, RELEASE, REPLY and
    SCREEN_REPLY from a client are `protocol`, non-fatal; PONG is ignored."""
    sessions.start("s2c", ["cat"])
    shellper_only = [
        wire.Welcome(version=2, name="s", shellper_pid=1, shellper_start_time=0, boot_id=BOOT_ID,
                     instance_id="x", state="running", cols=80, rows=24, ring_start=0, ring_end=0),
        wire.Replay(offset=0), wire.Exit(code=0, signal=None, exit_class="clean", state="exited"),
        wire.Error(code="x", message="y"), wire.Event(seq=1, kind="resized"), wire.StatusReply(state="running"),
        wire.Gap(offset=0, missed=0), wire.Release(reason="detach"),
        wire.Reply(id=1, frame_type=wire.FrameType.STATUS, ok=True), wire.ScreenReply(offset=0, cols=80, rows=24),
    ]
    assert {type(f) for f in shellper_only} | {wire.Pong} == set(wire.FRAME_CLASSES.values()) - {
        wire.Data, wire.Resize, wire.Signal, wire.Ping, wire.Hello, wire.Spawn, wire.Status, wire.Stop,
        wire.ScreenRequest, wire.Labels}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    with contextlib.closing(sock):
        sock.connect(str(sessions.dir / "s2c.sock"))
        sock.sendall(_hello("tower"))
        for f in shellper_only:
            sock.sendall(wire.encode(wire.Pong(nonce=1)) + wire.encode(f))
            err, before = _first_error(sock)
            assert not any(isinstance(e, wire.Pong) for e in before)  # a PONG from a client is ignored
            assert (err.code, err.fatal, err.frame_type) == ("protocol", False, f.TYPE), f
    sessions.stop("s2c")


def test_status_reply_carries_the_defined_info_keys_with_their_types(sessions: Sessions) -> None:
    """PROTOCOL.md 5, STATUS_REPLY: the keys a client may act on are there, of the types the table gives."""
    sessions.start("info", ["cat"], owner="tower-a")
    with sessions.connect("info", replay_bytes=0) as tower:
        reply = tower.request(wire.Status(), wire.StatusReply)
        assert isinstance(reply, wire.StatusReply)
        info = reply.info
        assert isinstance(info["output_held"], bool)
        assert all(type(info[k]) is int and info[k] >= 0 for k in ("ring_start", "ring_end", "event_seq"))
        assert type(info["child_pid"]) is int and info["last_exit"] is None and info["owner"] == "tower-a"
    sessions.stop("info")
