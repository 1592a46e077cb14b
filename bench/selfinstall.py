"""What a host's first use costs when shellper installs itself there: ``python -m bench.selfinstall [ROUNDS]``
(needs root and sshd: tests/support/sshd.py starts one on a loopback port, and support.remote.fresh_user makes a
user with an empty home for each round).

Each round times ``shellper --host USER@fresh ls`` twice, alternated: on the empty home (it installs), then
again on a new connection (the copy found by its path). Both include making the connection.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.remote import fresh_user
from support.sshd import ssh_world

from shellper.host import ssh

SHELLPER = str(Path(sys.executable).with_name("shellper"))


def _timed_ls(host: str, installs: bool) -> float:
    t0 = time.monotonic()
    done = subprocess.run([SHELLPER, "--host", host, "ls"], capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - t0
    assert done.returncode == 0 and ("installing" in done.stderr) == installs, done
    ssh.stop_master(host)  # the next command makes a new connection and asks the version again
    return elapsed


def main(rounds: int = 4) -> None:
    first: list[float] = []
    again: list[float] = []
    with ssh_world() as world:
        os.environ.update(world.env())
        os.environ.pop(ssh.REMOTE_ENV)
        for _ in range(rounds):
            with fresh_user(world) as user:
                first.append(_timed_ls(user.host, installs=True))
                again.append(_timed_ls(user.host, installs=False))
    for label, times in (("first use (installs)", first), ("again, new connection", again)):
        print(f"{label:24} {', '.join(f'{t:.2f}' for t in times)}  median {statistics.median(times):.2f} s")
    print(f"ratio {statistics.median(first) / statistics.median(again):.2f}; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
