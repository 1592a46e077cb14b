"""Process identity on Linux: who a pid *is*, not just which number it has.

A pid number is recycled; ``(boot_id, pid, start_time)`` names one process of one boot. The
start time is the kernel's raw ``starttime`` (field 22 of ``/proc/<pid>/stat``, clock ticks since
boot), never an epoch value or the ``/proc/<pid>`` ctime (that is when the procfs inode was
instantiated, which can be seconds after the real start).

Signalling goes through pidfds: :func:`open_verified` opens the pidfd *first* and verifies the
identity *afterwards*, then checks (via the pidfd's ``fdinfo``) that the process it pinned was
not reaped in between. A pidfd refers to one process forever, so a pid recycled after the check
can never be signalled.

Limit: at 100 ticks/s two processes can get the same pid *and* the same start tick under very
fast reuse; callers that must tell such impostors apart add a nonce (e.g. echoed over the
session socket). Linux only; stdlib only.
"""

from __future__ import annotations

import errno
import math
import os
import select
import signal

from shellper.core.errors import ShellperError
from shellper.core.structs import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "PIDFD_SIGNAL_PROCESS_GROUP",
    "IdentityError",
    "IdentityMismatch",
    "IdentityUnreadable",
    "InvalidIdentityRecord",
    "NotAChild",
    "PidFd",
    "ProcStat",
    "ProcessGone",
    "ProcessIdentity",
    "boot_id",
    "cmdline",
    "open_verified",
    "parent_pid",
    "parse_stat",
    "process_group",
    "process_state",
    "read_stat",
    "session_id",
    "start_time",
]

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
#: pidfd_send_signal flag (Linux >= 6.9): signal the process group whose id is the pidfd's pid.
PIDFD_SIGNAL_PROCESS_GROUP = 4


# --------------------------------------------------------------------------- exceptions


class IdentityError(ShellperError):
    """Base of every identity/reaping failure; ``pid`` is the process concerned, if any."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class ProcessGone(IdentityError):
    """The process no longer exists (exited, zombie, or belongs to another boot)."""

    def __init__(self, pid: int, reason: str = "no such process") -> None:
        super().__init__(f"process {pid} is gone: {reason}", pid)
        self.reason = reason


class IdentityMismatch(IdentityError):
    """The pid is alive but is another process than the one recorded (pid reuse)."""

    def __init__(self, pid: int, expected: ProcessIdentity, found: ProcessIdentity) -> None:
        super().__init__(
            f"pid {pid} is not the recorded process: expected start_time {expected.start_time}, "
            f"found {found.start_time}",
            pid,
        )
        self.expected = expected
        self.found = found


class IdentityUnreadable(IdentityError):
    """/proc could not be read or parsed for a reason other than "gone": the state is *unknown*.

    Unknown must never be treated as gone (a kill would be skipped or, worse, misdirected).
    """

    def __init__(self, pid: int | None, path: str, reason: str) -> None:
        super().__init__(f"cannot read {path}: {reason}", pid)
        self.path = path
        self.reason = reason


class InvalidIdentityRecord(IdentityError):
    """A serialized identity (from a session record) is malformed."""

    def __init__(self, field: str, value: object) -> None:
        super().__init__(f"invalid identity record: field {field!r} = {value!r}")
        self.field = field
        self.value = value


class NotAChild(IdentityError):
    """The pid is not an unreaped child of the caller, so its number is not pinned."""

    def __init__(self, pid: int, ppid: int) -> None:
        super().__init__(f"pid {pid} is not a child of {os.getpid()} (its parent is {ppid})", pid)
        self.ppid = ppid


# --------------------------------------------------------------------------- /proc readers

_boot_id_cache: str | None = None


def boot_id() -> str:
    """The current boot's id (cached): a process recorded under another boot cannot be alive."""
    global _boot_id_cache
    if _boot_id_cache is None:
        try:
            with open(BOOT_ID_PATH, encoding="ascii") as f:
                value = f.read().strip()
        except OSError as e:
            raise IdentityUnreadable(None, BOOT_ID_PATH, e.strerror or str(e)) from e
        if not value:
            raise IdentityUnreadable(None, BOOT_ID_PATH, "empty")
        _boot_id_cache = value
    return _boot_id_cache


