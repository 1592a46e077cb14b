"""shellper.core.terminal.parser: the one escape grammar, as a table, and every consumer of it agreeing with it on
where each sequence ends, for random streams with C1 controls and malformed sequences (hypothesis)."""

from __future__ import annotations

import codecs
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shellper.core.terminal import parser as vtparse
from shellper.core.terminal.parser import Kind
from shellper.core.terminal.queries import is_query, strip_queries
from shellper.core.terminal.screen import Screen
from shellper.core.terminal.text import PlainStream, strip_ansi, strip_escapes

TABLE = [
    # (text, kind, complete, dispatched, private, params, intermediates, final, data, controls)
    ("\x1b[1;31m", Kind.CSI, True, True, "", "1;31", "", "m", "", ""),
    ("\x1b[?25h", Kind.CSI, True, True, "?", "25", "", "h", "", ""),
    ("\x1b[2 q", Kind.CSI, True, True, "", "2", " ", "q", "", ""),
    ("\x9b6n", Kind.CSI, True, True, "", "6", "", "n", "", ""),  # 8-bit CSI (U+009B)
    ("\udc9b6n", Kind.CSI, True, True, "", "6", "", "n", "", ""),  # a lone byte 0x9B
    ("\x1b[6\x08n", Kind.CSI, True, True, "", "6", "", "n", "", "\x08"),  # BS inside: executed, not an end
    ("\x1b\x0b[6n", Kind.CSI, True, True, "", "6", "", "n", "", "\x0b"),  # VT between ESC and [
    ("\x1b[1?2m", Kind.CSI, True, False, "", "1?2", "", "m", "", ""),  # a late private marker: ignored
    ("\x1b[ 1m", Kind.CSI, True, False, "", " 1", "", "m", "", ""),  # a parameter after an intermediate
    ("\x1b[38:2:1:2:3m", Kind.CSI, True, True, "", "38:2:1:2:3", "", "m", "", ""),
    ("\x1b[12", Kind.CSI, False, False, "", "12", "", "", "", ""),  # cut by the end
    ("\x1bZ", Kind.ESC, True, True, "", "", "", "Z", "", ""),
    ("\x1b(0", Kind.ESC, True, True, "", "", "(", "0", "", ""),
    ("\x1b#8", Kind.ESC, True, True, "", "", "#", "8", "", ""),
    ("\x1b\\", Kind.ESC, True, True, "", "", "", "\\", "", ""),
    ("\x1b", Kind.ESC, False, False, "", "", "", "", "", ""),
    ("\x1b]0;title\x07", Kind.OSC, True, True, "", "", "", "", "0;title", ""),
    ("\x1b]0;title\x1b\\", Kind.OSC, True, True, "", "", "", "", "0;title", ""),
    ("\x9d52;c;aGk=\x9c", Kind.OSC, True, True, "", "", "", "", "52;c;aGk=", ""),
    ("\x1b]0;t\x01t\x07", Kind.OSC, True, True, "", "", "", "", "0;t\x01t", ""),  # C0 inside: its data
    ("\x1b]0;cut", Kind.OSC, False, True, "", "", "", "", "0;cut", ""),
    ("\x1bP$qm\x1b\\", Kind.DCS, True, True, "", "", "$", "q", "m", ""),
    ("\x90>1|text\x9c", Kind.DCS, True, True, ">", "1", "", "|", "text", ""),
    ("\x1b_Ga=q\x1b\\", Kind.APC, True, True, "", "", "", "", "Ga=q", ""),
    ("\x1b^pm\x1b\\", Kind.PM, True, True, "", "", "", "", "pm", ""),
    ("\x98sos\x9c", Kind.SOS, True, True, "", "", "", "", "sos", ""),
    ("\x85", Kind.CONTROL, True, True, "", "", "", "", "\x85", ""),
    ("\x18", Kind.CONTROL, True, True, "", "", "", "", "\x18", ""),
    ("plain é", Kind.TEXT, True, True, "", "", "", "", "plain é", ""),
]


S, A = vtparse.State, vtparse.ParserAction

