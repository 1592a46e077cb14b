"""Spawn the session's child on a PTY with plain os calls (no event loop here; the server drives the fds).

The child becomes a session leader with the PTY as its controlling terminal, so job control,
^C and hang-up behave as in a real terminal. fd 2 can be a second PTY (``pty``: programs still see
a TTY, but stderr is captured separately), the same PTY (``merged``: the default, as in every terminal), or a pipe.

Spawn failures are reported, never disguised as a child that exits 127: the command is resolved
in the parent first (clear "command not found" / "not executable" errors), and whatever still
fails after fork (chdir, exec) is sent back over a CLOEXEC pipe before the parent returns.

Lifetime: if the shellper is killed outright, its PTY masters close and the kernel hangs up the
terminal (SIGHUP to the child, the session leader). As an unconditional backstop the child also
gets ``PR_SET_PDEATHSIG`` = SIGKILL by default: a leader that ignores or survives SIGHUP (nohup,
a wedged agent) would otherwise live on holding its session id (bench/NOTES.md, "Incidents behind
the defaults"), and SIGHUP as the death signal would add nothing to the hang-up that already
happened. When the killed leader exits, the kernel sends SIGHUP + SIGCONT to the terminal's last
foreground process group as well. The price is that an interactive shell gets no time to forward
SIGHUP to background jobs in other process groups; those are for the supervisor's reaper (the
record holds the group). PDEATHSIG fires when the *thread* that forked exits, so call
:func:`spawn_child` from the main thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import struct
import termios
import time
from collections.abc import Mapping, Sequence

from shellper.core.defaults import DEFAULT_TERM, STDERR_MODES, TERMINAL_SIZE_RANGE, terminal_size_in_range
from shellper.core.errors import ShellperError
from shellper.core.execve import env_problem, has_nul
from shellper.core.structs import field, record
from shellper.host.identity import start_time as read_start_time

PR_SET_PDEATHSIG = 1
_WINSIZE = struct.Struct("HHHH")
_RESET_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))
_ENV_DROP_ON_INHERIT = ("COLUMNS", "LINES")
"""Stale sizes from the launching terminal would override the PTY's real size in many programs."""

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - no libc symbols visible
    _libc = None


class SpawnError(ShellperError):
    """The child could not be started; ``errno`` and ``stage`` say why (exec, chdir, setup, resolve)."""

    def __init__(self, argv: Sequence[str], errno_: int, message: str, stage: str = "exec") -> None:
        self.argv = list(argv)
        self.errno = errno_
        self.message = message
        self.stage = stage
        name = errno.errorcode.get(errno_, str(errno_))
        super().__init__(f"cannot start {self.argv[:1]}: {message} [{name}]")


@record(eq=False)
class Child:
    """A running child: its pid (== pgid == sid) and the parent-side fds (non-blocking, CLOEXEC)."""

    pid: int
    pgid: int
    argv: list[str]
    executable: str
    master_fd: int
    stderr_fd: int | None
    stderr_mode: str
    started_at: float
    """time.monotonic() right after the fork, for uptime and fast-exit classification."""
    start_time: int
    """Kernel start time in clock ticks (/proc/<pid>/stat field 22), for the session record."""
    closed: bool = field(default=False)

    def output_fds(self) -> tuple[int, ...]:
        """The fds the child's output arrives on: the PTY, and stderr's own PTY or pipe if it has one."""
        return (self.master_fd,) if self.stderr_fd is None else (self.master_fd, self.stderr_fd)

    def close(self) -> None:
        """Close the parent's fds (idempotent); same as the module-level :func:`close`."""
        close(self)


# --- environment ----------------------------------------------------------------------------------


