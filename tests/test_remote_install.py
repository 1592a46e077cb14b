"""A host with Python and no shellper gets this version on its first ``--host`` use, over the same ssh
connection, from this installation's files (shellper.host.selfinstall): tested as users made for the test,
with empty homes, on the loopback sshd (support.sshd, support.remote.fresh_user)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pexpect
import pytest
from support.paths import SHELLPER_CLI
from support.remote import TIMEOUT, fresh_user, shellper
from support.sshd import NO_PYTHON_USER, SshWorld
from support.waiting import poll_until

from shellper import __version__
from shellper.host import selfinstall, ssh

INSTALLED = Path(".local/share/shellper")


@pytest.fixture
def installing(remote: SshWorld, monkeypatch: pytest.MonkeyPatch) -> SshWorld:
    """The private ssh world with no $SHELLPER_REMOTE: shellper finds, or installs, its own copy."""
    monkeypatch.delenv(ssh.REMOTE_ENV, raising=False)
    return remote


def in_terminal(*args: str) -> tuple[int, str]:
    """A shellper command in a terminal of its own, as a person meets it: its status and what it showed."""
    env = {k: v for k, v in os.environ.items() if k != ssh.REMOTE_ENV}
    said, status = pexpect.run(shlex.join([*SHELLPER_CLI, *args]), env=env, timeout=120, withexitstatus=True)
    return int(status), said.decode(errors="replace")


def test_the_first_use_installs_this_version_in_an_empty_home(installing: SshWorld) -> None:
    with fresh_user(installing) as user:
        assert list(user.home.iterdir()) == []
        status, said = in_terminal("--host", user.host, "run", "w", "--containment", "none", "--", "cat")
        assert status == 0, said
        assert f"installing shellper {__version__} on {user.host} in ~/{INSTALLED}/{__version__}" in said, said
        assert "started w (pid " in said, said
        copy = user.home / INSTALLED / __version__
        assert (copy / "bin" / "shellper").is_file() and (copy / "bin" / "tower-client").is_file()
        sites = list(copy.glob("lib/python3*/site-packages"))
        assert len(sites) == 1 and not list(sites[0].glob("msgpack/*.so"))  # msgpack's pure-Python modules
        assert [p.name for p in (user.home / INSTALLED).iterdir()] == [__version__]  # no temporary left

        # Found again by its path, not installed again; the protocol works through it (send, tail).
        assert shellper("send", f"{user.host}:w", "over the copy", "--enter").returncode == 0
        poll_until(lambda: "over the copy" in shellper("tail", f"{user.host}:w", "--plain").stdout, TIMEOUT,
                   what="the sent line in the installed copy's session")
        ssh.stop_master(user.host)  # a new connection: its version is asked again, and found
        status, said = in_terminal("--host", user.host, "ls")
        assert status == 0 and "installing" not in said and "w " in said, said
        listed = subprocess.run([sys.executable, "-m", "tower_client.cli", "--host", user.host, "ls", "--json"],
                                capture_output=True, text=True, timeout=60,
                                env={k: v for k, v in os.environ.items() if k != ssh.REMOTE_ENV})
        assert listed.returncode == 0, listed.stderr  # tower-client beside it, installed with it
        assert [s["name"] for s in json.loads(listed.stdout)] == ["w"]
        assert shellper("stop", f"{user.host}:w").returncode == 0


def test_concurrent_first_uses_leave_one_whole_copy(installing: SshWorld) -> None:
    with fresh_user(installing) as user:
        ssh.ensure_master(user.host)  # all three share it, as commands do; each finds no copy and installs
        env = {k: v for k, v in os.environ.items() if k != ssh.REMOTE_ENV}

        def ls(_: int) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*SHELLPER_CLI, "--host", user.host, "ls", "--json"], capture_output=True,
                                  text=True, timeout=120, env=env)

        with ThreadPoolExecutor(3) as pool:
            results = list(pool.map(ls, range(3)))
        assert all(r.returncode == 0 and json.loads(r.stdout) == [] for r in results), results
        assert [p.name for p in (user.home / INSTALLED).iterdir()] == [__version__]
        said = subprocess.run(["sh", "-c", f"{user.home / INSTALLED / __version__}/bin/shellper --version"],
                              capture_output=True, text=True, timeout=60)
        assert said.stdout.strip() == f"shellper {__version__}"


def test_a_copy_whose_python_went_is_replaced(installing: SshWorld) -> None:
    """The host's Python upgraded away from under the copy (its venv's link to it dangles): the next use
    installs again, in its place."""
    with fresh_user(installing) as user:
        assert shellper("--host", user.host, "ls").returncode == 0
        python = user.home / INSTALLED / __version__ / "bin" / "python"
        python.unlink()
        python.symlink_to("/nonexistent/python3.11")
        ssh.stop_master(user.host)  # a new connection asks again
        done = shellper("--host", user.host, "ls", "--json")
        assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr
        assert f"installing shellper {__version__}" in done.stderr
        assert python.resolve().exists()
        assert [p.name for p in (user.home / INSTALLED).iterdir()] == [__version__]


def _files_of_version(version: str) -> bytes:
    """This installation's files, saying they are ``version``: another release, for the test."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(selfinstall.payload()), mode="r:gz") as src, \
            tarfile.open(fileobj=out, mode="w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member)
            content = data.read() if data is not None else b""
            if member.name == "shellper/__init__.py":
                content = content.replace(f'"{__version__}"'.encode(), f'"{version}"'.encode())
                member.size = len(content)
            dst.addfile(member, io.BytesIO(content))
    return out.getvalue()


