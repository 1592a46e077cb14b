"""inotify through ctypes: the kernel tells the Tower when a runtime directory changes (no timed scan).

:class:`DirWatch` watches one directory and hands each change (a file name and what happened to it)
to a callback from the event loop, through ``loop.add_reader`` on the inotify descriptor: an idle
Tower costs nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntFlag

from shellper.core.errors import ShellperError

__all__ = ["Change", "DirWatch", "InotifyError", "Mask", "parse_events"]

IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


class Mask(IntFlag):
    MODIFY = 0x2
    CLOSE_WRITE = 0x8
    MOVED_FROM = 0x40
    MOVED_TO = 0x80
    CREATE = 0x100
    DELETE = 0x200
    DELETE_SELF = 0x400
    MOVE_SELF = 0x800
    Q_OVERFLOW = 0x4000
    IGNORED = 0x8000
    ONLYDIR = 0x01000000
    DONT_FOLLOW = 0x02000000


WATCH_MASK = (Mask.CLOSE_WRITE | Mask.MOVED_FROM | Mask.MOVED_TO | Mask.CREATE | Mask.DELETE | Mask.DELETE_SELF
              | Mask.MOVE_SELF | Mask.ONLYDIR | Mask.DONT_FOLLOW)


class InotifyError(ShellperError, OSError):
    """inotify is not available or the directory cannot be watched."""


@dataclass(frozen=True)
class Change:
    """One change in the watched directory: ``name`` (empty for the directory itself) and ``mask``."""

    name: str
    mask: Mask

    @property
    def removed(self) -> bool:
        return bool(self.mask & (Mask.DELETE | Mask.MOVED_FROM))

    @property
    def written(self) -> bool:
        """A file appeared complete: created, closed after writing, or renamed into the directory."""
        return bool(self.mask & (Mask.CLOSE_WRITE | Mask.MOVED_TO | Mask.CREATE))

    @property
    def overflow(self) -> bool:
        """The kernel dropped events: the watcher must look at the directory again."""
        return bool(self.mask & Mask.Q_OVERFLOW)

    @property
    def directory_gone(self) -> bool:
        return bool(self.mask & (Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.IGNORED))


def parse_events(buf: bytes) -> list[Change]:
    """The changes in one read of an inotify descriptor (pure)."""
    out: list[Change] = []
    pos = 0
    while pos + _HEADER.size <= len(buf):
        _wd, mask, _cookie, length = _HEADER.unpack_from(buf, pos)
        pos += _HEADER.size
        name = buf[pos:pos + length].split(b"\0", 1)[0].decode(errors="surrogateescape")
        pos += length
        out.append(Change(name, Mask(mask)))
    return out


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_init1.restype = ctypes.c_int
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_add_watch.restype = ctypes.c_int
        _libc = libc
    return _libc


class DirWatch:
    """Watch ``directory``; ``callback(changes)`` runs on the loop for every batch the kernel reports."""

    def __init__(self, directory: str | os.PathLike[str], callback: Callable[[list[Change]], None]) -> None:
        self.directory = os.fspath(directory)
        self.callback = callback
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        lib = _lib()
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise InotifyError(err, f"inotify_init1: {os.strerror(err)}")
        if lib.inotify_add_watch(fd, os.fsencode(self.directory), int(WATCH_MASK)) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise InotifyError(err, f"cannot watch {self.directory}: {os.strerror(err)}")
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        changes: list[Change] = []
        while True:
            try:
                buf = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                break
            if not buf:
                break
            changes.extend(parse_events(buf))
        if changes:
            self.callback(changes)

    def close(self) -> None:
        if self._fd >= 0:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