STATES = [
    # (state, character, action, next state): the DEC diagram, a row or two of each state's transitions
    (S.GROUND, "a", A.PRINT, S.GROUND),
    (S.GROUND, "é", A.PRINT, S.GROUND),
    (S.GROUND, "\x08", A.EXECUTE, S.GROUND),
    (S.GROUND, "\x7f", A.EXECUTE, S.GROUND),  # DEL: a control on its own, stripped from plain text
    (S.GROUND, "\x1b", A.START, S.ESCAPE),
    (S.GROUND, "\x9b", A.START, S.CSI_ENTRY),
    (S.GROUND, "\udc9b", A.START, S.CSI_ENTRY),  # an undecodable byte 0x9B: the same C1 control
    (S.GROUND, "\x9d", A.START, S.OSC_STRING),
    (S.GROUND, "\x90", A.START, S.DCS_ENTRY),
    (S.GROUND, "\x9f", A.START, S.SOS_PM_APC_STRING),
    (S.GROUND, "\x85", A.EXECUTE, S.GROUND),
    (S.GROUND, "\x9c", A.EXECUTE, S.GROUND),  # ST with nothing to end
    (S.ESCAPE, "\x0b", A.EXECUTE, S.ESCAPE),
    (S.ESCAPE, "\x7f", A.IGNORE, S.ESCAPE),
    (S.ESCAPE, "(", A.COLLECT, S.ESCAPE_INTERMEDIATE),
    (S.ESCAPE, "7", A.DISPATCH, S.GROUND),
    (S.ESCAPE, "\\", A.DISPATCH, S.GROUND),  # ST's 7-bit form
    (S.ESCAPE, "[", A.START, S.CSI_ENTRY),
    (S.ESCAPE, "]", A.START, S.OSC_STRING),
    (S.ESCAPE, "P", A.START, S.DCS_ENTRY),
    (S.ESCAPE, "X", A.START, S.SOS_PM_APC_STRING),
    (S.ESCAPE, "_", A.START, S.SOS_PM_APC_STRING),
    (S.ESCAPE, "\x1b", A.START, S.ESCAPE),  # anywhere: a new one
    (S.ESCAPE, "\x18", A.EXECUTE, S.GROUND),  # CAN
    (S.ESCAPE_INTERMEDIATE, "#", A.COLLECT, S.ESCAPE_INTERMEDIATE),
    (S.ESCAPE_INTERMEDIATE, "8", A.DISPATCH, S.GROUND),
    (S.CSI_ENTRY, "?", A.COLLECT, S.CSI_PARAM),
    (S.CSI_ENTRY, "1", A.PARAM, S.CSI_PARAM),
    (S.CSI_ENTRY, " ", A.COLLECT, S.CSI_INTERMEDIATE),
    (S.CSI_ENTRY, "m", A.DISPATCH, S.GROUND),
    (S.CSI_ENTRY, "\x08", A.EXECUTE, S.CSI_ENTRY),  # C0 inside a CSI: executed, the CSI goes on
    (S.CSI_PARAM, ";", A.PARAM, S.CSI_PARAM),
    (S.CSI_PARAM, ":", A.PARAM, S.CSI_PARAM),  # SGR's sub-parameters (the diagram, older, ignores)
    (S.CSI_PARAM, "?", A.IGNORE, S.CSI_IGNORE),  # a late private marker
    (S.CSI_PARAM, "\x08", A.EXECUTE, S.CSI_PARAM),
    (S.CSI_PARAM, "\x7f", A.IGNORE, S.CSI_PARAM),
    (S.CSI_PARAM, "$", A.COLLECT, S.CSI_INTERMEDIATE),
    (S.CSI_PARAM, "h", A.DISPATCH, S.GROUND),
    (S.CSI_PARAM, "\x1a", A.EXECUTE, S.GROUND),  # SUB aborts
    (S.CSI_PARAM, "\x9b", A.START, S.CSI_ENTRY),  # a C1 introducer begins a new one
    (S.CSI_PARAM, "é", A.PRINT, S.GROUND),  # text aborts it
    (S.CSI_INTERMEDIATE, "1", A.IGNORE, S.CSI_IGNORE),  # a parameter after an intermediate
    (S.CSI_INTERMEDIATE, "p", A.DISPATCH, S.GROUND),
    (S.CSI_IGNORE, "5", A.IGNORE, S.CSI_IGNORE),
    (S.CSI_IGNORE, "\x08", A.EXECUTE, S.CSI_IGNORE),
    (S.CSI_IGNORE, "m", A.END, S.GROUND),  # ended, not dispatched
    (S.DCS_ENTRY, "$", A.COLLECT, S.DCS_INTERMEDIATE),
    (S.DCS_ENTRY, ">", A.COLLECT, S.DCS_PARAM),
    (S.DCS_ENTRY, "\x08", A.IGNORE, S.DCS_ENTRY),  # C0 in a DCS header: ignored, not executed
    (S.DCS_PARAM, "q", A.HOOK, S.DCS_PASSTHROUGH),
    (S.DCS_PARAM, "<", A.IGNORE, S.DCS_IGNORE),
    (S.DCS_INTERMEDIATE, "q", A.HOOK, S.DCS_PASSTHROUGH),
    (S.DCS_INTERMEDIATE, "\x9c", A.END, S.GROUND),
    (S.DCS_PASSTHROUGH, "#", A.PUT, S.DCS_PASSTHROUGH),
    (S.DCS_PASSTHROUGH, "\x07", A.PUT, S.DCS_PASSTHROUGH),  # BEL does not end a DCS
    (S.DCS_PASSTHROUGH, "\x9c", A.END, S.GROUND),
    (S.DCS_PASSTHROUGH, "\x1b", A.START, S.ESCAPE),  # perhaps ST's first half
    (S.DCS_IGNORE, "x", A.IGNORE, S.DCS_IGNORE),
    (S.DCS_IGNORE, "\udc9c", A.END, S.GROUND),
    (S.OSC_STRING, "t", A.PUT, S.OSC_STRING),
    (S.OSC_STRING, "é", A.PUT, S.OSC_STRING),
    (S.OSC_STRING, "\x01", A.PUT, S.OSC_STRING),  # C0 in a string: its data
    (S.OSC_STRING, "\x07", A.END, S.GROUND),  # xterm's BEL
    (S.OSC_STRING, "\x9c", A.END, S.GROUND),
    (S.OSC_STRING, "\x18", A.EXECUTE, S.GROUND),
    (S.OSC_STRING, "\x85", A.EXECUTE, S.GROUND),  # a C1 control ends it
    (S.SOS_PM_APC_STRING, "G", A.PUT, S.SOS_PM_APC_STRING),
    (S.SOS_PM_APC_STRING, "\x07", A.PUT, S.SOS_PM_APC_STRING),
    (S.SOS_PM_APC_STRING, "\x9c", A.END, S.GROUND),
]


