"""Ending a session from outside it: a dead session's files removed, a live shellper terminated, verified.

* clean: take the session lock ourselves (so nobody can start the session meanwhile, and proving no live
  owner), remove the session's cgroup if its record names one that is verifiably its own and empty, the
  socket (only if it is a socket), record, log and the temp files a cut-short record write left
  (``.NAME.json.<pid>.<hex>.tmp``; only regular files), then release the lock, which removes the lock
  file. Nothing is followed through a symlink. What the dead session's tree left running is ended before,
  by :mod:`shellper.host.survivors`: :func:`clear_dead` does both, for ``shellper stop`` and a Tower's apply.
* terminate: re-verify the shellper through a pidfd (boot id + start ticks, then - read through the
  pinned pidfd - that its /proc/<pid>/cmdline hashes to the record's ``cmdline_sha256``, which the
  shellper wrote about itself, and that it holds the record's listening socket or sits in its cgroup;
  never this process or one of its ancestors), pin its descendants, then let the caller ask it to STOP
  over its socket (``ask_stop``: it kills its own tree, confirms the deaths and removes its files). If
  STOP cannot be delivered or the shellper does not exit in time: :func:`shellper.host.reaper.terminate_tree`
  (SIGTERM, grace, SIGKILL, confirmed death, all through pidfds). Either way every descendant pinned
  before the first signal must be dead afterwards, or :class:`~shellper.host.reaper.SurvivorError` is
  raised.

The socket is the caller's to speak (this layer has no client): ``shellper stop`` and ``tower_client``
send STOP through :func:`shellper.client.stop.send_stop`, each once it answers as the recorded instance
from the recorded pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from shellper.core import structs
from shellper.core.containment import Containment
from shellper.core.defaults import DEFAULT_GRACE
from shellper.core.errors import ShellperError
from shellper.host.cgroup import CHILD_SUB, verify_dead_session
from shellper.host.identity import (
    IdentityError,
    IdentityMismatch,
    IdentityUnreadable,
    PidFd,
    ProcessGone,
    ProcessIdentity,
    open_verified,
    read_stat,
)
from shellper.host.paths import SessionPaths, remove_record_temps, session_files, unlink_if_regular, unlink_if_socket
from shellper.host.reaper import SurvivorError, TerminateReport, descendants, terminate_tree
from shellper.host.record import AlreadyRunning, RecordError, SessionLock, SessionRecord, cmdline_sha256, read_record
from shellper.host.shellpers import live_shellpers, serves, session_cgroup, under
from shellper.host.survivors import SurvivorReport, end_cgroup, protected_pids, reap_survivors

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    class Connection(Protocol):
        """What ``ask_stop`` returns: the connection STOP went over, closed once the shellper is gone."""

        def close(self) -> None: ...

__all__ = [
    "CONFIRM_TIMEOUT",
    "STOP_MARGIN",
    "Cleared",
    "CommandMismatch",
    "NotAShellper",
    "ProtectedProcess",
    "StopNotDelivered",
    "Termination",
    "clean_session",
    "clear_dead",
    "terminate_shellper",
]

CONFIRM_TIMEOUT = 2.0
"""Seconds SIGKILLed processes get to exit before they count as survivors."""
STOP_MARGIN = 10.0
"""A STOPped shellper gets ``grace`` + this long to exit (its SIGKILL wait, flushing EXIT to clients)."""


# --------------------------------------------------------------------------------------------- clean


def clean_session(paths: SessionPaths) -> tuple[str, ...]:
    """Remove a dead session's files while holding its lock; returns the paths removed.

    Raises AlreadyRunning if a live process holds the lock (nothing removed), LockError if the lock
    file cannot be opened safely (e.g. it is a symlink). The lock is taken without writing to it, so
    a full disk does not stop the clean-up.
    """
    had_lock_file = os.path.isfile(paths.lock) and not os.path.islink(paths.lock)
    lock = SessionLock.acquire(paths.lock, paths.name, write_pid=False)
    removed: list[str] = []
    try:
        _remove_empty_cgroup(paths)
        if unlink_if_socket(paths.socket):
            removed.append(str(paths.socket))
        for path in (paths.record, paths.log, paths.log + ".1"):
            if unlink_if_regular(path):
                removed.append(str(path))
        removed += remove_record_temps(paths)  # nobody can be writing the record: we hold its lock
    finally:
        lock.release()
    if had_lock_file and not os.path.exists(paths.lock):
        removed.append(str(paths.lock))
    return tuple(removed)


def _remove_empty_cgroup(paths: SessionPaths) -> None:
    """The dead session's cgroup, if its record names one that is verifiably its own and empty: while
    the record is still there to say which (processes in it are ended by reap_survivors, not here)."""
    try:
        record = read_record(paths.record)
    except (OSError, RecordError):
        return
    if record.containment == Containment.NONE:
        return
    group, _ = verify_dead_session(record.cgroup, record.cgroup_id, str(paths.dir), record.name,
                                   record.instance_id)
    if group is not None and not group.populated():
        with contextlib.suppress(OSError):
            group.remove()


@structs.record(frozen=True)
class Cleared:
    """What :func:`clear_dead` did: ``reaped``, the processes the dead tree left running, ended; ``removed``,
    the files removed (None: a live shellper took the name meanwhile, so nothing was)."""

    reaped: SurvivorReport
    removed: tuple[str, ...] | None


def clear_dead(record: SessionRecord | None, paths: SessionPaths, *, grace: float = DEFAULT_GRACE,
               confirm_timeout: float = CONFIRM_TIMEOUT, directory: str | None = None) -> Cleared:
    """A dead session's leftovers, for ``shellper stop`` and a Tower's apply alike: what the tree of
    ``record``'s shellper left running ended (:func:`shellper.host.survivors.reap_survivors`, with
    ``directory``, default ``paths.dir``; nothing without a record), then its files removed under its lock
    (:func:`clean_session`). SurvivorError (nothing removed) and LockError pass on."""
    reaped = SurvivorReport(paths.name, (), ())
    if record is not None:
        reaped = reap_survivors(record, directory=paths.dir if directory is None else directory, grace=grace,
                                confirm_timeout=confirm_timeout)
    try:
        return Cleared(reaped, clean_session(paths))
    except AlreadyRunning:
        return Cleared(reaped, None)


# --------------------------------------------------------------------------------------------- terminate


class CommandMismatch(IdentityMismatch):
    """The pid carries the recorded start ticks, but its cmdline does not hash to the record's
    ``cmdline_sha256`` (or the record has none): not the recorded shellper. Nothing is signalled."""

    def __init__(self, identity: ProcessIdentity, expected_sha256: str | None, found_sha256: str) -> None:
        super().__init__(identity.pid, identity, identity)
        why = ("the record carries no cmdline_sha256" if expected_sha256 is None else
               f"its cmdline hashes to {found_sha256[:16]}..., the record says {expected_sha256[:16]}...")
        self.args = (f"pid {identity.pid} is not the recorded shellper: {why}",)
        self.expected_sha256 = expected_sha256
        self.found_sha256 = found_sha256


class NotAShellper(IdentityMismatch):
    """The pid runs the recorded command line, but holds neither the listening socket at the record's
    socket path nor a place in the record's cgroup: a stand-in, not the recorded shellper. Nothing is
    signalled."""

    def __init__(self, identity: ProcessIdentity, socket: str) -> None:
        super().__init__(identity.pid, identity, identity)
        self.args = (f"pid {identity.pid} is not the recorded shellper: it does not serve {socket}",)


class ProtectedProcess(IdentityError):
    """The record names this process or one of its ancestors: never signalled."""

    def __init__(self, pid: int) -> None:
        super().__init__(f"pid {pid} is this process or one of its ancestors: refusing to signal it", pid)


class StopNotDelivered(ShellperError):
    """``ask_stop`` could not deliver STOP (nothing answers, the connection failed): the shellper is
    ended through signals instead. The message says why."""


@structs.record(frozen=True)
class Termination:
    """How a session ended: ``method`` "stop" (graceful, over the socket) or "signals" (pidfd path)."""

    name: str
    pid: int
    method: str
    stop_error: str | None
    tree: tuple[int, ...]
    stragglers: tuple[int, ...]
    removed: tuple[str, ...]
    report: TerminateReport | None = None
    strangers: tuple[int, ...] = ()
    """Processes found in the session cgroup's shellper/ part once the shellper was gone: named, not signalled
    (shellper.host.survivors.end_cgroup)."""
    kept: str = ""
    """Why the session's cgroup is still there ("" if it was removed, or there was none)."""


