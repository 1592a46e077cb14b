"""The shellper's own diagnostics log: size-capped, rotated, and unable to kill its writer.

A full disk or a removed directory must not take down the process that holds a user's session, so
:meth:`LogFile.write` never raises: lines that cannot be written are counted, and the count is
reported in the next line that can be. Format: ``[2026-01-02T03:04:05.678Z] message``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import time

from shellper.core.terminal.text import printable
from shellper.host.paths import open_nofollow

DEFAULT_MAX_BYTES = 1024 * 1024
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT


def _timestamp() -> str:
    """UTC to the millisecond, with time rather than datetime (which ``shellper run`` need not import)."""
    ms = time.time_ns() // 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def format_line(message: str, *, limit: int | None = None) -> bytes:
    """One log record; continuation lines are indented so every record starts with '['. A control character
    (an escape sequence's ESC, a C1 control, a CR) is written as its escape: a reason may quote what a
    program wrote or the command it was started with, and ``cat NAME.log`` must show it, not obey it."""
    text = "\n  ".join(map(printable, message.rstrip("\n").split("\n")))
    line = f"[{_timestamp()}] {text}\n".encode("utf-8", "backslashreplace")
    if limit is not None and len(line) > limit:
        marker = b"... [truncated]\n"
        line = line[: max(0, limit - len(marker))] + marker
    return line


class LogFile:
    """Append-only log at ``path``, rotated to ``path.1`` .. ``path.<keep>`` before it exceeds ``max_bytes``.

    With ``capture_stdio`` the log is also dup2'd onto fds 1 and 2 (again after every rotation), so
    stray prints and interpreter tracebacks land in the current file. ``keep=0`` truncates instead
    of keeping an old file. Not locked: the shellper's one thread writes it (signal handlers only note
    the signal for the loop).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: int = 1,
        *,
        capture_stdio: bool = False,
    ) -> None:
        if max_bytes < 256:
            raise ValueError(f"max_bytes must be at least 256, got {max_bytes}")
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        self.path = os.fspath(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.capture_stdio = capture_stdio
        self.dropped = 0
        """Lines lost since the last successful write (reported, then reset)."""
        self.last_error: OSError | None = None
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = open_nofollow(self.path, _APPEND_FLAGS, 0o600)
            if self.capture_stdio:
                _dup_onto_stdio(self._fd)
        return self._fd

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)

    def _rotate(self, fd: int) -> None:
        if self.keep == 0:
            os.ftruncate(fd, 0)  # O_APPEND writes then start again at offset 0
            return
        self._close_fd()
        for i in range(self.keep - 1, 0, -1):
            older = f"{self.path}.{i}"
            if os.path.lexists(older):
                os.replace(older, f"{self.path}.{i + 1}")
        os.replace(self.path, f"{self.path}.1")

    def _write_line(self, line: bytes) -> None:
        fd = self._open()
        size = os.fstat(fd).st_size  # fstat, not a counter: fds 1/2 may also append to the file
        if size > 0 and size + len(line) > self.max_bytes:
            self._rotate(fd)
            fd = self._open()
        view = memoryview(line)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def write(self, message: str) -> bool:
        """Append one timestamped line; returns False (and counts the drop) instead of raising."""
        try:
            if self.dropped:
                why = self.last_error.strerror if self.last_error else "unknown error"
                note = f"log: {self.dropped} line(s) dropped while the log was unwritable ({why})"
                self._write_line(format_line(note, limit=self.max_bytes))
                self.dropped = 0
                self.last_error = None
            self._write_line(format_line(message, limit=self.max_bytes))
            return True
        except OSError as e:
            self.dropped += 1
            self.last_error = e
            self._close_fd()  # reopen next time: the file may have been removed or the disk freed
            return False
        except Exception:  # never let logging take the shellper down
            self.dropped += 1
            self._close_fd()
            return False

    def close(self) -> None:
        self._close_fd()


