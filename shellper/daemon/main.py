"""``python -m shellper.daemon NAME DIR``: the detached session process (argv names it for ``ps``, and says
nothing else: the config comes on stdin), and the fork that detaches it."""

from __future__ import annotations

import json
import os

from shellper.core.config import SessionConfig
from shellper.core.launchfailure import LaunchFailure
from shellper.host.logfile import LogFile, redirect_stdio, remove_created_log
from shellper.host.paths import SessionPaths, describe_error
from shellper.host.record import AlreadyRunning

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any


def daemon_main(argv: list[str]) -> int:
    """Entry of ``python -m shellper.daemon``: take the config from stdin, fork once more, detach, serve,
    report readiness. ``argv`` is only a label. The server is imported before the config is read: started
    early by the console script (shellper.daemon.prefork), this runs while the CLI parses; an empty stdin
    is a launch called off."""
    ready_fd = int(os.environ.pop("SHELLPER_READY_FD", "-1"))  # prefork.READY_FD_ENV: prefork imports this module
    import shellper.daemon.session  # noqa: F401  (the point of starting early)

    chunks = []
    while chunk := os.read(0, 65536):
        chunks.append(chunk)
    if not chunks:
        return 0
    config = SessionConfig.from_json(b"".join(chunks).decode())
    return detached_daemon(config, ready_fd)


def detached_daemon(config: SessionConfig, ready_fd: int) -> int:
    """In the intermediate process: fork the daemon, which serves; the intermediate returns 0 at once."""
    if os.fork():
        return 0  # the launcher reaps this intermediate; the daemon is nobody's child to wait for
    os.set_inheritable(ready_fd, False)
    if config.containment == "none":  # forked warm: back to the caller's cgroup while the session sets up
        from shellper.host.cgroup import start_back_to_launcher_origin

        start_back_to_launcher_origin()
    paths = SessionPaths.for_name(config.dir, config.name)
    log = LogFile(paths.log)

    def report(message: dict[str, Any]) -> None:
        nonlocal ready_fd
        if ready_fd >= 0:
            try:
                os.write(ready_fd, json.dumps(message).encode())
            finally:
                os.close(ready_fd)
                ready_fd = -1

    try:
        created_log = redirect_stdio(paths.log)
    except OSError as exc:
        report({"error": f"session log {paths.log}: cannot open it: {describe_error(exc)}", "reason": "files"})
        os._exit(1)

    from shellper.daemon.session import serve

    try:
        code = serve(config, paths, log, report)
    except BaseException as exc:  # the launcher shows this; the session's files are already removed
        if ready_fd >= 0 and created_log is not None and not isinstance(exc, AlreadyRunning):
            log.close()  # a launch that failed leaves nothing; the log of a live owner (AlreadyRunning) stays
            remove_created_log(paths.log, created_log)
        report({"error": str(exc) or type(exc).__name__, "reason": failure_of(exc).value})
        code = 1
    os._exit(code)  # never unwind into the launcher's code when forked from it


def failure_of(exc: BaseException) -> LaunchFailure:
    """The reason a daemon that could not start reports with its error (the launcher raises it with it)."""
    from shellper.core.config import ConfigError
    from shellper.core.names import PathError
    from shellper.daemon.tree import OwnerRemains
    from shellper.host.cgroup import CgroupError
    from shellper.host.child import SpawnError
    from shellper.host.record import LockError, RecordError

    if isinstance(exc, AlreadyRunning):
        return LaunchFailure.ALREADY_RUNNING
    if isinstance(exc, OwnerRemains):
        return LaunchFailure.OTHER_OWNER
    if isinstance(exc, SpawnError):
        by_stage = {"chdir": LaunchFailure.BAD_DIRECTORY, "cgroup": LaunchFailure.CONTAINMENT,
                    "resolve": LaunchFailure.BAD_COMMAND, "exec": LaunchFailure.BAD_COMMAND}
        return by_stage.get(exc.stage, LaunchFailure.OTHER)
    if isinstance(exc, CgroupError):
        return LaunchFailure.CONTAINMENT
    if isinstance(exc, ConfigError):
        return LaunchFailure.BAD_CONFIG
    if isinstance(exc, PathError | LockError | RecordError | OSError):
        return LaunchFailure.FILES
    return LaunchFailure.OTHER
