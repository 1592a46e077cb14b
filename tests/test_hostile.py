"""Hostile input: fuzzed frames, foreign users, unsafe directories, planted symlinks, forbidden frames,
corrupt files, connection floods. Nothing crashes the shellper, nobody is let in, nothing is followed.

Every fuzzed byte stream is judged first by :func:`judge`, an oracle written from PROTOCOL.md (it uses
the reference decoder for framing and field types, pinned down separately by the golden vectors), and
the shellper's answers must match it exactly: the same direct answers in the same order, then the one
fatal ERROR it predicts and a closed connection, or no fatal error at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import select
import selectors
import shutil
import signal
import socket
import stat
import struct
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from support.hostile import (
    CLIENT_FRAMES,
    INTERESTING_LENGTHS,
    Verdict,
    Watcher,
    answers_of,
    fatal_of,
    judge,
    mutation_cases,
)
from support.sessions import Sessions, left_in
from support.soak import RawConn, child, hello, identity, is_dead, quiet_fds, rss_mib, scales, status_kib
from support.waiting import poll_until, wait_gone

from shellper.client.launch import LaunchError
from shellper.core.defaults import MAX_UNREAD_BYTES
from shellper.daemon.transport import CLOSE_DRAIN
from shellper.host.paths import SessionPaths, UnsafeDirError
from shellper.host.record import MAX_RECORD_BYTES, LockError, read_record
from shellper.protocol import wire
from tower_client.apply import apply, clean_session
from tower_client.discover import discover, observe
from tower_client.reconcile import (
    MAX_REGISTRY_BYTES,
    ReconcileAction,
    Registry,
    RegistryError,
    RegistryRow,
    load_registry,
    reconcile,
)

# --------------------------------------------------------------------------------------------- one fuzz case


@dataclass
class FuzzStats:
    cases: int = 0
    frames: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)


class FuzzConn:
    """One fuzzing connection: everything sent is kept, and every answer is checked against judge()."""

    def __init__(self, path: str, watcher: Watcher, stats: FuzzStats) -> None:
        self.conn = RawConn(path, timeout=10)
        self.watcher = watcher
        self.stats = stats
        self.sent = bytearray()
        self.received: list[wire.DecodedEvent] = []
        self.dead = False
        self.nonce = 0

    def verdict(self) -> Verdict:
        w = self.watcher
        return judge(bytes(self.sent), w.next, w.next + 1_000_000, w.event_seq, w.event_seq + 1_000_000)

    def send(self, data: bytes, frames: int) -> Verdict | None:
        """Send unless the oracle cannot judge the result; the verdict of everything sent so far."""
        if self.dead:
            return None
        before = len(self.sent)
        self.sent += data
        v = self.verdict()
        if v.skip:
            del self.sent[before:]
            self.stats.skipped[v.skip] += 1
            return None
        self.stats.frames += frames
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.conn.send(data)
        if v.fatal:
            self.finish(v)
        return v

    def finish(self, v: Verdict | None = None) -> None:
        """End the case: the fatal error and EOF, or a PING barrier answered, or EOF after a half-close."""
        if self.dead:
            return
        v = v or self.verdict()
        self.stats.cases += 1
        if v.fatal:
            self.received += self.conn.read_to_eof(15)
            self._check(v, [v.fatal])
            self.stats.outcomes[v.fatal] += 1
        elif v.truncated:
            with contextlib.suppress(OSError):
                self.conn.sock.shutdown(socket.SHUT_WR)
            self.received += self.conn.read_to_eof(15)
            assert set(fatal_of(self.received)) <= {"truncated"}, fatal_of(self.received)
            self.stats.outcomes["truncated"] += 1
        else:
            self.barrier(v)
            self.stats.outcomes["ok"] += 1
        self.close()

    def barrier(self, v: Verdict | None = None) -> None:
        """A PING after everything sent: its PONG proves every earlier frame was handled as judged."""
        if self.dead:
            return
        v = v or self.verdict()
        if v.fatal or v.truncated:
            return
        self.nonce += 1
        extra = b"" if v.registered else hello("viewer", replay_bytes=0)
        ping = wire.encode(wire.Ping(nonce=-self.nonce))
        self.sent += extra + ping
        self.conn.send(extra + ping)
        nonce = -self.nonce
        # The fuzzed frames may hold PINGs with this very nonce (hypothesis favours -1): wait for every
        # PONG carrying it that the oracle expects, not just the first.
        expected = self.verdict().answers.count(("pong", nonce))
        seen = [answers_of(self.received).count(("pong", nonce))]

        def all_pongs(f: wire.Frame) -> bool:
            if isinstance(f, wire.Pong) and f.nonce == nonce:
                seen[0] += 1
            return seen[0] >= expected

        self.received += self.conn.until(all_pongs, 15)
        self._check(self.verdict(), [])

    def _check(self, v: Verdict, fatal: list[str]) -> None:
        got = answers_of(self.received)
        assert got == v.answers, f"answers {got} != judged {v.answers} for {bytes(self.sent[:400]).hex()}"
        assert fatal_of(self.received) == fatal, f"fatal {fatal_of(self.received)} != {fatal}"
        handshake = [f for f in self.received if isinstance(f, (wire.Welcome, wire.Replay))]
        if v.registered and handshake:
            assert isinstance(self.received[0], wire.Welcome) and isinstance(self.received[1], wire.Replay)

    def close(self) -> None:
        self.dead = True
        self.conn.close()


# --------------------------------------------------------------------------------------------- generators

KEYS = ["version", "role", "resume_from", "replay_bytes", "events_after", "client", "cols", "rows", "signal",
        "nonce", "argv", "cwd", "env", "clear_ring", "grace", "offset", "data", "code", "message", "id"]
SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
           | st.text(max_size=12) | st.binary(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
PAYLOADS = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), VALUES, max_size=6)
SIZES = st.integers(0, 70000)


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


FRAMES = st.one_of(
    st.builds(lambda k, p: _frame(k, msgpack.packb(p, use_bin_type=True)), st.integers(0, 255), PAYLOADS),
    st.builds(lambda k, p: _frame(k, p), st.sampled_from(sorted(CLIENT_FRAMES)), st.binary(max_size=40)),
    st.builds(lambda d: wire.encode_data(d), st.binary(max_size=200)),
    st.builds(lambda c, r, i: wire.encode(wire.Resize(cols=c, rows=r, id=i)), SIZES, SIZES,
              st.none() | st.integers(0, 2**64 - 1)),
    st.builds(lambda n: wire.encode(wire.Ping(nonce=n)), st.none() | st.integers(-(2**63), 2**64 - 1)),
    st.just(wire.encode(wire.Status())),
    st.builds(lambda s: wire.encode(wire.Signal(signal=s)), st.sampled_from(["INT", "KILL", "TERM", "BOGUS"])),
    st.builds(lambda g: wire.encode(wire.Stop(grace=g)), st.none() | st.floats()),
    st.just(wire.encode(wire.Spawn(argv=["sh", "-c", "exit 3"]))),
    st.builds(lambda k, n: struct.pack(">BI", k, n), st.integers(0, 255), st.sampled_from(INTERESTING_LENGTHS)),
    st.binary(min_size=1, max_size=24),
)


class FuzzMachine(RuleBasedStateMachine):
    """Hypothesis drives several connections at once: open, send frames, check, close, in any order."""

    target: tuple[str, Watcher, FuzzStats]
    conns = Bundle("conns")

    def __init__(self) -> None:
        super().__init__()
        self.path, self.watcher, self.stats = self.target
        self.open: list[FuzzConn] = []

    @rule(target=conns, role=st.sampled_from(["viewer", "terminal", "viewer", "terminal", "bogus"]),
          replay=st.none() | st.integers(0, 2**64 - 1), events=st.none() | st.integers(0, 2**64 - 1),
          resume=st.none() | st.just(0) | st.integers(2**40, 2**64 - 1), version=st.integers(0, 4))
    def connect(self, role: str, replay: int | None, events: int | None, resume: int | None,
                version: int) -> FuzzConn:
        conn = FuzzConn(self.path, self.watcher, self.stats)
        self.open.append(conn)
        frame = wire.Hello(version=version, role=role, resume_from=resume, replay_bytes=replay, events_after=events)
        conn.send(wire.encode(frame), 1)
        return conn

    @rule(target=conns, first=FRAMES)
    def connect_without_hello(self, first: bytes) -> FuzzConn:
        conn = FuzzConn(self.path, self.watcher, self.stats)
        self.open.append(conn)
        conn.send(first, 1)
        return conn

    @rule(conn=conns, frames=st.lists(FRAMES, min_size=1, max_size=8))
    def send(self, conn: FuzzConn, frames: list[bytes]) -> None:
        conn.send(b"".join(frames), len(frames))

    @rule(conn=conns)
    def check(self, conn: FuzzConn) -> None:
        conn.barrier()

    @rule(conn=conns)
    def finish(self, conn: FuzzConn) -> None:
        conn.finish()

    @invariant()
    def tower_unaffected(self) -> None:
        self.watcher.check()

    def teardown(self) -> None:
        for conn in self.open:
            conn.finish()
        self.watcher.ping()


# --------------------------------------------------------------------------------------------- the fuzz test


@dataclass(frozen=True)
class FuzzScale:
    steps: int
    examples: int
    mutation_frames: int


@pytest.fixture
def target(sessions: Sessions, request: pytest.FixtureRequest) -> Iterator[tuple[str, Watcher, int]]:
    """A session whose child drains its input; an indirect parameter gives its config's changes."""
    info = sessions.start("fuzz", child("drain", "0.05"), **getattr(request, "param", {}))
    watcher = Watcher(info.socket)
    # Until the child is in raw mode, a fuzzed ^C or ^\ would be a real signal from a real terminal.
    poll_until(lambda: watcher.next >= len(b"READY\n"), 10, what="READY")
    try:
        yield info.socket, watcher, info.pid
    finally:
        watcher.close()
    sessions.stop("fuzz")