def build_env(
    base: Mapping[str, str] | None,
    extra: Mapping[str, str],
    term: str = DEFAULT_TERM,
    inherit: bool = True,
) -> dict[str, str]:
    """The child's environment: ``base`` (None = os.environ) if ``inherit``, then ``extra``, then TERM.

    COLUMNS/LINES inherited from ``base`` are dropped (the PTY carries the size). The caller adds
    SHELLPER_SESSION. Raises ValueError for names/values that execve cannot carry.
    """
    env: dict[str, str] = {}
    if inherit:
        env.update(os.environ if base is None else base)
        for key in _ENV_DROP_ON_INHERIT:
            env.pop(key, None)
    env.update(extra)
    env["TERM"] = term
    for key, value in env.items():
        problem = env_problem(key, value)
        if problem is not None:
            raise ValueError(problem)
    return env


# --- command resolution ---------------------------------------------------------------------------


def _classify(path: str) -> int:
    """0 if ``path`` can be exec'd, else the errno exec would give (ENOENT, EACCES)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return errno.ENOENT
    except NotADirectoryError:
        return errno.ENOTDIR
    except PermissionError:
        return errno.EACCES
    if not os.path.isfile(path) or not os.access(path, os.X_OK) or not st.st_mode & 0o111:
        return errno.EACCES
    return 0


def check_spawnable(argv: Sequence[str], cwd: str | None, env: Mapping[str, str]) -> str:
    """What can be checked before forking (the cwd, the command); the executable's path, or SpawnError."""
    if has_nul(list(argv)) or (cwd is not None and has_nul((cwd,))):
        raise SpawnError(argv, errno.EINVAL, "the command or working directory contains a NUL byte", "resolve")
    if cwd is not None and not os.path.isdir(cwd):
        err = errno.ENOENT if not os.path.exists(cwd) else errno.ENOTDIR
        raise SpawnError(argv, err, f"working directory {cwd} does not exist or is not a directory", "chdir")
    return resolve_command(argv, env, cwd)


def resolve_command(argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> str:
    """Find the file execvp would run, with the *child's* PATH and cwd; raise SpawnError if none.

    Like execvp: a name with '/' is used as is (relative to ``cwd``); otherwise PATH is searched
    (empty entries mean the cwd) and EACCES is reported only if nothing executable was found.
    """
    if not argv or not argv[0]:
        raise SpawnError(list(argv) or [""], errno.EINVAL, "empty command", "resolve")
    name = argv[0]
    base = os.path.abspath(cwd) if cwd else os.getcwd()
    if "/" in name:
        full = os.path.join(base, name)
        err = _classify(full)
        if err == errno.EACCES:
            raise SpawnError(argv, err, f"{name} is not an executable file", "resolve")
        if err:
            raise SpawnError(argv, err, f"no such file: {name}", "resolve")
        return full
    search = env.get("PATH", os.defpath)
    denied = False
    for entry in search.split(os.pathsep):
        full = os.path.join(base, entry or ".", name)
        err = _classify(full)
        if err == 0:
            return full
        denied = denied or (err == errno.EACCES and os.path.exists(full))
    if denied:
        raise SpawnError(argv, errno.EACCES, f"{name} was found in PATH but is not executable", "resolve")
    raise SpawnError(argv, errno.ENOENT, f"command not found: {name} (not in the child's PATH)", "resolve")


# --- spawning -------------------------------------------------------------------------------------


def set_winsize(fd: int, cols: int, rows: int) -> tuple[int, int]:
    """TIOCSWINSZ on a PTY fd; returns the previous (cols, rows)."""
    old_rows, old_cols, _, _ = _WINSIZE.unpack(fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(_WINSIZE.size)))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, _WINSIZE.pack(rows, cols, 0, 0))
    return old_cols, old_rows


def _check_size(cols: int, rows: int) -> None:
    if not terminal_size_in_range(cols, rows):
        raise ValueError(f"terminal size {cols}x{rows} out of range {TERMINAL_SIZE_RANGE}")


