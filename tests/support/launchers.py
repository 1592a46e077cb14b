"""The warm launchers the tests' launches start (shellper.daemon.launcher): found, ended, and looked for after a test.

Launches are warm by default (the suite's conftest makes them cold unless the run says SHELLPER_LAUNCHER; the
``launches`` fixture of support.sessions runs a test warm too), so the first warm launch in a runtime directory starts
a launcher there, which outlives the test unless something ends it. How each test's launcher ends:

- a directory the test's fixture removes (``runtime_dir``, ``other``, ``cli_runtime_dir``, the terminals'):
  the launcher sees it go (inotify) and exits on its own;
- ``Sessions.cleanup`` ends the launcher of its directory after its sessions, before it looks for files left,
  so a strict test's directory holds only the launcher's log (``.launcher.log``, kept as ``logs/`` is);
- a directory pytest keeps after the test (``tmp_path``): the leak guard ends its launcher at the test's end.

The leak guard (conftest's ``no_leaks``) then fails a test that left one running whose directory is gone or is
one of the test's private directories: a launcher that outlives its test is a leak.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from shellper.host import warmstart
from shellper.host.identity import IdentityError, ProcessIdentity, open_verified

MODULE = b"shellper.daemon.launcher"
MADE: dict[str, frozenset[str]] = {}
"""The private runtime directories this process made (support.sessions.private_dir), each with the pids there were
then (:func:`pids_now`): a launcher left in one after its test is the test's leak, and only a process started since
can be its launcher."""


def pids_now() -> frozenset[str]:
    """The pids in /proc now, as its entries name them: one directory read, where reading each process's
    command line (launcher_processes) costs a few milliseconds on a busy machine, twice per test."""
    return frozenset(e for e in os.listdir("/proc") if e.isdigit())


def launcher_processes(new_since: frozenset[str] | None = None) -> dict[ProcessIdentity, str]:
    """Every launcher of ours running now, with the runtime directory its argv names; with ``new_since`` (from
    :func:`pids_now`), only those whose pid was not there then. A session the launcher
    forked shows the same command line until it execs (which it never does): it is told apart by what it holds
    open, its files in that directory, where a launcher holds only its lock there (or nothing yet, warming up)."""
    found: dict[ProcessIdentity, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or (new_since is not None and entry in new_since):
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if MODULE not in argv or os.stat(f"/proc/{entry}").st_uid != os.geteuid():
                continue
            at = argv.index(MODULE)
            if at + 1 == len(argv):
                continue
            where = os.fsdecode(argv[at + 1])
            held = set()
            for fd in os.listdir(f"/proc/{entry}/fd"):
                with contextlib.suppress(OSError):
                    held.add(os.readlink(f"/proc/{entry}/fd/{fd}"))
        except OSError:
            continue
        lock = os.path.join(where, warmstart.LOCK_NAME)
        if lock not in held and any(under(h, where) for h in held):
            continue  # a session
        ident = ProcessIdentity.of(int(entry))
        if ident is not None:
            found[ident] = where
    return found


def end(ident: ProcessIdentity) -> None:
    """SIGTERM ``ident`` (a launcher has no handler: it ends at once) through a verified pidfd; wait for its end."""
    with contextlib.suppress(IdentityError, OSError):
        fd = open_verified(ident, allow_zombie=True)
        try:
            fd.send_signal(signal.SIGTERM)
            if not fd.wait_dead(5.0):
                fd.send_signal(signal.SIGKILL)
                fd.wait_dead(5.0)
        finally:
            fd.close()


def end_launchers(directory: str | Path) -> list[ProcessIdentity]:
    """End the launchers of ``directory``, and remove the socket and lock
    file a killed one leaves (as the next launcher would); what was ended."""
    directory = os.path.abspath(directory)
    found = launcher_processes(new_since=MADE.get(directory))
    ended = [ident for ident, where in found.items() if os.path.abspath(where) == directory]
    for ident in ended:
        end(ident)
    for name in (warmstart.SOCKET_NAME, warmstart.LOCK_NAME):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(os.path.join(directory, name))
    return ended


def wait_listening(directory: str | Path) -> int:
    """The pid of ``directory``'s launcher once it serves (the one its first launch started, still warming up):
    a test that removes the directory under it waits for it first, else the launcher may write in it meanwhile."""
    from support.waiting import poll_until

    about = poll_until(lambda: warmstart.launcher_status(str(directory)), what="the warm launcher to serve")
    return int(about["pid"])


def settled(directory: str | Path) -> None:
    """Wait for ``directory``'s launcher to serve when this run's launches are warm (SHELLPER_LAUNCHER=on):
    its first launch started one, which must not write in the directory while a test removes it."""
    if warmstart.enabled():
        wait_listening(directory)


def forked_by_a_launcher(pid: int) -> bool:
    """Whether the shellper ``pid`` was forked by a warm launcher: it shows the launcher's command line (a cold one
    shows ``shellper.daemon``'s)."""
    return MODULE in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def under(path: str, root: str) -> bool:
    root = os.path.abspath(root)
    return os.path.abspath(path) == root or os.path.abspath(path).startswith(root + os.sep)


def left_by_the_test(before: frozenset[str], kept_root: str | None) -> dict[ProcessIdentity, str]:
    """The launchers started since ``before`` (:func:`pids_now`) that the test left: those in a directory that is
    gone or that this process made. Those under ``kept_root`` (pytest's base temporary directory, kept after a
    test by design) are ended here first, quietly. A launcher whose pid was reused during the test (the pids
    wrapped) is not told apart here; the run's own sweep at its end still finds it (support.run.clean_up_run)."""
    new = launcher_processes(new_since=before)
    if kept_root is not None:
        for where in {w for w in new.values() if under(w, kept_root)}:
            end_launchers(where)
    return {ident: where for ident, where in new.items()
            if ident.is_alive() and (not os.path.isdir(where) or os.path.abspath(where) in MADE)}
