"""Signal names and numbers, read and written one way everywhere.

``signal_name`` writes what the record, the EXIT frame and the log show ("SIGSEGV", "SIGRTMIN+3", "signal 200");
``signal_number`` reads that back, and the forms people type ("term", "TERM", "SIGTERM", "15").
Which names a SIGNAL frame may carry is the wire's rule (shellper.protocol.wire.SIGNALS).
"""

from __future__ import annotations

import signal


def signal_name(signum: int) -> str:
    """"SIGSEGV" for 11; "SIGRTMIN+3" for real-time signals; "signal 200" if unknown."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        if signal.SIGRTMIN < signum < signal.SIGRTMAX:
            return f"SIGRTMIN+{signum - signal.SIGRTMIN}"
        return f"signal {signum}"


def bare_name(name: str) -> str:
    """A signal name as the wire's SIGNALS list spells it: upper case, no SIG prefix ("sigterm" -> "TERM")."""
    return name.upper().removeprefix("SIG")


def signal_number(name: str) -> int | None:
    """The number a signal name or number means, or None: "15", "term", "SIGTERM", and what
    :func:`signal_name` writes ("SIGRTMIN+3", "signal 32"); white space around it is ignored."""
    text = name.strip()
    if text.startswith("signal "):
        text = text[7:]
    if text.isdigit():
        return int(text)
    bare = bare_name(text)
    if bare.startswith("RTMIN+") and bare[6:].isdigit():
        number = int(signal.SIGRTMIN) + int(bare[6:])
        return number if number < signal.SIGRTMAX else None
    try:
        return int(signal.Signals["SIG" + bare])
    except KeyError:
        return None
