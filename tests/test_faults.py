"""Fault injection against real shellpers: kill -9, killed clients, stalled clients, immortal grandchildren,
a full disk, a removed runtime directory, a crash storm. Each scenario states exactly what must hold.

Fast versions run in ``make test``; the full sizes are marked slow (``make soak``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.frames import read_until, recv_until
from support.launchers import settled
from support.paths import SHELLPER_CLI
from support.sessions import Sessions, left_in
from support.soak import (
    PatternStream,
    RawConn,
    Reaper,
    child,
    hello,
    identity,
    is_dead,
    marked,
    quiet_fds,
    reaper,
    rss_mib,
    scales,
    status_kib,
)
from support.waiting import poll_until, wait_gone

from shellper.client.blocking import Client, SessionNotFound
from shellper.core import structs
from shellper.core.exits import RestartPolicy
from shellper.host.record import SessionLock, SessionRecord, read_record
from shellper.host.survivors import find_survivors
from shellper.protocol import wire
from tower_client.apply import apply
from tower_client.discover import discover
from tower_client.reconcile import ReconcileAction, Registry, RegistryRow, reconcile

__all__ = ["reaper"]  # the fixture, re-exported for pytest

FAST_POLICY = {"backoff_initial": 0.02, "backoff_max": 0.1, "jitter": 0.0}


def status_info(sessions: Sessions, name: str) -> dict[str, object]:
    with sessions.connect(name, "viewer", replay_bytes=0) as viewer:
        reply = viewer.request(wire.Status(), wire.StatusReply)
    assert isinstance(reply, wire.StatusReply)
    info: dict[str, object] = {"state": reply.state, **reply.info}
    return info


def other_clients(sessions: Sessions, name: str) -> int:
    """Clients attached besides the STATUS probe itself."""
    clients = status_info(sessions, name)["clients"]
    assert isinstance(clients, list)
    return len(clients) - 1


def ring_end(sessions: Sessions, name: str) -> int:
    return int(status_info(sessions, name)["ring_end"])  # type: ignore[call-overload]


def pids_line(client: Client) -> list[int]:
    out = read_until(client, b"PIDS ", 10)
    while b"\n" not in out[out.index(b"PIDS "):]:
        frame = client.recv(timeout=10)
        if isinstance(frame, wire.Data):
            out += frame.data
    line = out[out.index(b"PIDS "):].split(b"\n", 1)[0]
    return [int(p) for p in line.split()[1:]]


# --------------------------------------------------------------------------------------------- kill -9


def test_kill9_mid_flood_leaves_no_process_and_reconcile_respawns(sessions: Sessions, reaper: Reaper) -> None:
    """The child dies with the shellper (PDEATHSIG); grandchildren that ignore the hang-up, in other
    groups or in a session of their own are found by their marks and ended by tower_client's apply."""
    info = sessions.start("k9", child("tree", "flood"))
    assert info.child_pid is not None
    kid = identity(info.child_pid)
    with sessions.connect("k9") as tower:
        grandchildren = [identity(p) for p in pids_line(tower)]
        reaper.track(kid, *grandchildren)
        assert len(grandchildren) == 4
        tower.write(b"g")
        flooded = 0
        while flooded < 4 * 1024 * 1024:  # mid-flood: megabytes are going by
            frame = tower.recv(timeout=10)
            if isinstance(frame, wire.Data):
                flooded += len(frame.data)
        os.kill(info.pid, signal.SIGKILL)
        assert wait_gone(info.pid, 10)
    poll_until(lambda: is_dead(kid), 10, what="the child to die with its shellper (PDEATHSIG)")
    survivors = [g.pid for g in grandchildren if not is_dead(g)]
    assert sorted(survivors) == sorted(g.pid for g in grandchildren), "grandchildren are immune to the hang-up"
    assert sorted(marked(info.instance_id)) == sorted(survivors)

    registry = Registry((RegistryRow("k9", info.instance_id),))
    decisions = reconcile(registry, discover(sessions.dir), now=time.time())
    assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.CLEAN, "dead"),
                                                         (ReconcileAction.RESPAWN, "dead")]
    report = apply(decisions, grace=0.3, confirm_timeout=5.0)
    assert report.ok, report.to_dict()
    cleaned = report.outcomes[0]
    assert cleaned.result == "cleaned" and sorted(cleaned.survivors) == sorted(survivors)
    assert all(is_dead(g) for g in grandchildren)
    assert marked(info.instance_id) == []
    assert left_in(sessions.dir) == []
    print(f"\nkill -9 mid-flood: child gone by PDEATHSIG; {len(survivors)} grandchildren immune to the hang-up "
          f"ended by apply(): {cleaned.detail}")


