"""``python -P -m shellper.daemon.launcher DIR``: the warm launcher, one per runtime directory and user.

It imports the daemon once, collects and freezes its heap (``gc.freeze()``: the forked sessions then share
those pages instead of copying them when a collection touches them), and forks each new session's shellper
on request over ``DIR/.launcher.sock`` (shellper.host.warmstart has the message). A forked session is what a
cold start makes: an intermediate in a session of its own forks the daemon and exits, so the daemon is
nobody's child and outlives the launcher; it takes its caller's environment, working directory, umask,
rlimits and nice value, and nothing of the launcher's (no descriptor but its readiness pipe and stdio, an
empty signal mask; the launcher changes no signal disposition, so a fresh interpreter's are what it has).

Refused (the caller starts cold): another uid (SO_PEERCRED), a caller in another namespace or cgroup than
the launcher's, limits the launcher cannot give, and a caller whose code differs (its stamp): then the
launcher also exits, to be replaced. It exits, removing its socket, after IDLE_EXIT seconds without a
request (its one timer: idle, it sleeps in poll), when its socket or directory is removed or replaced
(inotify), on SIGTERM (SIGINT, SIGHUP), and on SIGKILL like any process (a socket left behind is replaced by the
next one). It is contained on its own: a leaf of its own under the shellper cgroup parent, not its caller's
cgroup (shellper.host.launchercgroup); a session it forks is placed as a cold one is (a contained one makes its
own leaf, an uncontained one goes back to the caller's cgroup). On
exit it removes every file it made (socket, log, lock) and its leaf; once someone else removed any of its
files or the directory, it touches nothing there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
import time

from shellper.core.trust import dir_refusal
from shellper.host import warmstart
from shellper.host.identity import read_stat
from shellper.host.launchercgroup import LauncherCgroup
from shellper.host.paths import unlink_if_socket

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any

PREWARM = ("shellper.daemon.main", "shellper.daemon.session", "shellper.core.config", "shellper.daemon.clientconn",
           "shellper.core.terminal.screen", "shellper.core.terminal.render", "shellper.protocol.wire",
           "shellper.host.child", "shellper.daemon.tree", "shellper.protocol.legacy", "shellper.daemon.legacyconn",
           "msgpack", "pwd", "resource")
"""What the launcher imports before it freezes its heap: a session's own imports and those it makes on first
use (the screen model and its renderer, the legacy codec), which a forked session then shares instead of
loading privately. tests/test_start_up_imports.py holds it to what a session loads."""
_UCRED = struct.Struct("3i")
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_DELETE, _IN_MOVED_FROM, _IN_MOVED_TO = 0x400, 0x800, 0x200, 0x40, 0x80
_IN_IGNORED = 0x8000
_IN_MODIFY, _IN_ATTRIB, _IN_CREATE, _IN_Q_OVERFLOW, _IN_ISDIR = 0x2, 0x4, 0x100, 0x4000, 0x40000000
_IN_ONLYDIR = 0x01000000
_CODE_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_DELETE_SELF
              | _IN_MOVE_SELF | _IN_ONLYDIR)
"""What changes the package's code as warmstart.package_stamp sees it: a module written, touched, added, removed
or renamed, a directory added or removed, the package directory itself removed or moved."""
_IN_EVENT = struct.Struct("iIII")
_OUR_NAMES = {warmstart.SOCKET_NAME, warmstart.LOCK_NAME}
_KEPT_ENV = {"PYTHONPATH", "LC_CTYPE", "SHELLPER_CGROUP_PARENT"}
"""What a launcher's environment may hold: what finds the package, what the interpreter itself sets when it
coerces a C locale (else each exec would add it again), and the cgroup parent its leaf goes under."""
_EXIT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Each ends the launcher as its idle exit does (its files and leaf removed); a forked session resets them."""


_BEFORE: dict[int, Any] = {}
"""The interpreter's own handlers of _EXIT_SIGNALS, which a forked session gets back."""


