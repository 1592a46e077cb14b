"""The remote tests' two private sshd hosts (support.sshd) as fixtures, and what they run there."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from shellper.host import ssh
from support.paths import SHELLPER_CLI
from support.processes import kill_verified
from support.sshd import FRESH, FRESH_USER, SshWorld, ssh_world
from support.waiting import poll_until, wait_gone

PY = sys.executable
TIMEOUT = 20.0


@pytest.fixture(scope="module")
def world() -> Iterator[SshWorld]:
    with ssh_world() as w:
        yield w


@pytest.fixture
def remote(world: SshWorld, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshWorld]:
    """The private ssh configuration in the environment; afterwards every session on either host is stopped."""
    for key, value in world.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(ssh, "_checked", {})
    try:
        yield world
    finally:
        for host in world.hosts.values():
            for sock in host.runtime.glob("*.sock"):
                subprocess.run([PY, "-m", "shellper", "--dir", str(host.runtime), "stop", "--grace", "0.2",
                                sock.stem], capture_output=True, timeout=60)


def shellper(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SHELLPER_CLI, *args], capture_output=True, text=True, timeout=60, input=input)


FLOOD_LINES = 400_000
"""Lines of 8 bytes and CRLF: 4 MB, within the default 8 MiB ring."""
FLOOD = f"""
import sys, time
sys.stdin.readline()
out = sys.stdout
for i in range({FLOOD_LINES}):
    out.write("%07d\\n" % i)
    if i % 2000 == 1999:
        out.flush()
        time.sleep(0.002)
out.write("DONE\\n")
out.flush()
time.sleep(300)
"""


@dataclass
class FreshUser:
    name: str
    uid: int
    home: Path

    @property
    def host(self) -> str:
        """The ssh destination that logs in as this user (alpha's sshd, no runtime directory set)."""
        return f"{self.name}@{FRESH}"


_serial = itertools.count()
USERADD_NAME_IN_USE = 9


@contextlib.contextmanager
def fresh_user(world: SshWorld, prefix: str = FRESH_USER) -> Iterator[FreshUser]:
    """A user made for the block, with an empty home of its own, who can log in to ``fresh`` with the world's
    key (support.sshd); afterwards its shared connection, its processes (all this test's), its files and the
    user are gone. Needs root and useradd: skipped, saying so, without them."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("userdel"):
        pytest.skip("a remote user with an empty home needs root, useradd and userdel")
    name = f"{prefix}{os.getpid() % 100000}x{next(_serial)}"
    home = Path(tempfile.mkdtemp(prefix=f"{name}-home-", dir="/tmp"))
    # -p '*': no password, but not a locked account, which sshd without PAM refuses even for a key
    add = ["useradd", "-p", "*", "-M", "-d", str(home), "-s", "/bin/sh", name]
    if subprocess.run(add, capture_output=True, timeout=60).returncode == USERADD_NAME_IN_USE:
        # a killed run's, whose worker had this pid (a live run's workers have other pids): ours to remove
        subprocess.run(["userdel", "-f", name], capture_output=True, timeout=60)
        subprocess.run(add, check=True, capture_output=True, timeout=60)
    uid = int(subprocess.run(["id", "-u", name], check=True, capture_output=True, text=True).stdout)
    user = FreshUser(name, uid, home)
    try:
        os.chown(home, uid, uid)
        home.chmod(0o700)
        key = world.keys / name
        shutil.copy(world.base / "id.pub", key)
        key.chmod(0o644)
        yield user
    finally:
        pid = ssh.master_pid(user.host)
        ssh.stop_master(user.host)
        if pid is not None and not wait_gone(pid, 10):
            os.kill(pid, signal.SIGKILL)
        _end_processes_of(uid)
        subprocess.run(["userdel", "-f", name], capture_output=True, timeout=60)
        for path in (home, world.keys / name, Path(f"/tmp/shellper-{uid}")):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _end_processes_of(uid: int) -> None:
    """Every process of the user this test made (so this test's): what its sessions left, killed by pid after
    checking its identity, again until none is left (a killed shellper's child may outlive it a moment)."""
    from shellper.host.identity import ProcessIdentity

    def mine() -> list[int]:
        return [p.pid for p in psutil.process_iter(["uids", "status"])
                if p.info["uids"] and p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE]

    def ended() -> bool:
        for pid in mine():
            ident = ProcessIdentity.of(pid)
            if ident is not None:
                kill_verified(ident)
        return not mine()

    poll_until(ended, 10, what=f"uid {uid}'s processes to end")
