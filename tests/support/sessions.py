"""Real shellpers in private runtime directories, and the fixtures that hand them to tests.

One ``Sessions`` for every kind of test (registered by conftest.py: ``sessions``, ``other``, ``runtime_dir``,
``cli_runtime_dir``). Every shellper, helper process and identity it starts or is told about is ended at the
test's end (by pidfd, after an identity check, with its whole tree and its cgroup), whatever the test did. What
the end of a test checks depends on what the test does with its sessions:

- by default the test stops its sessions: one still running at teardown, or a file left in the runtime
  directory (besides ``logs/`` and the warm launcher's files), fails it; the directory's warm launcher is
  ended after its sessions (support.launchers);
- a test marked ``kills_sessions`` (the Tower's, containment's: they kill -9 shellpers, apply reconciles, leave
  records behind on purpose) has what is left ended without complaint.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shellper.client.blocking import Client, ClientError
from shellper.client.launch import LaunchInfo, launch
from shellper.core.config import SessionConfig
from shellper.core.exits import RestartPolicy
from shellper.core.owner import default_owner
from shellper.core.structs import replace
from shellper.host import warmstart
from shellper.host.cgroup import find_session_cgroups
from shellper.host.identity import ProcessIdentity, boot_id, read_stat
from shellper.host.record import SessionRecord, write_record
from shellper.protocol import wire
from support.launchers import MADE, end_launchers, pids_now, wait_listening
from support.paths import ROOT
from support.processes import identity, kill_verified, tree
from support.run import CGROUP_PARENT, remove_cgroup_tree
from support.waiting import wait_gone

NO_RESTART = RestartPolicy(mode="no")
GRACE = 1.0
"""A session's grace unless the test gives one: short, since few tests are about it (the default is 5 s)."""


LAUNCHER_FILES = frozenset((warmstart.LOG_NAME, warmstart.SOCKET_NAME, warmstart.LOCK_NAME))
"""The warm launcher's files in a runtime directory (the leak guard looks for launchers left on their own,
support.launchers)."""


def files_in(directory: str | Path) -> list[str]:
    """What a runtime directory holds besides its warm launcher's files."""
    return sorted(p.name for p in Path(directory).iterdir() if p.name not in LAUNCHER_FILES)


def left_in(directory: str | Path) -> list[str]:
    """What a runtime directory holds besides what it keeps by design: ``logs/``, where a stopped session's log
    is kept, and its warm launcher's files."""
    return [name for name in files_in(directory) if name != "logs"]


def private_dir(prefix: str) -> Path:
    """A fresh 0700 directory under /tmp (short: a socket path is at most 107 bytes)."""
    before = pids_now()
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(path, 0o700)
    MADE[str(path)] = before
    return path


def remove_private_dir(path: Path, *, ignore_errors: bool = True) -> None:
    """End ``path``'s launchers (one still starting would write into it meanwhile), then remove it."""
    end_launchers(path)
    shutil.rmtree(path, ignore_errors=ignore_errors)
    MADE.pop(str(path), None)  # gone: the leak guard tells a launcher left there by its missing directory


