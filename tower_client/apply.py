"""Carry out reconcile decisions: terminate and clean for real, adopt by verifying, the rest reported.

* terminate: re-verify the shellper through a pidfd (boot id + start ticks, then - read through the
  pinned pidfd - that its /proc/<pid>/cmdline hashes to the record's ``cmdline_sha256``, which the
  shellper wrote about itself; never this process or one of its ancestors), pin its descendants, then
  ask it to STOP over its socket (it kills its own tree, confirms the deaths and removes its files) -
  but only if the socket answers as the recorded instance from the recorded pid. If STOP cannot be
  delivered or the shellper does not exit in time: :func:`shellper.host.reaper.terminate_tree` (SIGTERM,
  grace, SIGKILL, confirmed death, all through pidfds). Either way every descendant pinned before the
  first signal must be dead afterwards, or :class:`~shellper.host.reaper.SurvivorError` is raised.
* clean: if the record's shellper is dead (this boot, pid gone or reused), first end what its tree left
  behind (:mod:`tower_client.survivors`: processes in the recorded child's session or carrying its
  instance mark, each through a pidfd; never a live shellper's tree, nothing at all for a record whose
  instance is claimed by a live session). Then take the session lock ourselves (so nobody can start the
  session meanwhile, and proving no live owner), remove the socket (only if it is a socket), record,
  log and the temp files a cut-short record write left (``.NAME.json.<pid>.<hex>.tmp``; only regular
  files), then release the lock, which removes the lock file. Nothing is followed through a symlink.
* adopt: connect as a viewer and check the instance id and peer pid; the connection is closed again.
  The Tower then attaches its own (resuming) client with ``expect_instance_id`` from the record -
  returning open connections would force one concurrency model on it.
* respawn / leave: reported only; the Tower relaunches with its own launch parameters.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shellper.client.blocking import Client, ClientError
from shellper.core.containment import Containment
from shellper.core.defaults import DEFAULT_GRACE
from shellper.core.errors import ShellperError
from shellper.core.owner import default_owner
from shellper.host.cgroup import (
    CHILD_SUB,
    SHELLPER_SUB,
    LeafName,
    SessionCgroup,
    dir_key,
    find_mount,
    owner_key,
    verify_dead_session,
)
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
from shellper.protocol import wire
from tower_client.client import InstanceMismatch, PeerMismatch, peer_pid
from tower_client.discover import PROBE_TIMEOUT, check_probe_timeout
from tower_client.reconcile import Action, Decision
from tower_client.survivors import SurvivorReport, end_cgroup, protected_pids, reap_survivors

__all__ = [
    "CONFIRM_TIMEOUT",
    "CommandMismatch",
    "NotAShellper",
    "Outcome",
    "OwnerBusy",
    "ProtectedProcess",
    "Report",
    "Termination",
    "apply",
    "clean_session",
    "terminate_session",
    "verify_session",
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


# --------------------------------------------------------------------------------------------- verify


def verify_session(record: SessionRecord, paths: SessionPaths,
                   timeout: float = PROBE_TIMEOUT) -> wire.Welcome:
    """Handshake as a viewer; InstanceMismatch / PeerMismatch unless it is the recorded shellper."""
    client = Client(paths.socket, "viewer", client_name="tower-client-verify", timeout=timeout)
    try:
        welcome = client.connect(replay_bytes=0)
        _check_peer(client, welcome, record)
        return welcome
    finally:
        client.close()


def _check_peer(client: Client, welcome: wire.Welcome, record: SessionRecord) -> None:
    if welcome.instance_id != record.instance_id:
        raise InstanceMismatch(client.path, record.instance_id, welcome.instance_id)
    seen = peer_pid(client.sock) if client.sock is not None else None
    if seen != record.shellper_pid or welcome.shellper_pid != record.shellper_pid:
        raise PeerMismatch(client.path, record.shellper_pid, seen)


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


@dataclass(frozen=True)
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


def _send_stop(record: SessionRecord, paths: SessionPaths, grace: float, timeout: float) -> Client:
    """Connect as the tower, insist on the recorded instance and pid, send STOP. Caller closes."""
    client = Client(paths.socket, "tower", client_name="tower-client-terminate", timeout=timeout)
    try:
        welcome = client.connect(replay_bytes=0)
        _check_peer(client, welcome, record)
        client.send(wire.Stop(grace=grace))
    except BaseException:
        client.close()
        raise
    return client


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


def terminate_session(record: SessionRecord, paths: SessionPaths, *, grace: float = DEFAULT_GRACE,
                      stop_timeout: float | None = None, connect_timeout: float = PROBE_TIMEOUT,
                      confirm_timeout: float = CONFIRM_TIMEOUT) -> Termination:
    """End a verified shellper and its whole tree; see the module docstring for the order of attempts.

    Raises ProcessGone (nothing to do), IdentityMismatch (pid reused: nothing signalled), its subclass
    CommandMismatch (the process does not run the recorded program: nothing signalled), ProtectedProcess
    (the record names this process or an ancestor: nothing signalled), InstanceMismatch / PeerMismatch
    (the socket answers as someone else: nothing signalled), SurvivorError (something outlived SIGKILL).
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
    try:
        method = "stop"
        try:
            client = _send_stop(record, paths, grace, connect_timeout)
        except (InstanceMismatch, PeerMismatch):
            raise
        except ClientError as exc:
            stop_error = str(exc)
            dead = False
        else:
            try:
                dead = leader.wait_dead(grace + STOP_MARGIN if stop_timeout is None else stop_timeout)
            finally:
                client.close()
            if not dead:
                stop_error = "the shellper did not exit after STOP"
        if not dead:
            method = "signals"
            with contextlib.suppress(ProcessGone):
                # Never the shellper's process group: a --foreground shellper shares it with its pipeline.
                report = terminate_tree(ident, grace, include_group=False, confirm_timeout=confirm_timeout)
        stragglers = _finish_stragglers(tree, grace, confirm_timeout)
        if group is not None and leader.wait_dead(0):
            stragglers += end_cgroup(record.name, group, grace, confirm_timeout).pids
    finally:
        for fd in tree.values():
            fd.close()
        leader.close()
    removed: tuple[str, ...] = ()
    if session_files(paths):
        with contextlib.suppress(AlreadyRunning):  # a new shellper took the name: its files now
            removed = clean_session(paths)
    return Termination(record.name, record.shellper_pid, method, stop_error, members, stragglers, removed,
                       report)


