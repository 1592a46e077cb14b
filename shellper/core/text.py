"""Terminal output as plain text: escape sequences removed, for ``tail --plain`` and the exit classifier.

One pattern for both, kept as a string: ``re`` compiles it on first use (and caches it), so a process
that never strips anything, a shellper whose child never fails, does not pay for compiling it.
"""

from __future__ import annotations

import re

ESCAPE_SEQUENCE = (
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, to BEL or ST (or to the next ESC, when cut short)
    r"|\x1b[P^_X][^\x1b]*(?:\x1b\\)?"      # DCS, PM, APC, SOS, to ST
    r"|\x1b\[[0-?]*[ -/]*[@-~]"            # CSI
    r"|\x1b[ -/]*[0-~]"                    # two-byte escapes (ESC 7, ESC c, ...) and nF ones (ESC ( B)
)
_ESCAPE_SEQUENCE_BYTES = ESCAPE_SEQUENCE.encode("ascii")


def strip_escapes(text: str) -> str:
    """``text`` without its terminal escape sequences: a TUI's stderr is full of them."""
    return re.sub(ESCAPE_SEQUENCE, "", text)


def strip_ansi(data: bytes) -> bytes:
    """Escape sequences and carriage returns removed; everything else untouched."""
    return re.sub(_ESCAPE_SEQUENCE_BYTES, b"", data).replace(b"\r", b"")


def last_lines(data: bytes, count: int) -> bytes:
    """The last ``count`` lines of ``data``, as tail(1) counts them: a final newline ends the last line, it
    does not start an empty one; all of ``data`` when it has fewer."""
    if count <= 0:
        return b""
    cut = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(count):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            return data
    return data[cut + 1:]
