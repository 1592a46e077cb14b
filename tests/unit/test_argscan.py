"""shellper.cli.argscan: the command line read without argparse agrees with the CLI's argparse parser."""

from __future__ import annotations

import argparse
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shellper.cli.argscan import GLOBAL_OPTIONS, command_options, may_detach, scan
from shellper.cli.argtree import build as _parser
from shellper.cli.commands import COMMANDS as COMMAND_NAMES


def _options(parser: argparse.ArgumentParser) -> dict[str, bool]:
    return {option: action.nargs != 0 for action in parser._actions for option in action.option_strings}


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


PARSER = _parser()
COMMANDS = _commands(PARSER)
COMMAND_OPTIONS = {name: command_options(name) or {} for name in COMMAND_NAMES}


def test_the_tables_are_the_parsers_options() -> None:
    """Every command and option the parser has, and which ones take a value: the scanner reads them from the
    table the parser is built from, and must read them as argparse does."""
    assert _options(PARSER) == GLOBAL_OPTIONS
    assert set(COMMANDS) == set(COMMAND_OPTIONS)
    for name, sub in COMMANDS.items():
        assert _options(sub) == COMMAND_OPTIONS[name], name
    assert command_options("bogus") is None and command_options("options") is None


@pytest.mark.parametrize(("argv", "command", "options", "operands", "child", "exact"), [
    ([], None, {}, [], None, True),
    (["ls"], "ls", {}, [], None, True),
    (["--dir", "/d", "ls", "--json"], "ls", {"--dir": "/d", "--json": True}, [], None, True),
    (["--dir=/d", "attach", "s"], "attach", {"--dir": "/d"}, ["s"], None, True),
    (["--dir", "run", "ls"], "ls", {"--dir": "run"}, [], None, True),  # a directory named run
    (["--di", "/d", "run", "s"], "run", {"--dir": "/d"}, ["s"], None, False),  # argparse's abbreviation
    (["--d=/d", "run"], "run", {"--dir": "/d"}, [], None, False),
    (["run", "s", "--cwd", "/", "--", "git", "log", "--", "f"], "run", {"--cwd": "/"}, ["s"],
     ["git", "log", "--", "f"], True),
    (["run", "s", "git", "--", "log"], "run", {}, ["s", "git"], ["log"], True),
    (["--", "run", "s"], None, {}, [], ["run", "s"], False),
    (["run", "s", "--fore", "--", "x"], "run", {"--foreground": True}, ["s"], ["x"], False),
    (["run", "s", "--f", "--", "x"], "run", {}, ["s"], ["x"], False),  # --foreground or --fatal-pattern
    (["run", "s", "--env", "A=1", "--env=B=2", "--", "x"], "run", {"--env": "B=2"}, ["s"], ["x"], True),
    (["run", "s", "--cwd", "--", "x"], "run", {}, ["s"], ["x"], False),  # --cwd without its value
    (["tail", "s", "-f", "--bytes", "1K"], "tail", {"-f": True, "--bytes": "1K"}, ["s"], None, True),
    (["tail", "s", "-fx"], "tail", {}, ["s"], None, False),
    (["attach", "s", "--detach-key="], "attach", {"--detach-key": ""}, ["s"], None, True),
    (["attach", "s", "--detach-key", "-"], "attach", {"--detach-key": "-"}, ["s"], None, True),
    (["attach", "s", "--detach-key", "-x"], "attach", {}, ["s", ], None, False),
    (["attach", "s", "--detach-key=--"], "attach", {"--detach-key": "--"}, ["s"], None, False),
    (["attach", "s", "--relay=1"], "attach", {"--relay": True}, ["s"], None, False),
    (["attach", "s", "--dir", "/d"], "attach", {"--dir": "/d"}, ["s"], None, True),  # also after the command
    (["-v", "ls"], "ls", {}, [], None, False),
    (["bogus", "--json"], "bogus", {}, [], None, False),
    (["send", "s", "-", "--enter"], "send", {"--enter": True}, ["s", "-"], None, True),
])
def test_scan(argv: list[str], command: str | None, options: dict[str, Any], operands: list[str],
              child: list[str] | None, exact: bool) -> None:
    line = scan(argv)
    assert (line.command, line.options, line.operands, line.child, line.exact) == (
        command, options, operands, child, exact)


