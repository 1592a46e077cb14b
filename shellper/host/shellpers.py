"""Is this process a live shellper? Proof from what only a running shellper holds, never from its name.

A live shellper holds an exclusive flock on its ``NAME.lock`` (per /proc/locks) whose sibling record names
its pid and start ticks, and it holds the listening socket bound at the record's socket path (per
/proc/net/unix, even after the socket file was removed). A process started by hand with a copied command
line, or a stand-in holding a lock file, has neither the record's identity nor the listener.
"""

from __future__ import annotations

import contextlib
import os

from shellper.core.containment import Containment
from shellper.host.cgroup import SHELLPER_SUB, SessionCgroup, member_of, verify_cgroup
from shellper.host.identity import IdentityError, boot_id, read_stat
from shellper.host.record import RecordError, SessionRecord, read_record

_LISTENING = 0x10000
"""__SO_ACCEPTCON in /proc/net/unix's Flags column: a listening socket."""


def listening_inodes(path: str) -> set[int]:
    """Inodes of the listening Unix sockets bound at ``path`` in this network namespace."""
    found: set[int] = set()
    try:
        with open("/proc/net/unix", "rb") as f:
            lines = f.read().decode("utf-8", "surrogateescape").splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        parts = line.split(None, 7)
        if len(parts) == 8 and parts[7] == path:
            with contextlib.suppress(ValueError):
                if int(parts[3], 16) & _LISTENING:
                    found.add(int(parts[6]))
    return found