class _Ended(BaseException):
    """Raised by the launcher's handler of _EXIT_SIGNALS, wherever it was: the launcher cleans up and exits."""


def _ended(signum: int, frame: object) -> None:
    raise _Ended(signal.Signals(signum).name)


class Launcher:
    """The resident process's state: its socket, lock, directory watch and the stamp of the code it runs."""

    def __init__(self, directory: str, stamp: str, identity: str, idle: float = warmstart.IDLE_EXIT) -> None:
        self.directory = directory
        self.stamp = stamp
        """warmstart.package_stamp() as it started (its lock file says it, for ``ls --json``)."""
        self.identity = identity
        """warmstart.code_identity() as it started: what a caller running the same code sends."""
        self.idle = idle
        self.socket_path = os.path.join(directory, warmstart.SOCKET_NAME)
        self.lock_fd = -1
        self.watch_fd = -1
        """One inotify descriptor: the package's directories (:meth:`watch_code`), then the runtime directory."""
        self.directory_wd = -1
        self.listener: socket.socket | None = None
        self.socket_ino = 0
        self.started = 0
        self.removed = False
        """Its socket, lock or directory was removed: it says nothing more there."""
        with open("/proc/self/cgroup", "rb") as f:
            self.origin = f.read()
        """Its caller's cgroups (/proc/PID/cgroup), read before it moved: a caller elsewhere starts cold."""
        self.cgroup = LauncherCgroup(None, None)
        self.log_made = False

    def watch_code(self) -> None:
        """Watch every directory of the package (warmstart.package_dirs) for a change to its code, before the
        stamp is taken and the modules imported: once one comes, this launcher's code may no longer be what a
        caller runs, and it exits (:meth:`_watched`), so no caller needs the stamp (a walk of the package) to
        tell."""
        self.watch_fd = _inotify_open()
        for directory in warmstart.package_dirs():
            _add_watch(self.watch_fd, directory, _CODE_MASK)

    def claim(self) -> bool:
        """Take the directory's launcher lock; False if another launcher holds it or the directory is not
        ours alone (then this one exits at once)."""
        st = os.lstat(self.directory)
        if dir_refusal(self.directory, st.st_mode, st.st_uid, os.geteuid()) is not None:
            return False
        self.lock_fd = os.open(os.path.join(self.directory, warmstart.LOCK_NAME),
                               os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True

    def listen(self) -> None:
        """Bind the socket, once warm: a caller is never kept waiting on a launcher's own imports."""
        # A socket a launcher killed before it could remove it (we hold the lock): removed before the watch
        # starts, which would take its removal for someone else's.
        unlink_if_socket(self.socket_path)
        self.directory_wd = _add_watch(self.watch_fd, self.directory, _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_DELETE
                                       | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_ONLYDIR)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            listener.bind(self.socket_path)
        finally:
            os.umask(old)
        listener.listen(64)
        self.listener = listener
        self.socket_ino = os.lstat(self.socket_path).st_ino
        # The log is made before the lock file says who serves (warmstart.launcher_status reads that): once a
        # launcher is seen serving, it makes no more files, so removing its directory then cannot race one.
        stays = f"; in its caller's cgroup: {self.cgroup.why}" if self.cgroup.why else ""
        self.log_made = warmstart.log_line(self.directory, f"launcher {os.getpid()} started ({self.stamp}){stays}",
                                           create=True)
        stat = read_stat(os.getpid())
        about = {"pid": os.getpid(), "start_time": stat.start_time if stat else None, "stamp": self.stamp,
                 "socket": self.socket_path, "idle_exit": self.idle}
        os.ftruncate(self.lock_fd, 0)
        os.pwrite(self.lock_fd, json.dumps(about).encode(), 0)

    def serve(self) -> str:
        """Start sessions until idle, replaced or removed; why it stopped."""
        assert self.listener is not None
        poller = select.poll()
        poller.register(self.listener.fileno(), select.POLLIN)
        poller.register(self.watch_fd, select.POLLIN)
        last = time.monotonic()
        while True:
            left = self.idle - (time.monotonic() - last)
            if left <= 0:
                return f"idle for {self.idle:g} s"
            try:
                ready = poller.poll(left * 1000)
            except InterruptedError:
                continue
            for fd, _ in ready:
                if fd == self.watch_fd:
                    why = self._watched()
                    if why:
                        return why
                else:
                    why = self._accept()
                    last = time.monotonic()
                    if why:
                        return why

    def _watched(self) -> str | None:
        try:
            data = os.read(self.watch_fd, 65536)
        except BlockingIOError:
            return None
        offset = 0
        changed = None
        while offset < len(data):
            wd, mask, _, length = _IN_EVENT.unpack_from(data, offset)
            name = data[offset + _IN_EVENT.size:offset + _IN_EVENT.size + length].rstrip(b"\0").decode(errors="replace")
            offset += _IN_EVENT.size + length
            if wd == self.directory_wd:
                if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED) or name in _OUR_NAMES:
                    self.removed = True
                    return f"its {name or 'runtime directory'} was removed or replaced"
            elif mask & (_IN_Q_OVERFLOW | _IN_DELETE_SELF | _IN_MOVE_SELF) or name.endswith(".py") \
                    or (mask & _IN_ISDIR and name != "__pycache__"):
                changed = changed or f"stale: its code changed on disk ({name or 'a package directory'})"
        return changed

    def _accept(self) -> str | None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return None
        with conn:
            conn.settimeout(5.0)
            try:
                return self._request(conn)
            except EOFError:  # connected and closed: someone looking whether a launcher listens
                return None
            except Exception as exc:  # the caller starts cold; the launcher serves on
                # Only the kind of a bad config's error: its text could quote a value of the environment.
                said = str(exc) if isinstance(exc, OSError | warmstart.LauncherError) else type(exc).__name__
                warmstart.log_line(self.directory, f"request failed: {said}")
                return None

    def _request(self, conn: socket.socket) -> str | None:
        pid, uid, _ = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        if uid != os.geteuid():  # never another user's, whatever it sends
            warmstart.log_line(self.directory, f"refused a caller of uid {uid} (pid {pid})")
            return None
        message, fds = warmstart.recv_message(conn, with_fds=1)
        try:
            # A change queued before this caller connected, which poll has not reported yet: never the old code.
            why = self._watched()
            if why is not None and self.removed:
                warmstart.send_message(conn, {"cold": why})
                return why
            if why is not None or message.get("stamp") != self.identity:
                warmstart.send_message(conn, {"stale": why or f"launcher runs {self.identity}, caller "
                                                             f"{message.get('stamp')}"})
                return why or f"stale: a caller runs other code ({message.get('stamp')})"
            refusal = _refusal(pid, message, self.origin) or (None if len(fds) == 1 else "no readiness pipe came")
            if refusal is not None:
                warmstart.send_message(conn, {"cold": refusal})
                return None
            child = _fork_session(message, fds[0], conn.fileno(), self._own_fds(), self.cgroup)
        finally:
            for fd in fds:
                os.close(fd)
        warmstart.send_message(conn, {"ok": True})
        self.started += 1
        with contextlib.suppress(ChildProcessError):  # the intermediate forks the daemon and exits at once
            os.waitpid(child, 0)  # reaped here, so no zombie is kept
        return None

    def _own_fds(self) -> tuple[int, ...]:
        return tuple(fd for fd in (self.lock_fd, self.watch_fd, self.listener.fileno() if self.listener else -1)
                     if fd >= 0)

    def close(self) -> None:
        """Remove the socket (if still ours), the log, its cgroup leaf and the lock file, then let the lock go;
        no file after someone else removed any of them: whoever is removing the directory (or made it anew)
        owns what is in it now. The lock goes last: a launcher starting meanwhile finds it held and exits."""
        if not self.removed:
            try:
                if os.lstat(self.socket_path).st_ino == self.socket_ino:
                    os.unlink(self.socket_path)
            except OSError:
                pass
            if self.log_made:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.directory, warmstart.LOG_NAME))
        self.cgroup.leave()
        if self.lock_fd >= 0 and not self.removed:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.directory, warmstart.LOCK_NAME))


