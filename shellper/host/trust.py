"""Every client's way to a session socket: refuse a directory others could have planted it in, and a server
that is not ours, before a byte (or a terminal) is sent.

:func:`connect_session` is the one blocking connect (the CLI's and the library's clients, attach, the
bridge a remote client runs); the asyncio client runs the same three checks around its own non-blocking
connect. The rules are :mod:`shellper.core.trust`'s. The directory check gives the clear message (who owns
it, why it is refused); the server's SO_PEERCRED uid is what holds even if the directory is swapped between
the check and the connect. Plain strings and no heavy imports: ``shellper attach`` and the bridge start here.
"""

from __future__ import annotations

import _socket  # the C module alone: socket.py (with selectors, array and four enums) costs a warm `run` ~3 ms
import os
import stat
import struct

from shellper.core.trust import NotASocket, UntrustedSocket, dir_refusal, peer_refusal

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import socket

_UCRED = struct.Struct("3i")
"""struct ucred: pid, uid, gid."""


def check_socket_dir(path: str) -> None:
    """UntrustedSocket if the directory holding the socket ``path`` exists and is not ours alone (the rule
    ``run`` applies to the directory it creates). A missing one passes: connect() then says no session."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        st = os.lstat(directory)
    except OSError:
        return  # nothing there, or not ours to look into: connect() fails and says so
    why = dir_refusal(directory, st.st_mode, st.st_uid, os.geteuid())
    if why is not None:
        raise UntrustedSocket(path, st.st_uid, f"its directory {directory} {why}")


def check_socket_file(path: str) -> None:
    """NotASocket if lstat finds a symlink or another non-socket at ``path``: connect() would follow a
    symlink to whatever it names, and report a file as "nothing is listening"."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return  # connect() says what is wrong
    if stat.S_ISLNK(mode):
        raise NotASocket(path, "is a symlink, not a session socket; shellper never connects through one: "
                         "remove it if it is not needed")
    if not stat.S_ISSOCK(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a regular file" if stat.S_ISREG(mode) else "a FIFO or device"
        raise NotASocket(path, f"is {kind}, not a session socket: remove it if it is not needed")


def peer_uid(sock: _socket.socket) -> int | None:
    """The uid of the process at the other end of a connected Unix socket (SO_PEERCRED), None if unreadable
    or if there is no peer (pid 0: a connect() that did not complete)."""
    try:
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _UCRED.size)
    except OSError:
        return None
    pid, uid, _ = _UCRED.unpack(creds)
    return int(uid) if pid > 0 else None


def check_server(sock: _socket.socket, path: str) -> None:
    """UntrustedSocket if the process that serves the connected ``sock`` is not ours; the socket is then
    closed, so nothing can be sent on it."""
    uid = peer_uid(sock)
    why = "its server's credentials cannot be read (SO_PEERCRED)" if uid is None else peer_refusal(uid, os.geteuid())
    if why is not None:
        sock.close()
        raise UntrustedSocket(path, uid, f"it {why}" if uid is not None else why)


def connect_session(path: str, timeout: float | None) -> socket.socket:
    """A blocking socket connected to the session socket at ``path`` once the directory, the file and the
    server have passed; UntrustedSocket or NotASocket if not, the OSError of connect() if it failed (the
    caller words it). Nothing is left open on failure."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    _connect_checked(sock, path, timeout)
    return sock


def connect_session_plain(path: str, timeout: float | None) -> _socket.socket:
    """:func:`connect_session` without socket.py: the C module's socket (no ``with``, no makefile), for the warm
    launcher's one request on a `run`'s quick path (shellper.client.warm). The same checks, in the same order."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    _connect_checked(sock, path, timeout)
    return sock


def _connect_checked(sock: _socket.socket, path: str, timeout: float | None) -> None:
    """Check the directory and the file, connect ``sock`` (closed on any failure), then check the server."""
    try:
        check_socket_dir(path)
        check_socket_file(path)
        sock.settimeout(timeout)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    check_server(sock, path)
