"""The command line read without argparse, for the console script's fast paths.

argparse, and what the CLI imports with it, cost a command more than the interpreter's own start-up
(bench/NOTES.md, "Start-up"). So three questions are answered before the full parser runs, or instead of
it: is this a plain ``attach`` (shellper.cli.commands.attach.quick_main), may it be a detached ``run``, worth
starting the daemon-to-be for now (shellper.daemon.prefork), and where does a ``run``'s child command begin
(shellper.cli.main). All three read :func:`scan`'s answer, which reads the option table the parser is built
from (shellper.cli.options): of it, only the command's own module. This runs before the prefork is forked:
what it imports is the table, which imports nothing but the package's constants.
"""

from __future__ import annotations

from shellper.cli.commands import COMMANDS, load
from shellper.cli.options import AFTER_COMMAND, GLOBAL, HELP, spellings

GLOBAL_OPTIONS: dict[str, bool] = {**HELP, **spellings(GLOBAL)}
"""The options before the command, each with whether it takes a value."""


def command_options(command: str) -> dict[str, bool] | None:
    """The options of ``command`` (None if there is no such command), each with whether it takes a value;
    its module (shellper.cli.commands) is imported for its table, the others' are not."""
    if command not in COMMANDS:
        return None
    return {**HELP, **spellings(AFTER_COMMAND), **spellings(load(command).ARGUMENTS)}


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
            options = command_options(token)
            if options is None:
                line.exact = False
                break
            table = options
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
    session): then shellper.cli.onhost decides (and refuses a host that is no ssh destination,
    shellper.core.names.validate_host), and the console script takes none of its quick paths."""
    if "--host" in line.options or "--host" in line.missing:
        return True
    return line.command not in NO_SESSION_OPERANDS and any(":" in operand for operand in line.operands)


def may_detach(line: Scan) -> bool:
    """Whether ``line`` may be a detached ``run``, worth starting the daemon-to-be before parsing it; a
    wrong guess costs a spawn and a kill."""
    return line.command == "run" and not _NO_DETACH.intersection(line.options)
