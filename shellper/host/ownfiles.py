"""Whether the files found under a session name are that session's own, before anything is signalled for them.

A record copied under another name (``cp keep.json copy.json``), or a lock and socket hard-linked there,
verify as the session they came from: its pid carries the recorded start ticks, its socket answers, it
serves the recorded socket or sits in the recorded cgroup. Acting on them for the other name would end
that session. A shellper creates each of its files with one link, names itself in its record and WELCOME,
and records its own socket path, so :func:`mismatch` (pure) checks exactly that; tower_client's reconcile
and ``reap`` judge their observations with it, and ``shellper stop`` judges what it finds with
:func:`not_own`, which also refuses a record whose shellper is proven to be another session's.
"""

from __future__ import annotations

import os

from shellper.core.names import SOCKET_SUFFIX
from shellper.host.paths import SessionPaths
from shellper.host.record import SessionRecord
from shellper.host.shellpers import live_shellpers

__all__ = ["hard_linked", "is_this_socket", "mismatch", "not_own"]


def mismatch(name: str, record: SessionRecord | None, *, record_socket_ok: bool | None = None,
             welcome_name: str | None = None, hard_linked: frozenset[str] = frozenset(),
             where: str | None = None) -> str | None:
    """Why the files under ``name`` are not that session's own, or None if nothing says so. Pure.

    ``record_socket_ok``: the record's socket is this name's socket path (None: not checked);
    ``welcome_name``: the name the socket answered with (None: it did not answer); ``hard_linked``: which
    of sock, json, lock have more than one link; ``where``: the runtime directory, for the message."""
    if record is not None and record.name != name:
        return f"the record names session {record.name!r}"
    if record_socket_ok is False and record is not None:
        return f"the record's socket {record.socket!r} is not {name}{SOCKET_SUFFIX} in {where or 'this directory'}"
    if welcome_name is not None and welcome_name != name:
        return f"the socket answers as session {welcome_name!r}"
    if hard_linked:
        return f"{', '.join(f'{name}.{kind}' for kind in sorted(hard_linked))} has more than one link"
    return None


def hard_linked(paths: SessionPaths) -> frozenset[str]:
    """Which of the socket, record and lock have other links: a shellper creates each with one."""
    linked = set()
    for kind, path in (("sock", paths.socket), ("json", paths.record), ("lock", paths.lock)):
        try:
            if os.lstat(path).st_nlink != 1:
                linked.add(kind)
        except OSError:
            continue
    return frozenset(linked)


def is_this_socket(recorded: str, paths: SessionPaths) -> bool:
    """The record's socket path is this name's: the same text, or the same file name in the same
    directory spelled another way (a symlinked parent)."""
    if recorded == paths.socket:
        return True
    if os.path.basename(recorded) != os.path.basename(paths.socket):
        return False
    try:
        return os.path.samestat(os.stat(os.path.dirname(recorded)), os.stat(paths.dir))
    except (OSError, ValueError):
        return False


def not_own(paths: SessionPaths, record: SessionRecord, welcome_name: str | None = None) -> str | None:
    """Why ``record``, read at ``paths.record``, is not to be acted on for ``paths.name`` (None if it may):
    :func:`mismatch` of what is on disk, or its shellper is proven live as another session (it holds the
    lock that session's record names it by; :func:`shellper.host.shellpers.live_shellpers`), which a
    copy with its name and socket edited would otherwise pass for in its cgroup."""
    why = mismatch(paths.name, record, record_socket_ok=is_this_socket(record.socket, paths),
                   welcome_name=welcome_name, hard_linked=hard_linked(paths), where=paths.dir)
    if why is not None:
        return why
    here = os.path.realpath(paths.dir)
    for pid, other in live_shellpers().items():
        if pid != record.shellper_pid and other.instance_id != record.instance_id:
            continue
        there = os.path.dirname(other.socket)
        if other.name != paths.name or os.path.realpath(there) != here:
            return (f"pid {pid} (instance {other.instance_id}) is the live shellper of session {other.name!r} "
                    f"in {there}")
    return None
