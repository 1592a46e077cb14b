"""``shellper stop NAME... | --all``: stop sessions (shellper.client.stop.stop_session), each in turn."""

from __future__ import annotations

from shellper.cli.options import Flag, Positional, Value, seconds
from shellper.core.defaults import DEFAULT_GRACE

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = (
    Positional("name", nargs="*", metavar="NAME", help="the sessions to stop"),
    Flag("--all", help="stop every session in the runtime directory"),
    Value("--grace", type=seconds,
          help=f"seconds between SIGTERM and SIGKILL (default: the session's own, else {DEFAULT_GRACE:g})"),
)


def handle(args: argparse.Namespace) -> int:
    """``stop A B`` and ``stop --all``: each in turn, a failure reported and the rest still stopped."""
    import sys

    from shellper.cli.connect import CliError, session_dir, user_errors
    from shellper.host.paths import session_names

    if args.all == bool(args.name):
        raise CliError("stop: name the sessions to stop, or --all (not both)")
    names = session_names(session_dir(args)) if args.all else args.name
    if args.all and not names:
        print(f"no sessions in {session_dir(args)}")
    failed = 0
    for name in names:
        try:
            print(stop_named(session_dir(args), name, args.grace))
        except user_errors() as exc:
            print(f"shellper: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def stop_named(directory: str, name: str, grace: float | None) -> str:
    """Stop session ``name`` of runtime directory ``directory`` (``run --replace`` too); the line that says
    how."""
    import sys

    from shellper.cli.connect import trusted_paths, unreachable
    from shellper.client.stop import StopWay, Unreachable, stop_session

    trusted_paths(directory, name)

    def notify(why: str) -> None:
        print(f"shellper: session {name!r}: {why}; ending it with signals", file=sys.stderr, flush=True)

    try:
        stopped = stop_session(directory, name, grace=grace, client_name="shellper-cli:stop",
                               notify=notify)
    except Unreachable as exc:
        raise unreachable(directory, name, exc.error) from None
    if stopped.way == StopWay.ASKED_NAME_TAKEN:
        return f"stopped {name}; a new session {name!r} has started since"
    if stopped.way == StopWay.SILENT:
        return f"stopped {name} (its shellper did not answer; via {stopped.method})"
    if stopped.way == StopWay.LOCK_MISSING:
        return f"stopped {name} (its lock file was missing; via {stopped.method})"
    if stopped.way == StopWay.ALREADY_GONE:
        ended = f" and ended {stopped.ended} process(es) it left running" if stopped.ended else ""
        return f"stopped {name}: its shellper was already gone; removed its files{ended}"
    return f"stopped {name}"
