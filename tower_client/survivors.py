"""What a dead shellper left running: find it by marks only its child's tree carries, end it through pidfds.

When a shellper is killed outright (SIGKILL, the OOM killer) its child gets PDEATHSIG SIGKILL and the
terminal hang-up sends SIGHUP to the foreground process group. A grandchild that ignores SIGHUP, sits in
another process group, or left the session lives on, re-parented to init, holding whatever the session
held (a conversation id: the original's incident #1224). Nothing else will ever end it.

A process counts as left behind by the session recorded in ``record`` if it is of this boot, started no
earlier than the recorded child, and carries either mark:

* **the session**: ``sid == record.child_pid``. While any member of a session exists the kernel cannot
  hand its id out again as a pid, so members are the recorded child's tree, unless that pid is now a
  *different* live process leading a new session (its start ticks differ: then the mark is not used).
* **the environment**: ``SHELLPER_INSTANCE=<record.instance_id>``, a 128-bit nonce the shellper gives
  every child; it survives setsid and double forks (not an ``env -i``).

Every candidate is pinned with a pidfd before its marks are read, and the read counts only if the pidfd
still names an unreaped process afterwards, so a recycled pid is never signalled. Never this process or
its ancestors, never pid 1.

Marks can be copied: a record duplicated from a *live* session (another name, the same instance id and
child) carries that session's marks, and its "survivors" would be the live session's child. So, in the
runtime directory the record came from (``directory``; default: that of ``record.socket``):

* **A live shellper's tree is never touched.** A *live shellper* is a process holding some session's
  lock there (per /proc/locks), or the recorded shellper (same boot, same start ticks) of a session
  whose lock is held. A marked process that is a live shellper, or whose parent chain (ppid, up to pid 1)
  reaches one, is *spared*. A shellper is a child subreaper, so whatever its child's tree orphans is
  re-parented to it and stays in its ancestry. (The price: the survivors of a session started from inside
  another, live session of the same directory are re-parented to that shellper and are spared too.)
* **A suspect record ends nothing.** A dead record whose instance id, or whose child (pid and start
  ticks), is also claimed by a live session of the directory (its lock held, or its recorded shellper
  alive) is suspect, and so is a directory in which a lock is held by nobody we can identify: nothing
  is signalled and :attr:`SurvivorReport.suspect` says why.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

from shellper.identity import IdentityError, PidFd, ProcessGone, SurvivorError, boot_id, read_stat
from shellper.paths import PathError, SessionPaths, UnsafeDirError
from shellper.record import LockError, RecordError, SessionLock, SessionRecord, read_record
from shellper.sessions import session_names
from tower_client.discover import check_dir, lock_owners

__all__ = ["INSTANCE_ENV", "MAX_ROUNDS", "Guard", "SurvivorReport", "find_survivors", "guard", "protected_pids",
           "reap_survivors"]

INSTANCE_ENV = "SHELLPER_INSTANCE"
"""Environment variable the shellper sets in every child to its instance id (see shellper.server)."""
MAX_ROUNDS = 8
"""Freeze-and-rescan rounds before giving up on finding forks made while we were killing."""


@dataclass(frozen=True)
class SurvivorReport:
    """``termed``: got SIGTERM (all found at first); ``killed``: still alive after ``grace``, SIGKILLed.

    ``spared``: carried the marks but are (under) a live shellper: not touched. ``suspect``: why nothing
    at all was ended ("" if the record was not suspect).
    """

    name: str
    termed: tuple[int, ...]
    killed: tuple[int, ...]
    spared: tuple[int, ...] = ()
    suspect: str = ""

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


@dataclass(frozen=True)
class Guard:
    """What protects a live session from a dead record's marks: see the module docstring.

    ``live``: pids of the directory's live shellpers. ``suspect``: why nothing may be ended ("" if
    the record is not suspect).
    """

    live: frozenset[int]
    suspect: str = ""


def _record_dir(record: SessionRecord) -> str | None:
    return os.path.dirname(record.socket) if os.path.isabs(record.socket) else None


def _verified_alive(rec: SessionRecord) -> bool:
    """The recorded shellper is the live process at its pid now (this boot, same start ticks)."""
    try:
        if rec.boot_id != boot_id():
            return False
        st = read_stat(rec.shellper_pid)
    except IdentityError:
        return False
    return st is not None and st.state != "Z" and st.start_time == rec.shellper_start_time


def guard(record: SessionRecord, directory: str | os.PathLike[str] | None = None) -> Guard:
    """Scan ``directory`` (default: that of ``record.socket``) for live shellpers and for live sessions
    claiming ``record``'s instance id or child. Never signals."""
    where = os.fspath(directory) if directory else _record_dir(record)
    if where is None:
        return Guard(frozenset(), "the record names no runtime directory to check for live shellpers")
    try:
        d = check_dir(where)
    except UnsafeDirError as e:
        return Guard(frozenset(), f"cannot check for live shellpers: {e}")
    if d is None:
        return Guard(frozenset())
    live: set[int] = set()
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
        rec_alive = rec is not None and _verified_alive(rec)
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
        if rec.instance_id == record.instance_id:
            return Guard(frozenset(live), f"instance {record.instance_id} is also claimed by live session "
                         f"{name!r}")
        if (record.child_pid is not None and record.child_start_time is not None
                and (rec.child_pid, rec.child_start_time) == (record.child_pid, record.child_start_time)):
            return Guard(frozenset(live), f"child {record.child_pid} is also claimed by live session {name!r}")
    return Guard(frozenset(live))


