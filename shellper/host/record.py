"""The session record (``NAME.json``) and the session lock (``NAME.lock``).

The record is the shellper's own statement of who it is (boot id, pid, kernel start ticks, a random
instance id echoed in the handshake) and what it runs, so a restarted supervisor can tell a live
owner from a recycled pid before it signals anything (shellper.host.identity). It is written
atomically (temp + fsync + rename + fsync dir) so a reader sees the old or the new version, never a
torn one. Environment values are never stored: they routinely carry secrets.

The lock is an flock held for the shellper's whole life: a held lock proves a live owner, without
signalling anyone and without trusting pids.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import stat
import time
from collections.abc import Callable

from shellper.core import structs
from shellper.core.containment import Containment
from shellper.core.defaults import STDERR_MODES
from shellper.core.errors import ShellperError
from shellper.core.exitrecord import ExitRecord, ExitRecordError
from shellper.core.names import BadName, validate_name
from shellper.core.owner import BadOwner, validate_owner
from shellper.core.states import SessionState
from shellper.core.structs import field, record
from shellper.host.paths import describe_error, open_nofollow, record_temp_name

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any

RECORD_FORMAT = 1
MAX_RECORD_BYTES = 1024 * 1024
MAX_EXITS = 50
"""Exit entries kept in the record; ``exit_count`` keeps the total."""
STATES = tuple(SessionState)


def _own_version() -> str:
    from shellper import __version__

    return __version__


class RecordError(ShellperError):
    """A record could not be read or written: corrupt, truncated, wrong types, too large, or I/O failure."""

    def __init__(self, path: str | os.PathLike[str] | None, reason: str, errno_: int | None = None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.reason = reason
        self.errno = errno_
        where = f"session record {self.path}" if self.path else "session record"
        super().__init__(f"{where}: {reason}")


class LockError(ShellperError):
    """The lock file could not be opened or locked for a reason other than a live owner."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"session lock {self.path}: {reason}")


class AlreadyRunning(ShellperError):
    """Another live shellper holds this session's lock."""

    def __init__(self, name: str, path: str | os.PathLike[str]) -> None:
        self.name = name
        self.path = os.fspath(path)
        super().__init__(f"session {name!r} is already running (lock {self.path} is held)")


# --- identity helpers -----------------------------------------------------------------------------


def cmdline_sha256(pid: int | str = "self") -> str:
    """SHA-256 of /proc/<pid>/cmdline: lets a verifier match the program without storing argv (secrets)."""
    try:  # CPython's own SHA-256: hashlib would map OpenSSL's libcrypto into every shellper for one hash
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - other Pythons
        from hashlib import sha256
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return str(sha256(f.read()).hexdigest())


def new_instance_id() -> str:
    """128 random bits; echoed in the socket handshake so an impostor at a recycled pid is refused."""
    return os.urandom(16).hex()


# --- the record -----------------------------------------------------------------------------------


