"""The daemon-to-be, started before the CLI has parsed its arguments (the console script is shellper.cli.entry).

``shellper run`` costs two rounds of imports in a row: the CLI's (argparse, the config, the restart
policy) and the server's (codec, ring, reactor). A :class:`Prefork` overlaps them: the process that
becomes the daemon is started first, imports the server on the other core while the CLI parses and
validates, then waits for the config on a pipe (whether to start one is shellper.cli.argscan.may_detach's
guess). If the CLI decides otherwise (another command, a bad argument, a session already running), the
prefork is killed by pid and reaped; it has touched nothing.

It is forked, unless the CLI's command line holds what must not outlive it (:func:`holds_secrets`:
``--env KEY=SECRET``): a forked process keeps its parent's command line, and the long-lived daemon's is
readable by every user in ``ps``. Then it is a fresh interpreter, ``python -P -m shellper.daemon NAME
DIR``, which costs more (bench/NOTES.md, "Secrets out of argv"). Either way the config, environment
included, comes over a pipe. This module imports only os, signal and sys (which every shellper process
loads anyway), so the prefork starts before any of the package's own imports.
"""

from __future__ import annotations

import os
import signal
import sys

READY_FD_ENV = "SHELLPER_READY_FD"
"""The variable that tells ``python -m shellper.daemon`` which inherited descriptor takes its readiness report."""


def package_command(module: str, *label: str) -> list[str]:
    """The command line of a process of this package started afresh: the interpreter, ``-P`` (the caller's
    working directory is not searched: a ``shellper/`` there must not be run), ``-m module`` and ``label``
    (for ``ps``; never anything of a config)."""
    return [sys.executable, "-P", "-m", module, *label]


def package_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment for :func:`package_command`: the caller's with ``extra``. When this package was
    loaded from a directory the new interpreter would not search (a checkout run as ``python -m shellper``
    from it: ``-P`` drops the working directory), that directory goes first on PYTHONPATH, so the new
    process runs the same code as its caller. An installed package's directory is not added: it would go
    before the standard library."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if root in {os.path.abspath(p) for p in sys.path[1:] if p}:  # sys.path[0]: the script's or working dir
        return {**os.environ, **extra}
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, **extra, "PYTHONPATH": f"{root}{os.pathsep}{path}" if path else root}


def holds_secrets(argv: list[str]) -> bool:
    """Whether the command line ``argv`` (without the program) may hold a secret: an option starting with
    ``--e`` (``--env`` or an abbreviation of it) before the first ``--``, or a word with ``=`` after it
    (``-- env KEY=VALUE prog``, whose ``prog`` no longer shows it once ``env`` has executed it). A wrong yes
    costs only the fresh interpreter's start."""
    for i, token in enumerate(argv):
        if token == "--":
            return any("=" in word for word in argv[i + 1:])
        if token.startswith("--e"):
            return True
    return False


class Prefork:
    """The intermediate process of a detached launch, started early; see the module docstring.

    It reads the config (JSON) from ``config_w``'s pipe, makes itself a session leader (the spawned one is
    one from the start), forks the daemon and exits; the daemon writes its readiness report to the pipe
    behind ``ready_r``.
    """

    def __init__(self, pid: int, config_w: int, ready_r: int) -> None:
        self.pid = pid
        self._config_w = config_w
        self.ready_r = ready_r
        self.status: int | None = None
        """The intermediate's wait status, once it was reaped having died before taking the config."""

    @classmethod
    def start(cls, label: tuple[str, ...] = (), argv: list[str] | None = None) -> Prefork:
        """Fork the intermediate, or spawn it if ``argv`` (by default this process's) :func:`holds_secrets`;
        ``label`` is the spawned one's argv after the module (its name and directory, for ``ps``)."""
        config_r, config_w = os.pipe()
        ready_r, ready_w = os.pipe()
        try:
            if holds_secrets(sys.argv[1:] if argv is None else argv):
                pid = _spawn(label, config_r, ready_w)
            else:
                pid = _fork(config_r, config_w, ready_r, ready_w)
        except BaseException:
            for fd in (config_w, ready_r):
                os.close(fd)
            raise
        finally:
            os.close(config_r)
            os.close(ready_w)
        return cls(pid, config_w, ready_r)

    def send(self, config_json: bytes) -> None:
        """Hand over the config; the intermediate forks the daemon and exits, and is reaped here.

        OSError (EPIPE) if it died first: it is reaped then, and :meth:`describe_exit` says how it ended."""
        try:
            view = memoryview(config_json)
            while view:
                view = view[os.write(self._config_w, view):]
        except OSError:
            os.close(self._config_w)  # first: were it alive, it would wait for the rest of the config
            self._config_w = -1
            _, self.status = os.waitpid(self.pid, 0)
            self.pid = 0
            raise
        finally:
            if self._config_w >= 0:
                os.close(self._config_w)
                self._config_w = -1
        os.waitpid(self.pid, 0)
        self.pid = 0

    def describe_exit(self) -> str:
        """How the intermediate ended, if it died before taking the config: "killed by SIGKILL", ..."""
        if self.status is None:
            return ""
        from shellper.core.exits import ExitEvidence, describe_exit  # only on this failure path

        return describe_exit(ExitEvidence.from_wait_status(self.status, 0.0))

    def cancel(self) -> None:
        """Not launching after all: kill the intermediate (our own child, by pid) and reap it."""
        if self.pid:
            try:  # noqa: SIM105 - contextlib is not loaded yet when this module runs, and need not be
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0
        self.close()

    def close(self) -> None:
        for fd in (self._config_w, self.ready_r):
            if fd >= 0:
                os.close(fd)
        self._config_w = self.ready_r = -1


def _fork(config_r: int, config_w: int, ready_r: int, ready_w: int) -> int:
    for stream in (sys.stdout, sys.stderr):  # None when the caller closed the fd (>&-)
        if stream is not None:
            stream.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the intermediate process; it never returns
        os.close(config_w)
        os.close(ready_r)
        os._exit(_intermediate(config_r, ready_w))
    return pid


def _spawn(label: tuple[str, ...], config_r: int, ready_w: int) -> int:
    """A fresh ``python -m shellper.daemon`` (shellper.daemon.main.daemon_main) in a session of its own (no
    terminal's signals reach it, so a Ctrl-C while the CLI parses is the CLI's to report), stdin on the
    config pipe, stdout and stderr on /dev/null (until the daemon puts them on its log), and the readiness
    pipe's write end inherited."""
    os.set_inheritable(ready_w, True)  # the caller closes it right after
    return os.posix_spawn(sys.executable, package_command("shellper.daemon", *label),
                          package_env({READY_FD_ENV: str(ready_w)}), setsid=True, file_actions=[
                              (os.POSIX_SPAWN_DUP2, config_r, 0),
                              (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                              (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])


def _intermediate(config_r: int, ready_w: int) -> int:  # pragma: no cover - runs in the forked process
    """Import the server while the CLI parses, then start the daemon with the config the CLI sends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C during parsing is the CLI's to report
    try:
        import shellper.daemon.session  # noqa: F401  (the point of forking early)
        from shellper.core.config import SessionConfig
        from shellper.daemon.main import detached_daemon

        chunks = []
        while chunk := os.read(config_r, 65536):
            chunks.append(chunk)
        os.close(config_r)  # the daemon must not inherit it
        if not chunks:
            return 0
        config = SessionConfig.from_json(b"".join(chunks).decode())
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        return detached_daemon(config, ready_w)
    except BaseException:
        return 1
