"""The detach key read from typed input, where typing it twice sends it through.

Why twice: attached from inside a session that is itself attached (nested), the outer attach catches the
detach key first. Typed twice in quick succession, the outer one sends it on once, and the inner attach
(or the program) gets it. So a detach key that ends a read is not acted on at once: the reader waits up
to DOUBLE_KEY_WINDOW for a second one, and detaches when none comes.
"""

from __future__ import annotations

from enum import Enum

DOUBLE_KEY_WINDOW = 0.4
"""Seconds a detach key that ended a read waits for its double before it detaches (a double-click's span)."""


class KeysEnd(Enum):
    """What follows the keys to send: more typing, a detach key waiting for its double, or a detach."""

    TYPING = "typing"
    PENDING = "pending"
    DETACH = "detach"


def read_keys(data: bytes, key: int | None, pending: bool) -> tuple[bytes, KeysEnd]:
    """The bytes of ``data`` to send to the session, and what follows them.

    ``pending``: the previous read ended with a lone detach key. A doubled key is sent once; a lone key
    followed by anything else (or by nothing, an end of input) detaches, dropping what follows it.
    """
    if key is None:
        return data, KeysEnd.TYPING
    if pending:
        if data[:1] != bytes((key,)):
            return b"", KeysEnd.DETACH
        out, start = bytearray((key,)), 1
    else:
        out, start = bytearray(), 0
    while True:
        cut = data.find(key, start)
        if cut < 0:
            out += data[start:]
            return bytes(out), KeysEnd.TYPING
        out += data[start:cut]
        if cut + 1 == len(data):
            return bytes(out), KeysEnd.PENDING
        if data[cut + 1] != key:
            return bytes(out), KeysEnd.DETACH
        out.append(key)
        start = cut + 2
