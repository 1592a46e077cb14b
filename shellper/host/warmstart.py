"""What the warm launcher and its callers share: where it listens, which code it runs, and the one message each
way (shellper.daemon.launcher serves it, shellper.client.warm asks it).

A request is one length-prefixed JSON message on a Unix stream socket, with the readiness pipe's write end
passed alongside it (SCM_RIGHTS): the session reports readiness straight to its caller, as a cold start's
does. The config, the environment and everything else of the caller's travel in the message, never in any
process's argv (docs/DESIGN.md, "The warm launcher").
"""

from __future__ import annotations

import _socket  # not socket.py: a `run`'s quick path sends its request without it (shellper.host.trust)
import os
import struct

import shellper
from shellper.core.errors import ShellperError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any

LAUNCHER_ENV = "SHELLPER_LAUNCHER"
"""``off`` (or 0, no, false): never use nor start a launcher (every launch is a cold start); anything else, unset
included, uses one."""
SOCKET_NAME = ".launcher.sock"
"""In the runtime directory; a leading dot is no session name, so nothing takes it for one."""
LOCK_NAME = ".launcher.lock"
"""Held (flock) by the one live launcher; holds its pid, start ticks and stamp as JSON, for ``ls --json``."""
LOG_NAME = ".launcher.log"
"""What the launcher, and a caller that fell back to a cold start, have to say (a line per event): made by the
launcher as it starts, beside its socket, and removed with it."""
IDLE_EXIT = 600.0
"""LAUNCHER_IDLE_EXIT: a launcher that started nothing for ten minutes exits (its one timer)."""
MAX_MESSAGE = 1 << 20
"""A request (config and environment) bigger than this is refused: the caller starts cold."""
RLIMITS = ("RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_LOCKS", "RLIMIT_MEMLOCK",
           "RLIMIT_MSGQUEUE", "RLIMIT_NICE", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_RTPRIO", "RLIMIT_RTTIME",
           "RLIMIT_SIGPENDING", "RLIMIT_STACK")
NAMESPACES = ("mnt", "pid", "user", "net", "cgroup", "ipc", "uts")
"""A caller in another of these than the launcher's starts cold: a session must live where its caller does."""
_LENGTH = struct.Struct("!I")


class LauncherError(ShellperError):
    """The launcher could not be used for this launch: the caller starts cold (and says why, once)."""


def enabled() -> bool:
    """Whether launches go through the warm launcher: unless ``SHELLPER_LAUNCHER=off`` (docs/DESIGN.md, "The warm
    launcher")."""
    return os.environ.get(LAUNCHER_ENV, "").lower() not in ("off", "0", "no", "false")


def code_identity() -> str:
    """Which code a caller runs, as its request says it: the version, the package's directory and that
    directory's device and inode (one stat: a tree put in its place is another). A launcher runs the same code
    while it also saw no change under that directory since it started (it watches it: shellper.daemon.launcher),
    which :func:`package_stamp` (a walk of every file) would tell a caller only at the price of that walk on each
    launch."""
    root = _root()
    st = os.stat(root)
    return f"{shellper.__version__}:{root}:{st.st_dev}:{st.st_ino}"


def package_dirs() -> list[str]:
    """The package's directories, as :func:`package_stamp` walks them (not ``__pycache__``, nor a linked one)."""
    found = []
    for directory, subdirs, _ in os.walk(_root()):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        found.append(directory)
    return found


def _root() -> str:
    return os.path.dirname(os.path.abspath(shellper.__file__))


def package_stamp() -> str:
    """Which code this process runs: the version and a hash of every file of the package (path, size,
    mtime), so an upgrade or an edit in place makes a launcher started before it stale."""
    try:  # the builtin module: hashlib would load OpenSSL, 10-30 ms of a `shellper run`
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - an interpreter built without it
        from hashlib import sha256

    root = _root()
    lines: list[str] = []
    _stamp_lines(root, "", lines)
    digest = sha256(shellper.__version__.encode())
    digest.update("".join(lines).encode())
    return f"{shellper.__version__}-{digest.hexdigest()[:16]}"