@scales(FuzzScale(steps=25, examples=60, mutation_frames=3_500),
        FuzzScale(steps=40, examples=800, mutation_frames=80_000))
def test_fuzzed_frames_never_crash_and_leave_the_tower_alone(target: tuple[str, Watcher, int],
                                                             scale: FuzzScale) -> None:
    path, watcher, pid = target
    base_fds = quiet_fds(pid, path, others=1)  # the listener, the PTY, the lock, the log, the watching tower ...
    kid_before = _child_pid(path)
    stats = FuzzStats()
    FuzzMachine.target = (path, watcher, stats)
    run_state_machine_as_test(FuzzMachine, settings=settings(
        max_examples=scale.examples, stateful_step_count=scale.steps, deadline=None, database=None,
        derandomize=True, suppress_health_check=list(HealthCheck)))
    stateful_frames = stats.frames
    for i, (stream, frames) in enumerate(mutation_cases(20260, scale.mutation_frames)):
        conn = FuzzConn(path, watcher, stats)
        try:
            if conn.send(stream, frames) is not None:
                conn.finish()
        finally:
            conn.close()
        if i % 200 == 0:
            watcher.ping()
    watcher.ping()
    assert not wait_gone(pid, 0), "the shellper died"
    assert _child_pid(path) == kid_before, "the child was touched"
    # a connection the shellper closed drains its peer for up to CLOSE_DRAIN before its fd goes
    poll_until(lambda: quiet_fds(pid, path, others=1) == base_fds, 10 + CLOSE_DRAIN,
               what="the shellper's fds back to where they were")
    print(f"\nfuzz: {stats.frames} frames in {stats.cases} connections ({stateful_frames} stateful, "
          f"{stats.frames - stateful_frames} mutated); outcomes {dict(stats.outcomes)}; "
          f"not sent {dict(stats.skipped)}; tower got {watcher.events} events and every PONG; "
          f"shellper RSS {rss_mib(pid):.0f} MiB")
    assert stats.frames >= scale.mutation_frames
    assert stats.outcomes["ok"] and len(stats.outcomes) >= 8  # the fuzzer reached many different errors