def _socket_inodes(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        with contextlib.suppress(OSError, ValueError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    return out


def listens(pid: int) -> bool:
    """``pid`` holds a listening Unix socket (bound anywhere): as every live shellper does, even one whose
    files were removed or whose record was copied elsewhere."""
    inodes: set[int] = set()
    try:
        with open("/proc/net/unix", "rb") as f:
            lines = f.read().decode("utf-8", "surrogateescape").splitlines()[1:]
    except OSError:
        return True  # cannot tell: whoever asks wants to spare such a process
    for line in lines:
        parts = line.split(None, 7)
        with contextlib.suppress(ValueError, IndexError):
            if int(parts[3], 16) & _LISTENING:
                inodes.add(int(parts[6]))
    return bool(inodes & _socket_inodes(pid))


def holds_listener(pid: int, path: str) -> bool:
    """``pid`` holds the listening socket bound at ``path``."""
    inodes = listening_inodes(path)
    return bool(inodes) and bool(inodes & _socket_inodes(pid))


class ProcTables:
    """/proc/net/unix's listeners and /proc/locks' holders, each read once for a look at many sessions.

    Both files list every session on the machine, so reading them per session makes a look at N sessions
    cost N squared (200 sessions: ~40 % of a discover). A session found in the tables is answered
    from them; one that is not (it started after they were read, say) is read afresh, as without them, so
    the tables never make a process look like a shellper that a fresh read would not.
    """

    def __init__(self) -> None:
        self._listeners: dict[str, set[int]] | None = None
        self._locks: dict[str, tuple[int, ...] | None] | None = None

    def listeners(self) -> dict[str, set[int]]:
        if self._listeners is None:
            self._listeners = {}
            try:
                with open("/proc/net/unix", "rb") as f:
                    lines = f.read().decode("utf-8", "surrogateescape").splitlines()[1:]
            except OSError:
                return self._listeners
            for line in lines:
                parts = line.split(None, 7)
                if len(parts) == 8:
                    with contextlib.suppress(ValueError):
                        if int(parts[3], 16) & _LISTENING:
                            self._listeners.setdefault(parts[7], set()).add(int(parts[6]))
        return self._listeners

    def holds_listener(self, pid: int, path: str) -> bool:
        """:func:`holds_listener`, from the table when ``path``'s listener is in it and ``pid`` holds it now."""
        inodes = self.listeners().get(path)
        if inodes and inodes & _socket_inodes(pid):
            return True
        return holds_listener(pid, path)

    def lock_owners(self, path: str | os.PathLike[str]) -> tuple[int, ...] | None:
        """:func:`lock_owners`, from the table when the inode at ``path`` is locked in it."""
        if self._locks is None:
            self._locks = {}
            try:
                with open("/proc/locks", encoding="ascii", errors="replace") as f:
                    lines = f.read().splitlines()
            except OSError:
                return lock_owners(path)
            for line in lines:
                parts = line.split()
                if len(parts) < 6 or parts[1] == "->":  # "->" marks a waiter, not a holder
                    continue
                known = self._locks.get(parts[5], ())
                try:
                    self._locks[parts[5]] = None if known is None else (*known, int(parts[4]))
                except ValueError:
                    self._locks[parts[5]] = None
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        owners = self._locks.get(key, ())
        # An entry is trusted only when each holder has this very file open now: the file locked when the
        # table was read may since have been removed and its inode number given to this one.
        if owners and all(_has_open(pid, st) for pid in owners) and any(pid > 0 for pid in owners):
            return owners
        return lock_owners(path)


def _has_open(pid: int, st: os.stat_result) -> bool:
    """``pid`` (0: in another pid namespace, not checkable) holds an fd on the file ``st`` describes."""
    if pid <= 0:
        return True
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            held = os.stat(f"/proc/{pid}/fd/{fd}")
            if held.st_ino == st.st_ino and held.st_dev == st.st_dev:
                return True
    return False


def session_cgroup(record: SessionRecord, directory: str) -> SessionCgroup | None:
    """The cgroup ``record`` names, if it is verifiably that session's (shellper.host.cgroup.verify_cgroup)."""
    if record.containment == Containment.NONE:
        return None
    group, _ = verify_cgroup(record.cgroup, record.cgroup_id, directory, record.name, record.instance_id)
    return group


def serves(pid: int, record: SessionRecord, directory: str, tables: ProcTables | None = None) -> bool:
    """``pid`` holds what only the running shellper of ``record``'s session holds: the listening socket
    bound at the record's socket path (even if the file was removed since), or a place in its cgroup's
    shellper/ part. ``tables``: /proc's tables read once for many sessions."""
    if tables.holds_listener(pid, record.socket) if tables is not None else holds_listener(pid, record.socket):
        return True
    group = session_cgroup(record, directory)
    return group is not None and member_of(pid, group.relative + "/" + SHELLPER_SUB)


def record_is_alive(record: SessionRecord) -> bool:
    """The recorded shellper is the live process at its pid: this boot, its start ticks, not a zombie."""
    try:
        if record.boot_id != boot_id():
            return False
        st = read_stat(record.shellper_pid)
    except IdentityError:
        return False
    return st is not None and st.state != "Z" and st.start_time == record.shellper_start_time


def _flock_holders() -> dict[int, set[tuple[int, int]]]:
    """pid -> {(device, inode)} of the exclusive flocks it holds, per /proc/locks."""
    out: dict[int, set[tuple[int, int]]] = {}
    try:
        with open("/proc/locks", "rb") as f:
            lines = f.read().decode("ascii", "replace").splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[3] != "WRITE":
            continue
        try:
            pid = int(parts[4])
            major, minor, inode = parts[5].split(":")
            dev = os.makedev(int(major, 16), int(minor, 16))
            out.setdefault(pid, set()).add((dev, int(inode)))
        except ValueError:
            continue
    return out


def lock_owners(path: str | os.PathLike[str]) -> tuple[int, ...] | None:
    """Pids holding a lock on the inode at ``path`` per /proc/locks; None if that cannot be read.

    Pids outside our pid namespace show as 0 or -1 there; callers treat those as "unknown".
    """
    try:
        st = os.stat(path, follow_symlinks=False)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    owners: list[int] = []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":  # "->" marks a waiter, not a holder
            continue
        if parts[5] == want:
            try:
                owners.append(int(parts[4]))
            except ValueError:
                return None
    return tuple(owners)


def live_shellpers() -> dict[int, SessionRecord]:
    """Every live shellper on this machine that we can see, with its record: pid -> record.

    A process counts if it holds an exclusive flock on a ``*.lock`` file whose sibling ``*.json`` record
    names it (pid and start ticks, this boot). Any runtime directory, any owner.
    """
    found: dict[int, SessionRecord] = {}
    for pid, locked in _flock_holders().items():
        if pid <= 0:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not target.endswith(".lock") or not target.startswith("/"):
                    continue
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in locked:
                continue
            try:
                rec = read_record(target[: -len(".lock")] + ".json")
            except (OSError, RecordError):
                continue
            if rec.shellper_pid == pid and record_is_alive(rec):
                found[pid] = rec
                break
    return found


def under(pid: int, ancestors: set[int] | frozenset[int]) -> bool:
    """``pid`` or one of its ancestors is in ``ancestors``. An unreadable or vanished link of the chain
    counts as yes: whoever asks wants to spare such processes, and sparing is always safe."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        if pid in ancestors:
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