def _stamp_lines(root: str, below: str, lines: list[str]) -> None:
    """``below/NAME.py:size:mtime_ns`` of each module in ``root + below``, then of its subpackages (sorted, but
    ``__pycache__``), as os.walk visits them; one scandir a directory and a stat relative to it a file, half
    of what os.walk took (a launcher's start and ``ls --json`` take it; a request carries code_identity)."""
    try:
        with os.scandir(root + below) as it:
            entries = sorted((entry.name, entry) for entry in it)
    except OSError:  # as os.walk: a directory it cannot list is left out
        return
    subdirs = []
    for name, entry in entries:
        if entry.is_dir():
            if name != "__pycache__" and not entry.is_symlink():  # os.walk lists, never enters, a linked one
                subdirs.append(name)
        elif name.endswith(".py"):
            st = entry.stat()
            lines.append(f"{below}/{name}:{st.st_size}:{st.st_mtime_ns}\n")
    for name in subdirs:
        _stamp_lines(root, f"{below}/{name}", lines)


def caller_state() -> dict[str, Any]:
    """What a forked session must take from its caller rather than from the launcher: the process's own
    environment (os.environ: the cgroup parent, TZ, ...), working directory, umask, rlimits and nice value."""
    import resource

    mask = os.umask(0o077)
    os.umask(mask)
    limits = {}
    for name in RLIMITS:
        which = getattr(resource, name, None)
        if which is not None:
            limits[name] = list(resource.getrlimit(which))
    return {"environ": dict(os.environ), "cwd": os.getcwd(), "umask": mask, "rlimits": limits,
            "nice": os.getpriority(os.PRIO_PROCESS, 0)}


def send_message(sock: _socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> None:
    import json

    data = json.dumps(message).encode()
    payload = _LENGTH.pack(len(data)) + data
    rights = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    sent = sock.sendmsg([payload], rights)  # socket.send_fds, without socket.py
    if sent < len(payload):
        sock.sendall(payload[sent:])


def recv_message(sock: _socket.socket, *, with_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """One message and the descriptors that came with its first bytes (the caller closes them)."""
    import json

    fds: list[int] = []
    if with_fds:
        import socket  # the launcher's side: it has it already

        data, fds, flags, _ = socket.recv_fds(sock, 65536, with_fds, socket.MSG_CMSG_CLOEXEC)  # type: ignore[arg-type]
        if flags & socket.MSG_CTRUNC:
            _close(fds)
            raise LauncherError("launcher: descriptors cut off")
    else:
        data = sock.recv(65536)
    if not data and not fds:
        raise EOFError("closed before a message")  # a probe: nothing to answer, nothing to log
    buf = bytearray(data)
    try:
        while len(buf) < _LENGTH.size:
            buf += _recv_some(sock)
        (length,) = _LENGTH.unpack_from(buf)
        if length > MAX_MESSAGE:
            raise LauncherError(f"launcher: a message of {length} bytes")
        while len(buf) < _LENGTH.size + length:
            buf += _recv_some(sock)
        message = json.loads(bytes(buf[_LENGTH.size:_LENGTH.size + length]))
        if not isinstance(message, dict):
            raise LauncherError("launcher: a message that is not an object")
    except BaseException:
        _close(fds)
        raise
    return message, fds


def _recv_some(sock: _socket.socket) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise LauncherError("launcher: the other end closed mid-message")
    return chunk


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def log_line(directory: str, text: str, *, create: bool = False) -> bool:
    """Append one line to the launcher's log in ``directory``, which only a starting launcher creates
    (``create``) and removes as it exits: where no launcher made one, the line goes nowhere (a caller's fallback
    leaves no file behind). Never through a symlink; errors ignored. Whether the line was written."""
    import time

    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_CREAT if create else 0)
    try:
        fd = os.open(os.path.join(directory, LOG_NAME), flags, 0o600)
    except OSError:
        return False
    try:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        os.write(fd, f"{stamp} [{os.getpid()}] {text}\n".encode(errors="replace"))
    except OSError:
        pass
    finally:
        os.close(fd)
    return True


def launcher_status(directory: str) -> dict[str, Any] | None:
    """The live launcher of ``directory`` as ``ls --json`` would show it under a key of its own (pid, start
    ticks, stamp, socket, idle exit, and whether it runs this process's code), or None if none runs: its
    lock file counts only while the pid it names has the start ticks it names (a killed launcher's is
    stale). Never locks the file: a launcher starting then would find it held, and give up."""
    import json

    from shellper.host.identity import read_stat

    try:
        fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        about = json.loads(os.pread(fd, 65536, 0) or b"null")
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(about, dict) or not isinstance(about.get("pid"), int):
        return None
    stat = read_stat(about["pid"])
    if stat is None or stat.start_time != about.get("start_time") or stat.state == "Z":
        return None
    about["current"] = about.get("stamp") == package_stamp()
    return about