# --------------------------------------------------------------------------------------------- apply


@dataclass
class Outcome:
    """What happened to one decision. ``result``: adopted, terminated, already_gone, cleaned, reported,
    skipped (the situation changed: nothing done) or failed (``error`` says why)."""

    decision: Decision
    result: str
    ok: bool
    detail: str = ""
    removed: tuple[str, ...] = ()
    termination: Termination | None = None
    error: str | None = None
    survivors: tuple[int, ...] = ()
    """Processes the dead shellper's tree left behind, ended here (see tower_client.survivors)."""

    def to_dict(self) -> dict[str, Any]:
        out = self.decision.to_dict()
        out.update(result=self.result, ok=self.ok, outcome=self.detail, removed=list(self.removed),
                   error=self.error, survivors=list(self.survivors))
        if self.termination is not None:
            t = self.termination
            out["termination"] = {"method": t.method, "stop_error": t.stop_error, "tree": list(t.tree),
                                  "stragglers": list(t.stragglers)}
        return out


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "outcomes": [o.to_dict() for o in self.outcomes]}


class OwnerBusy(ShellperError, RuntimeError):
    """Another Tower of the same owner is applying decisions in this runtime directory right now."""

    def __init__(self, owner: str, directory: str) -> None:
        self.owner = owner
        self.directory = directory
        super().__init__(f"owner {owner!r} is already applying decisions in {directory} (another Tower?); "
                         "nothing was done")


def hold_owner_lock(directory: str, owner: str) -> SessionLock:
    """The owner lock of ``directory``: held while a Tower applies decisions, so two Towers of one owner
    never act at once (Towers of different owners take different locks). OwnerBusy if it is taken."""
    path = os.path.join(directory, f".owner-{owner_key(owner)}.lock")
    try:
        return SessionLock.acquire(path, f"owner {owner}", write_pid=False)  # no write: works on a full disk
    except AlreadyRunning:
        raise OwnerBusy(owner, directory) from None


def apply(decisions: Iterable[Decision], *, grace: float = DEFAULT_GRACE, stop_timeout: float | None = None,
          probe_timeout: float = PROBE_TIMEOUT, confirm_timeout: float = CONFIRM_TIMEOUT,
          owner: str | None = None) -> Report:
    """Carry out ``decisions`` in order, holding ``owner``'s lock (default: shellper.core.owner.default_owner())
    in every runtime directory they touch. Never raises for one decision's failure: it is reported.

    ValueError (before anything is done) if ``probe_timeout`` is not a finite number > 0; OwnerBusy if
    another Tower of the same owner is applying in one of the directories (nothing is done)."""
    check_probe_timeout(probe_timeout)
    decisions = list(decisions)
    me = default_owner() if owner is None else owner
    held: list[SessionLock] = []
    try:
        for directory in sorted({d.observed.dir for d in decisions if d.observed is not None and d.observed.dir}):
            held.append(hold_owner_lock(directory, me))
        return _apply_all(decisions, grace, stop_timeout, probe_timeout, confirm_timeout)
    finally:
        for lock in held:
            lock.release()


def _apply_all(decisions: list[Decision], grace: float, stop_timeout: float | None, probe_timeout: float,
               confirm_timeout: float) -> Report:
    report = Report()
    failed: set[str] = set()
    for d in decisions:
        try:
            outcome = _apply_one(d, grace, stop_timeout, probe_timeout, confirm_timeout, d.name in failed)
        except Exception as exc:  # one session's trouble must not stop the others
            outcome = Outcome(d, "failed", False, error=f"{type(exc).__name__}: {exc}")
        if not outcome.ok:
            failed.add(d.name)
        report.outcomes.append(outcome)
    return report