@pytest.mark.parametrize(("state", "char", "action", "after"), STATES,
                         ids=[f"{r[0].name}-{r[1]!r}" for r in STATES])
def test_transition(state: vtparse.State, char: str, action: vtparse.ParserAction, after: vtparse.State) -> None:
    assert vtparse.transition(state, char) == (action, after)


@pytest.mark.parametrize(("state", "char", "aborts"), [
    (S.CSI_PARAM, "\x1b", True), (S.CSI_PARAM, "\x18", True), (S.CSI_PARAM, "\x85", True),
    (S.CSI_PARAM, "é", True), (S.CSI_PARAM, "\x08", False), (S.ESCAPE, "\x9c", True),
    (S.OSC_STRING, "\x9c", False), (S.OSC_STRING, "\x1b", True), (S.OSC_STRING, "é", False),
    (S.DCS_PARAM, "\x9c", False), (S.GROUND, "\x1b", False),
])
def test_aborts(state: vtparse.State, char: str, aborts: bool) -> None:
    assert vtparse.aborts(state, char) is aborts


def test_every_state_has_a_transition_for_every_character() -> None:
    for state in vtparse.State:
        for code in (*range(0xA0), 0xA0, 0x2500, 0xDC9B, 0xDCFF):
            assert isinstance(vtparse.transition(state, chr(code)), tuple)


@pytest.mark.parametrize(("text", "pos", "end"), [
    ("\x1b[6n", 0, 4), ("\x1b[6", 0, None), ("ab\x1b[6nc", 2, 6), ("\x1b]0;t\x1b", 0, None),
    ("\x1b]0;t\x1b[m", 0, 5), ("\x1b]0;t\x1b\\", 0, 7), ("\x9d0;t\x9c", 0, 5), ("abc", 0, 3), ("\x1b", 0, None),
    ("\x1b\x9b6n", 0, 1),  # a C1 introducer aborts the ESC
])
def test_end_of(text: str, pos: int, end: int | None) -> None:
    assert vtparse.end_of(text, pos) == end


