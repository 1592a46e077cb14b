"""The output stream, byte for byte: replay, resume, gaps, slow clients, big pastes, terminal modes.

Children write known, deterministic bytes with their terminal in raw mode (no ``\\n`` -> ``\\r\\n``
translation), so the test knows the exact byte at every offset and compares what each client gets
against it: REPLAY, DATA and GAP frames must tile the stream exactly.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time

import pytest
from support.frames import (
    echo_roundtrip,
    expect_closed,
    hello,
    output_until,
    ping,
    raw_socket,
    read_until,
    recv_until,
    status,
)
from support.paths import PY
from support.processes import vm_kib
from support.sessions import NO_RESTART, Sessions
from support.waiting import poll_until, wait_gone

from shellper.client.blocking import Client
from shellper.daemon.clientconn import REPLAY_CHUNK
from shellper.protocol import wire

# ------------------------------------------------------------------------------------------- numbered lines

LINE = b"line %07d\r\n"
LINE_LEN = len(LINE % 0)
LINES_CHILD = r"""
import os, sys, tty
tty.setraw(0)
first, step = int(sys.argv[1]), int(sys.argv[2])
def emit(a, b):
    view = memoryview(b"".join(b"line %07d\r\n" % i for i in range(a, b)))
    while view:
        view = view[os.write(1, view):]
emit(0, first)
k = first
while os.read(0, 1):
    emit(k, k + step)
    k += step
"""


def lines(a: int, b: int) -> bytes:
    return b"".join(LINE % i for i in range(a, b))


def drain(client: Client, end: int, expected: bytes, timeout: float = 20.0) -> None:
    """Read until the client's position is ``end``; every DATA must be the expected bytes at its offset."""
    deadline = time.monotonic() + timeout
    while client.output.next_offset < end:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"position {client.output.next_offset} did not reach {end} within {timeout:g} s")
        at = client.output.next_offset
        f = client.recv(timeout=left)
        assert not isinstance(f, wire.Gap), f
        if isinstance(f, wire.Data):
            assert f.data == expected[at:at + len(f.data)], f"DATA at {at} differs from the stream"
    assert client.output.next_offset == end


def settled(sessions: Sessions, name: str, end: int) -> None:
    """Wait until the session's output has reached ``end`` (the child is then waiting for input)."""
    with sessions.connect(name, "viewer", replay_bytes=0) as probe:
        poll_until(lambda: status(probe).info["ring_end"] == end, what=f"output to reach {end}")


def test_replay_and_resume_are_exact(sessions: Sessions) -> None:
    ring = 2 * 1024 * 1024
    first = 3 * 1024 * 1024 // LINE_LEN  # 3 MiB of output into a 2 MiB ring
    step = 1000
    sessions.start("rp", [PY, "-c", LINES_CHILD, str(first), str(step)], ring_bytes=ring)
    stream = lines(0, first + 2 * step)
    end = first * LINE_LEN
    settled(sessions, "rp", end)
    with sessions.connect("rp", "terminal", replay_bytes=0) as driver:
        ring_start = status(driver).info["ring_start"]
        assert ring_start == end - ring  # plain ASCII: the ring trims to exactly its capacity
        assert status(driver).info["ring_end"] == end

        # Resume anywhere inside the ring: REPLAY starts exactly there, 1 MiB at most, then DATA.
        for resume in (ring_start, ring_start + 1, end - REPLAY_CHUNK - 7, end - 13, end):
            with sessions.connect("rp", "viewer", resume_from=resume) as c:
                assert c.replay is not None and c.welcome is not None
                assert (c.replay.offset, c.replay.gap) == (resume, 0)
                assert len(c.replay.data) == min(REPLAY_CHUNK, end - resume)
                assert c.replay.data == stream[resume:resume + len(c.replay.data)]
                assert c.welcome.ring_end == end
                drain(c, end, stream)

        # Resume below the ring's start: the gap is counted exactly.
        for resume in (0, 1, ring_start - 1):
            with sessions.connect("rp", "viewer", resume_from=resume) as c:
                assert c.replay is not None
                assert (c.replay.offset, c.replay.gap) == (ring_start, ring_start - resume)
                assert c.replay.data == stream[ring_start:ring_start + REPLAY_CHUNK]
                drain(c, end, stream)

        # No resume_from: the whole ring.
        with sessions.connect("rp", "viewer") as c:
            assert c.replay is not None
            assert (c.replay.offset, c.replay.gap) == (ring_start, 0)
            drain(c, end, stream)

        # Live output continues at the exact offsets for a resumed client and a fresh one.
        with sessions.connect("rp", "viewer", resume_from=end - 5) as c:
            driver.write(b"+")
            drain(c, end + step * LINE_LEN, stream)
            drain(driver, end + step * LINE_LEN, stream)
            driver.write(b"+")
            drain(c, end + 2 * step * LINE_LEN, stream)
            drain(driver, end + 2 * step * LINE_LEN, stream)
    sessions.stop("rp")


