"""Look at a runtime directory and say, per session name, what is really there. Never signals.

For each name: the record (or why it cannot be used), whether the recorded shellper is the process
now at that pid (boot id, then kernel start ticks), whether the session lock is held and by which
pid (``/proc/locks``), whether the socket answers a handshake (as a *viewer* asking for no replay, so
an attached tower is not displaced) and with which instance id and peer pid, the state, and whether
the recorded child still lives. A record from another boot is recognised by its boot id alone: no
probe, no /proc lookup of a pid that means nothing in this boot.

The result is plain data (:class:`Observed`) for :func:`tower_client.reconcile.reconcile`, which
makes every decision; nothing here decides.
"""

from __future__ import annotations

import asyncio
import math
import os
import stat
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from shellper.core.errors import BadArgument, InsideEventLoop
from shellper.core.states import SessionState
from shellper.host.cgroup import (
    LeafName,
    OrphanCgroup,
    default_parent,
    find_session_cgroups,
)
from shellper.host.identity import IdentityUnreadable, ProcessIdentity, boot_id, read_stat
from shellper.host.ownfiles import hard_linked, is_this_socket
from shellper.host.paths import PathError, SessionPaths, check_dir, record_temp_files, session_names
from shellper.host.record import LockError, RecordError, SessionLock, SessionRecord, read_record
from shellper.host.shellpers import ProcTables, lock_owners, serves
from shellper.protocol import wire
from tower_client.client import (
    ClientError,
    ConnectionRefused,
    RemoteError,
    SessionNotFound,
    Timeout,
)
from tower_client.probe import handshake

__all__ = [
    "PROBE_CONCURRENCY",
    "PROBE_TIMEOUT",
    "Observed",
    "check_concurrency",
    "check_probe_timeout",
    "discover",
    "discover_async",
    "observe",
    "observe_async",
]

PROBE_TIMEOUT = 2.0
"""Seconds a socket gets to connect and to send WELCOME + REPLAY."""
PROBE_CONCURRENCY = 64
"""Probes run at once: a directory of unresponsive sockets costs ~PROBE_TIMEOUT per 64 sessions. (16 made a
look at 200 answering sessions ~12 % slower: bench/NOTES.md, issue 30.)"""
PROBE_CLIENT_NAME = "tower-client-discover"

Boot = Literal["current", "previous", "unknown"]
IdentityState = Literal["verified", "gone", "mismatch", "unreadable", "unchecked"]
ProbeState = Literal["answered", "absent", "refused", "timeout", "rejected", "error", "skipped"]
ChildState = Literal["alive", "gone", "mismatch", "unreadable", "none", "unchecked"]


