"""``shellper screen NAME``: print a session's screen as it is now (shellper.cli.capture draws it)."""

from __future__ import annotations

from shellper.cli.options import NAME, Flag, Value
from shellper.core.defaults import SCREEN_SCROLLBACK_LINES

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (
    NAME,
    Flag("--ansi", help="with colours and attributes (SGR sequences)"),
    Flag("--json", help="the screen, cursor, title and output offset as JSON, for programs"),
    Value("--scrollback", type=int, default=0, metavar="N",
          help=f"also the last N lines that scrolled off the main screen (a session keeps {SCREEN_SCROLLBACK_LINES})"),
)


def handle(args: argparse.Namespace) -> int:
    from shellper.cli import capture
    from shellper.cli.connect import CliError, connect
    from shellper.protocol import wire

    if args.scrollback < 0:
        raise CliError(f"screen: --scrollback {args.scrollback}: must be >= 0")
    with connect(args, wire.Role.VIEWER, replay_bytes=0) as client:
        try:
            return capture.cmd_screen(client, ansi=args.ansi, as_json=args.json, scrollback=args.scrollback)
        except capture.NoScreenModel as exc:
            raise CliError(f"screen: session {args.name!r}: {exc}") from None
