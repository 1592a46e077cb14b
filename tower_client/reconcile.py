"""Adopt or terminate: what a restarted Tower should do with each session. Pure: no I/O but the loader.

Input: the Tower's registry (which sessions it wants, optionally pinned to an instance id) and what
:mod:`tower_client.discover` observed. Output: :class:`ReconcileDecision` s, each with a reason code.

"Ours" means *verified*: the record is from this boot, the recorded pid carries the recorded kernel
start ticks, the session lock is held (by that pid, when /proc/locks can tell), a socket that
answers names the record's instance id from the record's pid, and the files are this name's own: the
record and WELCOME name it, the record's socket is its socket path, and neither socket, record nor
lock has a second link (a hard link under another name shares the real session's lock and socket).
Only a verified shellper is ever terminated. The lock, not the pid, says whether anybody owns the
files: files are cleaned only when the lock is free and the socket is silent, which never signals
anybody.

ReconcileDecision table (first matching row wins; "row" = registry row for the name):

================================================  ==========================  ======================
situation                                         decisions                   reason
================================================  ==========================  ======================
a session cgroup the record does not name:        (one decision per cgroup, before the others)
  another owner's                                 leave                       other_owner
  no proof, but bare (a start cut short)          clean (rmdir only)          stray_cgroup_bare
  no proof it is a shellper's (hand-made)         leave                       stray_cgroup_unproven
  its shellper/ part populated                    leave                       stray_cgroup_live
  otherwise                                       clean (that cgroup)         stray_cgroup
no files at all, row                              respawn                     not_running
lock state unknown (lock file unreadable)         leave                       lock_unknown
record unreadable (I/O, symlink), any             leave                       record_unreadable
no/corrupt record, lock held                      leave                       no_record / record_unreadable
no/corrupt record, socket answers                 leave                       unowned_socket_answers
no/corrupt record, lock free                      clean (+respawn if row)     stale_files / corrupt_record
record of another owner (or of none)              leave                       other_owner
record from another boot, lock held               leave                       previous_boot_locked
record from another boot, lock free               clean (+respawn if row)     previous_boot
boot id unreadable                                leave                       boot_unknown
lock held, pid gone / reused / unreadable /       leave                       lock_held_by_other,
  held by another pid                                                         pid_reused, identity_unreadable
lock free, pid verified and serving its socket    leave                       lock_missing
  (or in its cgroup): the lock file was removed
lock free, socket answers                         leave                       unowned_socket_answers
lock free, pid gone                               clean (+respawn if row)     dead
lock free, pid reused (never signalled)           clean (+respawn if row)     pid_reused
lock free, pid unreadable                         clean (+respawn if row)     identity_unreadable
lock free, pid verified (not the lock owner)      clean (+respawn if row)     not_lock_owner
verified; the files are not this name's own       leave                       name_mismatch
  (record/WELCOME name another session, the
  record's socket is another path, or the
  socket, record or lock is hard-linked)
verified; socket answers as another instance/pid  leave                       instance_mismatch,
                                                                              peer_mismatch
verified; state stopping/stopped                  leave                       stopping
verified; socket silent or refuses, row           leave                       unreachable
verified; socket silent or refuses, no row        terminate                   unregistered
verified, no row                                  terminate                   unregistered
verified, row pinned to another instance id       terminate + respawn         superseded
verified husk, row, older than husk_max_age       terminate                   husk_expired
verified husk, row                                adopt                       husk
verified running/backoff/starting, row            adopt                       running
================================================  ==========================  ======================

One name can get two decisions, in the order they must be carried out: ``clean`` or ``terminate``
first (it frees the name), then ``respawn`` (the Tower launches a fresh shellper with its own
parameters). Both carry the same reason. ``respawn`` is never emitted while something keeps the lock,
nor while a shellper of the name lives in a cgroup no record names (``stray_cgroup_live``, of any
owner): the respawned one would run beside it, two shellpers and two children for one name.
A ``husk_expired`` terminate has no respawn: the child ended for good; the Tower drops the row.

Owners: every decision is taken for one ``owner`` (default: shellper.core.owner.default_owner). A record of
another owner, or written before records carried one, is left whatever the registry says, and so is a
session cgroup whose name carries another owner's key: Towers of different owners can share a runtime
directory without touching each other's sessions.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from shellper.core.errors import BadArgument, ShellperError
from shellper.core.names import BadName, validate_name
from shellper.core.owner import default_owner
from shellper.core.states import SessionState
from shellper.host.cgroup import owner_key
from shellper.host.ownfiles import mismatch
from tower_client.discover import Observed

__all__ = [
    "MAX_INSTANCE_ID_LEN",
    "MAX_REGISTRY_BYTES",
    "MAX_REGISTRY_ROWS",
    "REASONS",
    "ReconcileAction",
    "ReconcileDecision",
    "Registry",
    "RegistryBadName",
    "RegistryDuplicate",
    "RegistryError",
    "RegistryNotJSON",
    "RegistryRow",
    "RegistryShapeError",
    "RegistryTooLarge",
    "RegistryUnreadable",
    "load_registry",
    "name_mismatch",
    "parse_registry",
    "reconcile",
]

MAX_REGISTRY_BYTES = 4 * 1024 * 1024
MAX_REGISTRY_ROWS = 10_000
MAX_INSTANCE_ID_LEN = 128


class ReconcileAction(StrEnum):
    """What reconcile decides for one session: adopt it (it is the registered instance and answers), terminate
    it (it runs but must not), respawn it (registered, not running), clean what a dead one left, or leave it
    alone (not provably this owner's, or in a state to wait out)."""

    ADOPT = "adopt"
    TERMINATE = "terminate"
    RESPAWN = "respawn"
    CLEAN = "clean"
    LEAVE = "leave"


REASONS = frozenset({
    "not_running", "lock_unknown", "record_unreadable", "no_record", "unowned_socket_answers", "stale_files",
    "corrupt_record", "previous_boot_locked", "previous_boot", "boot_unknown", "lock_held_by_other",
    "pid_reused", "identity_unreadable", "dead", "not_lock_owner", "instance_mismatch", "peer_mismatch",
    "stopping", "unreachable", "unregistered", "superseded", "husk_expired", "husk", "running",
    "other_owner", "lock_missing", "stray_cgroup", "stray_cgroup_live", "name_mismatch",
    "stray_cgroup_unproven", "stray_cgroup_bare",
})


# --------------------------------------------------------------------------------------------- registry


class RegistryError(ShellperError):
    """The registry file cannot be used; ``path`` and ``reason`` say which and why (one line)."""

    def __init__(self, path: str | os.PathLike[str] | None, reason: str) -> None:
        self.path = None if path is None else str(path)
        self.reason = reason
        super().__init__(f"registry {self.path}: {reason}" if self.path else f"registry: {reason}")


class RegistryUnreadable(RegistryError):
    """Missing, not a regular file, or an I/O error."""


class RegistryTooLarge(RegistryError):
    """More than MAX_REGISTRY_BYTES, or more than MAX_REGISTRY_ROWS rows."""


class RegistryNotJSON(RegistryError):
    """Not UTF-8 JSON (or uses NaN/Infinity)."""


class RegistryShapeError(RegistryError):
    """Valid JSON, wrong structure or field types."""


class RegistryDuplicate(RegistryError):
    """The same session name twice: which row wins would be a guess."""


class RegistryBadName(RegistryError):
    """A name that cannot be a session name (path characters, too long, leading dot or dash)."""


@dataclass(frozen=True)
class RegistryRow:
    """A session the Tower wants. ``instance_id`` pins one shellper instance; None accepts any."""

    name: str
    instance_id: str | None = None


@dataclass(frozen=True)
class Registry:
    """The sessions a Tower says it runs (its registry file, parsed): one row per name, ``path`` the file."""

    rows: tuple[RegistryRow, ...] = ()
    path: str | None = None

    def get(self, name: str) -> RegistryRow | None:
        for row in self.rows:
            if row.name == name:
                return row
        return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def parse_registry(obj: object, path: str | os.PathLike[str] | None = None) -> Registry:
    """Validate a decoded registry: ``{"sessions": [{"name": str, "instance_id": str | null}, ...]}``.

    Unknown keys (top level and rows) are ignored so the Tower may keep its own columns there.
    """
    if not isinstance(obj, Mapping):
        raise RegistryShapeError(path, f"top level is {type(obj).__name__}, expected an object")
    sessions = obj.get("sessions")
    if not isinstance(sessions, list):
        raise RegistryShapeError(path, "'sessions' must be an array")
    if len(sessions) > MAX_REGISTRY_ROWS:
        raise RegistryTooLarge(path, f"{len(sessions)} sessions (max {MAX_REGISTRY_ROWS})")
    rows: list[RegistryRow] = []
    seen: set[str] = set()
    for i, item in enumerate(sessions):
        where = f"sessions[{i}]"
        if not isinstance(item, Mapping):
            raise RegistryShapeError(path, f"{where} is {type(item).__name__}, expected an object")
        name = item.get("name")
        if not isinstance(name, str):
            raise RegistryShapeError(path, f"{where}.name must be a string")
        try:
            validate_name(name)
        except BadName as e:
            raise RegistryBadName(path, f"{where}.name: {e}") from None
        if name in seen:
            raise RegistryDuplicate(path, f"{where}: session {name!r} is listed more than once")
        seen.add(name)
        inst = item.get("instance_id")
        if inst is not None and (not isinstance(inst, str) or not 0 < len(inst) <= MAX_INSTANCE_ID_LEN
                                 or not inst.isprintable() or inst.strip() != inst):
            raise RegistryShapeError(path, f"{where}.instance_id must be null or a non-empty printable "
                                     f"string of at most {MAX_INSTANCE_ID_LEN} characters")
        rows.append(RegistryRow(name, inst))
    return Registry(tuple(rows), None if path is None else str(path))


def load_registry(path: str | os.PathLike[str]) -> Registry:
    """Read and validate a registry file; every failure is a RegistryError subclass naming the file."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not hang us
    except FileNotFoundError:
        raise RegistryUnreadable(p, "no such file") from None
    except OSError as e:
        raise RegistryUnreadable(p, f"cannot open: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RegistryUnreadable(p, "not a regular file")
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_REGISTRY_BYTES and (chunk := os.read(fd, MAX_REGISTRY_BYTES + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        raise RegistryUnreadable(p, f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_REGISTRY_BYTES:
        raise RegistryTooLarge(p, f"larger than {MAX_REGISTRY_BYTES} bytes")
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise RegistryNotJSON(p, f"not valid JSON: {e}") from None
    return parse_registry(obj, p)


# --------------------------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class ReconcileDecision:
    """One session's decision: the action, the reason (one of REASONS) and a detail for people, with what was
    observed of it and its registry row (None for either it lacks)."""

    name: str
    action: ReconcileAction
    reason: str
    detail: str = ""
    observed: Observed | None = None
    row: RegistryRow | None = None
    cgroup: str | None = None
    """For the stray_cgroup decisions: the cgroup they are about (not the record's)."""

    def to_dict(self) -> dict[str, Any]:
        obs = self.observed
        return {"name": self.name, "action": str(self.action), "reason": self.reason, "detail": self.detail,
                "pid": obs.pid if obs else None, "instance_id": obs.instance_id if obs else None,
                "registered": self.row is not None,
                "containment": obs.containment if obs else None, "cgroup": self.cgroup}


def reconcile(registry: Registry, observed: Iterable[Observed], *, now: float,
              husk_max_age: float | None = None, owner: str | None = None) -> list[ReconcileDecision]:
    """Decide, per name (sorted), following the table in the module docstring, for ``owner`` (default:
    shellper.core.owner.default_owner()). Pure, but for reading the default owner.

    ValueError if ``husk_max_age`` is negative or NaN (None: husks never expire)."""
    if husk_max_age is not None and (isinstance(husk_max_age, bool) or not isinstance(husk_max_age, int | float)
                                     or math.isnan(husk_max_age) or husk_max_age < 0):
        raise BadArgument(f"husk_max_age must be None or a number of seconds >= 0, not {husk_max_age!r}")
    by_name: dict[str, Observed] = {}
    for obs in observed:
        if obs.name in by_name:
            raise BadArgument(f"session {obs.name!r} observed twice")
        by_name[obs.name] = obs
    me = default_owner() if owner is None else owner
    decisions: list[ReconcileDecision] = []
    for name in sorted(set(by_name) | {row.name for row in registry.rows}):
        seen, row = by_name.get(name), registry.get(name)
        decided = _decide(name, row, seen, now, husk_max_age, me)
        if seen is not None and any(found.shellper_alive for found in seen.stray_cgroups):
            # A shellper of this name lives in a cgroup no record names: a respawn would run a second one.
            decided = [d for d in decided if d.action is not ReconcileAction.RESPAWN]
        decisions.extend(_strays(name, row, seen, me))
        decisions.extend(decided)
    return decisions


def _strays(name: str, row: RegistryRow | None, obs: Observed | None, owner: str) -> list[ReconcileDecision]:
    out: list[ReconcileDecision] = []
    for found in obs.stray_cgroups if obs is not None else ():
        if found.leaf.owner_key != owner_key(owner):
            action, reason, detail = ReconcileAction.LEAVE, "other_owner", f"cgroup {found.path} is another owner's"
        elif found.unproven and found.bare:
            action, reason, detail = (ReconcileAction.CLEAN, "stray_cgroup_bare", f"{found.unproven}, but holds "
                                      "nothing (a start cut short before its proof): removed, nobody signalled")
        elif found.unproven:
            action, reason, detail = (ReconcileAction.LEAVE, "stray_cgroup_unproven", f"{found.unproven}: named like a "
                                      "session cgroup, but not verifiably one; left alone")
        elif found.shellper_alive:
            action, reason, detail = (ReconcileAction.LEAVE, "stray_cgroup_live",
                                      f"a process is in {found.path}/shellper "
                                      "(a shellper whose files are gone, or a stranger that moved in) but no record "
                                      "names it: left alone"
                                      + ("; registered, but not respawned while it lives" if row else ""))
        else:
            action, reason, detail = (ReconcileAction.CLEAN, "stray_cgroup", f"no record names {found.path}"
                                      + (" (processes inside)" if found.populated else ""))
        out.append(ReconcileDecision(name, action, reason, detail, obs, row, found.path))
    return out


def name_mismatch(obs: Observed) -> str | None:
    """Why the files observed under ``obs.name`` are not that session's own, or None if they are
    (:func:`shellper.host.ownfiles.mismatch`, which ``shellper stop`` judges its files with too).

    A hard link of a live session's lock and socket under another name, with its record copied, would
    otherwise verify as a session of that name: its lock is held by the recorded pid and its socket
    answers as the recorded instance. A shellper creates each of its files with one link."""
    return mismatch(obs.name, obs.record, record_socket_ok=obs.record_socket_ok,
                    welcome_name=obs.welcome_name if obs.probe == "answered" else None,
                    hard_linked=obs.hard_linked, where=obs.dir)


def _decide(name: str, row: RegistryRow | None, obs: Observed | None, now: float,
            husk_max_age: float | None, owner: str) -> list[ReconcileDecision]:
    def one(action: ReconcileAction, reason: str, detail: str) -> ReconcileDecision:
        return ReconcileDecision(name, action, reason, detail, obs, row)

    def leave(reason: str, detail: str) -> list[ReconcileDecision]:
        return [one(ReconcileAction.LEAVE, reason, detail)]

    def clean(reason: str, detail: str) -> list[ReconcileDecision]:
        out = [one(ReconcileAction.CLEAN, reason, detail)]
        if row is not None:
            out.append(one(ReconcileAction.RESPAWN, reason, "registered; relaunch after the stale files are removed"))
        return out

    if obs is None or not obs.files:
        if row is None:
            return []
        return [one(ReconcileAction.RESPAWN, "not_running", "registered, but none of its files exist")]
    rec = obs.record
    if obs.locked is None:
        return leave("lock_unknown", f"cannot tell whether anybody holds the lock: {obs.identity_detail}")
    if obs.record_error is not None and not obs.record_corrupt:
        return leave("record_unreadable", obs.record_error)
    if rec is None:
        reason = "record_unreadable" if obs.record_error else "no_record"
        if obs.locked:
            return leave(reason, f"a live process holds the lock but the record says nothing usable "
                         f"({obs.record_error or 'no record'})")
        if obs.probe == "answered":
            return leave("unowned_socket_answers", "nobody holds the lock, yet the socket answers")
        return clean("corrupt_record" if obs.record_error else "stale_files",
                     obs.record_error or "no record and no lock holder: leftover files")
    if rec.owner != owner:
        return leave("other_owner", f"the session belongs to {rec.owner!r}" if rec.owner else
                     "the record names no owner (written by an older shellper)")
    if obs.boot == "previous":
        if obs.locked:
            return leave("previous_boot_locked", "record from another boot, yet the lock is held")
        return clean("previous_boot", obs.identity_detail or "record from another boot")
    if obs.boot != "current":
        return leave("boot_unknown", "cannot read this boot's id, so the record cannot be verified")

    ours = obs.identity == "verified" and obs.locked and obs.lock_owner_ok
    if not ours:
        if obs.locked:
            if obs.identity == "mismatch":
                return leave("pid_reused", f"{obs.identity_detail or 'start ticks differ'}; the lock is held "
                             "by somebody: nothing is touched")
            if obs.identity == "unreadable":
                return leave("identity_unreadable", f"{obs.identity_detail or '/proc unreadable'}; the lock "
                             "is held by somebody: nothing is touched")
            return leave("lock_held_by_other", f"the lock is held by pid(s) {list(obs.lock_owners or ())}, "
                         f"not by the recorded pid {rec.shellper_pid} ({obs.identity_detail})")
        if obs.identity == "verified" and obs.serving:
            return leave("lock_missing", f"{obs.identity_detail}; it serves this session but its lock file is "
                         f"gone: `shellper stop {name}` ends it; nothing removed")
        if obs.probe == "answered":
            return leave("unowned_socket_answers", "nobody holds the lock, yet the socket answers")
        reason = {"gone": "dead", "mismatch": "pid_reused", "unreadable": "identity_unreadable",
                  "verified": "not_lock_owner"}.get(obs.identity, "stale_files")
        return clean(reason, f"{obs.identity_detail}; nobody holds the lock: files are stale "
                     "(no process is signalled)")

    mismatch = name_mismatch(obs)
    if mismatch is not None:
        return leave("name_mismatch", f"{mismatch}: the files may be another session's; nothing is touched")
    if obs.probe == "answered":
        if obs.welcome_instance_id != rec.instance_id:
            return leave("instance_mismatch", f"socket answers as instance {obs.welcome_instance_id}, "
                         f"the record says {rec.instance_id}")
        if obs.peer_pid != rec.shellper_pid or (obs.welcome_pid not in (None, rec.shellper_pid)):
            return leave("peer_mismatch", f"socket served by pid {obs.peer_pid}, the record says "
                         f"{rec.shellper_pid}")
        if obs.state == SessionState.STOPPING:
            return leave("stopping", "the shellper is already stopping")
    elif row is not None:
        return leave("unreachable", f"verified and holding its lock, but its socket does not answer "
                     f"({obs.probe}: {obs.probe_detail}); not adopted, not killed")
    if row is None:
        what = "husk" if obs.is_husk else (obs.state or "session")
        silent = "" if obs.probe == "answered" else f" (socket {obs.probe})"
        return [one(ReconcileAction.TERMINATE, "unregistered", f"verified {what}{silent} with no registry row")]
    if row.instance_id is not None and row.instance_id != rec.instance_id:
        detail = f"registry wants instance {row.instance_id}, running is {rec.instance_id}"
        return [one(ReconcileAction.TERMINATE, "superseded", detail),
                one(ReconcileAction.RESPAWN, "superseded", detail)]
    if obs.is_husk:
        since = obs.husk_since()
        age = None if since is None else now - since
        if husk_max_age is not None and age is not None and age > husk_max_age:
            return [one(ReconcileAction.TERMINATE, "husk_expired",
                        f"child exited {age:.0f} s ago (max {husk_max_age:g} s)")]
        return [one(ReconcileAction.ADOPT, "husk", f"registered; its child has {obs.state}")]
    return [one(ReconcileAction.ADOPT, "running", f"registered, verified, answers ({obs.state})")]
