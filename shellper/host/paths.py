"""Where a session's files live, and file operations that never follow a planted symlink.

Every session owns four files in one runtime directory: ``NAME.sock`` (the server socket),
``NAME.json`` (the session record), ``NAME.lock`` (flock held for the shellper's life) and
``NAME.log`` (its own diagnostics). The directory is the security boundary: it must be a real
directory owned by us with no group/other access, so nothing inside it can be swapped by another
user. Checks use lstat/O_NOFOLLOW so a symlink is reported, never traversed.

Paths here are plain strings, as in :mod:`shellper.client.blocking`: this module is on every shellper's start
path, and pathlib (with the urllib.parse and ipaddress it imports) would be paid by every session, in
launch time and memory (bench/NOTES.md, "Start-up: what the avoided imports cost").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys

from shellper.core.names import (
    LOCK_SUFFIX,
    LOG_SUFFIX,
    RECORD_SUFFIX,
    SOCKET_SUFFIX,
    BadName,
    missing_xdg_runtime_dir,
    runtime_dir_name,
    validate_name,
)
from shellper.core.names import PathError as PathError  # re-exported: the base of this module's errors
from shellper.core.structs import record
from shellper.core.trust import dir_refusal

SUN_PATH_MAX = 108
"""sizeof(sockaddr_un.sun_path) on Linux, including the terminating NUL."""
TEMP_SUFFIX = ".tmp"
"""Of the temp file an atomic record write renames into place: ``.NAME.json.<pid>.<8 hex digits>.tmp``."""
_HEX = frozenset("0123456789abcdef")


class UnsafeDirError(PathError):
    """The runtime directory exists but cannot be trusted (symlink, not ours, too open, not a dir)."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"unsafe runtime directory {self.path}: {reason}")


