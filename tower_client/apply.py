"""Carry out reconcile decisions: terminate and clean for real, adopt by verifying, the rest reported.

* terminate: :func:`shellper.host.cleanup.terminate_shellper` re-verifies the shellper through a pidfd
  (boot id, start ticks, the command line it recorded, its socket or cgroup; never this process or one
  of its ancestors) and pins its tree; STOP is then sent over its socket, but only if the socket answers
  as the recorded instance from the recorded pid, and if STOP cannot be delivered or the shellper does
  not exit in time it is ended through pidfd signals. Every descendant pinned before the first signal
  must be dead afterwards, or :class:`~shellper.host.reaper.SurvivorError` is raised.
* clean: if the record's shellper is dead (this boot, pid gone or reused), first end what its tree left
  behind (:mod:`shellper.host.survivors`: what carries its instance mark, or its cgroup, each process
  through a pidfd; never a live shellper's tree, nothing at all for a record whose instance is claimed
  by a live session), then remove its files under its lock (:func:`shellper.host.cleanup.clean_session`).
* adopt: connect as a viewer and check the instance id and peer pid; the connection is closed again.
  The Tower then attaches its own (resuming) client with ``expect_instance_id`` from the record -
  returning open connections would force one concurrency model on it. When discover's own handshake
  made those checks less than ADOPT_FRESH seconds ago and the process that answered it still runs (its
  start ticks), that handshake stands: one probe per session, not two.
* respawn / leave: reported only; the Tower relaunches with its own launch parameters.
"""
from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shellper.client.blocking import Client
from shellper.client.stop import check_recorded, terminate_recorded
from shellper.core.defaults import DEFAULT_GRACE
from shellper.core.errors import ShellperError
from shellper.core.owner import default_owner
from shellper.host.cgroup import (
    SHELLPER_SUB,
    LeafName,
    SessionCgroup,
    default_parent,
    dir_key,
    find_leaked_leaves,
    find_mount,
    owner_key,
    proof,
)
from shellper.host.cleanup import (
    CONFIRM_TIMEOUT,
    CommandMismatch,
    ProtectedProcess,
    Termination,
    clean_session,
    clear_dead,
)
from shellper.host.identity import IdentityMismatch, IdentityUnreadable, ProcessGone, boot_id, read_stat
from shellper.host.paths import SessionPaths
from shellper.host.record import AlreadyRunning, LockError, SessionLock, SessionRecord
from shellper.host.survivors import SurvivorReport, end_cgroup
from shellper.protocol import wire
from tower_client.discover import PROBE_TIMEOUT, Observed, check_probe_timeout, not_in_a_loop
from tower_client.reconcile import ReconcileAction, ReconcileDecision

__all__ = [
    "LeakedCgroup",
    "Outcome",
    "OwnerBusy",
    "OwnerLockUnavailable",
    "Report",
    "apply",
    "apply_async",
    "clean_session",
    "remove_leaked_cgroups",
    "terminate_session",
    "verify_session",
]


# --------------------------------------------------------------------------------------------- verify

VERIFY_CONCURRENCY = 16
"""Adopted sessions checked at once by apply."""
VERIFY_CLIENT_NAME = "tower-client-verify"
"""The HELLO client name of verify_session's probe (a Fleet hides its attach and detach events)."""
ADOPT_FRESH = 5.0
"""Seconds for which discover's handshake stands for apply's adopt check (see :func:`answered_as_recorded`).
An adopt signals nothing, and the Tower's own connection checks the instance again (expect_instance_id)."""



def verify_session(record: SessionRecord, paths: SessionPaths,
                   timeout: float = PROBE_TIMEOUT) -> wire.Welcome:
    """Handshake as a viewer; InstanceMismatch / PeerMismatch unless it is the recorded shellper."""
    client = Client(paths.socket, wire.Role.VIEWER, client_name=VERIFY_CLIENT_NAME, timeout=timeout)
    try:
        welcome = client.connect(replay_bytes=0)
        check_recorded(client, welcome, record)
        return welcome
    finally:
        client.close()


def answered_as_recorded(obs: Observed, record: SessionRecord, now: float) -> bool:
    """Discover's handshake, at most ADOPT_FRESH seconds old, made verify_session's checks (WELCOME's instance
    id and pid, and the peer's pid, are the record's), and the process that answered still runs: the
    record's pid, not a zombie, with the record's start ticks in this boot. A shellper keeps its instance
    id for its life, so the answer would be the same; any doubt (/proc unreadable) means a new handshake."""
    if not (obs.probe == "answered" and obs.record == record and obs.welcome_instance_id == record.instance_id
            and obs.welcome_pid == record.shellper_pid and obs.peer_pid == record.shellper_pid
            and 0 <= now - obs.observed_at <= ADOPT_FRESH):
        return False
    try:
        st = read_stat(record.shellper_pid)
        return (st is not None and st.state != "Z" and st.start_time == record.shellper_start_time
                and boot_id() == record.boot_id)
    except IdentityUnreadable:
        return False