def test_kill9_child_group_dies_with_the_shellper_without_help(sessions: Sessions, reaper: Reaper) -> None:
    """Plain members of the child's group need no Tower: PDEATHSIG ends the child, the hang-up its group."""
    info = sessions.start("hup", ["sh", "-c", "sleep 300 & sleep 301 & echo started; wait"])
    assert info.child_pid is not None
    with sessions.connect("hup") as tower:
        read_until(tower, b"started")
    group = [identity(p) for p in (int(n) for n in os.listdir("/proc") if n.isdigit()) if _pgid(p) == info.child_pid]
    reaper.track(*group)
    assert len(group) == 3  # sh and both sleeps
    os.kill(info.pid, signal.SIGKILL)
    assert wait_gone(info.pid, 10)
    poll_until(lambda: all(is_dead(m) for m in group), 10, what="the child's group to die with the shellper")
    assert marked(info.instance_id) == []
    report = apply(reconcile(Registry(), discover(sessions.dir), now=time.time()), grace=0.3)
    assert report.ok and report.outcomes[0].survivors == () and left_in(sessions.dir) == []


def _pgid(pid: int) -> int | None:
    with contextlib.suppress(OSError):
        return os.getpgid(pid)
    return None


def survivor_pids(record: SessionRecord) -> list[int]:
    found = find_survivors(record)
    for fd in found.values():
        fd.close()
    return sorted(found)


def test_survivor_reap_spares_a_recycled_session_id(sessions: Sessions, reaper: Reaper) -> None:
    """A record whose child pid now leads somebody else's session: never touched, whatever its ticks."""
    info = sessions.start("rec", ["sleep", "300"])
    os.kill(info.pid, signal.SIGKILL)
    assert wait_gone(info.pid, 10)
    record = read_record(sessions.dir / "rec.json")
    assert record.child_start_time is not None
    ticks = os.sysconf("SC_CLK_TCK")
    recorded = record.child_start_time
    poll_until(lambda: time.clock_gettime(time.CLOCK_BOOTTIME) * ticks > recorded + 2, 5, what="a later tick")
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)  # a session leader, started later
    try:
        reaper.track(identity(stranger.pid))
        fake = structs.replace(record, child_pid=stranger.pid)  # as if its pid had been recycled
        assert stranger.pid not in survivor_pids(fake)
        # Not even when the start ticks collide too (165 of 200 forced reuses did): a session id is no mark.
        own_ticks = identity(stranger.pid).start_time
        assert stranger.pid not in survivor_pids(structs.replace(fake, child_start_time=own_ticks))
    finally:
        stranger.kill()
        stranger.wait()
    report = apply(reconcile(Registry(), discover(sessions.dir), now=time.time()), grace=0.3)
    assert report.ok and left_in(sessions.dir) == []


# --------------------------------------------------------------------------------------------- killed clients


