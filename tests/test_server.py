"""The shellper process over its real socket: roles, requests, errors, and isolation of bad clients.

Every test runs real shellpers (``sessions`` fixture) with real children on real PTYs. Helpers shared
with ``test_server_stream.py`` and ``test_server_lifecycle.py`` live here.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import socket
import stat
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from support.frames import (
    echo_roundtrip,
    expect_closed,
    frame,
    frames_until_eof,
    hello,
    next_error,
    only_error,
    output_search,
    output_until,
    packed,
    ping,
    raw_socket,
    read_until,
    recv_until,
    status,
)
from support.paths import PY
from support.processes import vm_kib
from support.sessions import Sessions
from support.waiting import poll_until, wait_gone

from shellper.client.blocking import Client
from shellper.core.exits import RestartPolicy
from shellper.daemon.clientconn import MAX_CLIENTS
from shellper.protocol import wire

NO_RESTART = RestartPolicy(mode="no")


# ------------------------------------------------------------------------------------------- helpers


def reaped(pid: int) -> bool:
    """Neither running nor a zombie: someone waited for it."""
    return not os.path.exists(f"/proc/{pid}")


# ------------------------------------------------------------------------------------------- PING / STATUS


def test_ping_pong_echoes_nonce(sessions: Sessions) -> None:
    sessions.start("pp", ["cat"])
    with sessions.connect("pp", "viewer") as client:
        for nonce in (0, 1, -5, 2**62):
            ping(client, nonce)
        client.send(wire.Ping())
        pong = recv_until(client, wire.Pong)
        assert pong.nonce is None
        client.send(wire.Pong(nonce=3))  # a PONG from a client is ignored, not an error
        ping(client, 4)
    sessions.stop("pp")


def test_status_reports_the_session(sessions: Sessions) -> None:
    info = sessions.start("st", ["cat"], cols=91, rows=33)
    with sessions.connect("st", "terminal") as client, sessions.connect("st", "viewer") as other:
        echo_roundtrip(client, b"status-token")
        reply = status(other)
        assert reply.state == "running"
        assert reply.info["child_pid"] == info.child_pid
        assert reply.info["shellper_pid"] == info.pid
        assert reply.info["ring_end"] == len(b"status-token\r\n") * 2  # echo + cat's copy
        assert (reply.info["cols"], reply.info["rows"]) == (91, 33)
        assert sorted(c["role"] for c in reply.info["clients"]) == ["terminal", "viewer"]
    sessions.stop("st")


# ------------------------------------------------------------------------------------------- roles


@pytest.mark.parametrize("role", ["terminal", "viewer"])
@pytest.mark.parametrize("request_frame", [wire.Signal(signal="KILL"), wire.Spawn(argv=["true"]),
                                           wire.Stop(grace=0.0)], ids=["SIGNAL", "SPAWN", "STOP"])
def test_tower_only_frames_are_forbidden(sessions: Sessions, role: str, request_frame: wire.Frame) -> None:
    info = sessions.start("fb", ["cat"])
    with sessions.connect("fb", role) as client:
        client.send(request_frame)
        err = next_error(client)
        assert (err.code, err.fatal, err.frame_type) == ("forbidden", False, request_frame.TYPE)
        ping(client)  # still served
        reply = status(client)
        assert reply.state == "running" and reply.info["child_pid"] == info.child_pid
    assert info.child_pid is not None and not wait_gone(info.child_pid, 0)
    sessions.stop("fb")


def test_viewer_may_not_type_or_resize(sessions: Sessions) -> None:
    sessions.start("vw", ["cat"], cols=80, rows=24)
    with sessions.connect("vw", "viewer") as viewer, sessions.connect("vw", "terminal") as term:
        viewer.write(b"from-viewer\n")
        err = next_error(viewer)
        assert (err.code, err.fatal, err.frame_type) == ("forbidden", False, wire.FrameType.DATA)
        viewer.send(wire.Resize(cols=100, rows=50))
        err = next_error(viewer)
        assert (err.code, err.fatal, err.frame_type) == ("forbidden", False, wire.FrameType.RESIZE)
        ping(viewer)
        term.write(b"from-terminal\n")
        seen = output_until(term, b"from-terminal\r\n" * 2)
        assert b"from-viewer" not in seen
        reply = status(viewer)
        assert (reply.info["cols"], reply.info["rows"]) == (80, 24)
    sessions.stop("vw")


@pytest.mark.parametrize(("role", "size"), [("terminal", (100, 30)), ("viewer", (80, 24)), ("tower", (80, 24))])
def test_a_relaying_terminal_gives_its_size_in_hello(sessions: Sessions, role: str, size: tuple[int, int]) -> None:
    """HELLO's cols and rows (version 3) are a relaying terminal's size, taken before the replay; a viewer
    never resizes, and a tower has no terminal."""
    sessions.start("hs", ["cat"], cols=80, rows=24)
    with sessions.connect("hs", role, size=(100, 30)) as client:
        assert client.conn.welcome is not None
        assert (client.conn.welcome.cols, client.conn.welcome.rows) == size
        reply = status(client)
        assert (reply.info["cols"], reply.info["rows"]) == size
    sessions.stop("hs")


@pytest.mark.parametrize("fields", [{"version": 2, "role": "terminal", "cols": 100},
                                    {"version": 2, "role": "terminal", "cols": 0, "rows": 0},
                                    {"version": 3, "role": "viewer", "cols": 0, "rows": 24},
                                    {"version": 3, "role": "tower", "cols": 100}],
                         ids=["v2 width alone", "v2 zero", "v3 viewer zero", "v3 tower width alone"])
def test_a_size_in_hello_where_it_means_nothing_is_ignored(sessions: Sessions, fields: dict[str, Any]) -> None:
    """Only a version-3 terminal's HELLO size is used, and so only there checked: version 2 ignores keys it
    does not know, and a viewer or tower never resizes."""
    sessions.start("hn", ["cat"], cols=80, rows=24)
    with contextlib.closing(raw_socket(sessions.dir / "hn.sock")) as sock:
        sock.sendall(packed(wire.FrameType.HELLO, fields))
        decoder, welcome = wire.Decoder(), None
        while welcome is None:
            data = sock.recv(65536)
            assert data, "the shellper closed the connection"
            decoder.feed(data)
            for event in decoder.events():
                assert not isinstance(event, wire.Error), event
                if isinstance(event, wire.Welcome):
                    welcome = event
        assert (welcome.cols, welcome.rows) == (80, 24)
    sessions.stop("hn")


def test_new_tower_replaces_old_one_and_terminal_is_unaffected(sessions: Sessions) -> None:
    sessions.start("tw", ["cat"])
    old = sessions.connect("tw", "tower")
    term = sessions.connect("tw", "terminal")
    try:
        ping(old)
        with sessions.connect("tw", "tower") as new:
            got = expect_closed(old)
            errors = [f for f in got if isinstance(f, wire.Error)]
            assert [(e.code, e.fatal) for e in errors] == [("replaced", True)]
            assert got[-1] is errors[0]
            echo_roundtrip(new, b"after-replace")
            output_until(term, b"after-replace\r\nafter-replace\r\n")
            ping(term)
            reply = status(new)
            assert sorted(c["role"] for c in reply.info["clients"]) == ["terminal", "tower"]
    finally:
        old.close()
        term.close()
    sessions.stop("tw")


# ------------------------------------------------------------------------------------------- peer uid


NOBODY = 65534
SYSTEM_PY = "/usr/bin/python3"
_NOBODY_CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
try:
    s.sendall(bytes.fromhex(sys.argv[2]))
except OSError:
    pass
out = b""
while True:
    try:
        chunk = s.recv(65536)
    except ConnectionResetError:
        break
    if not chunk:
        break
    out += chunk
print(out.hex())
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(SYSTEM_PY), reason="needs root to run as nobody")
def test_peer_uid_is_refused_by_so_peercred(sessions: Sessions) -> None:
    sessions.start("uid", ["cat"])
    sock_path = sessions.dir / "uid.sock"
    dir_mode = stat.S_IMODE(os.stat(sessions.dir).st_mode)
    sock_mode = stat.S_IMODE(os.stat(sock_path).st_mode)
    assert (dir_mode, sock_mode) == (0o700, 0o600)
    with sessions.connect("uid", "terminal") as observer:  # first: no client of ours trusts a loosened directory
        os.chmod(sessions.dir, 0o711)  # only for this test: let nobody reach the socket, so that
        os.chmod(sock_path, 0o666)  # the credentials check is the only thing left to refuse it
        try:
            out = subprocess.run(
                ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                 SYSTEM_PY, "-c", _NOBODY_CLIENT, str(sock_path), hello("tower").hex()],
                capture_output=True, timeout=20, check=True, cwd="/")
            events = wire.decode_all(bytes.fromhex(out.stdout.decode().strip()))
            err = only_error(events)
            assert err.code == "forbidden"
            assert len(events) == 1  # no WELCOME, nothing else
        finally:
            os.chmod(sock_path, 0o600)
            os.chmod(sessions.dir, 0o700)
        echo_roundtrip(observer, b"still-served")
    sessions.stop("uid")


# ------------------------------------------------------------------------------------------- malformed


_BAD_BEFORE_HELLO = [
    ("bad msgpack", frame(wire.FrameType.HELLO, b"\xc1"), "bad_payload"),
    ("trailing bytes", frame(wire.FrameType.HELLO, msgpack.packb({"version": 2, "role": "tower"}) + b"\x00"),
     "bad_payload"),
    ("not a map", packed(wire.FrameType.HELLO, [2, "tower"]), "bad_payload"),
    ("JSON, not a map", frame(wire.FrameType.HELLO, b'["version",2]'), "bad_payload"),  # a JSON object is version 1
    ("missing role", packed(wire.FrameType.HELLO, {"version": 2}), "missing_field"),
    ("version as str", packed(wire.FrameType.HELLO, {"version": "2", "role": "tower"}), "bad_field"),
    ("bool as uint", packed(wire.FrameType.HELLO, {"version": True, "role": "tower"}), "bad_field"),
    ("old version", packed(wire.FrameType.HELLO, {"version": 1, "role": "tower"}), "unsupported_version"),
    ("unknown role", packed(wire.FrameType.HELLO, {"version": 2, "role": "Tower"}), "bad_role"),
    ("width without height", packed(wire.FrameType.HELLO, {"version": 3, "role": "terminal", "cols": 80}),
     "bad_field"),
    ("zero width", packed(wire.FrameType.HELLO, {"version": 3, "role": "terminal", "cols": 0, "rows": 24}),
     "bad_field"),
    ("oversized", struct.pack(">BI", wire.FrameType.HELLO, wire.MAX_FRAME_SIZE + 1), "too_large"),
    ("oversized unknown type", struct.pack(">BI", 0x42, wire.MAX_FRAME_SIZE + 1), "too_large"),
    ("first frame not HELLO", wire.encode(wire.Ping(nonce=1)), "not_hello"),
    ("DATA first", wire.encode_data(b"rm -rf /\n"), "not_hello"),
    ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "too_large"),
]

_BAD_AFTER_HELLO = [  # (name, bytes, code, the field the message must name)
    ("bad msgpack", frame(wire.FrameType.RESIZE, b"\x81\xa4cols"), "bad_payload", None),
    ("missing field", packed(wire.FrameType.RESIZE, {"cols": 80}), "missing_field", "rows"),
    ("resize zero", wire.encode(wire.Resize(cols=0, rows=24)), "bad_field", "cols"),
    ("resize too big", wire.encode(wire.Resize(cols=80, rows=65536)), "bad_field", "rows"),
    ("signal number", packed(wire.FrameType.SIGNAL, {"signal": 2}), "bad_field", "signal"),
    ("stop negative grace", wire.encode(wire.Stop(grace=-1.0)), "bad_field", "grace"),
    ("stop NaN grace", wire.encode(wire.Stop(grace=math.nan)), "bad_field", "grace"),
    ("stop infinite grace", wire.encode(wire.Stop(grace=math.inf)), "bad_field", "grace"),
    ("second HELLO", hello("tower"), "protocol", None),
    ("oversized DATA", struct.pack(">BI", wire.FrameType.DATA, wire.MAX_FRAME_SIZE + 1) + b"x" * 1000, "too_large",
     None),
]


@pytest.mark.parametrize(("bad", "code"), [(b, c) for _, b, c in _BAD_BEFORE_HELLO],
                         ids=[n for n, _, _ in _BAD_BEFORE_HELLO])
def test_malformed_first_frame_closes_only_that_client(sessions: Sessions, bad: bytes, code: str) -> None:
    info = sessions.start("mf", ["cat"])
    with sessions.connect("mf", "terminal") as observer, contextlib.closing(raw_socket(sessions.dir / "mf.sock")) as s:
        s.sendall(bad)
        err = only_error(frames_until_eof(s))
        assert err.code == code, err
        echo_roundtrip(observer, b"observer-ok")
    assert not wait_gone(info.pid, 0)
    sessions.stop("mf")


@pytest.mark.parametrize(("bad", "code", "field"), [(b, c, f) for _, b, c, f in _BAD_AFTER_HELLO],
                         ids=[n for n, _, _, _ in _BAD_AFTER_HELLO])
def test_malformed_frame_after_hello_closes_only_that_client(sessions: Sessions, bad: bytes, code: str,
                                                             field: str | None) -> None:
    info = sessions.start("ma", ["cat"])
    with sessions.connect("ma", "terminal") as observer, contextlib.closing(raw_socket(sessions.dir / "ma.sock")) as s:
        s.sendall(hello("tower", replay_bytes=0) + bad)
        events = frames_until_eof(s)
        assert isinstance(events[0], wire.Welcome) and isinstance(events[1], wire.Replay)
        err = only_error(events)
        assert err.code == code, err
        if field is not None:
            assert field in err.message, err
        echo_roundtrip(observer, b"observer-ok")
        reply = status(observer)
        assert reply.state == "running" and reply.info["child_pid"] == info.child_pid
    sessions.stop("ma")


def test_shellper_only_frames_from_a_client_are_not_fatal(sessions: Sessions) -> None:
    sessions.start("so", ["cat"])
    with sessions.connect("so", "tower") as client:
        for f in (wire.Gap(offset=0, missed=0), wire.Exit(code=0, signal=None),
                  wire.Error(code="x", message="y"), wire.StatusReply(state="running")):
            client.send(f)
            err = next_error(client)
            assert (err.code, err.fatal, err.frame_type) == ("protocol", False, f.TYPE)
        client.send_bytes(frame(0x42, b"\x00" * 100) + frame(0x00, b""))  # unknown types: skipped silently
        ping(client)
        echo_roundtrip(client, b"fine")
    sessions.stop("so")


def test_unknown_frames_before_hello_are_skipped(sessions: Sessions) -> None:
    sessions.start("uk", ["cat"])
    with contextlib.closing(raw_socket(sessions.dir / "uk.sock")) as s:
        s.sendall(frame(0x42, b"future") + frame(0xFF, b"") + hello("viewer", replay_bytes=0)
                  + wire.encode(wire.Ping(nonce=5)))
        decoder = wire.Decoder()
        got: list[wire.DecodedEvent] = []
        while not any(isinstance(e, wire.Pong) for e in got):
            chunk = s.recv(65536)
            assert chunk, got
            decoder.feed(chunk)
            got += list(decoder.events())
        assert [type(e) for e in got[:2]] == [wire.Welcome, wire.Replay]
        assert not any(isinstance(e, wire.Error) for e in got)
    sessions.stop("uk")


def test_frames_split_at_every_byte_are_reassembled(sessions: Sessions) -> None:
    sessions.start("sp", ["cat"])
    with contextlib.closing(raw_socket(sessions.dir / "sp.sock")) as s:
        stream = (hello("terminal", replay_bytes=0) + wire.encode_data(b"split-input\n")
                  + wire.encode(wire.Ping(nonce=8)))
        for i in range(len(stream)):
            s.sendall(stream[i:i + 1])
        decoder = wire.Decoder()
        out = bytearray()
        pong = False
        while not (pong and b"split-input\r\nsplit-input\r\n" in out):
            chunk = s.recv(65536)
            assert chunk
            decoder.feed(chunk)
            for e in decoder.events():
                pong = pong or isinstance(e, wire.Pong)
                if isinstance(e, wire.Data):
                    out += e.data
    sessions.stop("sp")


def test_handshake_timeout_closes_a_silent_client(sessions: Sessions) -> None:
    sessions.start("ht", ["cat"], handshake_timeout=0.5)
    with sessions.connect("ht", "terminal") as observer:
        silent = raw_socket(sessions.dir / "ht.sock")
        partial = raw_socket(sessions.dir / "ht.sock")
        try:
            partial.sendall(hello("tower")[:7])  # a header and a bit: still no HELLO
            started = time.monotonic()
            for s in (silent, partial):
                err = only_error(frames_until_eof(s))
                assert err.code == "handshake_timeout"
            assert time.monotonic() - started < 5.0
        finally:
            silent.close()
            partial.close()
        echo_roundtrip(observer, b"still-here")  # its own handshake long done: not timed out
    sessions.stop("ht")


def test_resume_from_beyond_end_is_bad_offset(sessions: Sessions) -> None:
    sessions.start("bo", ["cat"])
    with sessions.connect("bo", "terminal") as term:
        echo_roundtrip(term, b"abc")
        end = term.output.next_offset
        with contextlib.closing(raw_socket(sessions.dir / "bo.sock")) as s:
            s.sendall(hello("viewer", resume_from=end + 1))
            err = only_error(frames_until_eof(s))
            assert (err.code, err.frame_type) == ("bad_offset", wire.FrameType.HELLO)
        with sessions.connect("bo", "viewer", resume_from=end) as ok:  # exactly the end: fine, empty
            assert ok.replay is not None
            assert (ok.replay.offset, ok.replay.data, ok.replay.gap) == (end, b"", 0)
    sessions.stop("bo")


def _answer(path: Path) -> list[wire.DecodedEvent]:
    """What a new viewer connection gets: frames up to its WELCOME if admitted; if refused, every
    frame until the shellper closes it."""
    with contextlib.closing(raw_socket(path)) as s:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused and closed before our HELLO:
            s.sendall(hello("viewer", replay_bytes=0))                     # its ERROR is still there to read
        d = wire.Decoder()
        got: list[wire.DecodedEvent] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not select.select([s], [], [], deadline - time.monotonic())[0]:
                continue
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:  # refused with our HELLO unread: a reset, after the ERROR
                chunk = b""
            if not chunk:
                d.close()  # the shellper never stops mid-frame
                return got
            d.feed(chunk)
            got += d.events()
            if any(isinstance(e, wire.Welcome) for e in got):
                return got
        pytest.fail(f"neither WELCOME nor a close within 10 s: {got}")


def _refusal(path: Path) -> wire.Error | None:
    answer = _answer(path)
    return None if any(isinstance(e, wire.Welcome) for e in answer) else only_error(answer)


def test_client_limit_counts_pending_connections(sessions: Sessions) -> None:
    sessions.start("mc", ["cat"])
    path = sessions.dir / "mc.sock"
    pending: list[socket.socket] = []
    attached: list[Client] = []
    try:
        attached.append(sessions.connect("mc", "terminal", replay_bytes=0))
        for _ in range(MAX_CLIENTS - 1):
            pending.append(raw_socket(path))
        # Connections still in the listen backlog are not counted yet: once the shellper has accepted
        # them all, the next one is refused (until then a probe may be admitted, and closes again).
        refused = poll_until(lambda: _refusal(path), what="a connection past the limit to be refused")
        assert refused.code == "too_many_clients" and refused.fatal
        pending.pop().close()  # one slot frees up
        poll_until(lambda: _refusal(path) is None, what="a slot to free up")
        echo_roundtrip(attached[0], b"busy-but-fine")
    finally:
        for s in pending:
            s.close()
        for c in attached:
            c.close()
    sessions.stop("mc")


# ------------------------------------------------------------------------------------------- RESIZE / SIGNAL

WINCH_CHILD = r"""
import os, signal, subprocess, sys
def on_winch(signum, frame):
    cols, rows = os.get_terminal_size(0)
    os.write(1, b"WINCH %d %d\n" % (cols, rows))
