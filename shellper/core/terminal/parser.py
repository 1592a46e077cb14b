"""The grammar of terminal output (sans-IO): where each escape sequence ends and what it is.

One grammar for every part that reads a program's output: the screen model, the query filter of a replay,
the sanitisers of ``tail --plain`` and of exit reasons. It is the DEC/VT500 state machine's (Paul Williams,
"A parser for DEC's ANSI-compatible video terminals", vt100.net/emu/dec_ansi_parser), written as regular
expressions so that plain text is skipped in C, never by a loop over characters in Python:

- CSI: ``CSI [<=>?] params [intermediates] final``; C0 controls inside it (a BS in ``ESC [ 6 BS n``) are
  executed where they stand and do not end it (so the DSR is still a DSR), nor do they between ESC and
  the byte after it. DEL is ignored. A private marker after the first parameter byte, or a parameter
  byte after an intermediate, makes the sequence one that is ended by its final but never dispatched
  (the diagram's "CSI ignore"). ``:`` is a parameter byte (SGR's sub-parameters), as in every current
  terminal.
- ESC: ``ESC [intermediates] final``; ``ESC [``, ``ESC ]``, ``ESC P``, ``ESC X``, ``ESC ^``, ``ESC _``
  start CSI, OSC, DCS, SOS, PM and APC.
- OSC: to BEL or ST. DCS, SOS, PM, APC: to ST. C0 controls inside them are part of their data (ignored
  by a terminal), except CAN, SUB and ESC.
- Anywhere: CAN and SUB abort what is under way; ESC starts a new sequence; so does a C1 control. A
  string (OSC, DCS, ...) ended so is still dispatched by a terminal (the diagram's exit actions), so its
  data counts as a whole sequence here too, just without a terminator.
- A character above U+009F inside an escape or control sequence (not a string) aborts it and is text:
  no terminal dispatches such a sequence, and text is not swallowed waiting for a final byte.

8-bit C1 controls: the input is text, output decoded as UTF-8, in which C1 controls are the code points
U+0080-U+009F (what UTF-8 terminals such as xterm and VTE obey; 0x9B is CSI, 0x9D OSC, 0x90 DCS, 0x9C ST,
0x98/0x9E/0x9F SOS/PM/APC). Bytes that are not valid UTF-8 are C1 controls too when decoded with
``surrogateescape`` (:func:`decode`): a lone byte 0x80-0x9F becomes U+DC80-U+DC9F, which this grammar
takes for the C1 control of that byte, as a terminal in an 8-bit mode would. Decoded with ``replace``
(as the screen model decodes, a UTF-8 terminal's view) such bytes are U+FFFD, text. Bytes are filtered by
decoding them with ``surrogateescape`` and encoding the result back the same way, which gives back every
byte that was not removed exactly.

The patterns are strings, for the consumers that build their own expression around them (the screen
model adds fast paths for the commonest forms); :data:`TOKEN` is the whole grammar, one token per match.
They are compiled on first use (``re`` keeps them in its cache): a shellper whose child's output is never
read by one of them does not pay for compiling them at start-up.
"""

from __future__ import annotations

import enum
import re

from shellper.core.structs import record

__all__ = ["TOKEN", "Kind", "Sequence", "decode", "encode", "finished", "parse", "unfinished"]

C1 = "\x80-\x9f\udc80-\udc9f"
"""C1 controls: as code points and as undecodable bytes (``surrogateescape``), for a character class."""
STOP = "\x18\x1a\x1b" + C1
"""What ends any sequence or string, for a character class: CAN, SUB, ESC and every C1 control."""
EXECUTED = "\x00-\x17\x19\x1c-\x1f\x7f"
"""C0 controls (and DEL) that a sequence under way executes (ignores) and goes on, for a character class."""
ESC = "\x1b[" + EXECUTED + "]*+"
"""ESC and the C0 controls a terminal executes before the byte that follows it."""

CSI_START = f"(?:{ESC}\\[|[\x9b\udc9b])"
OSC_START = f"(?:{ESC}\\]|[\x9d\udc9d])"
DCS_START = f"(?:{ESC}P|[\x90\udc90])"
SOS_PM_APC_START = f"(?:{ESC}[X^_]|[\x98\x9e\x9f\udc98\udc9e\udc9f])"
ST = f"(?:{ESC}\\\\|[\x9c\udc9c])"