def _check_leader(leader: PidFd, ident: ProcessIdentity, record: SessionRecord, paths: SessionPaths) -> None:
    """After :func:`open_verified`: not us nor an ancestor, and the pinned process runs the recorded
    program (its cmdline, read while the pidfd pins it, hashes as the shellper hashed its own)."""
    pid = leader.pid
    if pid in protected_pids():
        raise ProtectedProcess(pid)
    try:
        found = cmdline_sha256(pid)
    except OSError as e:
        if leader.wait_dead(0) or not leader.is_unreaped():
            raise ProcessGone(pid, "exited during verification") from e
        raise IdentityUnreadable(pid, f"/proc/{pid}/cmdline", e.strerror or str(e)) from e
    if not leader.is_unreaped():
        raise ProcessGone(pid, "reaped during verification")
    if leader.wait_dead(0):  # an exited process's cmdline reads empty: it is gone, not another program
        raise ProcessGone(pid, "exited during verification")
    if record.cmdline_sha256 is None or found != record.cmdline_sha256:
        raise CommandMismatch(ident, record.cmdline_sha256, found)
    if not serves(pid, record, str(paths.dir)):
        raise NotAShellper(ident, record.socket)


def _pin_tree(leader: PidFd) -> dict[int, PidFd]:
    """Pidfds of the leader's descendants, each kept only if /proc showed it under a pinned parent. A live
    shellper among them (a session started inside this one, re-parented to this subreaper) is not this
    session's: it and everything under it are left out."""
    pinned: dict[int, PidFd] = {}
    skip = protected_pids()
    others = set(live_shellpers()) - {leader.pid}
    for pid in descendants(leader.pid):
        if pid in skip or under(pid, others):
            continue
        try:
            fd = PidFd.open(pid)
        except ProcessGone:
            continue
        try:
            st = read_stat(pid)
            ok = st is not None and (st.ppid == leader.pid or st.ppid in pinned) and fd.is_unreaped()
        except (IdentityError, OSError):
            ok = False
        if ok:
            pinned[pid] = fd
        else:
            fd.close()
    return pinned


