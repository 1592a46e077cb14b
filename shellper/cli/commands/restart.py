"""``shellper restart NAME``: run a session's command again, and say so once the new child runs."""

from __future__ import annotations

from shellper.cli.options import NAME

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

    from shellper.client.blocking import Client

ARGUMENTS = (NAME,)

SLOW_NOTE_AFTER = 1.0
"""Seconds a restart waits silently for the old program's tree to end before it says that it waits."""


def handle(args: argparse.Namespace) -> int:
    """SPAWN with the session's current command, cwd and environment: the child is replaced (ended first if
    it runs), the restart breaker reset; the line comes once the new child runs (or says why it did not)."""
    from shellper.cli.connect import connect
    from shellper.protocol import wire

    with connect(args, wire.Role.TOWER, replay_bytes=0) as client:
        print(f"restarted {args.name}{respawn(client, args.name)}")
    return 0


def respawn(client: Client, name: str, argv: list[str] | None = None) -> str:
    """SPAWN (``argv``: None for the session's own command) and wait until the new child runs: what runs,
    as ``": pid N runs CMD"`` ("" from a version-2 shellper, which does not answer). A wait for the old tree
    to end (its grace) is said on stderr after SLOW_NOTE_AFTER. SpawnFailed (a ClientError) says why not."""
    import shlex
    import sys
    import threading

    from shellper.cli.connect import confirm

    def slow() -> None:
        print(f"shellper: restarting {name}: waiting for its old program to end...", file=sys.stderr, flush=True)

    timer = threading.Timer(SLOW_NOTE_AFTER, slow)
    timer.daemon = True
    timer.start()
    try:
        pid = client.spawn(argv)
        if pid is None:
            confirm(client)
            return ""
    finally:
        timer.cancel()
    status = client.status()
    shown = status.info.get("argv") or argv
    return f": pid {pid} runs {shlex.join(shown)}" if shown else f": pid {pid}"
