"""``shellper``: start, inspect, attach to and stop sessions.

This module reads the command line and hands it to its command (shellper.cli.commands, one module each);
another host's command goes to that host (shellper.cli.onhost). Every failure is one line on stderr naming
what was wrong, and a non-zero exit status: 2 for a bad argument, 1 for everything else (no such session, a
stale socket, permission).
"""

from __future__ import annotations

import os
import sys

from shellper.cli.argscan import scan
from shellper.cli.onhost import MixedHosts, hosts_of_names, per_host_main, remote_host, remote_main
from shellper.core.names import BadHost, BadName

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

    from shellper.daemon.prefork import Prefork


def main(argv: list[str] | None = None, prefork: Prefork | None = None) -> int:
    """Run one command; ``prefork`` is the daemon-to-be that the console script started early, if any."""
    argv = list(sys.argv[1:] if argv is None else argv)
    line = scan(argv)
    if line.command is None and line.child is None and line.exact and not line.operands and not (
            line.options.keys() & {"-h", "--help", "--version"}):
        argv.append("ls")  # bare `shellper`: the sessions, as abduco lists them
        line = scan(argv)
    try:
        groups = hosts_of_names(line)
        host = remote_host(line)
    except (MixedHosts, BadHost, BadName) as exc:  # before anything runs, here or on a host
        print(f"shellper: {exc}", file=sys.stderr)
        return 2
    if line.command is not None and not _known(line.command):  # after the host's checks: a bad --host first
        return _unknown_command(line.command)
    if len(groups) > 1:  # names on several hosts: each goes to its own
        return per_host_main(argv, line, groups, lambda part: main(part, prefork))
    if host is not None:
        return remote_main(argv, line, host)
    if line.command in ("run", "attach", "exec") and line.child is not None:  # all after the first -- is the child's
        args = _parse(argv[:len(argv) - len(line.child) - 1])
        # a command already begun before the -- (run NAME git log -- FILE) has it as one of its arguments
        args.command = [*args.command, "--", *line.child] if args.command else line.child
    else:  # argparse's own --: what follows is positional (send NAME -- -text)
        args = _parse(argv)
    args.prefork = prefork
    try:
        from shellper.cli.commands import load
        from shellper.cli.connect import reported

        code = reported(lambda: load(args.cmd).handle(args))
        _flush_stdout()
        return code
    except BrokenPipeError:  # `shellper ls | head -1`: the reader has all it wanted
        return _reader_left()


def _known(command: str) -> bool:
    from shellper.cli.commands import COMMANDS

    return command in COMMANDS


def _unknown_command(command: str) -> int:
    """A mistyped command: the likeliest meant, then the list (argparse's own names none)."""
    import difflib

    from shellper.cli.commands import COMMANDS

    names = [name for name in COMMANDS if name != "legacy-main"]
    close = difflib.get_close_matches(command, names, n=1, cutoff=0.6)
    meant = f"; did you mean {close[0]!r}?" if close else ""
    print(f"shellper: unknown command {command!r}{meant}\n(commands: {', '.join(names)}; shellper -h says more)",
          file=sys.stderr)
    return 2


def _parse(argv: list[str]) -> argparse.Namespace:
    """The parser's reading of ``argv``; an option the command does not have is reported with that command's
    usage (argparse's own would show the top level's), and for run and attach a hint that a command's own
    options go after --."""
    from shellper.cli.argtree import build_lazily, commands

    parser = build_lazily()
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    command = commands(parser).fill(args.cmd)
    hint = ""
    if getattr(args, "command", None) and extra[0].startswith("-"):
        words = " ".join([*args.command, *extra])
        hint = (f"\nhint: put -- before the command, so its own options are not taken for shellper's: "
                f"shellper {args.cmd} {args.name} -- {words}")
    command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    raise AssertionError("unreachable: error() exits")


SIGPIPE_STATUS = 128 + 13
"""The status of a command whose reader left (``shellper ls | head -1``): what a shell reports for a program
killed by SIGPIPE, as ``ls``, ``cat`` and ``yes`` are; Python ignores SIGPIPE and gets EPIPE instead."""


def _flush_stdout() -> None:
    """Here, not at exit: a reader gone by now is a broken pipe for main() to answer quietly. Other failures
    (stdout full or closed) are left for the exit to report (shellper.cli.entry)."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError):
        pass


def _reader_left() -> int:
    """Quietly: stdout is pointed at /dev/null so that flushing what is still buffered (at exit, by the
    interpreter) does not fail a second time with a traceback."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)
    except (OSError, ValueError, AttributeError):  # stdout closed or replaced: nothing left to flush into
        pass
    return SIGPIPE_STATUS
