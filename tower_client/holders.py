"""Who holds a conversation/session id, and may we take it back? "Foreign wins".

A process *holds* an id when its argv carries it after ``--session-id``, ``--resume`` or ``-r``: as the
next argument, as ``--flag=ID`` (``-rID`` for the short flag, as getopt reads it), inside a shell command
string (``sh -c "claude --resume ID"``, ``exec -a``) bounded by whitespace, shell punctuation, a
redirection or a backtick, or as a JSON pair ``"--session-id","ID"`` (a config blob in argv). Always
anchored on the flag and bounded after the id: a bare substring never matches.

Nothing is reclaimable unless the caller names it: ``reclaimable`` is a set of session names of the runtime
directory. A holder is *own* only if

* it is, or is under, the verified shellper of a named session (its record is from this boot, its pid
  carries the recorded start ticks, it holds the session lock), that shellper is the nearest process above
  it holding a session lock (no shellper of another session, of any directory, in between), and, below the
  shellper, it carries that session's marker ``SHELLPER_INSTANCE`` (the shellper gives it to its child's
  tree; a session started inside it gives its own); or
* it was left behind by the *dead* shellper of a named session (its record is from this boot, the recorded
  pid is gone or another process, its lock is free): no session lock holder is above it and it passes
  :func:`survivor_of`.

A shellper whose recorded command carries the id is a holder too (the durable evidence while a
crash-looping child is dead between respawns). Everything else is *foreign* - a person's own CLI, typed
in a session's shell or anywhere else, whatever runs in a session not named, a shellper of another runtime
directory - and is never touched: any foreign holder means "mint a fresh id", even if own holders exist.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from shellper.core.containment import Containment
from shellper.core.defaults import DEFAULT_GRACE
from shellper.core.errors import ShellperError
from shellper.core.owner import default_owner
from shellper.host.cgroup import member_of, verify_cgroup
from shellper.host.cleanup import CONFIRM_TIMEOUT, Termination
from shellper.host.identity import IdentityError, PidFd, ProcessGone, ProcStat, boot_id, cmdline, read_stat
from shellper.host.paths import SessionPaths, check_dir, session_names
from shellper.host.record import LockError, RecordError, SessionLock, SessionRecord, read_record
from shellper.host.shellpers import lock_owners
from shellper.host.survivors import INSTANCE_ENV, Guard, SurvivorReport, guard, reap_survivors
from tower_client.apply import hold_owner_lock, terminate_session
from tower_client.discover import not_in_a_loop

__all__ = [
    "FLAGS",
    "MAX_SESSION_ID_LEN",
    "SHORT_FLAGS",
    "BadSessionId",
    "DeadSession",
    "Holder",
    "OwnShellper",
    "Verdict",
    "argv_carries",
    "dead_sessions",
    "find_holders",
    "mint_or_reclaim",
    "mint_or_reclaim_async",
    "own_shellpers",
    "survivor_of",
]

FLAGS = ("--session-id", "--resume")
SHORT_FLAGS = ("-r",)
"""Short forms: the id is the next argument or attached (``-rID``), never after ``=``."""
MAX_SESSION_ID_LEN = 256
MAX_ANCESTRY = 64
"""Parent links followed from a holder looking for one of our shellpers."""


class BadSessionId(ShellperError, ValueError):
    """A session id that could not be matched safely (empty, whitespace, quotes, too long)."""

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(f"invalid session id {session_id!r}: {reason}")
        self.session_id = session_id
        self.reason = reason


def _check_id(session_id: str) -> None:
    if not session_id:
        raise BadSessionId(session_id, "is empty")
    if len(session_id) > MAX_SESSION_ID_LEN:
        raise BadSessionId(session_id, f"is longer than {MAX_SESSION_ID_LEN} characters")
    if session_id.startswith("-"):
        raise BadSessionId(session_id, "starts with '-'")
    if not session_id.isprintable() or any(c.isspace() or c in "\"'\\" for c in session_id):
        raise BadSessionId(session_id, "contains whitespace, quotes, backslashes or control characters")


# A flag starts a word (after a separator, an opening parenthesis or backtick); the id ends one (before a
# separator, a closing parenthesis or backtick, or a redirection: `claude --resume ID>log`).
_SHELL_BEFORE = r"(?:^|(?<=[\s;&|(`]))"
_SHELL_AFTER = r"(?=$|[\s;&|)<>`])"


def _patterns(session_id: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    long = "|".join(re.escape(f) for f in FLAGS)
    short = "|".join(re.escape(f) for f in SHORT_FLAGS)
    sid = re.escape(session_id)
    shell = re.compile(rf"{_SHELL_BEFORE}(?:(?:{long})(?:=|\s+)|(?:{short})\s*)(['\"]?){sid}\1{_SHELL_AFTER}")
    jsid = re.escape(json.dumps(session_id)[1:-1])
    js = re.compile(rf'"(?:{long}|{short})"\s*,\s*"{jsid}"')
    return shell, js


def argv_carries(argv: Sequence[str], session_id: str) -> str | None:
    """How ``argv`` carries ``session_id`` ("argv", "argv=", "shell", "json"), or None."""
    _check_id(session_id)
    shell, js = _patterns(session_id)
    return _match(argv, session_id, shell, js)


def _match(argv: Sequence[str], session_id: str, shell: re.Pattern[str], js: re.Pattern[str]) -> str | None:
    attached = {f"{flag}={session_id}" for flag in FLAGS} | {f"{flag}{session_id}" for flag in SHORT_FLAGS}
    for i, arg in enumerate(argv):
        if (arg in FLAGS or arg in SHORT_FLAGS) and i + 1 < len(argv) and argv[i + 1] == session_id:
            return "argv"
        if arg in attached:
            return "argv="
    for arg in argv:
        if any(c.isspace() for c in arg) and shell.search(arg):
            return "shell"
        if '"' in arg and js.search(arg):
            return "json"
    return None


# --------------------------------------------------------------------------------------------- sessions


@dataclass(frozen=True)
class OwnShellper:
    """A shellper in the runtime directory verified as ours (this boot, start ticks, lock held)."""

    name: str
    record: SessionRecord
    paths: SessionPaths


def _records(runtime_dir: str | os.PathLike[str]) -> Iterator[tuple[str, SessionPaths, SessionRecord, bool, bool]]:
    """(name, paths, record, alive, locked) for each record of this boot in ``runtime_dir`` that reads and
    checks cleanly; anything unverifiable is not listed (so: foreign, never ended)."""
    d = check_dir(runtime_dir)
    if d is None:
        return
    try:
        this_boot = boot_id()
    except IdentityError:
        return
    for name in session_names(d):
        try:
            paths = SessionPaths.for_name(d, name)
            record = read_record(paths.record)
            if record.name != name or record.boot_id != this_boot:
                continue
            st = read_stat(record.shellper_pid)
            alive = st is not None and st.state != "Z" and st.start_time == record.shellper_start_time
            locked = SessionLock.is_locked(paths.lock)
        except (OSError, RecordError, LockError, IdentityError, ValueError):
            continue
        yield name, paths, record, alive, locked


def own_shellpers(runtime_dir: str | os.PathLike[str]) -> list[OwnShellper]:
    """Verified shellpers of ``runtime_dir``; anything unverifiable is simply not listed (so: foreign)."""
    found: list[OwnShellper] = []
    for name, paths, record, alive, locked in _records(runtime_dir):
        if not (alive and locked):
            continue
        owners = lock_owners(paths.lock)
        visible = [p for p in owners or () if p > 0]
        if visible and record.shellper_pid not in visible:
            continue
        found.append(OwnShellper(name, record, paths))
    return found


@dataclass(frozen=True)
class DeadSession:
    """A session of the runtime directory whose shellper is dead: its record is from this boot, the recorded
    pid is gone, a zombie or another process, and its lock is free. What its tree left may still run."""

    name: str
    record: SessionRecord
    paths: SessionPaths


def dead_sessions(runtime_dir: str | os.PathLike[str]) -> list[DeadSession]:
    """Dead sessions of ``runtime_dir``; a record that cannot be read or checked is not listed."""
    return [DeadSession(name, record, paths) for name, paths, record, alive, locked in _records(runtime_dir)
            if not alive and not locked]


def _marker(pid: int) -> str | None:
    """The ``SHELLPER_INSTANCE`` ``pid`` was started with (the first, as getenv reads it); None if it has
    none or its environment cannot be read."""
    prefix = f"{INSTANCE_ENV}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("ascii", "replace")
    return None


def survivor_of(pid: int, stat: ProcStat, session: DeadSession) -> bool:
    """``pid`` (whose stat is ``stat``) is a process left behind by the dead ``session``: it started after
    the session's shellper and carries the marker that shellper gave its child's tree, or it sits in the
    session's verified cgroup (which a process that cleared its environment cannot leave).

    Membership only: whether a live shellper is above it is the caller's question.
    """
    if stat.start_time < session.record.shellper_start_time:
        return False
    if _marker(pid) == session.record.instance_id:
        return True
    rec = session.record
    if rec.containment == Containment.NONE:
        return False
    group, _ = verify_cgroup(rec.cgroup, rec.cgroup_id, str(session.paths.dir), rec.name, rec.instance_id)
    return group is not None and member_of(pid, group.relative)


# --------------------------------------------------------------------------------------------- holders


@dataclass(frozen=True)
class Holder:
    """One process holding the id. ``via``: "argv" (its own argv) or "record" (a shellper's recorded
    command carries it while no process of that session does).

    ``own`` names the verified shellper of a session named reclaimable that it is, or runs under;
    ``survivor_of`` the dead session named reclaimable that left it behind. Neither: foreign. ``within``
    is the session of the runtime directory it runs in (or, with ``left_behind``, was left by), whatever
    its kind."""

    pid: int
    start_time: int | None
    argv: tuple[str, ...]
    form: str
    via: str
    own: OwnShellper | None
    reason: str
    survivor_of: DeadSession | None = None
    within: str | None = None
    left_behind: bool = False

    @property
    def kind(self) -> str:
        return "own" if self.own is not None or self.survivor_of is not None else "foreign"

    @property
    def session(self) -> str | None:
        """The session reclaiming it would end."""
        if self.own is not None:
            return self.own.name
        return self.survivor_of.name if self.survivor_of is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "kind": self.kind, "via": self.via,
                "form": self.form, "session": self.session,
                "shellper_pid": self.own.record.shellper_pid if self.own else None,
                "within": self.within, "left_behind": self.left_behind,
                "reason": self.reason, "argv": list(self.argv)}


def _proc_pids() -> list[int]:
    return sorted(int(n) for n in os.listdir("/proc") if n.isdigit())


def _locks_by_pid() -> dict[int, set[tuple[int, int]]] | None:
    """Pid -> the (device, inode) pairs it holds a lock on, per /proc/locks; None if that cannot be read."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    out: dict[int, set[tuple[int, int]]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":  # "->" marks a waiter, not a holder
            continue
        try:
            major, minor, ino = parts[5].split(":")
            out.setdefault(int(parts[4]), set()).add((os.makedev(int(major, 16), int(minor, 16)), int(ino)))
        except ValueError:
            continue
    return out


