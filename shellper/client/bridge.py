"""``shellper bridge NAME``: a session's socket on stdin and stdout, byte for byte.

The remote end of an ssh channel: a Tower or ``shellper.client.remote`` speaks the protocol through it to a
shellper on another host. The bridge runs as the remote user, so the shellper's peer-credential checks
see that user, as for any local client; it reads and writes nothing of its own on the stream. It connects
only as every client does (shellper.host.trust), and refuses otherwise before reading its stdin.

Every connection to a remote session starts one, so the console script runs it without argparse or the
protocol's codec (:func:`quick_main`; bench/NOTES.md, "Sessions over ssh"): it imports the socket and
the runtime directory's rules, no more.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import sys

from shellper.core.errors import ShellperError
from shellper.host.trust import connect_session

CHUNK = 256 * 1024
"""Bytes moved per read, each way."""


class BridgeError(ShellperError):
    """The session's socket could not be connected to; the message says why, in the words the CLI uses
    (``no such session socket``, which shellper.client.remote reads as SessionNotFound)."""


def bridge(path: str, infd: int = 0, outfd: int = 1, timeout: float = 5.0) -> int:
    """Connect to the session socket at ``path`` and copy ``infd`` to it and it to ``outfd`` until the
    shellper closes the connection (0) or the far side of ``outfd`` goes away (0 too: it left).
    An end-of-file on ``infd`` is passed on as a half close; the shellper then ends the connection."""
    sock = _connect(path, timeout)
    sock.setblocking(True)
    sfd = sock.fileno()
    reading = [infd, sfd]
    try:
        while True:
            ready, _, _ = select.select(reading, [], [])
            if sfd in ready:
                data = _read(sfd)
                if not data or not _write_all(outfd, data):
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


def _connect(path: str, timeout: float) -> socket.socket:
    """A connected socket, checked as every client's is (shellper.host.trust): its directory ours alone,
    not a symlink, served by us. What a remote Tower sends through (a SPAWN's environment, keys) never
    reaches a socket another user planted."""
    try:
        return connect_session(path, timeout)
    except OSError as exc:
        why = {FileNotFoundError: "no such session socket", ConnectionRefusedError: "nothing is listening "
               "(stale socket)", TimeoutError: f"connect timed out after {timeout:g} s"}.get(type(exc))
        raise BridgeError(f"{path}: {why or exc.strerror or exc}") from None


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


def quick_main(directory: str | None, name: str) -> int:
    """``shellper [--dir D] bridge NAME`` from the console script, without the CLI."""
    from shellper.core.names import socket_path, validate_name
    from shellper.host.paths import runtime_dir

    try:
        validate_name(name)
        return bridge(socket_path(runtime_dir(directory), name))
    except (ShellperError, ValueError) as exc:
        print(f"shellper: session {name!r}: {exc}", file=sys.stderr)
        return 1
