"""``shellper resize NAME COLS ROWS``: set the session's terminal size."""

from __future__ import annotations

from shellper.cli.options import NAME, Positional

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (
    NAME,
    Positional("cols", type=int, help="columns, 1-65535"),
    Positional("rows", type=int, help="rows, 1-65535"),
)


def handle(args: argparse.Namespace) -> int:
    from shellper.cli.connect import CliError, confirm, connect
    from shellper.core.defaults import TERMINAL_SIZE_RANGE, terminal_size_in_range
    from shellper.protocol import wire

    if not terminal_size_in_range(args.cols, args.rows):
        raise CliError(f"resize: {args.cols}x{args.rows} is outside {TERMINAL_SIZE_RANGE}")
    with connect(args, wire.Role.TERMINAL, replay_bytes=0) as client:
        client.send(wire.Resize(cols=args.cols, rows=args.rows))
        confirm(client)
    return 0
