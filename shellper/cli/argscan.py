"""The command line read without argparse, for the console script's fast paths.

argparse, and what the CLI imports with it, cost a command more than the interpreter's own start-up
(bench/NOTES.md, "Start-up"). So three questions are answered before the full parser runs, or instead of
it: is this a plain ``attach`` (shellper.cli.attach.quick_main), may it be a detached ``run``, worth starting
the daemon-to-be for now (shellper.daemon.prefork), and where does a ``run``'s child command begin
(shellper.cli.main). All three read :func:`scan`'s answer; the tables below are the one place outside the
parser that says which options there are and which take a value, and tests/unit/test_argscan.py holds
them to the parser's. This module imports nothing: it runs before the prefork is forked.
"""

from __future__ import annotations

_HELP = {"-h": False, "--help": False, "--dir": True, "--host": True}  # --dir, --host: also after the command

GLOBAL_OPTIONS: dict[str, bool] = {**_HELP, "--version": False}
"""The options before the command, each with whether it takes a value."""

_RESTART_POLICY = {
    "--restart": True, "--backoff-initial": True, "--backoff-max": True, "--backoff-factor": True,
    "--jitter": True, "--healthy-uptime": True, "--min-uptime": True, "--breaker-count": True,
    "--breaker-window": True, "--same-error-count": True, "--clean-exit-count": True,
    "--clean-exit-uptime": True, "--max-restarts": True, "--prevent-codes": True, "--clean-signals": True,
    "--fatal-scan-lines": True, "--fatal-pattern": True, "--no-fatal-patterns": False,
}

COMMAND_OPTIONS: dict[str, dict[str, bool]] = {
    "run": {**_HELP, "--foreground": False, "--json": False, "--replace": False, "-f": False, "--cwd": True,
            "--env": True, "--no-inherit-env": False, "--attach-host": True,
            "--cols": True, "--rows": True, "--term": True, "--ring-bytes": True, "--stderr": True,
            "--grace": True, "--husk-ttl": True, "--owner": True, "--containment": True,
            "--cgroup-parent": True, **_RESTART_POLICY},
    "ls": {**_HELP, "--json": False},
    "attach": {**_HELP, "-c": False, "--create": False, "--detach-key": True, "-e": True, "--read-only": False,
               "-r": False, "--no-replay": False, "--relay": False, "--raw": False},
    "send": {**_HELP, "--enter": False},
    "tail": {**_HELP, "--bytes": True, "--lines": True, "-n": True, "--follow": False, "-f": False, "--plain": False},
    "screen": {**_HELP, "--ansi": False, "--json": False, "--scrollback": True},
    "signal": _HELP,
    "resize": _HELP,
    "restart": _HELP,
    "stop": {**_HELP, "--all": False, "--grace": True},
    "status": {**_HELP, "--json": False},
    "legacy-main": _HELP,
    "bridge": _HELP,
}
"""Each command's options, each with whether it takes a value."""

_NO_DETACH = frozenset(("--foreground", "-h", "--help", "--version"))


class Scan:
    """What :func:`scan` read.

    ``command``: the first operand (None if there is none before ``--``); ``options``: each option seen,
    under its full name, with its last value (True for a flag); ``operands``: the command's positional
    arguments; ``child``: what follows the first ``--`` (None without one); ``exact``: every option was
    known and spelled in full, and each one that takes a value had one, so argparse reads the line the
    same way. When it is False (an abbreviation, an unknown option or command, a missing value, a value
    that looks like an option) argparse must decide, and the rest is a guess. ``missing``: the options
    that take a value but were given none (the next word looked like an option, or there was none).
    """

    __slots__ = ("child", "command", "exact", "missing", "operands", "options")

    def __init__(self) -> None:
        self.command: str | None = None
        self.options: dict[str, str | bool] = {}
        self.operands: list[str] = []
        self.child: list[str] | None = None
        self.missing: set[str] = set()
        self.exact = True


def _resolve(option: str, table: dict[str, bool]) -> str | None:
    """The option ``option`` names: itself, or the one long option it is a prefix of (as argparse
    allows); None for an unknown or ambiguous one."""
    if option in table:
        return option
    if not option.startswith("--"):
        return None
    matches = [known for known in table if known.startswith(option)]
    return matches[0] if len(matches) == 1 else None


def _looks_like_option(token: str, table: dict[str, bool]) -> bool:
    """Whether argparse reads ``token`` as an option rather than as an operand or the value of the option
    before it, in its order: one of ``table``'s options (``--opt=value`` too, with a space in the value),
    else not a negative number, and no space in it (``--host '-F /dev/null gpu1'`` gives --host that
    value, which must then be judged as a host, not skipped)."""
    if not token.startswith("-") or token == "-":
        return False
    if _resolve(token.partition("=")[0], table) is not None:
        return True
    if " " in token:
        return False
    whole, dot, fraction = token[1:].partition(".")  # argparse: -\d+ or -\d*\.\d+
    number = (whole.isdigit() and not dot) or (fraction.isdigit() and (not whole or whole.isdigit()))
    return not (number and token.isascii())


def scan(argv: list[str]) -> Scan:
    """Split ``argv`` (without the program name) as the CLI's parser would; see :class:`Scan`."""
    line = Scan()
    table = GLOBAL_OPTIONS
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            line.child = argv[i:]
            line.exact = line.exact and line.command is not None  # argparse takes a -- before one as the command
            break
        if not _looks_like_option(token, table):
            if line.command is not None:
                line.operands.append(token)
                continue
            line.command = token
            if token not in COMMAND_OPTIONS:
                line.exact = False
                break
            table = COMMAND_OPTIONS[token]
            continue
        spelled, equals, value = token.partition("=")
        name = _resolve(spelled, table)
        if name is None:
            line.exact = False
            continue
        if name != spelled:
            line.exact = False
        if not table[name]:
            line.options[name] = True
            if equals:
                line.exact = False
            continue
        if not equals:
            if i == len(argv) or _looks_like_option(argv[i], table):
                line.exact = False
                line.missing.add(name)
                continue
            value = argv[i]
            i += 1
        elif value == "--":  # argparse drops a -- from an option's values, even an explicit one
            line.exact = False
        line.options[name] = value
    return line


NO_SESSION_OPERANDS = frozenset({"legacy-main"})
"""Commands whose operands are not session names (legacy-main's is a JSON config, colons and all)."""


def names_a_host(line: Scan) -> bool:
    """Whether ``line`` may be for another host (``--host``, or a ``:`` in an operand that may name a
    session): then shellper.cli.remote decides (and refuses a host that is no ssh destination,
    shellper.core.names.validate_host), and the console script takes none of its quick paths."""
    if "--host" in line.options or "--host" in line.missing:
        return True
    return line.command not in NO_SESSION_OPERANDS and any(":" in operand for operand in line.operands)


def may_detach(line: Scan) -> bool:
    """Whether ``line`` may be a detached ``run``, worth starting the daemon-to-be before parsing it; a
    wrong guess costs a spawn and a kill."""
    return line.command == "run" and not _NO_DETACH.intersection(line.options)
