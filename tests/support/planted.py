"""A session socket another local user planted: the fake server of the trust tests (issue 27).

Where ``$XDG_RUNTIME_DIR`` is unset the runtime directory is ``/tmp/shellper-UID``, which another user can
create first. :func:`plant` builds such a place and serves a socket in it from a forked child that has
setuid() to ``nobody`` (we are root), speaking just enough of the protocol (WELCOME, REPLAY, PONG,
STATUS_REPLY) that a client which trusted it would go on to send what it carries: the terminal's descriptor,
keys, a SPAWN's environment. The child counts what each connection delivered (bytes, descriptors passed
with SCM_RIGHTS, frame types) and reports it when asked; a test asserts it got nothing.

Kinds of planting:

* ``foreign``: the directory is the other user's (they made ``shellper-0`` first);
* ``open``: the directory is ours but world-writable (1777, as /tmp), and they put a socket in it;
* ``symlink``: the directory's path is a symlink to a directory of theirs;
* ``peer``: the directory passes (ours, 0700) but the socket's server is theirs: what a swap of the
  directory between the check and the connect leaves, caught only by the server's SO_PEERCRED uid.

Each plants a held ``NAME.lock`` too, so the session looks alive to ``stop``, ``status`` and ``attach -c``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import struct
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shellper.protocol import wire

NOBODY = 65534
KINDS = ("foreign", "open", "symlink", "peer")
DIR_KINDS = ("foreign", "open", "symlink")
"""The kinds the directory check refuses (with the owner or mode it found); ``peer`` is refused by SO_PEERCRED."""
MARKER = b"PLANTED-SECRET-7f3a"
"""What the tests type, send or put in a SPAWN's environment: it must never reach the planted server."""
WELCOME = wire.Welcome(version=2, name="work", shellper_pid=1, shellper_start_time=1, boot_id="b",
                       instance_id="e" * 32, state="running", cols=80, rows=24, ring_start=0, ring_end=0)
HANDSHAKE = wire.encode(WELCOME) + wire.encode(wire.Replay(offset=0, data=b""))
READY_TIMEOUT = 10.0
IDLE = 1.5
"""Seconds of silence after which the planted server hangs up, so a client that trusted it (the code before
issue 27) ends and the test can say what it delivered instead of waiting out the client's own timeout."""


@dataclass
class Received:
    """What one connection delivered to the planted server."""

    bytes: int
    fds: int
    frames: list[str]
    marker: bool


@dataclass
class Planted:
    base: Path
    dir: Path
    """The runtime directory a client is pointed at (``--dir``)."""
    name: str
    kind: str
    pid: int
    control: int
    report: int
    _received: list[Received] | None = None

    @property
    def socket(self) -> str:
        return str(self.dir / f"{self.name}.sock")

    def received(self) -> list[Received]:
        """Every connection the planted server accepted and what it delivered (asks the server once, ends it)."""
        if self._received is None:
            os.close(self.control)  # its end of file: the server reports and exits
            self.control = -1
            chunks = []
            while True:
                ready, _, _ = select.select([self.report], [], [], READY_TIMEOUT)
                assert ready, "the planted server did not report"
                chunk = os.read(self.report, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
            os.close(self.report)
            self.report = -1
            _, status = os.waitpid(self.pid, 0)
            assert status == 0, f"the planted server failed: {status}"
            self._received = [Received(**r) for r in json.loads(b"".join(chunks) or b"[]")]
        return self._received

    def delivered(self) -> list[Received]:
        """The connections that delivered anything (a byte or a descriptor): a test wants none."""
        return [r for r in self.received() if r.bytes or r.fds]


def _serve(listener: socket.socket, control: int, report: int) -> None:
    """The planted server's loop, in the child: accept, read with descriptors, answer like a shellper."""
    conns: dict[int, tuple[socket.socket, wire.Decoder, dict[str, object]]] = {}
    active: dict[int, float] = {}
    done: list[dict[str, object]] = []
    while True:
        ready, _, _ = select.select([listener, control, *conns], [], [], IDLE / 4)
        if control in ready:
            break
        now = time.monotonic()
        for fd in [fd for fd, last in active.items() if now - last > IDLE and fd not in ready]:
            conns[fd][0].close()  # hangs up on a client that waits for more than it answers
            done.append(conns.pop(fd)[2])
            del active[fd]
        if listener in ready:
            conn, _ = listener.accept()
            conns[conn.fileno()] = (conn, wire.Decoder(), {"bytes": 0, "fds": 0, "frames": [], "marker": False})
            active[conn.fileno()] = now
        for fd in [fd for fd in ready if fd in conns]:
            active[fd] = now
            conn, decoder, seen = conns[fd]
            try:
                data, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(16 * 4))
            except OSError:
                data, ancdata = b"", []
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    passed = struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) - len(payload) % 4])
                    seen["fds"] = int(seen["fds"]) + len(passed)  # type: ignore[call-overload]
                    for passed_fd in passed:
                        os.close(passed_fd)
            if not data:
                conn.close()
                done.append(conns.pop(fd)[2])
                del active[fd]
                continue
            seen["bytes"] = int(seen["bytes"]) + len(data)  # type: ignore[call-overload]
            seen["marker"] = bool(seen["marker"]) or MARKER in data
            try:
                decoder.feed(data)
                for event in decoder.events():
                    if not isinstance(event, wire.Frame):
                        continue
                    frames = seen["frames"]
                    assert isinstance(frames, list)
                    frames.append(type(event).__name__)
                    answer = (HANDSHAKE if isinstance(event, wire.Hello) else
                              wire.encode(wire.Pong(nonce=event.nonce)) if isinstance(event, wire.Ping) else
                              wire.encode(wire.StatusReply(state="running")) if isinstance(event, wire.Status) else b"")
                    if answer:
                        conn.sendall(answer)
            except Exception:  # a fake: what it could not decode is still counted above
                pass
    done.extend(seen for _, _, seen in conns.values())
    os.write(report, json.dumps(done).encode())