def _holds_session_lock(pid: int, locks: dict[int, set[tuple[int, int]]] | None) -> bool:
    """``pid`` holds a lock on a ``*.lock`` file it has open: a shellper (of any directory). What cannot be
    checked counts as yes: it only ever makes a holder foreign."""
    if locks is None:
        return True
    held = locks.get(pid)
    if not held:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    except OSError:
        return True
    for fd in fds:
        link = f"/proc/{pid}/fd/{fd}"
        try:
            if not os.readlink(link).removesuffix(" (deleted)").endswith(".lock"):
                continue
            st = os.stat(link)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in held:
            return True
    return False


@dataclass(frozen=True)
class _Above:
    """What a holder runs under: the nearest verified shellper of the directory (``depth`` parent links
    up, 0: itself), else the nearest other lock holder (``other``); ``complete``: the walk reached pid 1."""

    shellper: OwnShellper | None = None
    depth: int = 0
    other: int | None = None
    complete: bool = True


def _above(pid: int, verified: dict[int, OwnShellper], locks: dict[int, set[tuple[int, int]]] | None) -> _Above:
    cur = pid
    for depth in range(MAX_ANCESTRY):
        if cur <= 1:
            return _Above()
        if cur in verified:
            return _Above(verified[cur], depth)
        if _holds_session_lock(cur, locks):
            return _Above(other=cur, depth=depth)
        try:
            st = read_stat(cur)
        except IdentityError:
            break
        if st is None:
            break
        cur = st.ppid
    return _Above(complete=False)


