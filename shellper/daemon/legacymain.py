"""``shellper legacy-main '<json config>'``: the original's launch contract (its ``shellper-main.js``).

A Tower written for the original spawns this instead of ``node shellper-main.js <json>`` and changes
nothing else: the config is the original's, this process (its pid is the one the Tower holds) creates
the socket at ``socketPath``, writes ``{"pid":…,"startTime":…}`` to stdout and closes it, logs
``[ISO-8601] message`` lines to stderr (the file the Tower opened), never restarts the child on its own,
stays after the child's exit until SIGTERM or a SPAWN, and on SIGTERM ends the child and exits 0.
Underneath it is a whole shellper session named after the socket (``shellper-<id>.sock`` is session
``shellper-<id>`` in the socket's directory): exit records, containment and events, seen by
``shellper --dir <socketDir> ls`` and ``tower-client``. docs/LEGACY.md has the details.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys

from shellper.daemon.prefork import package_command, package_env
from shellper.host.logfile import LogFile, format_line
from shellper.protocol import legacy

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.core.config import SessionConfig
    from shellper.core.exitrecord import ExitRecord
    from shellper.daemon.session import Session
    from shellper.host.paths import SessionPaths

USAGE = "Usage: shellper legacy-main '<json config>'"
CONFIG_FD_ENV = "SHELLPER_LEGACY_CONFIG_FD"
"""Names the descriptor the config crosses the re-exec on (see :func:`_reexec`)."""
CONFIG_MAX = 128 * 1024
"""The most a config can be: Linux's limit on one argument of a command line (MAX_ARG_STRLEN)."""


class StderrLog(LogFile):
    """The session's log, written to fd 2 as the original's was: never rotated, never closed, never raising
    (a Tower that went away leaves a broken pipe or a full disk, neither of which may end the session)."""

    def __init__(self) -> None:
        super().__init__("/dev/stderr")

    def _open(self) -> int:
        return 2

    def _close_fd(self) -> None:
        pass

    def _write_line(self, line: bytes) -> None:
        view = memoryview(line)
        while view:
            view = view[os.write(2, view):]

    def close(self) -> None:
        pass


def _say(message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, format_line(message))


def legacy_main(argv: list[str]) -> int:
    """Entry of ``shellper legacy-main JSON`` (and, after the re-exec, of ``python -m
    shellper.daemon.legacymain shellper-main.js {"socketPath":…}`` with the config on a descriptor)."""
    args = [a for a in argv if a != legacy.MARKER]
    if len(args) != 1:
        _say(USAGE)
        return 1
    inherited = os.environ.pop(CONFIG_FD_ENV, None) if legacy.MARKER in argv else None
    try:
        text = args[0] if inherited is None else _read_config(inherited)
        launch = legacy.parse_launch_config(text)
        name = launch.session_name
    except legacy.LegacyError as exc:
        _say(str(exc))
        return 1
    if inherited is None:
        try:
            _reexec(text, launch.socket_path)
        except OSError as exc:  # no memfd, no interpreter: nothing started, the Tower reads EOF and a log line
            _say(f"Shellper fatal: cannot re-execute: {exc.strerror or exc}")
            return 1
    # Imported only by the re-executed image: the first one, whose command line shows the config, ends sooner.
    from shellper.core.config import SessionConfig
    from shellper.core.defaults import MAX_RING_BYTES, MIN_RING_BYTES
    from shellper.core.exits import RestartPolicy
    from shellper.host.paths import SessionPaths, ensure_runtime_dir

    if os.getsid(0) != os.getpid():
        os.setsid()  # detached, as the original was spawned: no terminal's or caller's signals reach us
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        directory = ensure_runtime_dir(launch.directory)
        paths = SessionPaths.for_name(directory, name)
        ring = launch.replay_bytes or legacy.REPLAY_PAYLOAD_MAX
        config = SessionConfig(
            name=name, argv=launch.argv, dir=directory, cwd=launch.cwd, env=launch.env, cols=launch.cols,
            rows=launch.rows, ring_bytes=max(MIN_RING_BYTES, min(MAX_RING_BYTES, ring)), husk_ttl=None,
            grace=legacy.GRACE, policy=RestartPolicy(mode="no"))
        from shellper.host.prelaunch import prepare

        config, paths = prepare(config)
    except Exception as exc:
        _say(f"Shellper fatal: {exc}")
        return 1
    log = StderrLog()
    log.write(f"Shellper started: pid={os.getpid()}, command={launch.argv[0]}, socket={paths.socket}")
    try:
        return _serve(config, paths, log)
    except Exception as exc:
        log.write(f"Shellper fatal: {type(exc).__name__}: {exc}")
        return 1


