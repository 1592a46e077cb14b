"""Who holds a conversation/session id, and may we take it back? "Foreign wins" (codev #1224).

A process *holds* an id when its argv carries it after ``--session-id``, ``--resume`` or ``-r``: as the
next argument, as ``--flag=ID`` (``-rID`` for the short flag, as getopt reads it), inside a shell command
string (``sh -c "claude --resume ID"``, ``exec -a``) bounded by whitespace, shell punctuation, a
redirection or a backtick, or as a JSON pair ``"--session-id","ID"`` (a config blob in argv). Always
anchored on the flag and bounded after the id: a bare substring never matches.

A holder is *own* only if it is one of our shellpers, or a descendant of one, where "our shellper"
means: its record in the given runtime directory is from this boot, its pid carries the recorded
start ticks and it holds the session lock. A shellper whose recorded command carries the id is a
holder too (the durable evidence while a crash-looping child is dead between respawns). Everything
else is *foreign* - a person's own CLI, a shellper of another runtime directory - and is never
touched: any foreign holder means "mint a fresh id", even if own holders exist as well.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from shellper.config import DEFAULT_GRACE
from shellper.identity import IdentityError, PidFd, ProcessGone, boot_id, cmdline, read_stat
from shellper.paths import SessionPaths
from shellper.record import LockError, RecordError, SessionLock, SessionRecord, read_record
from shellper.sessions import session_names
from tower_client.apply import CONFIRM_TIMEOUT, Termination, terminate_session
from tower_client.discover import check_dir, lock_owners

__all__ = [
    "FLAGS",
    "MAX_SESSION_ID_LEN",
    "SHORT_FLAGS",
    "BadSessionId",
    "Holder",
    "OwnShellper",
    "Verdict",
    "argv_carries",
    "find_holders",
    "mint_or_reclaim",
    "own_shellpers",
]

FLAGS = ("--session-id", "--resume")
SHORT_FLAGS = ("-r",)
"""Short forms: the id is the next argument or attached (``-rID``), never after ``=``."""
MAX_SESSION_ID_LEN = 256
MAX_ANCESTRY = 64
"""Parent links followed from a holder looking for one of our shellpers."""


class BadSessionId(ValueError):
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


# --------------------------------------------------------------------------------------------- our shellpers


@dataclass(frozen=True)
class OwnShellper:
    """A shellper in the runtime directory verified as ours (this boot, start ticks, lock held)."""

    name: str
    record: SessionRecord
    paths: SessionPaths


def own_shellpers(runtime_dir: str | os.PathLike[str]) -> list[OwnShellper]:
    """Verified shellpers of ``runtime_dir``; anything unverifiable is simply not listed (so: foreign)."""
    d = check_dir(runtime_dir)
    if d is None:
        return []
    try:
        this_boot = boot_id()
    except IdentityError:
        return []
    found: list[OwnShellper] = []
    for name in session_names(d):
        try:
            paths = SessionPaths.for_name(d, name)
            record = read_record(paths.record)
            if record.name != name or record.boot_id != this_boot:
                continue
            st = read_stat(record.shellper_pid)
            if st is None or st.state == "Z" or st.start_time != record.shellper_start_time:
                continue
            if not SessionLock.is_locked(paths.lock):
                continue
        except (OSError, RecordError, LockError, IdentityError, ValueError):
            continue
        owners = lock_owners(paths.lock)
        visible = [p for p in owners or () if p > 0]
        if visible and record.shellper_pid not in visible:
            continue
        found.append(OwnShellper(name, record, paths))
    return found


# --------------------------------------------------------------------------------------------- holders


@dataclass(frozen=True)
class Holder:
    """One process holding the id. ``via``: "argv" (its own argv) or "record" (a shellper's recorded
    command carries it while no process of that session does). ``own`` names our shellper if so."""

    pid: int
    start_time: int | None
    argv: tuple[str, ...]
    form: str
    via: str
    own: OwnShellper | None
    reason: str

    @property
    def kind(self) -> str:
        return "own" if self.own is not None else "foreign"

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "kind": self.kind, "via": self.via,
                "form": self.form, "session": self.own.name if self.own else None,
                "shellper_pid": self.own.record.shellper_pid if self.own else None,
                "reason": self.reason, "argv": list(self.argv)}


def _proc_pids() -> list[int]:
    return sorted(int(n) for n in os.listdir("/proc") if n.isdigit())


def _owner_of(pid: int, shellpers: dict[int, OwnShellper]) -> tuple[OwnShellper | None, str]:
    """The verified shellper ``pid`` is, or descends from (by parent links), and how."""
    cur: int | None = pid
    for depth in range(MAX_ANCESTRY):
        if cur is None or cur <= 1:
            break
        if cur in shellpers:
            how = "is the shellper" if depth == 0 else ("its child" if depth == 1 else "its descendant")
            return shellpers[cur], how
        try:
            st = read_stat(cur)
        except IdentityError:
            break
        cur = None if st is None else st.ppid
    return None, ""


def find_holders(session_id: str, runtime_dir: str | os.PathLike[str] | None = None, *,
                 exclude: Iterable[int] = ()) -> list[Holder]:
    """Live processes carrying ``session_id``, classified against ``runtime_dir``'s verified shellpers.

    Without ``runtime_dir`` every holder is foreign. The calling process and ``exclude`` are skipped;
    processes whose /proc entry cannot be read are skipped too (they cannot be seen, so not reported).
    """
    _check_id(session_id)
    shell, js = _patterns(session_id)
    skip = {os.getpid(), *exclude}
    ours = own_shellpers(runtime_dir) if runtime_dir is not None else []
    by_pid = {s.record.shellper_pid: s for s in ours}
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
        owner, how = _owner_of(pid, by_pid)
        if owner is not None:
            covered.add(owner.record.shellper_pid)
            reason = f"{how} of verified shellper {owner.record.shellper_pid} (session {owner.name!r})"
        else:
            reason = "not one of our verified shellpers nor a descendant of one"
        holders.append(Holder(pid, st.start_time, tuple(argv), form, "argv", owner, reason))
    for shellper in ours:
        pid = shellper.record.shellper_pid
        if pid in covered or pid in skip:
            continue
        form = _match(shellper.record.command, session_id, shell, js)
        if form is not None:
            holders.append(Holder(pid, shellper.record.shellper_start_time, tuple(shellper.record.command),
                                  form, "record", shellper,
                                  f"verified shellper (session {shellper.name!r}) whose command carries it"))
    return holders


# --------------------------------------------------------------------------------------------- verdict


@dataclass(frozen=True)
class Verdict:
    """``resume`` (nobody holds it), ``reclaim`` (only our shellpers held it; they are confirmed dead:
    resume now) or ``mint`` (a foreign holder, or reclaiming failed: start a fresh id)."""

    action: str
    session_id: str
    reason: str
    holders: tuple[Holder, ...] = ()
    terminated: tuple[Termination, ...] = ()
    errors: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "session_id": self.session_id, "reason": self.reason,
                "holders": [h.to_dict() for h in self.holders],
                "terminated": [{"name": t.name, "pid": t.pid, "method": t.method} for t in self.terminated],
                "errors": list(self.errors)}


def mint_or_reclaim(session_id: str, runtime_dir: str | os.PathLike[str], *, grace: float = DEFAULT_GRACE,
                    stop_timeout: float | None = None, confirm_timeout: float = CONFIRM_TIMEOUT,
                    exclude: Iterable[int] = (), protect: Collection[str] = ()) -> Verdict:
    """Decide whether ``session_id`` can be resumed, freeing it from our own stale shellpers if needed.

    Own holders are ended through :func:`~tower_client.apply.terminate_session` (identity-checked
    STOP, then pidfd signals), and every holder process pinned beforehand must be dead afterwards;
    a final re-scan must find no holder at all, else the verdict is ``mint``. Sessions named in
    ``protect`` (e.g. other live, registered sessions) are treated like foreign holders: never ended.
    """
    exclude = tuple(exclude)
    holders = find_holders(session_id, runtime_dir, exclude=exclude)
    if not holders:
        return Verdict("resume", session_id, "no live process holds it")
    foreign = [h for h in holders if h.own is None]
    if foreign:
        pids = ", ".join(str(h.pid) for h in foreign)
        return Verdict("mint", session_id, f"held by foreign process(es) {pids}: never touched",
                       tuple(holders))
    kept = sorted({h.own.name for h in holders if h.own is not None and h.own.name in protect})
    if kept:
        return Verdict("mint", session_id, f"held by protected session(s) {', '.join(kept)}: never touched",
                       tuple(holders))
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
        alive = [fd.pid for fd in pinned if not fd.wait_dead(confirm_timeout)]
    finally:
        for fd in pinned:
            fd.close()
    if alive:
        errors.append(f"holder(s) {alive} still alive")
    if errors:
        return Verdict("mint", session_id, "could not free it: " + "; ".join(errors), tuple(holders),
                       tuple(terminated), tuple(errors))
    left = find_holders(session_id, runtime_dir, exclude=exclude)
    if left:
        pids = ", ".join(f"{h.pid} ({h.kind})" for h in left)
        return Verdict("mint", session_id, f"still held after reclaiming, by {pids}", tuple(holders),
                       tuple(terminated))
    names = ", ".join(sorted(repr(s.name) for s in shellpers.values()))
    return Verdict("reclaim", session_id, f"held only by our shellper(s) {names}: terminated, confirmed dead",
                   tuple(holders), tuple(terminated))