def _dup_onto_stdio(fd: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def redirect_stdio(log_path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """Point fd 0 at /dev/null and fds 1, 2 at ``log_path`` (O_APPEND), so a detached shellper never
    writes into a closed pipe or a terminal it no longer owns (the original crashed so: bench/NOTES.md,
    "Incidents behind the defaults").

    Returns the log's (st_dev, st_ino) if this call created it, else None: a launch that fails removes
    the log only if it made it. A symlink (ELOOP) or anything but a regular file raises OSError."""
    fd, created = _open_log(os.fspath(log_path))
    try:
        _dup_onto_stdio(fd)
    finally:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    return created


def _open_log(path: str) -> tuple[int, tuple[int, int] | None]:
    """Open (or create, then say so) the log for appending; O_NONBLOCK so a FIFO there cannot hang us."""
    while True:
        try:
            fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
            created = False
        except OSError as e:
            if e.errno == errno.ENXIO:  # a FIFO nobody reads
                raise OSError(errno.EINVAL, "not a regular file", path) from e
            if e.errno != errno.ENOENT:
                raise
            try:
                fd = open_nofollow(path, _APPEND_FLAGS | os.O_EXCL, 0o600)
            except FileExistsError:  # created meanwhile: open that one
                continue
            created = True
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
        return fd, ((st.st_dev, st.st_ino) if created else None)


def remove_created_log(log_path: str | os.PathLike[str], created: tuple[int, int]) -> bool:
    """Remove the log a failed launch created, only if the path still names that file; True if removed."""
    path = os.fspath(log_path)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if (st.st_dev, st.st_ino) != created or not stat.S_ISREG(st.st_mode):
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return True


LOGS_DIR = "logs"
"""Where a stopped session's log goes, inside the runtime directory: ``logs/NAME.log``."""
STOPPED_LOG_DAYS = 7
"""Logs of sessions stopped longer ago than this are removed by the next stop in the directory."""


def keep_stopped_log(directory: str, name: str, now: float | None = None) -> str | None:
    """Move ``NAME.log`` to ``logs/NAME.log`` when its session stops (the one before to ``logs/NAME.log.1``;
    the live rotation ``NAME.log.1`` goes), and remove kept logs older than :data:`STOPPED_LOG_DAYS`.

    The session's name stays free of files, and what it said on the way out can still be read. Only a
    ``logs`` directory that is ours and private is used; the moves happen inside directory fds, so no
    symlink is followed. Returns the kept log's path, or None when there is no ``NAME.log`` to keep (a
    legacy session's log is whatever file its Tower gave it as stderr, maybe another or none): then
    ``logs/NAME.log`` is left as it is. Raises OSError (the caller then removes the log)."""
    logs = os.path.join(directory, LOGS_DIR)
    with contextlib.suppress(FileExistsError):
        os.mkdir(logs, 0o700)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        logs_fd = os.open(LOGS_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            st = os.fstat(logs_fd)
            if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
                raise OSError(errno.EPERM, "not a private directory of ours", logs)
            log = f"{name}.log"
            try:
                os.stat(log, dir_fd=dir_fd, follow_symlinks=False)
                present = True
            except FileNotFoundError:
                present = False
            if present:
                with contextlib.suppress(FileNotFoundError):
                    os.rename(log, f"{log}.1", src_dir_fd=logs_fd, dst_dir_fd=logs_fd)
                try:
                    os.rename(log, log, src_dir_fd=dir_fd, dst_dir_fd=logs_fd)
                except OSError as exc:  # its message would read 'NAME.log' -> 'NAME.log': name the directories
                    raise OSError(exc.errno, exc.strerror, os.path.join(directory, log), None,
                                  os.path.join(logs, log)) from None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{log}.1", dir_fd=dir_fd)
            _prune(logs_fd, (time.time() if now is None else now) - STOPPED_LOG_DAYS * 86400)
        finally:
            os.close(logs_fd)
    finally:
        os.close(dir_fd)
    return os.path.join(logs, f"{name}.log") if present else None


def _prune(logs_fd: int, older_than: float) -> None:
    with os.scandir(logs_fd) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_mtime < older_than:
                    os.unlink(entry.name, dir_fd=logs_fd)