def _refusal(pid: int, message: dict[str, object], origin: bytes) -> str | None:
    """Why the caller ``pid`` must start cold: another namespace or cgroup than the launcher's ``origin`` (where
    it was started, which its sessions go back to), or limits we cannot give."""
    for ns in warmstart.NAMESPACES:
        try:
            if os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"):
                return f"the caller is in another {ns} namespace"
        except FileNotFoundError:
            continue  # a kernel without that namespace kind
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as theirs:
            if theirs.read() != origin:
                return "the caller is in another cgroup"
    except OSError as exc:
        return f"the caller's cgroup cannot be read ({exc.strerror})"
    import resource

    limits = message.get("rlimits")
    if not isinstance(limits, dict):
        return "no rlimits"
    for name, value in limits.items():
        which = getattr(resource, str(name), None)
        if which is None or not isinstance(value, list) or len(value) != 2:
            return f"an rlimit not known here: {name}"
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY and (value[1] == resource.RLIM_INFINITY or value[1] > hard):
            return f"the caller's {name} is above the launcher's"
    nice = message.get("nice")
    if not isinstance(nice, int) or nice < os.getpriority(os.PRIO_PROCESS, 0):
        return "the caller's nice value is below the launcher's"
    return None


def _fork_session(message: dict[str, object], ready_fd: int, conn_fd: int, own: tuple[int, ...],
                  group: LauncherCgroup) -> int:
    """Fork the intermediate that becomes the session (see the module docstring); its pid. It stays in the
    launcher's cgroup: a contained session makes its own leaf from there, an uncontained one goes back to the
    caller's (shellper.host.cgroup.LAUNCHER_ORIGIN), so only those pay a cgroup move on the launch path."""
    from shellper.core.config import SessionConfig

    config = SessionConfig.from_json(str(message["config"]))  # a bad one: refused before any fork
    pid = os.fork()
    if pid:
        return pid
    code = 1  # pragma: no cover - the forked intermediate; it never returns
    try:
        for sig, handler in _BEFORE.items():
            signal.signal(sig, handler)
        for fd in (*own, conn_fd):
            os.close(fd)
        group.origin_for_the_session()
        _take_caller_state(message, ready_fd)
        from shellper.daemon.main import detached_daemon

        code = detached_daemon(config, ready_fd)
    except BaseException:
        pass
    os._exit(code)


