"""The CLI's option table: what each command takes, as records, read three ways.

Each command's module (shellper.cli.commands) declares its ``ARGUMENTS`` with the records below; the global
options are :data:`GLOBAL`. From these alone, shellper.cli.argtree builds the argparse tree (help, completions
and man pages come from that), shellper.cli.argscan reads a command line without argparse (which options
take a value), and ``shellper attach``'s quick path maps options to its arguments. So an option is written
once. Why the records are plain classes and the value types plain functions: this module and the command
modules' tables are read before the console script forks the prefork (shellper.cli.entry), so they import
nothing but the package's constants, and argparse only inside a value type, when it is already loaded.
"""

from __future__ import annotations

import math
import os

from shellper import __version__

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

SUPPRESS = "==SUPPRESS=="
"""argparse.SUPPRESS, spelled out: as a help, the option is hidden; as a default, an option not given sets
nothing."""


class Arg:
    """One argument or option of a command line: ``names`` (``("--replace", "-f")``, or a positional's
    name), its help, and where argparse stores it (``dest``; None: argparse's own choice)."""

    __slots__ = ("dest", "group", "help", "metavar", "names")

    takes_value = True
    """Whether the option is followed by a value (what argscan must know)."""

    def __init__(self, *names: str, help: str, dest: str | None = None, metavar: str | None = None,
                 group: str | None = None) -> None:
        self.names = names
        self.help = help
        self.dest = dest
        self.metavar = metavar
        self.group = group
        """The heading argparse lists it under ("restart policy"); None: the command's options."""

    @property
    def positional(self) -> bool:
        return not self.names[0].startswith("-")

    @property
    def attribute(self) -> str:
        """The attribute argparse stores it in: ``dest``, else its first long name (its first name without
        one) without the dashes, ``-`` read as ``_``."""
        if self.dest is not None:
            return self.dest
        name = next((name for name in self.names if name.startswith("--")), self.names[0])
        return name.lstrip("-").replace("-", "_")

    @property
    def unset(self) -> object:
        """What argparse stores when it is not given."""
        return None

    def argparse_kwargs(self) -> dict[str, object]:
        """The keyword arguments of argparse's ``add_argument`` for this record."""
        kwargs: dict[str, object] = {"help": self.help}
        if self.dest is not None:
            kwargs["dest"] = self.dest
        if self.metavar is not None:
            kwargs["metavar"] = self.metavar
        return kwargs


class Positional(Arg):
    """An operand: ``nargs`` "*" for any number (a command and its arguments), ``type`` to convert it."""

    __slots__ = ("nargs", "type")

    def __init__(self, name: str, *, help: str, nargs: str | None = None, type: Callable[[str], object] | None = None,
                 metavar: str | None = None) -> None:
        super().__init__(name, help=help, metavar=metavar)
        self.nargs = nargs
        self.type = type

    def argparse_kwargs(self) -> dict[str, object]:
        kwargs = super().argparse_kwargs()
        if self.nargs is not None:
            kwargs["nargs"] = self.nargs
        if self.nargs == "*":  # argparse calls one without a default required ("required: name, command")
            kwargs["default"] = []
        if self.type is not None:
            kwargs["type"] = self.type
        return kwargs


class Flag(Arg):
    """An option without a value: True when given (False with ``negates``, for ``--no-...``)."""

    __slots__ = ("negates",)
    takes_value = False

    def __init__(self, *names: str, help: str, dest: str | None = None, negates: bool = False,
                 group: str | None = None) -> None:
        super().__init__(*names, help=help, dest=dest, group=group)
        self.negates = negates

    @property
    def unset(self) -> object:
        return self.negates

    def argparse_kwargs(self) -> dict[str, object]:
        return {**super().argparse_kwargs(), "action": "store_false" if self.negates else "store_true"}


class Const(Arg):
    """An option without a value that stores ``const`` (``--no-fatal-patterns``: no patterns)."""

    __slots__ = ("const",)
    takes_value = False

    def __init__(self, *names: str, help: str, dest: str, const: object, group: str | None = None) -> None:
        super().__init__(*names, help=help, dest=dest, group=group)
        self.const = const

    def argparse_kwargs(self) -> dict[str, object]:
        return {**super().argparse_kwargs(), "action": "store_const", "const": self.const}


class Version(Arg):
    """``--version``: prints ``version`` and exits."""

    __slots__ = ("version",)
    takes_value = False

    def __init__(self, *names: str, version: str) -> None:
        super().__init__(*names, help="show program's version number and exit")
        self.version = version

    def argparse_kwargs(self) -> dict[str, object]:
        return {"action": "version", "version": self.version}


