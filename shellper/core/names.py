"""Session names, what a session's files are called, and where the runtime directory is, as plain strings.

Apart from :mod:`shellper.host.paths` (which checks and creates the directory and the files) because
``shellper attach`` needs only these answers, and what that module imports would delay every attach.
"""

from __future__ import annotations

import os

from shellper.core.errors import ShellperError

MAX_NAME_LEN = 64
SOCKET_SUFFIX = ".sock"
RECORD_SUFFIX = ".json"
LOCK_SUFFIX = ".lock"
LOG_SUFFIX = ".log"
"""A session's files are its name plus one of these suffixes, in the runtime directory."""
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


class PathError(ShellperError):
    """Base class for runtime-directory and session-path failures."""


class BadName(PathError, ValueError):
    """A session name that could escape the directory, hide as a dotfile, or look like an option."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"invalid session name {name!r}: {reason}")


def validate_name(name: str) -> str:
    """Return ``name`` if it is a safe session name: 1-64 of [A-Za-z0-9._-], not starting with '.' or '-'."""
    if not isinstance(name, str):
        raise BadName(repr(name), "must be a string")
    if not name:
        raise BadName(name, "is empty")
    if len(name) > MAX_NAME_LEN:
        raise BadName(name, f"is {len(name)} characters; at most {MAX_NAME_LEN} allowed")
    if name[0] in ".-":
        raise BadName(name, f"must not start with {name[0]!r}")
    bad = next((c for c in name if c not in _NAME_CHARS), None)
    if bad is not None:
        raise BadName(name, f"contains {bad!r}; only letters, digits, '.', '_' and '-' are allowed")
    return name


def runtime_dir_name(explicit: str | os.PathLike[str] | None = None) -> str:
    """The runtime directory: --dir, else $SHELLPER_DIR, else $XDG_RUNTIME_DIR/shellper, else /tmp.

    Empty environment values count as unset, and so does an $XDG_RUNTIME_DIR that names no directory: the
    XDG spec has a program fall back (and warn: :func:`missing_xdg_runtime_dir`), not create it, since the
    login manager makes it with its owner, mode and lifetime. Relative paths are made absolute now, so a
    later chdir cannot move the sessions.
    """
    if explicit is not None and os.fspath(explicit) != "":
        return os.path.abspath(os.fspath(explicit))
    env = os.environ.get("SHELLPER_DIR")
    if env:
        return os.path.abspath(env)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return os.path.join(os.path.abspath(xdg), "shellper")
    return f"/tmp/shellper-{os.geteuid()}"


def missing_xdg_runtime_dir(explicit: str | os.PathLike[str] | None = None) -> str | None:
    """$XDG_RUNTIME_DIR when :func:`runtime_dir_name` fell back from it (set, but no directory), else None."""
    if (explicit is not None and os.fspath(explicit) != "") or os.environ.get("SHELLPER_DIR"):
        return None
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    return xdg if xdg and not os.path.isdir(xdg) else None


def socket_path(directory: str, name: str) -> str:
    """Where session ``name``'s socket is in ``directory`` (neither checked: see shellper.host.paths)."""
    return os.path.join(directory, name + SOCKET_SUFFIX)