def _how(depth: int) -> str:
    return "is" if depth == 0 else ("is the child of" if depth == 1 else "is a descendant of")


def _classify(pid: int, st: ProcStat, argv: Sequence[str], form: str, above: _Above, named: Collection[str],
              dead: Sequence[DeadSession], guard_of: Callable[[DeadSession], Guard]) -> Holder:
    """One process carrying the id, own or foreign: see the module docstring."""
    def foreign(reason: str, within: str | None = None, left_behind: bool = False) -> Holder:
        return Holder(pid, st.start_time, tuple(argv), form, "argv", None, reason, within=within,
                      left_behind=left_behind)

    s = above.shellper
    if s is not None:
        where = f"{_how(above.depth)} verified shellper {s.record.shellper_pid} (session {s.name!r})"
        if s.name not in named:
            return foreign(f"{where}, a session not named reclaimable", s.name)
        if above.depth > 0 and _marker(pid) != s.record.instance_id:
            return foreign(f"{where} but lacks its marker {INSTANCE_ENV} (has another session's, or none)",
                           s.name)
        return Holder(pid, st.start_time, tuple(argv), form, "argv", s, where, within=s.name)
    if above.other is not None:
        what = "is" if above.depth == 0 else "runs under"
        return foreign(f"{what} pid {above.other}, a shellper that is not a verified session of this directory "
                       "(or a lock holder that could not be checked)")
    if not above.complete:
        return foreign("its ancestry could not be read up to pid 1")
    for d in dead:
        if not survivor_of(pid, st, d):
            continue
        left = f"left behind by the dead shellper of session {d.name!r}"
        if d.name not in named:
            return foreign(f"{left}, a session not named reclaimable", d.name, True)
        suspect = guard_of(d).suspect
        if suspect:
            return foreign(f"{left}, whose record is suspect: {suspect}", d.name, True)
        return Holder(pid, st.start_time, tuple(argv), form, "argv", None, left, d, d.name, True)
    return foreign("neither under a verified shellper of this directory nor left behind by one")