def _child_pid(path: str) -> int:
    with RawConn(path) as c:
        c.send(hello("viewer", replay_bytes=0))
        frames = c.until(lambda f: isinstance(f, wire.Replay))
    welcome = frames[0]
    assert isinstance(welcome, wire.Welcome) and welcome.child_pid is not None
    return welcome.child_pid


@pytest.mark.parametrize("case", [
    ("not msgpack HELLO", _frame(8, b"\xc1\xc1\xc1"), "bad_payload"),
    ("PING first", wire.encode(wire.Ping()), "not_hello"),
    ("oversized first", struct.pack(">BI", 8, wire.MAX_FRAME_SIZE + 1), "too_large"),
    ("version 1", wire.encode(wire.Hello(version=1, role="viewer")), "unsupported_version"),
    ("role root", wire.encode(wire.Hello(version=2, role="root")), "bad_role"),
    ("resume past the end", wire.encode(wire.Hello(version=2, role="viewer", resume_from=2**63)), "bad_offset"),
    ("events past the last", wire.encode(wire.Hello(version=2, role="viewer", events_after=2**63)), "bad_offset"),
    ("second HELLO", hello("viewer") + hello("viewer"), "protocol"),
    ("RESIZE 0x24", hello("terminal") + wire.encode(wire.Resize(cols=0, rows=24)), "bad_field"),
    ("RESIZE cols string", hello("terminal") + _frame(2, msgpack.packb({"cols": "80", "rows": 24})), "bad_field"),
], ids=lambda c: c[0])
def test_each_bad_client_gets_its_error_and_is_closed(target: tuple[str, Watcher, int],
                                                      case: tuple[str, bytes, str]) -> None:
    """The table behind the fuzzer: the oracle and the shellper agree on each error class."""
    path, watcher, _ = target
    _, stream, code = case
    v = judge(stream, watcher.next, watcher.next + 1_000_000, watcher.event_seq, watcher.event_seq + 1_000_000)
    assert v.fatal == code
    conn = FuzzConn(path, watcher, FuzzStats())
    conn.send(stream, 1)
    assert fatal_of(conn.received) == [code] and conn.dead
    watcher.ping()


