"""Turning terminal output into plain text for ``tail --plain`` and tests."""

from __future__ import annotations

import re

_ANSI = re.compile(
    rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC ... BEL / ST
    rb"|\x1b[P^_X][^\x1b]*\x1b\\"  # DCS, PM, APC, SOS ... ST
    rb"|\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI
    rb"|\x1b[\x20-\x2f]*[\x30-\x7e]"  # two-byte and nF escapes
)


def strip_ansi(data: bytes) -> bytes:
    """Escape sequences and carriage returns removed; everything else untouched."""
    return _ANSI.sub(b"", data).replace(b"\r", b"")
