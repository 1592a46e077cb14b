"""Helpers for the live tower_client tests (no tests here): short runtime dirs, real shellpers, cleanup.

Every shellper and helper process a test starts is recorded by identity and killed (by pidfd, after an
identity check) when the test ends, with its whole tree, whatever the test did.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import CGROUP_PARENT, remove_cgroup_tree

from shellper.client.launch import LaunchInfo, launch
from shellper.core.config import SessionConfig
from shellper.core.exits import RestartPolicy
from shellper.core.owner import default_owner
from shellper.core.structs import replace
from shellper.host.cgroup import find_session_cgroups
from shellper.host.identity import IdentityError, ProcessIdentity, boot_id, open_verified, read_stat
from shellper.host.reaper import descendants
from shellper.host.record import SessionRecord, write_record

REPO = str(Path(__file__).resolve().parent.parent)


def identity(pid: int) -> ProcessIdentity:
    ident = ProcessIdentity.of(pid)
    assert ident is not None, f"pid {pid} does not exist"
    return ident


def is_dead(ident: ProcessIdentity) -> bool:
    """Gone, a zombie (init here may leave re-parented zombies around), or another process."""
    st = read_stat(ident.pid)
    return st is None or st.state == "Z" or st.start_time != ident.start_time


def alive(ident: ProcessIdentity) -> bool:
    return not is_dead(ident)


def tree(pid: int) -> list[ProcessIdentity]:
    """Identities of ``pid``'s descendants now."""
    out = []
    for p in descendants(pid):
        ident = ProcessIdentity.of(p)
        if ident is not None:
            out.append(ident)
    return out


def kill_verified(ident: ProcessIdentity) -> None:
    with contextlib.suppress(IdentityError, OSError):
        fd = open_verified(ident, allow_zombie=True)
        try:
            fd.send_signal(signal.SIGKILL)
            fd.wait_dead(5.0)
        finally:
            fd.close()


@dataclass
class Sessions:
    """Launch real shellpers into one private runtime directory; everything is killed at the end."""

    dir: Path
    launched: list[LaunchInfo] = field(default_factory=list)
    tracked: list[ProcessIdentity] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def launch(self, name: str, argv: list[str], **config: Any) -> LaunchInfo:
        config.setdefault("grace", 1.0)
        config.setdefault("policy", RestartPolicy())
        info = launch(SessionConfig(name=name, argv=argv, dir=str(self.dir), cwd="/", env=dict(os.environ),
                                    **config))
        self.launched.append(info)
        self.tracked.append(ProcessIdentity(info.boot_id, info.pid, info.start_time))
        return info

    def spawn(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        """A helper process in a session of its own (so it is nobody's group member)."""
        proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kw)
        self.procs.append(proc)
        self.tracked.append(identity(proc.pid))
        return proc

    def track(self, ident: ProcessIdentity) -> None:
        self.tracked.append(ident)

    def cleanup(self) -> None:
        for ident in list(self.tracked):
            if ident.is_alive():
                for member in tree(ident.pid):
                    self.tracked.append(member)
        for ident in reversed(self.tracked):
            kill_verified(ident)
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait(5)
        if CGROUP_PARENT is not None:  # the shellpers killed above could not remove their own cgroups
            for found in find_session_cgroups(CGROUP_PARENT, str(self.dir)):
                remove_cgroup_tree(found.path)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def session_dir() -> Iterator[Sessions]:
    """A fresh 0700 directory under /tmp (short: sun_path is 108 bytes) and cleanup of all it ran."""
    d = Path(tempfile.mkdtemp(prefix="tc-", dir="/tmp"))
    os.chmod(d, 0o700)
    s = Sessions(d)
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def sessions() -> Iterator[Sessions]:
    """The tower tests' own session directory (it shadows conftest's ``sessions`` where imported)."""
    with session_dir() as s:
        yield s


@pytest.fixture
def other() -> Iterator[Sessions]:
    """A second, separate session directory."""
    with session_dir() as s:
        yield s


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


def sleeper_argv(*extra: str) -> list[str]:
    """A foreign-looking long sleeper; ``extra`` lands in its argv (sys.argv[1:])."""
    return [sys.executable, "-c", "import time; time.sleep(120)", *extra]


__all__ = ["REPO", "Sessions", "alive", "boot_id", "identity", "is_dead", "other", "session_dir", "sessions",
           "sleeper_argv", "tree"]