def _take_caller_state(message: dict[str, object], ready_fd: int) -> None:  # pragma: no cover - in the fork
    """Become the caller's, as a cold start's process is: session, mask, descriptors, limits, environment."""
    import resource

    os.setsid()
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    os.closerange(3, ready_fd)
    os.closerange(ready_fd + 1, _max_fd())
    os.set_inheritable(ready_fd, False)
    umask = message["umask"]
    assert isinstance(umask, int)
    os.umask(umask)
    limits = message["rlimits"]
    assert isinstance(limits, dict)
    for name, (soft, hard) in limits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    nice = message["nice"]
    assert isinstance(nice, int)
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    environ = message["environ"]
    assert isinstance(environ, dict)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in environ.items()})
    time.tzset()
    try:
        os.chdir(str(message["cwd"]))
    except OSError:
        os.chdir("/")  # a cold start's process would sit in a removed directory; the child gets config.cwd


def _max_fd() -> int:
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY and soft < 1 << 20 else 1 << 20


def _shed_inherited() -> None:
    """Keep nothing of the spawner's beyond stdio that a session could inherit: other descriptors, blocked
    signals, ignored ones (but SIGPIPE and SIGXFSZ, which every Python process ignores), and an environment
    beyond _KEPT_ENV, which stays in /proc/PID/environ of every process forked from us unless we exec
    afresh without it (the environment a session runs with is its caller's, set in the fork)."""
    os.closerange(3, _max_fd())
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for sig in signal.valid_signals():
        if sig not in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL, signal.SIGSTOP) \
                and signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    if set(os.environ) - _KEPT_ENV:
        env = {k: v for k, v in os.environ.items() if k in _KEPT_ENV}
        os.execve(sys.executable, [sys.executable, "-P", "-m", "shellper.daemon.launcher", *sys.argv[1:]], env)


