"""Terminal queries in output: sequences a terminal answers by writing to its input (sans-IO).

Why: replayed output is shown to a terminal a second time. A query in it (a cursor-position
report, device attributes, a colour query, ...) is answered again, and the answer lands in the
session's input as if typed (issue 18, case 5). So a replay is shown with its queries taken out.
Live output keeps them: a program that asks waits for the answer.

Recognised (xterm's ctlseqs): DSR/CPR ``CSI [?] Ps n``, DA1/DA2/DA3 ``CSI [>=] Ps c``, DECRQM
``CSI [?] Ps $ p``, XTVERSION ``CSI > Ps q``, XTWINOPS reports ``CSI Ps t`` (11, 13-21),
DECREQTPARM ``CSI Ps x``, XTQMODKEYS ``CSI ? Ps m``, the kitty keyboard query ``CSI ? u``,
DECRQPSR/DECRQTSR/DECRQUPSS/DECRQCRA, XTSMGRAPHICS ``CSI ? Ps ; Ps ; Ps S``, DECRQSS and
XTGETTCAP ``DCS $ q``/``DCS + q``, OSC queries (a ``?`` field: colours 4/10-19/104.., OSC 52
clipboard reads), the kitty graphics query (``APC G a=q``) and ENQ. A query cut by the end of
the data is kept: half a sequence is not answered.
"""

from __future__ import annotations

import re

__all__ = ["strip_queries"]

_CSI_QUERY = (  # after ESC [; the lookahead: the common CSIs (cursor moves, SGR, erases) fail at once
    rb"\[(?=[?>=&]|[0-9;]*+[nctx$*])(?:"
    rb"\??[0-9;]*n"  # DSR, CPR, DECXCPR, the private status reports (not CSI > Ps n: XTMODKEYS reset)
    rb"|[>=]?[0-9;]*c"  # DA1, DA2, DA3
    rb"|\??[0-9;]*\$p"  # DECRQM, ANSI and DEC private
    rb"|>[0-9;]*q"  # XTVERSION
    rb"|(?:1[13-9]|2[01])(?:;[0-9;]*)?t"  # XTWINOPS reports: state, position, size, title
    rb"|[01]?x"  # DECREQTPARM
    rb"|\?[0-9;]*m"  # XTQMODKEYS
    rb"|\?u"  # kitty keyboard flags
    rb"|[0-9;]*\$[wu]|&u|[0-9;]*\*y"  # DECRQPSR, DECRQTSR, DECRQUPSS, DECRQCRA
    rb"|\?[0-9;]*S"  # XTSMGRAPHICS
    rb")"
)
# Every string sequence is matched whole (so a query-like text inside one is left alone); a match in the
# group is a query, any other is kept as it is. One ESC, then a branch on the byte after it: the scan finds
# each ESC with a fast search and most sequences fail on their second byte.
_RE = re.compile(
    rb"\x1b(?:(" + _CSI_QUERY
    + rb"|\](?:[0-9]*;)+\?(?:;[^\x07\x1b]*)?(?:\x07|\x1b\\)"  # an OSC query: a field that is ?
    rb"|\]52;[^;\x07\x1b]*;\?(?:\x07|\x1b\\)"  # OSC 52 clipboard read
    rb"|P[$+]q[^\x1b\x07]*(?:\x1b\\|\x07)"  # DECRQSS, XTGETTCAP
    rb"|_G[^\x1b;]*a=q[^\x1b]*\x1b\\"  # kitty graphics query
    rb")|[\]P_^X][^\x07\x1b]*(?:\x07|\x1b\\)?)"  # any other string sequence
    rb"|(\x05)"  # ENQ
)


def _keep_or_drop(m: re.Match[bytes]) -> bytes:
    return b"" if m.lastindex else m.group()


def strip_queries(data: bytes) -> bytes:
    """``data`` without the queries in it (the same object when it has none: the common case costs one
    search for ESC and ENQ)."""
    if b"\x1b" not in data and b"\x05" not in data:
        return data
    return _RE.sub(_keep_or_drop, data)
