"""``shellper stop NAME... | --all``: stop sessions (shellper.client.stop.stop_session), all at once."""

from __future__ import annotations

from shellper.cli.options import Flag, Positional, Value, seconds
from shellper.core.defaults import DEFAULT_GRACE

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import TextIO

ARGUMENTS = (
    Positional("name", nargs="*", metavar="NAME", help="the sessions to stop"),
    Flag("--all", help="stop every session in the runtime directory"),
    Value("--grace", type=seconds,
          help=f"seconds between SIGTERM and SIGKILL (default: the session's own, else {DEFAULT_GRACE:g})"),
)


PROGRESS_AFTER = 1.0
"""Seconds a ``stop`` runs silently: past them, it says which sessions it still waits for, and how long."""

MAX_PARALLEL = 16
"""Sessions stopped at once: each mostly waits (for its grace, for its shellper to exit)."""


def handle(args: argparse.Namespace) -> int:
    """``stop A B`` and ``stop --all``: all at once, each one's line in the order named as soon as it and
    those before it are done, a failure reported and the rest still stopped."""
    from shellper.cli.connect import CliError, session_dir
    from shellper.host.paths import session_names

    if args.all == bool(args.name):
        raise CliError("stop: name the sessions to stop, or --all (not both)")
    names = session_names(session_dir(args)) if args.all else list(dict.fromkeys(args.name))
    if args.all and not names:
        print(f"no sessions in {session_dir(args)}")
    return stop_all(session_dir(args), names, args.grace)


def stop_all(directory: str, names: list[str], grace: float | None) -> int:
    """Stop ``names`` in parallel threads; 1 if any failed. A stop that outlasts PROGRESS_AFTER is shown on a
    terminal (one rewritten line), so a slow stop is never a silent one."""
    import sys
    import threading
    import time

    from shellper.cli.connect import user_errors

    results: dict[str, tuple[bool, str]] = {}
    done = threading.Condition()
    out = _Progress(sys.stderr)

    def one(name: str) -> None:
        try:
            result = (True, stop_named(directory, name, grace, out.note))
        except user_errors() as exc:
            result = (False, f"shellper: {exc}")
        except Exception as exc:  # a bug in one stop must not hang the others' report
            result = (False, f"shellper: stop {name}: {type(exc).__name__}: {exc}")
        with done:
            results[name] = result
            done.notify_all()

    pending = list(names)
    started = time.monotonic()
    workers: list[threading.Thread] = []
    failed = 0
    with done:
        while pending:
            while len(workers) - len(results) < MAX_PARALLEL and len(workers) < len(names):
                worker = threading.Thread(target=one, args=(names[len(workers)],), daemon=True)
                workers.append(worker)
                worker.start()
            while pending and pending[0] in results:
                ok, line = results[pending.pop(0)]
                failed += not ok
                out.clear()
                print(line, file=sys.stdout if ok else sys.stderr, flush=True)
            if pending:
                done.wait(timeout=0.25)
                waited = time.monotonic() - started
                if waited >= PROGRESS_AFTER:
                    out.show(f"stopping {', '.join(n for n in names if n not in results)}... {waited:.0f} s")
    out.clear()
    return 1 if failed else 0


class _Progress:
    """The line that says what a slow stop waits for, rewritten in place, on a terminal only (a program
    reading stderr gets the outcome lines alone)."""

    def __init__(self, stream: TextIO) -> None:
        import threading

        self.stream = stream
        self.tty = stream.isatty()
        self.shown = ""
        self.lock = threading.Lock()

    def show(self, text: str) -> None:
        with self.lock:
            if self.tty and text != self.shown:
                self.stream.write("\r\x1b[K" + text)
                self.stream.flush()
                self.shown = text

    def clear(self) -> None:
        with self.lock:
            if self.tty and self.shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self.shown = ""

    def note(self, line: str) -> None:
        self.clear()
        with self.lock:
            print(line, file=self.stream, flush=True)


def stop_named(directory: str, name: str, grace: float | None, say: Callable[[str], None] | None = None) -> str:
    """Stop session ``name`` of runtime directory ``directory`` (``run --replace`` too); the line that says
    how. ``say`` prints a line to stderr as it happens (print's, by default)."""
    import sys

    from shellper.cli.connect import trusted_paths, unreachable
    from shellper.client.stop import StopWay, Unreachable, stop_session

    trusted_paths(directory, name)

    def notify(why: str) -> None:
        line = f"shellper: session {name!r}: {why}; ending it with signals"
        if say is not None:
            say(line)
        else:
            print(line, file=sys.stderr, flush=True)

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
