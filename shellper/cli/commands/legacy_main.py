"""``shellper legacy-main CONFIG``: a session for a Tower written for the original shellper (docs/LEGACY.md)."""

from __future__ import annotations

from shellper.cli.options import Positional

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (
    Positional("config", help="the original's launch config: JSON {command, args, cwd, env, cols, rows, socketPath}"),
)


def handle(args: argparse.Namespace) -> int:
    from shellper.daemon.legacymain import legacy_main

    return legacy_main([args.config])
