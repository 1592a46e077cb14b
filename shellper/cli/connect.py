"""What the commands share: their one-line error, the runtime directory, and a connection to a session."""

from __future__ import annotations

from shellper.core.errors import ShellperError
from shellper.core.states import SessionState

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

    from shellper.client.blocking import Client, ClientError
    from shellper.host.paths import SessionPaths


class CliError(ShellperError):
    """A failure worth one line to the user; ``cause``: the connection's failure, when that is what it says."""

    def __init__(self, message: str, cause: ClientError | None = None) -> None:
        super().__init__(message)
        self.cause = cause


ENDED = (SessionState.EXITED, SessionState.FATAL)
"""States a session leaves only when asked (SPAWN, STOP): ``tail -f`` ends there, ``ls`` marks them."""


_USER_ERRORS = (("shellper.core.launchfailure", "LaunchError"), ("shellper.client.stop", "StopFailed"),
                ("shellper.core.config", "ConfigError"), ("shellper.core.errors", "ClientError"),
                ("shellper.core.exits", "PolicyError"), ("shellper.core.names", "PathError"),
                ("shellper.host.record", "LockError"))
"""Where the failures that deserve one line are defined, by module and name."""


def user_errors() -> tuple[type[Exception], ...]:
    """Failures that deserve one line, not a traceback. Only those of loaded modules: an error whose module
    was never imported cannot have been raised, and importing it to find out (the launch for ``ls``) is
    what a command should not pay."""
    import sys

    found = (getattr(sys.modules.get(module), name, None) for module, name in _USER_ERRORS)
    return (CliError, *(error for error in found if error is not None))


def reported(handle: Callable[[], int]) -> int:
    """A command's exit status: ``handle``'s, 1 for a user error (one line on stderr), 130 for ^C; anything
    else is a bug and raises."""
    try:
        return handle()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not isinstance(exc, user_errors()):
            raise
        import sys

        print(f"shellper: {getattr(exc, 'command_line', exc)}", file=sys.stderr)  # ConfigError: as typed
        return 1


def session_dir(args: argparse.Namespace) -> str:
    """The runtime directory the command line names (--dir), else the default."""
    from shellper.host.paths import runtime_dir

    return runtime_dir(args.dir)


def trusted_paths(directory: str, name: str) -> SessionPaths:
    """The session's paths, once its directory is one a client may trust (shellper.host.trust): ``stop`` and
    ``status`` read its lock and record, which another user could have planted, before they connect.
    UntrustedSocket if not."""
    from shellper.core.names import validate_name
    from shellper.host.paths import SessionPaths
    from shellper.host.trust import check_socket_dir

    validate_name(name)
    paths = SessionPaths.for_name(directory, name)
    check_socket_dir(paths.socket)
    return paths


def connect(args: argparse.Namespace, role: str = "tower", **hello: Any) -> Client:  # wire.Role.TOWER: wire loads late
    """A connection to session ``args.name``, its handshake done; CliError naming the session if not."""
    from shellper.client.blocking import Client, ClientError
    from shellper.core.names import socket_path, validate_name

    validate_name(args.name)
    path = socket_path(session_dir(args), args.name)
    client = Client(path, role, client_name=f"shellper-cli:{args.cmd}")
    try:
        client.connect(**hello)
    except ClientError as exc:
        raise unreachable(session_dir(args), args.name, exc) from None
    return client


def unreachable(directory: str, name: str, exc: ClientError) -> CliError:
    """A failed connection to session ``name`` in words: the path, what is wrong, and for a stale socket what
    to do."""
    from shellper.client.blocking import ConnectionRefused, SessionNotFound

    hint = (f"; its shellper is gone: `shellper stop {name}` ends what it left running and removes "
            "its files") if isinstance(exc, ConnectionRefused) else ""
    if isinstance(exc, SessionNotFound):
        from shellper.cli.attach import sessions_hint

        hint = sessions_hint(directory, name)
    return CliError(f"session {name!r}: {exc}{hint}", exc)


def confirm(client: Client) -> None:
    """A PING round trip: any ERROR for what we sent arrives before the PONG."""
    from shellper.client.blocking import RemoteError
    from shellper.protocol import wire

    client.send(wire.Ping(nonce=7))
    while True:
        frame = client.recv(timeout=client.timeout)
        if frame is None:
            raise CliError("the session did not answer")
        if isinstance(frame, wire.Error):
            raise RemoteError(client.path, frame)
        if isinstance(frame, wire.Pong):
            return


def default_command() -> list[str]:
    """What a session runs when no command is given: the user's shell, as the peers start."""
    import os

    return [os.environ.get("SHELL") or "/bin/sh"]