def _killed_client(path: str, hello_bytes: bytes, read_bytes: int) -> tuple[int, int]:
    """Fork a client that handshakes, reads ``read_bytes`` and reports; returns (pid, report fd)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked client
        try:
            os.close(r)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            sock.sendall(hello_bytes)
            got = 0
            while got < read_bytes:
                chunk = sock.recv(min(65536, read_bytes - got))
                if not chunk:
                    break
                got += len(chunk)
            os.write(w, b"r")
            while True:  # hold the connection, reading nothing more, until killed
                select.select([], [], [])
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


@dataclass(frozen=True)
class KillScale:
    rounds: int


@scales(KillScale(100), KillScale(1000))
def test_tower_killed_mid_replay_and_mid_flood(sessions: Sessions, scale: KillScale) -> None:
    """Clients SIGKILLed while history is replayed to them or live output floods them: the shellper keeps
    running, its fds and memory come back to baseline, and the child's output never stops."""
    info = sessions.start("kill", child("pattern", "0"))
    poll_until(lambda: ring_end(sessions, "kill") == len(b"READY\n"), 10, what="READY")
    with sessions.connect("kill", replay_bytes=0) as starter:
        starter.write(b"g")
    poll_until(lambda: ring_end(sessions, "kill") > 8 * 1024 * 1024, 30, what="the ring to fill")
    rng = __import__("random").Random(7)
    hellos = [hello("tower"), hello("tower", resume_from=0), hello("viewer", replay_bytes=0),
              hello("terminal", replay_bytes=4 * 1024 * 1024)]

    def one_round() -> None:
        pid, ready = _killed_client(info.socket, rng.choice(hellos), rng.randrange(0, 3 * 1024 * 1024))
        try:
            select.select([ready], [], [], 10)
        finally:
            os.close(ready)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)

    for _ in range(30):  # warm-up: the allocator's working set (glibc keeps freed heap for reuse)
        one_round()
    base_fds = quiet_fds(info.pid, info.socket)
    base_rss = rss_mib(info.pid)
    last_end = first_end = ring_end(sessions, "kill")
    started = time.monotonic()
    for i in range(scale.rounds):
        one_round()
        if i % 10 == 9:
            end = ring_end(sessions, "kill")
            assert end > last_end, f"the child's output stopped after {i + 1} killed clients"
            last_end = end
    poll_until(lambda: quiet_fds(info.pid, info.socket) == base_fds, 10, what=f"the shellper's fds back to {base_fds}")
    poll_until(lambda: rss_mib(info.pid) <= base_rss + 16, 10,
               what=f"the shellper's RSS back near {base_rss:.0f} MiB (now {rss_mib(info.pid):.0f})")
    assert wait_gone(info.pid, 0) is False
    print(f"\nkilled clients: {scale.rounds} in {time.monotonic() - started:.1f} s; the child wrote "
          f"{(last_end - first_end) >> 20} MiB meanwhile; shellper fds back to {base_fds}, "
          f"RSS {base_rss:.0f} -> {rss_mib(info.pid):.0f} MiB")
    sessions.stop("kill")


def test_connection_churn_keeps_memory_flat(sessions: Sessions) -> None:
    """Clients that leave half a frame behind and go: each one's memory is freed when it goes (not held
    by its cancelled handshake timer, nor by a transport/protocol cycle waiting for the cyclic GC)."""
    info = sessions.start("churn", ["sleep", "300"], handshake_timeout=300.0)  # a cancelled timer lives long
    # the decoder holds half a frame until the client goes
    half_frame = wire.HEADER.pack(wire.FrameType.DATA, 1 << 20) + bytes(512 * 1024)
    rss = []
    for _ in range(4):
        for _ in range(40):
            with RawConn(info.socket) as conn:
                conn.send(hello("viewer", replay_bytes=0))
                conn.until(lambda f: isinstance(f, wire.Replay))
                conn.send(half_frame)
        poll_until(lambda: other_clients(sessions, "churn") == 0, 10, what="the clients to go")
        rss.append(rss_mib(info.pid))
    print(f"\nconnection churn: shellper RSS after each 40 clients (20 MiB of half frames): "
          f"{[round(r, 1) for r in rss]} MiB")
    assert rss[3] - rss[1] < 8, f"memory grew with closed connections: {rss}"
    sessions.stop("churn")


