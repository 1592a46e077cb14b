"""Shared fixtures: real sessions in private runtime directories, and a leak check on every test.

Every test must leave behind what it found: no extra open fds in the test process, no child process
(running or zombie), and — for tests that start sessions through ``sessions`` — no shellper, no
descendant of one, and no file in its runtime directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

from shellper.client.blocking import Client, ClientError
from shellper.client.launch import LaunchInfo, launch
from shellper.core.config import SessionConfig
from shellper.core.exits import RestartPolicy
from shellper.host import cgroup
from shellper.protocol import wire

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
_SCRIPT = Path(PY).with_name("shellper")
SHELLPER_CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "shellper.cli"]
"""How a person runs ``shellper``: the installed console script (shellper.cli.entry.entry) when there is one."""


os.environ["SHELLPER_LAUNCHER"] = "off"
"""No warm launcher (shellper.daemon.launcher) unless a test asks for one (tests/test_launcher.py): a launcher
would outlive the test that started it, and its files would stay in every runtime directory."""

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


RUN_ENV = "PYTEST_SHELLPER_RUN"
"""Set once per run by the process that starts it (its pid and a random token) and inherited by pytest-xdist's
workers and by everything a test starts: what still carries it when the run ends was started by the run and left
behind (a session of a test that an interrupt cut short), and is ended (:func:`_sweep_run`). Not ``SHELLPER_``:
tests that give a program a clean environment drop those."""
_RUN_CGROUP_ENV = "PYTEST_SHELLPER_CGROUP"
"""The run's own cgroup (MOUNT/shellper-test-<pid>), made by the run's first process, for its workers."""
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""This process's pytest-xdist worker id (gw0, gw1, ...), or None in the run's first process."""
RUN_OWNER = RUN_ENV not in os.environ
"""Whether this process started the run (a plain pytest, or xdist's controller): it cleans up after it."""
if RUN_OWNER:
    os.environ[RUN_ENV] = f"{os.getpid()}-{secrets.token_hex(8)}"
RUN = os.environ[RUN_ENV]
_SSH_CONTROL_ENV = "SHELLPER_SSH_CONTROL_DIR"
if RUN_OWNER and not os.environ.get(_SSH_CONTROL_ENV):
    # The remote tests' shared ssh connections keep their sockets in a directory of the run's own (short: a
    # socket path is at most 107 bytes), removed at its end, not in the user's /tmp/shellper-ssh-UID.
    os.environ[_SSH_CONTROL_ENV] = f"/tmp/sshc-{os.getpid()}"


def _test_cgroup_parent() -> str | None:
    """Sessions started by the tests make their cgroups in a parent of this run's own (removed at exit), so
    the leak check sees exactly what the tests leave and a run never touches the machine's other sessions.
    Each xdist worker has a parent of its own inside the run's, so one worker's check never sees another's
    sessions, and the run's first process removes the whole tree at the end, even after a killed worker; what
    killed runs left is removed first (:func:`sweep_dead_runs`)."""
    mount = cgroup.find_mount()
    if mount is None or not os.access(mount, os.W_OK) or cgroup.systemd_manages_cgroups():
        return None
    if RUN_OWNER:
        sweep_dead_runs(mount)
        parent = os.path.join(mount, f"{TEST_PARENT_PREFIX}{os.getpid()}")
    elif WORKER is not None and os.environ.get(_RUN_CGROUP_ENV):
        parent = os.path.join(os.environ[_RUN_CGROUP_ENV], WORKER)
    else:  # a process a test started that imports this module: it makes no cgroup of its own
        return os.environ.get(cgroup.PARENT_ENV) or None
    try:
        os.mkdir(parent)
    except OSError:
        return None
    if RUN_OWNER:
        os.environ[_RUN_CGROUP_ENV] = parent
    os.environ[cgroup.PARENT_ENV] = parent
    return parent


_CLEANER = os.getpid()
"""The process that made CGROUP_PARENT and removes it (not a fork of it)."""
CGROUP_PARENT = _test_cgroup_parent()
"""Where this process's sessions make their cgroups; None where the machine gives none (containment none)."""


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


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _sweep_run() -> list[str]:
    """End every process that carries this run's mark (RUN_ENV) but this one and its ancestors; what each was.

    Each is pinned by a pidfd before its environment is read: a pid reused meanwhile is either another
    process of this run (its environment carries the mark too) or is left alone; the SIGKILL goes through
    the pidfd, so it can only reach the process whose mark was read."""
    mark = f"{RUN_ENV}={RUN}".encode()
    keep = _ancestors()
    ended = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in keep:
            continue
        try:
            fd = os.pidfd_open(int(entry))
        except OSError:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if mark not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                what = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            ended.append(f"{entry} ({what})")
        except OSError:
            continue
        finally:
            os.close(fd)
    return ended


_cleaned: list[bool] = []