class SessionFileError(PathError):
    """A session file cannot be created or used: the message names the file, says why and what to do."""

    def __init__(self, what: str, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{what} {self.path}: {reason}")


class PathTooLong(PathError):
    """A socket path would not fit in sockaddr_un.sun_path, so bind()/connect() would fail."""

    def __init__(self, path: str | os.PathLike[str], length: int, limit: int = SUN_PATH_MAX - 1) -> None:
        self.path = os.fspath(path)
        self.length = length
        self.limit = limit
        super().__init__(
            f"socket path {self.path} is {length} bytes; Unix sockets allow at most {limit}: "
            "use a shorter --dir or $SHELLPER_DIR"
        )


def runtime_dir(explicit: str | os.PathLike[str] | None = None) -> str:
    """Pick the runtime directory (see :func:`shellper.core.names.runtime_dir_name`), warning once on stderr
    when $XDG_RUNTIME_DIR names no directory and the fallback is used instead."""
    global _warned_xdg
    chosen = runtime_dir_name(explicit)
    missing = missing_xdg_runtime_dir(explicit)
    if missing is not None and not _warned_xdg:
        _warned_xdg = True
        sys.stderr.write(f"shellper: warning: $XDG_RUNTIME_DIR ({missing}) is not a directory; using {chosen}\n")
    return chosen


_warned_xdg = False


def _check_dir_stat(path: str, st: os.stat_result) -> None:
    why = dir_refusal(path, st.st_mode, st.st_uid, os.geteuid())  # the rule every client applies too
    if why is not None:
        raise UnsafeDirError(path, why)


def lstat_dir(path: str | os.PathLike[str]) -> os.stat_result | None:
    """lstat of a directory to be checked: None if it does not exist, UnsafeDirError if it cannot be read."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UnsafeDirError(path, f"cannot stat it: {e.strerror}") from e


def existing_runtime_dir(path: str | os.PathLike[str]) -> bool:
    """Whether the runtime directory exists (False: nothing in it yet); UnsafeDirError if it exists but
    ``run`` would refuse it, so ``ls`` does not report "no sessions" from a place sessions never go."""
    return check_dir(path) is not None


def check_dir(directory: str | os.PathLike[str]) -> str | None:
    """The runtime directory to look in (absolute), or None if it does not exist; UnsafeDirError if what is
    there cannot be trusted as evidence: the rule every client applies before it connects (a symlink, not a
    directory, not ours, or open to group or others, who could plant records and sockets in it)."""
    p = os.path.abspath(os.fspath(directory))
    st = lstat_dir(p)
    if st is not None:
        _check_dir_stat(p, st)
    return None if st is None else p


def check_socket_path(path: str | os.PathLike[str]) -> None:
    """Raise PathTooLong if ``path`` cannot be bound as an AF_UNIX socket address."""
    length = len(os.fsencode(path))
    if length > SUN_PATH_MAX - 1:
        raise PathTooLong(path, length)


def ensure_runtime_dir(path: str | os.PathLike[str]) -> str:
    """Create the runtime directory 0700 (parents as needed), or verify an existing one is safe.

    Verification is done on an O_NOFOLLOW|O_DIRECTORY descriptor, so the directory checked is the
    directory used, not whatever a racing rename put at the path. Also checks that the shortest
    possible socket name fits in sun_path; the exact per-name check is in :meth:`SessionPaths.for_name`.
    """
    p = os.path.abspath(os.fspath(path))
    check_socket_path(os.path.join(p, f"x{SOCKET_SUFFIX}"))
    try:
        os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
    except OSError as e:
        raise UnsafeDirError(p, f"cannot create its parent: {e.strerror or e}") from e
    created = False
    try:
        os.mkdir(p, 0o700)
        created = True
    except FileExistsError:
        pass
    except OSError as e:
        raise UnsafeDirError(p, f"cannot create it: {e.strerror}") from e
    if not created:
        try:
            st = os.lstat(p)
        except OSError as e:
            raise UnsafeDirError(p, f"cannot stat it: {e.strerror}") from e
        _check_dir_stat(p, st)  # clear messages for symlink / file / owner / mode
    try:
        fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise UnsafeDirError(p, f"cannot open it without following links: {e.strerror}") from e
    try:
        if created:
            # mkdir's mode is filtered by the umask; make it exactly 0700 on the very inode we made.
            os.fchmod(fd, 0o700)
        _check_dir_stat(p, os.fstat(fd))
    finally:
        os.close(fd)
    return p


@record(frozen=True)
class SessionPaths:
    """The per-session file names inside a runtime directory."""

    dir: str
    name: str
    socket: str
    record: str
    lock: str
    log: str

    @classmethod
    def for_name(cls, directory: str | os.PathLike[str], name: str) -> SessionPaths:
        """Validate ``name`` and build its paths; raises BadName or PathTooLong (socket path)."""
        validate_name(name)
        d = os.path.abspath(os.fspath(directory))
        base = os.path.join(d, name)
        paths = cls(
            dir=d,
            name=name,
            socket=base + SOCKET_SUFFIX,
            record=base + RECORD_SUFFIX,
            lock=base + LOCK_SUFFIX,
            log=base + LOG_SUFFIX,
        )
        check_socket_path(paths.socket)
        return paths


def _unlink_if(path: str | os.PathLike[str], test: int) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_IFMT(st.st_mode) != test:
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def unlink_if_socket(path: str | os.PathLike[str]) -> bool:
    """Remove ``path`` only if lstat says it is a socket (never a symlink or a file); True if removed."""
    return _unlink_if(path, stat.S_IFSOCK)


def unlink_if_regular(path: str | os.PathLike[str]) -> bool:
    """Remove ``path`` only if lstat says it is a regular file (a symlink is left alone); True if removed."""
    return _unlink_if(path, stat.S_IFREG)


def open_nofollow(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """os.open plus O_NOFOLLOW|O_CLOEXEC: a symlink at ``path`` fails with ELOOP instead of being followed."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


# --- leftovers and errors ------------------------------------------------------------------------


def record_temp_name(record_file: str) -> str:
    """The name of a temp file for an atomic write of ``record_file`` (a file name, not a path):
    ``.NAME.json.<pid>.<8 hex digits>.tmp``, hidden, in the same directory. A writer killed mid-write
    leaves it behind; :func:`temp_file_session` recognises exactly these names so they can be cleaned."""
    return f".{record_file}.{os.getpid()}.{os.urandom(4).hex()}{TEMP_SUFFIX}"


def temp_file_session(file_name: str) -> str | None:
    """The session whose record ``file_name`` is a leftover temp file of, or None unless the name is
    exactly what :func:`record_temp_name` makes for ``NAME.json`` with a valid session name."""
    if not (file_name.startswith(".") and file_name.endswith(TEMP_SUFFIX)):
        return None
    parts = file_name[1:-len(TEMP_SUFFIX)].rsplit(".", 2)
    if len(parts) != 3:
        return None
    base, pid, token = parts
    if not (pid.isascii() and pid.isdigit() and pid[0] != "0") or len(token) != 8 or not _HEX.issuperset(token):
        return None
    if not base.endswith(RECORD_SUFFIX):
        return None
    name = base[: -len(RECORD_SUFFIX)]
    try:
        return validate_name(name)
    except BadName:
        return None


def record_temp_files(paths: SessionPaths) -> list[str]:
    """Leftover record temp files of this session: regular files only (lstat; a symlink never counts)."""
    found: list[str] = []
    try:
        entries = os.scandir(paths.dir)
    except OSError:
        return found
    with entries:
        for entry in entries:
            if temp_file_session(entry.name) == paths.name:
                try:
                    if entry.is_file(follow_symlinks=False):
                        found.append(entry.path)
                except OSError:
                    continue
    return sorted(found)


def remove_record_temps(paths: SessionPaths) -> list[str]:
    """Remove this session's leftover record temp files (only while nobody else may write its record:
    under its lock); returns those removed."""
    return [path for path in record_temp_files(paths) if unlink_if_regular(path)]


def session_names(directory: str | os.PathLike[str]) -> list[str]:
    """Every name that has a record, socket, lock or log file in ``directory``, or a record temp file a
    killed writer left (``.NAME.json.<pid>.<hex>.tmp``, a regular file), sorted: a session that left only
    some of its files behind is still seen, and can be cleaned."""
    names: set[str] = set()
    try:
        entries = os.scandir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    with entries:
        for entry in entries:
            temp_of = temp_file_session(entry.name)
            if temp_of is not None and entry.is_file(follow_symlinks=False):
                names.add(temp_of)
            for suffix in (RECORD_SUFFIX, SOCKET_SUFFIX, LOCK_SUFFIX, LOG_SUFFIX):
                if entry.name.endswith(suffix):
                    with contextlib.suppress(BadName):
                        names.add(validate_name(entry.name[: -len(suffix)]))
    return sorted(names)


def session_files(paths: SessionPaths) -> list[str]:
    """Every file of this session that exists, of any type (lstat): socket, record, lock, log and its
    rotation, and leftover record temp files."""
    present = [p for p in (paths.socket, paths.record, paths.lock, paths.log, paths.log + ".1")
               if os.path.lexists(p)]
    return present + record_temp_files(paths)


def file_kind(path: str | os.PathLike[str]) -> str | None:
    """What is at ``path`` without following a symlink ("a symlink", "a directory", ...); None if nothing."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    for test, kind in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a regular file"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a FIFO")):
        if test(mode):
            return kind
    return "a device file"


def advice(exc: OSError) -> str:
    """What to do about an error on a session file, as a clause to append after "; " ("" if none)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the filesystem is full: free some space on it, or use another runtime directory (--dir)"
    if exc.errno == errno.ELOOP:
        return "it is a symlink, which shellper never follows: remove it"
    if exc.errno == errno.EROFS:
        return "the filesystem is read-only: use another runtime directory (--dir)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "check the owner and mode of the file and of its directory"
    return ""


def describe_error(exc: OSError) -> str:
    """``exc``'s reason, then what to do about it: one clause for a message that already names the path."""
    reason = exc.strerror or str(exc)
    hint = advice(exc)
    return f"{reason}; {hint}" if hint else reason


def socket_error(path: str, exc: OSError) -> SessionFileError:
    """Why the session socket could not be bound at ``path``: a file in the way (start-up removes only
    a stale socket, so EADDRINUSE means something else sits there), or ``exc`` with advice."""
    kind = file_kind(path)
    if exc.errno == errno.EADDRINUSE and kind not in (None, "a socket"):
        return SessionFileError("session socket", path, f"{kind} is in the way; shellper never follows, replaces "
                                "or removes anything but a stale socket there: remove it")
    return SessionFileError("session socket", path, f"cannot create it: {describe_error(exc)}")
