"""``shellper bridge NAME``: the session's socket on stdin and stdout, for a client on another host."""

from __future__ import annotations

from shellper.cli.options import NAME

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (NAME,)


def handle(args: argparse.Namespace) -> int:
    """The session's socket on stdin and stdout (shellper.client.bridge); the console script takes a plain
    ``bridge NAME`` there without the parser (shellper.cli.entry)."""
    from shellper.cli.connect import CliError, session_dir
    from shellper.client.bridge import BridgeError, bridge
    from shellper.core.errors import ClientError
    from shellper.core.names import socket_path, validate_name

    validate_name(args.name)
    try:
        return bridge(socket_path(session_dir(args), args.name))
    except (BridgeError, ClientError) as exc:  # ClientError: a socket refused as not ours (shellper.host.trust)
        raise CliError(f"session {args.name!r}: {exc}") from None
