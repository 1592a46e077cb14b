"""``shellper run NAME [options] -- COMMAND [ARGS...]``: start a session."""

from __future__ import annotations

from shellper.cli.options import NAME, SUPPRESS, Const, Flag, Positional, Value, env_pair, host, husk_ttl, seconds, size
from shellper.core.containment import CONTAINMENT_REQUESTS
from shellper.core.defaults import (
    DEFAULT_BACKOFF_FACTOR,
    DEFAULT_BACKOFF_INITIAL,
    DEFAULT_BACKOFF_MAX,
    DEFAULT_BREAKER_COUNT,
    DEFAULT_BREAKER_WINDOW,
    DEFAULT_CLEAN_EXIT_COUNT,
    DEFAULT_CLEAN_EXIT_UPTIME,
    DEFAULT_CLEAN_SIGNALS,
    DEFAULT_COLS,
    DEFAULT_FATAL_PATTERNS,
    DEFAULT_FATAL_SCAN_LINES,
    DEFAULT_GRACE,
    DEFAULT_HEALTHY_UPTIME,
    DEFAULT_HUSK_TTL,
    DEFAULT_JITTER,
    DEFAULT_MAX_RESTARTS,
    DEFAULT_MIN_UPTIME,
    DEFAULT_MODE,
    DEFAULT_PREVENT_CODES,
    DEFAULT_RING_BYTES,
    DEFAULT_ROWS,
    DEFAULT_SAME_ERROR_COUNT,
    DEFAULT_TERM,
    RESTART_MODES,
    STDERR_REQUESTS,
)
from shellper.core.errors import ShellperError
from shellper.core.owner import OWNER_ENV

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

    from shellper.cli.argscan import Scan
    from shellper.client.launch import LaunchInfo
    from shellper.core.exits import RestartPolicy
    from shellper.core.launchfailure import LaunchFailure
    from shellper.daemon.prefork import Prefork
    from shellper.host.paths import SessionPaths

POLICY = "restart_policy_"
"""The prefix of the restart policy's options' attributes: the rest is the policy's field."""


def _shown(value: object) -> str:
    """A restart policy default as its option's help shows it."""
    if isinstance(value, frozenset):
        return ",".join(str(v) for v in sorted(value)) or "none"
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _policy(field: str, metavar: str, text: str, default: object) -> Value:
    return Value("--" + field.replace("_", "-"), dest=POLICY + field, metavar=metavar, group="restart policy",
                 help=f"{text} (default {_shown(default)})")


RESTART_POLICY = (
    Value("--restart", dest=POLICY + "mode", choices=RESTART_MODES, group="restart policy",
          help=f"when to restart the child (default {DEFAULT_MODE})"),
    _policy("backoff_initial", "SECS", "first restart delay", DEFAULT_BACKOFF_INITIAL),
    _policy("backoff_max", "SECS", "restart delay cap", DEFAULT_BACKOFF_MAX),
    _policy("backoff_factor", "X", "delay multiplier per restart in a streak", DEFAULT_BACKOFF_FACTOR),
    _policy("jitter", "FRACTION", "share of the delay random jitter may remove", DEFAULT_JITTER),
    _policy("healthy_uptime", "SECS", "a run this long resets backoff and breaker", DEFAULT_HEALTHY_UPTIME),
    _policy("min_uptime", "SECS", "a crash sooner than this counts toward the breaker", DEFAULT_MIN_UPTIME),
    _policy("breaker_count", "N", "unstable crashes that open the breaker", DEFAULT_BREAKER_COUNT),
    _policy("breaker_window", "SECS", "run time the breaker looks back over", DEFAULT_BREAKER_WINDOW),
    _policy("same_error_count", "N", "same last error line this many times in a row is fatal; 0 disables",
            DEFAULT_SAME_ERROR_COUNT),
    _policy("clean_exit_count", "N", "with --restart always: fast clean exits in a row that are fatal; 0 disables",
            DEFAULT_CLEAN_EXIT_COUNT),
    _policy("clean_exit_uptime", "SECS", "a clean exit sooner than this is fast", DEFAULT_CLEAN_EXIT_UPTIME),
    _policy("max_restarts", "N|none", "crash restarts allowed since the last spawn", DEFAULT_MAX_RESTARTS),
    _policy("prevent_codes", "CODES", "comma-separated exit codes never restarted", DEFAULT_PREVENT_CODES),
    _policy("clean_signals", "SIGNALS", "comma-separated signals whose death counts as clean", DEFAULT_CLEAN_SIGNALS),
    _policy("fatal_scan_lines", "N", "trailing stderr (or output) lines searched for fatal patterns",
            DEFAULT_FATAL_SCAN_LINES),
    Value("--fatal-pattern", dest=POLICY + "fatal_patterns", repeated=True, metavar="REGEX", group="restart policy",
          help="regex (in the last stderr lines, or output lines with one terminal) that makes an exit permanent; "
          f"repeatable, replaces the defaults {list(DEFAULT_FATAL_PATTERNS)!r}"),
    Const("--no-fatal-patterns", dest=POLICY + "fatal_patterns", const=[], group="restart policy",
          help="no fatal patterns"),
)
"""The options of shellper.core.exits.RestartPolicy: unset ones keep the policy's defaults (:func:`policy`)."""

