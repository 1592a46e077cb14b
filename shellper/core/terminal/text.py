"""What a program wrote, made fit for the place a person reads it (sans-IO).

Whatever a program wrote reaches a person only through the sanitiser for its place:

- plain text (``tail --plain``, the exit classifier that makes exit reasons): :func:`strip_escapes`
  and :func:`strip_ansi`, every escape sequence and control removed but the few the place allows, by the
  grammar the screen model reads (:mod:`shellper.core.terminal.parser`), so they agree on where each sequence
  ends, C1 (8-bit) forms and C0 controls inside a sequence included;
- a table cell or one line of a log or of ``status`` (a command line, a directory, an owner, a reason
  read from a record): :func:`printable`, every character that is not printable shown as its escape, so
  what is there can be seen and nothing in it acts on the terminal;
- a replay: :mod:`shellper.core.terminal.queries`.

The patterns are strings: ``re`` compiles each on first use (and caches it), so a process that never
strips anything, a shellper whose child never fails, does not pay for compiling them.
"""

from __future__ import annotations

import re

PLAIN_CARRY_MAX = 4096
"""Longest unfinished escape sequence :class:`PlainStream` holds back for the next piece; a longer one (a
huge OSC cut by a piece's end) is dropped."""


_PATTERNS: dict[str, str] = {}
"""The stripping pattern for each ``keep`` asked for (built once: the grammar's pieces cost to join)."""


def _pattern(keep: str) -> str:
    if keep in _PATTERNS:
        return _PATTERNS[keep]
    from shellper.core.terminal import (
        parser as vtparse,  # here: a shellper imports this module at start, and may never strip
    )

    controls = "".join(c for c in map(chr, range(0x20)) if c not in keep and c != "\x1b")
    found = _PATTERNS[keep] = vtparse.pattern(sequences=True, controls=controls + "".join(map(chr, range(0x7F, 0xA0))))
    return found


def strip_escapes(text: str, keep: str = "\t\n\r") -> str:
    """``text`` without its escape sequences (whole, with any controls inside them) and without the control
    characters, C0 and C1, that are not in ``keep``: a TUI's stderr is full of them."""
    return re.sub(_pattern(keep), "", text)


def strip_ansi(data: bytes) -> bytes:
    """Output bytes as plain text lines: escape sequences and every control but line feeds and tabs removed
    (carriage returns, BEL, BS, C1 ones); any other byte, even one that is not UTF-8, is kept."""
    from shellper.core.terminal import parser as vtparse

    return vtparse.encode(strip_escapes(vtparse.decode(data), "\t\n"))


class PlainStream:
    """:func:`strip_ansi` over output that comes in pieces: a sequence cut by a piece's end is held back and
    read with the next piece, so its second half is not shown as text."""

    def __init__(self) -> None:
        import codecs

        self._carry = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")  # a character cut: held too

    def feed(self, data: bytes) -> bytes:
        from shellper.core.terminal import parser as vtparse

        text, self._carry = vtparse.hold_back(self._carry + self._decoder.decode(data), PLAIN_CARRY_MAX)
        return vtparse.encode(strip_escapes(text, "\t\n"))


def printable(text: str) -> str:
    """``text`` for one line of a table or a log: a character that is not printable (a control, a line
    break, a lone surrogate, a bidirectional override) as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


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


__all__ = ["PlainStream", "last_lines", "printable", "strip_ansi", "strip_escapes"]
