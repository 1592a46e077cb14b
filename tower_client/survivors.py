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
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

from shellper.identity import IdentityError, PidFd, ProcessGone, SurvivorError, boot_id, read_stat
from shellper.record import SessionRecord

__all__ = ["INSTANCE_ENV", "MAX_ROUNDS", "SurvivorReport", "find_survivors", "reap_survivors"]

INSTANCE_ENV = "SHELLPER_INSTANCE"
"""Environment variable the shellper sets in every child to its instance id (see shellper.server)."""
MAX_ROUNDS = 8
"""Freeze-and-rescan rounds before giving up on finding forks made while we were killing."""


@dataclass(frozen=True)
class SurvivorReport:
    """``termed``: got SIGTERM (all found at first); ``killed``: still alive after ``grace``, SIGKILLed."""

    name: str
    termed: tuple[int, ...]
    killed: tuple[int, ...]

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.termed) | set(self.killed)))


def _protected() -> set[int]:
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


def find_survivors(record: SessionRecord, pinned: dict[int, PidFd] | None = None) -> dict[int, PidFd]:
    """Pidfds of the live processes left behind by ``record``'s session (new ones added to ``pinned``).

    Returns {} for a record of another boot or one that never had a child. The caller closes the pidfds.
    """
    found: dict[int, PidFd] = {} if pinned is None else pinned
    if record.boot_id != boot_id() or record.child_start_time is None:
        return found
    use_sid = _sid_usable(record)
    needle = f"{INSTANCE_ENV}={record.instance_id}".encode()
    skip = _protected()
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


def reap_survivors(record: SessionRecord, *, grace: float = 5.0, confirm_timeout: float = 2.0) -> SurvivorReport:
    """SIGTERM what ``record``'s dead session left behind, wait ``grace``, then freeze, rescan, SIGKILL.

    Only for a session whose shellper is known dead (its lock is free and its pid gone or reused): a live
    shellper ends its own tree. Raises SurvivorError if anything outlives SIGKILL + ``confirm_timeout``.
    """
    pinned = find_survivors(record)
    try:
        termed = tuple(sorted(pinned))
        if not pinned:
            return SurvivorReport(record.name, (), ())
        _signal_all(pinned, signal.SIGTERM)
        _signal_all(pinned, signal.SIGCONT)
        _wait_all(pinned, time.monotonic() + grace)
        # A stopped process cannot fork: freeze, look again (forks made meanwhile carry the same marks).
        for _ in range(MAX_ROUNDS):
            before = len(pinned)
            _signal_all({p: fd for p, fd in pinned.items() if not fd.wait_dead(0)}, signal.SIGSTOP)
            find_survivors(record, pinned)
            if len(pinned) == before:
                break
        alive = {p: fd for p, fd in pinned.items() if not fd.wait_dead(0)}
        _signal_all(alive, signal.SIGKILL)
        left = _wait_all(alive, time.monotonic() + confirm_timeout)
        if left:
            raise SurvivorError(tuple(sorted(left)))
        return SurvivorReport(record.name, termed, tuple(sorted(alive)))
    finally:
        for fd in pinned.values():
            fd.close()