ARGUMENTS = (
    NAME,
    Positional("command", nargs="*", help="the program to run and its arguments, after --"),
    Flag("--foreground", help="run in this process instead of detaching"),
    # set by `shellper --host H run` for the remote run, so its line names the session as H:NAME
    Value("--attach-host", metavar="HOST", type=host, help=SUPPRESS),
    Flag("--json", help="print the session's info as one JSON line, for programs; on failure, a line with the "
         "error and its reason (protocol/RUNTIME.md)"),
    Flag("--replace", "-f", help="replace a session of this name whose program has ended (exited or fatal)"),
    Value("--cwd", help="working directory of the child (default: the current one)"),
    Value("--env", repeated=True, type=env_pair, default=[], metavar="K=V",
          help="set a variable for the child (repeatable); a plain K passes this shell's $K, which keeps its value "
          "out of every command line"),
    Flag("--no-inherit-env", dest="inherit_env", negates=True,
         help="start the child with only --env variables (plus TERM)"),
    Value("--cols", type=int, default=DEFAULT_COLS,
          help=f"the terminal's width until a client resizes it (default {DEFAULT_COLS})"),
    Value("--rows", type=int, default=DEFAULT_ROWS, help=f"its height (default {DEFAULT_ROWS})"),
    Value("--term", help=f"TERM for the program (default: yours when this machine knows it, else {DEFAULT_TERM})"),
    Value("--ring-bytes", type=size, default=DEFAULT_RING_BYTES, help="scrollback kept (default 8M)"),
    Value("--stderr", choices=STDERR_REQUESTS, default="merged",
          help="merged (default; auto is the same): one terminal for stdout and stderr; pty or pipe: stderr apart, "
          "captured for exit reasons and shown between stdout's lines (a shell loses job control)"),
    Value("--grace", type=seconds, default=DEFAULT_GRACE, help="seconds between SIGTERM and SIGKILL on stop"),
    Value("--husk-ttl", type=husk_ttl, default=DEFAULT_HUSK_TTL, metavar="SECS|none",
          help="seconds an exited/fatal session stays around (its output and exits readable) before it stops "
          f"itself; none: until stopped (default {DEFAULT_HUSK_TTL:g})"),
    # values checked in handle() and by SessionConfig: one line naming the option, not argparse's usage dump
    Value("--owner", metavar="NAME", help=f"who the session belongs to (default ${OWNER_ENV}, else your user name)"),
    Value("--containment", default="auto", metavar="|".join(CONTAINMENT_REQUESTS),
          help="cgroup: the session's processes in a cgroup of their own, or do not start; none: without one; "
          "auto (default): a cgroup where one can be made, else none"),
    Value("--cgroup-parent", metavar="PATH",
          help="the cgroup v2 directory to make the session's cgroup in (default $SHELLPER_CGROUP_PARENT, else "
          "detected)"),
    *RESTART_POLICY,
)


_QUICK = {"--dir": "dir", "--json": "json", "--cwd": "cwd", "--containment": "containment"}
"""The options a quick ``run`` may have (:func:`quick_main`), each with its argument."""


def quick_main(line: Scan) -> int | None:
    """``shellper run`` from the console script without argparse, when a warm launcher listens there (the
    console script looked): a plain ``[--dir DIR] run NAME [--json] [--cwd DIR] [--containment C] [-- COMMAND
    [ARGS...]]``, every
    other option at its default, handled by :func:`handle` as the full CLI would. None for anything else (help,
    abbreviations, other options, mistakes), which the full CLI then parses and reports. Why: argparse and what
    the CLI imports with it cost a warm ``run`` about as much as the rest of it (bench/NOTES.md, "The warm
    launcher")."""
    if (line.command != "run" or not line.exact or len(line.operands) != 1 or not _QUICK.keys() >= line.options.keys()
            or "" in (line.options.get("--dir"), line.options.get("--cwd"), line.options.get("--containment"))):
        return None
    from types import SimpleNamespace

    from shellper.cli.connect import reported

    values: dict[str, object] = {arg.attribute: arg.unset for arg in ARGUMENTS if not arg.positional}
    values.update({"cmd": "run", "dir": None, "prefork": None, "name": line.operands[0], "command": line.child or []})
    values.update((_QUICK[option], value) for option, value in line.options.items())
    return reported(lambda: handle(SimpleNamespace(**values)))  # type: ignore[arg-type]  # as argparse makes it