UNREAD_BOUND = 1 << 20
"""The PING case's max_unread_bytes: 8 MiB (the default) of 13-byte PONGs is 650,000 PINGs to decode."""


@pytest.mark.parametrize(("request_frame", "target", "bound"),
                         [(wire.Status(), {}, MAX_UNREAD_BYTES),
                          (wire.Ping(nonce=1), {"max_unread_bytes": UNREAD_BOUND}, UNREAD_BOUND)],
                         ids=["STATUS", "PING"], indirect=["target"])
def test_client_that_never_reads_its_answers_is_dropped(target: tuple[str, Watcher, int],
                                                         request_frame: wire.Frame, bound: int) -> None:
    """Requests are 5 bytes, a STATUS_REPLY a kilobyte: a client asking without reading must not grow the
    shellper's memory without bound. It is dropped once its config's max_unread_bytes of answers are queued for
    it (checked after each frame: at most one answer more)."""
    path, watcher, pid = target
    base_rss = rss_mib(pid)
    burst = wire.encode(request_frame) * 10_000
    sent = 0
    with RawConn(path) as conn:
        conn.send(hello("viewer", replay_bytes=0))
        conn.sock.setblocking(False)
        deadline = time.monotonic() + 30
        dropped = False
        while time.monotonic() < deadline and not dropped:
            try:
                sent += conn.sock.send(burst[sent % len(burst):])  # whole frames, however the sends split
            except BlockingIOError:
                select.select([], [conn.sock], [], 0.1)
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
        assert dropped, f"still connected after {sent // len(wire.encode(request_frame))} unread requests"
    peak = status_kib(pid, "VmHWM") / 1024
    print(f"\nunread {request_frame.TYPE.name}: dropped after {sent / 2**20:.1f} MiB of requests; "
          f"shellper RSS {base_rss:.0f} MiB, peak {peak:.0f} MiB")
    assert peak < base_rss + 64
    watcher.ping()
    said = re.search(r"too_slow.*?(\d+) bytes of answers left unread", Path(path).with_suffix(".log").read_text())
    assert said is not None
    assert bound < int(said[1]) <= bound + 2048, said[0]