@pytest.mark.parametrize("replay_bytes", [0, 1, LINE_LEN * 10 + 3, 64 * 1024, 10**9])
def test_replay_bytes_selects_the_tail(sessions: Sessions, replay_bytes: int) -> None:
    first = 200 * 1024 // LINE_LEN
    sessions.start("rb", [PY, "-c", LINES_CHILD, str(first), "10"], ring_bytes=128 * 1024)
    stream = lines(0, first + 10)
    end = first * LINE_LEN
    settled(sessions, "rb", end)
    with sessions.connect("rb", "terminal", replay_bytes=0) as driver, \
            sessions.connect("rb", "viewer", replay_bytes=replay_bytes) as c:
        assert c.replay is not None and c.welcome is not None
        want = max(c.welcome.ring_start, end - replay_bytes)
        assert c.replay.gap == 0
        assert c.replay.offset == want  # plain ASCII: every byte is a safe boundary
        assert c.replay.data == stream[want:end]
        driver.write(b"+")
        drain(c, end + 10 * LINE_LEN, stream)
    sessions.stop("rb")


# ------------------------------------------------------------------------------------------- flood

BLOCK = 1024 * 1024
FLOOD_MIB = 64
BURST_MIB = 4
HEADER = b"READY\r\n"
FLOOD_CHILD = r"""
import os, sys, tty
tty.setraw(0)
os.write(1, b"READY\r\n")
base = (bytes(65 + (i * 7) % 26 for i in range(26)) * 40330)[:1 << 20]  # period 26: built whole, not byte by byte
total, burst = int(sys.argv[1]), int(sys.argv[2])
for k in range(total):
    if k % burst == 0:
        os.read(0, 1)  # the fast client has had the previous burst
    view = memoryview(b"%08d" % k + base[8:])
    while view:
        view = view[os.write(1, view):]
"""
_BASE = (bytes(65 + (i * 7) % 26 for i in range(26)) * (BLOCK // 26 + 1))[:BLOCK]  # the same bytes the child makes


def flood_bytes(offset: int, n: int) -> bytes:
    """The flood child's output at ``[offset, offset + n)``."""
    out = bytearray()
    while n > 0:
        if offset < len(HEADER):
            piece = HEADER[offset:offset + n]
        else:
            k, within = divmod(offset - len(HEADER), BLOCK)
            block = b"%08d" % k + _BASE[8:]
            piece = block[within:within + n]
        out += piece
        offset += len(piece)
        n -= len(piece)
    return bytes(out)


def test_slow_client_does_not_hold_back_the_child_or_the_others(sessions: Sessions) -> None:
    # The child writes 64 MiB in 4 MiB bursts, each as fast as it can, the next one once the fast client
    # has had the last: "fast" then holds on any machine (never 8 MiB, a ring, behind), while the slow
    # client, a viewer that reads nothing, falls 60 MiB behind. The shellper never waits for a viewer
    # (the fast terminal it would wait for, within bounds, if it fell half a ring behind: shellper.daemon.pacing).
    info = sessions.start("fl", [PY, "-c", FLOOD_CHILD, str(FLOOD_MIB), str(BURST_MIB)])
    child_end = len(HEADER) + FLOOD_MIB * BLOCK
    whole = hashlib.sha256(flood_bytes(0, child_end)).hexdigest()
    with sessions.connect("fl", "terminal") as fast, sessions.connect("fl", "viewer") as slow:
        read_until(fast, HEADER)
        read_until(slow, HEADER)  # then it stops reading while 64 MiB go by
        assert slow.output.next_offset == len(HEADER)

        digest = hashlib.sha256(HEADER)
        got = len(HEADER)
        deadline = time.monotonic() + 30
        exit_frame: wire.Exit | None = None
        burst = BURST_MIB * BLOCK
        fast.write(b"g")
        while exit_frame is None:
            f = fast.recv(timeout=max(0.0, deadline - time.monotonic()))
            assert f is not None, f"fast client stalled at {got}"
            assert not isinstance(f, wire.Gap), f"the fast client lost output: {f}"
            assert not isinstance(f, wire.Data) or len(f.data) <= REPLAY_CHUNK  # never a frame a peer must skip
            if isinstance(f, wire.Data) and got < child_end:
                take = f.data[:child_end - got]
                digest.update(take)
                before, got = got, got + len(take)
                if (got - len(HEADER)) // burst > (before - len(HEADER)) // burst and got < child_end:
                    fast.write(b"g")
            elif isinstance(f, wire.Exit):
                exit_frame = f
                assert fast.output.next_offset == child_end  # EXIT right after the child's last byte
        assert got == child_end and digest.hexdigest() == whole
        assert (exit_frame.code, exit_frame.exit_class) == (0, "clean")
        assert info.child_pid is not None and wait_gone(info.child_pid, 0)
        assert vm_kib(info.pid, "VmHWM") < 80 * 1024, "the shellper's memory grew with the slow client"

        # The slow client now reads: what its socket held, one exact GAP, then contiguous data.
        gaps: list[wire.Gap] = []
        slow_exit: wire.Exit | None = None
        deadline = time.monotonic() + 30
        while slow_exit is None:
            at = slow.output.next_offset
            f = slow.recv(timeout=max(0.0, deadline - time.monotonic()))
            assert f is not None, f"slow client stalled at {at}"
            if isinstance(f, wire.Gap):
                assert f.missed == f.offset - at and f.missed > 0
                gaps.append(f)
            elif isinstance(f, wire.Data):
                n = min(len(f.data), child_end - at)
                if n > 0:
                    assert f.data[:n] == flood_bytes(at, n), f"slow client: wrong bytes at {at}"
            elif isinstance(f, wire.Exit):
                slow_exit = f
        assert slow.output.next_offset == child_end
        assert slow_exit == exit_frame
        # It stopped reading during the flood, so it resumed once, after the flood: at the final ring start.
        assert [g.offset for g in gaps] == [status(fast).info["ring_start"]]
    sessions.stop("fl")


# ------------------------------------------------------------------------------------------- input

PASTE_CHILD = r"""
import hashlib, os, sys, tty
tty.setraw(0)
n = int(sys.argv[1])
os.write(1, b"READY\r\n")
h = hashlib.sha256()
got = 0
while got < n:
    chunk = os.read(0, min(65536, n - got))
    h.update(chunk)
    got += len(chunk)
os.write(1, b"SHA " + h.hexdigest().encode() + b" %d\r\n" % got)
"""


def test_a_one_mib_paste_arrives_whole_and_in_order(sessions: Sessions) -> None:
    n = 1024 * 1024
    paste = bytes((i * 131 + (i >> 8)) % 256 for i in range(n))  # every byte value, no simple period
    sessions.start("pa", [PY, "-c", PASTE_CHILD, str(n)])
    with sessions.connect("pa", "terminal") as term:
        read_until(term, b"READY\r\n")
        term.write(paste)
        out = output_until(term, b"\r\n", timeout=30)
        assert out.strip() == b"SHA " + hashlib.sha256(paste).hexdigest().encode() + b" %d" % n
        recv_until(term, wire.Exit)
    sessions.stop("pa")


# ------------------------------------------------------------------------------------------- modes

ALT_CHILD = r"""
import os, sys, tty
tty.setraw(0)
os.write(1, b"\x1b[?1049h\x1b[?25l\x1b[?2004h")
filler = b"".join(b"row %06d\r\n" % i for i in range(int(sys.argv[1])))
view = memoryview(filler)
while view:
    view = view[os.write(1, view):]
os.write(1, b"DRAWN\r\n")
os.read(0, 1)
os.write(1, b"\x1b[?1049l")
os.read(0, 1)
"""


def test_reattach_to_a_full_screen_program_gets_its_modes(sessions: Sessions) -> None:
    rows = 200 * 1024 // 12  # more than the 64 KiB ring: the ?1049h itself is trimmed away
    sessions.start("al", [PY, "-c", ALT_CHILD, str(rows)], ring_bytes=64 * 1024)
    with sessions.connect("al", "terminal") as term:
        read_until(term, b"DRAWN\r\n")
        with sessions.connect("al", "viewer") as late:
            assert late.replay is not None and late.welcome is not None
            assert late.welcome.ring_start > 0
            assert b"\x1b[?1049h" not in late.replay.data  # trimmed from the ring...
            assert b"\x1b[?1049h" in late.replay.preamble  # ...but re-established
            assert b"\x1b[?2004h" in late.replay.preamble and b"\x1b[?25l" in late.replay.preamble
        with sessions.connect("al", "viewer", replay_bytes=100) as tail:
            assert tail.replay is not None and b"\x1b[?1049h" in tail.replay.preamble
        term.write(b"x")  # the program leaves the alternate screen
        output_until(term, b"\x1b[?1049l")
        with sessions.connect("al", "viewer", replay_bytes=0) as after:
            assert after.replay is not None and b"\x1b[?1049h" not in after.replay.preamble
        term.write(b"x")
        recv_until(term, wire.Exit)
    sessions.stop("al")


ONE_MIB_CHILD = r"""
import os, sys, tty
tty.setraw(0)
os.write(1, b"READY\r\n")
os.read(0, 1)
view = memoryview((bytes(range(65, 91)) * 40330)[:1 << 20])
while view:
    view = view[os.write(1, view):]
if sys.argv[1] == "wait":
    os.read(0, 1)
"""


def test_exit_stays_in_place_when_a_gap_skips_past_it(sessions: Sessions) -> None:
    """A stalled client's EXIT of an old child comes right after the GAP, before the new child's output."""
    sessions.start("eg", [PY, "-c", ONE_MIB_CHILD, "exit"], ring_bytes=64 * 1024, policy=NO_RESTART)
    with sessions.connect("eg", "tower") as tower, sessions.connect("eg", "viewer") as slow:
        read_until(tower, b"READY\r\n")
        read_until(slow, b"READY\r\n")  # and then it stops reading
        tower.write(b"g")
        first_exit = recv_until(tower, wire.Exit, timeout=20)
        child1_end = tower.output.next_offset
        tower.send(wire.Spawn(argv=[PY, "-c", ONE_MIB_CHILD, "wait"]))
        output_until(tower, b"READY\r\n")
        tower.write(b"g")
        end = tower.output.next_offset + (1 << 20)
        while tower.output.next_offset < end:
            tower.recv(timeout=20)
        ring_start = status(tower).info["ring_start"]
        assert ring_start > child1_end  # the old child's exit point has left the ring

        after_gap: list[wire.Frame] = []
        gap: wire.Gap | None = None
        while not any(isinstance(f, wire.Exit) for f in after_gap):
            at = slow.output.next_offset
            f = slow.recv(timeout=20)
            assert f is not None
            if isinstance(f, wire.Gap):
                assert gap is None and f.missed == f.offset - at
                gap = f
            elif gap is not None:
                after_gap.append(f)
            else:
                assert not isinstance(f, wire.Exit), "EXIT before the output it follows"
        assert gap is not None and gap.offset == ring_start
        assert isinstance(after_gap[0], wire.Exit) and after_gap[0].child_pid == first_exit.child_pid
    sessions.stop("eg")


def test_a_client_that_never_reads_its_events_is_dropped_as_too_slow(sessions: Sessions) -> None:
    sessions.start("ts", ["cat"])
    with sessions.connect("ts", "tower", replay_bytes=0) as deaf, sessions.connect("ts", "terminal") as term:
        # Every RESIZE is an EVENT for the tower, which never reads: its socket fills, then its queue.
        term.send_bytes(wire.encode(wire.Resize(cols=80, rows=24)) * 12000)
        ping(term)
        frames = expect_closed(deaf, timeout=20)
        events = [f for f in frames if isinstance(f, wire.Event)]
        assert 1000 < len(events) < 12000
        assert [(f.code, f.fatal) for f in frames if isinstance(f, wire.Error)] == [("too_slow", True)]
        assert isinstance(frames[-1], wire.Error)
        echo_roundtrip(term, b"unaffected")
        assert [c["role"] for c in status(term).info["clients"]] == ["terminal"]
    sessions.stop("ts")


def test_history_then_exit_for_a_client_of_an_exited_session(sessions: Sessions) -> None:
    """More history than one REPLAY holds: REPLAY, DATA to the end, and only then the EXIT."""
    n = 2 * 1024 * 1024 // LINE_LEN + 77
    sessions.start("hx", [PY, "-c", LINES_CHILD.replace("while os.read(0, 1):", "while False:"), str(n), "1"],
                   policy=NO_RESTART)
    stream = lines(0, n)
    with sessions.connect("hx", "viewer") as first:
        recv_until(first, wire.Exit)
    with sessions.connect("hx", "viewer", resume_from=0, replay_bytes=5) as c:  # resume_from wins
        assert c.replay is not None and c.welcome is not None and c.welcome.state == "exited"
        assert (c.replay.offset, len(c.replay.data)) == (0, REPLAY_CHUNK)
        end = c.welcome.ring_end
        got = bytearray(c.replay.data)
        while True:
            f = c.recv(timeout=10)
            assert f is not None and not isinstance(f, wire.Gap)
            if isinstance(f, wire.Exit):
                break
            if isinstance(f, wire.Data):
                got += f.data
        assert len(got) == end and got.startswith(stream)  # then the shellper's exit notice
        assert f.code == 0
    sessions.stop("hx")


STUCK_READER = r"""
import os, select, signal, tty
tty.setraw(0)
if os.fork() == 0:  # holds the terminal open, reads nothing, outlives the child
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what ignores SIGTERM is hung up first
    os.write(1, b"HOLDER\r\n")
    while True:
        signal.pause()
os.write(1, b"READY\r\n")
select.select([0], [], [])  # input has arrived (and is left unread): leave
"""


def test_input_held_back_for_a_stuck_terminal_resumes_when_the_child_exits(sessions: Sessions) -> None:
    """A paster throttled because nobody reads the terminal is not left deaf once the child is gone."""
    sessions.start("in", [PY, "-c", STUCK_READER], policy=NO_RESTART, grace=0.2)
    with sessions.connect("in", "terminal") as term:
        seen = read_until(term, b"READY\r\n")
        if b"HOLDER" not in seen:
            output_until(term, b"HOLDER\r\n")
        # One frame: the shellper fills the terminal, keeps the rest (> 1 MiB) and stops reading this
        # client, all before the child can even see the input and exit.
        term.write(b"p" * (3 << 19))
        ex = recv_until(term, wire.Exit)
        assert (ex.code, ex.state) == (0, "exited")
        ping(term)  # read again: the input it was held back for has nowhere to go any more
    sessions.stop("in")


def test_clients_attaching_during_output_get_a_seamless_stream(sessions: Sessions) -> None:
    """WELCOME, REPLAY, then DATA exactly where REPLAY ended, even while the child is writing."""
    n = 40000
    sessions.start("at", [PY, "-c", LINES_CHILD, "1", str(n)], ring_bytes=4 * 1024 * 1024)
    stream = lines(0, 1 + 3 * n)
    settled(sessions, "at", LINE_LEN)  # line 0: the terminal is raw now, input is not echoed
    with sessions.connect("at", "terminal", replay_bytes=0) as driver:
        for burst in range(1, 4):
            end = (1 + burst * n) * LINE_LEN
            driver.write(b"+")  # the child now writes n lines while viewers attach
            attached = []
            for i in range(8):
                attached.append(sessions.connect("at", "viewer", **({"resume_from": 0} if i % 2 else {})))
            try:
                for c in attached:
                    assert c.replay is not None and c.welcome is not None
                    assert c.replay.data == stream[c.replay.offset:c.replay.offset + len(c.replay.data)]
                    drain(c, end, stream)
            finally:
                for c in attached:
                    c.close()
            drain(driver, end, stream)
    sessions.stop("at")


ENDLESS_CHILD = r"""
import os, tty
tty.setraw(0)
block = bytes(65 + i % 26 for i in range(65536))
while True:
    os.write(1, block)
"""


@pytest.mark.parametrize("hello_fields", [{"resume_from": 0}, {"replay_bytes": 0}], ids=["replay", "live"])
def test_clients_dying_mid_stream_leave_no_error_and_no_fd(sessions: Sessions, hello_fields: dict[str, int]) -> None:
    """Peers that vanish while the shellper is pushing history or a live flood at them: no exception in the
    shellper, nothing of theirs left open, and the output goes on."""
    info = sessions.start("dy", [PY, "-c", ENDLESS_CHILD], ring_bytes=4 * 1024 * 1024)

    def fd_count() -> int:
        return len(os.listdir(f"/proc/{info.pid}/fd"))

    with sessions.connect("dy", "viewer", replay_bytes=0) as probe:
        poll_until(lambda: status(probe).info["ring_end"] > 4 * 1024 * 1024, what="history to pile up")
        fds = fd_count()
        for i in range(60):
            with contextlib.closing(raw_socket(sessions.dir / "dy.sock")) as s:
                s.sendall(hello("viewer", **hello_fields))
                want = (i % 8) * 32 * 1024  # 0: gone before the first byte
                while want > 0:
                    chunk = s.recv(min(want, 65536))
                    assert chunk
                    want -= len(chunk)
        poll_until(lambda: len(status(probe).info["clients"]) == 1, what="the dead clients to be forgotten")
        poll_until(lambda: fd_count() == fds, what="their fds to be closed")
        end = status(probe).info["ring_end"]
        poll_until(lambda: status(probe).info["ring_end"] > end, what="more output")
    log = (sessions.dir / "dy.log").read_text()
    assert "Traceback" not in log and "Exception" not in log, log
    sessions.stop("dy")
