"""The daemon forked before the CLI has parsed its arguments (the console script is shellper.cli.entry).

``shellper run`` costs two rounds of imports in a row: the CLI's (argparse, the config, the restart
policy) and the server's (codec, ring, reactor). A :class:`Prefork` overlaps them: the process that
becomes the daemon is forked first, imports the server on the other core while the CLI parses and
validates, then waits for the config on a pipe (whether to fork one is shellper.cli.argscan.may_detach's
guess). If the CLI decides otherwise (another command, a bad
argument, a session already running), the prefork is killed by pid and reaped; it has touched nothing.
This module imports only os, signal and sys (which every shellper process loads anyway), so forking
happens before any of the package's own imports.
"""

from __future__ import annotations

import os
import signal
import sys


class Prefork:
    """The intermediate process of a detached launch, forked early; see the module docstring.

    It reads the config (JSON) from ``config_w``'s pipe, makes itself a session leader, forks the daemon
    and exits; the daemon writes its readiness report to the pipe behind ``ready_r``.
    """

    def __init__(self, pid: int, config_w: int, ready_r: int) -> None:
        self.pid = pid
        self._config_w = config_w
        self.ready_r = ready_r
        self.status: int | None = None
        """The intermediate's wait status, once it was reaped having died before taking the config."""

    @classmethod
    def start(cls) -> Prefork:
        config_r, config_w = os.pipe()
        ready_r, ready_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # None when the caller closed the fd (>&-)
            if stream is not None:
                stream.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the intermediate process; it never returns
            os.close(config_w)
            os.close(ready_r)
            os._exit(_intermediate(config_r, ready_w))
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