def _child(kind: str, serve_dir: Path, name: str, control: int, report: int, ready: int, locked: bool) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock_path = str(serve_dir / f"{name}.sock")
    lock_path = str(serve_dir / f"{name}.lock")
    if kind == "peer":  # only root could put these in our 0700 directory: bound before the uid changes
        listener.bind(sock_path)
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)  # from here on, another user: listen() records these credentials for SO_PEERCRED
    if kind != "peer":
        listener.bind(sock_path)
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    if locked:
        fcntl.flock(lock, fcntl.LOCK_EX)
    listener.listen(16)
    os.write(ready, b"x")
    os.close(ready)
    _serve(listener, control, report)


@contextlib.contextmanager
def plant(kind: str, name: str = "work", *, locked: bool = True, record: bytes | None = None) -> Iterator[Planted]:
    """A planted runtime directory of ``kind`` with a live fake server for session ``name`` in it; the server
    ended (reported, reaped) and everything removed afterwards. ``locked``: the server holds ``NAME.lock``
    (the session looks alive); ``record``: the ``NAME.json`` they put there (a forged or copied record)."""
    assert os.geteuid() == 0, "planting needs root (the server runs as another user)"
    base = Path(tempfile.mkdtemp(prefix="spt-", dir="/tmp"))
    os.chmod(base, 0o755)  # the other user must reach a directory inside
    victim = base / f"shellper-{os.geteuid()}"
    if kind == "foreign":
        victim.mkdir(0o700)
        os.chown(victim, NOBODY, NOBODY)
        serve_dir = victim
    elif kind == "open":
        victim.mkdir()
        os.chmod(victim, 0o1777)
        serve_dir = victim
    elif kind == "symlink":
        serve_dir = base / "theirs"
        serve_dir.mkdir(0o700)
        os.chown(serve_dir, NOBODY, NOBODY)
        victim.symlink_to(serve_dir)
    else:
        assert kind == "peer", kind
        victim.mkdir(0o700)
        serve_dir = victim
    if record is not None:
        (serve_dir / f"{name}.json").write_bytes(record)
        os.chown(serve_dir / f"{name}.json", NOBODY, NOBODY)
    control_r, control_w = os.pipe()
    report_r, report_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(control_w)
            os.close(report_r)
            os.close(ready_r)
            _child(kind, serve_dir, name, control_r, report_w, ready_w, locked)
            code = 0
        finally:
            os._exit(code)
    os.close(control_r)
    os.close(report_w)
    os.close(ready_w)
    planted = Planted(base, victim, name, kind, pid, control_w, report_r)
    try:
        ready, _, _ = select.select([ready_r], [], [], READY_TIMEOUT)
        assert ready and os.read(ready_r, 1) == b"x", "the planted server did not start"
        yield planted
    finally:
        os.close(ready_r)
        if planted._received is None:
            with contextlib.suppress(Exception):
                planted.received()
        if planted._received is None:  # it did not report: end it (our child, by pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            for fd in (planted.control, planted.report):
                if fd >= 0:
                    os.close(fd)
        shutil.rmtree(base, ignore_errors=True)
