"""A launch through the runtime directory's warm launcher (shellper.daemon.launcher), when one can be used.

:func:`warm_launch` asks the launcher to fork the session, handing it the readiness pipe's write end, and
returns the read end; the caller then waits on it exactly as after a cold start. Anything else (no launcher,
``SHELLPER_LAUNCHER=off``, a refusal, a stale launcher, any error) returns None and the caller starts cold;
a failure is logged once per process to the directory's ``.launcher.log``. Where no launcher runs, one is
started for the next launch, alongside this one's cold start: :func:`reap_started`, called once that is done,
reaps its first process (which exits as soon as it has forked the launcher).
"""

from __future__ import annotations

import errno
import os
import sys

from shellper.core.errors import ShellperError
from shellper.host import warmstart
from shellper.host.trust import connect_session_plain

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from subprocess import Popen

    from shellper.core.config import SessionConfig

LAUNCHER_MODULE = "shellper.daemon.launcher"
STARTING_FOR = 10.0
"""Seconds after this process started a launcher for a directory during which it starts no other there: many
concurrent first launches (a Fleet's) would otherwise each start one, all but one to find the lock held."""
_logged: set[str] = set()
"""Runtime directories this process has already logged a fallback for."""
_started: dict[str, float] = {}
"""When this process last started a launcher, by runtime directory (monotonic)."""
_pending: list[Popen[bytes]] = []
"""Launchers' first processes started by :func:`start_launcher` with ``wait=False``, not yet reaped."""


def warm_launch(config: SessionConfig, directory: str) -> int | None:
    """The read end of a readiness pipe the launcher's session reports on, or None: start cold."""
    if not warmstart.enabled():
        return None
    path = os.path.join(directory, warmstart.SOCKET_NAME)
    try:
        sock = connect_session_plain(path, 5.0)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ECONNREFUSED):  # none yet, or one that was killed
            start_launcher(directory, wait=False)
        else:
            _log_once(directory, f"cold start: cannot connect to the launcher: {exc}")
        return None
    except ShellperError as exc:
        _log_once(directory, f"cold start: {exc}")
        return None
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    try:
        warmstart.send_message(sock, {"stamp": warmstart.code_identity(), "config": config.to_json(),
                                      **warmstart.caller_state()}, [ready_w])
        os.close(ready_w)
        ready_w = -1
        reply, _ = warmstart.recv_message(sock)
    except (OSError, ValueError, EOFError, ShellperError) as exc:  # EOFError: it closed without an answer
        os.close(ready_r)
        _log_once(directory, f"cold start: the launcher failed: {exc}")
        return None
    finally:
        sock.close()
        if ready_w >= 0:
            os.close(ready_w)
    if reply.get("ok") is True:
        return ready_r
    os.close(ready_r)
    if "stale" in reply:  # it exits now; the next launch finds the one started here
        _log_once(directory, f"cold start: replacing a stale launcher ({reply['stale']})")
        start_launcher(directory, wait=False, again=True)
    else:
        _log_once(directory, f"cold start: the launcher refused: {reply.get('cold', reply)}")
    return None


def start_launcher(directory: str, *, wait: bool = True, again: bool = False) -> None:
    """Start a launcher for ``directory``; its first process forks the launcher and exits at once, and is reaped
    here, or with ``wait=False`` by :func:`reap_started` (so a cold start runs meanwhile), and then, unless
    ``again`` (a stale one is being replaced), none is started where this process started one less than
    STARTING_FOR seconds ago. Its environment holds only what finds this package and the cgroup parent its own
    cgroup goes under (shellper.host.launchercgroup), so nothing else of the caller's stays in it."""
    import subprocess  # as a cold start does: posix_spawn would leave glibc's signals 32 and 33 ignored
    import time

    now = time.monotonic()
    if not wait and not again and now - _started.get(directory, -STARTING_FOR) < STARTING_FOR:
        return
    _started[directory] = now
    env = {k: v for k, v in _package_env().items() if k in ("PYTHONPATH", "SHELLPER_CGROUP_PARENT")}
    try:
        proc = subprocess.Popen([sys.executable, "-P", "-m", LAUNCHER_MODULE, directory], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        _log_once(directory, f"cannot start a launcher: {exc}")
        return
    if wait:
        proc.wait()
    else:
        _pending.append(proc)


def reap_started() -> None:
    """Reap the first processes of the launchers started with ``wait=False`` (each exits once it has forked)."""
    while _pending:
        try:
            proc = _pending.pop()
        except IndexError:  # another thread took the last one
            return
        proc.wait()


def _package_env() -> dict[str, str]:
    """The caller's environment, with this package's directory first on PYTHONPATH when ``-P`` would not
    find it (shellper.daemon.prefork.package_env, spelt again: the client does not import the daemon)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if root in {os.path.abspath(p) for p in sys.path[1:] if p}:
        return dict(os.environ)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{path}" if path else root}


def _log_once(directory: str, text: str) -> None:
    if directory not in _logged:
        _logged.add(directory)
        warmstart.log_line(directory, text)