@dataclass(frozen=True)
class Observed:
    """Facts about one session name in one runtime directory, as seen at ``observed_at``.

    * ``files``: which of NAME.sock/.json/.lock/.log exist (lstat; any file type); with none of them,
      "tmp" if a record write cut short left ``.NAME.json.<pid>.<hex>.tmp`` (a regular file) behind, so
      a session with only that left is seen (cleaning removes such files in any case).
    * ``record`` / ``record_error``: the parsed record, or why not; ``record_corrupt`` is True when its
      *content* is bad (safe to clean if nobody owns it), False when it could not be read at all.
    * ``boot``: the record's boot id vs this boot's. ``identity``: the recorded pid now carries the
      recorded start ticks (verified), no longer exists or is a zombie (gone), carries other ticks
      (mismatch: pid reused), /proc unreadable (unreadable: unknown, never "gone").
    * ``locked``: the lock is held (None: could not tell). ``lock_owners``: pids holding it per
      /proc/locks (None: not determinable).
    * ``probe``: what the socket did; on "answered", ``welcome_instance_id``, ``welcome_pid`` (what
      WELCOME claims) and ``peer_pid`` (SO_PEERCRED: who really serves the socket) say who.
    * ``state``: WELCOME's state if answered, else the record's. ``child``: the recorded child's identity.
    * Whether the files are this name's own: ``welcome_name`` (the session WELCOME names), ``record_socket_ok``
      (the record's ``socket`` is this name's socket path; None without a record) and ``hard_linked`` (which
      of sock/json/lock have more than one link: another name may share the inode).
    """

    name: str
    dir: str = ""
    files: frozenset[str] = frozenset()
    record: SessionRecord | None = None
    record_error: str | None = None
    record_corrupt: bool = False
    boot: Boot = "unknown"
    identity: IdentityState = "unchecked"
    identity_detail: str = ""
    locked: bool | None = False
    lock_owners: tuple[int, ...] | None = None
    probe: ProbeState = "skipped"
    probe_detail: str = ""
    welcome_instance_id: str | None = None
    welcome_pid: int | None = None
    peer_pid: int | None = None
    state: str | None = None
    child: ChildState = "unchecked"
    child_pid: int | None = None
    welcome_name: str | None = None
    record_socket_ok: bool | None = None
    hard_linked: frozenset[str] = frozenset()
    observed_at: float = field(default_factory=time.time)
    serving: bool = False
    """The verified shellper holds its listening socket or sits in its cgroup: it lives and is this
    session's, whatever its lock file says."""
    stray_cgroups: tuple[OrphanCgroup, ...] = ()
    """Session cgroups of this name under the cgroup parent that its record does not name."""

    @property
    def containment(self) -> str | None:
        return self.record.containment if self.record is not None else None

    @property
    def pid(self) -> int | None:
        return self.record.shellper_pid if self.record is not None else None

    @property
    def instance_id(self) -> str | None:
        return self.record.instance_id if self.record is not None else None

    @property
    def lock_owner_ok(self) -> bool:
        """The lock holder is the recorded pid, or /proc/locks cannot tell us who holds it."""
        if self.lock_owners is None or self.record is None:
            return True
        visible = [p for p in self.lock_owners if p > 0]
        return not visible or self.record.shellper_pid in visible

    @property
    def is_husk(self) -> bool:
        """The shellper lives but its child has exited for good (exited / fatal)."""
        return self.state in (SessionState.EXITED, SessionState.FATAL)

    def husk_since(self) -> float | None:
        """Wall-clock time the child last exited (from the record), else when the session was created."""
        if self.record is None:
            return None
        return self.record.last_exit_at if self.record.last_exit_at is not None else self.record.created_at

    def to_dict(self) -> dict[str, Any]:
        rec = self.record
        return {
            "name": self.name, "dir": self.dir, "files": sorted(self.files),
            "record": None if rec is None else {
                "pid": rec.shellper_pid, "start_time": rec.shellper_start_time, "boot_id": rec.boot_id,
                "instance_id": rec.instance_id, "state": rec.state, "child_pid": rec.child_pid,
                "command": rec.command, "cwd": rec.cwd, "created_at": rec.created_at,
                "last_exit_at": rec.last_exit_at,
            },
            "record_error": self.record_error, "record_corrupt": self.record_corrupt, "boot": self.boot,
            "identity": self.identity, "identity_detail": self.identity_detail, "locked": self.locked,
            "lock_owners": None if self.lock_owners is None else list(self.lock_owners),
            "probe": self.probe, "probe_detail": self.probe_detail,
            "welcome_instance_id": self.welcome_instance_id, "peer_pid": self.peer_pid,
            "state": self.state, "child": self.child, "child_pid": self.child_pid,
            "observed_at": self.observed_at, "serving": self.serving,
            "containment": self.containment, "owner": None if rec is None else rec.owner,
            "cgroup": None if rec is None else rec.cgroup,
            "stray_cgroups": [c.path for c in self.stray_cgroups],
            "welcome_name": self.welcome_name, "record_socket_ok": self.record_socket_ok,
            "hard_linked": sorted(self.hard_linked),
        }


# --------------------------------------------------------------------------------------------- pieces


def check_probe_timeout(probe_timeout: float) -> None:
    """ValueError unless ``probe_timeout`` is a finite number of seconds > 0."""
    if (isinstance(probe_timeout, bool) or not isinstance(probe_timeout, int | float)
            or not math.isfinite(probe_timeout) or probe_timeout <= 0):
        raise BadArgument(f"probe_timeout must be a finite number of seconds > 0, not {probe_timeout!r}")


