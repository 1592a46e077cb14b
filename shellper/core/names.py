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


MAX_HOST_LEN = 255
"""The longest host (``user@host`` or ``ssh://user@host:port``) accepted; a DNS name is at most 253."""
_HOST_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_IPV6_CHARS = frozenset("0123456789abcdefABCDEF:.")


class BadHost(ShellperError, ValueError):
    """A host that is not an ssh destination this project passes on: it could be read as an option (``-F
    file``), carries shell syntax (``a$(cmd)``), or is empty or cut (``box:``)."""

    def __init__(self, host: object, reason: str) -> None:
        self.host = host
        self.reason = reason
        shown = repr(host[:80]) + ("..." if len(host) > 80 else "") if isinstance(host, str) else repr(type(host))
        super().__init__(f"invalid host {shown}: {reason}")


def _host_word(word: str, what: str) -> None:
    if not word:
        raise ValueError(f"has no {what}")
    if word[0] in ".-":
        raise ValueError(f"its {what} must not start with {word[0]!r}")
    bad = next((c for c in word if c not in _HOST_CHARS), None)
    if bad is not None:
        raise ValueError(f"its {what} contains {bad!r}; only letters, digits, '.', '_' and '-' are allowed")


def validate_host(host: str) -> str:
    """Return ``host`` if it is an ssh destination shellper passes on: ``[user@]name`` (a host name, an
    address or an alias of ~/.ssh/config) or ``ssh://[user@]name[:port]`` (where ``name`` may also be an
    IPv6 address in brackets). User and name are letters, digits, '.', '_' and '-', not starting with '.'
    or '-'; so nothing ssh could read as an option, no shell syntax, no white space, and no ':' outside the
    ``ssh://`` form (``HOST:NAME`` names a session on HOST). Raises :class:`BadHost`."""
    if not isinstance(host, str):
        raise BadHost(host, "must be a string")
    if len(host) > MAX_HOST_LEN:
        raise BadHost(host, f"is {len(host)} characters; at most {MAX_HOST_LEN} allowed")
    rest, url = (host[len("ssh://"):], True) if host.startswith("ssh://") else (host, False)
    user, at, rest = rest.rpartition("@") if "@" in rest else ("", "", rest)
    try:
        if at:
            _host_word(user, "user")
        port = ""
        if url and rest.startswith("["):
            address, bracket, port = rest[1:].partition("]")
            if not bracket or not address or any(c not in _IPV6_CHARS for c in address) or ":" not in address:
                raise ValueError("its [address] is not an IPv6 address")
            if port and not port.startswith(":"):
                raise ValueError("has something after its [address] that is not :PORT")
            port = port[1:] if port else ""
        else:
            if url:
                rest, colon, port = rest.partition(":")
                if colon and not port:
                    raise ValueError("has a ':' but no port")
            _host_word(rest, "host name")
        if url and port and not (port.isdigit() and port.isascii() and 1 <= int(port) <= 65535):
            raise ValueError(f"its port {port!r:.20} is not a number in 1..65535")
    except ValueError as exc:
        raise BadHost(host, str(exc)) from None
    return host
