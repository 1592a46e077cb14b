"""What the benchmark drives: the harness's own terminal, shellper and dtach sessions, /proc readings.

The harness plays the terminal emulator: it owns the master side of a PTY, runs a client (``shellper
attach``, ``dtach -a``, or the child itself for the raw baseline) on the slave side, and reads the
master as fast as Python can. Everything started here is tracked by pid in a :class:`Lab` and stopped
when the lab closes, inside a private runtime directory that is removed afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
import tty
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from shellper.client.blocking import Client, ClientError
from shellper.client.launch import LaunchInfo, launch
from shellper.core.config import SessionConfig
from shellper.core.defaults import DEFAULT_RING_BYTES
from shellper.protocol import wire

MiB = 1024 * 1024
CHILD = Path(__file__).resolve().with_name("child.py")
ROOT = CHILD.parent.parent
TICK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    """A workload could not be measured; says what and, where known, which process."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message if pid is None else f"{message} (pid {pid})")
        self.pid = pid


def child_argv(*args: str) -> list[str]:
    """The benchmark child (bench/child.py) with these arguments."""
    return [sys.executable, str(CHILD), *args]


def shellper_cli() -> list[str]:
    """How a user runs ``shellper``: the installed script next to this interpreter, else ``-m``."""
    script = Path(sys.executable).with_name("shellper")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "shellper.cli"]


def wait_file(path: Path, timeout: float = 30.0, pid: int | None = None) -> None:
    """Poll (1 ms) for a file the benchmark child creates once it is ready for input."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise BenchError(f"{path} did not appear within {timeout:g} s", pid)
        time.sleep(0.001)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile: the value below which ``pct`` percent of the samples lie."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-pct * len(ordered) // 100))))
    return ordered[rank - 1]


# ------------------------------------------------------------------------------------------ /proc


@dataclass(frozen=True)
class ProcSample:
    """CPU and scheduling counters of one process, all threads included."""

    ticks: int  # utime + stime, in clock ticks (1/SC_CLK_TCK s)
    cpu_ns: int  # sum of the threads' schedstat run time: finer than ticks
    voluntary: int
    nonvoluntary: int

    @property
    def wakeups(self) -> int:
        return self.voluntary + self.nonvoluntary

    def delta(self, later: ProcSample) -> ProcSample:
        return ProcSample(later.ticks - self.ticks, later.cpu_ns - self.cpu_ns,
                          later.voluntary - self.voluntary, later.nonvoluntary - self.nonvoluntary)


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 (state) is index 0


def cpu_ticks(pid: int) -> int:
    fields = _stat_fields(pid)
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def sample(pid: int) -> ProcSample:
    """Counters of ``pid`` summed over its threads (context switches are counted per thread)."""
    cpu_ns = vol = nonvol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            cpu_ns += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    nonvol += int(line.split()[1])
    return ProcSample(cpu_ticks(pid), cpu_ns, vol, nonvol)


def _kib_field(path: str, key: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise BenchError(f"no {key} in {path}")


def rss_bytes(pid: int) -> int:
    return _kib_field(f"/proc/{pid}/status", "VmRSS") * 1024


def pss_bytes(pid: int) -> int:
    return _kib_field(f"/proc/{pid}/smaps_rollup", "Pss") * 1024


def children_of(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(FileNotFoundError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError):
                out += [int(p) for p in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return out


def descendants_of(pid: int) -> list[int]:
    out: list[int] = []
    todo = children_of(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children_of(p)
    return out


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait on a pidfd (works for processes that are not our children); True once ``pid`` is gone."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def kill_tree(pid: int, timeout: float = 5.0) -> None:
    """SIGKILL ``pid`` and its descendants, by pid, and wait until they are gone."""
    pids = [*descendants_of(pid), pid]
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    for p in pids:
        wait_gone(p, timeout)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 3.0) -> None:
    """SIGTERM, then SIGKILL, a process we started; always reaped."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)


# ------------------------------------------------------------------------------------------ terminal


@dataclass
class Drained:
    """What a read up to a marker took."""

    bytes: int
    first_at: float  # perf_counter of the first byte
    done_at: float  # perf_counter when the marker was read


