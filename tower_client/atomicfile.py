"""Whole-file replacement that a crash at any moment leaves either the old or the new content.

The Tower's registry and its consumed-position journal are both rewritten this way: the new content
goes to a temporary file in the same directory, is fsync'd, renamed over the old one, and the directory
is fsync'd so the rename itself survives a power cut. A reader therefore never sees a torn file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

from shellper.core.errors import ShellperError

__all__ = ["AtomicWriteError", "read_small", "write_atomic"]


class AtomicWriteError(ShellperError, OSError):
    """The file could not be replaced; the old content (if any) is untouched."""


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync of the directory."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, target)
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise AtomicWriteError(exc.errno, f"cannot write {target}: {exc.strerror or exc}") from None


def read_small(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """The content of a regular file of at most ``limit`` bytes; None if it does not exist.

    OSError for anything else that is wrong (not a regular file, too large, unreadable): the callers
    turn it into their own error naming the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not hang us
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        chunks: list[bytes] = []
        total = 0
        while total <= limit and (chunk := os.read(fd, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise OSError(0, f"larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