def _clean_stray(d: Decision, directory: str, grace: float, confirm_timeout: float) -> Outcome:
    """End and remove a session cgroup no record names, if it still is this directory's and holds no
    shellper (checked again now: reconcile's look may be old)."""
    assert d.cgroup is not None
    mount = find_mount()
    leaf = LeafName.parse(os.path.basename(d.cgroup))
    if mount is None or leaf is None or leaf.dir_key != dir_key(directory) or leaf.name != d.name:
        return Outcome(d, "skipped", False, f"{d.cgroup} is not a session cgroup of {directory}")
    group = SessionCgroup(d.cgroup, mount)
    if SessionLock.is_locked(SessionPaths.for_name(directory, d.name).lock):
        return Outcome(d, "skipped", False, f"session {d.name!r} is starting or running now: {d.cgroup} may be "
                       "its new cgroup; nothing signalled")
    if group.populated(SHELLPER_SUB):
        return Outcome(d, "skipped", False, f"a shellper now lives in {d.cgroup}: nothing signalled")
    ended = end_cgroup(d.name, group, grace, confirm_timeout)
    return Outcome(d, "cleaned", True, f"removed cgroup {d.cgroup}" + _survivor_note(ended), survivors=ended.pids)


def _apply_one(d: Decision, grace: float, stop_timeout: float | None, probe_timeout: float,
               confirm_timeout: float, blocked: bool) -> Outcome:
    obs = d.observed
    if d.action in (Action.LEAVE, Action.RESPAWN):
        if blocked:
            return Outcome(d, "skipped", False, "an earlier step for this session failed")
        return Outcome(d, "reported", True, "left untouched" if d.action is Action.LEAVE else
                       "for the Tower to relaunch")
    if obs is None:
        return Outcome(d, "failed", False, error="decision carries no observation")
    if d.action is Action.CLEAN and d.cgroup is not None:
        return _clean_stray(d, obs.dir, grace, confirm_timeout)
    paths = SessionPaths.for_name(obs.dir, d.name)
    if d.action is Action.CLEAN:
        reaped = SurvivorReport(d.name, (), ())
        if obs.record is not None and obs.boot == "current" and obs.identity in ("gone", "mismatch"):
            # The recorded shellper is dead: what its tree left behind is nobody's now.
            reaped = reap_survivors(obs.record, directory=obs.dir or None, grace=grace, confirm_timeout=confirm_timeout)
        survivors = reaped.pids
        try:
            removed = clean_session(paths)
        except AlreadyRunning:
            return Outcome(d, "skipped", False, "a live process now holds the lock: nothing removed"
                           + _survivor_note(reaped), survivors=survivors)
        detail = f"removed {len(removed)} file(s)" + _survivor_note(reaped)
        return Outcome(d, "cleaned", True, detail, removed, survivors=survivors)
    record = obs.record
    if record is None:
        return Outcome(d, "failed", False, error="decision carries no record")
    if d.action is Action.ADOPT:
        welcome = verify_session(record, paths, probe_timeout)
        return Outcome(d, "adopted", True, f"instance {welcome.instance_id} answers ({welcome.state})")
    try:
        term = terminate_session(record, paths, grace=grace, stop_timeout=stop_timeout,
                                 connect_timeout=probe_timeout, confirm_timeout=confirm_timeout)
    except CommandMismatch as exc:
        return Outcome(d, "skipped", False, "the pid does not run the recorded shellper: nothing signalled",
                       error=str(exc))
    except IdentityMismatch as exc:
        return Outcome(d, "skipped", False, "the pid now belongs to another process: nothing signalled",
                       error=str(exc))
    except ProtectedProcess as exc:
        return Outcome(d, "skipped", False, "the record names this process or one of its ancestors: "
                       "nothing signalled", error=str(exc))
    except ProcessGone as exc:
        gone = reap_survivors(record, directory=obs.dir or None, grace=grace, confirm_timeout=confirm_timeout)
        gone_removed: tuple[str, ...] = ()
        with contextlib.suppress(AlreadyRunning):
            gone_removed = clean_session(paths)
        return Outcome(d, "already_gone", True, str(exc) + _survivor_note(gone), gone_removed,
                       survivors=gone.pids)
    detail = f"stopped via {term.method}" + (f" ({term.stop_error})" if term.stop_error else "")
    return Outcome(d, "terminated", True, detail, term.removed, term)


def _survivor_note(reaped: SurvivorReport) -> str:
    note = f", ended {len(reaped.pids)} survivor(s)" if reaped.pids else ""
    if reaped.spared:
        note += f"; spared {list(reaped.spared)}: under a live shellper"
    if reaped.suspect:
        note += f"; suspect record, no survivor ended: {reaped.suspect}"
    return note
