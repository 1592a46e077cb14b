"""Real OpenSSH servers for the remote tests: each on a loopback port, with throwaway host and user keys
and a private configuration (nothing of the machine's ssh configuration is read or touched).

Two "hosts", ``alpha`` and ``beta``, are two sshd instances on this machine, each giving its logins a
runtime directory of their own (``SetEnv SHELLPER_DIR``, accepted by the server), so their sessions are
apart as on two machines; ``down`` names a port nothing listens on. ``$SHELLPER_SSH`` points shellper at
the private client configuration, ``$SHELLPER_REMOTE`` at this checkout's ``shellper``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from shellper.host import ssh
from support.waiting import poll_until, wait_gone

HOSTS = ("alpha", "beta")
DOWN = "down"
FRESH = "fresh"
"""alpha's sshd without a runtime directory set, for users a test creates (support.remote.fresh_user)."""
FRESH_USER, NO_PYTHON_USER = "spfresh", "spnopy"
"""The prefixes of those users' names: their keys are in SshWorld.keys; the second's PATH has no python3 of
3.11 or newer (a sh, and a python3 that says it is 3.9)."""
SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/bin/sshd")


def find_sshd() -> str | None:
    found = shutil.which("sshd") or next((p for p in SSHD_CANDIDATES if os.path.exists(p)), None)
    return found


def install_sshd() -> str:
    """sshd's path, installing Debian's openssh-server as root when it is missing; pytest.skip with the
    reason where neither can be had."""
    found = find_sshd()
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("sshd is not installed and cannot be (needs root and apt-get): "
                    "`apt-get install openssh-server` to run the remote tests")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", "install", "-y", "-qq", "openssh-server"], capture_output=True, env=env,
                          timeout=600)
    found = find_sshd()
    if not found:
        tail = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[-1:]
        pytest.skip(f"sshd is not installed and apt-get could not install it: {' '.join(tail)}")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _held_port() -> socket.socket:
    """A loopback port bound and never listened on, for as long as the socket is open: a connection to it is
    refused, and no other process (another test run's sshd) can take it meanwhile."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


def _listening(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Whether ``proc`` itself listens on ``port``: a connection alone could reach another run's sshd that
    took the port between _free_port and this sshd's bind (then this one exits, and is started again)."""
    try:
        return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                   for c in psutil.Process(proc.pid).net_connections(kind="tcp"))
    except psutil.Error:
        return False


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True)


@dataclass
class SshHost:
    alias: str
    port: int
    runtime: Path
    proc: subprocess.Popen[bytes] | None = None


@dataclass
class SshWorld:
    base: Path
    config: Path
    control: Path
    keys: Path
    """Fresh users' public keys, one file per user: outside ``base``, which is root's alone."""
    hosts: dict[str, SshHost] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {ssh.SSH_ENV: f"ssh -F {self.config}", ssh.REMOTE_ENV: str(Path(sys.executable).with_name("shellper")),
                ssh.CONTROL_DIR_ENV: str(self.control)}

    def stop_masters(self) -> None:
        """End every shared connection a test left, and wait until its process is gone."""
        for alias in self.hosts:
            pid = ssh.master_pid(alias)
            ssh.stop_master(alias)
            if pid is not None and not wait_gone(pid, 10):
                os.kill(pid, signal.SIGKILL)


def _sshd_config(world: SshWorld, host: SshHost, host_key: Path) -> Path:
    path = world.base / f"sshd-{host.alias}.conf"
    path.write_text(f"""\
Port {host.port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile none
AuthorizedKeysFile {world.base}/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AcceptEnv SHELLPER_*
PrintMotd no
PrintLastLog no
MaxSessions 100
MaxStartups 100
LogLevel ERROR
Match User {NO_PYTHON_USER}*
  AuthorizedKeysFile {world.keys}/%u
  SetEnv PATH={world.keys}/bin
Match User {FRESH_USER}*
  AuthorizedKeysFile {world.keys}/%u
""")
    return path


