"""What a session's program is doing, seen from /proc on its own host: its argv as it is now (after an
``exec bash``), what holds its terminal's foreground (``shellper exec`` types only into a shell at its
prompt), and the directory it is in (``ls -l``, ``status``: the shellper asks)."""

from __future__ import annotations

import os

from shellper.core.structs import record
from shellper.host.identity import IdentityUnreadable, boot_id, cmdline


@record(frozen=True)
class Foreground:
    """The process group holding the terminal's foreground, other than the shell's own: ``pid`` its leader,
    ``name`` that process's name (``?`` when it is gone)."""

    pid: int
    name: str


def here(shellper_boot_id: str, shellper_pid: int, peer_pid: int | None) -> bool:
    """Whether a shellper that said it is ``shellper_pid`` of boot ``shellper_boot_id`` runs on this host and
    in this pid namespace: then /proc here shows its processes. ``peer_pid``: the socket's other end
    (SO_PEERCRED), None through ssh."""
    try:
        return peer_pid is not None and peer_pid == shellper_pid and boot_id() == shellper_boot_id
    except IdentityUnreadable:
        return False


def program_argv(pid: int) -> list[str] | None:
    """``pid``'s argv now; None if it is gone or unreadable."""
    try:
        argv = cmdline(pid)
    except IdentityUnreadable:
        return None
    return argv or None


def _stat_fields(pid: int) -> tuple[str, list[str]] | None:
    """``pid``'s name and the fields of /proc/PID/stat after it (field 3 first); None if gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    text = data.decode("utf-8", "surrogateescape")
    open_paren, close_paren = text.find("("), text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        return None
    return text[open_paren + 1:close_paren], text[close_paren + 1:].split()


def foreground(pid: int) -> Foreground | None:
    """What runs in the foreground of the terminal of shell ``pid`` instead of it; None when the shell holds
    it (at its prompt), or when that cannot be told (gone, unreadable, no terminal)."""
    found = _stat_fields(pid)
    if found is None:
        return None
    _, fields = found
    try:
        pgrp, tpgid = int(fields[2]), int(fields[5])  # stat fields 5 and 8
    except (IndexError, ValueError):
        return None
    if tpgid <= 0 or tpgid == pgrp:
        return None
    leader = _stat_fields(tpgid)
    return Foreground(tpgid, leader[0] if leader is not None else "?")


def foreground_cwd(child_pid: int, master_fd: int) -> str | None:
    """The directory of the PTY's foreground process group leader (the program a person is running, else the
    shell), else of the child itself, taken only from a process verifiably in the session: its session id is
    the child's, the child leading the PTY's session (a pid used again by another is not read). None when
    neither can be read (gone, another user's)."""
    try:
        leader = os.tcgetpgrp(master_fd)
    except OSError:
        leader = child_pid
    for pid in dict.fromkeys((leader, child_pid)):
        try:
            if os.getsid(pid) != child_pid:
                continue
            path = os.readlink(f"/proc/{pid}/cwd")
            if os.getsid(pid) == child_pid:  # and still: the pid was not used again meanwhile
                return path
        except OSError:
            continue
    return None
