"""The run's guard: ends what a test run started when the run itself ends, however it ends.

``python run_guard.py MARK OWNER_PID [CGROUP_PARENT]``, started by the run's first process (support.run), in a
session of its own (so a Ctrl-C at the terminal does not reach it) and without the run's mark in its environment
(so the run's own sweep leaves it alone). It waits on a pidfd for the run's first process to exit; then it ends
every process still carrying ``MARK`` (the value of PYTEST_SHELLPER_RUN) and removes the run's cgroup tree,
killing what is in it. After a run that ended normally the run has already done both and this finds nothing; after
a SIGKILL of pytest it is what ends the sessions the tests started (and xdist's workers). Standard library only:
it is also imported by support.run, whose end-of-run sweep is this one.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

RUN_ENV = "PYTEST_SHELLPER_RUN"


def ancestors() -> set[int]:
    """This process and its ancestors (a sweep never ends them)."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def sweep(mark: str) -> list[str]:
    """SIGKILL every process but this one and its ancestors whose environment holds ``RUN_ENV=mark``; what each was.

    Each is pinned by a pidfd before its environment is read: a pid reused meanwhile is either another process of
    the run (its environment carries the mark too) or is left alone; the SIGKILL goes through the pidfd, so it can
    only reach the process whose mark was read."""
    wanted = f"{RUN_ENV}={mark}".encode()
    keep = ancestors()
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
                if wanted not in f.read().split(b"\0"):
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


def remove_tree(path: str, timeout: float = 5.0) -> None:
    """Kill what is in a cgroup and below it (cgroup.kill), then remove the groups, deepest first."""
    with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.kill"), "w") as f:
        f.write("1")
    deadline = time.monotonic() + timeout
    for root, _dirs, _files in sorted(os.walk(path), key=lambda t: -len(t[0])):
        while True:  # a killed group empties within milliseconds: rmdir says EBUSY until then
            try:
                os.rmdir(root)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)


def main() -> None:
    mark, owner = sys.argv[1], int(sys.argv[2])
    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:
        fd = None
    if fd is not None:
        select.select([fd], [], [])
    if len(sys.argv) > 3:
        remove_tree(sys.argv[3])
    sweep(mark)


if __name__ == "__main__":
    main()