@pytest.mark.parametrize(("wanted", "text", "found"), [
    ({"csi_finals": "rt"}, "\x1b[1;5r \x1b[31m \x1b[?1r \x9b22t", ["\x1b[1;5r", "\x9b22t"]),
    ({"marked_csi_finals": "h"}, "\x1b[?25h \x1b[4h \x1b[?1049\x08h", ["\x1b[?25h", "\x1b[?1049\x08h"]),
    ({"esc_finals": "c"}, "\x1bc \x1b(c \x1b\x08c", ["\x1bc", "\x1b\x08c"]),
    ({"osc_prefixes": ("2;",)}, "\x1b]2;a\x07 \x1b]7;b\x07 \x9d2;c", ["\x1b]2;a\x07", "\x9d2;c"]),
    ({"controls": "\x9a"}, "a\x9a\udc9a\x9b", ["\x9a", "\udc9a"]),
    ({"sequences": True}, "a\x1b[1\x1b]x\x1bZ", ["\x1b[1", "\x1b]x", "\x1bZ"]),
])
def test_pattern_finds_just_the_sequences_asked_for(wanted: dict[str, Any], text: str, found: list[str]) -> None:
    assert [m.group() for m in re.finditer(vtparse.pattern(**wanted), text)] == found


@pytest.mark.parametrize("row", TABLE, ids=[repr(r[0]) for r in TABLE])
def test_one_token(row: tuple[object, ...]) -> None:
    text = str(row[0])
    m = re.compile(vtparse.TOKEN).match(text)
    assert m is not None and m.end() == len(text)
    seq = vtparse.parse(text)
    assert (seq.kind, seq.complete, seq.dispatched, seq.private, seq.params, seq.intermediates, seq.final,
            seq.data, seq.controls) == row[1:]


@pytest.mark.parametrize(("text", "ends"), [
    ("\x1b[6\x18n", [3, 4]),  # CAN aborts the CSI (and is a control of its own); n is text
    ("\x1b[6\x1b[m", [3, 6]),  # ESC starts a new one
    ("\x1b[6\x85m", [3, 4]),  # so does a C1 control
    ("\x1b[6é", [3]),  # a character above U+009F aborts it and is text
    ("\x1b]0;a\x1b[m", [5, 8]),  # an OSC ends at an ESC that is no ST
    ("\x1b]0;a\x9b6n", [5, 8]),  # or at a C1 control: U+009B starts a CSI
    ("\x1bP1$r\x07more\x1b\\", [12]),  # a DCS does not end at BEL
])
def test_where_sequences_end(text: str, ends: list[int]) -> None:
    assert _ends(text) == ends


@pytest.mark.parametrize(("text", "start"), [
    ("abc", -1), ("abc\x1b[6n", -1), ("abc\x1b[6", 3), ("abc\x1b", 3), ("abc\x1b[6\x08", 3),
    ("abc\x1b]0;x", 3), ("abc\x1b]0;x\x1b", 3), ("abc\x1b]0;x\x07", -1), ("é\x9b6", 1), ("é\x9d0;t\x1b", 1),
    ("é\x9b6n", -1), ("a\x1b[6\x18", -1), ("a\x1b(", 1), ("\x1b", 0),
])
def test_unfinished(text: str, start: int) -> None:
    assert vtparse.unfinished(text) == start


# ---------------------------------------------------------------------------- random streams, every consumer

PIECES = [
    "a", "Z", "n", "m", "6", ";", "?", ">", "=", "$", " ", "é", "—", "\t", "\n", "\r", "\x07", "\x08", "\x05",
    "\x00", "\x7f", "\x18", "\x1a", "\x1b", "\x1b[", "\x1b]", "\x1bP", "\x1b_", "\x1b^", "\x1bX", "\x1b\\",
    "\x1b(", "\x1b#", "\x1bZ", "\x1b7", "\x1bc", "\x9b", "\x9d", "\x90", "\x9c", "\x9a", "\x85", "\x84", "\x8d",
    "\x98", "\x9e", "\x9f", "\x80", "\udc9b", "\udc9d", "\udcc2", "\udcff", "\x1b[6n", "\x1b[?25l", "\x1b[31m",
    "\x1b[2J", "\x1b[H", "\x1b]0;t", "\x1b]52;c;", "\x1b[?1049h", "\x1b[3;5r", "\x1b[5A", "\x1b[4h", "\x1b[K",
    "\x1b]2;", "\x07", "x" * 30, "1", "c", "q", "t", "u", "H", "@",
]
streams = st.lists(st.sampled_from(PIECES), max_size=60).map(
    lambda pieces: vtparse.decode(vtparse.encode("".join(pieces))))
"""Text as decoding bytes gives it: joined pieces such as the lone bytes 0xC2 and 0x9B are one character (U+009B,
the 8-bit CSI) once they are bytes, and every consumer reads bytes decoded, never the pieces' own form."""
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tokens(text: str) -> list[str]:
    out, pos, token = [], 0, re.compile(vtparse.TOKEN)
    while pos < len(text):
        m = token.match(text, pos)
        assert m is not None and m.end() > pos, (text, pos)
        out.append(m.group())
        pos = m.end()
    return out


