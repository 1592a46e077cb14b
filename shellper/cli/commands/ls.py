"""``shellper ls``: list the sessions of the runtime directory."""

from __future__ import annotations

from shellper.cli.options import SUPPRESS, Flag, Value

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

    from shellper.client.sessions import SessionInfo

ARGUMENTS = (
    Flag("--long", "-l", help="every column (pids, ring, owner, containment, labels, current directory) and each "
         "last exit in full"),
    Flag("--json", help="one JSON array, for programs: the sessions, then the directory's warm launcher if one "
         "runs (\"kind\": \"launcher\")"),
    Value("--where", metavar="KEY=VALUE", repeated=True,
          help="only sessions with this label (shellper set); repeated: all of them; KEY=: without that label"),
    Flag("--names", help=SUPPRESS),  # the names alone, one a line, asking no session: what completion offers
)

LS_COMMAND_WIDTH = 30
"""Characters of a session's command ``ls`` shows at most; the rest is cut (``status NAME`` shows all of it)."""

MIN_CUT = 8
"""Fewest characters COMMAND or LAST EXIT is cut to, to fit a narrow terminal: a narrower one wraps."""
COMMAND_FLOOR = 16
"""COMMAND is cut to this before LAST EXIT is cut at all."""

SHORT = ("", "NAME", "STATE", "UPTIME", "CLIENTS", "COMMAND", "LAST EXIT")
LONG = ("", "NAME", "STATE", "PID", "CHILD", "UPTIME", "CLIENTS", "RING", "OWNER", "CONTAINMENT", "LABELS",
        "CWD", "COMMAND", "LAST EXIT")


def handle(args: argparse.Namespace) -> int:
    import json

    from shellper.cli.connect import session_dir
    from shellper.client.sessions import list_sessions
    from shellper.host.paths import existing_runtime_dir

    exists = existing_runtime_dir(session_dir(args))
    if args.names:
        from shellper.host.paths import session_names

        for name in session_names(session_dir(args)) if exists else []:
            print(name)
        return 0
    sessions = list_sessions(session_dir(args)) if exists else []
    if args.where:
        from shellper.core.labels import matches

        wanted = _wanted(args.where)
        sessions = [s for s in sessions if matches(s.labels, wanted)]
    if args.json:
        listed = [s.to_dict() for s in sessions]
        launcher = _launcher(session_dir(args)) if exists else None
        print(json.dumps(listed if launcher is None else [*listed, launcher], indent=2))
        return 0
    if not sessions:
        print(f"no sessions in {session_dir(args)}" + (f" with {' '.join(args.where)}" if args.where else ""))
        return 0
    # A leading "+" marks a finished session (as abduco does), blank otherwise, so a row's first word is still its
    # name unless it finished; COMMAND and LAST EXIT, last, are cut to fit a terminal (not with -l). Scripts: --json.
    header = LONG if args.long else SHORT
    rows = [header, *(_row(s, args.long) for s in sessions)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    if not args.long:  # -l: everything, in full, wrapping where it must
        _fit(widths, _terminal_width())
    for r in rows:
        print("  ".join(_cut(c, w).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _wanted(where: list[str]) -> dict[str, str]:
    from shellper.cli.connect import CliError
    from shellper.core.labels import BadLabel, parse_assignment

    try:
        return dict(parse_assignment(text) for text in where)
    except BadLabel as exc:
        raise CliError(f"ls: --where {exc}") from None


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items())) or "-"


def _launcher(directory: str) -> dict[str, object] | None:
    """The directory's warm launcher as ``ls --json`` lists it, after the sessions: ``kind`` says it is no
    session, and ``name`` (its socket's, with a leading dot) is none a session can have. None if none runs."""
    from shellper.host.warmstart import SOCKET_NAME, launcher_status

    about = launcher_status(directory)
    if about is None:
        return None
    return {"kind": "launcher", "name": SOCKET_NAME.removesuffix(".sock"), "state": "running", **about}


def _terminal_width() -> int | None:
    """The width of the terminal ls prints to; None for a pipe or a file (nothing is cut there)."""
    import os
    import sys

    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else None
    except (OSError, ValueError, AttributeError):
        return None


def _fit(widths: list[int], columns: int | None) -> None:
    """Narrow the last two columns so a row fits ``columns``: COMMAND to COMMAND_FLOOR first (its start says
    what it is), then LAST EXIT, then COMMAND again, each to no fewer than MIN_CUT characters."""
    if columns is None:
        return
    over = sum(widths) + 2 * (len(widths) - 1) - columns
    for i, floor in ((-2, COMMAND_FLOOR), (-1, MIN_CUT), (-2, MIN_CUT)):
        if over <= 0:
            return
        take = min(over, max(0, widths[i] - floor))
        widths[i] -= take
        over -= take


def _cut(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[:width - 1] + "…"


def _row(s: SessionInfo, long: bool) -> tuple[str, ...]:
    import time

    from shellper.cli.connect import ENDED
    from shellper.cli.show import duration, short_exit, size
    from shellper.core.terminal.text import printable

    finished = "+" if s.state in ENDED else " "
    command = _cut(printable(s.command or "-"), LS_COMMAND_WIDTH)  # one line: \n as \\n, an escape sequence inert
    short = not long and s.exit is not None
    last = short_exit(s.exit, s.state, s.next_restart_at, time.time()) if short and s.exit else s.last_exit or "-"
    # Every cell that came from a record or a shellper's answer is printable: a record is a file anyone with
    # the directory's access may have written, and LAST EXIT quotes what a program wrote.
    clients = "-" if s.clients is None else str(s.clients)
    if long:
        cells: tuple[str, ...] = (finished, s.name, s.state, str(s.pid or "-"), str(s.child_pid or "-"),
                                  duration(s.uptime), clients, size(s.ring_bytes), s.owner or "-",
                                  s.containment or "-", _labels(s.labels), s.working_dir or "-", command, last)
    else:
        cells = (finished, s.name, s.state, duration(s.uptime), clients, command, last)
    return tuple(map(printable, cells))
