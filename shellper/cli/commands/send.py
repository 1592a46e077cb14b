"""``shellper send NAME TEXT``: type text into a session."""

from __future__ import annotations

from shellper.cli.options import NAME, Flag, Positional

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (
    NAME,
    Positional("text", help="what to type; - reads it from stdin"),
    Flag("--enter", help="press Enter after the text"),
)


def handle(args: argparse.Namespace) -> int:
    import sys

    from shellper.cli.connect import CliError, connect
    from shellper.core.states import SessionState
    from shellper.protocol import wire

    text = (sys.stdin.buffer.read() if args.text == "-" else args.text.encode()) + (b"\r" if args.enter else b"")
    with connect(args, wire.Role.TERMINAL, replay_bytes=0) as client:
        assert client.welcome is not None
        state = client.welcome.state
        if state not in (SessionState.RUNNING, SessionState.STARTING):  # input would go nowhere (or to a later child)
            raise CliError(f"send: session {args.name!r} has no running program (state {state}); nothing sent")
        client.write(text)
        client.request(wire.Ping(nonce=1), wire.Pong)  # the shellper has taken the input once it answers
    return 0
