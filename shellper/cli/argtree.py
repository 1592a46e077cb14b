"""The argparse tree of ``shellper``, built from the option table (shellper.cli.options, shellper.cli.commands).

:func:`build` gives the whole tree: help, shell completions and man pages are made from it (``make
completions``). The CLI itself uses :func:`build_lazily`, where a command's options are added only when that
command is the one run: argparse's cost grows with each option it adds (it makes a help formatter for each),
so a command no longer pays for the options of the twelve others, nor imports their modules.
"""

from __future__ import annotations

import argparse
import os
import sys

from shellper.cli.commands import COMMANDS, load
from shellper.cli.options import AFTER_COMMAND, GLOBAL, SUPPRESS

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    from shellper.cli.options import Arg


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


def _add(parser: argparse.ArgumentParser, args: Iterable[Arg]) -> None:
    groups: dict[str, argparse._ArgumentGroup] = {}
    for arg in args:
        target: argparse.ArgumentParser | argparse._ArgumentGroup = parser
        if arg.group is not None:
            if arg.group not in groups:
                groups[arg.group] = parser.add_argument_group(arg.group)
            target = groups[arg.group]
        # argparse tells SUPPRESS by identity: the table's own spelling of it is swapped for argparse's
        kwargs = {key: argparse.SUPPRESS if value == SUPPRESS else value
                  for key, value in arg.argparse_kwargs().items()}
        target.add_argument(*arg.names, **kwargs)  # type: ignore[arg-type]


class _Parsers(dict):  # type: ignore[type-arg]
    """A command's parser, made when first looked up: argparse builds a parser (and its help formatter) per
    command, which every run of the CLI paid for the sixteen commands it does not run."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self.make = make

    def __getitem__(self, name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser | None = super().__getitem__(name)
        if parser is None:
            parser = self.make(name)
            self[name] = parser
        return parser

    def values(self) -> Any:  # every parser, made
        return [self[name] for name in self]

    def items(self) -> Any:
        return [(name, self[name]) for name in self]


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The COMMAND choice: a command's parser is made, and gets its options, the first time it is chosen."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filled: set[str] = set()
        self._made: dict[str, dict[str, Any]] = {}
        self._name_parser_map = self.choices = _Parsers(self._make)

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser | None:
        """Record ``name`` and its line of help; the parser comes on first use (:class:`_Parsers`)."""
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), kwargs.pop("help")))
        kwargs.setdefault("prog", f"{self._prog_prefix} {name}")
        self._made[name] = kwargs
        dict.__setitem__(self.choices, name, None)
        return None

    def _make(self, name: str) -> argparse.ArgumentParser:
        return self._parser_class(**self._made[name])  # type: ignore[no-any-return]

    def fill(self, command: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self.choices[command]
        if command not in self.filled:
            self.filled.add(command)
            _add(parser, (*AFTER_COMMAND, *load(command).ARGUMENTS))
        return parser

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        if values and values[0] in self.choices:
            self.fill(str(values[0]))
        super().__call__(parser, namespace, values, option_string)


def build_lazily() -> argparse.ArgumentParser:
    """The tree with every command's name and line of help, each command's options added once it is chosen
    (``fill`` of :func:`commands`)."""
    parser = argparse.ArgumentParser(prog="shellper", description="Hold a terminal session in a long-lived process.",
                                     formatter_class=_Formatter)
    _add(parser, GLOBAL)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND", action=_Commands)
    for name, text in COMMANDS.items():
        sub.add_parser(name, help=text, formatter_class=_Formatter)
    return parser


def commands(parser: argparse.ArgumentParser) -> _Commands:
    """The COMMAND choice of a parser :func:`build_lazily` made."""
    (sub,) = (action for action in parser._actions if isinstance(action, _Commands))
    return sub


def build() -> argparse.ArgumentParser:
    """The whole tree, every command's options in it."""
    parser = build_lazily()
    sub = commands(parser)
    for name in COMMANDS:
        sub.fill(name)
    return parser