# --------------------------------------------------------------------------------------------- terminate


def terminate_session(record: SessionRecord, paths: SessionPaths, *, grace: float = DEFAULT_GRACE,
                      stop_timeout: float | None = None, connect_timeout: float = PROBE_TIMEOUT,
                      confirm_timeout: float = CONFIRM_TIMEOUT) -> Termination:
    """End a verified shellper and its whole tree: STOP over its socket if it answers as the recorded
    shellper, else (or if it does not exit within ``stop_timeout``) signals through pidfds. See
    :func:`shellper.client.stop.terminate_recorded`, which ``shellper stop`` uses too.

    Raises ProcessGone (nothing to do), IdentityMismatch (pid reused: nothing signalled), its subclass
    CommandMismatch (the process does not run the recorded program: nothing signalled), ProtectedProcess
    (the record names this process or an ancestor: nothing signalled), InstanceMismatch / PeerMismatch
    (the socket answers as someone else: nothing signalled), SurvivorError (something outlived SIGKILL).
    """
    return terminate_recorded(record, paths, grace=grace, client_name="tower-client-terminate",
                              connect_timeout=connect_timeout, stop_timeout=stop_timeout,
                              confirm_timeout=confirm_timeout)


# --------------------------------------------------------------------------------------------- apply


@dataclass
class Outcome:
    """What happened to one decision. ``result``: adopted, terminated, already_gone, cleaned, reported,
    skipped (the situation changed: nothing done) or failed (``error`` says why)."""

    decision: ReconcileDecision
    result: str
    ok: bool
    detail: str = ""
    removed: tuple[str, ...] = ()
    termination: Termination | None = None
    error: str | None = None
    survivors: tuple[int, ...] = ()
    """Processes the dead shellper's tree left behind, ended here (see shellper.host.survivors)."""

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
    """What apply did: one Outcome per decision, in order; ``ok`` if every one succeeded."""

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


class OwnerLockUnavailable(ShellperError):
    """The owner lock of a runtime directory cannot be taken (a read-only directory, say): nothing is done."""

    def __init__(self, owner: str, directory: str, reason: str) -> None:
        self.owner = owner
        self.directory = directory
        super().__init__(f"cannot take owner {owner!r}'s lock in {directory} ({reason}): nothing was done")


def hold_owner_lock(directory: str, owner: str) -> SessionLock:
    """The owner lock of ``directory``: held while a Tower applies decisions, so two Towers of one owner
    never act at once (Towers of different owners take different locks). OwnerBusy if it is taken,
    OwnerLockUnavailable if it cannot be (a read-only directory cannot be cleaned up either)."""
    path = os.path.join(directory, f".owner-{owner_key(owner)}.lock")
    try:
        return SessionLock.acquire(path, f"owner {owner}", write_pid=False)  # no write: works on a full disk
    except AlreadyRunning:
        raise OwnerBusy(owner, directory) from None
    except LockError as exc:
        raise OwnerLockUnavailable(owner, directory, exc.reason) from None


def apply(decisions: Iterable[ReconcileDecision], *, grace: float = DEFAULT_GRACE, stop_timeout: float | None = None,
          probe_timeout: float = PROBE_TIMEOUT, confirm_timeout: float = CONFIRM_TIMEOUT,
          owner: str | None = None) -> Report:
    """Carry out ``decisions`` in order, holding ``owner``'s lock (default: shellper.core.owner.default_owner())
    in every runtime directory they touch. Never raises for one decision's failure: it is reported.

    ValueError (before anything is done) if ``probe_timeout`` is not a finite number > 0; OwnerBusy if
    another Tower of the same owner is applying in one of the directories (nothing is done). It blocks
    (grace periods, probes): from inside a running event loop it raises InsideEventLoop before doing
    anything; ``await apply_async(...)`` there."""
    check_probe_timeout(probe_timeout)
    not_in_a_loop("apply")
    return _apply(list(decisions), grace, stop_timeout, probe_timeout, confirm_timeout, owner)


async def apply_async(decisions: Iterable[ReconcileDecision], *, grace: float = DEFAULT_GRACE,
                      stop_timeout: float | None = None, probe_timeout: float = PROBE_TIMEOUT,
                      confirm_timeout: float = CONFIRM_TIMEOUT, owner: str | None = None) -> Report:
    """:func:`apply` in a worker thread, for a caller inside an event loop: the loop runs on while it
    waits out grace periods. The same arguments, result and errors."""
    check_probe_timeout(probe_timeout)
    decisions = list(decisions)
    return await asyncio.to_thread(_apply, decisions, grace, stop_timeout, probe_timeout, confirm_timeout, owner)