CSI = f"{CSI_START}[{EXECUTED}\x20-\x3f]*+(?P<csi_final>[\x40-\x7e])?"
OSC = f"{OSC_START}[^\x07{STOP}]*+(?P<osc_end>\x07|{ST})?"
DCS = f"{DCS_START}[^{STOP}]*+(?P<dcs_end>{ST})?"
SOS_PM_APC = f"{SOS_PM_APC_START}[^{STOP}]*+(?P<str_end>{ST})?"
ESCAPE = f"{ESC}(?:(?P<esc_final>[\x30-\x4f\x51-\x57\x59\x5a\\\\\x60-\x7e])" \
         f"|[\x20-\x2f][{EXECUTED}\x20-\x2f]*+(?P<esc_final2>[\x30-\x7e])?)?"
CONTROL = f"[\x00-\x1a\x1c-\x1f\x7f{C1}]"
"""One control on its own (C1 ones that start nothing: the starting ones are tried first)."""
TEXT = f"[^\x00-\x1f\x7f{C1}]++"

SEQUENCE = f"{CSI}|{OSC}|{DCS}|{SOS_PM_APC}|{ESCAPE}|(?P<control>{CONTROL})"
"""Any one token that is not text: a sequence (complete, aborted, or cut by the end) or one control."""
TOKEN = f"(?P<text>{TEXT})|{SEQUENCE}"
"""The whole grammar: consecutive matches from 0 cover any text exactly, one token each."""
EXECUTED_CHARS = "".join(map(chr, (*range(0x18), 0x19, *range(0x1C, 0x20), 0x7F)))
_INTRODUCER = f"[\x1b\x90\x98\x9b\x9d\x9e\x9f\udc90\udc98\udc9b\udc9d\udc9e\udc9f][^{STOP}]*+\\Z"
_C0_IN_SEQUENCE = f"[{EXECUTED}]"
_CSI_BODY = "([<=>?]?)([0-9:;]*)([\x20-\x2f]*)"


def decode(data: bytes) -> str:
    """``data`` as text for this grammar: UTF-8, and any byte that is not, kept as U+DC80-U+DCFF."""
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    """The inverse of :func:`decode`."""
    return text.encode("utf-8", "surrogateescape")


class Kind(enum.Enum):
    """What a token is."""

    TEXT = "text"
    CONTROL = "control"
    CSI = "csi"
    ESC = "esc"
    OSC = "osc"
    DCS = "dcs"
    SOS = "sos"
    PM = "pm"
    APC = "apc"


STRINGS = (Kind.OSC, Kind.DCS, Kind.SOS, Kind.PM, Kind.APC)


@record
class Sequence:
    """One token of :data:`TOKEN`, classified."""

    kind: Kind
    complete: bool = True
    """False: aborted (by CAN, SUB, ESC, a C1 control or a character above U+009F) or cut by the end."""
    dispatched: bool = True
    """Whether a terminal acts on it: not on an incomplete CSI or ESC, nor on a CSI the grammar ignores.
    A string is acted on however it ends."""
    private: str = ""
    """A CSI's or DCS's private marker, one of ``<=>?``, or ""."""
    params: str = ""
    intermediates: str = ""
    final: str = ""
    data: str = ""
    """An OSC's, DCS's (after its final), SOS's, PM's or APC's data; a control or text itself."""
    controls: str = ""
    """The C0 controls inside a CSI or ESC, which a terminal executes before it acts on the sequence."""


def finished(m: re.Match[str]) -> bool:
    """Whether the token of a :data:`TOKEN` match has its end (a final byte, a terminator), or needs none."""
    return m.lastgroup is not None  # every named group is a token's end


def hold_back(text: str, most: int) -> tuple[str, str]:
    """``text`` split into what can be used now and the sequence its end cuts short (:func:`unfinished`), to
    be put before the next piece; a cut-short sequence longer than ``most`` is dropped rather than held."""
    cut = unfinished(text)
    if cut < 0:
        return text, ""
    return text[:cut], (text[cut:] if len(text) - cut <= most else "")