def handle(args: argparse.Namespace) -> int:
    import json
    import os

    from shellper.cli.connect import CliError, default_command, session_dir
    from shellper.client.launch import LaunchError, launch
    from shellper.core.config import SessionConfig
    from shellper.core.launchfailure import LaunchFailure
    from shellper.host.terminfo import session_term

    command = list(args.command) or default_command()
    env = dict(os.environ) if args.inherit_env else {}
    env.update(dict(args.env))
    config = SessionConfig(
        name=args.name, argv=command, dir=session_dir(args), cwd=os.path.abspath(args.cwd or os.getcwd()), env=env,
        cols=args.cols, rows=args.rows, term=args.term or session_term(os.environ), ring_bytes=args.ring_bytes,
        stderr_mode=args.stderr, grace=args.grace, husk_ttl=args.husk_ttl, policy=policy(args), owner=_owner(args),
        containment=args.containment, cgroup_parent=_cgroup_parent(args))
    if not os.path.isdir(config.cwd):
        _failed_line(args, config.name, f"--cwd {config.cwd} is not a directory", LaunchFailure.BAD_DIRECTORY)
        raise CliError(f"run: --cwd {config.cwd} is not a directory")
    _make_room(args)
    if args.foreground:
        from shellper.daemon.foreground import run_foreground  # only --foreground needs it

        return run_foreground(config)
    try:
        # the CLI is single-threaded: forking or posix_spawn is safe
        info = launch(config, start_prefork=_start_prefork, prefork=args.prefork)
    except LaunchError as exc:
        _failed_line(args, config.name, str(exc), exc.reason)
        raise
    try:
        print(json.dumps(info.to_dict()) if args.json else _started_line(args, info), flush=True)
    except OSError as exc:  # >/dev/full: the session runs; say that, and that its line is missing
        raise CliError(f"run: session {config.name!r} started (pid {info.pid}), but its info line could not "
                       f"be written: {exc.strerror or exc}") from None
    return 0


def _start_prefork(label: tuple[str, ...]) -> Prefork:
    """shellper.daemon.prefork.Prefork.start, imported only by a launch that starts one (a warm one does not)."""
    from shellper.daemon.prefork import Prefork

    return Prefork.start(label)


def _failed_line(args: argparse.Namespace, name: str, error: str, reason: LaunchFailure) -> None:
    """With --json, a launch that failed says so on stdout too, as one JSON line a program can act on
    (protocol/RUNTIME.md, "The launch contract"); the message still goes to stderr."""
    import contextlib
    import json

    if args.json:
        with contextlib.suppress(OSError):
            print(json.dumps({"name": name, "error": error, "reason": reason.value}), flush=True)


def _started_line(args: argparse.Namespace, info: LaunchInfo) -> str:
    """``run``'s line for a person: what started, and how to attach and detach."""
    where = ""
    if args.dir is not None:
        where = f" --dir {_quoted(args.dir)}"
    child = f", child pid {info.child_pid}" if info.child_pid else ""
    target = f"{args.attach_host}:{info.name}" if args.attach_host else info.name  # run on a host, from another
    return (f"started {info.name} (pid {info.pid}{child}): `shellper{where} attach {target}` to attach, "
            "Ctrl-\\ to detach")


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")
"""The characters shlex.quote leaves a word of unquoted."""


def _quoted(word: str) -> str:
    """shlex.quote(word), without importing shlex for the usual word that needs no quotes (a directory)."""
    if word and _PLAIN.issuperset(word):
        return word
    import shlex

    return shlex.quote(word)


STOPPING_WAIT = DEFAULT_GRACE + 15.0
"""Seconds ``run`` waits for a stopping session of its name to exit (``stop``'s own bound at the default
grace); a session still there afterwards is refused by launch() as running."""