def find_holders(session_id: str, runtime_dir: str | os.PathLike[str] | None = None, *,
                 exclude: Iterable[int] = (), reclaimable: Collection[str] = ()) -> list[Holder]:
    """Live processes carrying ``session_id``, classified against ``runtime_dir``'s sessions named in
    ``reclaimable`` (see the module docstring).

    Without ``runtime_dir``, or with nothing named, every holder is foreign. The calling process and
    ``exclude`` are skipped; processes whose /proc entry cannot be read are skipped too (they cannot be
    seen, so not reported).
    """
    _check_id(session_id)
    shell, js = _patterns(session_id)
    skip = {os.getpid(), *exclude}
    named = frozenset(reclaimable)
    live = own_shellpers(runtime_dir) if runtime_dir is not None else []
    dead = dead_sessions(runtime_dir) if runtime_dir is not None else []
    by_pid = {s.record.shellper_pid: s for s in live}
    locks = _locks_by_pid()
    guards: dict[str, Guard] = {}

    def guard_of(d: DeadSession) -> Guard:
        if d.name not in guards:
            guards[d.name] = guard(d.record, runtime_dir)
        return guards[d.name]

    holders: list[Holder] = []
    covered: set[int] = set()
    for pid in _proc_pids():
        if pid in skip:
            continue
        try:
            argv = cmdline(pid)
            st = read_stat(pid)
        except IdentityError:
            continue
        if not argv or st is None or st.state == "Z":
            continue
        form = _match(argv, session_id, shell, js)
        if form is None:
            continue
        above = _above(pid, by_pid, locks)
        if above.shellper is not None:
            covered.add(above.shellper.record.shellper_pid)
        holders.append(_classify(pid, st, argv, form, above, named, dead, guard_of))
    for shellper in live:
        pid = shellper.record.shellper_pid
        if pid in covered or pid in skip:
            continue
        form = _match(shellper.record.command, session_id, shell, js)
        if form is None:
            continue
        reason = f"verified shellper (session {shellper.name!r}) whose command carries it"
        if shellper.name not in named:
            reason += ", a session not named reclaimable"
        holders.append(Holder(pid, shellper.record.shellper_start_time, tuple(shellper.record.command), form,
                              "record", shellper if shellper.name in named else None, reason,
                              within=shellper.name))
    return holders


