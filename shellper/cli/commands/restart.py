"""``shellper restart NAME``: run a session's command again."""

from __future__ import annotations

from shellper.cli.options import NAME

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (NAME,)


def handle(args: argparse.Namespace) -> int:
    """SPAWN with the session's current command, cwd and environment: the child is replaced (ended first if
    it runs), the restart breaker reset."""
    from shellper.cli.connect import confirm, connect
    from shellper.protocol import wire

    with connect(args, wire.Role.TOWER, replay_bytes=0) as client:
        client.send(wire.Spawn())
        confirm(client)
    print(f"restarted {args.name}")
    return 0
