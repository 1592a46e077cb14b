"""What a dead shellper left running: its cgroup's processes, else what carries its mark, ended through pidfds.

**Contained sessions** (``record.containment`` cgroup or systemd-scope): everything the session's child ever
forked is in the recorded cgroup and nothing else is, so that is what is ended (SIGTERM to the verified
members, ``grace``, ``cgroup.kill``, confirmed by ``populated 0``), and the cgroup is removed, deepest
sub-cgroup first. Only a cgroup that :func:`shellper.host.cgroup.verify_cgroup` accepts is touched (the
runtime directory's key, the session's name and instance in its name, the recorded inode) and only if
nothing in its shellper/ part may be a live shellper (:func:`shellper.host.shellpers.listens`); otherwise
nothing is signalled and the report says why. No marks are used: a cgroup cannot be left.

Once the shellper is dead its shellper/ part is nobody's: a process in it moved itself there (root can),
from this session or another, and nothing proves which (its environment is its own to rewrite). Such a
*stranger* is named (:attr:`SurvivorReport.strangers`) and never signalled; the rest of the cgroup is ended
all the same, and the cgroup stays (:attr:`SurvivorReport.kept`) until the stranger leaves.

**Uncontained sessions** (containment none, the fallback):

When a shellper is killed outright (SIGKILL, the OOM killer) its child gets PDEATHSIG SIGKILL and the
terminal hang-up sends SIGHUP to the foreground process group. A grandchild that ignores SIGHUP, sits in
another process group, or left the session lives on, re-parented to init, holding whatever the session
held (a conversation id, for one). Nothing else will ever end it.

A process counts as left behind by the session recorded in ``record`` if it is of this boot, started no
earlier than the recorded shellper, and carries the mark ``SHELLPER_INSTANCE=<record.instance_id>`` in its
environment: a 128-bit nonce the shellper gives every child; it survives setsid and double forks (not an
``env -i``: such a process is not found, which is what containment none cannot promise). The session id is
not used as a mark: once its leader is gone, the number can name another process's session.

Every candidate is pinned with a pidfd before its marks are read, and the read counts only if the pidfd
still names an unreaped process afterwards, so a recycled pid is never signalled. Never this process or
its ancestors, never pid 1.

Marks can be copied: a record duplicated from a *live* session (another name, the same instance id and
child) carries that session's marks, and its "survivors" would be the live session's child. So, in the
runtime directory the record came from (``directory``; default: that of ``record.socket``):

* **A live shellper's tree is never touched.** A *live shellper* is, in any runtime directory, a process
  proven by :func:`shellper.host.shellpers.live_shellpers` (it holds the lock its record names it by), or, in
  this directory, a process holding some session's lock (per /proc/locks). A marked process that is a live
  shellper, or whose parent chain (ppid, up to pid 1) reaches one, is *spared*: a shellper started inside
  the dead session inherited its mark, and it and its own tree are not the dead session's. A shellper is a
  child subreaper, so whatever its child's tree orphans is re-parented to it and stays in its ancestry.
* **A suspect record ends nothing.** A dead record whose instance id, or whose child (pid and start
  ticks), is also claimed by a live session (of any directory) is suspect, and so is a directory in which
  a lock is held by nobody we can identify: nothing is signalled and :attr:`SurvivorReport.suspect` says
  why.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from shellper.core import structs
from shellper.core.containment import Containment
from shellper.core.defaults import DEFAULT_GRACE, KILL_SECONDS
from shellper.host.cgroup import SHELLPER_SUB, SessionCgroup, verify_cgroup
from shellper.host.identity import IdentityError, PidFd, ProcessGone, boot_id, read_stat
from shellper.host.paths import PathError, SessionPaths, UnsafeDirError, check_dir, session_names
from shellper.host.reaper import SurvivorError
from shellper.host.record import LockError, RecordError, SessionLock, SessionRecord, read_record
from shellper.host.shellpers import listens, live_shellpers, lock_owners, record_is_alive, under

__all__ = ["INSTANCE_ENV", "MAX_ROUNDS", "Guard", "SurvivorReport", "end_cgroup", "find_survivors", "guard",
           "protected_pids", "reap_survivors"]

INSTANCE_ENV = "SHELLPER_INSTANCE"
"""Environment variable the shellper sets in every child to its instance id (see shellper.daemon.session)."""
MAX_ROUNDS = 8
"""Freeze-and-rescan rounds before giving up on finding forks made while we were killing."""


@structs.record(frozen=True)
class SurvivorReport:
    """``termed``: got SIGTERM (all found at first); ``killed``: still alive after ``grace``, SIGKILLed.

    ``spared``: carried the marks but are (under) a live shellper: not touched. ``suspect``: why nothing
    at all was ended ("" if the record was not suspect). ``strangers``: processes in a dead session's
    shellper/ part, named, never signalled (module docstring). ``kept``: why the session's cgroup is still
    there after its processes were ended ("" if it was removed, or there was none).
    """

    name: str
    termed: tuple[int, ...]
    killed: tuple[int, ...]
    spared: tuple[int, ...] = ()
    suspect: str = ""
    strangers: tuple[int, ...] = ()
    kept: str = ""

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.termed) | set(self.killed)))


def protected_pids() -> set[int]:
    """This process and its ancestors: a Tower started from inside a session must not end itself."""
    out = {0, 1, os.getpid()}
    pid = os.getpid()
    while pid > 1:
        try:
            st = read_stat(pid)
        except IdentityError:
            break
        if st is None:
            break
        pid = st.ppid
        out.add(pid)
    return out


@structs.record(frozen=True)
class Guard:
    """What protects a live session from a dead record's marks: see the module docstring.

    ``live``: pids of the directory's live shellpers. ``suspect``: why nothing may be ended ("" if
    the record is not suspect).
    """

    live: frozenset[int]
    suspect: str = ""


def _record_dir(record: SessionRecord) -> str | None:
    return os.path.dirname(record.socket) if os.path.isabs(record.socket) else None


def guard(record: SessionRecord, directory: str | os.PathLike[str] | None = None) -> Guard:
    """Scan ``directory`` (default: that of ``record.socket``) for live shellpers and for live sessions
    claiming ``record``'s instance id or child. Never signals."""
    where = os.fspath(directory) if directory else _record_dir(record)
    if where is None:
        return Guard(frozenset(), "the record names no runtime directory to check for live shellpers")
    everywhere = live_shellpers()
    for pid, other in everywhere.items():
        claim = _claims(record, other)
        if claim:
            return Guard(frozenset(everywhere), f"{claim} is also claimed by live shellper {pid} (session "
                         f"{other.name!r} of {os.path.dirname(other.socket)})")
    try:
        d = check_dir(where)
    except UnsafeDirError as e:
        return Guard(frozenset(), f"cannot check for live shellpers: {e}")
    if d is None:
        return Guard(frozenset(everywhere))
    live: set[int] = set(everywhere)
    for name in session_names(d):
        try:
            paths = SessionPaths.for_name(d, name)
        except PathError:
            continue
        try:
            held = SessionLock.is_locked(paths.lock)
        except LockError as e:
            return Guard(frozenset(live), f"cannot tell whether session {name!r} is live: {e}")
        try:
            rec: SessionRecord | None = read_record(paths.record)
        except (FileNotFoundError, RecordError):
            rec = None
        rec_alive = rec is not None and record_is_alive(rec)
        if held:
            owners = {p for p in (lock_owners(paths.lock) or ()) if p > 0}
            if rec is not None and rec_alive:
                owners.add(rec.shellper_pid)
            if not owners:
                return Guard(frozenset(live), f"the lock of session {name!r} is held by a process that "
                             "cannot be identified")
            live.update(owners)
        if rec is None or name == record.name or not (held or rec_alive):
            continue
        claim = _claims(record, rec)
        if claim:
            return Guard(frozenset(live), f"{claim} is also claimed by live session {name!r}")
    return Guard(frozenset(live))