def test_input_sent_just_before_hanging_up_is_delivered(sessions: Sessions) -> None:
    """``shellper send`` style: connect, send input, close at once. The shellper may still be writing the
    handshake's last frames when the client is gone (EPIPE); what the client sent must reach the child."""
    sessions.start("hangup", child("ticker", "60"))
    with sessions.connect("hangup", "viewer", replay_bytes=0) as viewer:
        for i in range(30):
            with sessions.connect("hangup") as sender:
                sender.write(b"tok%d\n" % i)
        out = read_until(viewer, b"in:tok29\r\n")
    missing = [i for i in range(30) if b"in:tok%d\r\n" % i not in out]
    assert missing == [], f"input lost for {missing}"
    sessions.stop("hangup")


# --------------------------------------------------------------------------------------------- stalled client


@dataclass(frozen=True)
class FloodScale:
    total: int
    ring: int


def _drain_pattern(reader: RawConn, total: int, stream: PatternStream | None = None) -> PatternStream:
    """Read a pattern child's flood to its end, checking every byte and every GAP."""
    base = len(b"READY\n")
    stream = stream or PatternStream(next=base, base=base, total=total)
    while not stream.done:
        for frame in reader.frames(30):
            if isinstance(frame, wire.Data):
                stream.data(frame.data)
            elif isinstance(frame, wire.Gap):
                stream.gap(frame)
        assert not reader.eof
    return stream


def _read_flood(reader: RawConn, total: int) -> PatternStream:
    """Read a pattern child's whole flood as the tower (which sends the go byte); check every byte."""
    stream = PatternStream(next=0, base=len(b"READY\n"), total=total)
    stream.data(b"READY\n")
    reader.send(wire.encode_data(b"g"))
    _drain_pattern(reader, total, stream)
    assert stream.gaps == [] and stream.pattern_bytes == total, "the reading client lost bytes"
    return stream


def _flood_session(sessions: Sessions, name: str, scale: FloodScale) -> str:
    info = sessions.start(name, child("pattern", str(scale.total)), ring_bytes=scale.ring)
    poll_until(lambda: ring_end(sessions, name) == len(b"READY\n"), 10, what="READY (the child is in raw mode)")
    return info.socket


@scales(FloodScale(32 * 1024 * 1024, 16 * 1024 * 1024), FloodScale(256 * 1024 * 1024, 128 * 1024 * 1024))
def test_stalled_client_does_not_slow_the_child(sessions: Sessions, scale: FloodScale) -> None:
    """One client stops reading while the child floods: the child runs at full speed, the reading client
    gets every byte, the stalled one an exact GAP when it resumes; shellper memory stays bounded."""
    with RawConn(_flood_session(sessions, "alone", scale)) as reader:  # the reference: nobody stalls
        reader.send(hello("tower"))
        reader.until(lambda f: isinstance(f, wire.Replay))
        alone = _read_flood(reader, scale.total).child_seconds()
    sessions.stop("alone")
    path = _flood_session(sessions, "flood", scale)
    pid = sessions.started[-1].pid
    base = len(b"READY\n")
    with RawConn(path) as reader, sessions.connect("flood", "viewer") as stalled:
        reader.send(hello("tower"))
        reader.until(lambda f: isinstance(f, wire.Replay))
        poll_until(lambda: other_clients(sessions, "flood") == 2, 10, what="both clients attached")
        rss_before = rss_mib(pid)
        stream = _read_flood(reader, scale.total)
        child_seconds = stream.child_seconds()
        hwm = status_kib(pid, "VmHWM") / 1024
        # The stalled client now resumes: buffered output, one exact GAP, then the ring to its end.
        assert stalled.replay is not None and stalled.output.next_offset == base
        late = PatternStream(next=base, base=base, total=scale.total)
        while not late.done:
            frame = stalled.recv(timeout=30)
            if isinstance(frame, wire.Data):
                late.data(frame.data)
            elif isinstance(frame, wire.Gap):
                late.gap(frame)
            assert frame is not None, "the stalled client got nothing more"
        assert len(late.gaps) == 1, late.gaps
        gap_offset, missed = late.gaps[0]  # PatternStream checked missed == offset - position
        end = stream.next
        assert late.next == end and gap_offset >= end - scale.ring
        assert late.pattern_bytes + missed == scale.total  # every byte either delivered or counted
    rate = scale.total / max(child_seconds, 1e-6) / 2**20
    print(f"\nflood {scale.total >> 20} MiB: child {child_seconds:.2f} s ({rate:.0f} MiB/s; {alone:.2f} s with "
          f"nobody stalled), gap {missed >> 20} MiB, shellper RSS {rss_before:.0f} -> peak {hwm:.0f} MiB")
    assert child_seconds <= 2 * alone + 1.0, "the stalled client slowed the child down"
    assert hwm <= rss_before + scale.ring / 2**20 + 64, f"shellper peak RSS {hwm:.0f} MiB"
    sessions.stop("flood")


