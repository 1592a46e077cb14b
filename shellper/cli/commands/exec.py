"""``shellper exec NAME [--timeout S] -- COMMAND...``: type a command into a session's shell, print its output
and exit with its status (shellper.client.execute; docs/EXEC.md)."""

from __future__ import annotations

from shellper.cli.options import NAME, Positional, Value, seconds

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (
    NAME,
    Positional("command", nargs="*", help="the command line to type, after -- (its words joined by spaces, as "
               "ssh joins them: shell syntax is the shell's)"),
    Value("--timeout", type=seconds, default=0.0, metavar="S",
          help="after S seconds type Ctrl-C and exit 124, as timeout(1) does (0, the default: no limit)"),
)


def handle(args: argparse.Namespace) -> int:
    """The command's exit status; 124 when it timed out; 125 when it could not be run or its end not seen."""
    import contextlib
    import sys

    from shellper.cli.connect import connect
    from shellper.client.execute import execute
    from shellper.core.errors import ShellperError
    from shellper.core.execmark import COULD_NOT_RUN, INTERRUPT, LOOKBACK, TIMED_OUT, check_command
    from shellper.protocol import wire

    out = sys.stdout.buffer

    def emit(data: bytes) -> None:
        view = memoryview(data)
        while view:  # unbuffered stdout's raw write may take only part
            view = view[out.write(view):]
        out.flush()

    client = None
    try:
        check_command(" ".join(args.command))  # before connecting: a mistake costs no connection
        client = connect(args, wire.Role.TERMINAL, replay_bytes=LOOKBACK)
        result = execute(client, " ".join(args.command), timeout=args.timeout, on_output=emit)
    except KeyboardInterrupt:  # the person gave up on it: so does the command, as under ssh
        if client is not None:
            with contextlib.suppress(ShellperError):
                client.write(INTERRUPT)
        return 130
    except ShellperError as exc:  # an ExecError names the session, as a connection's failure does
        print(f"shellper: exec: {exc}", file=sys.stderr)
        return COULD_NOT_RUN
    finally:
        if client is not None:
            client.close()
    if result.missed:
        print(f"shellper: exec: {args.name}: {result.missed} bytes of the output were lost (the ring is smaller "
              "than what was not yet read)", file=sys.stderr)
    if result.timed_out:
        after = {True: "the shell is back at its prompt", False: "something still runs in the foreground",
                 None: "whether it ended cannot be told from here"}[result.interrupted]
        print(f"shellper: exec: {args.name}: timed out after {args.timeout:g} s; typed Ctrl-C: {after}",
              file=sys.stderr)
        return TIMED_OUT
    if result.status is None:
        print(f"shellper: exec: {args.name}: the shell's end mark carried no exit status", file=sys.stderr)
        return COULD_NOT_RUN
    return result.status
