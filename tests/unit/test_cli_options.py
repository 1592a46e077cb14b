"""The restart policy's options on the command line (shellper.cli.commands.run.RESTART_POLICY): what they
make of shellper.core.exits.RestartPolicy, and the defaults their help shows."""

from __future__ import annotations

import argparse
import signal

import pytest

from shellper.cli import argtree
from shellper.cli.commands.run import RESTART_POLICY, policy_options
from shellper.core.exits import DEFAULT_POLICY, PolicyError, RestartPolicy

TERM = int(signal.SIGTERM)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shellper run")
    parser.add_argument("--grace", type=float)   # a neighbour option of the real CLI
    argtree._add(parser, RESTART_POLICY)
    return parser


@pytest.mark.parametrize(("argv", "expected"), [
    ([], DEFAULT_POLICY),
    (["--grace", "3"], DEFAULT_POLICY),
    (["--restart", "always", "--backoff-max", "30", "--max-restarts", "none"],
     RestartPolicy(mode="always", backoff_max=30, max_restarts=None)),
    (["--fatal-pattern", "lock held", "--fatal-pattern", "quota exceeded"],
     RestartPolicy(fatal_patterns=("lock held", "quota exceeded"))),
    (["--no-fatal-patterns"], RestartPolicy(fatal_patterns=())),
    (["--prevent-codes", "2,64", "--clean-signals", "TERM,HUP", "--breaker-count", "3"],
     RestartPolicy(prevent_codes=frozenset({2, 64}), breaker_count=3,
                   clean_signals=frozenset({TERM, int(signal.SIGHUP)}))),
])
def test_policy_from_command_line(argv: list[str], expected: RestartPolicy) -> None:
    assert RestartPolicy.from_options(policy_options(_parser().parse_args(argv))) == expected


@pytest.mark.parametrize(("argv", "bad_field"), [
    (["--breaker-count", "0"], "breaker_count"),
    (["--min-uptime", "x"], "min_uptime"),
    (["--fatal-pattern", "("], "fatal_patterns"),
])
def test_policy_command_line_errors_name_the_field(argv: list[str], bad_field: str) -> None:
    with pytest.raises(PolicyError) as info:
        RestartPolicy.from_options(policy_options(_parser().parse_args(argv)))
    assert info.value.field == bad_field


def test_policy_help_shows_defaults() -> None:
    text = " ".join(_parser().format_help().split())
    assert "--restart {no,on-failure,always}" in text
    assert "(default 64,78)" in text and "(default 100)" in text


def test_every_policy_option_shows_the_policys_own_default() -> None:
    """The help's defaults are read from shellper.core.defaults, the policy's from the same constants: they
    must be the ones a policy built from no options has."""
    from shellper.cli.commands.run import POLICY, _shown

    text = " ".join(_parser().format_help().split())
    for option in RESTART_POLICY:
        field = (option.dest or "")[len(POLICY):]
        if field in ("mode", "fatal_patterns"):
            continue
        assert f"{option.names[0]} {option.metavar} " in text
        assert f"(default {_shown(getattr(DEFAULT_POLICY, field))})" in option.help, option.names


def test_every_option_is_stored_where_and_as_the_table_says() -> None:
    """The attribute and the value-when-not-given that attach's quick path reads from the table are the
    ones argparse uses (``-c, --create`` is stored as ``create``)."""
    from shellper.cli.commands import COMMANDS, load
    from shellper.cli.options import GLOBAL, Version

    parser = argtree.build()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    tables = [(parser, GLOBAL), *((sub.choices[name], load(name).ARGUMENTS) for name in COMMANDS)]
    checked = 0
    for command, table in tables:
        actions = {option: action for action in command._actions for option in action.option_strings}
        for arg in table:
            if arg.positional or isinstance(arg, Version):
                continue
            action = actions[arg.names[0]]
            assert (action.dest, action.default) == (arg.attribute, arg.unset), arg.names
            checked += 1
    assert checked > 40