signal.signal(signal.SIGWINCH, on_winch)
os.write(1, b"READY\n")
for line in sys.stdin:
    if line.strip() == "size":
        out = subprocess.run(["stty", "size"], capture_output=True).stdout
        os.write(1, b"STTY " + out)
"""


def test_resize_applies_and_always_signals(sessions: Sessions) -> None:
    sessions.start("rs", [PY, "-c", WINCH_CHILD], cols=80, rows=24)
    with sessions.connect("rs", "tower") as tower, sessions.connect("rs", "terminal") as term:
        read_until(tower, b"READY")
        others: list[wire.Frame] = []
        term.send(wire.Resize(cols=132, rows=43))
        output_until(tower, b"WINCH 132 43\r\n", others=others)
        tower.write(b"size\n")
        output_until(tower, b"STTY 43 132\r\n", others=others)
        resized = [f.data for f in others if isinstance(f, wire.Event) and f.kind == "resized"]
        assert resized == [{"cols": 132, "rows": 43}]
        for _ in range(2):  # unchanged size: the kernel would not signal; the shellper must
            tower.send(wire.Resize(cols=132, rows=43))
            output_until(tower, b"WINCH 132 43\r\n")
        reply = status(term)
        assert (reply.info["cols"], reply.info["rows"]) == (132, 43)
        with sessions.connect("rs", "viewer", replay_bytes=0) as late:
            assert late.welcome is not None and (late.welcome.cols, late.welcome.rows) == (132, 43)
    sessions.stop("rs")


SIGNAL_CHILD = r"""
import os, signal, subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", '''
import os, signal
signal.signal(signal.SIGINT, lambda *a: os.write(1, b"KID-INT\\n"))
os.write(1, b"KID-READY\\n")
while True:
    signal.pause()
