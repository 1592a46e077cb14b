"""What one peer can make the shellper hold (issue 27): each frame type's limits (PROTOCOL.md section 11), the
deadline of an unfinished frame, the one bound on unfinished frames across connections, and version 1's JSON
nested too deep. Each test is a real shellper attacked over its socket, its memory read from /proc, a tower
pinging it throughout (the sentinel: it must stay served)."""

from __future__ import annotations

import contextlib
import json
import select
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack  # type: ignore[import-untyped]
import pytest
from support.frames import output_until, status
from support.hostile import Watcher
from support.legacy import V1Client
from support.sessions import Sessions
from support.soak import RawConn, child, hello, status_kib
from support.waiting import poll_until

from shellper.daemon.clientconn import MAX_PARTIAL_BYTES
from shellper.protocol import legacy, wire
from shellper.protocol.wire import FrameType

MiB = 1024 * 1024
GROWTH_BOUND = 64 * MiB
"""Most a hostile connection may grow the shellper's peak RSS by (the bomb below costs 1.2 GiB unbounded)."""


def reset_peak(pid: int) -> int:
    """Reset the shellper's peak RSS (VmHWM) to its RSS now (clear_refs 5; we are root); that RSS in bytes."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return status_kib(pid, "VmRSS") * 1024


def peak_growth(pid: int, base: int) -> int:
    return status_kib(pid, "VmHWM") * 1024 - base


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


def map_bomb(kind: int, size: int, fields: dict[str, object] | None = None) -> bytes:
    """A frame of ``size`` payload bytes that is mostly empty maps (one byte each, ~70 in Python): the fields,
    then ``"x": [{}, {}, ...]``."""
    head = msgpack.packb(fields or {}, use_bin_type=True)
    entries = head[0] & 0x0F
    head = bytes([0x80 | (entries + 1)]) + head[1:] + b"\xa1x"
    count = size - len(head) - 5
    return frame(kind, head + b"\xdd" + count.to_bytes(4, "big") + b"\x80" * count)


def pair_bomb(kind: int, size: int) -> bytes:
    """A payload map of ``"" -> nil`` pairs (two bytes each): one dict of millions of entries."""
    count = (size - 5) // 2
    return frame(kind, b"\xdf" + count.to_bytes(4, "big") + b"\xa0\xc0" * count)


@pytest.fixture
def target(sessions: Sessions, request: pytest.FixtureRequest) -> Iterator[tuple[str, Watcher, int]]:
    """A session whose unfinished frames time out after 1 s, or after ``frame_timeout`` from the test's
    ``frame_timeout`` mark, for a test that is not about the deadline and must not meet it on a loaded machine."""
    mark = request.node.get_closest_marker("frame_timeout")
    info = sessions.start("limits", child("drain", "0.05"), frame_timeout=mark.args[0] if mark else 1.0)
    watcher = Watcher(info.socket)
    try:
        yield info.socket, watcher, info.pid
    finally:
        watcher.close()
    sessions.stop("limits")


def fatal_code(conn: RawConn, timeout: float = 30.0) -> str:
    frames = conn.read_to_eof(timeout)
    fatal = [f.code for f in frames if isinstance(f, wire.Error) and f.fatal]
    assert len(fatal) == 1, frames[-5:]
    return fatal[0]


def send_all_or_closed(conn: RawConn, data: bytes) -> None:
    """Send ``data``; the shellper may close the connection before it has it all (it refuses at a header)."""
    view = memoryview(data)
    while view:
        try:
            view = view[conn.sock.send(view):]
        except (BrokenPipeError, ConnectionResetError):
            return


BOMBS = {
    "HELLO of 16 MiB of empty maps, before the handshake": (b"", map_bomb(FrameType.HELLO, 16 * MiB,
                                                                          {"version": 3, "role": "viewer"})),
    "PING of 16 MiB of empty maps": (hello("viewer", replay_bytes=0), map_bomb(FrameType.PING, 16 * MiB)),
    "STATUS of 16 MiB of empty-string -> nil pairs": (hello("viewer", replay_bytes=0),
                                                      pair_bomb(FrameType.STATUS, 16 * MiB)),
    "PING of 64 KiB of empty maps": (hello("viewer", replay_bytes=0), map_bomb(FrameType.PING, 64 * 1024)),
    "SPAWN of 2 MiB of empty maps (decoded before the role is checked)": (hello("viewer", replay_bytes=0),
                                                   map_bomb(FrameType.SPAWN, 2 * MiB, {"argv": ["true"]})),
    "an unknown key nested 1000 deep": (hello("viewer", replay_bytes=0),
                                        frame(FrameType.PING, b"\x81\xa1x" + b"\x91" * 1000 + b"\xc0")),
}


@pytest.mark.parametrize("bomb", list(BOMBS.values()), ids=list(BOMBS))
def test_a_bomb_costs_the_shellper_little_and_is_refused(target: tuple[str, Watcher, int],
                                                         bomb: tuple[bytes, bytes]) -> None:
    """Unbounded, the 16 MiB map bomb grew the shellper by 1.2 GiB and froze it for seconds. Now every frame type
    has a size, an object count and a depth it may not pass: too_large, and the growth is a few MiB at most."""
    path, watcher, pid = target
    opening, payload = bomb
    base = reset_peak(pid)
    with RawConn(path, timeout=30) as conn:
        conn.send(opening)
        send_all_or_closed(conn, payload)
        assert fatal_code(conn) == "too_large"
    watcher.ping()  # the tower was served throughout
    growth = peak_growth(pid, base)
    print(f"\npeak RSS growth {growth / MiB:.1f} MiB for {len(payload) / MiB:.2f} MiB sent")
    assert growth < GROWTH_BOUND


def test_frames_within_the_limits_are_served(sessions: Sessions) -> None:
    """The limits refuse bombs, not frames that merely use their room: a HELLO with a 3000-byte client name, a PING
    with 4000 objects in unknown keys and 52 KiB in all, a tower's SPAWN with a 1.6 MiB environment."""
    info = sessions.start("roomy", ["cat"])
    with RawConn(info.socket) as conn:
        conn.send(wire.encode(wire.Hello(version=3, role="tower", client="c" * 3000, replay_bytes=0)))
        conn.until(lambda f: isinstance(f, wire.Replay))
        extra = {f"k{i}": i for i in range(1999)}  # with nonce, pad and the map itself: 4003 objects
        ping = msgpack.packb({"nonce": 7, **extra, "pad": "p" * 35_000}, use_bin_type=True)
        assert 50_000 < len(ping) <= wire.CONTROL_LIMIT.size
        conn.send(frame(FrameType.PING, ping))
        conn.until(lambda f: isinstance(f, wire.Pong) and f.nonce == 7)
        env = {f"V{i}": "v" * 150 for i in range(10_000)}
        spawn = wire.encode(wire.Spawn(argv=["sh", "-c", "echo respawned-${#V9999}; exec cat"], env=env, id=5))
        assert 1.5 * MiB < len(spawn) < wire.SPAWN_LIMIT.size
        conn.send(spawn)
        got = conn.until(lambda f: isinstance(f, wire.Data) and b"respawned-150" in f.data)
        assert [(f.id, f.ok) for f in got if isinstance(f, wire.Reply)] == [(5, True)]
    sessions.stop("roomy")


