"""What a peer sends is quoted in the log and in error replies with a bound (shellper.core.peertext): frames
with a long string must not push the session's own lines out of NAME.log and NAME.log.1. A HELLO is held to
4 KiB (PROTOCOL.md section 11), so each string is just under that, and there are ten: unbounded quoting would
log 40 KB."""

from __future__ import annotations

import contextlib

import msgpack
from support.frames import frame, frames_until_eof, only_error, raw_socket
from support.legacy import Legacy, V1Client
from support.sessions import Sessions

from shellper.core.peertext import PEER_QUOTE_CHARS
from shellper.protocol import wire

LONG = 4_000
ROUNDS = 10


def test_a_long_role_is_quoted_bounded_in_the_error_and_the_log(sessions: Sessions) -> None:
    sessions.start("pq", ["cat"])
    for _ in range(ROUNDS):
        with contextlib.closing(raw_socket(sessions.dir / "pq.sock")) as s:
            role = "r" * LONG
            s.sendall(frame(wire.FrameType.HELLO, msgpack.packb({"version": 3, "role": role})))
            err = only_error(frames_until_eof(s))
        assert err.code == "bad_role" and f"({LONG} chars)" in err.message
        assert len(err.message) < PEER_QUOTE_CHARS + 120, len(err.message)
    log = sessions.dir / "pq.log"
    text = log.read_text()
    assert "shellper 0" in text and " started: " in text and len(text) < 16_384, len(text)
    assert not (sessions.dir / "pq.log.1").exists()
    sessions.stop("pq")


def test_a_long_client_type_is_quoted_bounded_in_the_legacy_log(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    for _ in range(ROUNDS):
        with V1Client(s.sock) as c:
            c.hello("t" * LONG)  # its WELCOME comes after the HELLO's log line
    text = s.log_text()
    assert len(text) < 16_384, len(text)
    assert text.count(f"clientType={'t' * PEER_QUOTE_CHARS!r}... ({LONG} chars)") == ROUNDS
