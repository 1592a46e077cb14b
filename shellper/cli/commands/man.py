"""``shellper man``: the manual page, shown by man(1) on a terminal, else printed as roff (to install it:
``shellper man > ~/.local/share/man/man1/shellper.1``)."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import argparse

ARGUMENTS = ()


def handle(args: argparse.Namespace) -> int:
    import os
    import shutil
    import sys

    from shellper.cli.share import read_shared, shared_path

    man = shutil.which("man")
    if sys.stdout.isatty() and man is not None:
        sys.stdout.flush()
        os.execv(man, [man, "-l", shared_path("shellper.1")])
    sys.stdout.write(read_shared("shellper.1"))
    return 0