def _clean_up_run() -> list[str]:
    """This process's cgroup tree, and for the run's first process every process the run left; what was ended."""
    if os.getpid() != _CLEANER or _cleaned:
        return []
    _cleaned.append(True)
    if CGROUP_PARENT is not None and (RUN_OWNER or WORKER is not None):
        remove_cgroup_tree(CGROUP_PARENT)
    ended = _sweep_run() if RUN_OWNER else []
    if RUN_OWNER and os.environ[_SSH_CONTROL_ENV] == f"/tmp/sshc-{os.getpid()}":
        shutil.rmtree(os.environ[_SSH_CONTROL_ENV], ignore_errors=True)  # after the sweep: no master is left
    return ended


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Iterator[None]:
    """After everything else (xdist has stopped its workers by then): end what the run left, and fail a run
    that seemed to pass but left something running."""
    try:
        return (yield)
    finally:
        ended = _clean_up_run()
        if ended:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            text = "processes this run left running, ended at its end: " + "; ".join(ended)
            if reporter is not None:
                reporter.ensure_newline()
                reporter.write_line(text, red=True)
            else:
                print(text, file=sys.stderr)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: Any) -> None:
    _clean_up_run()  # again, for a run interrupted before its session finished


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM and SIGHUP end a run as Ctrl-C does: fixtures tear down, sessions stop, the sweep runs. xdist's
    controller passes the signal on to its workers (its only children: it runs no test itself)."""
    if _xdist_controller:
        for pid in _children(os.getpid()):
            with contextlib.suppress(OSError):
                fd = os.pidfd_open(pid)
                try:
                    signal.pidfd_send_signal(fd, signal.SIGTERM)
                finally:
                    os.close(fd)
    raise KeyboardInterrupt(f"signal {signum}")


_xdist_controller: list[bool] = []


def pytest_configure(config: pytest.Config) -> None:
    if RUN_OWNER and config.getoption("numprocesses", None):
        _xdist_controller.append(True)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _interrupt)


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
            subprocess.run([sys.executable, "-m", "shellper", "--dir", str(directory), "stop", "--grace", "0.5",
                            sock.stem],
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


# ------------------------------------------------------------------ what a test needs, as markers

_FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "sessions": ("pty",), "runtime_dir": ("pty",), "cli_runtime_dir": ("pty",), "runs": ("pty",),
    "shared": ("pty",), "shell": ("pty",),
    "contained": ("cgroup", "pty"),
    "world": ("ssh", "pty"), "remote": ("ssh", "pty"),
    "full_fs": ("root",), "tiny_fs": ("root",),
}
"""A test that uses the fixture needs what it names."""
_MODULE_MARKS: dict[str, tuple[str, ...]] = {
    "test_screens": ("pty",), "test_screen_replay": ("pty",), "test_attach": ("pty",), "test_habits": ("pty",),
    "test_terminal_handoff": ("pty",), "test_cli_term": ("pty",), "test_demo": ("pty",), "test_readme": ("pty",),
    "test_remote": ("ssh",), "test_remote_async": ("ssh",),
    "test_legacy_node": ("node",),
    "test_containment": ("cgroup",), "test_cli_containment": ("cgroup",), "test_killsoak": ("cgroup", "root"),
}
"""Every test of the module needs what it names (terminals driven through pexpect, a private sshd...)."""
_TEST_MARKS: dict[str, tuple[str, ...]] = {
    "test_cli_files.py::test_stop_fails_when_its_connection_ends_while_the_shellper_is_stopped": ("root",),
    "test_server_lifecycle.py::test_an_unsafe_runtime_dir_is_refused": ("root",),
    "test_server_lifecycle.py::test_a_stop_that_fails_still_ends_the_session_and_says_why": ("root",),
    "test_hostile.py::test_client_of_another_uid_is_refused": ("root",),
    "test_tower_apply.py::test_real_pid_reuse_is_never_signalled": ("root",),
}
"""Needs a test finds out only in its body (a pytest.skip there); a name here that matches no test of a
collected module fails the collection, so a renamed test cannot silently lose its marker."""
_REASON_MARKS = {"cgroup": "cgroup", "root": "needs root", "node": "node is not installed"}
"""A skipif whose reason says this: the test needs that."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    matched: set[str] = set()
    modules: set[str] = set()
    for item in items:
        module = Path(str(item.fspath)).name
        modules.add(module)
        needs: set[str] = set(_MODULE_MARKS.get(module.removesuffix(".py"), ()))
        for name in getattr(item, "fixturenames", ()):
            needs.update(_FIXTURE_MARKS.get(name, ()))
        key = f"{module}::{item.name.split('[')[0]}"
        if key in _TEST_MARKS:
            matched.add(key)
            needs.update(_TEST_MARKS[key])
        for mark in item.iter_markers("skipif"):
            reason = str(mark.kwargs.get("reason", ""))
            needs.update(need for need, says in _REASON_MARKS.items() if says in reason)
        if "[cgroup" in item.name or "-cgroup" in item.name:  # parametrized over containment modes
            needs.add("cgroup")
        for need in sorted(needs):
            item.add_marker(need)
    stale = [key for key in _TEST_MARKS if key.split("::")[0] in modules and key not in matched]
    if stale:
        raise pytest.UsageError(f"conftest._TEST_MARKS names tests that do not exist: {stale}")
