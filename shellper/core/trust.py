"""Whom a client trusts with a session: the rules, free of I/O, and the errors that refuse.

Where ``$XDG_RUNTIME_DIR`` is unset, the runtime directory is ``/tmp/shellper-UID``, a name another local
user can take first and fill with a socket of their own. A client that connected there would hand that
user a person's terminal (attach passes it over SCM_RIGHTS), their keystrokes, or a SPAWN's environment.
So a client trusts a session socket only when its directory passes the rule ``run`` applies to the
directory it creates (:func:`dir_refusal`: a real directory, ours, no group or other access) and, once
connected, the process serving it is ours (:func:`peer_refusal`, by SO_PEERCRED). The I/O is
:mod:`shellper.host.trust`'s. Here, in core, because the bridge and attach import these without the codec.
"""

from __future__ import annotations

import stat

from shellper.core.errors import ClientError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    import os

DIR_MODE_REFUSED = 0o077
"""Permission bits a runtime directory must not have: ``run`` creates it 0700 and refuses anything more open,
so a client refuses the same (a group-readable one could be entered, a group-writable one filled)."""


def dir_refusal(path: str, mode: int, uid: int, euid: int) -> str | None:
    """Why a runtime directory (lstat's ``mode`` and ``uid``) cannot be trusted by ``euid``, as a clause
    after its path; None if it can."""
    if stat.S_ISLNK(mode):
        return "is a symlink; remove it (shellper never follows a symlinked directory)"
    if not stat.S_ISDIR(mode):
        return "exists but is not a directory"
    if uid != euid:
        return f"is owned by uid {uid}, not by us (uid {euid})"
    perm = stat.S_IMODE(mode)
    if perm & DIR_MODE_REFUSED:
        return f"is group/world accessible (mode {perm:04o}); fix with chmod 700 {path}"
    return None


def peer_refusal(peer_uid: int, euid: int) -> str | None:
    """Why the process serving a session socket (its SO_PEERCRED uid) cannot be trusted by ``euid``; None if
    it can. Only ourselves: root is not accepted either, since no shellper of ours runs as another user
    (protocol/RUNTIME.md, "The runtime directory")."""
    if peer_uid != euid:
        return f"is served by a process of uid {peer_uid}, not by us (uid {euid})"
    return None


class UntrustedSocket(ClientError):
    """A session socket refused before anything was sent to it: its directory is not ours alone, or the
    process serving it is not ours. ``owner`` is the uid found (the directory's or the server's; None when
    not known, as for one refused by a remote bridge) and ``reason`` says why."""

    def __init__(self, path: str | os.PathLike[str], owner: int | None, reason: str) -> None:
        self.owner = owner
        self.reason = reason
        super().__init__(path, f"{UNTRUSTED} {reason}{ADVICE}")


UNTRUSTED = "not trusted:"
"""How an UntrustedSocket's message starts after its path; a remote client finds the bridge's refusal by it."""
ADVICE = ("; another user could have put it there, so nothing was sent to it (use a directory of your own: "
          "--dir, $SHELLPER_DIR or $XDG_RUNTIME_DIR)")
"""How an UntrustedSocket's message ends."""


def untrusted_reason(line: str) -> str | None:
    """The reason in a line that quotes an UntrustedSocket's message (a remote bridge's last words), else None."""
    at = line.find(UNTRUSTED)
    if at < 0:
        return None
    reason = line[at + len(UNTRUSTED):].strip()
    return reason.split(ADVICE.strip(), 1)[0].rstrip("; ") if ADVICE.strip() in reason else reason


class NotASocket(ClientError):
    """Something other than a socket is at the path (a symlink is never connected through)."""