def _make_room(args: argparse.Namespace) -> None:
    """A session of this name whose program has ended blocks the name: say so, or with --replace stop it
    first. A running one is left to launch(), which refuses it. One that is stopping (a `shellper stop`,
    another --replace, its husk time) is waited for: the name is about to be free."""
    from shellper.cli.connect import CliError, session_dir, user_errors
    from shellper.core.names import validate_name
    from shellper.host.paths import SessionPaths
    from shellper.host.record import SessionLock

    validate_name(args.name)
    paths = SessionPaths.for_name(session_dir(args), args.name)
    if not SessionLock.is_locked(paths.lock):
        return
    # imported here: a name nobody holds, the usual case, needs no client code
    from shellper.cli.commands.stop import stop_named
    from shellper.client.stop import lock_freed

    try:
        ended = _ended(args, paths)
    except _Stopping:
        lock_freed(paths, STOPPING_WAIT)  # still held afterwards: launch() says so
        return
    if ended is None:
        return
    if not args.replace:
        raise CliError(f"run: session {args.name!r} {ended}; --replace to start anew, or `shellper restart "
                       f"{args.name}` to run its command again")
    try:
        stop_named(session_dir(args), args.name, None)  # its "stopped NAME" line is not printed: this run's own follows
    except user_errors():
        # Another stop of the husk may have come first (its connection replaced ours, or it closed ours):
        # what --replace needs is the name free, whoever freed it.
        if not lock_freed(paths, STOPPING_WAIT):
            raise


class _Stopping(ShellperError):
    """The session is on its way out: it says it is stopping, or closed the connection it had accepted."""


def _ended(args: argparse.Namespace, paths: SessionPaths) -> str | None:
    """How the session's program ended ("exited 3 min ago: clean exit"), or None if it has not (or the
    session does not answer: launch() then says what it finds). _Stopping if it is stopping."""
    import time

    from shellper.cli.connect import CliError, connect
    from shellper.cli.show import ago
    from shellper.client.blocking import SessionGone
    from shellper.client.stop import on_its_way_out
    from shellper.core.exitrecord import ExitRecordError
    from shellper.core.states import SessionState
    from shellper.protocol import wire

    try:
        client = connect(args, wire.Role.VIEWER, replay_bytes=0)
    except CliError as exc:  # its lock is held (the caller checked), yet it does not take us
        if exc.cause is not None and on_its_way_out(exc.cause, paths):
            raise _Stopping(str(exc)) from None
        return None
    with client:
        try:
            reply = client.request(wire.Status(), wire.StatusReply)
        except SessionGone as exc:
            raise _Stopping(str(exc)) from None
    assert isinstance(reply, wire.StatusReply)
    if reply.state == SessionState.STOPPING:
        raise _Stopping(f"session {args.name!r} is stopping")
    if reply.state not in (SessionState.EXITED, SessionState.FATAL):
        return None
    try:
        last = reply.last_exit()
    except ExitRecordError:
        last = None
    if last is None:
        return str(reply.state)
    return f"{reply.state} {ago(time.time() - last.time)} ago: {last.reason or last.exit_class}"


def _owner(args: argparse.Namespace) -> str:
    """--owner as typed ("" when not given: launch() resolves the default); an explicit '' is refused,
    not taken as the default."""
    from shellper.cli.connect import CliError
    from shellper.core.owner import BadOwner, validate_owner

    if args.owner is None:
        return ""
    try:
        return validate_owner(args.owner)
    except BadOwner as exc:
        raise CliError(f"run: --owner {args.owner!r}: {exc.reason}") from None


def _cgroup_parent(args: argparse.Namespace) -> str | None:
    """--cgroup-parent made absolute, as --cwd is (None when not given: the shellper detects one)."""
    import os

    from shellper.cli.connect import CliError

    parent: str | None = args.cgroup_parent
    if parent is None:
        return None
    if not parent:  # not "the default": the user named a parent, just not one
        raise CliError("run: --cgroup-parent: must not be empty")
    return os.path.abspath(parent)


def policy(args: argparse.Namespace) -> RestartPolicy:
    """The restart policy of RESTART_POLICY's options (unset ones keep its defaults), its errors named by the
    option the user typed (--backoff-initial), not the field."""
    from shellper.cli.connect import CliError
    from shellper.core.exits import PolicyError, RestartPolicy

    try:
        return RestartPolicy.from_options(policy_options(args))
    except PolicyError as exc:
        option = {"mode": "--restart", "fatal_patterns": "--fatal-pattern"}.get(
            exc.field, "--" + exc.field.replace("_", "-"))
        raise CliError(f"run: {option} {exc.value}: {exc.problem}") from None


def policy_options(args: argparse.Namespace) -> dict[str, object]:
    """RESTART_POLICY's options that were given, by the policy's field names (shellper.core.exits.RestartPolicy
    .from_options reads them)."""
    return {key[len(POLICY):]: value for key, value in vars(args).items()
            if key.startswith(POLICY) and value is not None}
