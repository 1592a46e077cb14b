"""``shellper completions bash|zsh|fish``: print the shell's completion script (shellper/share, made by
tools/completions.py at build time: its generators are no runtime dependency)."""

from __future__ import annotations

from shellper.cli.options import Positional

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

SCRIPTS = {"bash": "shellper.bash", "zsh": "_shellper", "fish": "shellper.fish"}
"""Each shell's script, by the name its completion directory expects (tools/completions.py FILES)."""


def _shell(text: str) -> str:
    if text not in SCRIPTS:
        import argparse  # loaded by then: only argparse calls a value type

        raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(SCRIPTS)}")
    return text


ARGUMENTS = (
    Positional("shell", type=_shell, metavar="SHELL",
               help="bash, zsh or fish. bash: eval \"$(shellper completions bash)\" in ~/.bashrc; zsh: write it to "
                    "_shellper in a directory of $fpath; fish: to ~/.config/fish/completions/shellper.fish"),
)


def handle(args: argparse.Namespace) -> int:
    import sys

    from shellper.cli.share import read_shared

    sys.stdout.write(read_shared(SCRIPTS[args.shell]))
    return 0