def unfinished(text: str) -> int:
    """Where a sequence begins that the end of ``text`` cuts short (more text could change what it is), or
    -1. An ESC at the very end after a string's data leaves the string unfinished (it may start its ST).
    When ``text`` is ASCII (so without C1 controls) this costs one ``rfind``."""
    start = _last_introducer(text, len(text))
    if start < 0:
        return -1
    m = re.compile(TOKEN).match(text, start)
    assert m is not None  # every character starts a token
    if m.end() < len(text) or finished(m):
        return -1
    if start and _kind_of(m.group()) is Kind.ESC:
        prior = _last_introducer(text, start)
        s = re.compile(TOKEN).match(text, prior) if prior >= 0 else None
        if s is not None and s.end() == start and not finished(s) and _kind_of(s.group()) in STRINGS:
            return prior
    return start


def _last_introducer(text: str, end: int) -> int:
    """The last ESC or C1 introducer before ``end`` with nothing that ends a sequence after it, or -1 (for
    ASCII text, simply the last ESC)."""
    if text.isascii():
        return text.rfind("\x1b", 0, end)
    m = re.compile(_INTRODUCER).search(text, 0, end)
    return m.start() if m is not None else -1


_STRING_KINDS = {"]": Kind.OSC, "P": Kind.DCS, "X": Kind.SOS, "^": Kind.PM, "_": Kind.APC}
_C1_KINDS = {"\x9b": Kind.CSI, "\x9d": Kind.OSC, "\x90": Kind.DCS, "\x98": Kind.SOS, "\x9e": Kind.PM,
             "\x9f": Kind.APC}


def _kind_of(token: str) -> Kind:
    """The kind of a token, from its first characters."""
    first = token[0]
    if first >= "\udc80":  # an undecodable byte: the C1 control of its value
        first = chr(ord(first) - 0xDC00)
    if first in _C1_KINDS:
        return _C1_KINDS[first]
    if first != "\x1b":
        return Kind.CONTROL if first < " " or "\x7f" <= first <= "\x9f" else Kind.TEXT
    second = token[1:].lstrip(EXECUTED_CHARS)[:1]
    if second == "[":
        return Kind.CSI
    return _STRING_KINDS.get(second, Kind.ESC)


def parse(token: str) -> Sequence:
    """Classify one token (the whole of a match of :data:`TOKEN`)."""
    m = re.compile(TOKEN).fullmatch(token)
    if m is None:
        raise ValueError(f"not one token: {token!r}")
    kind = _kind_of(token)
    if kind is Kind.TEXT or kind is Kind.CONTROL:
        return Sequence(kind=kind, data=token)
    complete = finished(m)
    if kind is Kind.ESC:
        controls = "".join(re.compile(_C0_IN_SEQUENCE).findall(token, 1))
        body = re.compile(_C0_IN_SEQUENCE).sub("", token[1:])
        return Sequence(kind=kind, complete=complete, dispatched=complete,
                        intermediates=body[:-1] if complete else body, final=body[-1:] if complete else "",
                        controls=controls)
    if kind is Kind.CSI:
        controls = "".join(re.compile(_C0_IN_SEQUENCE).findall(token, 1)) if token[0] == "\x1b" else ""
        body = re.compile(_C0_IN_SEQUENCE).sub("", token[1:])
        if token[0] == "\x1b":
            body = body[1:]  # the [
        final = body[-1:] if complete else ""
        if complete:
            body = body[:-1]
        shape = re.compile(_CSI_BODY).fullmatch(body)
        if shape is None:  # the diagram's "CSI ignore": it ends, and nothing is done
            return Sequence(kind=kind, complete=complete, dispatched=False, params=body, final=final,
                            controls=controls)
        return Sequence(kind=kind, complete=complete, dispatched=complete, private=shape.group(1),
                        params=shape.group(2), intermediates=shape.group(3), final=final, controls=controls)
    start = re.compile(_STRING_START).match(token)
    assert start is not None
    end = m.group("osc_end") or m.group("dcs_end") or m.group("str_end") or ""
    data = token[start.end():len(token) - len(end)]
    if kind is Kind.DCS:
        header = re.compile(_DCS_HEADER).match(re.compile(_C0_IN_SEQUENCE).sub("", data))
        if header is not None:
            return Sequence(kind=kind, complete=complete, private=header.group(1), params=header.group(2),
                            intermediates=header.group(3), final=header.group(4), data=header.group(5))
    return Sequence(kind=kind, complete=complete, data=data)


_STRING_START = f"{OSC_START}|{DCS_START}|{SOS_PM_APC_START}"
_DCS_HEADER = "(?s)([<=>?]?)([0-9;]*)([\x20-\x2f]*)([\x40-\x7e])(.*)"