@record(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` this project uses."""

    comm: str
    state: str
    ppid: int
    pgrp: int
    session: int
    start_time: int


def parse_stat(text: str) -> ProcStat:
    """Parse ``/proc/<pid>/stat``. comm may contain spaces and ')' so split at the *last* ')'."""
    open_paren = text.find("(")
    close_paren = text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise IdentityUnreadable(None, "stat", f"no (comm) in {text[:80]!r}")
    rest = text[close_paren + 1 :].split()
    # rest[0] is field 3 (state); field N is rest[N - 3]; starttime is field 22.
    if len(rest) < 20:
        raise IdentityUnreadable(None, "stat", f"only {len(rest)} fields after comm")
    try:
        return ProcStat(
            comm=text[open_paren + 1 : close_paren],
            state=rest[0],
            ppid=int(rest[1]),
            pgrp=int(rest[2]),
            session=int(rest[3]),
            start_time=int(rest[19]),
        )
    except ValueError as e:
        raise IdentityUnreadable(None, "stat", f"non-numeric field: {e}") from e


def _read_proc_file(pid: int, name: str) -> bytes | None:
    """Read /proc/<pid>/<name>; None if the process is gone, IdentityUnreadable otherwise."""
    path = f"/proc/{pid}/{name}"
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as e:
        if e.errno == errno.ESRCH:  # raced with the reaping of the process
            return None
        raise IdentityUnreadable(pid, path, e.strerror or str(e)) from e


def read_stat(pid: int) -> ProcStat | None:
    """The parsed stat of ``pid``; None if it does not exist (a zombie still exists)."""
    if pid <= 0:
        return None
    data = _read_proc_file(pid, "stat")
    if data is None:
        return None
    try:
        return parse_stat(data.decode("utf-8", "surrogateescape"))
    except IdentityUnreadable as e:
        raise IdentityUnreadable(pid, f"/proc/{pid}/stat", e.reason) from e


def ignores_signal(pid: int, sig: int) -> bool:
    """``pid`` has ``sig`` set to SIG_IGN (/proc's SigIgn mask); False if it is gone or the mask unreadable."""
    try:
        data = _read_proc_file(pid, "status")
    except IdentityUnreadable:
        return False
    for line in (data or b"").splitlines():
        if line.startswith(b"SigIgn:"):
            try:
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
            except (IndexError, ValueError):
                return False
    return False


def start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks since boot (stat field 22); None if gone."""
    st = read_stat(pid)
    return None if st is None else st.start_time


def process_state(pid: int) -> str | None:
    """State letter (R, S, D, T, Z, ...); None if gone."""
    st = read_stat(pid)
    return None if st is None else st.state


def parent_pid(pid: int) -> int | None:
    st = read_stat(pid)
    return None if st is None else st.ppid


def process_group(pid: int) -> int | None:
    st = read_stat(pid)
    return None if st is None else st.pgrp


def session_id(pid: int) -> int | None:
    st = read_stat(pid)
    return None if st is None else st.session


def cmdline(pid: int) -> list[str] | None:
    """argv of ``pid``; None if gone.

    Empty for kernel threads and zombies, and briefly right after exec (measured: a Popen can
    return before the kernel has set up the new argv), so never hash it at spawn without retrying.
    """
    if pid <= 0:
        return None
    data = _read_proc_file(pid, "cmdline")
    if data is None:
        return None
    if data.endswith(b"\0"):
        data = data[:-1]
    if not data:
        return []
    return [part.decode("utf-8", "surrogateescape") for part in data.split(b"\0")]


# --------------------------------------------------------------------------- identity


@record(frozen=True)
class ProcessIdentity:
    """One process of one boot. Compare raw ticks, never wall-clock times."""

    boot_id: str
    pid: int
    start_time: int

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """Observe ``pid`` now (a zombie still has an identity); None if it does not exist."""
        st = read_stat(pid)
        if st is None:
            return None
        return cls(boot_id(), pid, st.start_time)

    @classmethod
    def current(cls) -> ProcessIdentity:
        ident = cls.of(os.getpid())
        if ident is None:  # pragma: no cover - our own /proc entry always exists
            raise IdentityUnreadable(os.getpid(), "/proc/self/stat", "missing")
        return ident

    def is_alive(self) -> bool:
        """Same boot, and the pid still carries this start time and is not a zombie.

        A plain observation: for acting on the process use :func:`open_verified`.
        """
        if self.boot_id != boot_id():
            return False
        st = read_stat(self.pid)
        return st is not None and st.start_time == self.start_time and st.state != "Z"

    def to_dict(self) -> dict[str, Any]:
        return {"boot_id": self.boot_id, "pid": self.pid, "start_time": self.start_time}

    @classmethod
    def from_dict(cls, data: object) -> ProcessIdentity:
        """Validate strictly: a record read from disk is untrusted input."""
        if not isinstance(data, dict):
            raise InvalidIdentityRecord("<record>", data)
        bid = data.get("boot_id")
        if not isinstance(bid, str) or not bid.strip() or bid != bid.strip():
            raise InvalidIdentityRecord("boot_id", bid)
        pid = data.get("pid")
        if type(pid) is not int or pid <= 0:
            raise InvalidIdentityRecord("pid", pid)
        ticks = data.get("start_time")
        if type(ticks) is not int or ticks < 0:
            raise InvalidIdentityRecord("start_time", ticks)
        return cls(bid, pid, ticks)


# --------------------------------------------------------------------------- pidfd


def _fdinfo_pid(fd: int) -> int:
    """The pid a pidfd refers to, per fdinfo; -1 once that process has been reaped."""
    path = f"/proc/self/fdinfo/{fd}"
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(b"Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError) as e:
        raise IdentityUnreadable(None, path, str(e)) from e
    raise IdentityUnreadable(None, path, "no Pid: line (not a pidfd?)")


class PidFd:
    """A pidfd: a handle on one process that a recycled pid can never alias.

    Becomes readable when the process exits (even as an unreaped zombie): that is "dead" here.
    """

    def __init__(self, fd: int, pid: int) -> None:
        self._fd = fd
        self.pid = pid

    @classmethod
    def open(cls, pid: int) -> PidFd:
        if pid <= 0:
            raise ProcessGone(pid, "not a valid pid")
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError as e:
            raise ProcessGone(pid) from e
        return cls(fd, pid)

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError(f"pidfd for {self.pid} is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def send_signal(self, sig: int) -> None:
        """Signal exactly this process; ProcessGone once it has been reaped."""
        try:
            signal.pidfd_send_signal(self.fileno(), sig)
        except ProcessLookupError as e:
            raise ProcessGone(self.pid, "reaped") from e

    def send_group_signal(self, sig: int) -> None:
        """Signal the process group whose id is this process's pid.

        Uses PIDFD_SIGNAL_PROCESS_GROUP (Linux >= 6.9), bound to the pidfd so a recycled pgid
        can never be hit. Older kernels: ``killpg`` only while this process is unreaped (a live
        or zombie leader pins its pgid). ProcessGone if no such group exists.
        """
        try:
            signal.pidfd_send_signal(self.fileno(), sig, None, PIDFD_SIGNAL_PROCESS_GROUP)
            return
        except ProcessLookupError as e:
            raise ProcessGone(self.pid, "no process group") from e
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
        if not self.is_unreaped():
            raise ProcessGone(self.pid, "reaped; its pgid is no longer pinned")
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError as e:
            raise ProcessGone(self.pid, "no process group") from e

    def is_unreaped(self) -> bool:
        """True while the process still holds its pid (alive or zombie)."""
        return _fdinfo_pid(self.fileno()) == self.pid

    def wait_dead(self, timeout: float) -> bool:
        """Block until the process has exited (zombie counts) or ``timeout`` s; True if dead."""
        poller = select.poll()
        poller.register(self.fileno(), select.POLLIN)
        ms = 0 if timeout <= 0 else max(1, math.ceil(timeout * 1000))
        return bool(poller.poll(ms))

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> PidFd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PidFd(pid={self.pid}, fd={self._fd})"


def open_verified(identity: ProcessIdentity, *, allow_zombie: bool = False) -> PidFd:
    """Open a pidfd on the recorded process, or refuse.

    Order matters: pidfd first, identity check second, then proof (fdinfo) that the pinned
    process was not reaped meanwhile, so the stat we checked was the pinned process's.
    ``allow_zombie`` lets a reaper still use a dead leader's pidfd to reach its process group.
    """
    pid = identity.pid
    if identity.boot_id != boot_id():
        raise ProcessGone(pid, "recorded under another boot")
    pidfd = PidFd.open(pid)
    try:
        st = read_stat(pid)
        if st is None:
            raise ProcessGone(pid)
        if st.start_time != identity.start_time:
            raise IdentityMismatch(pid, identity, ProcessIdentity(identity.boot_id, pid, st.start_time))
        if not pidfd.is_unreaped():
            raise ProcessGone(pid, "reaped during verification")
        if st.state == "Z" and not allow_zombie:
            raise ProcessGone(pid, "zombie")
    except BaseException:
        pidfd.close()
        raise
    return pidfd
