"""The session's processes: what contains them (its own cgroup, where one can be made) and how they are ended.

With a cgroup (shellper.host.cgroup) the child runs in its child/ part and this shellper in its shellper/
part; ending the tree is emptying child/. Without one, every descendant of this shellper is pinned by a
pidfd and signalled only while it is still under a pinned parent (shellper.host.reaper.OwnTree).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from shellper.core.config import ConfigError
from shellper.core.containment import Containment
from shellper.core.defaults import KILL_SECONDS
from shellper.core.errors import ShellperError
from shellper.host.cgroup import (
    CHILD_SUB,
    LAUNCHER_ORIGIN,
    SHELLPER_SUB,
    CgroupError,
    LeafName,
    SessionCgroup,
    back_to_launcher_origin,
    default_parent,
    delegated_scope,
    events_populated,
    find_mount,
    own_cgroup,
    session_cgroup_of,
    verify_dead_session,
)
from shellper.host.identity import IdentityError, PidFd, ProcessGone, ignores_signal, read_stat
from shellper.host.reaper import OwnTree, descendants
from shellper.host.record import RecordError, read_record
from shellper.host.shellpers import live_shellpers, under

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable

    from shellper.core.config import SessionConfig
    from shellper.daemon.reactor import Future, Reactor
    from shellper.host.logfile import LogFile
    from shellper.host.paths import SessionPaths
    from shellper.host.record import SessionRecord

class OwnerRemains(ShellperError):
    """The name's previous session, another owner's, was killed and left processes running that its record
    is how that owner's reconcile finds and ends: overwriting the record would lose them, so the name is
    refused (and the record left) until that owner reconciles or reaps it."""

    def __init__(self, name: str, previous: SessionRecord, pids: tuple[int, ...]) -> None:
        super().__init__(
            f"session {name!r}: its previous shellper (instance {previous.instance_id}, owner {previous.owner!r}) "
            f"was killed and left {len(pids)} process(es) running ({', '.join(map(str, pids[:10]))}"
            f"{', ...' if len(pids) > 10 else ''}); its record is how that owner's reconcile finds them: "
            f"`tower-client --owner {previous.owner} reap {name}` (or that owner's reconcile) first, or another "
            "name")
        self.pids = pids
        self.owner = previous.owner




class SessionTree:
    """Makes, joins and removes the session's cgroup, and ends the child's whole tree."""

    def __init__(self, loop: Reactor, log: LogFile, config: SessionConfig, paths: SessionPaths, owner: str,
                 instance_id: str) -> None:
        self.loop = loop
        self.log = log
        self.config = config
        self.paths = paths
        self.owner = owner
        self.instance_id = instance_id
        self.containment = Containment.NONE
        self.cgroup: SessionCgroup | None = None
        """The session's cgroup (shellper.host.cgroup), once made; None: containment none."""
        self.cgroup_id: int | None = None

    # ----------------------------------------------------------------------------------- containment

    def contain(self) -> None:
        """Make the session's cgroup and move this shellper into its shellper/ part (shellper.host.cgroup).

        Under ``auto`` a machine without a writable cgroup v2 hierarchy runs the session uncontained, and
        says so in the record and the log; under ``cgroup`` it does not start."""
        if self.config.containment == Containment.NONE:
            self._uncontained()
            return
        parent = self.config.cgroup_parent or default_parent()
        try:
            if parent is None:
                raise CgroupError("(none)", "no writable cgroup v2 parent: give --cgroup-parent, or run as root "
                                  "or with a delegated cgroup")
            scope = delegated_scope()
            group = SessionCgroup.create(parent, LeafName.of(self.paths.dir, self.owner, self.config.name,
                                                             self.instance_id), str(self.paths.dir))
            try:
                self.cgroup_id = group.inode()
            except OSError:
                group.remove()
                raise
        except (CgroupError, OSError) as exc:
            if self.config.containment == Containment.CGROUP:  # the launcher shows this: say which option made it fatal
                raise ConfigError("--containment cgroup", str(exc)) from exc
            self.log.write(f"running without a cgroup: {exc}")
            self._uncontained()
            return
        LAUNCHER_ORIGIN.clear()  # its own leaf, made from where it is: as a cold start's
        self.cgroup = group
        self.containment = Containment.SYSTEMD_SCOPE if scope is not None and scope == parent else Containment.CGROUP
        self.log.write(f"cgroup {group.path}")

    def join(self) -> None:
        """Move into the session cgroup's shellper/ part, once the launcher has been told we are ready.

        Off the launch path on purpose: a migration between cgroups waits for an RCU grace period
        (bench/NOTES.md, "Moving a process between cgroups"). Until then this shellper stays where it
        was started, which matters only for a session started inside another one, for those few
        milliseconds."""
        if self.cgroup is None:
            return
        try:
            self.cgroup.join(SHELLPER_SUB)
        except CgroupError as exc:
            self.log.write(f"could not move into {self.cgroup.sub(SHELLPER_SUB)}: {exc}")

    def _uncontained(self) -> None:
        """Without a cgroup of its own: where a cold start would run (a warm launcher's session goes back to its
        caller's cgroup, on the launch path: an RCU grace period, which a ``--containment none`` one started in a
        thread as it began, shellper.daemon.main), and never inside another session's. Before the child's fork."""
        failed = back_to_launcher_origin()
        if failed:
            self.log.write(failed)
        self._leave_outer_session()

    def _leave_outer_session(self) -> None:
        """Without a cgroup of our own, still not inside another session's: ending that one would end this.
        Move to the nearest cgroup above it (where the hierarchy lets us)."""
        mount, here = find_mount(), own_cgroup()
        outer = session_cgroup_of(here) if here is not None else None
        if mount is None or outer is None:
            return
        target = mount + os.path.dirname(outer)
        try:
            with open(os.path.join(target, "cgroup.procs"), "w") as procs:
                procs.write("0")
        except OSError as exc:
            self.log.write(f"runs inside session cgroup {outer} and could not leave it ({exc.strerror}): ending "
                           "that session ends this one")
            return
        self.log.write(f"left session cgroup {outer} for {target}")

    def child_procs_fd(self) -> int:
        """A descriptor of child/'s cgroup.procs for a spawn to join (the caller closes it); -1 without a cgroup."""
        return self.cgroup.open_procs(CHILD_SUB) if self.cgroup is not None else -1

    def release(self) -> None:
        """Leave the session's cgroup and remove it, deepest first: called once its child/ part is empty.
        What a process inside moved elsewhere in it (a sub-cgroup it made, the leaf itself) is the session's
        and is ended; a stranger in shellper/ (which only this shellper belongs in) is named, not signalled
        (shellper.host.survivors.end_cgroup says why), and keeps the cgroup."""
        group = self.cgroup
        if group is None:
            return
        try:
            group.leave()
            if group.procs(spare=SHELLPER_SUB) and not group.kill_outside(SHELLPER_SUB, 5.0):
                self.log.write(f"processes survived cgroup.kill: {group.procs(spare=SHELLPER_SUB)}")
            if not group.remove():
                strangers = group.procs(SHELLPER_SUB)
                self.log.write(f"cgroup {group.path} is not empty; left in place" + (
                    f": process(es) {strangers} moved into its {SHELLPER_SUB}/ part; not signalled" if strangers
                    else ""))
        except (CgroupError, OSError) as exc:
            self.log.write(f"could not remove cgroup {group.path}: {exc}")
        self.cgroup = None

    # ----------------------------------------------------------------------------------- ending it

    def end_previous(self) -> None:
        """A killed shellper's record is about to be overwritten: end what its tree left running first (its
        cgroup, or what carries its mark), or nothing would ever find it again."""
        try:
            previous = read_record(self.paths.record)
        except (OSError, RecordError):
            return
        if previous.owner != self.owner:
            left = self._left_unnamed(previous)
            if left:
                raise OwnerRemains(self.config.name, previous, left)
            self.log.write(f"instance {previous.instance_id} was owner {previous.owner!r}'s and left nothing "
                           "running")
            return
        from shellper.host.survivors import reap_survivors  # only on this path: a name reused after a crash

        try:
            report = reap_survivors(previous, directory=self.paths.dir, grace=self.config.grace)
        except (IdentityError, CgroupError, OSError) as exc:
            self.log.write(f"could not end what instance {previous.instance_id} left running: {exc}")
            return
        if report.pids or report.suspect:
            self.log.write(f"instance {previous.instance_id} left {list(report.pids)} running: ended"
                           + (f"; not ended: {report.suspect}" if report.suspect else ""))

    def _left_unnamed(self, previous: SessionRecord) -> tuple[int, ...]:
        """What another owner's killed session left running, which that owner's reconcile finds through its
        record: the processes in its cgroup (verified as that session's), or those carrying its mark
        (containment none; the record is the only way to them). A record overwritten now would leave that
        owner's reconcile nothing to act on, or a stray cgroup it may not end while this name is held."""
        try:
            if previous.containment != Containment.NONE:
                group, _ = verify_dead_session(previous.cgroup, previous.cgroup_id, self.paths.dir, previous.name,
                                               previous.instance_id, previous.owner)
                return tuple(sorted(group.procs())) if group is not None else ()
            from shellper.host.survivors import find_survivors  # only on this path: a name reused after a crash

            found = find_survivors(previous, directory=self.paths.dir)
        except (IdentityError, CgroupError, OSError) as exc:
            self.log.write(f"could not look for what instance {previous.instance_id} left running: {exc}")
            return ()
        for fd in found.values():
            fd.close()
        return tuple(sorted(found))

    def kill_at_once(self, leader: int | None) -> None:
        """A start that failed: SIGKILL what it started (and reap the child) before its files go."""
        if self.cgroup is not None:
            with contextlib.suppress(CgroupError):
                self.cgroup.kill(CHILD_SUB)
                self.cgroup.wait_empty(5.0, CHILD_SUB)
        if leader is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(leader, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(leader, 0)

    async def terminate(self, grace: float, leader: int | None, reap: Callable[[], None]) -> tuple[int, ...]:
        """SIGTERM the child's group (``leader``) and every descendant, wait ``grace``, then freeze and SIGKILL
        until nothing is left; ``reap`` reaps what died after each wait. Returns what survived (logged).

        Those that ignore SIGTERM get SIGHUP first (:meth:`_hang_up_deaf`), as a closing terminal and tmux's
        kill-session send it: an interactive shell ignores SIGTERM but exits on SIGHUP, passing it to its
        jobs, so a shell's stop takes no grace; a program's own SIGTERM handler still runs as before.

        Without a cgroup, every process is pinned by a pidfd and only signalled if, after the pinning, it is
        still under a pinned parent of this shellper (shellper.host.reaper.OwnTree): a pid recycled since /proc
        listed it is never hit. A stopped process cannot fork, so every pinned member is SIGSTOPped and the
        tree scanned again until a scan finds nobody new, and only then SIGKILLed; that repeats until a scan
        finds nobody alive, for at most KILL_SECONDS (a fork bomb outruns plain SIGKILL rounds)."""
        if self.cgroup is not None:
            return await self._terminate_cgroup(self.cgroup, grace, reap)
        spare = frozenset(live_shellpers()) - {os.getpid()}
        try:
            # A session started from inside this one is not part of it: its shellper ends its own tree.
            tree = OwnTree(spare=spare)
        except (OSError, IdentityError) as exc:  # no pidfd to spare (EMFILE): a stop must not hang on it
            self.log.write(f"cannot pin the process tree, nothing signalled: {exc}")
            return ()
        try:
            self._pin_new(tree)
            if not tree.alive():
                return ()
            self._hang_up_deaf(tree.alive())
            if leader is not None:
                tree.signal_group(leader, signal.SIGCONT)
                tree.signal_group(leader, signal.SIGTERM)
            await self._signal_and_wait(tree.alive(), signal.SIGTERM, grace, reap)
            deadline = time.monotonic() + KILL_SECONDS
            while True:
                tree.prune()
                while True:  # freeze: a scan after every member was stopped finds nobody new
                    new = self._pin_new(tree)
                    self._signal(tree.alive(), signal.SIGSTOP)
                    if not new or time.monotonic() >= deadline:
                        break
                left = max(0.0, deadline - time.monotonic())
                await self._signal_and_wait(tree.alive(), signal.SIGKILL, min(5.0, left), reap)
                tree.prune()
                survivors = self._still_there(tree, spare)
                if not survivors:
                    return ()
                if time.monotonic() >= deadline:
                    break
            self._signal(tree.alive(), signal.SIGKILL)  # whatever else happens, none is left stopped by us
            self.log.write(f"processes survived SIGKILL for {KILL_SECONDS:g} s: {list(survivors)}")
            return survivors
        finally:
            tree.close()

    async def _terminate_cgroup(self, group: SessionCgroup, grace: float, reap: Callable[[], None]) -> tuple[int, ...]:
        """SIGTERM every verified member of child/ (and of what a process inside made of the rest of the cgroup
        but shellper/), wait ``grace`` for child/ to empty, then cgroup.kill (:meth:`release` ends the rest);
        what survived in child/."""
        left: tuple[int, ...] = ()
        if not group.populated(CHILD_SUB):
            reap()
            return left
        members = group.pinned_members(spare=SHELLPER_SUB)
        try:
            self._hang_up_deaf(members)
        finally:
            for fd in members:
                fd.close()
        group.signal_members(signal.SIGTERM, spare=SHELLPER_SUB)
        group.signal_members(signal.SIGCONT, spare=SHELLPER_SUB)
        if not await self._cgroup_emptied(group, grace):
            try:
                group.kill(CHILD_SUB)
            except CgroupError as exc:
                self.log.write(f"could not kill the child's cgroup: {exc}")
            if not await self._cgroup_emptied(group, 5.0):
                left = tuple(sorted(group.procs(CHILD_SUB)))
                self.log.write(f"processes survived cgroup.kill: {list(left)}")
        reap()
        return left

    async def _cgroup_emptied(self, group: SessionCgroup, timeout: float) -> bool:
        """Wait until child/ holds no process (the kernel flags cgroup.events with POLLPRI) or ``timeout``."""
        deadline = time.monotonic() + timeout
        try:
            fd = os.open(group.events_path(CHILD_SUB), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            while events_populated(os.pread(fd, 4096, 0).decode("ascii", "replace")):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if not await self.loop.wait([self.loop.priority_readable(fd)], timeout=left):
                    self.loop.remove_reader(fd)
            return True
        finally:
            self.loop.forget_fd(fd)
            os.close(fd)

    def _still_there(self, tree: OwnTree, spare: frozenset[int]) -> tuple[int, ...]:
        """What of the tree is alive: the pinned members, and whatever /proc shows under this shellper that
        is neither a spared shellper nor under one (a process a failed pinning missed is not pinned, but it
        is still there). Empty only when a scan found nobody."""
        self._pin_new(tree)
        found = {fd.pid for fd in tree.alive()}
        me = os.getpid()
        for pid in descendants(me):
            if pid in spare or under(pid, spare):
                continue
            try:
                st = read_stat(pid)
            except IdentityError:
                continue
            if st is not None and st.state != "Z":
                found.add(pid)
        return tuple(sorted(found))

    def _pin_new(self, tree: OwnTree) -> list[int]:
        """Pin the descendants not pinned yet; the new pids."""
        try:
            return tree.scan()
        except (OSError, IdentityError) as exc:  # what is pinned so far still gets the signals
            self.log.write(f"could not pin every descendant: {exc}")
            return []

    @staticmethod
    def _hang_up_deaf(members: list[PidFd]) -> None:
        """SIGHUP each of ``members`` that ignores SIGTERM (an interactive shell): a hangup ends it now, where
        SIGTERM would only start the grace."""
        for member in members:
            if ignores_signal(member.pid, signal.SIGTERM):
                with contextlib.suppress(ProcessGone, PermissionError):
                    member.send_signal(signal.SIGHUP)

    @staticmethod
    def _signal(members: list[PidFd], sig: int) -> None:
        for member in members:
            with contextlib.suppress(ProcessGone, PermissionError):
                member.send_signal(sig)

    async def _signal_and_wait(self, members: list[PidFd], sig: int, timeout: float,
                               reap: Callable[[], None]) -> None:
        """Signal pinned processes and wait, without blocking the loop, until they exit or ``timeout``."""
        waiters: list[Future[None]] = []
        for member in members:
            with contextlib.suppress(ProcessGone, PermissionError):
                member.send_signal(sig)
            waiters.append(self.loop.readable(member.fileno()))
        try:
            if waiters:
                await self.loop.wait(waiters, timeout=timeout)
        finally:
            for member in members:
                self.loop.remove_reader(member.fileno())
        reap()
