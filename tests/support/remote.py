"""The remote tests' two private sshd hosts (support.sshd) as fixtures, and what they run there."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from shellper.host import ssh
from support.paths import SHELLPER_CLI
from support.sshd import SshWorld, ssh_world

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
