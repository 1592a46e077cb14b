"""Terminate a process tree without ever signalling a stranger, and without leaving survivors.

Every process is pinned by a pidfd the moment it is discovered and only kept if, after the
pidfd was opened, /proc still shows it under a pinned parent (or in the pinned leader's
process group). Signals then go through those pidfds, so pid reuse during the (seconds long)
teardown cannot redirect them: the identity-read-to-signal race of kill(pid) is gone.

Sequence (terminate_tree): verify + pin the leader, pin its tree and (if it leads one) its
group; SIGTERM, then SIGCONT so stopped jobs can act on it; wait ``grace`` on pidfd readability;
SIGSTOP what is left and re-scan until no new process appears (a stopped process cannot fork);
SIGKILL; confirm every pidfd became readable, else SurvivorError.

Limits (documented, not hidden):
* A grandchild that double-forks away is re-parented to the nearest *subreaper* (else init) and
  is no longer a descendant. Run the tree root as a subreaper (:func:`set_child_subreaper`, as the
  shellper does) so escapees stay findable; members that stay in the leader's process group are
  reached through the group anyway.
* "Dead" means "exited": a pidfd becomes readable when the process exits, even as an unreaped
  zombie. Only the parent can reap. If the caller is the parent (the shellper and its child) it
  must reap afterwards (``Popen.wait``, ``os.waitpid`` or :func:`reap_children_nohang`);
  orphans of a killed tree are reaped by their new parent (subreaper or init).
* A process that cannot die (uninterruptible sleep, frozen cgroup, foreign uid) is reported by
  :class:`SurvivorError`, never silently ignored.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Iterable

from shellper.core.defaults import DEFAULT_GRACE
from shellper.core.structs import record
from shellper.host.identity import (
    IdentityError,
    NotAChild,
    PidFd,
    ProcessGone,
    ProcessIdentity,
    ProcStat,
    boot_id,
    open_verified,
    read_stat,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import ctypes

__all__ = [
    "PR_SET_CHILD_SUBREAPER",
    "PR_SET_PDEATHSIG",
    "OwnTree",
    "SurvivorError",
    "TerminateReport",
    "children",
    "descendants",
    "get_child_subreaper",
    "kill_group_and_descendants",
    "reap_children_nohang",
    "set_child_subreaper",
    "set_parent_death_signal",
    "terminate_tree",
]

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

#: How long terminate_tree waits for SIGKILLed processes to exit before declaring survivors.
DEFAULT_CONFIRM_TIMEOUT = 2.0
#: Bound on the freeze-and-rescan rounds before SIGKILL (each round stops newly found forks).
_MAX_FREEZE_ROUNDS = 8


# --------------------------------------------------------------------------- discovery


def children(pid: int) -> list[int]:
    """Direct children of ``pid``, from every thread's ``children`` file; [] if it is gone."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                data = f.read()
        except OSError:  # thread or process exited meanwhile
            continue
        for token in data.split():
            child = int(token)
            if child not in found:
                found.append(child)
    return found


def descendants(pid: int) -> list[int]:
    """All descendants of ``pid``, parents before children. A snapshot: racy by nature."""
    seen: set[int] = {pid}
    order: list[int] = []
    queue = [pid]
    while queue:
        for child in children(queue.pop(0)):
            if child not in seen:
                seen.add(child)
                order.append(child)
                queue.append(child)
    return order


def _proc_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


# --------------------------------------------------------------------------- tree tracking


@record
class _Member:
    """One process of a tree being terminated: its pidfd, the identity it was found with, its group."""

    fd: PidFd
    identity: ProcessIdentity
    pgrp: int