def _reexec(text: str, socket_path: str) -> None:
    """Become, same pid, ``python -P -m shellper.daemon.legacymain shellper-main.js {"socketPath":…}``.

    A Tower's process scanners look for the marker and ``"socketPath":"<socketDir>/…"`` in the command line
    (compact JSON, as JavaScript writes it). Only that: the config, its ``env`` above all, would be readable
    in ``ps`` by every user for the session's whole life, so it travels to the new image in a memfd, named by
    CONFIG_FD_ENV (docs/LEGACY.md). The command line this process was started with is the Tower's to choose;
    it lasts until here."""
    fd = os.memfd_create("shellper-legacy-config", 0)  # no MFD_CLOEXEC: the new image reads it
    data = text.encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    visible = json.dumps({"socketPath": socket_path}, separators=(",", ":"), ensure_ascii=False)
    os.execve(sys.executable, package_command("shellper.daemon.legacymain", legacy.MARKER, visible),
              package_env({CONFIG_FD_ENV: str(fd)}))


def _read_config(fd_text: str) -> str:
    """The config the first image left in the memfd named by CONFIG_FD_ENV; it is closed after. At most
    CONFIG_MAX bytes: it was one argument of a command line."""
    try:
        fd = int(fd_text)
        try:
            data = os.pread(fd, CONFIG_MAX + 1, 0)
        finally:
            os.close(fd)
    except (ValueError, OSError) as exc:
        raise legacy.LegacyError(f"Invalid config: cannot read it from ${CONFIG_FD_ENV}: {exc}") from None
    if len(data) > CONFIG_MAX:
        raise legacy.LegacyError(f"Invalid config: more than {CONFIG_MAX} bytes")
    return data.decode(errors="replace")


def _serve(config: SessionConfig, paths: SessionPaths, log: LogFile) -> int:
    """shellper.daemon.session.serve, with the original's stdout handshake and SIGTERM message."""
    from shellper.core.states import SessionState
    from shellper.daemon.reactor import Reactor
    from shellper.daemon.session import Session

    loop = Reactor()

    def report(exc: BaseException) -> None:
        log.write(f"Shellper error: {type(exc).__name__}: {exc}")

    loop.on_error = report
    session: Session | None = None
    try:
        session = Session(config, paths, log, loop)
        # No "[shellper] child exited" lines in the output: the original's Tower takes any output after an EXIT
        # for the child running again (PtySession's restart wait, #418).
        session.output.notices = False

        def exited(record: ExitRecord) -> None:
            if record.state != SessionState.STARTING:  # the child a SPAWN replaced: the original ignored its exit
                told = legacy.exit_payload(record.code, record.signal, spawned=record.child_pid is not None)
                log.write(f"PTY exited: code={told['code']}, signal={told['signal']}")

        session.lifecycle.on_exit = exited
        session.start(as_original=True)  # a command that cannot start is an EXIT {code: 1}, as the original's
        child = session.lifecycle.child
        log.write(f"PTY spawned: pid={child.pid if child else -1}, cols={config.cols}, rows={config.rows}")
        log.write(f"Socket listening: {paths.socket}")

        def sigterm() -> None:
            log.write("Shellper received SIGTERM, shutting down")
            assert session is not None
            session.request_stop()

        loop.add_signal_handler(signal.SIGTERM, sigterm)
        _handshake(legacy.ready_line(os.getpid(), int(session.created_at * 1000)))
        loop.call_soon(session.tree.join)
        loop.run()
    finally:
        loop.close()
    return 1 if session.stop_error is not None else 0


def _handshake(line: bytes) -> None:
    """Write the launch line to stdout, then close it (the Tower reads to EOF); fd 1 becomes /dev/null."""
    with contextlib.suppress(OSError):
        os.write(1, line)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


if __name__ == "__main__":
    sys.exit(legacy_main(sys.argv[1:]))