def test_an_unfinished_frame_after_hello_is_closed_at_its_deadline(target: tuple[str, Watcher, int]) -> None:
    """A viewer that begins a frame and never ends it held its bytes for ever; now it has frame_timeout (1 s
    here) to finish it, counted from its first byte even while more bytes trickle in."""
    path, watcher, _ = target
    with RawConn(path) as idle, RawConn(path) as trickle:
        for conn in (idle, trickle):
            conn.send(hello("viewer", replay_bytes=0))
            conn.until(lambda f: isinstance(f, wire.Replay))
        started = time.monotonic()
        idle.send(wire.HEADER.pack(FrameType.DATA, 1 * MiB) + bytes(512 * 1024))
        ping = wire.encode(wire.Ping(nonce=1))
        for byte in ping[:-1]:  # a byte every 0.3 s (or until the shellper speaks), never the last one
            with contextlib.suppress(OSError):
                trickle.send(bytes([byte]))
            if select.select([trickle.sock], [], [], 0.3)[0]:
                break
        assert fatal_code(idle, 10) == "frame_timeout"
        assert fatal_code(trickle, 10) == "frame_timeout"
        assert time.monotonic() - started >= 1.0
    watcher.ping()


def test_a_slow_frame_that_finishes_in_time_is_served(target: tuple[str, Watcher, int]) -> None:
    """Frames finished within the deadline, one after another, keep the connection: the deadline is per frame."""
    path, watcher, _ = target
    with RawConn(path) as conn:
        conn.send(hello("viewer", replay_bytes=0))
        conn.until(lambda f: isinstance(f, wire.Replay))
        for nonce in range(5):  # each PING in two halves 0.3 s apart: 1.5 s in all, more than the 1 s deadline
            ping = wire.encode(wire.Ping(nonce=nonce))
            conn.send(ping[:4])
            pause = time.monotonic() + 0.3
            while (left := pause - time.monotonic()) > 0:
                assert not [f for f in conn.frames(left) if isinstance(f, wire.Error)] and not conn.eof
            conn.send(ping[4:])
            conn.until(lambda f, n=nonce: isinstance(f, wire.Pong) and f.nonce == n)  # type: ignore[misc]
    watcher.ping()