# --------------------------------------------------------------------------------------------- verdict


@dataclass(frozen=True)
class Verdict:
    """``resume`` (nobody holds it), ``reclaim`` (only sessions named reclaimable held it; their holders are
    confirmed dead: resume now) or ``mint`` (a foreign holder, or reclaiming failed: start a fresh id).

    ``terminated``: live sessions ended; ``reaped``: what dead sessions had left behind, ended."""

    action: str
    session_id: str
    reason: str
    holders: tuple[Holder, ...] = ()
    terminated: tuple[Termination, ...] = ()
    errors: tuple[str, ...] = ()
    reaped: tuple[SurvivorReport, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "session_id": self.session_id, "reason": self.reason,
                "holders": [h.to_dict() for h in self.holders],
                "terminated": [{"name": t.name, "pid": t.pid, "method": t.method} for t in self.terminated],
                "reaped": [{"name": r.name, "termed": list(r.termed), "killed": list(r.killed),
                            "spared": list(r.spared)} for r in self.reaped],
                "errors": list(self.errors)}


def _still_dead(session: DeadSession, runtime_dir: str | os.PathLike[str]) -> bool:
    """The same record (instance) is still there, its shellper still dead: no new session took the name."""
    return any(d.name == session.name and d.record.instance_id == session.record.instance_id
               for d in dead_sessions(runtime_dir))


def mint_or_reclaim(session_id: str, runtime_dir: str | os.PathLike[str], *, grace: float = DEFAULT_GRACE,
                    stop_timeout: float | None = None, confirm_timeout: float = CONFIRM_TIMEOUT,
                    exclude: Iterable[int] = (), protect: Collection[str] = (),
                    reclaimable: Collection[str] = (), owner: str | None = None) -> Verdict:
    """Decide whether ``session_id`` can be resumed, freeing it from sessions named in ``reclaimable``.

    With nothing named (the default) nothing is ever ended: any holder means ``mint``. Holders under a
    named live session are ended through :func:`~tower_client.apply.terminate_session` (identity-checked
    STOP, then pidfd signals: the whole session goes); those a named dead session left behind through
    :func:`~shellper.host.survivors.reap_survivors`. Every holder process pinned beforehand must be dead
    afterwards, and a final re-scan must find no holder at all, else the verdict is ``mint``. Sessions
    in ``protect`` are never ended, even if named. A named session of another owner than ``owner``
    (default: shellper.core.owner.default_owner()) is never ended either, and the ending is done holding the
    owner's lock, as :func:`~tower_client.apply.apply` does (OwnerBusy if another Tower of the owner holds
    it: nothing is ended).

    It blocks (grace periods, /proc scans): from inside a running event loop it raises InsideEventLoop
    before doing anything; ``await mint_or_reclaim_async(...)`` there.
    """
    not_in_a_loop("mint_or_reclaim")
    return _mint_or_reclaim(session_id, runtime_dir, grace, stop_timeout, confirm_timeout, tuple(exclude), protect,
                            reclaimable, owner)


async def mint_or_reclaim_async(session_id: str, runtime_dir: str | os.PathLike[str], *,
                                grace: float = DEFAULT_GRACE, stop_timeout: float | None = None,
                                confirm_timeout: float = CONFIRM_TIMEOUT, exclude: Iterable[int] = (),
                                protect: Collection[str] = (), reclaimable: Collection[str] = (),
                                owner: str | None = None) -> Verdict:
    """:func:`mint_or_reclaim` in a worker thread, for a caller inside an event loop: the loop runs on
    while holders are ended. The same arguments, verdict and errors."""
    return await asyncio.to_thread(_mint_or_reclaim, session_id, runtime_dir, grace, stop_timeout, confirm_timeout,
                                   tuple(exclude), protect, reclaimable, owner)