@dataclass
class Sessions:
    """Starts real shellpers in one runtime directory; everything they and the test started there is ended after."""

    dir: Path
    strict: bool = True
    """The teardown fails the test for a session still running or a file left (see the module's note)."""
    started: list[LaunchInfo] = field(default_factory=list)
    tracked: list[ProcessIdentity] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, name: str, argv: list[str], **options: Any) -> LaunchInfo:
        """Launch session ``name`` running ``argv``; ``options`` are SessionConfig's (env: this process's; cwd: the
        checkout; grace: :data:`GRACE`; policy: the default restart policy, unless given)."""
        options.setdefault("grace", GRACE)
        policy = options.pop("policy", None) or RestartPolicy()
        env = options.pop("env", None) or dict(os.environ)
        config = SessionConfig(name=name, argv=argv, dir=str(self.dir), cwd=options.pop("cwd", str(ROOT)),
                               env=env, policy=policy, **options)
        info = launch(config)
        self.started.append(info)
        self.tracked.append(ProcessIdentity(info.boot_id, info.pid, info.start_time))
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

    def spawn(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        """A helper process in a session of its own (so it is nobody's group member), ended at the test's end."""
        proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kw)
        self.procs.append(proc)
        self.tracked.append(identity(proc.pid))
        return proc

    def track(self, ident: ProcessIdentity) -> None:
        """Have the teardown end ``ident`` (a process the test's sessions started) and its tree."""
        self.tracked.append(ident)

    def cleanup(self) -> list[str]:
        """End what is left; the problems a strict teardown reports."""
        problems: list[str] = []
        for info in self.started:
            if not wait_gone(info.pid, 0) and self.strict:
                problems.append(f"session {info.name} (pid {info.pid}) still running at teardown")
                with contextlib.suppress(ClientError, AssertionError):
                    self.stop(info.name, grace=1.0)
        for ident in list(self.tracked):
            if ident.is_alive():
                self.tracked.extend(tree(ident.pid))
        for ident in reversed(self.tracked):
            kill_verified(ident)
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait(5)
        end_launchers(self.dir)
        if CGROUP_PARENT is not None:  # shellpers killed above could not remove their own cgroups
            for found in find_session_cgroups(CGROUP_PARENT, str(self.dir)):
                remove_cgroup_tree(found.path)
        leftovers = left_in(self.dir) if self.dir.exists() else []
        if leftovers and self.strict:
            problems.append(f"files left in the runtime directory: {leftovers}")
        return problems


def hand_made_record(d: Path, name: str, pid: int, **changes: object) -> SessionRecord:
    """A record naming ``pid`` with its real boot id and start ticks, written to ``d`` (its socket path is
    the name's own, as a shellper's is, but no socket is there)."""
    st = read_stat(pid)
    assert st is not None
    rec = SessionRecord(name=name, boot_id=boot_id(), shellper_pid=pid, shellper_start_time=st.start_time,
                        instance_id="f" * 32, command=["sleep"], cwd="/", socket=str(d / f"{name}.sock"),
                        state="running", owner=default_owner())
    rec = replace(rec, **changes)  # type: ignore[arg-type]
    write_record(d / f"{name}.json", rec)
    return rec


def _strict(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("kills_sessions") is None


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A private runtime directory short enough for socket paths, removed at the end."""
    path = private_dir("sp-")
    yield path
    remove_private_dir(path)


@pytest.fixture
def sessions(runtime_dir: Path, request: pytest.FixtureRequest) -> Iterator[Sessions]:
    """Sessions in ``runtime_dir``."""
    s = Sessions(runtime_dir, strict=_strict(request))
    yield s
    problems = s.cleanup()
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture
def other(request: pytest.FixtureRequest) -> Iterator[Sessions]:
    """A second, separate runtime directory and its sessions."""
    s = Sessions(private_dir("so-"), strict=_strict(request))
    try:
        yield s
        problems = s.cleanup()
    finally:
        remove_private_dir(s.dir)
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture(params=["cold", "warm"])
def launches(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test twice: its launches cold (the suite's default), then warm, through a launcher started ahead in
    each runtime directory the test uses (``runtime_dir``, ``cli_runtime_dir``, a module's ``terminals``; through
    ``sessions`` too), so that every launch is forked by it. Its launchers end with the test (support.launchers)."""
    from shellper.client import warm

    if request.param == "cold":
        return "cold"
    monkeypatch.setenv(warmstart.LAUNCHER_ENV, "on")
    warm._logged.clear()
    warm._started.clear()
    for name in ("runtime_dir", "cli_runtime_dir", "terminals"):
        if name in request.fixturenames:
            value = request.getfixturevalue(name)
            if name == "terminals":  # support.terminals.Terminals: its CLI runs with an environment of its own
                value.env[warmstart.LAUNCHER_ENV] = "on"
            directory = getattr(value, "dir", value)
            warm.start_launcher(str(directory))
            wait_listening(directory)
    return "warm"


@pytest.fixture
def cli_runtime_dir() -> Iterator[Path]:
    """A private runtime directory for tests that drive the ``shellper`` command as a person does: a session
    a failed test left running is stopped by name before the directory goes."""
    directory = private_dir("spc-")
    try:
        yield directory
    finally:
        for sock in directory.glob("*.sock"):
            subprocess.run([sys.executable, "-m", "shellper", "--dir", str(directory), "stop", "--grace", "0.5",
                            sock.stem],
                           capture_output=True, timeout=60)
        remove_private_dir(directory, ignore_errors=False)