def spawn_child(
    argv: Sequence[str],
    *,
    cwd: str | None,
    env: Mapping[str, str],
    cols: int,
    rows: int,
    stderr_mode: str = "pty",
    pdeathsig: int = signal.SIGKILL,
    cgroup_procs_fd: int = -1,
) -> Child:
    """Fork and exec ``argv`` on a new PTY of ``cols`` x ``rows``; raise SpawnError if it cannot run.

    ``env`` is used exactly as given (see :func:`build_env`). ``pdeathsig=0`` disables the
    parent-death signal. ``cgroup_procs_fd``, an fd open for writing on a cgroup's ``cgroup.procs``: the
    child joins that cgroup before it execs, so nothing it ever forks is outside (shellper.host.cgroup).
    Blocks only until the child has exec'd (or failed to).
    """
    if stderr_mode not in STDERR_MODES:
        raise ValueError(f"stderr_mode must be one of {STDERR_MODES}, got {stderr_mode!r}")
    _check_size(cols, rows)
    argv = list(argv)
    executable = check_spawnable(argv, cwd, env)
    env = dict(env)

    opened: list[int] = []
    try:
        master, slave = os.openpty()
        opened += [master, slave]
        set_winsize(master, cols, rows)
        err_master: int | None = None
        err_slave = slave
        if stderr_mode == "pty":
            err_master, err_slave = os.openpty()
            opened += [err_master, err_slave]
            set_winsize(err_master, cols, rows)
        elif stderr_mode == "pipe":
            err_master, err_slave = os.pipe()
            opened += [err_master, err_slave]
        report_r, report_w = os.pipe()  # both CLOEXEC: EOF on report_r means exec succeeded
        opened += [report_r, report_w]
        parent = os.getpid()
        # Block every signal across fork: until the child has reset the dispositions, a signal would
        # run the parent's handlers in the child (e.g. write to the reactor's wakeup fd).
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child, which always leaves via exec or _exit
                _exec_in_child(executable, argv, env, cwd, slave, err_slave, report_w, parent, pdeathsig,
                               cgroup_procs_fd)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        started_at = time.monotonic()
    except BaseException:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise

    for fd in {slave, err_slave, report_w}:
        os.close(fd)
    try:
        report = _read_all(report_r)
    except BaseException:  # interrupted while waiting for exec: leave nothing behind
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        report = b"interrupted"
        raise
    finally:
        os.close(report_r)
        if report:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            for parent_fd in (master, err_master):
                if parent_fd is not None:
                    os.close(parent_fd)
    if report:
        raise _decode_report(argv, report, cwd)

    for parent_fd in (master, err_master):
        if parent_fd is not None:
            os.set_blocking(parent_fd, False)
    start_time = read_start_time(pid) or 0  # the unreaped child's /proc entry exists
    return Child(
        pid=pid,
        pgid=pid,
        argv=argv,
        executable=executable,
        master_fd=master,
        stderr_fd=err_master,
        stderr_mode=stderr_mode,
        started_at=started_at,
        start_time=start_time,
    )


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _decode_report(argv: list[str], report: bytes, cwd: str | None) -> SpawnError:
    stage, _, rest = report.partition(b"\0")
    code_text, _, detail = rest.partition(b"\0")
    try:
        code = int(code_text)
    except ValueError:
        code = 0
    stage_s = stage.decode("ascii", "replace")
    detail_s = detail.decode("utf-8", "replace")
    if stage_s == "exec" and code == errno.ENOENT:
        message = f"command not found: {argv[0]}"
    elif stage_s == "exec" and code == errno.EACCES:
        message = f"permission denied: {argv[0]} is not executable"
    elif stage_s == "exec" and code == errno.ENOEXEC:
        message = f"exec format error: {argv[0]} is not a binary or a script with a #! line"
    elif stage_s == "cgroup":
        message = f"cannot join the session's cgroup: {detail_s}"
    elif stage_s == "chdir":
        message = f"cannot change directory to {cwd}: {detail_s}"
    else:
        message = f"{stage_s} failed: {detail_s}"
    return SpawnError(argv, code, message, stage_s)