def test_another_version_goes_beside_the_old_whose_sessions_run_on(installing: SshWorld) -> None:
    old = "0.0.9"
    with fresh_user(installing) as user:
        files = _files_of_version(old)
        source = selfinstall.installer_input(old, hashlib.sha256(files).hexdigest(), len(files))
        python = selfinstall.found_python(ssh.run_remote(user.host, "sh -s", input=selfinstall.PROBE).stdout)
        done = ssh.run_remote(user.host, selfinstall.installer_command(python, len(source)), input=source + files,
                              timeout=120)
        assert done.returncode == 0 and done.stdout.startswith(b"ok "), done
        old_shellper = f"~/{INSTALLED}/{old}/bin/shellper"
        started = ssh.run_remote(user.host, f"{old_shellper} run --json old --containment none -- sleep 300")
        assert started.returncode == 0, started.stderr
        old_pid = json.loads(started.stdout)["shellper_pid"]

        status, said = in_terminal("--host", user.host, "ls")  # this version: installed beside the old
        assert status == 0 and f"installing shellper {__version__}" in said and "old " in said, said
        assert sorted(p.name for p in (user.home / INSTALLED).iterdir()) == sorted([old, __version__])
        exe = Path(f"/proc/{old_pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        assert exe.startswith(str(user.home / INSTALLED / old)), exe  # the old session, on its own version
        assert shellper("stop", f"{user.host}:old").stdout.strip() == "stopped old"


def test_a_host_without_python_is_one_line(installing: SshWorld) -> None:
    with fresh_user(installing, NO_PYTHON_USER) as user:
        status, said = in_terminal("--host", user.host, "ls")
        assert status == 1, said
        assert said.strip() == (f"shellper: host {user.host}: no Python 3.11 or newer there to install shellper "
                                f"into (python3=3.9): install one, or point $SHELLPER_REMOTE at a shellper "
                                f"{__version__}"), said
        assert not (user.home / INSTALLED).exists()


def test_shellper_remote_still_overrides(installing: SshWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    with fresh_user(installing) as user:
        monkeypatch.setenv(ssh.REMOTE_ENV, "/nowhere/shellper")
        done = shellper("--host", user.host, "ls")
        assert done.returncode == 1 and "no shellper there" in done.stderr, done.stderr
        assert list(user.home.iterdir()) == []  # nothing installed: the command named is the one used


def test_a_damaged_copy_is_refused_before_it_is_unpacked(tmp_path: Path) -> None:
    """The installer as it runs there, here, in a home of its own: a byte changed on the way is found by the
    hash, and nothing is unpacked; the whole copy installs."""
    files = selfinstall.payload()
    source = selfinstall.installer_input(__version__, hashlib.sha256(files).hexdigest(), len(files))
    python = selfinstall.found_python(subprocess.run(["sh", "-s"], input=selfinstall.PROBE, capture_output=True,
                                                     timeout=60).stdout)
    command = selfinstall.installer_command(python, len(source))
    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"]}
    damaged = bytearray(files)
    damaged[len(damaged) // 2] ^= 0x20
    done = subprocess.run(["sh", "-c", command], input=source + bytes(damaged), capture_output=True, env=env,
                          timeout=120)
    assert done.returncode == 1 and done.stdout.startswith(b"error the copy arrived damaged"), done
    assert not (tmp_path / INSTALLED).exists()
    t0 = time.monotonic()
    done = subprocess.run(["sh", "-c", command], input=source + files, capture_output=True, env=env, timeout=120)
    assert done.stdout.decode().strip() == f"ok {tmp_path / INSTALLED / __version__}", (done, time.monotonic() - t0)
    with tempfile.TemporaryDirectory() as cwd:  # the copy runs from anywhere, PATH or not
        said = subprocess.run([str(tmp_path / INSTALLED / __version__ / "bin" / "shellper"), "--version"], cwd=cwd,
                              capture_output=True, text=True, timeout=60, env={"HOME": str(tmp_path)})
    assert said.stdout.strip() == f"shellper {__version__}", said