class _Tree:
    """Pidfds of the leader and of every member verified so far (closed by :meth:`close`)."""

    def __init__(self, leader: PidFd, leader_stat: ProcStat) -> None:
        self.leader = leader
        self.self_pid = os.getpid()
        self.spare: frozenset[int] = frozenset()
        """Never pinned, nor walked into: live shellpers of sessions started inside this tree."""
        self.members: dict[int, _Member] = {
            leader.pid: _Member(leader, ProcessIdentity(boot_id(), leader.pid, leader_stat.start_time),
                                leader_stat.pgrp)
        }

    def _adopt(self, pid: int, parent: PidFd | None, pgrp: int | None) -> bool:
        """Pin ``pid`` if, after the pinning, it is a child of ``parent`` / in group ``pgrp``."""
        if pid in self.members or pid == self.self_pid or pid in self.spare:
            return False
        try:
            fd = PidFd.open(pid)
        except ProcessGone:
            return False
        try:
            st = read_stat(pid)
            # The stat is the pinned process's only if it still holds the pid afterwards; the
            # relation is to *our* parent/leader only if that one still holds its pid too.
            anchor = parent if parent is not None else self.leader
            ok = (
                st is not None
                and (parent is None or st.ppid == parent.pid)
                and (pgrp is None or st.pgrp == pgrp)
                and fd.is_unreaped()
                and anchor.is_unreaped()
            )
        except (IdentityError, OSError):
            ok = False
        if not ok or st is None:
            fd.close()
            return False
        self.members[pid] = _Member(fd, ProcessIdentity(boot_id(), pid, st.start_time), st.pgrp)
        return True

    def _walk(self, root: PidFd, new: list[int]) -> None:
        queue = [root]
        while queue:
            parent = queue.pop(0)
            for child in children(parent.pid):
                if self._adopt(child, parent, None):
                    new.append(child)
                    queue.append(self.members[child].fd)

    def scan(self, group: int | None) -> list[int]:
        """Pin descendants of every live member (and members of ``group``); return new pids."""
        new: list[int] = []
        for member in list(self.members.values()):
            if not member.fd.wait_dead(0):
                self._walk(member.fd, new)
        if group is not None and self.leader.is_unreaped():  # the leader pins the pgid
            for pid in _proc_pids():
                if pid in self.members or pid == self.self_pid:
                    continue
                try:
                    st = read_stat(pid)
                except IdentityError:
                    continue
                if st is not None and st.pgrp == group and self._adopt(pid, None, group):
                    new.append(pid)
                    self._walk(self.members[pid].fd, new)  # its children may be outside the group
        return new

    def alive(self, pids: Iterable[int] | None = None) -> list[int]:
        chosen = self.members if pids is None else pids
        return [p for p in chosen if not self.members[p].fd.wait_dead(0)]

    def wait(self, pids: Iterable[int], deadline: float) -> list[int]:
        """Wait (pidfd readability, no sleeping) until all exit or the deadline; return survivors."""
        poller = select.poll()
        pending: dict[int, int] = {}
        for pid in pids:
            fd = self.members[pid].fd.fileno()
            pending[fd] = pid
            poller.register(fd, select.POLLIN)
        while pending:
            remaining = deadline - time.monotonic()
            for fd, _ in poller.poll(max(0, int(remaining * 1000) + 1) if remaining > 0 else 0):
                poller.unregister(fd)
                pending.pop(fd, None)
            if remaining <= 0:
                break
        return sorted(pending.values())

    def close(self) -> None:
        for m in self.members.values():
            if m.fd is not self.leader:
                m.fd.close()
        self.leader.close()


class OwnTree:
    """The calling process's descendants, pinned and verified as :class:`_Tree` pins a leader's: a pid
    recycled since it was listed is never a member, so never signalled. For a process that ends its own
    tree without blocking (the shellper): this signals and lists, the caller waits on the pidfds.

    The caller is the root: never a member, never signalled. Close it (the pidfds) when done.
    """

    def __init__(self, spare: frozenset[int] = frozenset()) -> None:
        """``spare``: pids never to pin or walk into (live shellpers started inside the tree, which end
        their own trees)."""
        me = os.getpid()
        root = PidFd.open(me)
        try:
            st = read_stat(me)
            if st is None:  # pragma: no cover - our own /proc entry always exists
                raise ProcessGone(me, "no /proc entry for the calling process")
            self._tree = _Tree(root, st)
            self._tree.spare = spare
        except BaseException:
            root.close()
            raise

    def scan(self) -> list[int]:
        """Pin the children of the caller and of every live member not pinned yet; the new pids."""
        return self._tree.scan(None)

    def alive(self) -> list[PidFd]:
        """Members that have not exited (a zombie has), the caller excluded."""
        root = self._tree.leader.pid
        return [self._tree.members[pid].fd for pid in self._tree.alive() if pid != root]

    def prune(self) -> int:
        """Close and forget the pidfds of members that have exited (the caller excluded); how many. A tree
        that churns (a fork bomb) would otherwise hold a descriptor per process it ever had, until none is
        left to pin the live ones with. A pid forgotten here is pinned again only if a later scan finds it
        under a pinned parent, like any new one."""
        root = self._tree.leader.pid
        gone = [pid for pid, m in self._tree.members.items() if pid != root and m.fd.wait_dead(0)]
        for pid in gone:
            self._tree.members.pop(pid).fd.close()
        return len(gone)

    def signal_group(self, pid: int, sig: int) -> bool:
        """Signal the process group led by member ``pid`` through its pidfd; False if ``pid`` is not a
        member, leads no group or is not ours to signal."""
        member = self._tree.members.get(pid)
        if member is None or pid == self._tree.leader.pid:
            return False
        try:
            member.fd.send_group_signal(sig)
        except (ProcessGone, PermissionError):
            return False
        return True

    def close(self) -> None:
        self._tree.close()


