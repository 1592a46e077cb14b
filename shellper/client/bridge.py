"""``shellper bridge NAME``: a session's socket on stdin and stdout, byte for byte.

The remote end of an ssh channel: a Tower or ``shellper.client.remote`` speaks the protocol through it to a
shellper on another host. The bridge runs as the remote user, so the shellper's peer-credential checks
see that user, as for any local client; it reads and writes nothing of its own on the stream.
"""

from __future__ import annotations

import errno
import os
import select
import socket

from shellper.client.blocking import _check_not_a_link
from shellper.protocol.connection import connect_error

CHUNK = 256 * 1024
"""Bytes moved per read: a full PTY batch of the shellper's (bench/NOTES.md, "Remote: the bridge")."""


def bridge(path: str, infd: int = 0, outfd: int = 1, timeout: float = 5.0) -> int:
    """Connect to the session socket at ``path`` and copy ``infd`` to it and it to ``outfd`` until the
    shellper closes the connection (0) or the far side of ``outfd`` goes away (0 too: it left).
    An end-of-file on ``infd`` is passed on as a half close; the shellper then ends the connection."""
    _check_not_a_link(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise connect_error(path, exc, timeout) from None
    sock.setblocking(True)
    sfd = sock.fileno()
    reading = [infd, sfd]
    try:
        while True:
            ready, _, _ = select.select(reading, [], [])
            if sfd in ready:
                data = _read(sfd)
                if not data:
                    return 0
                if not _write_all(outfd, data):
                    return 0
            if infd in ready:
                data = _read(infd)
                if not data:
                    sock.shutdown(socket.SHUT_WR)
                    reading.remove(infd)
                elif not _write_all(sfd, data):
                    return 0
    finally:
        sock.close()


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, CHUNK)
    except OSError as exc:
        if exc.errno in (errno.ECONNRESET, errno.EIO):
            return b""
        raise


def _write_all(fd: int, data: bytes) -> bool:
    """False when the reader has gone (EPIPE, ECONNRESET)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True
