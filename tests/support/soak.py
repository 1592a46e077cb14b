"""Shared by the fault, hostile-input and soak tests: scales, child commands, /proc probes, stream checks.

No tests here. Every process helper works by pid *and* start ticks, so a recycled pid is never touched.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shellper.host.identity import IdentityError, ProcessIdentity, read_stat
from shellper.protocol import wire
from support.processes import kill_verified
from support.soak_child import PATTERN, pattern_at

PY = os.environ.get("SOAK_PYTHON") or __import__("sys").executable
CHILD = str(Path(__file__).resolve().parent / "soak_child.py")


def child(*args: str) -> list[str]:
    """argv for a soak_child.py mode."""
    return [PY, CHILD, *args]


def scales(fast: object, slow: object) -> pytest.MarkDecorator:
    """Parametrize a test over its fast (``make test``) and slow (``make soak``) version."""
    return pytest.mark.parametrize("scale", [pytest.param(fast, id="fast"),
                                             pytest.param(slow, id="slow", marks=pytest.mark.slow)])


# --------------------------------------------------------------------------------------------- /proc


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def quiet_fds(pid: int, socket_path: str | os.PathLike[str], others: int = 0, timeout: float = 10.0) -> int:
    """The shellper's fd count with only ``others`` clients connected. Measured from inside a viewer
    connection that sees just them besides itself (no other connection half-closed), minus that
    connection; the same twice in a row."""
    last: list[int] = []

    def probe() -> int | None:
        with RawConn(socket_path) as conn:
            conn.send(hello("viewer", replay_bytes=0) + wire.encode(wire.Status()))
            reply = conn.until(lambda f: isinstance(f, wire.StatusReply), timeout)[-1]
            assert isinstance(reply, wire.StatusReply)
            count = fd_count(pid) - 1 if len(reply.info["clients"]) == others + 1 else None
        if count is not None and last and last[-1] == count:
            return count
        last.append(count if count is not None else -1)
        return None

    deadline = time.monotonic() + timeout
    while (count := probe()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"the shellper's connections never went quiet: {last[-5:]}")
    return count


def status_kib(pid: int, key: str) -> int:
    """A ``kB`` line of /proc/PID/status (VmRSS, VmHWM, ...)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def rss_mib(pid: int) -> float:
    return status_kib(pid, "VmRSS") / 1024


def identity(pid: int) -> ProcessIdentity:
    ident = ProcessIdentity.of(pid)
    assert ident is not None, f"pid {pid} does not exist"
    return ident


def is_dead(ident: ProcessIdentity) -> bool:
    """Gone, a zombie, or another process now holds the pid."""
    try:
        st = read_stat(ident.pid)
    except IdentityError:
        return False
    return st is None or st.state == "Z" or st.start_time != ident.start_time


def marked(instance_id: str) -> list[int]:
    """Live (non-zombie) processes carrying a shellper instance's SHELLPER_INSTANCE mark."""
    needle = f"SHELLPER_INSTANCE={instance_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            st = read_stat(int(name))
        except (OSError, IdentityError):
            continue
        if needle in env and st is not None and st.state != "Z":
            found.append(int(name))
    return found


@dataclass
class Reaper:
    """Processes a test starts indirectly (grandchildren); whatever is still alive at teardown is killed."""

    tracked: list[ProcessIdentity] = field(default_factory=list)

    def track(self, *idents: ProcessIdentity) -> None:
        self.tracked.extend(idents)

    def cleanup(self) -> list[int]:
        alive = [i for i in self.tracked if not is_dead(i)]
        for ident in alive:
            kill_verified(ident)
        return [i.pid for i in alive]


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    r = Reaper()
    yield r
    r.cleanup()


# --------------------------------------------------------------------------------------------- streams


class StreamError(AssertionError):
    pass


_TILED = memoryview(PATTERN * ((1 << 20) // len(PATTERN) + 2))
"""The pattern repeated past a MiB plus one period: any slice of up to a MiB, at any phase, is in it."""


@dataclass
class PatternStream:
    """Checks one client's output stream against soak_child's ``pattern`` output, byte for byte.

    ``base`` is the offset of the first pattern byte (after ``READY\\n``). Positions follow the protocol
    exactly: DATA continues at ``next``, a GAP must say ``missed == offset - next``.
    """

    next: int
    base: int
    total: int
    tail: bytearray = field(default_factory=bytearray)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    pattern_bytes: int = 0

    def data(self, data: bytes) -> None:
        start = self.next
        end = start + len(data)
        self.next = end
        pat_end = self.base + self.total
        lo, hi = max(start, self.base), min(end, pat_end)
        view = memoryview(data)
        while hi > lo:  # compared in place, in slices of at most a MiB: the reader must outrun the child
            n = min(hi - lo, 1 << 20)
            at = (lo - self.base) % len(PATTERN)
            if view[lo - start:lo - start + n] != _TILED[at:at + n]:
                got, want = bytes(view[lo - start:lo - start + n]), pattern_at(lo - self.base, n)
                bad = next(i for i in range(n) if got[i] != want[i])
                raise StreamError(f"byte at offset {lo + bad} is {got[bad]:#x}, expected {want[bad]:#x}")
            self.pattern_bytes += n
            lo += n
        if end > pat_end:
            self.tail += data[max(0, pat_end - start):]

    def gap(self, frame: wire.Gap) -> None:
        if frame.missed != frame.offset - self.next or frame.missed <= 0:
            raise StreamError(f"GAP {frame} does not match position {self.next}")
        self.gaps.append((frame.offset, frame.missed))
        self.next = frame.offset

    @property
    def done(self) -> bool:
        return b"\nDONE " in self.tail and self.tail.endswith(b"\n")

    def child_seconds(self) -> float:
        return float(self.tail.split(b"DONE ", 1)[1].split()[0])


class RawConn:
    """A bare socket + decoder, for fast readers and hostile writers (no client-side checks at all)."""

    def __init__(self, path: str | os.PathLike[str], timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except BaseException:
            self.sock.close()
            raise
        self.decoder = wire.Decoder()
        self.eof = False

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frames(self, timeout: float) -> list[wire.DecodedEvent]:
        """Whatever arrives within ``timeout`` (at least one read); [] and ``eof`` set when closed."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(4 * 1024 * 1024)
        except TimeoutError:
            return []
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return []
        self.decoder.feed(chunk)
        return list(self.decoder.events())

    def until(self, predicate: object, timeout: float = 10.0) -> list[wire.DecodedEvent]:
        """Frames up to and including the first for which ``predicate(frame)`` is true (fails at EOF)."""
        deadline = time.monotonic() + timeout
        seen: list[wire.DecodedEvent] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; got {[type(f).__name__ for f in seen[-10:]]}")
            for frame in self.frames(left):
                seen.append(frame)
                if predicate(frame):  # type: ignore[operator]
                    return seen
            if self.eof:
                raise AssertionError(f"connection closed; got {[type(f).__name__ for f in seen[-10:]]}")

    def read_to_eof(self, timeout: float = 10.0) -> list[wire.DecodedEvent]:
        deadline = time.monotonic() + timeout
        seen: list[wire.DecodedEvent] = []
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no EOF within {timeout:g} s; got {[type(f).__name__ for f in seen[-10:]]}")
            seen += self.frames(left)
        return seen

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hello(role: str = "viewer", **fields: object) -> bytes:
    return wire.encode(wire.Hello(version=wire.PROTOCOL_VERSION, role=role, client="soak", **fields))  # type: ignore[arg-type]