def _no_python_bin(world: SshWorld) -> None:
    """The PATH of the no-Python user: sh (the login shell runs ``sh -s``), and a python3 that is too old."""
    bin_dir = world.keys / "bin"
    bin_dir.mkdir(mode=0o755)
    (bin_dir / "sh").symlink_to("/bin/sh")
    (bin_dir / "python3").write_text("#!/bin/sh\necho 3.9\n")
    (bin_dir / "python3").chmod(0o755)


def _client_config(world: SshWorld, key: Path, down_port: int) -> None:
    user = os.environ.get("USER") or "root"
    lines = []
    # The run's cgroup parent goes along (the sessions a test starts there are contained under it, as here, and
    # the machine's default parent is never made); no launcher, as conftest.
    parent = os.environ.get("SHELLPER_CGROUP_PARENT")
    extra = f" SHELLPER_CGROUP_PARENT={parent}" if parent else ""
    for host in world.hosts.values():
        lines += [f"Host {host.alias}", "  HostName 127.0.0.1", f"  Port {host.port}",
                  f"  SetEnv SHELLPER_DIR={host.runtime} SHELLPER_LAUNCHER=off{extra}"]
    alpha = world.hosts[HOSTS[0]]
    lines += [f"Host {FRESH}", "  HostName 127.0.0.1", f"  Port {alpha.port}", "  SetEnv SHELLPER_LAUNCHER=off"]
    lines += [f"Host {DOWN}", "  HostName 127.0.0.1", f"  Port {down_port}",
              "Host *", f"  User {user}", f"  IdentityFile {key}", "  IdentitiesOnly yes",
              f"  UserKnownHostsFile {world.base}/known_hosts", "  GlobalKnownHostsFile /dev/null",
              "  StrictHostKeyChecking accept-new", "  LogLevel ERROR"]
    world.config.write_text("\n".join(lines) + "\n")


@contextlib.contextmanager
def ssh_world() -> Iterator[SshWorld]:
    """Two sshd instances (alpha, beta) for the length of the block, each stopped by its pid afterwards."""
    sshd = install_sshd()
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    base = Path(tempfile.mkdtemp(prefix="spssh-", dir="/tmp"))  # short: control sockets live under it
    os.chmod(base, 0o700)
    keys = Path(tempfile.mkdtemp(prefix="spkeys-", dir="/tmp"))
    keys.chmod(0o755)  # a fresh user's sshd reads its key as that user
    world = SshWorld(base, base / "ssh_config", base / "ctl", keys)
    world.control.mkdir(mode=0o700)
    _no_python_bin(world)
    down = _held_port()
    try:
        host_key, user_key = base / "host_key", base / "id"
        _keygen(host_key)
        _keygen(user_key)
        shutil.copy(f"{user_key}.pub", base / "authorized_keys")
        for alias in HOSTS:
            runtime = base / f"{alias}-run"
            runtime.mkdir(mode=0o700)
            world.hosts[alias] = SshHost(alias, _free_port(), runtime)
        for host in world.hosts.values():
            for _attempt in range(5):
                config = _sshd_config(world, host, host_key)
                proc = host.proc = subprocess.Popen([sshd, "-f", str(config), "-D", "-e"], stdin=subprocess.DEVNULL,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                poll_until(lambda p=proc, h=host: p.poll() is not None or _listening(p, h.port), 10,  # type: ignore[misc]
                           what=f"sshd {host.alias} to listen")
                if proc.poll() is None:
                    break
                host.port = _free_port()  # taken meanwhile: another port
            else:
                pytest.fail(f"sshd {host.alias} could not listen on any of five free ports")
        _client_config(world, user_key, int(down.getsockname()[1]))
        yield world
    finally:
        down.close()
        with contextlib.suppress(Exception), _env(world.env()):
            world.stop_masters()
        for host in world.hosts.values():
            if host.proc is not None:
                host.proc.terminate()
                try:
                    host.proc.wait(10)
                except subprocess.TimeoutExpired:
                    host.proc.kill()
                    host.proc.wait()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(keys, ignore_errors=True)


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
