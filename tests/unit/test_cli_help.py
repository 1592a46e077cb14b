"""`--help` describes every option and argument of every command, the signal names and the detach key included."""

from __future__ import annotations

import argparse

import pytest

from shellper.cli.argtree import build as _parser
from tower_client.cli import _parser as tower_parser


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [("", parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += [(name, sub) for name, sub in action.choices.items()]
    return found


@pytest.mark.parametrize(("program", "make"), [("shellper", _parser), ("tower-client", tower_parser)])
def test_every_option_and_argument_has_a_description(program: str, make: object) -> None:
    undescribed = [f"{program} {name} {'/'.join(a.option_strings) or a.dest}"
                   for name, parser in _commands(make())  # type: ignore[operator]
                   for a in parser._actions
                   if not a.help and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    assert undescribed == []


def test_help_names_the_signals_and_the_detach_key() -> None:
    commands = dict(_commands(_parser()))
    assert "HUP" in commands["signal"].format_help() and "9" in commands["signal"].format_help()
    assert "^\\" in commands["attach"].format_help()