@pytest.mark.frame_timeout(600.0)  # five 16 MiB sends take seconds on a loaded machine: the bound is the point
def test_unfinished_frames_of_all_connections_have_one_bound(target: tuple[str, Watcher, int]) -> None:
    """Five viewers each leave a 16 MiB frame unfinished: four fit MAX_PARTIAL_BYTES (64 MiB), the fifth is refused
    (ERROR busy). Unbounded, 256 of them could hold 4 GiB. The four finish their frames and are served."""
    path, watcher, pid = target
    each = MAX_PARTIAL_BYTES // 4
    payload = each - wire.HEADER_SIZE
    head = wire.HEADER.pack(FrameType.DATA, payload + 1)
    conns = [RawConn(path, timeout=30) for _ in range(5)]
    try:
        for conn in conns:
            conn.send(hello("viewer", replay_bytes=0))
            conn.until(lambda f: isinstance(f, wire.Replay))
        base = reset_peak(pid)
        for conn in conns:
            send_all_or_closed(conn, head + bytes(payload))  # all of it but its last byte
        got: dict[int, list[wire.DecodedEvent]] = {id(c): [] for c in conns}

        def closed() -> list[RawConn]:
            for c in conns:
                if not c.eof:
                    got[id(c)] += c.frames(0.01)
            return [c for c in conns if c.eof]

        refused = poll_until(closed, 30, what="a connection refused")
        assert len(refused) == 1
        assert [(f.code, f.fatal) for f in got[id(refused[0])] if isinstance(f, wire.Error)] == [("busy", True)]
        growth = peak_growth(pid, base)
        for n, conn in enumerate(c for c in conns if c not in refused):  # a viewer's DATA: a non-fatal forbidden
            conn.send(b"\0" + wire.encode(wire.Ping(nonce=n)))
            conn.until(lambda f, n=n: isinstance(f, wire.Pong) and f.nonce == n)  # type: ignore[misc]
        assert closed() == refused
    finally:
        for conn in conns:
            conn.close()
    watcher.ping()
    print(f"\nfive 16 MiB unfinished frames: peak RSS growth {growth / MiB:.0f} MiB")
    assert growth < MAX_PARTIAL_BYTES + 32 * MiB


# --------------------------------------------------------------------------------------------- version 1


