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
    Flag("--html", help="a self-contained HTML page, colours kept (with --scrollback too), to share what a program "
         "did: shellper screen NAME --html --scrollback 1000 > NAME.html"),
    Value("--scrollback", type=int, default=0, metavar="N",
          help=f"also the last N lines that scrolled off the main screen (a session keeps {SCREEN_SCROLLBACK_LINES})"),
)


def handle(args: argparse.Namespace) -> int:
    from shellper.cli import capture
    from shellper.cli.connect import CliError, connect
    from shellper.protocol import wire

    if args.scrollback < 0:
        raise CliError(f"screen: --scrollback {args.scrollback}: must be >= 0")
    if args.html and (args.json or args.ansi):
        raise CliError("screen: --html is a page of its own: not with --json or --ansi")
    with connect(args, wire.Role.VIEWER, replay_bytes=0) as client:
        try:
            if args.html:
                import sys

                from shellper.cli.html import document

                sys.stdout.write(document(capture.request_screen(client, ansi=True, scrollback=args.scrollback),
                                          args.name))
                return 0
            return capture.cmd_screen(client, ansi=args.ansi, as_json=args.json, scrollback=args.scrollback)
        except capture.NoScreenModel as exc:
            raise CliError(f"screen: session {args.name!r}: {exc}") from None
