"""The trust rules of shellper.core.trust as tables: which runtime directories and which servers a client
trusts (the same rule ``run`` applies to the directory it creates), and how a refusal reads."""

from __future__ import annotations

import stat

import pytest

from shellper.core.errors import ClientError, ShellperError
from shellper.core.trust import UntrustedSocket, dir_refusal, peer_refusal, untrusted_reason

ME = 1000
DIR = stat.S_IFDIR


@pytest.mark.parametrize(("mode", "uid", "refused"), [
    (DIR | 0o700, ME, None),
    (DIR | 0o500, ME, None),  # read-only to us: nobody else can plant anything
    (DIR | 0o710, ME, "is group/world accessible (mode 0710)"),
    (DIR | 0o750, ME, "is group/world accessible (mode 0750)"),
    (DIR | 0o770, ME, "is group/world accessible (mode 0770)"),
    (DIR | 0o701, ME, "is group/world accessible (mode 0701)"),
    (DIR | 0o1777, ME, "is group/world accessible (mode 1777)"),  # /tmp's mode: anyone plants a socket
    (DIR | 0o2700, ME, None),  # setgid alone opens nothing
    (DIR | 0o700, 0, "is owned by uid 0, not by us (uid 1000)"),  # root's: not ours either
    (DIR | 0o700, 65534, "is owned by uid 65534, not by us (uid 1000)"),
    (stat.S_IFLNK | 0o777, ME, "is a symlink"),
    (stat.S_IFLNK | 0o777, 65534, "is a symlink"),  # a symlink is refused whoever owns it
    (stat.S_IFREG | 0o600, ME, "exists but is not a directory"),
    (stat.S_IFSOCK | 0o600, ME, "exists but is not a directory"),
])
def test_which_directories_a_client_trusts(mode: int, uid: int, refused: str | None) -> None:
    why = dir_refusal("/tmp/shellper-1000", mode, uid, ME)
    if refused is None:
        assert why is None
    else:
        assert why is not None and why.startswith(refused), why


@pytest.mark.parametrize(("peer", "me", "ok"), [
    (1000, 1000, True),
    (0, 1000, False),  # root serving our socket: no documented case needs it
    (65534, 1000, False),
    (0, 0, True),
    (65534, 0, False),  # root too trusts only its own servers
])
def test_which_servers_a_client_trusts(peer: int, me: int, ok: bool) -> None:
    why = peer_refusal(peer, me)
    assert (why is None) is ok
    if not ok:
        assert why == f"is served by a process of uid {peer}, not by us (uid {me})"


def test_the_refusal_names_the_path_the_owner_and_why_and_is_a_client_error() -> None:
    exc = UntrustedSocket("/tmp/shellper-0/w.sock", 65534, "its directory /tmp/shellper-0 is owned by uid 65534")
    assert isinstance(exc, ClientError) and isinstance(exc, ShellperError)
    assert (exc.path, exc.owner) == ("/tmp/shellper-0/w.sock", 65534)
    text = str(exc)
    assert text.startswith("/tmp/shellper-0/w.sock: not trusted: its directory /tmp/shellper-0 is owned by uid 65534;")
    assert "nothing was sent" in text


@pytest.mark.parametrize(("line", "reason"), [
    (f"shellper: session 'w': {UntrustedSocket('/d/w.sock', 5, 'its directory /d is a symlink')}",
     "its directory /d is a symlink"),
    ("shellper: session 'w': /d/w.sock: not trusted: it is served by a process of uid 5, not by us (uid 0)",
     "it is served by a process of uid 5, not by us (uid 0)"),
    ("shellper: session 'w': /d/w.sock: no such session socket", None),
    ("", None),
])
def test_a_remote_bridges_refusal_is_read_back(line: str, reason: str | None) -> None:
    assert untrusted_reason(line) == reason
