"""``shellper``: start, inspect, attach to and stop sessions.

Every failure is one line on stderr naming what was wrong, and a non-zero exit status: 2 for a bad
argument, 1 for everything else (no such session, a stale socket, permission).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time

from shellper import __version__
from shellper.cli.argscan import scan
from shellper.cli.remote import MixedHosts, remote_host, remote_main
from shellper.client.launch import LaunchError, LaunchFailure, LaunchInfo, launch
from shellper.core.config import CONTAINMENT_REQUESTS, STDERR_REQUESTS, ConfigError, SessionConfig
from shellper.core.defaults import (
    DEFAULT_COLS,
    DEFAULT_GRACE,
    DEFAULT_HUSK_TTL,
    DEFAULT_RING_BYTES,
    DEFAULT_ROWS,
    DEFAULT_TERM,
    KILL_SECONDS,
    SCREEN_SCROLLBACK_LINES,
    TERMINAL_SIZE_RANGE,
    terminal_size_in_range,
)
from shellper.core.errors import ClientError, ShellperError
from shellper.core.exits import PolicyError, RestartPolicy
from shellper.core.names import BadHost, BadName, socket_path, validate_host, validate_name
from shellper.core.owner import OWNER_ENV, BadOwner, validate_owner
from shellper.core.states import SessionState
from shellper.daemon.prefork import Prefork
from shellper.host.paths import (
    PathError,
    SessionPaths,
    existing_runtime_dir,
    file_kind,
    runtime_dir,
    session_files,
)
from shellper.host.record import LockError, SessionLock
from shellper.host.terminfo import session_term

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:  # imported where used: `shellper run` starts faster without the codec and client
    from typing import Any

    from shellper.client.blocking import Client
    from shellper.client.sessions import SessionInfo
    from shellper.host.identity import PidFd
    from shellper.host.record import SessionRecord


class CliError(ShellperError):
    """A failure worth one line to the user."""


STOP_EXIT_WAIT = 5.0
"""Seconds ``stop`` waits, once the shellper has closed the connection, for it to exit: it first gives its
other clients up to 2 s to take their last frames, then removes its files."""


def _size(text: str) -> int:
    """Byte counts: plain integers or with a K/M/G suffix (powers of 1024)."""
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        size = int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except (ValueError, OverflowError):  # OverflowError: 1e309K
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 8388608, 8M, 512K)") from None
    if not 0 <= size < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is outside 0..2^63-1 bytes")
    return size


def _seconds(text: str) -> float:
    """A duration: a finite number of seconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds >= 0")
    return value


def _husk_ttl(text: str) -> float | None:
    """--husk-ttl: seconds, or none (the husk stays until stopped)."""
    return None if text.strip().lower() == "none" else _seconds(text)


def _nonempty(text: str) -> str:
    if not text:  # not "the default": the user named a directory, just not one that exists
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _host(text: str) -> str:
    """``--host``/``--attach-host``: an ssh destination as shellper.core.names.validate_host accepts it."""
    try:
        return validate_host(text)
    except BadHost as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