def _under_live(pid: int, live: frozenset[int]) -> bool:
    """``pid`` or one of its ancestors is a live shellper. Unknown (an unreadable or vanished link of
    the chain) counts as yes: sparing a process is always safe."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        if pid in live:
            return True
        seen.add(pid)
        try:
            st = read_stat(pid)
        except IdentityError:
            return True
        if st is None:
            return True
        pid = st.ppid
    return False


def _has_env(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def _marked(pid: int, record: SessionRecord, use_sid: bool, needle: bytes, min_start: int) -> bool:
    try:
        st = read_stat(pid)
    except IdentityError:
        return False
    if st is None or st.state == "Z" or st.start_time < min_start:
        return False
    return (use_sid and st.session == record.child_pid) or _has_env(pid, needle)


def _sid_usable(record: SessionRecord) -> bool:
    """The recorded child's pid still names its session: the child (alive or zombie) or nobody."""
    if record.child_pid is None or record.child_start_time is None:
        return False
    try:
        st = read_stat(record.child_pid)
    except IdentityError:
        return False
    return st is None or st.start_time == record.child_start_time


def find_survivors(record: SessionRecord, pinned: dict[int, PidFd] | None = None, *,
                   directory: str | os.PathLike[str] | None = None, protect: Guard | None = None,
                   spared: set[int] | None = None) -> dict[int, PidFd]:
    """Pidfds of the live processes left behind by ``record``'s session (new ones added to ``pinned``).

    Returns {} for a record of another boot or one that never had a child, and adds nothing for a
    suspect record (``protect``, default: :func:`guard` of ``directory``). Marked processes that are
    (under) a live shellper are not pinned but added to ``spared``. The caller closes the pidfds.
    """
    found: dict[int, PidFd] = {} if pinned is None else pinned
    if record.boot_id != boot_id() or record.child_start_time is None:
        return found
    if protect is None:
        protect = guard(record, directory)
    if protect.suspect:
        return found
    use_sid = _sid_usable(record)
    needle = f"{INSTANCE_ENV}={record.instance_id}".encode()
    skip = protected_pids()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in skip or pid in found:
            continue
        if not _marked(pid, record, use_sid, needle, record.child_start_time):
            continue  # cheap pre-filter; the verdict that counts is taken below, through a pidfd
        try:
            fd = PidFd.open(pid)
        except ProcessGone:
            continue
        try:
            ok = _marked(pid, record, use_sid, needle, record.child_start_time) and fd.is_unreaped()
            if ok and _under_live(pid, protect.live):
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
                   grace: float = 5.0, confirm_timeout: float = 2.0) -> SurvivorReport:
    """SIGTERM what ``record``'s dead session left behind, wait ``grace``, then freeze, rescan, SIGKILL.

    Only for a session whose shellper is known dead (its lock is free and its pid gone or reused): a live
    shellper ends its own tree. ``directory`` is the runtime directory the record was read from (default:
    that of ``record.socket``): a suspect record ends nothing, a live shellper's tree is spared (module
    docstring). Raises SurvivorError if anything outlives SIGKILL + ``confirm_timeout``.
    """
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
        # A stopped process cannot fork: freeze, look again (forks made meanwhile carry the same marks).
        for _ in range(MAX_ROUNDS):
            before = len(pinned)
            _signal_all({p: fd for p, fd in pinned.items() if not fd.wait_dead(0)}, signal.SIGSTOP)
            find_survivors(record, pinned, protect=protect, spared=spared)
            if len(pinned) == before:
                break
        alive = {p: fd for p, fd in pinned.items() if not fd.wait_dead(0)}
        _signal_all(alive, signal.SIGKILL)
        left = _wait_all(alive, time.monotonic() + confirm_timeout)
        if left:
            raise SurvivorError(tuple(sorted(left)))
        return SurvivorReport(record.name, termed, tuple(sorted(alive)), tuple(sorted(spared)))
    finally:
        for fd in pinned.values():
            fd.close()