@pytest.mark.parametrize(("argv", "detach"), [
    (["run", "s", "--", "x"], True),
    (["--dir", "/d", "run", "s", "--", "x", "--foreground"], True),  # the child's option, not run's
    (["run", "s", "--foreground", "--", "x"], False),
    (["run", "s", "--fore", "--", "x"], False),
    (["run", "-h"], False),
    (["--version", "run"], False),
    (["ls", "run"], False),
    (["--dir", "run", "ls"], False),
    (["run", "s", "--bogus", "--", "x"], True),  # argparse will refuse it: the prefork is cancelled
])
def test_may_detach(argv: list[str], detach: bool) -> None:
    assert may_detach(scan(argv)) is detach


# ------------------------------------------------------------------------------- against argparse itself


class _Refused(Exception):
    pass


def _refuse(self: argparse.ArgumentParser, message: str) -> None:
    raise _Refused(message)


def _parse(argv: list[str]) -> argparse.Namespace:
    """As shellper.cli.main.main parses, with argparse's errors raised instead of printed."""
    line = scan(argv)
    if line.command == "run" and line.child is not None:
        argv = argv[:len(argv) - len(line.child) - 1]
    with mock.patch.object(argparse.ArgumentParser, "error", _refuse):
        return PARSER.parse_args(argv)


def _stored_and_meant(args: argparse.Namespace, option: str, scanned: str | bool) -> tuple[Any, Any]:
    """What argparse stored for ``option``, and what the scanner's value for it means to argparse."""
    parser = COMMANDS[args.cmd] if option in COMMAND_OPTIONS[args.cmd] else PARSER
    (action,) = (a for a in parser._actions if option in a.option_strings)
    stored = getattr(args, action.dest)
    if action.nargs == 0:  # store_true, store_false, store_const
        return stored, action.const
    meant = action.type(scanned) if callable(action.type) else scanned
    return (stored[-1] if isinstance(action, argparse._AppendAction) else stored), meant


_TABLES = (GLOBAL_OPTIONS, *COMMAND_OPTIONS.values())
_LONG = sorted({option for table in _TABLES for option in table} - {"-h", "--help", "--version"})
_VALUED = sorted({option for table in _TABLES for option, valued in table.items() if valued})
_VALUES = ["s", "1", "0.5", "-", "", "A=1", "-x", "--", "run", "attach", "pty", "no", "/tmp"]
_TOKENS = st.one_of(
    st.sampled_from([*COMMAND_OPTIONS, "bogus", "--", "-f", "--d", "--fore", "--re", "--read", "--gr", "--x"]),
    st.sampled_from(_LONG),
    st.sampled_from(_VALUES),
    st.builds(lambda option, value: f"{option}={value}", st.sampled_from([*_VALUED, "--relay"]),
              st.sampled_from(_VALUES)),
)
_STRUCTURAL = ("expected one argument", "ambiguous option", "ignored explicit argument", "argument COMMAND:")


@settings(max_examples=800, deadline=None)
@given(st.lists(_TOKENS, max_size=8))
def test_argparse_reads_every_exact_scan_the_same_way(argv: list[str]) -> None:
    """Whatever argparse accepts has the command the scanner found; what the scanner calls exact, argparse
    never refuses for its options (only for a value's type or choice, or the number of operands), and it
    stores the scanner's value for each option."""
    line = scan(argv)
    try:
        args = _parse(argv)
    except _Refused as refused:
        message = str(refused)
        if line.exact:
            assert not any(s in message for s in _STRUCTURAL), message
            if message.startswith("unrecognized arguments: "):
                unrecognized = set(message.split(": ", 1)[1].split(" "))
                assert unrecognized <= {*line.operands, *(line.child or ()), "--", ""}, message
        return
    if line.command is not None or line.child is None:
        assert args.cmd == line.command
    if line.exact and not {"--fatal-pattern", "--no-fatal-patterns"} <= line.options.keys():  # one dest
        for option, scanned in line.options.items():
            stored, meant = _stored_and_meant(args, option, scanned)
            assert stored == meant, (option, argv)