def _env_pair(text: str) -> tuple[str, str]:
    """``--env KEY=VALUE``, or ``--env KEY`` for this process's $KEY: a secret passed so is in no command
    line, not even the CLI's. Never quotes what follows the ``=``."""
    key, sep, value = text.partition("=")
    if not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE or KEY, got no KEY")
    if not sep:
        if key not in os.environ:
            raise argparse.ArgumentTypeError(f"{key!r:.80} is not set here (give {key:.80}=VALUE)")
        value = os.environ[key]
    return key, value


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size finds it ($COLUMNS, then stdout, else 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Formatter(argparse.HelpFormatter):
    """argparse's own, given its width: argparse makes one per option it adds (to check the option), and
    left to itself the first imports shutil (with bz2, lzma and zlib), which every ``shellper run`` would
    pay (bench/NOTES.md, "Start-up: what the avoided imports cost")."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shellper", description="Hold a terminal session in a long-lived process.",
                                formatter_class=_Formatter)
    p.add_argument("--version", action="version", version=f"shellper {__version__}")
    p.add_argument("--dir", type=_nonempty, help="runtime directory (default $SHELLPER_DIR, $XDG_RUNTIME_DIR/shellper, "
                   "/tmp/shellper-$UID)")
    p.add_argument("--host", metavar="HOST", type=_host, help="run the command on this ssh destination (user@host, "
                   "an alias of ~/.ssh/config) through its shared connection; HOST:NAME names a session there too "
                   "($SHELLPER_SSH: the ssh command; $SHELLPER_REMOTE: shellper's command there)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=text, formatter_class=_Formatter)
        # also after the command (`shellper run NAME --dir D`), as people type it; SUPPRESS: not given there,
        # it leaves the one given before the command alone
        parser.add_argument("--dir", type=_nonempty, default=argparse.SUPPRESS, help="as before the command")
        parser.add_argument("--host", type=_host, default=argparse.SUPPRESS, help="as before the command")
        return parser

    run = command("run", "start a session: shellper run NAME [options] -- COMMAND [ARGS...]")
    run.add_argument("name", help="the session\'s name")
    run.add_argument("command", nargs="*", help="the program to run and its arguments, after --")
    run.add_argument("--foreground", action="store_true", help="run in this process instead of detaching")
    # set by `shellper --host H run` for the remote run, so its line names the session as H:NAME
    run.add_argument("--attach-host", metavar="HOST", type=_host, help=argparse.SUPPRESS)
    run.add_argument("--json", action="store_true",
                     help="print the session's info as one JSON line, for programs; on failure, a line with the "
                          "error and its reason (protocol/RUNTIME.md)")
    run.add_argument("--replace", "-f", action="store_true",
                     help="replace a session of this name whose program has ended (exited or fatal)")
    run.add_argument("--cwd", help="working directory of the child (default: the current one)")
    run.add_argument("--env", action="append", type=_env_pair, default=[], metavar="K=V",
                     help="set a variable for the child (repeatable); a plain K passes this shell's $K, which "
                          "keeps its value out of every command line")
    run.add_argument("--no-inherit-env", dest="inherit_env", action="store_false",
                     help="start the child with only --env variables (plus TERM)")
    run.add_argument("--cols", type=int, default=DEFAULT_COLS,
                     help=f"the terminal's width until a client resizes it (default {DEFAULT_COLS})")
    run.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"its height (default {DEFAULT_ROWS})")
    run.add_argument("--term", default=None,
                     help=f"TERM for the program (default: yours when this machine knows it, else {DEFAULT_TERM})")
    run.add_argument("--ring-bytes", type=_size, default=DEFAULT_RING_BYTES, help="scrollback kept (default 8M)")
    run.add_argument("--stderr", choices=STDERR_REQUESTS, default="merged",
                     help="merged (default; auto is the same): one terminal for stdout and stderr; pty or pipe: "
                     "stderr apart, captured for exit reasons and shown between stdout's lines (a shell "
                     "loses job control)")
    run.add_argument("--grace", type=_seconds, default=DEFAULT_GRACE,
                     help="seconds between SIGTERM and SIGKILL on stop")
    run.add_argument("--husk-ttl", type=_husk_ttl, default=DEFAULT_HUSK_TTL, metavar="SECS|none",
                     help="seconds an exited/fatal session stays around (its output and exits readable) before it "
                     f"stops itself; none: until stopped (default {DEFAULT_HUSK_TTL:g})")
    # values checked in cmd_run and by SessionConfig: one line naming the option, not argparse's usage dump
    run.add_argument("--owner", metavar="NAME",
                     help=f"who the session belongs to (default ${OWNER_ENV}, else your user name)")
    run.add_argument("--containment", default="auto", metavar="|".join(CONTAINMENT_REQUESTS),
                     help="cgroup: the session's processes in a cgroup of their own, or do not start; none: "
                     "without one; auto (default): a cgroup where one can be made, else none")
    run.add_argument("--cgroup-parent", metavar="PATH",
                     help="the cgroup v2 directory to make the session's cgroup in (default "
                     "$SHELLPER_CGROUP_PARENT, else detected)")
    RestartPolicy.add_arguments(run)

    ls = command("ls", "list sessions")
    ls.add_argument("--json", action="store_true", help="one JSON array, for programs")

    att = command("attach", "attach this terminal to a session: shellper attach [-c] NAME [-- COMMAND [ARGS...]]")
    att.add_argument("name", help="the session\'s name")
    att.add_argument("command", nargs="*", help="with -c, the program to start if NAME is not running "
                     "(default $SHELL), after --")
    att.add_argument("-c", "--create", action="store_true",
                     help="start the session first if it is not running (as dtach -A, tmux new -A)")
    att.add_argument("--detach-key", "-e", default="^\\",
                     help="key that detaches: ^X, one character, or none (default ^\\, i.e. Ctrl-\\)")
    att.add_argument("--read-only", "-r", action="store_true", help="attach as a viewer: no input, no resize")
    att.add_argument("--no-replay", action="store_true", help="show only new output")
    att.add_argument("--raw", action="store_true",
                     help="replay the recent output's bytes instead of drawing the screen as it is now")
    att.add_argument("--relay", action="store_true",
                     help="pass every byte through this process instead of handing the terminal to the shellper")

    send = command("send", "type text into a session")
    send.add_argument("name", help="the session\'s name")
    send.add_argument("text", help="what to type; - reads it from stdin")
    send.add_argument("--enter", action="store_true", help="press Enter after the text")

    tail = command("tail", "print a session's recent output")
    tail.add_argument("name", help="the session\'s name")
    tail.add_argument("--bytes", type=_size, default=None, help="at most this much of the end (default: all held)")
    tail.add_argument("--lines", "-n", type=int, default=None, metavar="N", help="only the last N lines")
    tail.add_argument("--follow", "-f", action="store_true",
                      help="keep printing new output until the session ends for good (exited or fatal) or Ctrl-C")
    tail.add_argument("--plain", action="store_true",
                      help="the text as a person sees it, from the session's screen model: its scrollback and "
                      "screen (with -f, then new output without escape sequences)")

    scr = command("screen", "print a session's screen as it is now (as tmux capture-pane -p)")
    scr.add_argument("name", help="the session\'s name")
    scr.add_argument("--ansi", action="store_true", help="with colours and attributes (SGR sequences)")
    scr.add_argument("--json", action="store_true",
                     help="the screen, cursor, title and output offset as JSON, for programs")
    scr.add_argument("--scrollback", type=int, default=0, metavar="N",
                     help="also the last N lines that scrolled off the main screen (a session keeps "
                     f"{SCREEN_SCROLLBACK_LINES})")

    sig = command("signal", "send a signal to the session's child process group")
    sig.add_argument("name", help="the session\'s name")
    sig.add_argument("signal", help="a signal name or number: HUP, INT, TERM, KILL, 9, ... (SIG prefix optional)")

    rs = command("resize", "set the session's terminal size")
    rs.add_argument("name", help="the session\'s name")
    rs.add_argument("cols", type=int, help="columns, 1-65535")
    rs.add_argument("rows", type=int, help="rows, 1-65535")

    rst = command("restart", "run a session's command again (also one that has exited or given up)")
    rst.add_argument("name", help="the session\'s name")

    st = command("stop", "stop a session: its whole process tree, then the shellper")
    st.add_argument("name", nargs="*", metavar="NAME", help="the sessions to stop")
    st.add_argument("--all", action="store_true", help="stop every session in the runtime directory")
    st.add_argument("--grace", type=_seconds, default=None,
                    help=f"seconds between SIGTERM and SIGKILL (default: the session's own, else {DEFAULT_GRACE:g})")

    br = command("bridge", "connect stdin and stdout to a session's socket, byte for byte (the far end of an "
                 "ssh channel: shellper.client.remote)")
    br.add_argument("name", help="the session\'s name")

    status = command("status", "a session's state, exits and clients")
    status.add_argument("name", help="the session\'s name")
    status.add_argument("--json", action="store_true", help="the full status as JSON, for programs")
    legacy = command("legacy-main", "for a Tower written for the original shellper: start a session from its JSON "
                     "launch config, speaking protocol version 1 (docs/LEGACY.md)")
    legacy.add_argument("config", help="the original's launch config: JSON {command, args, cwd, env, cols, rows, "
                        "socketPath}")
    return p


def main(argv: list[str] | None = None, prefork: Prefork | None = None) -> int:
    """Run one command; ``prefork`` is the daemon-to-be that the console script started early, if any."""
    argv = list(sys.argv[1:] if argv is None else argv)
    line = scan(argv)
    try:
        host = remote_host(line)
    except (MixedHosts, BadHost, BadName) as exc:  # before anything runs, here or on a host
        print(f"shellper: {exc}", file=sys.stderr)
        return 2
    if host is not None:
        return remote_main(argv, line, host)
    if line.command in ("run", "attach") and line.child is not None:  # everything after the first -- is the child's
        args = _parse(argv[:len(argv) - len(line.child) - 1])
        # a command already begun before the -- (run NAME git log -- FILE) has it as one of its arguments
        args.command = [*args.command, "--", *line.child] if args.command else line.child
    else:  # argparse's own --: what follows is positional (send NAME -- -text)
        args = _parse(argv)
    args.prefork = prefork
    try:
        handler = _COMMANDS[args.cmd]
        code = handler(args)
        _flush_stdout()
        return code
    except BrokenPipeError:  # `shellper ls | head -1`: the reader has all it wanted
        return _reader_left()
    except Exception as exc:
        if not isinstance(exc, _user_errors()):
            raise
        print(f"shellper: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _parse(argv: list[str]) -> argparse.Namespace:
    """The parser's reading of ``argv``; an option the command does not have is reported with that command's
    usage (argparse's own would show the top level's), and for run and attach a hint that a command's own
    options go after --."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices[args.cmd]
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


def _user_errors() -> tuple[type[Exception], ...]:
    """Failures that deserve one line, not a traceback."""
    return (CliError, LaunchError, PathError, ConfigError, PolicyError, LockError, ClientError)


def _dir(args: argparse.Namespace) -> str:
    return runtime_dir(args.dir)


def _trusted_paths(args: argparse.Namespace) -> SessionPaths:
    """The session's paths, once its directory is one a client may trust (shellper.host.trust): ``stop`` and
    ``status`` read its lock and record, which another user could have planted, before they connect.
    UntrustedSocket if not."""
    from shellper.host.trust import check_socket_dir

    validate_name(args.name)
    paths = SessionPaths.for_name(_dir(args), args.name)
    check_socket_dir(paths.socket)
    return paths


def _connect(args: argparse.Namespace, role: str = "tower", **hello: Any) -> Client:
    from shellper.client.blocking import Client, ClientError, ConnectionRefused, SessionNotFound

    validate_name(args.name)
    path = socket_path(_dir(args), args.name)
    client = Client(path, role, client_name=f"shellper-cli:{args.cmd}")
    try:
        client.connect(**hello)
    except ClientError as exc:  # the path, what is wrong, and for a stale socket what to do
        hint = (f"; its shellper is gone: `shellper stop {args.name}` ends what it left running and removes "
                "its files") if isinstance(exc, ConnectionRefused) else ""
        if isinstance(exc, SessionNotFound):
            from shellper.cli.attach import sessions_hint

            hint = sessions_hint(_dir(args), args.name)
        raise CliError(f"session {args.name!r}: {exc}{hint}") from None
    return client


def cmd_run(args: argparse.Namespace) -> int:
    command = list(args.command) or _default_command()
    env = dict(os.environ) if args.inherit_env else {}
    env.update(dict(args.env))
    config = SessionConfig(
        name=args.name, argv=command, dir=_dir(args), cwd=os.path.abspath(args.cwd or os.getcwd()), env=env,
        cols=args.cols, rows=args.rows, term=args.term or session_term(os.environ), ring_bytes=args.ring_bytes,
        stderr_mode=args.stderr, grace=args.grace, husk_ttl=args.husk_ttl, policy=_policy(args), owner=_owner(args),
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
        info = launch(config, start_prefork=Prefork.start, prefork=args.prefork)
    except LaunchError as exc:
        _failed_line(args, config.name, str(exc), exc.reason)
        raise
    try:
        print(json.dumps(info.to_dict()) if args.json else _started_line(args, info), flush=True)
    except OSError as exc:  # >/dev/full: the session runs; say that, and that its line is missing
        raise CliError(f"run: session {config.name!r} started (pid {info.pid}), but its info line could not "
                       f"be written: {exc.strerror or exc}") from None
    return 0


def _failed_line(args: argparse.Namespace, name: str, error: str, reason: LaunchFailure) -> None:
    """With --json, a launch that failed says so on stdout too, as one JSON line a program can act on
    (protocol/RUNTIME.md, "The launch contract"); the message still goes to stderr."""
    if args.json:
        with contextlib.suppress(OSError):
            print(json.dumps({"name": name, "error": error, "reason": reason.value}), flush=True)


def _started_line(args: argparse.Namespace, info: LaunchInfo) -> str:
    """``run``'s line for a person: what started, and how to attach and detach."""
    where = ""
    if args.dir is not None:
        import shlex

        where = f" --dir {shlex.quote(args.dir)}"
    child = f", child pid {info.child_pid}" if info.child_pid else ""
    target = f"{args.attach_host}:{info.name}" if args.attach_host else info.name  # run on a host, from another
    return (f"started {info.name} (pid {info.pid}{child}): `shellper{where} attach {target}` to attach, "
            "Ctrl-\\ to detach")


def _make_room(args: argparse.Namespace) -> None:
    """A session of this name whose program has ended blocks the name: say so, or with --replace stop it
    first. A running one is left to launch(), which refuses it. One that is stopping (a `shellper stop`,
    another --replace, its husk time) is waited for: the name is about to be free."""
    validate_name(args.name)
    paths = SessionPaths.for_name(_dir(args), args.name)
    if not SessionLock.is_locked(paths.lock):
        return
    try:
        ended = _ended(args, paths)
    except _Stopping:
        _lock_freed(paths, STOPPING_WAIT)  # still held afterwards: launch() says so
        return
    if ended is None:
        return
    if not args.replace:
        raise CliError(f"run: session {args.name!r} {ended}; --replace to start anew, or `shellper restart "
                       f"{args.name}` to run its command again")
    import contextlib
    import io

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its "stopped NAME": this run's own line follows
            cmd_stop(argparse.Namespace(**{**vars(args), "cmd": "stop", "grace": None}))
    except _user_errors():
        # Another stop of the husk may have come first (its connection replaced ours, or it closed ours):
        # what --replace needs is the name free, whoever freed it.
        if not _lock_freed(paths, STOPPING_WAIT):
            raise


class _Stopping(CliError):
    """The session is on its way out: it says it is stopping, or closed the connection it had accepted."""


STOPPING_WAIT = DEFAULT_GRACE + 15.0
"""Seconds ``run`` waits for a stopping session of its name to exit (``stop``'s own bound at the default
grace); a session still there afterwards is refused by launch() as running."""


def _ended(args: argparse.Namespace, paths: SessionPaths) -> str | None:
    """How the session's program ended ("exited 3 min ago: clean exit"), or None if it has not (or the
    session does not answer: launch() then says what it finds). _Stopping if it is stopping."""
    from shellper.client.blocking import SessionGone
    from shellper.core.exitrecord import ExitRecordError
    from shellper.protocol import wire

    try:
        client = _connect(args, "viewer", replay_bytes=0)
    except CliError as exc:
        if _on_its_way_out(exc, paths):  # its lock is held (the caller checked), yet it does not take us
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
    return f"{reply.state} {_ago(time.time() - last.time)} ago: {last.reason or last.exit_class}"


def _ago(seconds: float) -> str:
    """A past duration as a person says it: 40 s, 3 min, 5 h, 2 days."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"


def cmd_restart(args: argparse.Namespace) -> int:
    """SPAWN with the session's current command, cwd and environment: the child is replaced (ended first if
    it runs), the restart breaker reset."""
    from shellper.protocol import wire

    with _connect(args, "tower", replay_bytes=0) as client:
        client.send(wire.Spawn())
        _confirm(client)
    print(f"restarted {args.name}")
    return 0


def _owner(args: argparse.Namespace) -> str:
    """--owner as typed ("" when not given: launch() resolves the default); an explicit '' is refused,
    not taken as the default."""
    if args.owner is None:
        return ""
    try:
        return validate_owner(args.owner)
    except BadOwner as exc:
        raise CliError(f"run: --owner {args.owner!r}: {exc.reason}") from None


def _cgroup_parent(args: argparse.Namespace) -> str | None:
    """--cgroup-parent made absolute, as --cwd is (None when not given: the shellper detects one)."""
    parent: str | None = args.cgroup_parent
    if parent is None:
        return None
    if not parent:  # not "the default": the user named a parent, just not one
        raise CliError("run: --cgroup-parent: must not be empty")
    return os.path.abspath(parent)


def _policy(args: argparse.Namespace) -> RestartPolicy:
    """The restart policy, its errors named by the option the user typed (--backoff-initial), not the field."""
    try:
        return RestartPolicy.from_arguments(args)
    except PolicyError as exc:
        option = {"mode": "--restart", "fatal_patterns": "--fatal-pattern"}.get(
            exc.field, "--" + exc.field.replace("_", "-"))
        raise CliError(f"run: {option} {exc.value}: {exc.problem}") from None


def cmd_ls(args: argparse.Namespace) -> int:
    from shellper.client.sessions import list_sessions

    sessions = list_sessions(_dir(args)) if existing_runtime_dir(_dir(args)) else []
    if args.json:
        print(json.dumps([s.to_dict() for s in sessions], indent=2))
        return 0
    if not sessions:
        print(f"no sessions in {_dir(args)}")
        return 0
    # A leading "+" marks a finished session (as abduco does), blank otherwise, so a row's first word is still its
    # name unless it finished; COMMAND is cut to a width; LAST EXIT, free text, stays last. Scripts: --json.
    rows: list[tuple[str, ...]] = [("", "NAME", "STATE", "PID", "CHILD", "UPTIME", "CLIENTS", "RING", "OWNER",
                                    "CONTAINMENT", "COMMAND", "LAST EXIT")]
    rows += [_ls_row(s) for s in sessions]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


LS_COMMAND_WIDTH = 30
"""Characters of a session's command ``ls`` shows; the rest is cut (``status NAME`` shows all of it)."""


def _ls_row(s: SessionInfo) -> tuple[str, ...]:
    from shellper.core.terminal.text import printable

    finished = "+" if s.state in _ENDED else " "
    command = printable(s.command or "-")  # one line: \n as \\n, an escape sequence inert and visible
    if len(command) > LS_COMMAND_WIDTH:
        command = command[:LS_COMMAND_WIDTH - 1] + "…"
    # Every cell that came from a record or a shellper's answer is printable: a record is a file anyone with
    # the directory's access may have written, and LAST EXIT quotes what a program wrote.
    cells = (finished, s.name, s.state, str(s.pid or "-"), str(s.child_pid or "-"), _duration(s.uptime),
             "-" if s.clients is None else str(s.clients), _bytes(s.ring_bytes), s.owner or "-",
             s.containment or "-", command, s.last_exit or "-")
    return tuple(map(printable, cells))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s < 86400 else f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n = n / 1024  # type: ignore[assignment]
    return str(n)


def _default_command() -> list[str]:
    """What a session runs when no command is given: the user's shell, as the peers start."""
    return [os.environ.get("SHELL") or "/bin/sh"]


def cmd_attach(args: argparse.Namespace) -> int:
    from shellper.cli.attach import attach_session

    if args.command and not args.create:
        raise CliError(f"attach: a command is only for -c (start {args.name!r} if it is not running): "
                       f"shellper attach -c {args.name} -- {' '.join(args.command)}")
    if args.create:
        _create_for_attach(args)
    return attach_session(args.dir, args.name, detach_key=args.detach_key, read_only=args.read_only,
                          no_replay=args.no_replay, relay=args.relay, raw=args.raw)


def _create_for_attach(args: argparse.Namespace) -> None:
    """``attach -c``: start NAME with the default options unless it is running; one started by someone
    else meanwhile is attached to as well."""
    validate_name(args.name)
    paths = SessionPaths.for_name(_dir(args), args.name)
    if SessionLock.is_locked(paths.lock):
        return
    try:  # the terminal's size from the start, so the program's first screen fits it
        size = os.get_terminal_size(0)
        cols, rows = (size.columns, size.lines) if terminal_size_in_range(size.columns, size.lines) else (
            DEFAULT_COLS, DEFAULT_ROWS)
    except OSError:
        cols, rows = DEFAULT_COLS, DEFAULT_ROWS
    config = SessionConfig(name=args.name, argv=list(args.command) or _default_command(), dir=_dir(args),
                           cwd=os.getcwd(), env=dict(os.environ), cols=cols, rows=rows,
                           term=session_term(os.environ), husk_ttl=DEFAULT_HUSK_TTL)
    try:
        launch(config, start_prefork=Prefork.start)
    except LaunchError:
        if not SessionLock.is_locked(paths.lock):  # not a race with another attach -c: a real failure
            raise


def cmd_send(args: argparse.Namespace) -> int:
    from shellper.protocol import wire

    text = (sys.stdin.buffer.read() if args.text == "-" else args.text.encode()) + (b"\r" if args.enter else b"")
    with _connect(args, "terminal", replay_bytes=0) as client:
        assert client.welcome is not None
        state = client.welcome.state
        if state not in (SessionState.RUNNING, SessionState.STARTING):  # input would go nowhere (or to a later child)
            raise CliError(f"send: session {args.name!r} has no running program (state {state}); nothing sent")
        client.write(text)
        client.request(wire.Ping(nonce=1), wire.Pong)  # the shellper has taken the input once it answers
    return 0


def cmd_screen(args: argparse.Namespace) -> int:
    from shellper.cli import screen

    if args.scrollback < 0:
        raise CliError(f"screen: --scrollback {args.scrollback}: must be >= 0")
    with _connect(args, "viewer", replay_bytes=0) as client:
        try:
            return screen.cmd_screen(client, ansi=args.ansi, as_json=args.json, scrollback=args.scrollback)
        except screen.NoScreenModel as exc:
            raise CliError(f"screen: session {args.name!r}: {exc}") from None


def cmd_tail(args: argparse.Namespace) -> int:
    """The ring's end, then (with -f) new output until the session ends for good. To a terminal, the modes the
    printed output switched on (alternate screen, hidden cursor, mouse reporting) are switched off at the end, as
    ``attach`` does, so the user's terminal is left as it was."""
    from shellper.client.blocking import SessionGone
    from shellper.core.terminal.text import PlainStream, last_lines
    from shellper.protocol import wire

    if args.lines is not None and args.lines < 0:
        raise CliError(f"tail: --lines {args.lines}: must be >= 0")
    out = sys.stdout.buffer
    modes = _TailModes(out) if not args.plain and _is_terminal(out) else None
    from_model = args.plain and args.bytes is None  # the text a person sees: from the screen model
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(_connect(args, "viewer", replay_bytes=0 if from_model else args.bytes))
        if from_model and client.welcome is not None and client.welcome.version < 3:
            # A shellper of protocol version 2 keeps no screen model: its whole ring, stripped, as before.
            client.close()
            client = stack.enter_context(_connect(args, "viewer", replay_bytes=None))
            from_model = False
        welcome, replay = client.welcome, client.replay
        assert welcome is not None and replay is not None
        end = welcome.ring_end
        seen = 0  # with the screen: the offset it was drawn at (DATA before it is in it already)
        if from_model and welcome.version >= 3:
            from shellper.cli.screen import plain_text, request_screen

            shown = request_screen(client, scrollback=SCREEN_SCROLLBACK_LINES)
            seen = shown.offset
            lines = plain_text(shown)
            if args.lines is not None:
                lines = lines[len(lines) - args.lines:] if args.lines else []
            replay = wire.Replay(offset=end, data="".join(line + "\n" for line in lines).encode())

        plain = PlainStream() if args.plain else None  # a sequence cut between two DATA is still dropped whole

        def emit(data: bytes) -> None:
            if modes is not None:
                modes.feed(data)
            _write_all(out, plain.feed(data) if plain is not None else data)
            out.flush()

        try:
            emit(replay.data if args.lines is None else last_lines(replay.data, args.lines))
            if args.follow and welcome.state in _ENDED:  # its exit notice was in the output; nothing follows
                print(f"[shellper: session {args.name!r} has {welcome.state}; nothing more will follow]",
                      file=sys.stderr)
                return 0
            final = False
            while args.follow or client.output.next_offset < end:
                try:
                    frame = client.recv()
                except SessionGone:
                    break
                if isinstance(frame, wire.Data):
                    start = client.output.next_offset - len(frame.data)
                    emit(frame.data if start >= seen else frame.data[seen - start:])
                elif isinstance(frame, wire.Exit) and args.follow and frame.state in _ENDED and not final:
                    # The shellper appends its exit notice to the output right after the EXIT: a PING's PONG
                    # comes after it, so the notice is shown (once, as any output) before tail ends.
                    final = True
                    client.send(wire.Ping(nonce=1))
                elif isinstance(frame, wire.Pong) and final:
                    break
        finally:
            if modes is not None:
                modes.reset()
    return 0


_ENDED = (SessionState.EXITED, SessionState.FATAL)
"""States a session leaves only when asked (SPAWN, STOP): ``tail -f`` ends there."""


def _write_all(out: Any, data: bytes) -> None:
    """All of ``data``: with PYTHONUNBUFFERED=1, stdout's binary layer is the raw file, whose write() may take
    only part (a pipe takes 64 KiB at a time)."""
    view = memoryview(data)
    while view:
        view = view[out.write(view):]


def _is_terminal(out: Any) -> bool:
    try:
        return os.isatty(out.fileno())
    except (AttributeError, ValueError, OSError):
        return False


class _TailModes:
    """The terminal modes the output ``tail`` printed switched on, to switch off when it is done."""

    def __init__(self, out: Any) -> None:
        from shellper.core.terminal.modes import ModeTracker

        self.out = out
        self.tracker = ModeTracker()
        self.fed = 0

    def feed(self, data: bytes) -> None:
        self.tracker.feed(self.fed, data)
        self.fed += len(data)

    def reset(self) -> None:
        """Never raises: the terminal may be gone."""
        sequence = self.tracker.reset_sequence()
        if sequence:
            try:
                _write_all(self.out, sequence)
                self.out.flush()
            except (OSError, ValueError):
                pass


def cmd_signal(args: argparse.Namespace) -> int:
    from shellper.protocol import wire

    spelled = args.signal
    if spelled.isdigit():  # `kill -9` habits: the number of one of the signals the protocol carries
        import signal

        numbered = {int(signum): signum.name for signum in signal.Signals}
        spelled = numbered.get(int(spelled), spelled)
    bare = wire.bare_signal(spelled)
    if bare is None:
        raise CliError(f"signal: {args.signal!r} is not one of {' '.join(wire.SIGNALS)}")
    with _connect(args, "tower", replay_bytes=0) as client:
        client.send(wire.Signal(signal=bare))
        _confirm(client)
    return 0


def cmd_resize(args: argparse.Namespace) -> int:
    from shellper.protocol import wire

    if not terminal_size_in_range(args.cols, args.rows):
        raise CliError(f"resize: {args.cols}x{args.rows} is outside {TERMINAL_SIZE_RANGE}")
    with _connect(args, "terminal", replay_bytes=0) as client:
        client.send(wire.Resize(cols=args.cols, rows=args.rows))
        _confirm(client)
    return 0


def _confirm(client: Client) -> None:
    """A PING round trip: any ERROR for what we sent arrives before the PONG."""
    from shellper.client.blocking import RemoteError
    from shellper.protocol import wire

    client.send(wire.Ping(nonce=7))
    while True:
        frame = client.recv(timeout=client.timeout)
        if frame is None:
            raise CliError("the session did not answer")
        if isinstance(frame, wire.Error):
            raise RemoteError(client.path, frame)
        if isinstance(frame, wire.Pong):
            return


def cmd_stop(args: argparse.Namespace) -> int:
    """STOP over the socket, then make sure: the shellper (pinned by a pidfd before asking) has exited and
    its files are gone. A closed connection alone proves neither (the shellper killed or stopped mid-way).

    Another stop may race this one (a `shellper stop`, a `run --replace`): a session that is already on its
    way out (it closes the connection, or its socket is gone, while the recorded shellper pinned at the
    start is alive) is waited for, and when another tower connection replaces ours before the shellper has
    read our STOP, it is sent again (STOP_ATTEMPTS), but only to the shellper this stop first reached."""
    if isinstance(args.name, list):
        return _stop_each(args)
    paths = _trusted_paths(args)
    if not SessionLock.is_locked(paths.lock) and session_files(paths) and not _starting(paths):
        return _stop_stale(args, paths)
    record = _read_record(paths)
    pin = _pin_recorded(paths, record)
    try:
        instance: str | None = None
        failure = ""
        for _ in range(STOP_ATTEMPTS):
            try:
                client = _connect(args, "tower", replay_bytes=0)
            except CliError as exc:
                if instance is None:
                    silent = _not_answering(paths, exc)
                    if silent is not None:
                        return _stop_unresponsive(args, paths, *silent)
                    if pin is None or record is None or not _on_its_way_out(exc, paths, record.instance_id):
                        raise
                break  # on its way out: STOPped by us before, or by another stop meanwhile
            with client:
                welcome = client.welcome
                assert welcome is not None
                if instance is not None and welcome.instance_id != instance:
                    break  # the shellper we were stopping is gone and a new session has the name: not ours
                _refuse_foreign(args.name, paths, None, welcome.name)
                instance = welcome.instance_id
                if pin is None or (welcome.instance_id, welcome.shellper_pid) != (
                        record.instance_id if record else None, pin.pid):
                    if pin is not None:
                        pin.close()
                    pin = _pin_shellper(client, record)
                delivered, failure = _send_stop(args, client, paths, pin)
                if delivered:
                    break
        if failure:
            _failed_stop(args.name, paths, pin, record, failure)
        return _confirm_stopped(args.name, paths, pin, record)
    finally:
        if pin is not None:
            pin.close()


STARTING_WAIT = 1.0
"""Seconds ``stop`` gives a name with a log but no record and a free lock to be taken by a shellper that is
starting (its log comes first, then its lock): cleaning its files then would take its log and its name."""


def _starting(paths: SessionPaths) -> bool:
    """A shellper may be starting under this name: only its log (and no record) is there, and its lock is
    taken within STARTING_WAIT. A launch killed before its lock leaves such a log too: it waits that long."""
    if os.path.lexists(paths.record) or os.path.lexists(paths.socket):
        return False
    deadline = time.monotonic() + STARTING_WAIT
    while time.monotonic() < deadline:
        time.sleep(0.02)
        try:
            if SessionLock.is_locked(paths.lock):
                return True
        except LockError:
            return False
    return False


STOP_ATTEMPTS = 3
"""Connections ``stop`` makes to deliver STOP while other tower connections replace its own."""


def _send_stop(args: argparse.Namespace, client: Client, paths: SessionPaths,
               pin: PidFd | None) -> tuple[bool, str]:
    """STOP, then read until the shellper closes the connection: (True, why the stop failed, "" if it did
    not: a version-3 shellper answers a STOP with an id, not ok when processes survived it). (False, "") if
    another tower connection replaced ours first (the shellper may never have read our STOP)."""
    from shellper.client.blocking import RemoteError, SessionGone
    from shellper.protocol import wire

    grace = DEFAULT_GRACE if args.grace is None else args.grace
    bound = grace + KILL_SECONDS + 15.0  # the shellper's own: its grace, then freezing and killing a tree
    deadline = time.monotonic() + bound
    stop_id = 1 if client.conn.replies else None
    failure = ""
    try:
        client.send(wire.Stop(grace=args.grace, id=stop_id))
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CliError(f"stop: session {args.name!r} did not stop within {bound:g} s: "
                               + _what_remains(args.name, paths, pin))
            frame = client.recv(timeout=left)
            if isinstance(frame, wire.Reply) and stop_id is not None and frame.id == stop_id and not frame.ok:
                failure = frame.message or frame.code
            elif isinstance(frame, wire.Error):
                if frame.code == "replaced":
                    return False, ""
                raise RemoteError(client.path, frame)
    except SessionGone:
        return True, failure


def _failed_stop(name: str, paths: SessionPaths, pin: PidFd | None, record: SessionRecord | None,
                 failure: str) -> None:
    """The shellper said its stop failed (processes survived SIGKILL): once it is gone, say so, naming what
    still runs; never "stopped". Its record is kept: it is how they are found again."""
    if pin is not None:
        pin.wait_dead(STOP_EXIT_WAIT)
    note = _survivors_note(_read_record(paths) or record, paths)
    raise CliError(f"stop: session {name!r}: {failure}{note}; {_files_left(paths, session_files(paths))}: "
                   f"`shellper stop {name}` again, or a Tower's reconcile, ends what is left and removes them")


def _pin_recorded(paths: SessionPaths, record: SessionRecord | None) -> PidFd | None:
    """A pidfd on the recorded shellper, taken before connecting, if it is alive and the record is this
    session's own: only ever waited on, never signalled."""
    from shellper.host.identity import IdentityError, ProcessIdentity, open_verified
    from shellper.host.ownfiles import not_own

    if record is None or not_own(paths, record) is not None:
        return None
    try:
        return open_verified(ProcessIdentity(record.boot_id, record.shellper_pid, record.shellper_start_time))
    except IdentityError:
        return None


def _on_its_way_out(exc: CliError, paths: SessionPaths, instance: str | None = None) -> bool:
    """The connection failed as it does to a shellper that is stopping: closed after accepting; or its socket
    is gone or silent and its record is gone, says stopping, or is no longer that of ``instance`` (the
    shellper we pinned). A starting session has no socket yet either, but a record that says so."""
    from shellper.client.blocking import ConnectionRefused, SessionGone, SessionNotFound

    if isinstance(exc.__context__, SessionGone):
        return True
    if not isinstance(exc.__context__, SessionNotFound | ConnectionRefused):
        return False
    now = _read_record(paths)
    return now is None or now.state == SessionState.STOPPING or (instance is not None
                                                                 and now.instance_id != instance)


def _stop_each(args: argparse.Namespace) -> int:
    """``stop A B`` and ``stop --all``: each in turn, a failure reported and the rest still stopped."""
    from shellper.host.paths import session_names

    if args.all == bool(args.name):
        raise CliError("stop: name the sessions to stop, or --all (not both)")
    names = session_names(_dir(args)) if args.all else args.name
    if args.all and not names:
        print(f"no sessions in {_dir(args)}")
    failed = 0
    for name in names:
        try:
            cmd_stop(argparse.Namespace(**{**vars(args), "name": name}))
        except _user_errors() as exc:
            print(f"shellper: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def _not_answering(paths: SessionPaths, exc: CliError) -> tuple[SessionRecord, str] | None:
    """For a connection that timed out (not refused, not missing): the record and, in words, what its shellper
    is doing instead of answering, when the recorded shellper is alive (this boot, its start ticks)."""
    from shellper.client.blocking import Timeout
    from shellper.host.identity import read_stat
    from shellper.host.shellpers import record_is_alive

    if not isinstance(exc.__context__, Timeout):  # _connect's CliError is raised from None: the context stays
        return None
    record = _read_record(paths)
    if record is None or not record_is_alive(record):
        return None
    st = read_stat(record.shellper_pid)
    doing = _NOT_ANSWERING.get(st.state if st is not None else "", "hung? (it runs but does not answer)")
    return record, f"pid {record.shellper_pid} does not answer: {doing}"


_NOT_ANSWERING = {"T": "stopped (SIGSTOP)?", "t": "stopped by a debugger?",
                  "D": "blocked in the kernel (D state)?"}
"""What /proc's state letter says a shellper that does not answer is doing."""


def _stop_unresponsive(args: argparse.Namespace, paths: SessionPaths, record: SessionRecord, why: str) -> int:
    """A live shellper that does not answer cannot be asked to STOP: end it and its tree with signals, after
    the identity checks tower_client's reconcile makes (its pid, start ticks, program and session files)."""
    from shellper.host.cleanup import terminate_shellper
    from shellper.host.identity import IdentityError

    grace = DEFAULT_GRACE if args.grace is None else args.grace
    _refuse_foreign(args.name, paths, record)
    print(f"shellper: session {args.name!r}: {why}; ending it with signals", file=sys.stderr, flush=True)
    try:
        term = terminate_shellper(record, paths, grace=grace)
    except IdentityError as exc:
        raise CliError(f"stop: session {args.name!r}: pid {record.shellper_pid} could not be verified as its "
                       f"shellper: {exc}; nothing signalled") from None
    if term.kept:
        raise CliError(f"stop: session {args.name!r}: ended via {term.method}, but {term.kept}")
    print(f"stopped {args.name} (its shellper did not answer; via {term.method})")
    return 0


def _read_record(paths: SessionPaths) -> SessionRecord | None:
    from shellper.host.record import RecordError, read_record

    try:
        return read_record(paths.record)
    except (OSError, RecordError):
        return None


def _pin_shellper(client: Client, record: SessionRecord | None) -> PidFd | None:
    """A pidfd on the shellper that answered: the record's (boot id, pid, start ticks) when the record
    names the instance that answered, else the socket's peer if it is the pid WELCOME claims; None if
    neither can be had (then the lock tells when it is gone)."""
    from shellper.client.blocking import peer_pid
    from shellper.host.identity import IdentityError, PidFd, ProcessIdentity, open_verified

    welcome = client.welcome
    assert welcome is not None
    try:
        if record is not None and (record.instance_id, record.shellper_pid) == (welcome.instance_id,
                                                                                welcome.shellper_pid):
            return open_verified(ProcessIdentity(record.boot_id, record.shellper_pid, record.shellper_start_time))
        peer = peer_pid(client.sock) if client.sock is not None else None
        if peer is not None and peer == welcome.shellper_pid:
            return PidFd.open(peer)  # it holds the connection open, so this pid is still the peer's
    except IdentityError:
        pass
    return None


def _lock_freed(paths: SessionPaths, timeout: float) -> bool:
    """Without a pidfd: wait for the session lock to be free (its holder gone), polling until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if not SessionLock.is_locked(paths.lock):
                return True
        except LockError:
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _confirm_stopped(name: str, paths: SessionPaths, pin: PidFd | None, record: SessionRecord | None) -> int:
    gone = pin.wait_dead(STOP_EXIT_WAIT) if pin is not None else _lock_freed(paths, STOP_EXIT_WAIT)
    if not gone:
        raise CliError(f"stop: session {name!r}: the connection ended but the shellper did not exit: "
                       + _what_remains(name, paths, pin))
    left = session_files(paths)
    if not left:
        _check_cgroup_gone(name, record, paths)
        print(f"stopped {name}")
        return 0
    if SessionLock.is_locked(paths.lock) or _starting(paths):  # its files now: a new shellper took the name
        print(f"stopped {name}; a new session {name!r} has started since")
        return 0
    pid = f" (pid {pin.pid})" if pin is not None else ""
    unwritable = _unwritable(paths.dir)
    if unwritable:
        raise CliError(f"stop: session {name!r}: its shellper{pid} stopped but could not remove its files: "
                       f"{paths.dir} {unwritable}; {_files_left(paths, left)}: run `shellper stop {name}` again "
                       "once it is writable")
    raise CliError(f"stop: session {name!r}: its shellper{pid} died before it finished stopping (killed?); "
                   f"{_files_left(paths, left)}{_survivors_note(record, paths)}: run `shellper stop {name}` again "
                   "to end what it left running and remove its files")


def _unwritable(directory: str | os.PathLike[str]) -> str:
    """Why nobody here can remove files in ``directory`` ("" if they can): a read-only mount, or no write
    permission."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "is on a read-only file system"
    except OSError:
        return ""
    return "" if os.access(directory, os.W_OK | os.X_OK) else "is not writable"


def _check_cgroup_gone(name: str, record: SessionRecord | None, paths: SessionPaths) -> None:
    """The stopped session's cgroup must be gone with it: a process that moved itself into its shellper/ part
    keeps it, and is named (not signalled: nothing proves it the session's, shellper.host.survivors)."""
    if record is None or record.cgroup is None or not os.path.isdir(record.cgroup):
        return
    from shellper.host.cgroup import SHELLPER_SUB, CgroupError
    from shellper.host.shellpers import session_cgroup

    group = session_cgroup(record, str(paths.dir))
    if group is None:
        return
    if not group.populated():  # empty, yet left (the shellper could not remove it): verified ours, so do it
        with contextlib.suppress(CgroupError):
            if group.remove():
                return
    strangers = group.procs(SHELLPER_SUB)
    what = (f"process(es) {', '.join(map(str, strangers))} moved into its {SHELLPER_SUB}/ part, not verifiably "
            "the session's, so not signalled: end them, then `tower-client reconcile --apply` removes it"
            if strangers else f"processes {group.procs()} are still inside")
    raise CliError(f"stop: session {name!r}: its shellper stopped, but its cgroup {group.path} is kept: {what}")


def _what_remains(name: str, paths: SessionPaths, pin: PidFd | None) -> str:
    """A live shellper and its files, and what to do about them."""
    from shellper.host.identity import read_stat

    files = _files_left(paths, session_files(paths))
    if pin is None:
        return (f"its lock is still held; {files}: run `shellper stop {name}` again once its shellper has "
                "exited, or find and end it (`shellper ls` shows its pid)")
    st = read_stat(pin.pid) if not pin.wait_dead(0) else None
    state = {"T": "is stopped (SIGSTOP)", "t": "is stopped by a debugger", "D": "is blocked in the kernel (D)",
             }.get(st.state, "is still running") if st is not None else "has just exited"
    cont = f"`kill -CONT {pin.pid}` lets it finish; or " if st is not None and st.state == "T" else ""
    return (f"its shellper (pid {pin.pid}) {state}; {files}: {cont}`kill -KILL {pin.pid}`, then "
            f"`shellper stop {name}` ends what it left running and removes its files")


def _files_left(paths: SessionPaths, left: list[str]) -> str:
    if not left:
        return "no files left"
    return f"files left in {paths.dir}: {', '.join(os.path.basename(p) for p in left)}"


def _survivors_note(record: SessionRecord | None, paths: SessionPaths) -> str:
    """The processes a dead shellper's tree left running, found by their marks (nothing is signalled)."""
    if record is None:
        return ""
    from shellper.host.identity import IdentityError
    from shellper.host.survivors import find_survivors

    try:
        found = find_survivors(record, directory=paths.dir)
    except (IdentityError, OSError, PathError):  # only a note: the error says what to do either way
        return ""
    try:
        pids = sorted(found)
    finally:
        for fd in found.values():
            fd.close()
    shown = ", ".join(map(str, pids[:20])) + (f", ... ({len(pids)} in all)" if len(pids) > 20 else "")
    return f"; processes it started still running: {shown}" if pids else ""


def _stop_stale(args: argparse.Namespace, paths: SessionPaths) -> int:
    """The shellper is gone (killed, crashed, or a launch that failed) and left files: end what its tree
    left running and remove them, as tower_client's reconcile does for a dead session (identity-checked,
    under the lock). What is not the session's to remove (a symlink, a directory) is named, not touched."""
    from shellper.host.cleanup import clean_session
    from shellper.host.record import AlreadyRunning
    from shellper.host.shellpers import record_is_alive
    from shellper.host.survivors import reap_survivors

    ended: tuple[int, ...] = ()
    grace = DEFAULT_GRACE if args.grace is None else args.grace
    record = _read_record(paths)
    if record is not None:
        _refuse_foreign(args.name, paths, record)
    if record is not None and record_is_alive(record):
        # Its lock file was removed (a tmp cleaner), not its shellper: end it as a Tower would, verified.
        from shellper.host.cleanup import terminate_shellper
        from shellper.host.identity import IdentityError

        try:
            term = terminate_shellper(record, paths, grace=grace, ask_stop=lambda: _ask_stop(args, record, grace))
        except IdentityError as exc:
            raise CliError(f"stop: session {args.name!r} has no lock file, and pid {record.shellper_pid} "
                           f"could not be verified as its shellper: {exc}; nothing signalled") from None
        if term.kept:
            raise CliError(f"stop: session {args.name!r}: ended via {term.method}, but {term.kept}")
        print(f"stopped {args.name} (its lock file was missing; via {term.method})")
        return 0
    kept = ""
    if record is not None:
        from shellper.host.reaper import SurvivorError

        try:
            reaped = reap_survivors(record, directory=paths.dir, grace=grace)
        except SurvivorError as exc:  # the record is how they are found again: kept, like every file
            raise CliError(f"stop: session {args.name!r}: its shellper was already gone, and processes it left "
                           f"survived SIGKILL: {', '.join(map(str, exc.pids))}; nothing removed: run `shellper "
                           f"stop {args.name}` again once they can die") from None
        ended, kept = reaped.pids, reaped.kept
    try:
        removed = clean_session(paths)
    except AlreadyRunning:
        raise CliError(f"stop: session {args.name!r} was started again meanwhile; nothing removed") from None
    ended_note = f" and ended {len(ended)} process(es) it left running" if ended else ""
    left = session_files(paths)
    if left:
        kinds = ", ".join(f"{os.path.basename(p)} ({file_kind(p) or 'gone'})" for p in left)
        raise CliError(f"stop: session {args.name!r}: its shellper was already gone; removed {len(removed)} "
                       f"file(s){ended_note}, but left in {paths.dir}: {kinds}, which shellper never removes "
                       "(only its own sockets and regular files): check what they are and remove them yourself")
    if kept:
        raise CliError(f"stop: session {args.name!r}: its shellper was already gone; removed its "
                       f"files{ended_note}, but {kept}")
    print(f"stopped {args.name}: its shellper was already gone; removed its files{ended_note}")
    return 0


def _refuse_foreign(name: str, paths: SessionPaths, record: SessionRecord | None,
                    welcome_name: str | None = None) -> None:
    """Nothing is signalled or removed for files that are not this name's own (a record copied from
    another session, files hard-linked from it, a socket answering as another session): acting on them
    would end that session (shellper.host.ownfiles, the check tower_client's reconcile and reap make)."""
    from shellper.host.ownfiles import mismatch, not_own

    why = mismatch(name, None, welcome_name=welcome_name) if record is None else not_own(paths, record,
                                                                                          welcome_name)
    if why is not None:
        raise CliError(f"stop: session {name!r}: {why}: these files may be another session's; nothing "
                       f"signalled, nothing removed (if they are litter, remove them yourself)")


def _ask_stop(args: argparse.Namespace, record: SessionRecord, grace: float) -> Client:
    """STOP over the session's socket, for :func:`shellper.host.cleanup.terminate_shellper`, only to the
    recorded shellper: its instance id in WELCOME, its pid at the other end of the socket."""
    from shellper.client.blocking import peer_pid
    from shellper.client.stop import send_stop
    from shellper.protocol import wire

    def recorded(client: Client, welcome: wire.Welcome) -> None:
        _refuse_foreign(args.name, SessionPaths.for_name(_dir(args), args.name), None, welcome.name)
        peer = peer_pid(client.sock) if client.sock is not None else None
        if (welcome.instance_id, welcome.shellper_pid, peer) != (record.instance_id, record.shellper_pid,
                                                                 record.shellper_pid):
            raise CliError(f"stop: session {args.name!r}: its socket answers as instance {welcome.instance_id} "
                           f"from pid {peer}, not as the recorded shellper (instance {record.instance_id}, pid "
                           f"{record.shellper_pid}); nothing signalled")

    return send_stop(os.path.join(_dir(args), f"{args.name}.sock"), grace, recorded,
                     client_name=f"shellper-cli:{args.cmd}")


def cmd_bridge(args: argparse.Namespace) -> int:
    """The session's socket on stdin and stdout (shellper.client.bridge), for a client on another host."""
    from shellper.client.bridge import BridgeError, bridge

    validate_name(args.name)
    try:
        return bridge(socket_path(_dir(args), args.name))
    except (BridgeError, ClientError) as exc:  # ClientError: a socket refused as not ours (shellper.host.trust)
        raise CliError(f"session {args.name!r}: {exc}") from None


def cmd_status(args: argparse.Namespace) -> int:
    from shellper.core.exitrecord import ExitRecordError, exit_line
    from shellper.core.terminal.text import printable
    from shellper.protocol import wire

    paths = _trusted_paths(args)
    try:
        client = _connect(args, "viewer", replay_bytes=0)
    except CliError as exc:  # no answer: if the shellper is gone and left its record, show what that says
        silent = _not_answering(paths, exc)
        if silent is not None:
            pid = silent[0].shellper_pid
            raise CliError(f"status: session {args.name!r}: {silent[1]} `kill -CONT {pid}` resumes a stopped one; "
                           f"`shellper stop {args.name}` ends it") from None
        if SessionLock.is_locked(paths.lock) or not os.path.lexists(paths.record):
            raise
        return _status_of_dead(args, paths)
    with client:
        reply = client.request(wire.Status(), wire.StatusReply)
    assert isinstance(reply, wire.StatusReply)
    if args.json:
        print(json.dumps({"state": reply.state, **reply.info}, indent=2, default=str))
        return 0
    info = reply.info
    unreadable: ExitRecordError | None = None
    try:
        last = reply.last_exit()
    except ExitRecordError as exc:  # a shellper of another version: show the rest
        last, unreadable = None, exc
    now, next_restart_at = time.time(), info.get("next_restart_at")
    reason = info.get("state_reason") or ""
    if last is not None and reason == last.reason:  # "...; restart #2 (crash) in 0.87 s": counted down from now
        reason = exit_line(last, reply.state, next_restart_at, now)
    # Every line goes through printable(): the reason quotes what a program wrote, the command and directory
    # are whatever the session was started with (as ls shows them).
    print(printable(f"{info.get('name')}: {reply.state}" + (f" ({reason})" if reason else "")))
    print(printable(f"  shellper pid {info.get('shellper_pid')}, child pid {info.get('child_pid') or '-'}, "
                    f"up {_duration(info.get('uptime'))}"))
    _print_containment(info.get("owner"), info.get("containment"), info.get("cgroup"))
    print("  command " + printable(f"{' '.join(info.get('argv') or [])} in {info.get('cwd')}"))
    print(printable(f"  output {info.get('ring_end')} bytes, ring holds "
                    f"{info.get('ring_end', 0) - info.get('ring_start', 0)}"))
    print(printable(f"  exits {info.get('exit_count')}, restarts {info.get('restarts')}"))
    if unreadable is not None:
        print(printable(f"  last exit: unreadable ({unreadable})"))
    elif last is not None:
        print(printable(f"  last exit: {exit_line(last, reply.state, next_restart_at, now)}"))
    print(f"  clients: {max(0, len(info.get('clients') or []) - 1)}")  # not counting this status query
    if info.get("output_held"):
        print("  output held: the tower or a terminal is more than half a ring behind (the child waits for it)")
    return 0


def _print_containment(owner: str | None, containment: str | None, cgroup: str | None) -> None:
    from shellper.core.terminal.text import printable

    print(printable(f"  owner {owner or '-'}, containment {containment or '-'}"))
    if cgroup:
        print(printable(f"  cgroup {cgroup}"))


def _status_of_dead(args: argparse.Namespace, paths: SessionPaths) -> int:
    """No live shellper holds the lock, but the record is there: what it last said (owner, containment, its
    cgroup, the exits), marked stale; exit 1, as for any session that is not running."""
    from shellper.core.exitrecord import exit_line
    from shellper.core.terminal.text import printable
    from shellper.host.record import RecordError, read_record

    try:
        record = read_record(paths.record)
    except FileNotFoundError:  # removed since the check
        raise CliError(f"session {args.name!r}: no such session") from None
    except (OSError, RecordError) as exc:
        raise CliError(f"status: session {args.name!r}: its shellper is gone and its record is unreadable: "
                       f"{exc}") from None
    reason = f"no live shellper holds this session's lock; its record said {record.state}"
    if args.json:
        print(json.dumps({"state": "stale", "state_reason": reason, "name": record.name, "owner": record.owner,
                          "containment": record.containment, "cgroup": record.cgroup, "record": record.to_dict()},
                         indent=2, default=str))
    else:
        print(printable(f"{record.name}: stale ({reason})"))
        print(f"  shellper pid {record.shellper_pid} (gone), child pid {record.child_pid or '-'} (recorded)")
        _print_containment(record.owner, record.containment, record.cgroup)
        print("  command " + printable(f"{' '.join(record.command)} in {record.cwd}"))
        print(f"  exits {record.exit_count}, restarts {record.restarts}")
        if record.exits:  # nobody is left to restart it: no countdown
            print(printable(f"  last exit: {exit_line(record.exits[-1], 'stale', None, time.time())}"))
    print(f"shellper: session {args.name!r} is not running (shown from its record)", file=sys.stderr)
    return 1


def cmd_legacy_main(args: argparse.Namespace) -> int:
    from shellper.daemon.legacymain import legacy_main

    return legacy_main([args.config])


_COMMANDS = {
    "legacy-main": cmd_legacy_main,
    "run": cmd_run, "ls": cmd_ls, "attach": cmd_attach, "send": cmd_send, "tail": cmd_tail,
    "signal": cmd_signal, "resize": cmd_resize, "stop": cmd_stop, "status": cmd_status, "restart": cmd_restart,
    "screen": cmd_screen,
    "bridge": cmd_bridge,
}
