"""Make the shell completions and the man page that ship in the package (shellper/share), and tower-client's.

Build-time only: shtab and argparse-manpage (the ``build`` extra) are not runtime dependencies, so the files
are made here, committed, and ``shellper completions SHELL`` and ``shellper man`` only print them.
tests/test_completions.py holds the shipped files equal to what this makes. Usage:

    python tools/completions.py SHARE_DIR [BUILD_DIR]

SHARE_DIR gets shellper's files (shellper/share in the checkout); BUILD_DIR, if given, tower-client's.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import shtab
from argparse_manpage.manpage import Manpage

NO_NAME_COMPLETION = ("run", "legacy-main", "bridge")
"""Commands whose NAME is a new session's (run) or a program's: no existing name to complete."""

BASH_NAMES = r"""
# Session names: `shellper ls --names` (hidden, no session is asked anything), and for HOST:NAME the host's own.
_shellper_names() {
  local word="$1" host
  if [[ "$word" == *:* ]]; then
    host="${word%%:*}"
    compgen -W "$(shellper --host "$host" ls --names 2>/dev/null | sed "s|^|$host:|")" -- "$word"
  else
    compgen -W "$(shellper ls --names 2>/dev/null)" -- "$word"
  fi
}
"""

BASH_WRAPPER = r"""
# bash splits HOST:NAME at the colon ($COMP_WORDBREAKS): the words are read again, split at blanks only, and
# what is offered loses the part before the colon again, which bash keeps on the line.
_shellper_complete() {
  local line="${COMP_LINE:0:COMP_POINT}" i
  local -a COMP_WORDS
  read -ra COMP_WORDS <<< "$line"
  [[ "$line" =~ [[:space:]]$ || ${#COMP_WORDS[@]} -eq 0 ]] && COMP_WORDS+=("")
  local COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
  _shtab_shellper "$@"
  local word="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$word" == *:* && "$COMP_WORDBREAKS" == *:* ]]; then
    for i in "${!COMPREPLY[@]}"; do COMPREPLY[i]="${COMPREPLY[i]#"${word%:*}:"}"; done
  fi
}
complete -o filenames -F _shellper_complete shellper
"""

ZSH_NAMES = r"""
# Session names: `shellper ls --names` (hidden, no session is asked anything), and for HOST:NAME the host's own.
_shellper_names() {
  local host
  local -a names
  if compset -P '*:'; then
    host="${IPREFIX%:}"
    names=(${(f)"$(shellper --host "$host" ls --names 2>/dev/null)"})
  else
    names=(${(f)"$(shellper ls --names 2>/dev/null)"})
  fi
  compadd -a names
}
"""

FISH_NAMES = r"""
# Session names: `shellper ls --names` (hidden, no session is asked anything), and for HOST:NAME the host's own.
function __shellper_names
    set -l word (commandline -ct)
    if string match -q -- '*:*' $word
        set -l host (string split -m1 : -- $word)[1]
        shellper --host $host ls --names 2>/dev/null | string replace -r '^' "$host:"
    else
        shellper ls --names 2>/dev/null
    end
end
"""

NAMES = {"bash": "_shellper_names", "zsh": "_shellper_names", "fish": "(__shellper_names)",
         "preamble": {"bash": BASH_NAMES, "zsh": ZSH_NAMES, "fish": FISH_NAMES}}

FILES = {"bash": "shellper.bash", "zsh": "_shellper", "fish": "shellper.fish"}
"""Each shell's file, under the name its completion directory expects."""


def shellper_parser() -> argparse.ArgumentParser:
    """The whole tree, every existing session's NAME completing to the names there are."""
    from shellper.cli.argtree import build

    parser = build()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, child in sub.choices.items():
        if command in NO_NAME_COMPLETION:
            continue
        for action in child._actions:
            if action.dest == "name":
                action.complete = NAMES  # type: ignore[attr-defined]  # shtab reads it
    return parser


def completion(shell: str) -> str:
    text = shtab.complete(shellper_parser(), shell=shell)
    return text + BASH_WRAPPER if shell == "bash" else text


def man_page(parser: argparse.ArgumentParser, description: str) -> str:
    from shellper import __version__

    # no date: the page is committed, and would otherwise change every day it is made again
    page = Manpage(parser, _data={"project_name": "shellper", "version": __version__, "description": description,
                                  "manual_title": "shellper manual", "date": " "})
    return str(page)


def shellper_files() -> dict[str, str]:
    files = {FILES[shell]: completion(shell) for shell in FILES}
    files["shellper.1"] = man_page(shellper_parser(), "keep a terminal session alive in a process of its own")
    return files


def tower_client_files() -> dict[str, str]:
    from tower_client.cli import _parser

    names = {"bash": "tower-client.bash", "zsh": "_tower-client", "fish": "tower-client.fish"}
    files = {name: shtab.complete(_parser(), shell=shell) for shell, name in names.items()}
    files["tower-client.1"] = man_page(_parser(), "adopt or terminate shellper sessions")
    return files


def main(argv: list[str]) -> int:
    os.environ["COLUMNS"] = "80"  # the help the man page wraps: the same wherever it is made
    os.environ.pop("SOURCE_DATE_EPOCH", None)
    targets = [(Path(argv[0]), shellper_files)]
    if len(argv) > 1:
        targets.append((Path(argv[1]), tower_client_files))
    for directory, make in targets:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in make().items():
            (directory / name).write_text(text if text.endswith("\n") else text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
