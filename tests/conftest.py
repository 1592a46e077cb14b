"""Shared fixtures: real sessions in private runtime directories, and a leak check on every test.

Every test must leave behind what it found: no extra open fds in the test process, no child process
(running or zombie), and — for tests that start sessions through ``sessions`` — no shellper, no
descendant of one, and no file in its runtime directory.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

from shellper.client.blocking import Client, ClientError
from shellper.core.config import SessionConfig
from shellper.core.exits import RestartPolicy
from shellper.daemon.launch import LaunchInfo, launch
from shellper.host import cgroup
from shellper.protocol import wire

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
_SCRIPT = Path(PY).with_name("shellper")
SHELLPER_CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "shellper.cli"]
"""How a person runs ``shellper``: the installed console script (shellper.cli.entry.entry) when there is one."""


TEST_PARENT_PREFIX = "shellper-test-"


def _a_test_run(pid: int) -> bool:
    """``pid`` is a live test run (pytest) that may own ``shellper-test-<pid>``; unreadable counts as yes, and
    so does a number no pid can be (test_cli_containment names its parents with random hex)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/sys/kernel/pid_max", "rb") as f:
        if pid > int(f.read()):
            return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"pytest" in f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True


def sweep_dead_runs(mount: str) -> list[str]:
    """Remove what test runs that were killed (no pytest_unconfigure) left: their ``shellper-test-<pid>``
    parents, deepest cgroup first, rmdir only: a cgroup that still holds a process stays (it is not this
    run's to kill). Returns the cgroups removed."""
    removed: list[str] = []
    with contextlib.suppress(OSError):
        for entry in os.listdir(mount):
            pid = entry[len(TEST_PARENT_PREFIX):]
            if not entry.startswith(TEST_PARENT_PREFIX) or not pid.isdigit() or _a_test_run(int(pid)):
                continue
            for root, _dirs, _files in os.walk(os.path.join(mount, entry), topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(root)
                    removed.append(root)
    return removed


def _test_cgroup_parent() -> str | None:
    """Sessions started by the tests make their cgroups in a parent of this run's own (removed at exit), so
    the leak check sees exactly what the tests leave and a run never touches the machine's other sessions.
    What killed runs left is removed first (:func:`sweep_dead_runs`)."""
    mount = cgroup.find_mount()
    if mount is None or not os.access(mount, os.W_OK) or cgroup.systemd_manages_cgroups():
        return None
    sweep_dead_runs(mount)
    parent = os.path.join(mount, f"{TEST_PARENT_PREFIX}{os.getpid()}")
    try:
        os.mkdir(parent)
    except OSError:
        return None
    os.environ[cgroup.PARENT_ENV] = parent
    return parent


CGROUP_PARENT = _test_cgroup_parent()
"""Where this run's sessions make their cgroups; None where the machine gives none (containment none)."""


def _session_cgroups() -> set[str]:
    if CGROUP_PARENT is None:
        return set()
    with contextlib.suppress(FileNotFoundError):
        return {e for e in os.listdir(CGROUP_PARENT) if cgroup.LeafName.parse(e) is not None}
    return set()


def remove_cgroup_tree(path: str) -> None:
    """Kill what is in a cgroup and remove it with everything below it (test clean-up only)."""
    with contextlib.suppress(FileNotFoundError), open(os.path.join(path, "cgroup.kill"), "w") as f:
        f.write("1")
    mount = cgroup.find_mount() or "/"
    cgroup.SessionCgroup(path, mount).wait_empty(5.0)
    for root, _dirs, _files in sorted(os.walk(path), key=lambda t: -len(t[0])):
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(root)


def pytest_unconfigure(config: Any) -> None:
    if CGROUP_PARENT is not None and os.getpid() == int(CGROUP_PARENT.rsplit("-", 1)[1]):
        remove_cgroup_tree(CGROUP_PARENT)


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    with contextlib.suppress(FileNotFoundError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{task}/children") as fh:
                out.update(int(p) for p in fh.read().split())
    return out


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """Wait (on a pidfd, no polling) until ``pid`` has exited; True if it did."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def poll_until(predicate: Any, timeout: float = 10.0, interval: float = 0.02, what: str = "condition",
               fail: Callable[[str], NoReturn] = pytest.fail) -> Any:
    """Poll ``predicate`` until it returns something truthy, or ``fail`` (the test, by default) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail a test that leaves an fd open, a child process (or zombie) or a session cgroup behind."""
    fds_before = _open_fds()
    kids_before = _children(os.getpid())
    cgroups_before = _session_cgroups()
    yield
    deadline = time.monotonic() + 5.0
    while True:
        extra_kids = _children(os.getpid()) - kids_before
        extra_fds = _open_fds() - fds_before
        extra_cgroups = _session_cgroups() - cgroups_before
        if not extra_kids and not extra_fds and not extra_cgroups:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    for pid in extra_kids:  # clean up so the next test starts clean, then fail this one
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    details = []
    for name in sorted(extra_cgroups):
        assert CGROUP_PARENT is not None
        remove_cgroup_tree(os.path.join(CGROUP_PARENT, name))
        details.append(f"session cgroup left: {name}")
    if extra_kids:
        details.append(f"child processes left: {sorted(extra_kids)}")
    if extra_fds:
        details.append(f"fds left open: {sorted(extra_fds)} -> "
                       + ", ".join(_fd_target(fd) for fd in sorted(extra_fds)))
    pytest.fail("leak: " + "; ".join(details))


def _fd_target(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A private runtime directory short enough for socket paths; must be empty again at the end."""
    path = Path(tempfile.mkdtemp(prefix="sp-", dir="/tmp"))
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cli_runtime_dir() -> Iterator[Path]:
    """A private runtime directory for tests that drive the ``shellper`` command as a person does: a session
    a failed test left running is stopped by name before the directory goes."""
    directory = Path(tempfile.mkdtemp(prefix="spc-", dir="/tmp"))
    os.chmod(directory, 0o700)
    try:
        yield directory
    finally:
        for sock in directory.glob("*.sock"):
            subprocess.run([sys.executable, "-m", "shellper", "--dir", str(directory), "stop", sock.stem],
                           capture_output=True, timeout=60)
        shutil.rmtree(directory)


def left_in(directory: str | Path) -> list[str]:
    """What a runtime directory holds besides ``logs/``, where a stopped session's log is kept by design."""
    return sorted(p.name for p in Path(directory).iterdir() if p.name != "logs")


@dataclass
class Sessions:
    """Starts real shellpers in one runtime directory and guarantees they are gone afterwards."""

    dir: Path
    started: list[LaunchInfo] = field(default_factory=list)

    def start(self, name: str, argv: list[str], **options: Any) -> LaunchInfo:
        policy = options.pop("policy", None) or RestartPolicy()
        env = options.pop("env", None) or dict(os.environ)
        config = SessionConfig(name=name, argv=argv, dir=str(self.dir), cwd=options.pop("cwd", str(ROOT)),
                               env=env, policy=policy, **options)
        info = launch(config)
        self.started.append(info)
        return info

    def connect(self, name: str, role: str = "tower", timeout: float = 10.0, **hello: Any) -> Client:
        client = Client(self.dir / f"{name}.sock", role, client_name="test", timeout=timeout)
        client.connect(**hello)
        return client

    def stop(self, name: str, grace: float | None = None) -> None:
        info = next(i for i in self.started if i.name == name)
        with contextlib.suppress(ClientError), self.connect(name, replay_bytes=0) as client:
            client.send(wire.Stop(grace=grace))
            with contextlib.suppress(ClientError):
                while True:
                    client.recv(timeout=30)
        assert wait_gone(info.pid, 30), f"shellper {info.pid} did not exit after STOP"

    def cleanup(self) -> list[str]:
        problems: list[str] = []
        for info in self.started:
            if not wait_gone(info.pid, 0):
                problems.append(f"session {info.name} (pid {info.pid}) still running at teardown")
                with contextlib.suppress(ClientError):
                    self.stop(info.name, grace=1.0)
                if not wait_gone(info.pid, 10):
                    os.kill(info.pid, signal.SIGKILL)
                    wait_gone(info.pid, 10)
        leftovers = left_in(self.dir) if self.dir.exists() else []
        if leftovers:
            problems.append(f"files left in the runtime directory: {leftovers}")
        return problems


@pytest.fixture
def sessions(runtime_dir: Path) -> Iterator[Sessions]:
    s = Sessions(runtime_dir)
    yield s
    problems = s.cleanup()
    if problems:
        pytest.fail("; ".join(problems))


def collect_output(client: Client, seen: bytearray, done: Callable[[bytearray], bool], what: bytes,
                   timeout: float = 10.0, others: list[wire.Frame] | None = None) -> None:
    """Add the output received to ``seen`` until ``done(seen)``; fail at the deadline, naming ``what``.
    Frames other than DATA are appended to ``others`` when given (else dropped)."""
    deadline = time.monotonic() + timeout
    while not done(seen):
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"{what!r} not seen within {timeout:g} s; got {bytes(seen[-300:])!r}")
        frame = client.recv(timeout=left)
        if isinstance(frame, wire.Data):
            seen += frame.data
        elif frame is not None and others is not None:
            others.append(frame)


def read_until(client: Client, needle: bytes, timeout: float = 10.0) -> bytes:
    """Collect output (REPLAY data first) until ``needle`` appears; fail at the deadline."""
    assert client.replay is not None
    seen = bytearray(client.replay.data)
    collect_output(client, seen, lambda got: needle in got, needle, timeout)
    return bytes(seen)


def recv_until(client: Client, kind: type[wire.Frame], timeout: float = 10.0,
               where: Any = None) -> Any:
    """The next frame of ``kind`` (matching ``where`` if given); fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"no {kind.TYPE.name} frame within {timeout:g} s")
        frame = client.recv(timeout=left)
        if isinstance(frame, kind) and (where is None or where(frame)):
            return frame
