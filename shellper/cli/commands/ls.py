"""``shellper ls``: list the sessions of the runtime directory."""

from __future__ import annotations

from shellper.cli.options import Flag

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

    from shellper.client.sessions import SessionInfo

ARGUMENTS = (Flag("--json", help="one JSON array, for programs: the sessions, then the directory's warm launcher "
                  "if one runs (\"kind\": \"launcher\")"),)

LS_COMMAND_WIDTH = 30
"""Characters of a session's command ``ls`` shows; the rest is cut (``status NAME`` shows all of it)."""


def handle(args: argparse.Namespace) -> int:
    import json

    from shellper.cli.connect import session_dir
    from shellper.client.sessions import list_sessions
    from shellper.host.paths import existing_runtime_dir

    exists = existing_runtime_dir(session_dir(args))
    sessions = list_sessions(session_dir(args)) if exists else []
    if args.json:
        listed = [s.to_dict() for s in sessions]
        launcher = _launcher(session_dir(args)) if exists else None
        print(json.dumps(listed if launcher is None else [*listed, launcher], indent=2))
        return 0
    if not sessions:
        print(f"no sessions in {session_dir(args)}")
        return 0
    # A leading "+" marks a finished session (as abduco does), blank otherwise, so a row's first word is still its
    # name unless it finished; COMMAND is cut to a width; LAST EXIT, free text, stays last. Scripts: --json.
    rows: list[tuple[str, ...]] = [("", "NAME", "STATE", "PID", "CHILD", "UPTIME", "CLIENTS", "RING", "OWNER",
                                    "CONTAINMENT", "COMMAND", "LAST EXIT")]
    rows += [_row(s) for s in sessions]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _launcher(directory: str) -> dict[str, object] | None:
    """The directory's warm launcher as ``ls --json`` lists it, after the sessions: ``kind`` says it is no
    session, and ``name`` (its socket's, with a leading dot) is none a session can have. None if none runs."""
    from shellper.host.warmstart import SOCKET_NAME, launcher_status

    about = launcher_status(directory)
    if about is None:
        return None
    return {"kind": "launcher", "name": SOCKET_NAME.removesuffix(".sock"), "state": "running", **about}


def _row(s: SessionInfo) -> tuple[str, ...]:
    from shellper.cli.connect import ENDED
    from shellper.cli.show import duration, size
    from shellper.core.terminal.text import printable

    finished = "+" if s.state in ENDED else " "
    command = printable(s.command or "-")  # one line: \n as \\n, an escape sequence inert and visible
    if len(command) > LS_COMMAND_WIDTH:
        command = command[:LS_COMMAND_WIDTH - 1] + "…"
    # Every cell that came from a record or a shellper's answer is printable: a record is a file anyone with
    # the directory's access may have written, and LAST EXIT quotes what a program wrote.
    cells = (finished, s.name, s.state, str(s.pid or "-"), str(s.child_pid or "-"), duration(s.uptime),
             "-" if s.clients is None else str(s.clients), size(s.ring_bytes), s.owner or "-",
             s.containment or "-", command, s.last_exit or "-")
    return tuple(map(printable, cells))
