"""``shellper attach [-c] NAME [-- COMMAND [ARGS...]]``: this terminal onto a session (shellper.cli.attach).

A plain attach, the command people wait on, is run from the console script without argparse
(:func:`quick_main`), read from the same table as the parser's. Unlike the other commands' modules this one
imports shellper.cli.attach at its top: its table is read to attach (or to build the whole parser).
"""

from __future__ import annotations

from shellper.cli.attach import DEFAULT_DETACH_KEY, attach_session
from shellper.cli.options import NAME, Flag, Positional, Value, destinations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from shellper.cli.argscan import Scan


CREATE = Flag("-c", "--create", help="start the session first if it is not running (as dtach -A, tmux new -A)")

ARGUMENTS = (
    NAME,
    Positional("command", nargs="*", help="with -c, the program to start if NAME is not running (default $SHELL), "
               "after --"),
    CREATE,
    Value("--detach-key", "-e", default=DEFAULT_DETACH_KEY,
          help="key that detaches: ^X, one character, or none (default ^\\, i.e. Ctrl-\\)"),
    Flag("--read-only", "-r", help="attach as a viewer: no input, no resize"),
    Flag("--no-replay", help="show only new output"),
    Flag("--raw", help="replay the recent output's bytes instead of drawing the screen as it is now"),
    Flag("--relay", help="pass every byte through this process instead of handing the terminal to the shellper"),
)


def handle(args: argparse.Namespace) -> int:
    from shellper.cli.connect import CliError

    if args.command and not args.create:
        raise CliError(f"attach: a command is only for -c (start {args.name!r} if it is not running): "
                       f"shellper attach -c {args.name} -- {' '.join(args.command)}")
    if args.create:
        _create(args)
    return attach_session(args.dir, args.name, detach_key=args.detach_key, read_only=args.read_only,
                          no_replay=args.no_replay, relay=args.relay, raw=args.raw)


def _create(args: argparse.Namespace) -> None:
    """``attach -c``: start NAME with the default options unless it is running; one started by someone
    else meanwhile is attached to as well."""
    import os

    from shellper.cli.connect import default_command, session_dir
    from shellper.client.launch import LaunchError, launch
    from shellper.core.config import SessionConfig
    from shellper.core.defaults import DEFAULT_COLS, DEFAULT_HUSK_TTL, DEFAULT_ROWS, terminal_size_in_range
    from shellper.core.names import validate_name
    from shellper.daemon.prefork import Prefork
    from shellper.host.paths import SessionPaths
    from shellper.host.record import SessionLock
    from shellper.host.terminfo import session_term

    validate_name(args.name)
    paths = SessionPaths.for_name(session_dir(args), args.name)
    if SessionLock.is_locked(paths.lock):
        _start_again_if_ended(args)
        return
    try:  # the terminal's size from the start, so the program's first screen fits it
        size = os.get_terminal_size(0)
        cols, rows = (size.columns, size.lines) if terminal_size_in_range(size.columns, size.lines) else (
            DEFAULT_COLS, DEFAULT_ROWS)
    except OSError:
        cols, rows = DEFAULT_COLS, DEFAULT_ROWS
    config = SessionConfig(name=args.name, argv=list(args.command) or default_command(), dir=session_dir(args),
                           cwd=os.getcwd(), env=dict(os.environ), cols=cols, rows=rows,
                           term=session_term(os.environ), husk_ttl=DEFAULT_HUSK_TTL)
    try:
        launch(config, start_prefork=Prefork.start)
    except LaunchError:
        if not SessionLock.is_locked(paths.lock):  # not a race with another attach -c: a real failure
            raise


def _start_again_if_ended(args: argparse.Namespace) -> None:
    """``attach -c`` of a session whose program has ended for good (a husk): run it again (the command given,
    else its own), as ``tmux new -A`` makes a session whose name is free, saying so in one line."""
    import sys

    from shellper.cli.commands.restart import respawn
    from shellper.cli.connect import connect
    from shellper.core.states import SessionState
    from shellper.protocol import wire

    with connect(args, wire.Role.TOWER, replay_bytes=0) as client:
        status = client.status()
        if status.state not in (SessionState.EXITED, SessionState.FATAL):
            return
        why = status.info.get("state_reason") or status.state
        ran = respawn(client, args.name, list(args.command) or None)
        print(f"shellper: session {args.name!r} had ended ({why}); started it again{ran}", file=sys.stderr)


# ----------------------------------------------------------------------------------------- the quick path

_QUICK = {option: dest for option, dest in destinations(ARGUMENTS).items() if option not in CREATE.names}
"""The options a plain attach may have (not -c, which starts a session: the full CLI does that), each with
its argument; and --dir, before or after the command."""
_QUICK["--dir"] = "dir"


def quick_args(line: Scan) -> dict[str, Any] | None:
    """The arguments of a plain ``[--dir DIR] attach NAME [--detach-key K] [--read-only] [--no-replay]
    [--relay] [--raw]``, read by shellper.cli.argscan; None for anything else (help, abbreviations, mistakes,
    an empty --dir), which the full CLI then parses and reports. Why: argparse and what the CLI imports
    with it cost every attach more than the interpreter's own start-up, and attach is the command people
    wait on."""
    if (line.command != "attach" or not line.exact or line.child is not None or len(line.operands) != 1
            or not _QUICK.keys() >= line.options.keys() or line.options.get("--dir") == ""
            or len({_QUICK[option] for option in line.options}) != len(line.options)):
        return None  # (the last: both spellings of one option, whose order the scan does not keep)
    args: dict[str, Any] = {"dir": None, "name": line.operands[0]}
    args.update((arg.attribute, arg.unset) for arg in ARGUMENTS if not arg.positional and arg is not CREATE)
    for option, value in line.options.items():
        args[_QUICK[option]] = value
    return args


def quick_main(line: Scan) -> int | None:
    """Run ``shellper attach`` from the console script without the full CLI; None: not a plain attach."""
    args = quick_args(line)
    if args is None:
        return None
    from shellper.core.names import BadName

    try:
        return attach_session(args.pop("dir"), args.pop("name"), **args)
    except BadName:
        return None  # the full CLI says what is wrong with it
    except KeyboardInterrupt:
        return 130
