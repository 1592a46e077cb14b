"""Starting a session: a detached shellper, started by the caller and then on its own.

The detached shellper is a grandchild of the launcher in a session of its own, with stdin on /dev/null and
stdout/stderr on its log file, so neither a closed pipe nor a terminal hang-up can reach it. The config
travels over a pipe on stdin, never in argv, so the child's environment is not visible in ``ps``. The
launcher returns once the daemon reports, over a dedicated pipe, that its socket accepts connections.
Launching is the client's act; the daemon is named only by its module (``python -m shellper.daemon``), or
handed in as a prefork the caller started (shellper.daemon.prefork, which the CLI uses). Running a session
in the caller's process is shellper.daemon.foreground's.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import stat
import sys
import time

from shellper.core.config import SessionConfig
from shellper.core.launchfailure import LaunchError as LaunchError  # re-exported: launch() raises it
from shellper.core.launchfailure import LaunchFailure as LaunchFailure  # re-exported: LaunchError.reason
from shellper.core.structs import fields, record
from shellper.host.paths import SessionPaths, open_nofollow
from shellper.host.prelaunch import prepare as prepare  # re-exported: what launch() checks first
from shellper.host.prelaunch import with_owner as with_owner

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    class Prefork(Protocol):
        """The intermediate process of a detached launch, started early (shellper.daemon.prefork.Prefork)."""

        ready_r: int

        def send(self, config_json: bytes) -> None: ...
        def describe_exit(self) -> str: ...
        def cancel(self) -> None: ...

READY_FD_ENV = "SHELLPER_READY_FD"
"""Which inherited descriptor takes the daemon's readiness report: shellper.daemon.prefork.READY_FD_ENV, spelt
again here (the client does not import the daemon; tests/unit/test_launch_contract.py holds them equal)."""
LAUNCH_TIMEOUT = 10.0
LOG_TAIL_BYTES = 4096
"""How much of the log's end a failed launch shows (its last lines)."""


@record(frozen=True)
class LaunchInfo:
    """What a started session reports once its socket accepts: the info line ``shellper run`` prints.

    ``owner`` and ``containment`` come last, with defaults, so code that builds one from an older info
    line (or positionally) keeps working; a session started by this version always reports both.
    """

    name: str
    pid: int
    start_time: int
    boot_id: str
    instance_id: str
    child_pid: int | None
    socket: str
    record: str
    log: str
    owner: str = ""
    """Who the session belongs to (shellper.core.owner); "" only in an info line from before owners existed."""
    containment: str = "none"
    """What ends exactly this session's processes: cgroup, systemd-scope or none (shellper.host.cgroup)."""
    shellper_pid: int | None = None
    """``pid`` under WELCOME's name (protocol/RUNTIME.md, "The launch contract"); filled from ``pid``."""
    shellper_start_time: int | None = None
    """``start_time`` under WELCOME's name; filled from ``start_time``."""

    def __post_init__(self) -> None:
        # A line of an earlier version, or a caller building one by the old names, gets the new ones too.
        if self.shellper_pid is None:
            object.__setattr__(self, "shellper_pid", self.pid)
        if self.shellper_start_time is None:
            object.__setattr__(self, "shellper_start_time", self.start_time)

    def to_dict(self) -> dict[str, Any]:
        """The info line: WELCOME's names first for what WELCOME also says, then the rest, with the older
        ``pid`` and ``start_time`` kept for readers of earlier lines."""
        first = ("name", "shellper_pid", "shellper_start_time")
        out = {k: getattr(self, k) for k in first}
        out.update((k, v) for k, v in self.__dict__.items() if k not in first)
        return out

    @classmethod
    def from_dict(cls, line: dict[str, Any]) -> LaunchInfo:
        """Read an info line of this version or an earlier one (``pid``/``start_time`` only); keys this
        version does not know are ignored, as RUNTIME.md asks of readers."""
        values = dict(line)
        values.setdefault("pid", values.get("shellper_pid"))
        values.setdefault("start_time", values.get("shellper_start_time"))
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


def launch(
    config: SessionConfig, timeout: float = LAUNCH_TIMEOUT, *,
    start_prefork: Callable[[tuple[str, ...]], Prefork] | None = None, prefork: Prefork | None = None
) -> LaunchInfo:
    """Start a detached shellper and return once its socket accepts connections.

    The daemon is a fresh interpreter either way, whose argv names the session and nothing else. By
    default it is started with subprocess, which is safe from any caller (a Tower with threads and an
    event loop). The ``shellper`` CLI starts it through shellper.daemon.prefork instead: ``prefork``, the
    one it may have started before parsing, else one ``start_prefork`` (``Prefork.start``) starts now.
    """
    scope = None if config.containment == "none" else _scope_prefix(config)
    if scope is not None and prefork is not None:
        prefork.cancel()  # a prefork would stay in the caller's cgroup: start one inside a systemd scope
    prepared: tuple[SessionConfig, SessionPaths] | None = None
    if scope is None and _launcher_wanted():  # the warm launcher (shellper.client.warm) forks it, if one runs
        from shellper.client import warm

        try:
            prepared = config, paths = prepare(config)
        except BaseException:
            if prefork is not None:
                prefork.cancel()
            raise
        ready_r = warm.warm_launch(config, str(paths.dir))
        if ready_r is not None:
            if prefork is not None:
                prefork.cancel()
            try:
                reply = _read_until_eof(ready_r, timeout)
            finally:
                os.close(ready_r)
            return _launch_reply(config, paths, reply)
        try:  # cold, while the launcher it may have started for the next launch warms up
            return _cold_launch(config, timeout, scope, prepared, start_prefork, prefork)
        finally:
            warm.reap_started()
    return _cold_launch(config, timeout, scope, prepared, start_prefork, prefork)