def _exec_in_child(  # pragma: no cover - only ever runs in a forked child
    executable: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    slave: int,
    err_slave: int,
    report: int,
    parent: int,
    pdeathsig: int,
    cgroup_procs_fd: int,
) -> None:
    """Become the session leader on ``slave`` and exec; on any failure report it and _exit(127).

    Runs between fork and exec: no logging, no locks, no imports; just syscalls.
    """
    stage = "setup"
    try:
        if cgroup_procs_fd >= 0:
            stage = "cgroup"
            os.write(cgroup_procs_fd, b"0")
        stage = "setsid"
        os.setsid()
        if pdeathsig and _libc is not None:
            stage = "prctl"
            _libc.prctl(PR_SET_PDEATHSIG, int(pdeathsig), 0, 0, 0)
            if os.getppid() != parent:  # the shellper died before the death signal was armed
                os._exit(127)
        stage = "controlling tty"
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        stage = "stdio"
        # Lift everything we still need above 0..2 before overwriting 0..2.
        report = fcntl.fcntl(report, fcntl.F_DUPFD_CLOEXEC, 3)
        src_out = fcntl.fcntl(slave, fcntl.F_DUPFD_CLOEXEC, 3)
        src_err = fcntl.fcntl(err_slave, fcntl.F_DUPFD_CLOEXEC, 3)
        os.dup2(src_out, 0)
        os.dup2(src_out, 1)
        os.dup2(src_err, 2)
        os.closerange(3, report)
        os.closerange(report + 1, os.sysconf("SC_OPEN_MAX"))
        stage = "signals"
        for sig in _RESET_SIGNALS:
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        if cwd is not None:
            stage = "chdir"
            os.chdir(cwd)
        stage = "exec"
        os.execve(executable, argv, env)
    except OSError as e:
        _report(report, stage, e.errno or 0, e.strerror or str(e))
    except BaseException as e:
        _report(report, stage, 0, repr(e))
    finally:
        os._exit(127)


def _report(fd: int, stage: str, code: int, detail: str) -> None:  # pragma: no cover - child only
    with contextlib.suppress(BaseException):
        os.write(fd, b"%s\0%d\0%s" % (stage.encode(), code, detail.encode("utf-8", "replace")))


# --- running child --------------------------------------------------------------------------------


def resize(child: Child, cols: int, rows: int) -> None:
    """Set the PTY size(s) and make sure the foreground job gets SIGWINCH, even if the size is unchanged.

    The kernel signals the terminal's foreground group on any change of the winsize struct, and it holds
    that group itself, not its number: a group that died is never confused with a stranger that got its
    number since (as a killpg of tcgetpgrp()'s number would be). A reattaching client needs a redraw even
    at the same size, so then ws_xpixel is changed and set back: the kernel signals, the size ends exact.
    """
    _check_size(cols, rows)
    if child.closed:
        return
    if child.stderr_mode == "pty" and child.stderr_fd is not None:
        # First: resizing the main PTY signals the child at once, and its handler may query fd 2.
        set_winsize(child.stderr_fd, cols, rows)
    wanted = _WINSIZE.pack(rows, cols, 0, 0)
    if fcntl.ioctl(child.master_fd, termios.TIOCGWINSZ, bytes(_WINSIZE.size)) == wanted:
        fcntl.ioctl(child.master_fd, termios.TIOCSWINSZ, _WINSIZE.pack(rows, cols, 1, 0))
    fcntl.ioctl(child.master_fd, termios.TIOCSWINSZ, wanted)


def close(child: Child) -> None:
    """Close the parent's fds (idempotent). Closing the master hangs up the terminal."""
    if child.closed:
        return
    child.closed = True
    for fd in (child.master_fd, child.stderr_fd):
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