def _held(sessions: Sessions, name: str) -> bool:
    return bool(status_info(sessions, name)["output_held"])


HELD_RING, HELD_TOTAL = 256 * 1024, 4 * 1024 * 1024
"""A flood of 16 rings: far more than a tower that does not read could be given without holding it back."""


@contextlib.contextmanager
def _tower_flood(sessions: Sessions, name: str, role: str = "tower") -> Iterator[RawConn]:
    """A pattern flood started by a tower (or terminal) that has read none of it yet."""
    path = _flood_session(sessions, name, FloodScale(HELD_TOTAL, HELD_RING))
    with RawConn(path) as tower:
        tower.send(hello(role))
        tower.until(lambda f: isinstance(f, wire.Replay))
        tower.send(wire.encode_data(b"g"))
        yield tower


@pytest.mark.parametrize("role", ["tower", "terminal"])
def test_a_tower_that_reads_late_loses_nothing(sessions: Sessions, role: str) -> None:
    """The tower (or a terminal) does not read while the child writes 16 rings' worth: the shellper stops
    reading the PTY (the child blocks) instead of letting the ring overwrite what it has not had; once it
    reads, it gets every byte and no GAP. (A viewer in its place gets a GAP: above.)"""
    with _tower_flood(sessions, "late", role) as tower:
        poll_until(lambda: _held(sessions, "late"), 10, what="the shellper to hold output for the tower")
        assert ring_end(sessions, "late") < len(b"READY\n") + HELD_TOTAL  # held back, not finished
        shown = subprocess.run([*SHELLPER_CLI, "--dir", str(sessions.dir), "status", "late"], capture_output=True,
                               text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert "output held: the tower or a terminal is more than half a ring behind" in shown.stdout, shown
        stream = _drain_pattern(tower, HELD_TOTAL)
        assert stream.gaps == [] and stream.pattern_bytes == HELD_TOTAL
    assert not _held(sessions, "late")
    sessions.stop("late")


def test_a_tower_that_stops_reading_is_waited_for_only_briefly(sessions: Sessions) -> None:
    """A tower that takes nothing holds the child back for shellper.daemon.pacing.STALL_SECONDS, then the
    child runs on and the tower, when it reads again, gets one exact GAP; the log says why."""
    end = len(b"READY\n") + HELD_TOTAL
    with _tower_flood(sessions, "hung") as tower:
        poll_until(lambda: ring_end(sessions, "hung") >= end, 30, what="the child to finish without the tower")
        stream = _drain_pattern(tower, HELD_TOTAL)
        assert len(stream.gaps) == 1 and stream.pattern_bytes + stream.gaps[0][1] == HELD_TOTAL
    assert "took no output for" in Path(sessions.started[-1].log).read_text()
    sessions.stop("hung")


@pytest.mark.parametrize("how", ["sigterm", "new-tower"])
def test_held_output_does_not_block_stopping_or_a_new_tower(sessions: Sessions, how: str) -> None:
    """While output is held for a tower that does not read, SIGTERM still stops the session, and a
    tower that replaces it (here: the STOP sender) is not kept waiting by the old one's lag."""
    pid_of = len(sessions.started)
    with _tower_flood(sessions, "held"):
        pid = sessions.started[pid_of].pid
        poll_until(lambda: _held(sessions, "held"), 10, what="output held for the tower")
        if how == "sigterm":
            os.kill(pid, signal.SIGTERM)
            assert wait_gone(pid, 10), "the shellper did not stop while holding output"
        else:
            sessions.stop("held")  # connects as the tower: the old one is replaced and closed
            assert wait_gone(pid, 0)


# --------------------------------------------------------------------------------------------- immortal tree


def test_stop_ends_grandchildren_that_ignore_hup_and_term(sessions: Sessions, reaper: Reaper) -> None:
    info = sessions.start("tree", child("tree", "idle"), grace=0.3)
    assert info.child_pid is not None
    with sessions.connect("tree") as tower:
        members = [identity(info.child_pid), *(identity(p) for p in pids_line(tower))]
    reaper.track(*members)
    assert not any(is_dead(m) for m in members)
    started = time.monotonic()
    sessions.stop("tree", grace=0.3)
    assert [m.pid for m in members if not is_dead(m)] == []
    assert marked(info.instance_id) == []
    assert time.monotonic() - started < 10


# --------------------------------------------------------------------------------------------- disk and directory


@pytest.fixture
def tiny_fs() -> Iterator[Path]:
    """A 64 KiB tmpfs as the runtime directory (needs root and mount(2); skipped otherwise)."""
    mnt = Path(tempfile.mkdtemp(prefix="sp-fs-", dir="/tmp"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        mnt.rmdir()


def _fill(directory: Path) -> Path:
    """Write a file until the filesystem says ENOSPC."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    return filler


def test_disk_full_keeps_serving_and_reports(tiny_fs: Path) -> None:
    sessions = Sessions(tiny_fs)
    try:
        info = sessions.start("full", child("ticker", "0.05"), policy=RestartPolicy(**FAST_POLICY))
        assert info.child_pid is not None
        with sessions.connect("full", resume_from=0) as tower:
            read_until(tower, b"t1\r\n")
            filler = _fill(tiny_fs)
            os.kill(info.child_pid, signal.SIGKILL)  # a crash and a restart: record writes that fail
            recv_until(tower, wire.Exit)
            recv_until(tower, wire.Event, where=lambda e: e.kind == "spawned")
            tower.write(b"still-here\n")
            read_until(tower, b"in:still-here")
            error = status_info(sessions, "full")["record_error"]
            assert "No space left" in str(error), error
            assert read_record(tiny_fs / "full.json").exit_count == 0  # the old record: nothing torn
            filler.unlink()
            os.kill(info.pid, signal.SIGUSR1)  # retry the record now
            poll_until(lambda: read_record(tiny_fs / "full.json").exit_count == 1, 10, what="the record rewritten")
            assert status_info(sessions, "full")["record_error"] is None
            assert tower.output.gaps == []
            log = (tiny_fs / "full.log").read_text()
            assert "dropped while the log was unwritable" in log or "could not write record" in log
        sessions.stop("full")
    finally:
        problems = sessions.cleanup()
    assert problems == []


def _collect(client: Client, into: bytearray, needle: bytes, timeout: float = 10.0) -> None:
    """Append the client's output to ``into`` until ``needle`` is in it."""
    deadline = time.monotonic() + timeout
    while needle not in into:
        frame = client.recv(timeout=max(0.0, deadline - time.monotonic()))
        assert frame is not None, f"{needle!r} not seen within {timeout:g} s"
        if isinstance(frame, wire.Data):
            into += frame.data


def test_removed_runtime_dir_is_recreated_on_sigusr1_without_loss(sessions: Sessions) -> None:
    info = sessions.start("gone", child("ticker", "0.02"))
    with sessions.connect("gone", resume_from=0) as tower:
        assert tower.replay is not None and tower.replay.offset == 0
        stream = bytearray(tower.replay.data)  # everything, from offset 0
        _collect(tower, stream, b"t2\r\n")
        settled(sessions.dir)  # a launcher exits when the directory goes; still starting, it could write in it
        shutil.rmtree(sessions.dir)
        _collect(tower, stream, b"t10\r\n")  # existing clients keep getting output
        with pytest.raises(SessionNotFound):
            sessions.connect("gone")
        os.kill(info.pid, signal.SIGUSR1)
        # the socket, then the record, then the log line: wait for the last, not the first
        poll_until(lambda: (sessions.dir / "gone.log").exists() and "socket recreated" in
                   (sessions.dir / "gone.log").read_text(), 10, what="the socket and the record recreated")
        assert SessionLock.is_locked(sessions.dir / "gone.lock"), "the lock must be recreated too"
        assert read_record(sessions.dir / "gone.json").instance_id == info.instance_id
        assert os.stat(sessions.dir).st_mode & 0o777 == 0o700
        _collect(tower, stream, b"t20\r\n")
        assert tower.output.gaps == [] and tower.output.next_offset == len(stream)
        # A new client resuming from 0 gets exactly the bytes the old one got: nothing was lost.
        with sessions.connect("gone", "viewer", resume_from=0) as late:
            assert late.replay is not None
            got = bytearray(late.replay.data)
            while len(got) < len(stream):
                frame = late.recv(timeout=10)
                if isinstance(frame, wire.Data):
                    got += frame.data
        assert got[:len(stream)] == stream
        decisions = reconcile(Registry((RegistryRow("gone", info.instance_id),)), discover(sessions.dir),
                              now=time.time())
        assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.ADOPT, "running")]
        assert "socket recreated" in (sessions.dir / "gone.log").read_text()
    sessions.stop("gone")


# --------------------------------------------------------------------------------------------- crash storm


@dataclass(frozen=True)
class StormScale:
    sessions: int
    bound: int


@scales(StormScale(20, 4), StormScale(100, 5))
def test_crash_storm_every_session_goes_fatal_within_its_bound(sessions: Sessions, scale: StormScale) -> None:
    policy = RestartPolicy(backoff_initial=0.05, backoff_max=0.2, jitter=0.0, breaker_count=scale.bound,
                           breaker_window=120, min_uptime=5, same_error_count=0)
    names = [f"storm{i:03d}" for i in range(scale.sessions)]
    lag: list[float] = []
    stop = threading.Event()

    def probe() -> None:  # responsiveness: how late a 50 ms timer wakes up while the storm rages
        while not stop.is_set():
            t0 = time.monotonic()
            stop.wait(0.05)
            lag.append(time.monotonic() - t0 - 0.05)

    watcher = threading.Thread(target=probe)
    watcher.start()
    started = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: sessions.start(n, child("crash"), policy=policy), names))

        def all_fatal() -> bool:
            states = []
            for n in names:
                with contextlib.suppress(Exception):
                    states.append(read_record(sessions.dir / f"{n}.json").state)
            return states.count("fatal") == len(names)

        poll_until(all_fatal, 60 + scale.sessions, interval=0.2, what="every session to give up")
    finally:
        stop.set()
        watcher.join()
    elapsed = time.monotonic() - started
    spawns = 0
    for n in names:
        record = read_record(sessions.dir / f"{n}.json")
        assert record.exit_count == scale.bound and record.state == "fatal"
        assert all(e.exit_class == "crash" and e.signal == "SIGSEGV" for e in record.exits)
        spawns += record.exit_count
    assert spawns == scale.sessions * scale.bound
    worst = max(lag)
    print(f"\ncrash storm: {scale.sessions} sessions x {scale.bound} spawns, all fatal in {elapsed:.1f} s, "
          f"worst timer lag {worst * 1000:.0f} ms")
    assert worst < 2.0, f"the machine stalled for {worst:.1f} s"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: sessions.stop(n), names))