# --------------------------------------------------------------------------------------------- forbidden frames


@pytest.mark.parametrize("role", ["terminal", "viewer"])
@pytest.mark.parametrize("frame", [wire.Signal(signal="KILL"), wire.Spawn(argv=["true"]), wire.Stop(grace=0.0)],
                         ids=["SIGNAL", "SPAWN", "STOP"])
def test_only_the_tower_may_signal_spawn_or_stop(sessions: Sessions, role: str, frame: wire.Frame) -> None:
    info = sessions.start("roles", ["sleep", "300"])
    with RawConn(info.socket) as conn:
        conn.send(hello(role, replay_bytes=0) + wire.encode(frame) + wire.encode(wire.Ping(nonce=1)))
        got = conn.until(lambda f: isinstance(f, wire.Pong))
    assert answers_of(got) == [("error", "forbidden", int(frame.TYPE)), ("pong", 1)]
    with sessions.connect("roles", "viewer", replay_bytes=0) as viewer:
        reply = viewer.request(wire.Status(), wire.StatusReply)
    assert isinstance(reply, wire.StatusReply) and reply.state == "running"
    assert reply.info["child_pid"] == info.child_pid and reply.info["exit_count"] == 0
    sessions.stop("roles")


# --------------------------------------------------------------------------------------------- other users

NOBODY = 65534
NOBODY_CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect-failed", e.errno); sys.exit(0)
try:
    s.sendall(bytes.fromhex(sys.argv[2]))
except OSError:
    pass  # refused before it read our HELLO: what it said is still there to read
