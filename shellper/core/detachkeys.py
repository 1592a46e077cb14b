"""The detach key read from typed input: it detaches at once, and what was read after it is kept.

A lone detach key detaches the moment it is read; whatever came after it in the same read is returned
too, so it can be given back to the terminal's input (the keys a person typed right after detaching are
meant for the shell the attach returns to). The key doubled within one read (a paste, a script) sends it
through once. An attach nested inside a session uses another key (NESTED_DETACH_KEY): the outer attach
catches its own key first, and waiting to see whether it comes twice would delay every detach.
"""

from __future__ import annotations

from enum import Enum

NESTED_DETACH_KEY = "^]"
"""The detach key of an attach made from inside a session, when no -e chose one (telnet's escape key)."""


class KeysEnd(Enum):
    """What follows the keys to send: more typing, or a detach."""

    TYPING = "typing"
    DETACH = "detach"


def read_keys(data: bytes, key: int | None) -> tuple[bytes, KeysEnd, bytes]:
    """The bytes of ``data`` to send to the session, what follows them, and (on a detach) the bytes read
    after the detach key, which are not the session's."""
    if key is None:
        return data, KeysEnd.TYPING, b""
    out, start = bytearray(), 0
    while True:
        cut = data.find(key, start)
        if cut < 0:
            out += data[start:]
            return bytes(out), KeysEnd.TYPING, b""
        out += data[start:cut]
        if cut + 1 == len(data) or data[cut + 1] != key:
            return bytes(out), KeysEnd.DETACH, data[cut + 1:]
        out.append(key)
        start = cut + 2


def give_back(fd: int, typed: bytes) -> bool:
    """Put ``typed`` back into the input of the terminal ``fd`` (TIOCSTI), for whoever reads it next; False
    where the kernel refuses (dev.tty.legacy_tiocsti off and no CAP_SYS_ADMIN: then they are lost)."""
    import fcntl
    import termios

    try:
        for i in range(len(typed)):
            fcntl.ioctl(fd, termios.TIOCSTI, typed[i:i + 1])
    except OSError:
        return False
    return True