def _ends(text: str) -> list[int]:
    ends, at = [], 0
    for t in _tokens(text):
        at += len(t)
        ends.append(at)
    return [e for e, t in zip(ends, _tokens(text), strict=True) if vtparse.parse(t).kind is not Kind.TEXT]


@SETTINGS
@given(streams)
def test_the_tokens_cover_any_stream_exactly(text: str) -> None:
    assert "".join(_tokens(text)) == text


@SETTINGS
@given(streams)
def test_plain_text_removes_exactly_the_grammars_sequences(text: str) -> None:
    for keep in ("\t\n\r", "\t\n", ""):
        expected = "".join(t for t in _tokens(text) if vtparse.parse(t).kind is Kind.TEXT or t in keep)
        assert strip_escapes(text, keep) == expected
    data = vtparse.encode(text)
    assert strip_ansi(data) == vtparse.encode(strip_escapes(text, "\t\n"))


@SETTINGS
@given(streams, st.lists(st.integers(0, 400), max_size=4))
def test_plain_text_in_pieces_is_the_plain_text_of_the_whole(text: str, cuts: list[int]) -> None:
    data = vtparse.encode(text)
    stream, out, last = PlainStream(), b"", 0
    for cut in sorted(c for c in cuts if c < len(data)):
        out += stream.feed(data[last:cut])
        last = cut
    out += stream.feed(data[last:])
    assert out == PlainStream().feed(data)


@SETTINGS
@given(streams)
def test_the_query_filter_takes_out_exactly_the_grammars_queries(text: str) -> None:
    tokens, kept = _tokens(text), []
    for i, t in enumerate(tokens):
        seq = vtparse.parse(t)
        at_end = i == len(tokens) - 1
        kept.append(seq.controls.replace("\x7f", "") if is_query(seq) and (seq.complete or not at_end) else t)
    expected = vtparse.encode("".join(kept).replace("\x05", ""))
    assert strip_queries(vtparse.encode(text)) == expected


def _normalised(text: str) -> str:
    """``text`` as the screen model should take it: every sequence the grammar finds, in a canonical 7-bit
    form the model's fast paths read, its C0 controls before it; strings it does not act on left out."""
    cut = vtparse.unfinished(text)
    out = []
    for t in _tokens(text[:cut] if cut >= 0 else text):
        seq = vtparse.parse(t)
        out.append(seq.controls)
        if seq.kind in (Kind.TEXT, Kind.CONTROL):
            out.append(t)
        elif seq.kind is Kind.CSI and seq.dispatched:
            out.append(f"\x1b[{seq.private}{seq.params}{seq.intermediates}{seq.final}")
        elif seq.kind is Kind.ESC and seq.dispatched:
            out.append(f"\x1b{seq.intermediates}{seq.final}")
        elif seq.kind is Kind.OSC:
            out.append("\x1b]" + re.sub("[\x00-\x1f\x7f]", "", seq.data) + "\x07")
    return "".join(out)


def _state(screen: Screen) -> tuple[object, ...]:
    return (screen.render(scrollback=50), screen.title, screen.cursor.x, screen.cursor.y)


@SETTINGS
@given(streams, st.lists(st.integers(0, 400), max_size=4))
def test_the_screen_model_ends_each_sequence_where_the_grammar_does(text: str, cuts: list[int]) -> None:
    data = vtparse.encode(text)
    # the model's view: a UTF-8 terminal's (a lone 0x9B is U+FFFD), a character cut by the end still to come
    seen = codecs.getincrementaldecoder("utf-8")("replace").decode(data)
    whole, canonical, pieces = Screen(20, 5), Screen(20, 5), Screen(20, 5)
    whole.feed(data)
    canonical.feed(_normalised(seen).encode("utf-8", "surrogateescape"))
    last = 0
    for cut in sorted(c for c in cuts if c < len(data)):
        pieces.feed(data[last:cut])
        last = cut
    pieces.feed(data[last:])
    assert _state(whole) == _state(canonical)
    assert _state(pieces) == _state(whole)


def test_a_smuggled_query_in_a_title_is_not_drawn_again() -> None:
    screen = Screen(20, 5)
    screen.feed("\x1b]2;title\u009b6n\x07after".encode())
    drawn = screen.render()
    assert screen.title == "title" and "\u009b".encode() not in drawn and b"\x1b]2;title\x07" in drawn
    screen.feed(b"\x1b]2;a\x01b\x7fc\x07")
    assert screen.title == "abc"
