"""``shellper signal NAME SIGNAL``: send a signal to the session's child process group."""

from __future__ import annotations

from shellper.cli.options import NAME, Positional

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (
    NAME,
    Positional("signal", help="a signal name or number: HUP, INT, TERM, KILL, 9, ... (SIG prefix optional)"),
)


def handle(args: argparse.Namespace) -> int:
    from shellper.cli.connect import CliError, confirm, connect
    from shellper.protocol import wire

    spelled = args.signal
    if spelled.isdigit():  # `kill -9` habits: the number of one of the signals the protocol carries
        import signal

        numbered = {int(signum): signum.name for signum in signal.Signals}
        spelled = numbered.get(int(spelled), spelled)
    bare = wire.bare_signal(spelled)
    if bare is None:
        raise CliError(f"signal: {args.signal!r} is not one of {' '.join(wire.SIGNALS)}")
    with connect(args, wire.Role.TOWER, replay_bytes=0) as client:
        client.send(wire.Signal(signal=bare))
        confirm(client)
    return 0