def _signal(member: _Member, sig: int) -> bool | None:
    """Signal one pinned process: True sent, False already reaped, None permission denied."""
    try:
        member.fd.send_signal(sig)
    except ProcessGone:
        return False
    except PermissionError:
        return None
    return True


def _group_signal(tree: _Tree, sig: int) -> bool:
    """Signal the leader's group; False if it is empty or (wholly) not ours to signal."""
    try:
        tree.leader.send_group_signal(sig)
    except (ProcessGone, PermissionError):
        return False
    return True


# --------------------------------------------------------------------------- terminate_tree


class SurvivorError(IdentityError):
    """Processes still alive after SIGKILL and the confirmation wait."""

    def __init__(self, pids: tuple[int, ...], report: TerminateReport | None = None) -> None:
        super().__init__(f"processes survived SIGKILL: {list(pids)}", pids[0] if pids else None)
        self.pids = pids
        self.report = report


@record(frozen=True)
class TerminateReport:
    """What terminate_tree did: ``termed`` got SIGTERM, ``killed`` needed SIGKILL."""

    pid: int
    group_signalled: bool
    termed: tuple[int, ...]
    killed: tuple[int, ...]
    denied: tuple[int, ...]
    elapsed: float


def terminate_tree(
    identity: ProcessIdentity,
    grace: float = DEFAULT_GRACE,
    *,
    include_group: bool = True,
    confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT,
) -> TerminateReport:
    """SIGTERM the verified leader's tree, wait ``grace``, SIGKILL what is left, confirm death.

    The leader's process group is signalled only if the verified leader still leads it
    (pgid == pid) and the caller is not itself in that group. Raises ProcessGone /
    IdentityMismatch (nothing signalled) if the leader is not the recorded process, and
    SurvivorError (with the report) if anything outlives SIGKILL + ``confirm_timeout``.
    """
    started = time.monotonic()
    if identity.pid == os.getpid():
        raise IdentityError("refusing to terminate the calling process", identity.pid)
    leader = open_verified(identity, allow_zombie=True)
    try:
        leader_stat = read_stat(identity.pid)
        if leader_stat is None or not leader.is_unreaped():
            raise ProcessGone(identity.pid, "reaped during verification")
        tree = _Tree(leader, leader_stat)
    except BaseException:
        leader.close()
        raise
    try:
        return _terminate(tree, identity, leader_stat, grace, include_group, confirm_timeout, started)
    finally:
        tree.close()