def _cold_launch(config: SessionConfig, timeout: float, scope: list[str] | None,
                 prepared: tuple[SessionConfig, SessionPaths] | None,
                 start_prefork: Callable[[tuple[str, ...]], Prefork] | None, prefork: Prefork | None) -> LaunchInfo:
    """launch() without the launcher: through the prefork if the CLI gave one, else a fresh interpreter."""
    if scope is None and (prefork is not None or start_prefork is not None):
        try:
            config, paths = prepared or prepare(config)
            if prefork is None:
                assert start_prefork is not None
                prefork = start_prefork((config.name, str(paths.dir)))
            try:
                prefork.send(config.to_json().encode())
            except OSError as exc:  # EPIPE: the daemon-to-be died (killed, out of memory) first
                raise LaunchError(config.name, f"session {config.name!r} did not start: the process started to "
                                  f"become its shellper died before it got its config "
                                  f"({prefork.describe_exit() or exc.strerror or exc}), so nothing was started "
                                  f"and nothing logged to {paths.log}; run it again", paths.log,
                                  LaunchFailure.DIED) from None
            reply = _read_until_eof(prefork.ready_r, timeout)
        finally:
            if prefork is not None:
                prefork.cancel()
        return _launch_reply(config, paths, reply)
    config, paths = prepared or prepare(config)
    ready_r, ready_w = os.pipe()
    import subprocess  # only this path needs it

    try:
        proc = subprocess.Popen(
            [*(scope or ()), sys.executable, "-m", "shellper.daemon", config.name, str(paths.dir)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(ready_w,), start_new_session=True, close_fds=True,
            env={**os.environ, READY_FD_ENV: str(ready_w)},
        )
    except OSError:
        os.close(ready_r)
        os.close(ready_w)
        raise
    os.close(ready_w)
    try:
        assert proc.stdin is not None
        try:
            proc.stdin.write(config.to_json().encode())
            proc.stdin.close()
        except OSError as exc:  # EPIPE: the daemon-to-be died before it read the config
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the unsent rest is dropped; the pipe is closed all the same
            status = proc.wait()
            raise LaunchError(config.name, f"session {config.name!r} did not start: the process started to "
                              f"become its shellper (pid {proc.pid}) died before it got its config (status "
                              f"{status}; {exc.strerror or exc}), so nothing was started and nothing logged to "
                              f"{paths.log}; run it again", paths.log, LaunchFailure.DIED) from None
        proc.wait()  # the intermediate process exits as soon as it has forked the daemon
        reply = _read_until_eof(ready_r, timeout)
    finally:
        os.close(ready_r)
    return _launch_reply(config, paths, reply)


def _scope_prefix(config: SessionConfig) -> list[str] | None:
    """shellper.host.cgroup.scope_prefix, imported only by a launch that may need a scope (not ``none``)."""
    from shellper.host.cgroup import scope_prefix

    return scope_prefix(config.name, config.cgroup_parent)


def _launcher_wanted() -> bool:
    """shellper.host.warmstart.enabled, read here so that a launch with ``SHELLPER_LAUNCHER=off`` imports
    nothing of the launcher's (tests/test_start_up_imports.py holds the list)."""
    return os.environ.get("SHELLPER_LAUNCHER", "").lower() not in ("off", "0", "no", "false")


def _launch_reply(config: SessionConfig, paths: SessionPaths, reply: bytes) -> LaunchInfo:
    if not reply:
        raise LaunchError(config.name, f"shellper for {config.name!r} exited before it was ready"
                          f"{_log_tail(paths.log)}", paths.log, LaunchFailure.DIED)
    message = json.loads(reply)
    if "error" in message:
        try:
            reason = LaunchFailure(message.get("reason", "other"))
        except ValueError:  # a daemon of a newer version, with a reason this one does not know
            reason = LaunchFailure.OTHER
        raise LaunchError(config.name, str(message["error"]), paths.log, reason)
    return LaunchInfo.from_dict(message)


def _read_until_eof(fd: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    out = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LaunchError("?", f"shellper did not report ready within {timeout:g} s", reason=LaunchFailure.TIMEOUT)
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return bytes(out)
        out += chunk


def _log_tail(log: str) -> str:
    """The log's last lines for an error message: never through a symlink, only from a regular file."""
    try:
        fd = open_nofollow(log, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        data = os.pread(fd, LOG_TAIL_BYTES, max(0, st.st_size - LOG_TAIL_BYTES))
    except OSError:
        return ""
    finally:
        os.close(fd)
    lines = data.decode(errors="replace").splitlines()[-5:]
    return (": " + " | ".join(lines)) if lines else ""

