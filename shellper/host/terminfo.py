"""Which terminal type a new session's program is told it runs in: the user's own, when this machine knows it.

The peers (tmux aside, which has its own) pass the user's ``$TERM`` through; a type without a terminfo entry
here would leave programs unable to draw, so it falls back to the default (shellper.core.defaults).
"""

from __future__ import annotations

import os

from shellper.core.defaults import DEFAULT_TERM

_SYSTEM_DIRS = ("/etc/terminfo", "/lib/terminfo", "/usr/share/terminfo", "/usr/lib/terminfo")


def terminfo_dirs(env: dict[str, str] | os._Environ[str]) -> list[str]:
    """Where ncurses looks, in its order: $TERMINFO, ~/.terminfo, $TERMINFO_DIRS (an empty entry is the
    system's), then the system's directories."""
    dirs = [env["TERMINFO"]] if env.get("TERMINFO") else []
    if env.get("HOME"):
        dirs.append(os.path.join(env["HOME"], ".terminfo"))
    for entry in env.get("TERMINFO_DIRS", "").split(":") if env.get("TERMINFO_DIRS") else ():
        dirs.extend([entry] if entry else _SYSTEM_DIRS)
    dirs.extend(_SYSTEM_DIRS)
    return dirs


def known_terminal(name: str, env: dict[str, str] | os._Environ[str]) -> bool:
    """This machine has a terminfo entry for ``name`` (by its first letter, or its hex code as on macOS)."""
    if not name or "/" in name or name.startswith("."):
        return False
    for directory in terminfo_dirs(env):
        for first in (name[0], f"{ord(name[0]):x}"):
            if os.path.isfile(os.path.join(directory, first, name)):
                return True
    return False


def session_term(env: dict[str, str] | os._Environ[str]) -> str:
    """The user's ``$TERM`` when it is a known type other than ``dumb``; else the default."""
    term = env.get("TERM", "")
    return term if term != "dumb" and known_terminal(term, env) else DEFAULT_TERM