@pytest.mark.parametrize(("kind", "depth"), [(FrameType.RESIZE, 30_000), (FrameType.SPAWN, 50_000),
                                             (FrameType.RESIZE, 100_000)],
                         ids=["RESIZE 30,000 deep", "SPAWN 50,000 deep", "RESIZE 100,000 deep"])
def test_version_1_json_nested_too_deep_is_a_bad_frame(sessions: Sessions, kind: int, depth: int) -> None:
    """A 100,000-deep JSON RESIZE escaped as RecursionError (a traceback in the log, the connection left open);
    docs/LEGACY.md says a malformed payload is logged in one line and the connection closed. The 30,000-deep RESIZE
    has more values than a RESIZE may (4,096), the SPAWN is deeper than json parses but within its count; the
    100,000-deep RESIZE (200 KB) is over a RESIZE's 64 KiB: oversized, ignored as the original ignored those."""
    info = sessions.start("deep", ["cat"])
    deep = b'{"cols":' + b"[" * depth + b"]" * depth + b"}"
    oversized = len(deep) > wire.SESSION_LIMITS[kind].size
    with V1Client(Path(info.socket)) as bad, V1Client(Path(info.socket)) as good:
        bad.hello("tower")
        good.hello("terminal")
        bad.send(kind, deep)
        if oversized:
            bad.ping()
        else:
            bad.wait_closed()
        good.ping()
    log = Path(info.socket).with_suffix(".log").read_text()
    name = FrameType(kind).name
    assert (f"Protocol error: Invalid {name} payload" in log) != oversized
    assert "Traceback" not in log and "RecursionError" not in log
    sessions.stop("deep")


def test_legacy_main_config_nested_too_deep_is_invalid_json() -> None:
    """What `shellper legacy-main` parses its config with: a deep one is "Invalid JSON config", not a traceback."""
    deep = json.dumps({"command": "cat", "cwd": "/", "socketPath": "/tmp/x.sock"})[:-1] + ',"e":' + "[" * 100_000
    deep += "]" * 100_000 + "}"
    with pytest.raises(legacy.LegacyError, match="Invalid JSON config"):
        legacy.parse_launch_config(deep)


def test_the_deadline_waits_while_the_shellper_does_not_read(sessions: Sessions) -> None:
    """A terminal pastes 4 MiB into a child that takes no input for 3 s: the shellper stops reading the terminal
    (with a frame half read) and must not blame it for the frame it holds unfinished meanwhile (frame_timeout 1 s)."""
    info = sessions.start("paused", ["sh", "-c", "sleep 3; exec cat >/dev/null"], frame_timeout=1.0)
    line = b"x" * 63 + b"\n"
    paste = b"".join(wire.encode_data(line * 1000) for _ in range(64))  # 64 frames of 64,000 bytes
    with RawConn(info.socket, timeout=30) as conn:
        conn.send(hello("terminal", replay_bytes=0))
        conn.until(lambda f: isinstance(f, wire.Replay))
        started = time.monotonic()
        conn.send(paste + wire.encode(wire.Ping(nonce=9)))  # returns once the kernel holds the rest
        got = conn.until(lambda f: isinstance(f, wire.Pong) and f.nonce == 9, 60)
        assert not [f for f in got if isinstance(f, wire.Error)], got
        assert time.monotonic() - started > 2.0  # the child took nothing for 3 s: the paste waited that long
    sessions.stop("paused")


def _wakeups(pid: int) -> int:
    return status_kib(pid, "voluntary_ctxt_switches")  # not kB, but the same "Key: number" line