def _mint_or_reclaim(session_id: str, runtime_dir: str | os.PathLike[str], grace: float, stop_timeout: float | None,
                     confirm_timeout: float, exclude: tuple[int, ...], protect: Collection[str],
                     reclaimable: Collection[str], owner: str | None) -> Verdict:
    reclaimable = frozenset(reclaimable)
    holders = find_holders(session_id, runtime_dir, exclude=exclude, reclaimable=reclaimable)
    if not holders:
        return Verdict("resume", session_id, "no live process holds it")
    foreign = [h for h in holders if h.kind == "foreign"]
    if foreign:
        pids = ", ".join(str(h.pid) for h in foreign)
        return Verdict("mint", session_id, f"held by foreign process(es) {pids}: never touched",
                       tuple(holders))
    kept = sorted({h.session for h in holders if h.session is not None and h.session in protect})
    if kept:
        return Verdict("mint", session_id, f"held by protected session(s) {', '.join(kept)}: never touched",
                       tuple(holders))
    me = default_owner() if owner is None else owner
    others = sorted({f"{rec.name} ({rec.owner or 'no owner'})" for h in holders
                     if (rec := _holder_record(h)) is not None and rec.owner != me})
    if others:
        return Verdict("mint", session_id, f"held by session(s) of another owner, {', '.join(others)}: never "
                       "touched", tuple(holders))
    lock = hold_owner_lock(str(runtime_dir), me)
    try:
        return _reclaim(session_id, runtime_dir, holders, grace, stop_timeout, confirm_timeout, exclude,
                        reclaimable)
    finally:
        lock.release()


def _holder_record(h: Holder) -> SessionRecord | None:
    if h.own is not None:
        return h.own.record
    return h.survivor_of.record if h.survivor_of is not None else None


def _reclaim(session_id: str, runtime_dir: str | os.PathLike[str], holders: list[Holder], grace: float,
             stop_timeout: float | None, confirm_timeout: float, exclude: tuple[int, ...],
             reclaimable: frozenset[str]) -> Verdict:
    pinned: list[PidFd] = []
    for h in holders:
        try:
            fd = PidFd.open(h.pid)
        except ProcessGone:
            continue
        st = read_stat(h.pid)
        if st is None or st.start_time != h.start_time or not fd.is_unreaped():
            fd.close()  # already replaced: nothing of ours to confirm
            continue
        pinned.append(fd)
    terminated: list[Termination] = []
    reaped: list[SurvivorReport] = []
    errors: list[str] = []
    try:
        shellpers = {h.own.record.shellper_pid: h.own for h in holders if h.own is not None}
        for s in shellpers.values():
            try:
                terminated.append(terminate_session(s.record, s.paths, grace=grace, stop_timeout=stop_timeout,
                                                    confirm_timeout=confirm_timeout))
            except ProcessGone:
                continue
            except Exception as exc:
                errors.append(f"{s.name}: {type(exc).__name__}: {exc}")
        dead = {h.survivor_of.name: h.survivor_of for h in holders if h.survivor_of is not None}
        for d in dead.values():
            if not _still_dead(d, runtime_dir):
                errors.append(f"{d.name}: no longer the dead session it was (a new shellper, or its record changed)")
                continue
            try:
                report = reap_survivors(d.record, directory=runtime_dir, grace=grace,
                                        confirm_timeout=confirm_timeout)
            except Exception as exc:
                errors.append(f"{d.name}: {type(exc).__name__}: {exc}")
                continue
            reaped.append(report)
            if report.suspect:
                errors.append(f"{d.name}: nothing ended, the record is suspect: {report.suspect}")
        alive = [fd.pid for fd in pinned if not fd.wait_dead(confirm_timeout)]
    finally:
        for fd in pinned:
            fd.close()
    if alive:
        errors.append(f"holder(s) {alive} still alive")
    if errors:
        return Verdict("mint", session_id, "could not free it: " + "; ".join(errors), tuple(holders),
                       tuple(terminated), tuple(errors), tuple(reaped))
    left = find_holders(session_id, runtime_dir, exclude=exclude, reclaimable=reclaimable)
    if left:
        pids = ", ".join(f"{h.pid} ({h.kind})" for h in left)
        return Verdict("mint", session_id, f"still held after reclaiming, by {pids}", tuple(holders),
                       tuple(terminated), reaped=tuple(reaped))
    names = ", ".join([repr(s.name) for s in shellpers.values()]
                      + [f"{d.name!r} (dead, what it left)" for d in dead.values()])
    return Verdict("reclaim", session_id, f"held only by session(s) named reclaimable, {names}: ended, "
                   "confirmed dead", tuple(holders), tuple(terminated), reaped=tuple(reaped))
