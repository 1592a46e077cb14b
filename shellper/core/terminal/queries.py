"""Terminal queries in output: sequences a terminal answers by writing to its input (sans-IO).

Why: replayed output is shown to a terminal a second time. A query in it (a cursor-position
report, device attributes, a colour query, ...) is answered again, and the answer lands in the
session's input as if typed (issue 18, case 5). So a replay is shown with its queries taken out.
Live output keeps them: a program that asks waits for the answer. A clipboard write (OSC 52) is
taken out too: replayed, it would set the clipboard again, long after the program did, from output
a person may only be scrolling through.

Sequences are found by the grammar the screen model reads (:mod:`shellper.core.terminal.parser`): 8-bit C1
forms (``U+009B 6 n``, a lone byte 0x9B) and C0 controls inside a sequence (``ESC [ 6 BS n``, a DSR
to a VT500-style parser) included. A query taken out leaves the C0 controls it carried, which a
terminal executes anyway; ENQ (answerback) is taken out wherever it is.

Recognised (xterm's ctlseqs): DSR/CPR ``CSI [?] Ps n``, DA1/DA2/DA3 ``CSI [>=] Ps c``, DECID
``ESC Z`` (and its 8-bit form 0x9A), DECRQM ``CSI [?] Ps $ p``, XTVERSION ``CSI > Ps q``,
XTWINOPS reports ``CSI Ps t`` (11, 13-21), DECREQTPARM ``CSI Ps x``, XTQMODKEYS ``CSI ? Ps m``,
the kitty keyboard query ``CSI ? u``, DECRQPSR/DECRQTSR/DECRQUPSS/DECRQCRA, XTSMGRAPHICS
``CSI ? Ps ; Ps ; Ps S``, DECRQSS and XTGETTCAP ``DCS $ q``/``DCS + q``, OSC queries (a ``?``
field: colours 4/10-19/104.., fonts 50), every OSC 52 (clipboard reads and writes), iTerm2's
``OSC 1337 ; Report...``, the kitty graphics query (``APC G a=q``) and ENQ. A query cut by the end
of the data is kept: half a sequence is not answered.
"""

from __future__ import annotations

import re

from shellper.core.terminal import parser as vtparse

__all__ = ["is_query", "strip_queries"]

_CANDIDATE = vtparse.pattern(
    # Only what may be a query is matched (and looked at in Python): a CSI with a private marker or an
    # intermediate, or with one of the finals of a query; every string; ESC Z; the 8-bit DECID. Ordinary
    # CSIs (SGR, cursor moves, erases) fail at their final in C.
    csi_finals="nctx", marked_csi_finals="".join(map(chr, range(0x40, 0x7F))), esc_finals="Z", strings=True,
    controls="\x9a")
_XTWINOPS_REPORTS = frozenset(("11", "13", "14", "15", "16", "17", "18", "19", "20", "21"))
_OSC_FIELDS_BEFORE_QUERY = re.compile(r"(?:[0-9]*;)+\?(?:;|\Z)")


def is_query(seq: vtparse.Sequence) -> bool:
    """Whether a terminal answers ``seq`` (or, for OSC 52, writes the clipboard)."""
    kind = seq.kind
    if kind is vtparse.Kind.CSI:
        if not seq.dispatched:
            return False
        p, params, inter, final = seq.private, seq.params, seq.intermediates, seq.final
        if inter:
            return ((inter == "$" and final in "pwu" and p in ("", "?")) or (inter == "&" and final == "u")
                    or (inter == "*" and final == "y"))
        if final == "n":
            return p in ("", "?")  # not CSI > Ps n: XTMODKEYS reset
        if final == "c":
            return p in ("", ">", "=")
        if final == "q":
            return p == ">"
        if final == "t":
            return p == "" and params.split(";", 1)[0] in _XTWINOPS_REPORTS
        if final == "x":
            return p == "" and params in ("", "0", "1")
        if final in "mS":
            return p == "?"
        if final == "u":
            return p == "?" and params == ""
        return False
    if kind is vtparse.Kind.ESC:
        return seq.dispatched and seq.final == "Z" and not seq.intermediates
    if kind is vtparse.Kind.CONTROL:
        return seq.data in ("\x9a", "\udc9a")  # DECID's 8-bit form
    if kind is vtparse.Kind.OSC:
        data = seq.data
        return (data.startswith("52;") or data == "52" or data.startswith("1337;Report")
                or _OSC_FIELDS_BEFORE_QUERY.match(data) is not None)
    if kind is vtparse.Kind.DCS:
        return seq.final == "q" and seq.intermediates in ("$", "+")
    if kind is vtparse.Kind.APC:
        data = seq.data
        return data.startswith("G") and "a=q" in data.partition(";")[0]
    return False


def _keep_or_drop(m: re.Match[str]) -> str:
    token = m.group()
    seq = vtparse.parse(token)
    if not seq.complete and m.end() == len(m.string):
        return token  # cut by the end: half a sequence is not answered
    if is_query(seq):
        return seq.controls.replace("\x7f", "")
    return token


def strip_queries(data: bytes) -> bytes:
    """``data`` without the queries in it (the same object when it has none of the characters that start
    one: the common case costs a check for non-ASCII and two searches)."""
    if b"\x1b" not in data and b"\x05" not in data and data.isascii():
        return data
    text = vtparse.decode(data)
    out = re.sub(_CANDIDATE, _keep_or_drop, text).replace("\x05", "")
    return vtparse.encode(out)