out = b""
while True:
    try:
        chunk = s.recv(65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
print("got", out.hex())
"""


def _as_nobody(path: Path, data: bytes) -> str:
    runner = shutil.which("setpriv")
    python = "/usr/bin/python3"
    if os.geteuid() != 0 or runner is None or not os.access(python, os.X_OK):
        pytest.skip("needs root, setpriv and a system python3 another user can run")
    done = subprocess.run([runner, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, "-c",
                           NOBODY_CLIENT, str(path), data.hex()], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_client_of_another_uid_is_refused(sessions: Sessions) -> None:
    info = sessions.start("uid", ["sleep", "300"])
    sock = Path(info.socket)
    # First line of defence: the 0700 directory. The peer cannot even connect.
    assert _as_nobody(sock, hello("tower")).startswith("connect-failed 13")
    # Loosen the files so it can connect: SO_PEERCRED must still refuse it, before any HELLO is read.
    os.chmod(sessions.dir, 0o711)
    os.chmod(sock, 0o666)
    try:
        out = _as_nobody(sock, hello("tower") + wire.encode(wire.Stop(grace=0.0)))
    finally:
        os.chmod(sock, 0o600)
        os.chmod(sessions.dir, 0o700)
    assert out.startswith("got ")
    frames = wire.decode_all(bytes.fromhex(out[4:]))
    assert len(frames) == 1 and isinstance(frames[0], wire.Error)
    assert frames[0].code == "forbidden" and frames[0].fatal
    assert f"peer uid {NOBODY}" in frames[0].message
    assert not wait_gone(info.pid, 0) and not is_dead(identity(info.child_pid or 0))
    assert "refused client" in (sessions.dir / "uid.log").read_text()
    sessions.stop("uid")


# --------------------------------------------------------------------------------------------- unsafe directories


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o777, 0o701])
def test_runtime_dir_with_unsafe_permissions_is_refused(sessions: Sessions, mode: int) -> None:
    os.chmod(sessions.dir, mode)
    try:
        with pytest.raises(UnsafeDirError, match="group/world accessible"):
            sessions.start("loose", ["sleep", "300"])
        with pytest.raises(UnsafeDirError, match="group/world accessible"):  # the one rule, as clients apply it
            discover(sessions.dir)
    finally:
        os.chmod(sessions.dir, 0o700)
    assert left_in(sessions.dir) == []


def test_runtime_dir_owned_by_someone_else_is_refused(sessions: Sessions) -> None:
    os.chown(sessions.dir, NOBODY, NOBODY)
    try:
        with pytest.raises(UnsafeDirError, match=f"owned by uid {NOBODY}"):
            sessions.start("theirs", ["sleep", "300"])
        with pytest.raises(UnsafeDirError, match=f"owned by uid {NOBODY}"):
            discover(sessions.dir)
    finally:
        os.chown(sessions.dir, 0, 0)
    assert left_in(sessions.dir) == []


# --------------------------------------------------------------------------------------------- symlinks


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_bytes(b"precious\n")
    return path


def _untouched(victim: Path) -> bool:
    return victim.read_bytes() == b"precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644


@pytest.mark.parametrize("suffix", [".sock", ".lock", ".log"])
def test_symlink_planted_before_launch_is_never_followed(sessions: Sessions, victim: Path, suffix: str) -> None:
    os.chmod(victim, 0o644)
    planted = sessions.dir / f"trap{suffix}"
    planted.symlink_to(victim)
    with pytest.raises((LaunchError, LockError)) as caught:
        sessions.start("trap", ["sleep", "300"])
    assert str(caught.value)
    assert planted.is_symlink() and _untouched(victim)
    planted.unlink()
    assert left_in(sessions.dir) == []


def test_symlinked_record_is_replaced_never_followed(sessions: Sessions, victim: Path) -> None:
    os.chmod(victim, 0o644)
    planted = sessions.dir / "rec.json"
    planted.symlink_to(victim)
    info = sessions.start("rec", ["sleep", "300"])
    assert not planted.is_symlink() and read_record(planted).instance_id == info.instance_id
    planted.unlink()
    planted.symlink_to(victim)  # planted again while it runs; the next write replaces the link
    os.kill(info.pid, signal.SIGUSR1)
    poll_until(lambda: not planted.is_symlink(), 10, what="the record rewritten")
    assert _untouched(victim)
    sessions.stop("rec")
    assert _untouched(victim)


def test_tower_client_never_follows_planted_symlinks(sessions: Sessions, victim: Path, tmp_path: Path) -> None:
    os.chmod(victim, 0o644)
    other = tmp_path / "other.sock"
    lure = socket.socket(socket.AF_UNIX)
    lure.bind(str(other))
    lure.listen()
    try:
        (sessions.dir / "x.sock").symlink_to(other)
        for suffix in (".json", ".log"):
            (sessions.dir / f"x{suffix}").symlink_to(victim)
        obs = observe(sessions.dir, "x")
        assert obs.probe == "error" and "never followed" in obs.probe_detail
        assert obs.record is None and obs.record_error is not None
        lure.settimeout(0)
        with pytest.raises(BlockingIOError):
            lure.accept()  # the probe never connected through the link
        decisions = reconcile(Registry(), [obs], now=time.time())
        assert [d.action for d in decisions] == [ReconcileAction.LEAVE]  # an unreadable record: hands off
        removed = clean_session(SessionPaths.for_name(sessions.dir, "x"))
        assert removed == () and _untouched(victim)
    finally:
        lure.close()
        for suffix in (".sock", ".json", ".log"):
            with contextlib.suppress(FileNotFoundError):
                (sessions.dir / f"x{suffix}").unlink()


# --------------------------------------------------------------------------------------------- corrupt files


CORRUPT = {
    "not json": b"{not json",
    "truncated": b'{"name": "c", "boot_id": "x", "shellper_pid": 1',
    "wrong types": json.dumps({"name": "c", "boot_id": 5, "shellper_pid": "1"}).encode(),
    "a list": b"[]",
    "huge": b'{"pad": "' + b"x" * (MAX_RECORD_BYTES + 10) + b'"}',
    "binary": bytes(range(256)),
}


@pytest.mark.parametrize("content", list(CORRUPT.values()), ids=list(CORRUPT))
def test_corrupt_record_of_a_live_session_gets_a_clear_error_and_no_action(sessions: Sessions,
                                                                           content: bytes) -> None:
    info = sessions.start("c", ["sleep", "300"])
    record = sessions.dir / "c.json"
    record.write_bytes(content)
    obs = observe(sessions.dir, "c")
    assert obs.record is None and obs.record_error is not None
    assert str(record) in obs.record_error and len(obs.record_error.splitlines()) == 1
    decisions = reconcile(Registry((RegistryRow("c"),)), [obs], now=time.time())
    assert [(d.action, d.reason) for d in decisions] == [(ReconcileAction.LEAVE, "record_unreadable")]
    assert apply(decisions).ok
    assert not wait_gone(info.pid, 0) and not is_dead(identity(info.child_pid or 0))
    assert record.read_bytes() == content  # left for a human to look at
    sessions.stop("c")


@pytest.mark.parametrize("content", [
    b"", b"{", b'{"sessions": [{"name": "a"}', b"\xff\xfe", b'{"sessions": [' + b'{"name": "n"},' * 10 + b"]}",
    b'{"sessions": [' + b" " * MAX_REGISTRY_BYTES + b"]}", b'{"sessions": NaN}',
], ids=["empty", "brace", "truncated", "not utf-8", "trailing comma", "huge", "NaN"])
def test_corrupt_registry_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "registry.json"
    path.write_bytes(content)
    with pytest.raises(RegistryError) as caught:
        load_registry(path)
    message = str(caught.value)
    assert str(path) in message and len(message.splitlines()) == 1 and len(message) < 400


# --------------------------------------------------------------------------------------------- connection flood


@pytest.fixture
def fd_room() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4096
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"the fd limit ({hard}) is too low for 1000 connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_connection_flood_without_hello(sessions: Sessions, fd_room: None) -> None:
    """1000 connections that never say HELLO: the first ones wait out the handshake timeout, the excess
    over 256 is refused at once; all are closed; the attached tower never notices."""
    timeout, clients = 3.0, 1000
    info = sessions.start("flood", child("drain", "0.05"), handshake_timeout=timeout)
    watcher = Watcher(info.socket)
    socks: list[socket.socket] = []
    try:
        base_fds = quiet_fds(info.pid, info.socket, others=1)
        base_rss = rss_mib(info.pid)
        started = time.monotonic()
        for _ in range(clients):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            socks.append(s)
            s.connect(info.socket)  # blocking: waits while the listen backlog is full
        connected = time.monotonic() - started
        watcher.ping()  # the tower is served while the flood waits
        codes: Counter[str] = Counter()
        closed_at: list[float] = []
        sel = selectors.DefaultSelector()
        decoders = {}
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            decoders[s] = wire.Decoder()
        pending = set(socks)
        deadline = time.monotonic() + timeout + 20
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(1.0):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if chunk:
                    decoders[s].feed(chunk)
                    continue
                frames = list(decoders[s].events())
                assert len(frames) == 1 and isinstance(frames[0], wire.Error) and frames[0].fatal, frames
                codes[frames[0].code] += 1
                closed_at.append(time.monotonic() - started)
                sel.unregister(s)
                pending.discard(s)
        sel.close()
        assert not pending, f"{len(pending)} connections were never closed"
        watcher.ping()
        assert set(codes) <= {"handshake_timeout", "too_many_clients"}
        # The tower holds one of the 256 places: 255 wait out the timeout, the rest are refused at once
        # (exactly so when every connect came before the first timer could fire).
        assert codes["handshake_timeout"] >= 255 and sum(codes.values()) == clients
        if connected < timeout / 2:
            assert codes == {"handshake_timeout": 255, "too_many_clients": clients - 255}
            assert max(closed_at[:clients - 255]) < timeout  # refusals come first, without waiting
        # each closed connection drains its peer for up to CLOSE_DRAIN (these peers never close): then it is gone
        poll_until(lambda: quiet_fds(info.pid, info.socket, others=1) == base_fds, 10 + CLOSE_DRAIN,
                   what="the shellper's descriptors back to where they were")
        print(f"\nconnection flood: {clients} connections in {connected:.2f} s -> {dict(codes)}; "
              f"shellper RSS {base_rss:.0f} -> {rss_mib(info.pid):.0f} MiB")
        watcher.check()
    finally:
        for s in socks:
            s.close()
        watcher.close()
    sessions.stop("flood")