_LIBC: list[Any] = []


def _libc() -> Any:
    """One handle for every inotify call (each ctypes.CDLL makes classes of its own)."""
    import ctypes

    # The process's own symbols (libc's among them), not ctypes.util.find_library: that imports subprocess,
    # threading, tempfile and random, whose at-fork hooks then ran in every session forked (twice: the
    # intermediate and the daemon), copying their pages.
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _inotify_open() -> int:
    """A non-blocking inotify descriptor, without watches yet."""
    import ctypes

    fd = int(_libc().inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    return fd


def _add_watch(fd: int, directory: str, mask: int) -> int:
    """Watch ``directory`` on the inotify descriptor ``fd`` (its watch descriptor)."""
    import ctypes

    wd = int(_libc().inotify_add_watch(fd, os.fsencode(directory), mask))
    if wd < 0:
        raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
    return wd


def warm_up() -> None:
    """What the launcher does once so that its sessions need not after their fork, where each write copies a
    page it shares with the launcher: import what they run (PREWARM), settle its classes, and read what every
    session reads the same (the boot id, cached: reading it imports the ascii codec), and make what every
    session makes the same (the libc handle prctl goes through: a ctypes class of its own each time)."""
    import importlib

    for module in PREWARM:  # what every session runs, and what some load later: shared, not copied
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    from shellper.daemon.settle import settle
    from shellper.host.identity import IdentityError, boot_id
    from shellper.host.reaper import get_child_subreaper

    settle()
    with contextlib.suppress(IdentityError):
        boot_id()
    with contextlib.suppress(OSError):
        get_child_subreaper()  # a query: it loads the libc handle and prctl, which each session made anew


def launcher_main(argv: list[str]) -> int:
    """Entry: shed what the spawner left us, detach (the spawner reaps our first process), claim the
    directory, warm up, serve. ``--stamp`` (tests only) claims to run other code, to be found stale."""
    stamp, idle = "", warmstart.IDLE_EXIT
    while len(argv) >= 3 and argv[-2] in ("--stamp", "--idle"):  # tests only: a stale one, a short idle exit
        value, option = argv.pop(), argv.pop()
        stamp, idle = (value, idle) if option == "--stamp" else (stamp, float(value))
    if len(argv) != 1 or not os.path.isabs(argv[0]):
        print("usage: python -m shellper.daemon.launcher /ABSOLUTE/RUNTIME/DIR", file=sys.stderr)
        return 2
    _shed_inherited()
    if os.fork():
        return 0  # the spawner reaps this one; the launcher is nobody's child
    directory = argv[0]
    launcher = Launcher(directory, stamp, stamp, idle)
    for sig in _EXIT_SIGNALS:
        _BEFORE[sig] = signal.signal(sig, _ended)
    try:
        launcher.watch_code()  # first: a change from here on makes it stale, whatever it read or imported
        launcher.stamp = stamp or warmstart.package_stamp()
        launcher.identity = stamp or warmstart.code_identity()
        if not launcher.claim():
            return 0
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            warmstart.log_line(directory, f"launcher could not start: {exc}")
        return 0
    except _Ended:
        return 0
    try:
        launcher.cgroup = LauncherCgroup.move_out(directory)
        warm_up()
        gc.collect()
        gc.freeze()  # what is imported stays out of every later collection: shared, never copied
        launcher.listen()
        launcher.serve()  # why it stopped would go to its log, which it removes now
    except _Ended:
        pass
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, _EXIT_SIGNALS)  # a second one waits: it cleans up first
        launcher.close()
    return 0


if __name__ == "__main__":
    os._exit(launcher_main(sys.argv[1:]))