def check_concurrency(concurrency: int) -> None:
    """ValueError unless ``concurrency`` is an int >= 1 (0 would wait forever for a free slot)."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise BadArgument("concurrency must be >= 1")


def _is_socket(path: str | Path) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _files(paths: SessionPaths) -> frozenset[str]:
    present = set()
    for kind, path in (("sock", paths.socket), ("json", paths.record), ("lock", paths.lock), ("log", paths.log)):
        try:
            os.lstat(path)
            present.add(kind)
        except OSError:
            continue
    if not present and record_temp_files(paths):  # a scan of the directory: not for every name of a big one
        present.add("tmp")
    return frozenset(present)


def _identity(ident: ProcessIdentity) -> tuple[IdentityState, str]:
    try:
        st = read_stat(ident.pid)
    except IdentityUnreadable as e:
        return "unreadable", str(e)
    if st is None:
        return "gone", f"pid {ident.pid} does not exist"
    if st.state == "Z":
        return "gone", f"pid {ident.pid} is a zombie"
    if st.start_time != ident.start_time:
        return "mismatch", (f"pid {ident.pid} started at tick {st.start_time}, the record says "
                            f"{ident.start_time}: another process")
    return "verified", f"pid {ident.pid} started at tick {st.start_time}"


async def _probe(paths: SessionPaths, timeout: float) -> tuple[dict[str, Any], int | None]:
    """Facts from a handshake, and the child pid WELCOME reported."""
    try:
        welcome, peer = await handshake(str(paths.socket), wire.Role.VIEWER, PROBE_CLIENT_NAME, timeout,
                                        replay_bytes=0)
        facts = {"probe": "answered", "welcome_instance_id": welcome.instance_id, "welcome_name": welcome.name,
                 "welcome_pid": welcome.shellper_pid, "peer_pid": peer, "state": welcome.state,
                 "probe_detail": f"WELCOME from pid {welcome.shellper_pid} ({welcome.state})"}
        return facts, welcome.child_pid
    except SessionNotFound as e:
        return {"probe": "absent", "probe_detail": e.message}, None
    except ConnectionRefused as e:
        return {"probe": "refused", "probe_detail": e.message}, None
    except Timeout as e:
        return {"probe": "timeout", "probe_detail": e.message}, None
    except RemoteError as e:
        return {"probe": "rejected", "probe_detail": e.message}, None
    except ClientError as e:
        return {"probe": "error", "probe_detail": f"{type(e).__name__}: {e.message}"}, None


_CHILD_STATE: dict[IdentityState, ChildState] = {
    "verified": "alive", "gone": "gone", "mismatch": "mismatch", "unreadable": "unreadable",
    "unchecked": "unchecked",
}


def _child(record: SessionRecord, welcome_child: int | None, answered: bool) -> tuple[ChildState, int | None]:
    if answered and welcome_child is None:
        return "none", None
    pid = welcome_child if answered else record.child_pid
    if pid is None:
        return "none", None
    if pid == record.child_pid and record.child_start_time is not None:
        state, _ = _identity(ProcessIdentity(record.boot_id, pid, record.child_start_time))
        return _CHILD_STATE[state], pid
    try:  # a child newer than the record: all we can say is that its pid is a live child of the shellper
        st = read_stat(pid)
    except IdentityUnreadable:
        return "unreadable", pid
    alive = st is not None and st.state != "Z" and st.ppid == record.shellper_pid
    return ("alive" if alive else "gone"), pid


def _leaf_name(path: str) -> str | None:
    leaf = LeafName.parse(os.path.basename(path))
    return None if leaf is None else leaf.name


def _with_strays(observed: list[Observed], directory: str, cgroup_parent: str | None) -> list[Observed]:
    """Attach to each name the session cgroups under ``cgroup_parent`` its record does not name; a name
    known only by such a cgroup gets an observation of its own (no files)."""
    parent = cgroup_parent or default_parent()
    if parent is None:
        return observed
    by_name: dict[str, list[OrphanCgroup]] = {}
    # A cgroup its own session's record names is no stray (filtered out below): not read at all.
    own = {o.record.cgroup for o in observed if o.record is not None and o.record.cgroup
           and _leaf_name(o.record.cgroup) == o.name}
    for found in find_session_cgroups(parent, directory, skip=own):
        by_name.setdefault(found.leaf.name, []).append(found)
    out: list[Observed] = []
    for obs in observed:
        named = obs.record.cgroup if obs.record is not None else None
        strays = tuple(c for c in by_name.pop(obs.name, []) if c.path != named)
        out.append(replace(obs, stray_cgroups=strays) if strays else obs)
    for name, left in by_name.items():
        out.append(Observed(name=name, dir=directory, stray_cgroups=tuple(left)))
    return sorted(out, key=lambda o: o.name)


# --------------------------------------------------------------------------------------------- observe


async def observe_async(directory: str | os.PathLike[str], name: str, *,
                        probe_timeout: float = PROBE_TIMEOUT) -> Observed:
    """Everything about one name (raises BadName / PathTooLong for a name that cannot be a session, and
    UnsafeDirError, as :func:`discover` does, for a directory others could plant records in).

    ValueError if ``probe_timeout`` is not a finite number > 0."""
    check_probe_timeout(probe_timeout)
    return await _observe(directory, name, probe_timeout, None)


async def _observe(directory: str | os.PathLike[str], name: str, probe_timeout: float,
                   tables: ProcTables | None) -> Observed:
    check_dir(directory)
    paths = SessionPaths.for_name(directory, name)
    facts: dict[str, Any] = {"name": name, "dir": str(paths.dir), "files": _files(paths),
                             "hard_linked": hard_linked(paths)}
    record: SessionRecord | None = None
    try:
        record = read_record(paths.record)
    except FileNotFoundError:
        pass
    except RecordError as e:
        facts["record_error"] = str(e)
        facts["record_corrupt"] = e.errno is None
    if record is not None and record.name != name:
        facts["record_error"] = f"session record {paths.record}: names session {record.name!r}, not {name!r}"
        facts["record_corrupt"] = True
        record = None
    facts["record"] = record
    if record is not None:
        facts["record_socket_ok"] = is_this_socket(record.socket, paths)
    try:
        facts["locked"] = SessionLock.is_locked(paths.lock)
    except LockError as e:
        facts["locked"] = None
        facts["identity_detail"] = str(e)
    if facts["locked"]:
        facts["lock_owners"] = lock_owners(paths.lock) if tables is None else tables.lock_owners(paths.lock)
    current_boot: str | None
    try:
        current_boot = boot_id()
    except IdentityUnreadable:
        current_boot = None
    if record is not None:
        facts["state"] = record.state
        if current_boot is None:
            facts["boot"] = "unknown"
        elif record.boot_id != current_boot:
            facts["boot"] = "previous"
            facts["identity_detail"] = f"recorded under boot {record.boot_id}, this is boot {current_boot}"
            return Observed(**facts)  # nothing recorded can be alive: no probe, no /proc lookups
        else:
            facts["boot"] = "current"
            ident = ProcessIdentity(record.boot_id, record.shellper_pid, record.shellper_start_time)
            facts["identity"], facts["identity_detail"] = _identity(ident)
            if facts["identity"] == "verified":
                facts["serving"] = serves(record.shellper_pid, record, str(paths.dir), tables)
    welcome_child: int | None = None
    if "sock" in facts["files"] and not _is_socket(paths.socket):
        facts["probe"], facts["probe_detail"] = "error", "not a socket (a symlink is never followed)"
    elif "sock" in facts["files"]:
        probed, welcome_child = await _probe(paths, probe_timeout)
        facts.update(probed)
    else:
        facts["probe"], facts["probe_detail"] = "absent", "no socket file"
    if record is not None and facts["boot"] == "current":
        facts["child"], facts["child_pid"] = _child(record, welcome_child, facts["probe"] == "answered")
    return Observed(**facts)


async def discover_async(directory: str | os.PathLike[str], *, probe_timeout: float = PROBE_TIMEOUT,
                         concurrency: int = PROBE_CONCURRENCY, cgroup_parent: str | None = None) -> list[Observed]:
    """Observe every session name in ``directory`` (sorted), probing at most ``concurrency`` at once, and
    the session cgroups of the directory under ``cgroup_parent`` (default: shellper.host.cgroup.default_parent).

    ValueError if ``concurrency`` < 1 or ``probe_timeout`` is not a finite number > 0."""
    check_concurrency(concurrency)
    check_probe_timeout(probe_timeout)
    d = check_dir(directory)
    if d is None:
        return []
    gate = asyncio.Semaphore(concurrency)
    tables = ProcTables()  # /proc's tables of every session, read once for the whole directory

    async def one(name: str) -> Observed:
        async with gate:
            return await _observe(d, name, probe_timeout, tables)

    names = [n for n in session_names(d) if _is_session_name(d, n)]
    return _with_strays(list(await asyncio.gather(*(one(n) for n in names))), str(d), cgroup_parent)


def _is_session_name(d: str, name: str) -> bool:
    """A name whose socket path would not fit in sun_path cannot be a session: skip it."""
    try:
        SessionPaths.for_name(d, name)
    except PathError:
        return False
    return True


def not_in_a_loop(call: str) -> None:
    """A blocking call runs an event loop of its own, which cannot be done from inside a running one: say so
    before any coroutine exists (asyncio.run would raise only after, leaving it never awaited)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise InsideEventLoop(f"{call}() blocks and cannot run inside a running event loop: "
                          f"use `await {call}_async(...)` there")


def observe(directory: str | os.PathLike[str], name: str, *,
            probe_timeout: float = PROBE_TIMEOUT) -> Observed:
    """Blocking :func:`observe_async` (runs its own event loop: not from inside one)."""
    check_probe_timeout(probe_timeout)
    not_in_a_loop("observe")
    return asyncio.run(observe_async(directory, name, probe_timeout=probe_timeout))


def discover(directory: str | os.PathLike[str], *, probe_timeout: float = PROBE_TIMEOUT,
             concurrency: int = PROBE_CONCURRENCY, cgroup_parent: str | None = None) -> list[Observed]:
    """Blocking :func:`discover_async` (runs its own event loop: not from inside one)."""
    check_concurrency(concurrency)
    check_probe_timeout(probe_timeout)
    not_in_a_loop("discover")
    return asyncio.run(discover_async(directory, probe_timeout=probe_timeout, concurrency=concurrency,
                                      cgroup_parent=cgroup_parent))