class Value(Arg):
    """An option with a value: converted by ``type``, one of ``choices``, ``default`` when not given;
    ``repeated``: each time given, appended to a list."""

    __slots__ = ("choices", "default", "repeated", "type")

    def __init__(self, *names: str, help: str, type: Callable[[str], object] | None = None, default: object = None,
                 choices: Sequence[str] | None = None, repeated: bool = False, dest: str | None = None,
                 metavar: str | None = None, group: str | None = None) -> None:
        super().__init__(*names, help=help, dest=dest, metavar=metavar, group=group)
        self.type = type
        self.default = default
        self.choices = choices
        self.repeated = repeated

    @property
    def unset(self) -> object:
        return self.default

    def argparse_kwargs(self) -> dict[str, object]:
        kwargs = super().argparse_kwargs()
        if self.type is not None:
            kwargs["type"] = self.type
        if self.default is not None:
            kwargs["default"] = self.default
        if self.choices is not None:
            kwargs["choices"] = self.choices
        if self.repeated:
            kwargs["action"] = "append"
        return kwargs


def spellings(args: Iterable[Arg]) -> dict[str, bool]:
    """Every option string of ``args``, with whether it takes a value (what shellper.cli.argscan reads)."""
    return {name: arg.takes_value for arg in args if not arg.positional for name in arg.names}


def destinations(args: Iterable[Arg]) -> dict[str, str]:
    """Every option string of ``args`` with the attribute argparse stores it in."""
    return {name: arg.attribute for arg in args if not arg.positional for name in arg.names}


# ----------------------------------------------------------------------------------------- value types


def _refuse(message: str) -> Exception:
    """argparse's ArgumentTypeError (loaded by then: only argparse calls a value type), which it reports as
    the option's error, in ``message``'s words."""
    import argparse

    return argparse.ArgumentTypeError(message)


def size(text: str) -> int:
    """Byte counts: plain integers or with a K/M/G suffix (powers of 1024)."""
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        value = int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except (ValueError, OverflowError):  # OverflowError: 1e309K
        raise _refuse(f"{text!r} is not a size (e.g. 8388608, 8M, 512K)") from None
    if not 0 <= value < 2**63:
        raise _refuse(f"{text!r} is outside 0..2^63-1 bytes")
    return value


def seconds(text: str) -> float:
    """A duration: a finite number of seconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise _refuse(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value >= 0):
        raise _refuse(f"{text!r} must be a finite number of seconds >= 0")
    return value


def husk_ttl(text: str) -> float | None:
    """--husk-ttl: seconds, or none (the husk stays until stopped)."""
    return None if text.strip().lower() == "none" else seconds(text)


def nonempty(text: str) -> str:
    if not text:  # not "the default": the user named a directory, just not one that exists
        raise _refuse("must not be empty")
    return text


def host(text: str) -> str:
    """``--host``/``--attach-host``: an ssh destination as shellper.core.names.validate_host accepts it."""
    from shellper.core.names import BadHost, validate_host

    try:
        return validate_host(text)
    except BadHost as exc:
        raise _refuse(exc.reason) from None


def env_pair(text: str) -> tuple[str, str]:
    """``--env KEY=VALUE``, or ``--env KEY`` for this process's $KEY: a secret passed so is in no command
    line, not even the CLI's. Never quotes what follows the ``=``."""
    key, sep, value = text.partition("=")
    if not key:
        raise _refuse("expected KEY=VALUE or KEY, got no KEY")
    if not sep:
        if key not in os.environ:
            raise _refuse(f"{key!r:.80} is not set here (give {key:.80}=VALUE)")
        value = os.environ[key]
    return key, value


# ----------------------------------------------------------------------------------------- every command

_DIR_HELP = "runtime directory (default $SHELLPER_DIR, $XDG_RUNTIME_DIR/shellper, /tmp/shellper-$UID)"
_HOST_HELP = ("run the command on this ssh destination (user@host, an alias of ~/.ssh/config) through its shared "
              "connection; HOST:NAME names a session there too ($SHELLPER_SSH: the ssh command; $SHELLPER_REMOTE: "
              "shellper's command there, else its own copy, installed on first use)")

GLOBAL: tuple[Arg, ...] = (
    Version("--version", version=f"shellper {__version__}"),
    Value("--dir", type=nonempty, help=_DIR_HELP),
    Value("--host", metavar="HOST", type=host, help=_HOST_HELP),
)
"""The options before the command."""

AFTER_COMMAND: tuple[Arg, ...] = (
    # also after the command (`shellper run NAME --dir D`), as people type it; SUPPRESS: not given there, it
    # leaves the one given before the command alone
    Value("--dir", type=nonempty, default=SUPPRESS, help="as before the command"),
    Value("--host", type=host, default=SUPPRESS, help="as before the command"),
)
"""The global options every command takes after its name too."""

HELP = {"-h": False, "--help": False}
"""The option argparse gives every parser."""

NAME = Positional("name", help="the session's name")
"""Most commands' first operand."""