def _apply(decisions: list[ReconcileDecision], grace: float, stop_timeout: float | None, probe_timeout: float,
           confirm_timeout: float, owner: str | None) -> Report:
    me = default_owner() if owner is None else owner
    held: list[SessionLock] = []
    try:
        for directory in sorted({d.observed.dir for d in decisions if d.observed is not None and d.observed.dir}):
            held.append(hold_owner_lock(directory, me))
        return _apply_all(decisions, grace, stop_timeout, probe_timeout, confirm_timeout)
    finally:
        for lock in held:
            lock.release()


def _apply_all(decisions: list[ReconcileDecision], grace: float, stop_timeout: float | None, probe_timeout: float,
               confirm_timeout: float) -> Report:
    report = Report()
    failed: set[str] = set()

    def one(d: ReconcileDecision) -> Outcome:
        try:
            return _apply_one(d, grace, stop_timeout, probe_timeout, confirm_timeout, d.name in failed)
        except Exception as exc:  # one session's trouble must not stop the others
            return Outcome(d, "failed", False, error=f"{type(exc).__name__}: {exc}")

    # Adopting only checks who answers (a handshake: nothing signalled, nothing changed, and depending on
    # nothing done before it): those checks run at once, each waiting on its own shellper.
    verified: dict[int, Outcome] = {}
    now = time.time()
    for d in decisions:  # what discover's handshake verified a moment ago needs no second one
        obs = d.observed
        if d.action is ReconcileAction.ADOPT and obs is not None and obs.record is not None \
                and answered_as_recorded(obs, obs.record, now):
            verified[id(d)] = Outcome(d, "adopted", True, f"instance {obs.welcome_instance_id} answered "
                                      f"discover ({obs.state}); pid {obs.record.shellper_pid} still runs")
    adopts = [d for d in decisions if d.action is ReconcileAction.ADOPT and id(d) not in verified]
    if len(adopts) > 1:
        with ThreadPoolExecutor(min(VERIFY_CONCURRENCY, len(adopts)), thread_name_prefix="verify") as pool:
            verified.update(zip(map(id, adopts), pool.map(one, adopts), strict=True))
    for d in decisions:
        outcome = verified.get(id(d)) or one(d)
        if not outcome.ok:
            failed.add(d.name)
        report.outcomes.append(outcome)
    return report


def _clean_stray(d: ReconcileDecision, directory: str, grace: float, confirm_timeout: float) -> Outcome:
    """End and remove a session cgroup no record names, if it still is this directory's and holds no
    shellper (checked again now: reconcile's look may be old)."""
    assert d.cgroup is not None
    mount = find_mount()
    leaf = LeafName.parse(os.path.basename(d.cgroup))
    if mount is None or leaf is None or leaf.dir_key != dir_key(directory) or leaf.name != d.name:
        return Outcome(d, "skipped", False, f"{d.cgroup} is not a session cgroup of {directory}")
    _, unproven = proof(d.cgroup)
    if unproven and d.reason != "stray_cgroup_bare":
        return Outcome(d, "skipped", False, f"{unproven}: nothing signalled")
    group = SessionCgroup(d.cgroup, mount)
    if SessionLock.is_locked(SessionPaths.for_name(directory, d.name).lock):
        return Outcome(d, "skipped", False, f"session {d.name!r} is starting or running now: {d.cgroup} may be "
                       "its new cgroup; nothing signalled")
    if unproven:
        return _remove_bare(d, group)
    if group.populated(SHELLPER_SUB):
        return Outcome(d, "skipped", False, f"a shellper now lives in {d.cgroup}: nothing signalled")
    ended = end_cgroup(d.name, group, grace, confirm_timeout)
    if ended.suspect or ended.kept:  # say so, never "removed": the next reconcile would find it again
        return Outcome(d, "failed", False, _survivor_note(ended).lstrip(", ;"), survivors=ended.pids,
                       error=ended.suspect or ended.kept)
    return Outcome(d, "cleaned", True, f"removed cgroup {d.cgroup}" + _survivor_note(ended), survivors=ended.pids)


def _remove_bare(d: ReconcileDecision, group: SessionCgroup) -> Outcome:
    """Remove an unproven leaf that held nothing when reconcile looked, if it still holds nothing: the kernel
    refuses the rmdir of a cgroup with a process or a cgroup inside, so nobody is signalled either way."""
    if not os.path.isdir(group.path):
        return Outcome(d, "already_gone", True, f"{group.path} is gone")
    if not group.bare() or not group.remove():
        return Outcome(d, "skipped", False, f"{group.path} no longer holds nothing, and carries no shellper proof: "
                       "nothing signalled")
    return Outcome(d, "cleaned", True, f"removed cgroup {group.path}, which held nothing")