class Terminal:
    """The harness as terminal: the master side of a raw PTY; one client process on the slave side."""

    def __init__(self, cols: int = 80, rows: int = 24) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        tty.setraw(self.slave, termios.TCSANOW)
        os.set_blocking(self.master, False)
        self.proc: subprocess.Popen[bytes] | None = None
        self._poll = select.poll()
        self._poll.register(self.master, select.POLLIN)

    def spawn(self, argv: list[str]) -> subprocess.Popen[bytes]:
        """Run ``argv`` with the slave as stdin/stdout/stderr and controlling terminal."""
        def make_ctty() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(argv, stdin=self.slave, stdout=self.slave, stderr=self.slave,
                                     start_new_session=True, preexec_fn=make_ctty, cwd=ROOT)
        return self.proc

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.master, view):]
            except BlockingIOError:
                select.select([], [self.master], [], 1.0)

    def _read(self, deadline: float) -> bytes:
        while True:
            try:
                chunk = os.read(self.master, 1 << 20)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError("terminal: nothing more to read before the deadline") from None
                self._poll.poll(left * 1000)
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:
                    raise BenchError("terminal: the client closed it", self.proc.pid if self.proc else None) from None
                raise
            if not chunk:
                raise BenchError("terminal: end of file")
            return chunk

    def read_until(self, needle: bytes, timeout: float = 60.0) -> Drained:
        """Read until ``needle`` has come, counting every byte."""
        deadline = time.monotonic() + timeout
        keep = len(needle) - 1
        count = 0
        tail = b""
        first = 0.0
        try:
            while True:
                chunk = self._read(deadline)
                if not count:
                    first = time.perf_counter()
                count += len(chunk)
                if needle in chunk or needle in tail + chunk[:keep]:
                    return Drained(count, first, time.perf_counter())
                tail = chunk[-keep:] if len(chunk) >= keep else (tail + chunk)[-keep:]
        except BenchError as exc:
            raise BenchError(f"{exc}; waited for {needle!r}, got {count} bytes ending {tail!r}",
                             self.proc.pid if self.proc else None) from None

    def roundtrip(self, byte: bytes = b"a", timeout: float = 10.0) -> int:
        """Send one byte and wait for it to come back; nanoseconds."""
        deadline = time.monotonic() + timeout
        t0 = time.perf_counter_ns()
        os.write(self.master, byte)
        got = self._read(deadline)
        t1 = time.perf_counter_ns()
        if got != byte:
            raise BenchError(f"echo: sent {byte!r}, got {got[:40]!r}", self.proc.pid if self.proc else None)
        return t1 - t0

    def discard(self) -> None:
        """Drop whatever the master holds now."""
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self.master, 1 << 20):
                pass

    def close(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.master = self.slave = -1


# ------------------------------------------------------------------------------------------ sessions


class Shellpers:
    """Sessions in one private runtime directory, started in-process with ``launch()``."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.started: dict[str, LaunchInfo] = {}

    def start(self, name: str, argv: list[str], ring_bytes: int = DEFAULT_RING_BYTES) -> LaunchInfo:
        config = SessionConfig(name=name, argv=argv, dir=str(self.dir), cwd=str(ROOT), env=dict(os.environ),
                               ring_bytes=ring_bytes, grace=1.0)
        info = launch(config)
        self.started[name] = info
        return info

    def adopt(self, name: str, info: LaunchInfo) -> None:
        """Track a session started some other way (the CLI) so that it is stopped too."""
        self.started[name] = info

    def socket(self, name: str) -> Path:
        return self.dir / f"{name}.sock"

    def connect(self, name: str, role: str = "tower", timeout: float = 30.0, **hello: int | None) -> Client:
        client = Client(self.socket(name), role, client_name="bench", timeout=timeout)
        client.connect(**hello)
        return client

    def ring_end(self, name: str) -> int:
        with self.connect(name, "viewer", replay_bytes=0) as client:
            assert client.welcome is not None
            return client.welcome.ring_end

    def wait_ring_end(self, name: str, at_least: int, timeout: float = 120.0) -> int:
        """Poll (a short viewer connection each time, so no client stays attached) until output reached."""
        deadline = time.monotonic() + timeout
        while True:
            end = self.ring_end(name)
            if end >= at_least:
                return end
            if time.monotonic() > deadline:
                raise BenchError(f"session {name}: output reached {end}, not {at_least}, "
                                 f"within {timeout:g} s", self.started[name].pid)
            time.sleep(0.05)

    def attach_argv(self, name: str, replay_bytes: int | None = None, *, raw: bool = False) -> list[str]:
        """``shellper attach NAME``; with ``replay_bytes``, the same client replaying that much instead;
        ``raw``: the byte replay (``--raw``) instead of the drawn screen."""
        args = ["--dir", str(self.dir), "attach", name, "--detach-key", "none", *(["--raw"] if raw else [])]
        if replay_bytes is None:
            return [*shellper_cli(), *args]
        code = ("import sys, shellper.cli.attach as a; a.REPLAY_BYTES = int(sys.argv[1]); "  # the console script's path
                "sys.argv[1:] = sys.argv[2:]; from shellper.cli.entry import entry; entry()")
        return [sys.executable, "-c", code, str(replay_bytes), *args]

    def stop(self, *names: str) -> None:
        """STOP every named session at once, then wait for each; SIGKILL (by pid) what does not go."""
        names = names or tuple(self.started)
        for name in names:
            with contextlib.suppress(ClientError, OSError), self.connect(name, replay_bytes=0, timeout=5) as c:
                c.send(wire.Stop(grace=1.0))
                with contextlib.suppress(ClientError):
                    while c.recv(timeout=10) is not None:
                        pass
        for name in names:
            info = self.started.pop(name)
            if not wait_gone(info.pid, 10):
                kill_tree(info.pid)
            if info.child_pid is not None and not wait_gone(info.child_pid, 0):
                kill_tree(info.child_pid)


class Dtachs:
    """dtach sessions (``dtach -n``) in the same runtime directory; the master's pid is found in /proc."""

    def __init__(self, directory: Path, binary: str) -> None:
        self.dir = directory
        self.binary = binary
        self.masters: dict[str, int] = {}
        self.last_launch = 0.0

    def socket(self, name: str) -> Path:
        return self.dir / f"{name}.dtach"

    def start(self, name: str, argv: list[str]) -> int:
        """``dtach -n``; returns the master's pid. ``last_launch`` is the time until the socket existed."""
        sock = self.socket(name)
        t0 = time.perf_counter()
        subprocess.run([self.binary, "-n", str(sock), "-E", "-r", "none", "-z", *argv], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        deadline = time.monotonic() + 10
        while not sock.exists():
            if time.monotonic() > deadline:
                raise BenchError(f"dtach socket {sock} did not appear")
            time.sleep(0.0005)
        self.last_launch = time.perf_counter() - t0
        pid = self.find_master(sock)
        self.masters[name] = pid
        return pid

    @staticmethod
    def find_master(sock: Path) -> int:
        want = ["-n", str(sock)]
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                if [a.decode(errors="replace") for a in argv[1:3]] == want and argv[0].endswith(b"dtach"):
                    return int(entry)
        raise BenchError(f"no dtach master for {sock}")

    def attach_argv(self, name: str) -> list[str]:
        return [self.binary, "-a", str(self.socket(name)), "-E", "-r", "none", "-z"]

    def child_pid(self, name: str) -> int:
        kids = children_of(self.masters[name])
        if not kids:
            raise BenchError(f"dtach {name}: master has no child", self.masters[name])
        return kids[0]

    def stop(self, *names: str) -> None:
        """Kill the child by pid (the master then exits on its own), then the master if it stays."""
        for name in names or tuple(self.masters):
            master = self.masters.pop(name)
            for kid in descendants_of(master):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(kid, signal.SIGKILL)
            if not wait_gone(master, 5):
                kill_tree(master)
            with contextlib.suppress(FileNotFoundError):
                self.socket(name).unlink()


@dataclass
class Lab:
    """Owns every process and file a benchmark run makes; closing it stops them all."""

    dtach_binary: str | None = None
    root: Path = Path("/tmp")  # short: socket paths must fit in 107 bytes
    dir: Path = field(init=False)
    shellpers: Shellpers = field(init=False)
    dtachs: Dtachs | None = field(init=False)
    terminals: list[Terminal] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _serial: int = 0

    def __post_init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="spb-", dir=self.root))
        os.chmod(self.dir, 0o700)
        self.shellpers = Shellpers(self.dir)
        self.dtachs = Dtachs(self.dir, self.dtach_binary) if self.dtach_binary else None

    def name(self, prefix: str) -> str:
        """A fresh session name."""
        self._serial += 1
        return f"{prefix}{self._serial}"

    def ready_file(self, name: str) -> Path:
        return self.dir / f"{name}.ready"

    def terminal(self) -> Terminal:
        term = Terminal()
        self.terminals.append(term)
        return term

    def release(self, term: Terminal) -> None:
        term.close()
        with contextlib.suppress(ValueError):
            self.terminals.remove(term)

    def spawn(self, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        proc: subprocess.Popen[bytes] = subprocess.Popen(argv, cwd=ROOT, **kwargs)  # type: ignore[call-overload]
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for term in self.terminals:
            term.close()
        self.terminals.clear()
        for proc in self.procs:
            stop_process(proc)
        self.procs.clear()
        self.shellpers.stop()
        if self.dtachs is not None:
            self.dtachs.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