@record
class SessionRecord:
    """Everything a supervisor needs to find, verify and describe a session after it restarts."""

    name: str
    boot_id: str
    shellper_pid: int
    shellper_start_time: int
    instance_id: str
    command: list[str]
    cwd: str
    socket: str
    format: int = RECORD_FORMAT
    shellper_pgid: int | None = None
    shellper_sid: int | None = None
    cmdline_sha256: str | None = None
    child_pid: int | None = None
    child_pgid: int | None = None
    child_start_time: int | None = None
    state: str = SessionState.STARTING
    state_reason: str = ""
    created_at: float = field(default_factory=time.time)
    last_exit_at: float | None = None
    next_restart_at: float | None = None
    exits: list[ExitRecord] = field(default_factory=list)
    """The last MAX_EXITS exits, oldest first."""
    exit_count: int = 0
    restarts: int = 0
    breaker: dict[str, Any] = field(default_factory=dict)
    ring_bytes: int = 0
    stderr_mode: str = "pty"
    version: str = field(default_factory=_own_version)
    owner: str = ""
    """Who the session belongs to; "" in records written before owners existed."""
    containment: str = "none"
    """What ends exactly this session's processes: cgroup, systemd-scope or none (markers and pidfds)."""
    cgroup: str | None = None
    """The session's cgroup directory (shellper.host.cgroup), when containment is not none."""
    cgroup_id: int | None = None
    """The inode of that directory: a cgroup made again under the same name is not the recorded one."""
    labels: dict[str, str] = field(default_factory=dict)
    """``shellper set``'s key=value pairs (shellper.core.labels); {} in records written before labels existed."""

    def to_dict(self) -> dict[str, Any]:
        """The record as the file holds it (each exit in its wire form)."""
        out = {f.name: getattr(self, f.name) for f in structs.fields(self)}
        out["exits"] = [entry.to_wire() for entry in self.exits]
        return out

    def to_json(self) -> bytes:
        """Serialise; raises RecordError if the result could not be read back (NaN, > 1 MiB)."""
        try:
            text = json.dumps(self.to_dict(), indent=1, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise RecordError(None, f"cannot serialise: {e}") from e
        data = text.encode("utf-8") + b"\n"
        if len(data) > MAX_RECORD_BYTES:
            raise RecordError(None, f"serialised record is {len(data)} bytes (max {MAX_RECORD_BYTES})")
        return data

    @classmethod
    def from_json(cls, data: bytes, path: str | os.PathLike[str] | None = None) -> SessionRecord:
        """Parse and type-check; unknown keys are ignored (newer writers), bad ones raise RecordError."""
        if len(data) > MAX_RECORD_BYTES:
            raise RecordError(path, f"too large ({len(data)} bytes, max {MAX_RECORD_BYTES})")
        if not data.strip():
            raise RecordError(path, "empty (truncated?)")
        try:
            obj = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise RecordError(path, f"corrupt or truncated JSON: {e}") from e
        if not isinstance(obj, dict):
            raise RecordError(path, f"top level is {type(obj).__name__}, expected an object")
        fmt = obj.get("format")
        if not isinstance(fmt, int) or isinstance(fmt, bool):
            raise RecordError(path, "missing or non-integer 'format'")
        if fmt < 1 or fmt > RECORD_FORMAT:
            raise RecordError(path, f"unsupported record format {fmt} (this shellper reads {RECORD_FORMAT})")
        kwargs: dict[str, Any] = {}
        for f in structs.fields(cls):
            if f.name not in obj:
                if f.default is structs.MISSING and f.default_factory is structs.MISSING:
                    raise RecordError(path, f"missing field {f.name!r}")
                continue
            value = obj[f.name]
            check = _CHECKS[f.name]
            if not check(value):
                raise RecordError(path, f"field {f.name!r} has wrong type or value: {_short(value)}")
            kwargs[f.name] = float(value) if f.name in _FLOAT_FIELDS and value is not None else value
        try:
            kwargs["exits"] = [ExitRecord.from_wire(entry) for entry in kwargs.get("exits", [])]
        except ExitRecordError as e:
            raise RecordError(path, f"field 'exits': {e}") from e
        return cls(**kwargs)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _is_pid(v: Any) -> bool:
    return _is_int(v) and v > 0


def _is_group_id(v: Any) -> bool:
    """A pgid or sid: 0 is valid, getpgid/getsid report it when the leader is outside our pid namespace."""
    return _is_int(v) and v >= 0


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _nonneg(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _is_owner(v: Any) -> bool:
    """An owner as :func:`~shellper.core.owner.validate_owner` allows one (or "", from before owners): the
    record is a file, and an owner holding an escape sequence would be printed by ``ls`` and ``status``."""
    if v == "":
        return True
    try:
        validate_owner(v)
    except BadOwner:
        return False
    return True


def _is_labels(v: Any) -> bool:
    """Labels as shellper.core.labels allows them: a record is a file, and ls prints what it holds. That
    module is loaded only for a record that has some."""
    if v == {}:
        return True
    from shellper.core.labels import BadLabel, validate_labels

    try:
        validate_labels(v)
    except BadLabel:
        return False
    return True


def _is_name(v: Any) -> bool:
    try:
        validate_name(v)
    except BadName:
        return False
    return True


_FLOAT_FIELDS = {"created_at", "last_exit_at", "next_restart_at"}
_CHECKS: dict[str, Callable[[Any], bool]] = {
    "format": _is_int,
    "name": _is_name,
    "boot_id": _is_str,
    "shellper_pid": _is_pid,
    "shellper_start_time": _nonneg,
    "instance_id": _is_str,
    "command": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
    "cwd": _is_str,
    "socket": _is_str,
    "shellper_pgid": _opt(_is_group_id),
    "shellper_sid": _opt(_is_group_id),
    "cmdline_sha256": _opt(_is_str),
    "child_pid": _opt(_is_pid),
    "child_pgid": _opt(_is_group_id),
    "child_start_time": _opt(_nonneg),
    "state": lambda v: v in STATES,
    "state_reason": _is_str,
    "created_at": _is_num,
    "last_exit_at": _opt(_is_num),
    "next_restart_at": _opt(_is_num),
    "exits": lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v),
    "exit_count": _nonneg,
    "restarts": _nonneg,
    "breaker": lambda v: isinstance(v, dict),
    "ring_bytes": _nonneg,
    "stderr_mode": lambda v: v in STDERR_MODES,
    "version": _is_str,
    "owner": _is_owner,
    "containment": lambda v: v in tuple(Containment),
    "cgroup": _opt(lambda v: isinstance(v, str) and v.startswith("/")),
    "cgroup_id": _opt(_nonneg),
    "labels": _is_labels,
}
assert set(_CHECKS) == {f.name for f in structs.fields(SessionRecord)}


# --- atomic write / safe read ---------------------------------------------------------------------


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_record(path: str | os.PathLike[str], record: SessionRecord, *, sync: bool = True) -> None:
    """Atomically replace ``path`` with ``record`` (temp file 0600 in the same dir, fsync, rename, fsync dir).

    A symlink planted at ``path`` is replaced by the rename, never written through; a directory there
    is refused. Failures raise RecordError (with ``errno`` set for I/O errors); the temp file is removed.
    ``sync=False`` leaves out both fsyncs, for :func:`sync_record` to make later: a reader on this machine
    sees the same file either way; only a crash of the machine in between can lose or empty it.
    """
    p = os.fspath(path)
    try:
        data = record.to_json()
    except RecordError as e:
        raise RecordError(p, e.reason) from e
    try:
        if stat.S_ISDIR(os.lstat(p).st_mode):
            raise RecordError(p, "is a directory; refusing to replace it")
    except FileNotFoundError:
        pass
    except OSError as e:
        raise RecordError(p, f"cannot stat: {e.strerror}", e.errno) from e
    directory, name = os.path.split(p)
    tmp_name = record_temp_name(name)  # a kill -9 mid-write leaves it: cleaners recognise exactly this name
    tmp = os.path.join(directory, tmp_name)
    try:
        fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise RecordError(p, f"cannot create temp file {tmp_name}: {e.strerror}", e.errno) from e
    try:
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, p)
    except OSError as e:
        _silent_unlink(tmp)
        raise RecordError(p, f"write failed: {e.strerror}", e.errno) from e
    except BaseException:
        _silent_unlink(tmp)
        raise
    if not sync:
        return
    try:
        _fsync_dir(directory or ".")
    except OSError as e:
        raise RecordError(p, f"written, but fsync of the directory failed: {e.strerror}", e.errno) from e


