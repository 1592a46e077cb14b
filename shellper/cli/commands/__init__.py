"""The ``shellper`` commands, one module each: its ``ARGUMENTS`` (shellper.cli.options) and its ``handle``.

A command's module is imported only for that command: by the quick scan for its option table
(shellper.cli.argscan, before the console script forks the prefork) and by the parser when the command is
the one run. So a module imports, at its top, only the option table and the package's constants; what its
handler needs, the handler imports.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from shellper.cli.options import Arg

    class Command:
        """What a command's module holds."""

        ARGUMENTS: tuple[Arg, ...]
        handle: Callable[[argparse.Namespace], int]


COMMANDS = {
    "run": "start a session: shellper run NAME [options] -- COMMAND [ARGS...]",
    "ls": "list sessions",
    "attach": "attach this terminal to a session: shellper attach [-c] NAME [-- COMMAND [ARGS...]]",
    "send": "type text into a session",
    "exec": "run a command in a session's shell and wait for it: its output, and its exit status as ours",
    "tail": "print a session's recent output",
    "screen": "print a session's screen as it is now (as tmux capture-pane -p)",
    "signal": "send a signal to the session's child process group",
    "resize": "set the session's terminal size",
    "restart": "run a session's command again (also one that has exited or given up)",
    "stop": "stop a session: its whole process tree, then the shellper",
    "bridge": "connect stdin and stdout to a session's socket, byte for byte (the far end of an ssh channel: "
              "shellper.client.remote)",
    "status": "a session's state, exits and clients",
    "set": "label a session: shellper set NAME KEY=VALUE... (KEY= removes one; ls --where KEY=VALUE finds it)",
    "completions": "print a shell's completion script: shellper completions bash|zsh|fish",
    "man": "show the manual page (its roff source when stdout is not a terminal)",
    "legacy-main": "for a Tower written for the original shellper: start a session from its JSON launch config, "
                   "speaking protocol version 1 (docs/LEGACY.md)",
}
"""Every command, in the order ``shellper --help`` lists them, with the line it shows for each."""


def load(command: str) -> Command:
    """The module of ``command``, one of COMMANDS (KeyError for another word)."""
    if command not in COMMANDS:
        raise KeyError(command)
    module = __import__(f"shellper.cli.commands.{command.replace('-', '_')}", fromlist=("ARGUMENTS",))
    return module  # type: ignore[return-value]  # a module of this package: it holds both