def test_no_timer_runs_once_frames_are_finished(sessions: Sessions) -> None:
    """The deadline costs nothing idle: after a frame left unfinished for a while is finished, its timer fires
    at most once more (it is not cancelled, see ClientConn._frame_expired) and then the shellper sleeps. (A guard,
    not a regression test: the shellper had no such timer before.)"""
    info = sessions.start("idle", ["sleep", "300"], frame_timeout=0.5)
    with RawConn(info.socket) as conn:
        conn.send(hello("viewer", replay_bytes=0))
        conn.until(lambda f: isinstance(f, wire.Replay))
        ping = wire.encode(wire.Ping(nonce=3))
        conn.send(ping[:3])
        assert not conn.frames(0.2)
        conn.send(ping[3:])
        conn.until(lambda f: isinstance(f, wire.Pong))
        assert not conn.frames(1.0)  # the timer's one late firing falls in here
        before = _wakeups(info.pid)
        assert not conn.frames(2.0)
        assert _wakeups(info.pid) - before <= 1, "the shellper woke while idle"
    sessions.stop("idle")


def test_each_frame_has_its_own_deadline_when_reads_end_mid_frame(target: tuple[str, Watcher, int]) -> None:
    """Frames that each finish in time, sent so that every read finishes one and begins the next (a frame is always
    pending): the deadline restarts with each frame begun, it does not run on from the first."""
    path, watcher, _ = target
    with RawConn(path) as conn:
        conn.send(hello("viewer", replay_bytes=0))
        conn.until(lambda f: isinstance(f, wire.Replay))
        pings = [wire.encode(wire.Ping(nonce=n)) for n in range(7)]
        conn.send(pings[0][:4])
        for n in range(1, 7):  # 0.3 s apart: 1.8 s in all, with a frame always unfinished; the deadline is 1 s
            pause = time.monotonic() + 0.3
            while (left := pause - time.monotonic()) > 0:
                assert not [f for f in conn.frames(left) if isinstance(f, wire.Error)] and not conn.eof
            conn.send(pings[n - 1][4:] + pings[n][:4])
        conn.send(pings[6][4:])
        got = conn.until(lambda f: isinstance(f, wire.Pong) and f.nonce == 6)
        assert not [f for f in got if isinstance(f, wire.Error)]
    watcher.ping()


# Rows of hyperlinked cells, each link as long as the model keeps (4 KiB): 200 KiB a row, the cheapest output
# whose drawing is as large as a 1000 x 500 screen's with colour on every cell.
LINKS_PROGRAM = r"""
import sys
rows = int(sys.argv[1])
cell = "\x1b]8;;http://x/" + "u" * 4000 + "\x1b\\X\x1b]8;;\x1b\\ "
for _ in range(rows):
    sys.stdout.write(cell * 50 + "\r\n")
sys.stdout.write("END-OF-LINKS")
sys.stdout.flush()
sys.stdin.readline()
"""


@pytest.mark.parametrize("rows", [24, 40])
def test_a_rendered_replay_too_large_for_a_frame_is_bounded(sessions: Sessions, rows: int) -> None:
    # 30 rows of scrollback and the screen: over 10 MiB drawn. At 24 rows the oldest scrollback lines are left
    # out until it fits; at 40 the screen alone does not, and the byte replay comes instead (PROTOCOL.md 8.6).
    # Either way the viewer is served: no oversized frame, no connection ended as too slow.
    name = f"links{rows}"
    sessions.start(name, [sys.executable, "-c", LINKS_PROGRAM, str(rows + 30)], cols=200, rows=rows)
    with sessions.connect(name, "tower", replay_bytes=0) as tower:
        output_until(tower, b"END-OF-LINKS", timeout=60)
    with sessions.connect(name, "viewer", timeout=60, rendered=1000) as viewer:
        replay = viewer.conn.replay
        assert replay is not None and len(replay.preamble or b"") <= wire.MAX_DRAWING
        if rows == 24:
            drawing = replay.preamble or b""
            assert not replay.data and drawing.count(b"http://x/") > 24 * 50  # the screen, and some history
            assert drawing.count(b"http://x/") < (rows + 30) * 50 and b"END-OF-LINKS" in drawing
        else:
            assert replay.data  # bytes, from where the ring starts, and the rest as output
            output_until(viewer, b"END-OF-LINKS", timeout=60)
        assert status(viewer).state == "running"  # and it is served on
    sessions.stop(name)