def sync_record(path: str | os.PathLike[str]) -> None:
    """Make a record written with ``write_record(..., sync=False)`` durable: fsync the file now at ``path``
    (never through a symlink), then its directory. OSError if either fails."""
    p = os.fspath(path)
    fd = open_nofollow(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(os.path.dirname(p) or ".")


def _silent_unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def read_record(path: str | os.PathLike[str]) -> SessionRecord:
    """Read and validate a record without following a symlink.

    Raises FileNotFoundError if absent, RecordError for anything else (symlink, FIFO, huge, corrupt).
    """
    p = os.fspath(path)
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the reader.
        fd = open_nofollow(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RecordError(p, "is a symlink; refusing to follow it", e.errno) from e
        raise RecordError(p, f"cannot open: {e.strerror}", e.errno) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(p, "is not a regular file")
        if st.st_size > MAX_RECORD_BYTES:
            raise RecordError(p, f"too large ({st.st_size} bytes, max {MAX_RECORD_BYTES})")
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_RECORD_BYTES:
            chunk = os.read(fd, MAX_RECORD_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        raise RecordError(p, f"read failed: {e.strerror}", e.errno) from e
    finally:
        os.close(fd)
    return SessionRecord.from_json(b"".join(chunks), p)


# --- the lock -------------------------------------------------------------------------------------

_ACQUIRE_ATTEMPTS = 10
_ACQUIRE_RETRY_S = 0.005


def _open_lock_file(p: str) -> int:
    try:
        fd = open_nofollow(p, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise LockError(p, f"cannot open: {describe_error(e)}") from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockError(p, "is not a regular file")
    return fd


def _lock_and_verify(p: str, fd: int, write_pid: bool = True) -> str:
    """flock ``fd``; "busy" if held elsewhere, "stale" if ``p`` no longer names the locked inode.

    A failure to write our pid (a full disk) removes the file again before raising LockError: we hold the
    lock, so the name is free and the file is nobody else's (release()'s order: unlink, then close)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return "busy"
    except OSError as e:
        raise LockError(p, f"flock failed: {e.strerror}") from e
    mine = os.fstat(fd)
    try:
        now = os.stat(p, follow_symlinks=False)
    except FileNotFoundError:
        return "stale"
    if (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
        return "stale"
    if not write_pid:
        return "locked"
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError as e:
        with contextlib.suppress(OSError):
            now = os.stat(p, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
                os.unlink(p)
        raise LockError(p, f"cannot write to it: {describe_error(e)}") from e
    return "locked"


class SessionLock:
    """An exclusive flock on ``NAME.lock``, held for the shellper's life.

    The fd is CLOEXEC so the PTY child never holds it (a lingering child must not look like an owner).

    Protocol: the owner unlinks the file *before* closing, and an acquirer re-checks after locking
    that the path still names the inode it locked; so two processes can never both believe they own
    a session, even when one acquires while the other releases.
    """

    def __init__(self, path: str, fd: int, name: str) -> None:
        self.path = path
        self.name = name
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    @classmethod
    def acquire(cls, path: str | os.PathLike[str], name: str | None = None, *, write_pid: bool = True) -> SessionLock:
        """Take the lock or raise AlreadyRunning (live owner) / LockError (cannot open or lock).

        ``write_pid=False`` for a brief hold that writes nothing (a cleaner): it works on a full disk."""
        p = os.fspath(path)
        label = name if name is not None else os.path.splitext(os.path.basename(p))[0]
        busy = 0
        while True:
            fd = _open_lock_file(p)
            try:
                outcome = _lock_and_verify(p, fd, write_pid)
            except BaseException:
                os.close(fd)
                raise
            if outcome == "locked":
                return cls(p, fd, label)
            os.close(fd)
            if outcome == "busy":
                # A live owner -- or an is_locked() probe holding LOCK_SH for a few microseconds.
                busy += 1
                if busy >= _ACQUIRE_ATTEMPTS:
                    raise AlreadyRunning(label, p)
                time.sleep(_ACQUIRE_RETRY_S)
            # "stale": we locked a file its previous owner had just unlinked; start over.

    @staticmethod
    def is_locked(path: str | os.PathLike[str]) -> bool:
        """True if a live process holds the lock; never signals anyone. A missing file is not locked."""
        try:
            fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise LockError(path, f"cannot open: {describe_error(e)}") from e
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory flocks too, and would always read "free"
                raise LockError(path, "is not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def fileno(self) -> int:
        if self._fd is None:
            raise LockError(self.path, "not held")
        return self._fd

    def release(self) -> None:
        """Unlink the lock file, then close (unlock); idempotent."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            mine = os.fstat(fd)
            now = os.stat(self.path, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def __enter__(self) -> SessionLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