def _terminate(
    tree: _Tree,
    identity: ProcessIdentity,
    leader_stat: ProcStat,
    grace: float,
    include_group: bool,
    confirm_timeout: float,
    started: float,
) -> TerminateReport:
    pid = identity.pid
    group = pid if include_group and leader_stat.pgrp == pid and os.getpgrp() != pid else None
    tree.scan(group)

    # SIGTERM (+ SIGCONT so a stopped job can act on it): the group through the leader's
    # pidfd, everyone else individually.
    alive = tree.alive()
    group_signalled = group is not None and _group_signal(tree, signal.SIGTERM)
    termed: list[int] = []
    denied: set[int] = set()
    for mpid in alive:
        member = tree.members[mpid]
        sent = True if group_signalled and member.pgrp == group else _signal(member, signal.SIGTERM)
        if sent:
            termed.append(mpid)
        elif sent is None:
            denied.add(mpid)
    if group_signalled:
        _group_signal(tree, signal.SIGCONT)
    for mpid in termed:
        _signal(tree.members[mpid], signal.SIGCONT)

    tree.wait(list(tree.members), started + max(0.0, grace))

    # Freeze what is left (a stopped process cannot fork), re-scan until nothing new appears,
    # then SIGKILL, so a child forked during the grace period cannot slip through. The KILL
    # runs even if the re-scan fails (e.g. EMFILE): nothing is ever left stopped.
    try:
        for _ in range(_MAX_FREEZE_ROUNDS):
            new = tree.scan(group)
            if group is not None:
                _group_signal(tree, signal.SIGSTOP)
            for mpid in tree.alive():
                if _signal(tree.members[mpid], signal.SIGSTOP) is None:
                    denied.add(mpid)
            if not new:
                break
    finally:
        to_kill = tree.alive()
        if group is not None and _group_signal(tree, signal.SIGKILL):
            group_signalled = True
        for mpid in to_kill:
            if _signal(tree.members[mpid], signal.SIGKILL) is None:
                denied.add(mpid)
    killed = [mpid for mpid in to_kill if mpid not in denied]

    survivors = tree.wait(to_kill, time.monotonic() + max(0.0, confirm_timeout))
    report = TerminateReport(
        pid=pid,
        group_signalled=group_signalled,
        termed=tuple(termed),
        killed=tuple(killed),
        denied=tuple(sorted(denied)),
        elapsed=time.monotonic() - started,
    )
    if survivors:
        raise SurvivorError(tuple(survivors), report)
    return report


# --------------------------------------------------------------------------- own child


def kill_group_and_descendants(pid: int, sig: int) -> list[int]:
    """Send ``sig`` to our child ``pid``, its process group and every descendant, via pidfds.

    For the shellper's own child (spawned with setsid, so pgid == pid). ``pid`` must be an
    unreaped child of the caller (a zombie is fine): that is what guarantees neither its pid
    nor its pgid can have been recycled. Call it *before* reaping. Raises NotAChild otherwise,
    ProcessGone if it does not exist. Returns the pids signalled individually (leader first).
    """
    leader = PidFd.open(pid)
    try:
        st = read_stat(pid)
        if st is None or not leader.is_unreaped():
            raise ProcessGone(pid)
        if st.ppid != os.getpid():
            raise NotAChild(pid, st.ppid)
        tree = _Tree(leader, st)
    except BaseException:
        leader.close()
        raise
    try:
        tree.scan(None)  # pin first: once signalled, members' children re-parent away
        # Parents before children (a dying child could be reaped by a parent not yet signalled),
        # then the group for members that are not descendants.
        signalled = [mpid for mpid, member in tree.members.items() if _signal(member, sig)]
        if st.pgrp == pid and os.getpgrp() != pid:
            _group_signal(tree, sig)
        return signalled
    finally:
        tree.close()


def reap_children_nohang() -> list[tuple[int, int]]:
    """Reap every exited child of the caller: [(pid, raw wait status)], never blocking.

    Reaps *all* children, including ones a ``subprocess.Popen`` still owns (its later wait()
    then sees ECHILD and reports returncode 0): use it only in a process that owns all its
    children, like the shellper (decode with ``os.waitstatus_to_exitcode``).
    """
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        reaped.append((pid, status))
    return reaped


# --------------------------------------------------------------------------- prctl

_libc: ctypes.CDLL | None = None


def _prctl(option: int, arg2: object) -> None:
    """prctl(2) via libc; OSError carrying errno on failure."""
    import ctypes

    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    value = ctypes.c_ulong(arg2) if isinstance(arg2, int) else arg2
    zero = ctypes.c_ulong(0)
    if _libc.prctl(ctypes.c_int(option), value, zero, zero, zero) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def set_child_subreaper(enabled: bool = True) -> None:
    """Make orphaned descendants re-parent to this process instead of init.

    So a tool that setsid()s and double-forks stays a descendant (and must be reaped by us).
    """
    _prctl(PR_SET_CHILD_SUBREAPER, 1 if enabled else 0)


def get_child_subreaper() -> bool:
    import ctypes

    value = ctypes.c_int(0)
    _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value))
    return value.value != 0


def set_parent_death_signal(sig: int) -> None:
    """Deliver ``sig`` to this process when its parent *thread* exits (0 disables).

    Not for the shellper itself (it must outlive Tower restarts); useful for helpers that must
    not outlive the shellper. Reset on exec of set-uid binaries and on fork.
    """
    _prctl(PR_SET_PDEATHSIG, int(sig))