def _claims(record: SessionRecord, other: SessionRecord) -> str:
    """What of ``record``'s marks ``other`` claims too: its instance, or its child (pid and ticks); ""."""
    if other.instance_id == record.instance_id:
        return f"instance {record.instance_id}"
    if (record.child_pid is not None and record.child_start_time is not None
            and (other.child_pid, other.child_start_time) == (record.child_pid, record.child_start_time)):
        return f"child {record.child_pid}"
    return ""


def _has_env(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def _marked(pid: int, needle: bytes, min_start: int) -> bool:
    try:
        st = read_stat(pid)
    except IdentityError:
        return False
    if st is None or st.state == "Z" or st.start_time < min_start:
        return False
    return _has_env(pid, needle)


def find_survivors(record: SessionRecord, pinned: dict[int, PidFd] | None = None, *,
                   directory: str | os.PathLike[str] | None = None, protect: Guard | None = None,
                   spared: set[int] | None = None) -> dict[int, PidFd]:
    """Pidfds of the live processes left behind by ``record``'s session (new ones added to ``pinned``).

    Returns {} for a record of another boot, and adds nothing for a suspect record (``protect``,
    default: :func:`guard` of ``directory``). Marked processes that are
    (under) a live shellper are not pinned but added to ``spared``. The caller closes the pidfds.
    """
    found: dict[int, PidFd] = {} if pinned is None else pinned
    if record.boot_id != boot_id():
        return found
    if protect is None:
        protect = guard(record, directory)
    if protect.suspect:
        return found
    needle = f"{INSTANCE_ENV}={record.instance_id}".encode()
    skip = protected_pids()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in skip or pid in found:
            continue
        if not _marked(pid, needle, record.shellper_start_time):
            continue  # cheap pre-filter; the verdict that counts is taken below, through a pidfd
        try:
            fd = PidFd.open(pid)
        except ProcessGone:
            continue
        try:
            ok = _marked(pid, needle, record.shellper_start_time) and fd.is_unreaped()
            if ok and under(pid, protect.live):
                ok = False
                if spared is not None:
                    spared.add(pid)
        except (IdentityError, OSError):
            ok = False
        if ok:
            found[pid] = fd
        else:
            fd.close()
    return found


def _signal_all(fds: dict[int, PidFd], sig: int) -> None:
    for fd in fds.values():
        with contextlib.suppress(ProcessGone, PermissionError):
            fd.send_signal(sig)


def _wait_all(fds: dict[int, PidFd], deadline: float) -> list[int]:
    """Wait for every pinned process to exit (a zombie counts) until ``deadline``; the survivors."""
    left = []
    for pid, fd in fds.items():
        if not fd.wait_dead(max(0.0, deadline - time.monotonic())):
            left.append(pid)
    return left


def reap_survivors(record: SessionRecord, *, directory: str | os.PathLike[str] | None = None,
                   grace: float = DEFAULT_GRACE, confirm_timeout: float = 2.0) -> SurvivorReport:
    """SIGTERM what ``record``'s dead session left behind, wait ``grace``, then freeze, rescan, SIGKILL.

    Only for a session whose shellper is known dead (its lock is free and its pid gone or reused): a live
    shellper ends its own tree. ``directory`` is the runtime directory the record was read from (default:
    that of ``record.socket``): a suspect record ends nothing, a live shellper's tree is spared (module
    docstring). Raises SurvivorError if anything outlives SIGKILL + ``confirm_timeout``.
    """
    if record_is_alive(record):  # its lock file may be gone, but it lives: its tree is its own to end
        return SurvivorReport(record.name, (), (), suspect=f"the recorded shellper {record.shellper_pid} is alive")
    if record.containment != Containment.NONE:
        return _reap_cgroup(record, directory, grace, confirm_timeout)
    protect = guard(record, directory)
    if protect.suspect:
        return SurvivorReport(record.name, (), (), suspect=protect.suspect)
    spared: set[int] = set()
    pinned = find_survivors(record, protect=protect, spared=spared)
    try:
        termed = tuple(sorted(pinned))
        if not pinned:
            return SurvivorReport(record.name, (), (), tuple(sorted(spared)))
        _signal_all(pinned, signal.SIGTERM)
        _signal_all(pinned, signal.SIGCONT)
        _wait_all(pinned, time.monotonic() + grace)
        # A stopped process cannot fork: freeze, look again (forks made meanwhile carry the same marks), kill;
        # again until a look finds nobody alive, for at most KILL_SECONDS (a fork bomb outruns one round).
        deadline = time.monotonic() + KILL_SECONDS
        killed: set[int] = set()
        while True:
            for _ in range(MAX_ROUNDS):
                before = len(pinned)
                _signal_all({p: fd for p, fd in pinned.items() if not fd.wait_dead(0)}, signal.SIGSTOP)
                find_survivors(record, pinned, protect=protect, spared=spared)
                if len(pinned) == before:
                    break
            alive = {p: fd for p, fd in pinned.items() if not fd.wait_dead(0)}
            _signal_all(alive, signal.SIGSTOP)
            _signal_all(alive, signal.SIGKILL)
            killed.update(alive)
            left = _wait_all(alive, time.monotonic() + confirm_timeout)
            find_survivors(record, pinned, protect=protect, spared=spared)
            if not any(not fd.wait_dead(0) for fd in pinned.values()):
                break
            if left or time.monotonic() >= deadline:
                raise SurvivorError(tuple(sorted(p for p, fd in pinned.items() if not fd.wait_dead(0))))
        return SurvivorReport(record.name, termed, tuple(sorted(killed)), tuple(sorted(spared)))
    finally:
        for fd in pinned.values():
            fd.close()


def _reap_cgroup(record: SessionRecord, directory: str | os.PathLike[str] | None, grace: float,
                 confirm_timeout: float) -> SurvivorReport:
    """End and remove a dead contained session's cgroup (module docstring); suspect if it is not verifiably
    that session's."""
    where = os.fspath(directory) if directory else _record_dir(record)
    if record.boot_id != boot_id():
        return SurvivorReport(record.name, (), ())  # the cgroup went with the boot
    if where is None:
        return SurvivorReport(record.name, (), (), suspect="the record names no runtime directory")
    group, why = verify_cgroup(record.cgroup, record.cgroup_id, where, record.name, record.instance_id,
                               record.owner)
    if group is None:
        return SurvivorReport(record.name, (), (), suspect="" if why == "gone" else why)
    shellpers = shellpers_in(group)
    if shellpers:
        return SurvivorReport(record.name, (), (), suspect=f"a process in {group.sub(SHELLPER_SUB)} may be a live "
                              f"shellper ({', '.join(map(str, shellpers))} listens on a socket): nothing ended")
    return end_cgroup(record.name, group, grace, confirm_timeout)


def shellpers_in(group: SessionCgroup) -> tuple[int, ...]:
    """The processes in ``group``'s shellper/ part that may be a live shellper: one that holds a listening
    socket (a shellper always does, wherever its files went). Any other there is a stranger."""
    members = group.procs(SHELLPER_SUB)
    if not members:
        return ()
    live = live_shellpers()
    return tuple(sorted(pid for pid in members if pid in live or listens(pid)))


def end_cgroup(name: str, group: SessionCgroup, grace: float, confirm_timeout: float) -> SurvivorReport:
    """For a cgroup whose shellper is dead: SIGTERM every verified member outside shellper/, wait ``grace``,
    SIGKILL what is left there (cgroup.kill of every sub-cgroup but shellper/), confirm it empty, remove the
    cgroup deepest first. Strangers in shellper/ are named, not signalled; they keep the cgroup (module
    docstring). Nothing at all if this process or an ancestor is inside (a Tower run from what the session
    left): cgroup.kill cannot spare one member."""
    inside = set(group.procs()) & protected_pids()
    if inside:
        return SurvivorReport(name, (), (), suspect=f"this process or an ancestor ({sorted(inside)}) is inside "
                              f"{group.path}: nothing ended")
    termed = tuple(sorted(group.procs(spare=SHELLPER_SUB)))
    killed: tuple[int, ...] = ()
    if termed:
        group.signal_members(signal.SIGTERM, spare=SHELLPER_SUB)
        group.signal_members(signal.SIGCONT, spare=SHELLPER_SUB)
        if not group.wait_empty_outside(SHELLPER_SUB, grace):
            killed = tuple(sorted(group.procs(spare=SHELLPER_SUB)))
            if not group.kill_outside(SHELLPER_SUB, confirm_timeout):
                raise SurvivorError(tuple(sorted(group.procs(spare=SHELLPER_SUB))))
    strangers = tuple(sorted(group.procs(SHELLPER_SUB)))
    kept = ""
    if not group.remove():
        kept = (f"{group.path} is kept: process(es) {', '.join(map(str, strangers))} moved into its "
                f"{SHELLPER_SUB}/ part and are not verifiably the session's, so not signalled" if strangers else
                f"{group.path} could not be removed: something is still inside")
    return SurvivorReport(name, termed, killed, strangers=strangers, kept=kept)