'''])
signal.signal(signal.SIGINT, lambda *a: os.write(1, b"PARENT-INT\n"))
os.write(1, b"PARENT-READY\n")
while True:
    signal.pause()
"""


def test_signal_reaches_the_child_process_group(sessions: Sessions) -> None:
    info = sessions.start("sg", [PY, "-c", SIGNAL_CHILD])
    with sessions.connect("sg", "tower") as tower:
        assert tower.replay is not None
        seen = bytearray(tower.replay.data)
        output_search(tower, rb"KID-READY", seen)
        output_search(tower, rb"PARENT-READY", seen)
        for name in ("INT", "sigint", "SIGINT"):
            seen = bytearray()
            tower.send(wire.Signal(signal=name))
            output_search(tower, rb"PARENT-INT\r\n", seen)
            output_search(tower, rb"KID-INT\r\n", seen)
        tower.send(wire.Signal(signal="SEGV"))
        err = next_error(tower)
        assert (err.code, err.fatal) == ("bad_signal", False)
        ping(tower)
        assert info.child_pid is not None and not wait_gone(info.child_pid, 0)
    sessions.stop("sg")


def test_signal_and_input_with_no_child_are_not_running(sessions: Sessions) -> None:
    sessions.start("nr", ["true"], policy=NO_RESTART)
    with sessions.connect("nr", "tower") as tower:
        poll_until(lambda: status(tower).state == "exited", what="state exited")
        tower.send(wire.Signal(signal="TERM"))
        err = next_error(tower)
        assert (err.code, err.fatal) == ("not_running", False)
        tower.write(b"lost\n")
        err = next_error(tower)
        assert (err.code, err.fatal, err.frame_type) == ("not_running", False, wire.FrameType.DATA)
        ping(tower)
        tower.send(wire.Resize(cols=101, rows=41))  # no child: kept for the next one
        ping(tower)
        assert (status(tower).info["cols"], status(tower).info["rows"]) == (101, 41)
        tower.send(wire.Spawn(argv=["sh", "-c", "stty size; exec cat"]))
        output_until(tower, b"41 101\r\n")
    sessions.stop("nr")


# ------------------------------------------------------------------------------------------- SPAWN

TREE_CHILD = "trap '' TERM HUP; sleep 300 & echo TREE $$ $!; wait"


def tree_pids(client: Client) -> tuple[int, int]:
    """The pids a TREE_CHILD prints: the shell (the child) and its background ``sleep``."""
    assert client.replay is not None
    m = output_search(client, rb"TREE (\d+) (\d+)\r\n", bytearray(client.replay.data))
    return int(m.group(1)), int(m.group(2))


def test_spawn_replaces_the_child_and_its_tree(sessions: Sessions) -> None:
    info = sessions.start("sw", ["sh", "-c", TREE_CHILD], grace=0.5)
    with sessions.connect("sw", "tower") as tower:
        shell, grandchild = tree_pids(tower)
        assert shell == info.child_pid
        end_before = tower.output.next_offset
        tower.send(wire.Spawn(argv=["sh", "-c", "echo NEW-CHILD $$; exec cat"]))
        ex = recv_until(tower, wire.Exit)
        assert ex.child_pid == shell and ex.exit_class == "requested"
        assert ex.state == "starting"
        spawned = recv_until(tower, wire.Event, where=lambda e: e.kind == "spawned")
        new_pid = spawned.data["child_pid"]
        assert new_pid != shell
        for pid in (shell, grandchild):
            assert reaped(pid), f"pid {pid} of the old tree survived SPAWN"
        read_until(tower, b"NEW-CHILD %d" % new_pid)
        assert tower.output.next_offset > end_before
        reply = status(tower)
        assert reply.state == "running" and reply.info["child_pid"] == new_pid
        echo_roundtrip(tower, b"new-cat")
    sessions.stop("sw")


def test_spawn_clear_ring_keeps_offsets_and_empties_replay(sessions: Sessions) -> None:
    sessions.start("cr", ["cat"])
    with sessions.connect("cr", "tower") as tower:
        echo_roundtrip(tower, b"old-output")
        tower.send(wire.Spawn(argv=["cat"], clear_ring=True))
        recv_until(tower, wire.Event, where=lambda e: e.kind == "spawned")
        end = status(tower).info["ring_end"]
        assert end >= len(b"old-output\r\n") * 2  # offsets are never reset
        with sessions.connect("cr", "viewer") as viewer:
            assert viewer.welcome is not None and viewer.replay is not None
            assert viewer.welcome.ring_start == viewer.replay.offset
            assert b"old-output" not in viewer.replay.data
            assert viewer.welcome.ring_start >= len(b"old-output\r\n") * 2
        with sessions.connect("cr", "viewer", resume_from=0) as behind:
            assert behind.replay is not None and behind.welcome is not None
            assert behind.replay.gap == behind.welcome.ring_start
        echo_roundtrip(tower, b"new-output")
    sessions.stop("cr")


@pytest.mark.parametrize("spawn", [
    wire.Spawn(argv=["/nonexistent/program"]), wire.Spawn(argv=[]), wire.Spawn(argv=[""]),
    wire.Spawn(cwd="/nonexistent-dir"), wire.Spawn(env={"A=B": "1"}), wire.Spawn(argv=["ca\0t"]),
])
def test_a_spawn_that_cannot_start_is_refused_and_the_child_kept(sessions: Sessions, spawn: wire.Spawn) -> None:
    """Checked before the running child is ended: a typo in the new command must not cost the session its
    agent (an empty argv used to end cat and leave the session fatal with an empty command)."""
    info = sessions.start("sf", ["cat"])
    with sessions.connect("sf", "tower") as tower, sessions.connect("sf", "terminal") as term:
        tower.send(spawn)
        err = recv_until(tower, wire.Error)
        assert (err.code, err.fatal, err.frame_type) == ("spawn_failed", False, wire.FrameType.SPAWN)
        assert err.message.startswith("cannot start") or "environment variable" in err.message, err.message
        reply = status(tower)
        assert reply.state == "running" and reply.info["child_pid"] == info.child_pid
        echo_roundtrip(term, b"still-here")
        assert term.recv(timeout=0) is None  # no EXIT reached the terminal
        tower.send(wire.Spawn(argv=None))  # the current command is still the one that runs
        recv_until(tower, wire.Event, where=lambda e: e.kind == "spawned")
        echo_roundtrip(tower, b"respawned")
    sessions.stop("sf")


def test_back_to_back_spawns_leave_exactly_one_child(sessions: Sessions) -> None:
    info = sessions.start("bb", ["sh", "-c", "trap '' TERM HUP; exec cat"], grace=0.3)  # needs the SIGKILL
    with sessions.connect("bb", "tower") as tower:
        tower.send(wire.Spawn(argv=["sh", "-c", "echo FIRST; exec cat"]))
        tower.send(wire.Spawn(argv=["sh", "-c", "echo SECOND; exec cat"]))
        pids: list[int] = []
        while len(pids) < 2:
            pids.append(recv_until(tower, wire.Event, where=lambda e: e.kind == "spawned").data["child_pid"])
        ping(tower)
        reply = status(tower)
        assert reply.state == "running" and reply.info["child_pid"] == pids[-1]
        assert reaped(pids[0])
        assert _children_of(info.pid) == [pids[-1]]
    sessions.stop("bb")


def _children_of(pid: int) -> list[int]:
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            out += [int(p) for p in fh.read().split()]
    return sorted(out)


# ------------------------------------------------------------------------------------------- events


def test_held_and_live_events_join_without_holes(sessions: Sessions) -> None:
    sessions.start("ev", ["cat"])
    with sessions.connect("ev", "terminal") as quiet:
        quiet.send(wire.Resize(cols=81, rows=25))
        ping(quiet)
        with sessions.connect("ev", "tower", events_after=0) as tower:
            assert tower.welcome is not None and tower.welcome.role == "tower"
            held_to = tower.welcome.event_seq
            quiet.send(wire.Resize(cols=82, rows=26))
            ping(quiet)
            seqs: list[int] = []
            kinds: list[str] = []
            live_only: list[str] = []
            while not kinds or kinds[-1] != "resized" or seqs[-1] <= held_to:
                ev = recv_until(tower, wire.Event)
                if ev.seq == 0:
                    live_only.append(ev.kind)
                    continue
                seqs.append(ev.seq)
                kinds.append(ev.kind)
            assert seqs == list(range(1, len(seqs) + 1))  # held 1..held_to, then live, no gap, no repeat
            assert kinds[:2] == ["spawned", "state"] and "client_attached" not in kinds
            assert kinds[held_to:] == ["resized"]  # the live resize
            assert live_only == ["client_attached"]  # its own attach: live only, not numbered or held
        no_events = [f for f in expect_nothing_but_output(quiet) if isinstance(f, wire.Event)]
        assert no_events == []  # a terminal that did not ask for events gets none
    sessions.stop("ev")


def expect_nothing_but_output(client: Client) -> list[wire.Frame]:
    """Frames received up to the answer to a PING."""
    got: list[wire.Frame] = []
    client.send(wire.Ping(nonce=123))
    while True:
        f = recv_until(client, wire.Frame)
        if isinstance(f, wire.Pong) and f.nonce == 123:
            return got
        got.append(f)


def test_events_no_longer_held_are_reported_as_missed(sessions: Sessions) -> None:
    sessions.start("em", ["cat"])
    with sessions.connect("em", "terminal") as term:
        term.send_bytes(wire.encode(wire.Resize(cols=80, rows=24)) * 1100)
        ping(term)
        with sessions.connect("em", "viewer", events_after=5) as viewer:
            assert viewer.welcome is not None
            newest = viewer.welcome.event_seq
            first = recv_until(viewer, wire.Event)
            assert (first.seq, first.kind) == (0, "events_missed")
            oldest = newest - 1000 + 1
            assert first.data == {"from": 6, "to": oldest - 1}
            second = recv_until(viewer, wire.Event)
            assert second.seq == oldest
    sessions.stop("em")


def test_connections_that_close_early_do_no_harm(sessions: Sessions) -> None:
    info = sessions.start("ce", ["cat"])
    whole = hello("tower")
    for cut in (0, 1, 4, 5, len(whole) - 1, len(whole)):
        s = raw_socket(sessions.dir / "ce.sock")
        s.sendall(whole[:cut])
        s.close()
    s = raw_socket(sessions.dir / "ce.sock")
    s.sendall(whole + wire.encode(wire.Ping()) * 1000)  # and leaves without reading the answers
    s.close()
    with sessions.connect("ce", "terminal") as term:
        echo_roundtrip(term, b"unharmed")
        poll_until(lambda: [c["role"] for c in status(term).info["clients"]] == ["terminal"],
                   what="the closed connections to be forgotten")
    assert not wait_gone(info.pid, 0)
    sessions.stop("ce")


def test_a_client_that_asks_and_never_reads_is_dropped(sessions: Sessions) -> None:
    info = sessions.start("ar", ["cat"])
    with sessions.connect("ar", "terminal") as term, contextlib.closing(raw_socket(sessions.dir / "ar.sock")) as s:
        s.sendall(hello("viewer"))
        s.setblocking(False)
        sent = 0
        request = wire.encode(wire.Status()) * 1000
        deadline = time.monotonic() + 20
        while True:  # STATUS requests until the shellper stops taking them (it closed us)
            try:
                sent += s.send(request)
            except BlockingIOError:
                select.select([], [s], [], 0.5)
            except (BrokenPipeError, ConnectionResetError):
                break
            assert time.monotonic() < deadline, f"still connected after {sent} bytes of requests"
        echo_roundtrip(term, b"unaffected")
        assert [c["role"] for c in status(term).info["clients"]] == ["terminal"]
    assert vm_kib(info.pid, "VmHWM") < 80 * 1024
    sessions.stop("ar")


def test_a_sigkill_is_reported_as_a_signal_not_as_code_0(sessions: Sessions) -> None:
    info = sessions.start("kl", ["sleep", "300"], policy=NO_RESTART)
    with sessions.connect("kl", "tower") as tower:
        tower.send(wire.Signal(signal="KILL"))
        ex = recv_until(tower, wire.Exit)
        assert (ex.code, ex.signal, ex.exit_class, ex.child_pid) == (None, "SIGKILL", "requested", info.child_pid)
        assert "SIGKILL" in ex.reason
    sessions.stop("kl")


def test_newer_versions_unknown_keys_and_empty_payloads_are_accepted(sessions: Sessions) -> None:
    sessions.start("nv", ["cat"])
    with contextlib.closing(raw_socket(sessions.dir / "nv.sock")) as s:
        s.sendall(packed(wire.FrameType.HELLO, {"role": "viewer", "future_option": [1, {"x": 2}], "version": 7,
                                                "replay_bytes": 0})
                  + frame(wire.FrameType.STATUS, b"") + frame(wire.FrameType.PING, b"")
                  + packed(wire.FrameType.PING, {"nonce": 5, "also_new": True}))
        decoder = wire.Decoder()
        got: list[wire.DecodedEvent] = []
        while sum(isinstance(e, wire.Pong) for e in got) < 2:
            chunk = s.recv(65536)
            assert chunk, got
            decoder.feed(chunk)
            got += list(decoder.events())
        welcome = got[0]
        assert isinstance(welcome, wire.Welcome) and welcome.version == wire.PROTOCOL_VERSION == 3
        assert welcome.min_version == 2 and welcome.max_frame == wire.MAX_FRAME_SIZE and welcome.role == "viewer"
        answers = [e for e in got if isinstance(e, wire.StatusReply | wire.Pong)]
        assert [type(a).__name__ for a in answers] == ["StatusReply", "Pong", "Pong"]
        assert [a.nonce for a in answers if isinstance(a, wire.Pong)] == [None, 5]
        assert not any(isinstance(e, wire.Error) for e in got)
    sessions.stop("nv")
