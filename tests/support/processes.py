"""Processes by identity (boot id, pid, start time): finding, probing and killing only what a test started."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from shellper.host import warmstart
from shellper.host.identity import IdentityError, ProcessIdentity, open_verified, read_stat
from shellper.host.reaper import descendants
from support.paths import SHELLPER_CLI


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
    """SIGKILL ``ident`` through a pidfd opened after checking it is still that process, and wait for its end."""
    with contextlib.suppress(IdentityError, OSError):
        fd = open_verified(ident, allow_zombie=True)
        try:
            fd.send_signal(signal.SIGKILL)
            fd.wait_dead(5.0)
        finally:
            fd.close()


def children(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` now (every thread's children)."""
    out: set[int] = set()
    with contextlib.suppress(FileNotFoundError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{task}/children") as fh:
                out.update(int(p) for p in fh.read().split())
    return out


def sleeper_argv(*extra: str) -> list[str]:
    """A foreign-looking long sleeper; ``extra`` lands in its argv (sys.argv[1:])."""
    return [sys.executable, "-c", "import time; time.sleep(120)", *extra]


def vm_kib(pid: int, key: str) -> int:
    """A /proc/PID/status memory figure (VmRSS, VmHWM) in KiB."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {key} for {pid}")


def daemons_for(directory: Path) -> list[int]:
    """Shellper processes for ``directory`` (their argv names it), found by scanning /proc: daemons
    started by ``launch()``, anything forked from the CLI (a daemon, or a prefork left behind), and sessions
    the directory's warm launcher forked (its argv, but not the launcher itself)."""
    found = []
    script = os.fsencode(SHELLPER_CLI[-1])
    about = warmstart.launcher_status(str(directory))
    launcher_pid = about["pid"] if about else None
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            forked = b"shellper.daemon.launcher" in argv and int(entry) != launcher_pid  # by the warm launcher
            if (b"shellper.daemon" in argv or script in argv or forked) and os.fsencode(str(directory)) in argv:
                found.append(int(entry))
    return found


UNDER_SUBREAPER = """
import os, subprocess, sys
os.environ["SHELLPER_LAUNCHER"] = "off"  # the cold path: a warm launcher is left running by design
from shellper.host.reaper import set_child_subreaper
set_child_subreaper()
code = subprocess.run(sys.argv[1:]).returncode
orphans = []
while True:  # anything the CLI left behind is ours now: wait for it
    try:
        orphans.append(os.waitpid(-1, 0)[0])
    except ChildProcessError:
        break
print("orphans:", orphans, file=sys.stderr)
sys.exit(code)
"""
"""``python -c UNDER_SUBREAPER ARGV...``: runs ARGV as a subreaper and reports (stderr) what it left behind."""