def _apply_one(d: ReconcileDecision, grace: float, stop_timeout: float | None, probe_timeout: float,
               confirm_timeout: float, blocked: bool) -> Outcome:
    obs = d.observed
    if d.action in (ReconcileAction.LEAVE, ReconcileAction.RESPAWN):
        if blocked:
            return Outcome(d, "skipped", False, "an earlier step for this session failed")
        return Outcome(d, "reported", True, "left untouched" if d.action is ReconcileAction.LEAVE else
                       "for the Tower to relaunch")
    if obs is None:
        return Outcome(d, "failed", False, error="decision carries no observation")
    if d.action is ReconcileAction.CLEAN and d.cgroup is not None:
        return _clean_stray(d, obs.dir, grace, confirm_timeout)
    paths = SessionPaths.for_name(obs.dir, d.name)
    if d.action is ReconcileAction.CLEAN:
        # The recorded shellper is dead: what its tree left behind is nobody's now.
        dead = obs.record is not None and obs.boot == "current" and obs.identity in ("gone", "mismatch")
        cleared = clear_dead(obs.record if dead else None, paths, grace=grace, confirm_timeout=confirm_timeout,
                             directory=obs.dir or None)
        reaped, removed = cleared.reaped, cleared.removed
        survivors = reaped.pids
        if removed is None:
            return Outcome(d, "skipped", False, "a live process now holds the lock: nothing removed"
                           + _survivor_note(reaped), survivors=survivors)
        detail = f"removed {len(removed)} file(s)" + _survivor_note(reaped)
        return Outcome(d, "cleaned", not reaped.kept, detail, removed, survivors=survivors, error=reaped.kept or None)
    record = obs.record
    if record is None:
        return Outcome(d, "failed", False, error="decision carries no record")
    if d.action is ReconcileAction.ADOPT:
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
        gone = clear_dead(record, paths, grace=grace, confirm_timeout=confirm_timeout, directory=obs.dir or None)
        return Outcome(d, "already_gone", True, str(exc) + _survivor_note(gone.reaped), gone.removed or (),
                       survivors=gone.reaped.pids)
    detail = f"stopped via {term.method}" + (f" ({term.stop_error})" if term.stop_error else "")
    if term.strangers:
        detail += f"; not signalled: {list(term.strangers)}, strangers in the cgroup's shellper/ part"
    return Outcome(d, "terminated", not term.kept, detail, term.removed, term, error=term.kept or None)


def _survivor_note(reaped: SurvivorReport) -> str:
    note = f", ended {len(reaped.pids)} survivor(s)" if reaped.pids else ""
    if reaped.spared:
        note += f"; spared {list(reaped.spared)}: under a live shellper"
    if reaped.suspect:
        note += f"; suspect record, no survivor ended: {reaped.suspect}"
    if reaped.strangers:
        note += f"; not signalled: {list(reaped.strangers)}, strangers in the cgroup's shellper/ part"
    if reaped.kept:
        note += f"; {reaped.kept}"
    return note


# --------------------------------------------------------------------------------------------- leaked


@dataclass(frozen=True)
class LeakedCgroup:
    """A cgroup of this owner whose runtime directory is gone (shellper.host.cgroup.find_leaked_leaves), and
    what was done with it: ``removed``, or why not in ``detail``."""

    path: str
    directory: str
    removed: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"cgroup": self.path, "directory": self.directory, "removed": self.removed, "detail": self.detail}


def remove_leaked_cgroups(owner: str | None = None, cgroup_parent: str | None = None, *,
                          apply_: bool = True) -> list[LeakedCgroup]:
    """Remove ``owner``'s empty session cgroups under ``cgroup_parent`` (default: the default parent) whose
    runtime directory no longer exists; with ``apply_`` False, only say which. One that holds processes is
    left and reported: a live shellper whose directory was removed recreates it on SIGUSR1, and nothing
    proves its processes dead. Nothing is ever signalled here."""
    parent = cgroup_parent or default_parent()
    if parent is None:
        return []
    me = default_owner() if owner is None else owner
    mount = find_mount() or "/"
    out: list[LeakedCgroup] = []
    for leaf in find_leaked_leaves(parent, me):
        gone = f"its runtime directory {leaf.directory} no longer exists"
        if leaf.populated:
            out.append(LeakedCgroup(leaf.path, leaf.directory, False, f"{gone}, but processes are inside: left"))
        elif not apply_:
            out.append(LeakedCgroup(leaf.path, leaf.directory, False, f"{gone}: would be removed"))
        else:
            try:
                removed = SessionCgroup(leaf.path, mount).remove()
            except ShellperError as exc:
                out.append(LeakedCgroup(leaf.path, leaf.directory, False, f"{gone}; {exc}"))
                continue
            out.append(LeakedCgroup(leaf.path, leaf.directory, removed, f"{gone}: " + (
                "removed" if removed else "a process moved in meanwhile: left")))
    return out