def _finish_stragglers(tree: dict[int, PidFd], grace: float, confirm_timeout: float) -> tuple[int, ...]:
    """Pinned descendants still alive after the shellper died: TERM, grace, KILL, confirm."""
    alive = [fd for fd in tree.values() if not fd.wait_dead(0)]
    if not alive:
        return ()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, confirm_timeout)):
        for fd in alive:
            with contextlib.suppress(ProcessGone, PermissionError):
                fd.send_signal(sig)
        deadline = time.monotonic() + wait
        for fd in alive:
            fd.wait_dead(max(0.0, deadline - time.monotonic()))
        still = [fd for fd in alive if not fd.wait_dead(0)]
        if not still:
            return tuple(fd.pid for fd in alive)
        alive = still
    raise SurvivorError(tuple(fd.pid for fd in alive))


def terminate_shellper(record: SessionRecord, paths: SessionPaths, *, grace: float = DEFAULT_GRACE,
                       ask_stop: Callable[[], Connection] | None = None, stop_timeout: float | None = None,
                       confirm_timeout: float = CONFIRM_TIMEOUT) -> Termination:
    """End a verified shellper and its whole tree; see the module docstring for the order of attempts.

    ``ask_stop``, called once the shellper is verified and its tree pinned, sends STOP over the session's
    socket and returns the connection, which is closed once the shellper has exited or ``stop_timeout``
    (default: ``grace`` + STOP_MARGIN) has passed; it raises StopNotDelivered when it could not (then
    signals end the shellper), and anything else it raises is passed on with nothing signalled. Without
    it the shellper is ended through signals.

    Raises ProcessGone (nothing to do), IdentityMismatch (pid reused: nothing signalled), its subclasses
    CommandMismatch and NotAShellper (the process does not run the recorded program, or does not serve
    the session: nothing signalled), ProtectedProcess (the record names this process or an ancestor:
    nothing signalled), SurvivorError (something outlived SIGKILL).
    """
    ident = ProcessIdentity(record.boot_id, record.shellper_pid, record.shellper_start_time)
    leader = open_verified(ident)
    try:
        _check_leader(leader, ident, record, paths)
    except BaseException:
        leader.close()
        raise
    group = session_cgroup(record, str(paths.dir))
    tree = {} if group is not None else _pin_tree(leader)  # with a cgroup, end_cgroup below ends the tree
    members = tuple(sorted(group.procs(CHILD_SUB))) if group is not None else tuple(tree)
    report: TerminateReport | None = None
    stop_error: str | None = None
    strangers: tuple[int, ...] = ()
    kept = ""
    try:
        dead = False
        if ask_stop is not None:
            try:
                connection = ask_stop()
            except StopNotDelivered as exc:
                stop_error = str(exc)
            else:
                try:
                    dead = leader.wait_dead(grace + STOP_MARGIN if stop_timeout is None else stop_timeout)
                finally:
                    connection.close()
                if not dead:
                    stop_error = "the shellper did not exit after STOP"
        method = "stop" if dead else "signals"
        if not dead:
            with contextlib.suppress(ProcessGone):
                # Never the shellper's process group: a --foreground shellper shares it with its pipeline.
                report = terminate_tree(ident, grace, include_group=False, confirm_timeout=confirm_timeout)
        stragglers = _finish_stragglers(tree, grace, confirm_timeout)
        if group is not None and leader.wait_dead(0):
            ended = end_cgroup(record.name, group, grace, confirm_timeout)
            stragglers += ended.pids
            strangers, kept = ended.strangers, ended.kept or ended.suspect
    finally:
        for fd in tree.values():
            fd.close()
        leader.close()
    removed: tuple[str, ...] = ()
    if session_files(paths):
        with contextlib.suppress(AlreadyRunning):  # a new shellper took the name: its files now
            removed = clean_session(paths)
    return Termination(record.name, record.shellper_pid, method, stop_error, members, stragglers, removed,
                       report, strangers, kept)
