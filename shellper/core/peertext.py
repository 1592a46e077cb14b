"""Quoting what a peer sent, for a log line or an error reply: bounded, so a peer cannot fill a log.

A client's strings (a version-1 ``clientType``, a version-3 ``role``) are quoted in the session's log and
echoed in ERROR frames. Quoted whole, two frames of a few MiB each would push everything else out of
``NAME.log`` and ``NAME.log.1`` (shellper.host.logfile rotates at a size). ``repr`` already turns control
characters into escapes; this only cuts it short and says how long the original was.
"""

from __future__ import annotations

PEER_QUOTE_CHARS = 80
"""At most this many characters of a peer's string are quoted (protocol/PROTOCOL.md, section 11)."""


def quote_peer(value: object, limit: int = PEER_QUOTE_CHARS) -> str:
    """``repr(value)`` for a log or an error reply, of at most ``limit`` of its characters (or bytes), with
    "... (N chars)" after a longer one; a container or another object is named by its type and size,
    never expanded."""
    if isinstance(value, str | bytes):
        if len(value) <= limit:
            return repr(value)
        unit = "chars" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}... ({len(value)} {unit})"
    if value is None or isinstance(value, bool | float):
        return repr(value)
    if isinstance(value, int):  # a huge int's repr is slow, or refused past sys.get_int_max_str_digits()
        return repr(value) if -10**limit < value < 10**limit else f"<int of {value.bit_length()} bits>"
    size = f" of {len(value)}" if isinstance(value, list | dict | tuple) else ""
    return f"<{type(value).__name__}{size}>"
