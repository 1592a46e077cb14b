"""Every reader of program output agrees with the one escape grammar (shellper.core.terminal.parser) on where
each sequence ends, for the same random byte streams: C1 controls in their 8-bit forms (UTF-8 and lone
bytes), malformed and cut-short sequences, C0 controls inside a CSI (a BS in a DSR), CAN and SUB, UTF-8
valid and not (hypothesis).

The readers: the grammar's own table stepped a character at a time, its patterns, the strippers and
PlainStream, the query filter, the mode tracker, the ring's sequence ends and trims, and the screen model.
"""

from __future__ import annotations

import codecs
import itertools
import re

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from shellper.core.ring import RingBuffer, sequence_end
from shellper.core.terminal import modes
from shellper.core.terminal import parser as vtparse
from shellper.core.terminal.modes import ModeTracker
from shellper.core.terminal.parser import Kind
from shellper.core.terminal.queries import is_query, strip_queries
from shellper.core.terminal.screen import Screen
from shellper.core.terminal.text import PlainStream, strip_ansi, strip_escapes

PIECES = [
    # text, UTF-8 and not
    b"a", b"n", b"m", b"h", b"l", b"q", b"r", b"6", b"1049", b";", b"?", b">", b"$", b" ", b"!", b"\\", "é".encode(),
    "\u201b".encode(),  # U+201B: its last byte is 0x9B, a CSI only when read alone
    b"\xc3", b"\xe2\x80", b"\xff", b"\x80",
    # C0 controls, CAN, SUB
    b"\t", b"\n", b"\r", b"\x07", b"\x08", b"\x05", b"\x00", b"\x7f", b"\x18", b"\x1a",
    # 7-bit introducers and whole sequences
    b"\x1b", b"\x1b[", b"\x1b]", b"\x1bP", b"\x1b_", b"\x1b^", b"\x1bX", b"\x1b\\", b"\x1b(", b"\x1bZ", b"\x1bc",
    b"\x1b=", b"\x1b[6n", b"\x1b[?25l", b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b[?2004h", b"\x1b[31m", b"\x1b[3;5r",
    b"\x1b[22t", b"\x1b[2 q", b"\x1b[>4;2m", b"\x1b]2;", b"\x1b]0;t", b"\x1b]52;c;", b"\x1bP$q", b"\x1b_Ga=q",
    # 8-bit forms: as UTF-8 (U+0080-U+009F) and as lone bytes
    "\x9b".encode(), "\x9d".encode(), "\x90".encode(), "\x9c".encode(), "\x9a".encode(), "\x85".encode(),
    "\x98".encode(), "\x9f".encode(), b"\x9b", b"\x9d", b"\x9c", b"\x90",
    "\x9b?1049h".encode(), b"\x9b?25l", "\x9d2;u\x9c".encode(),
    # C0 inside a sequence, and sequences cut or malformed
    b"\x1b[6\x08n", b"\x1b[?1049\x08h", b"\x1b\x0b[?25l", b"\x1b[1?2m", b"\x1b[ 1m", b"\x1b[12",
]
streams = st.lists(st.sampled_from(PIECES), max_size=40).map(b"".join)
cuts = st.lists(st.integers(0, 300), max_size=4)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _partial(data: bytes) -> bool:
    """Whether ``data`` ends inside a UTF-8 character (whose end, still to come, may be a C1 control)."""
    for back in range(1, min(4, len(data) + 1)):
        byte = data[-back]
        if byte < 0x80:
            return False
        if byte >= 0xC0:
            return back < (2 if byte < 0xE0 else 3 if byte < 0xF0 else 4) and byte <= 0xF4
    return False


def _tokens(text: str) -> list[re.Match[str]]:
    out, pos, token = [], 0, re.compile(vtparse.TOKEN)
    while pos < len(text):
        m = token.match(text, pos)
        assert m is not None and m.end() > pos, (text, pos)
        out.append(m)
        pos = m.end()
    return out


def _is_string(token: str) -> bool:
    return vtparse.parse(token).kind in vtparse.STRINGS


def _end(text: str, tokens: list[re.Match[str]], i: int) -> int | None:
    """Where token ``i`` ends, or None when the end of ``text`` cuts it short (more output could change it)."""
    m = tokens[i]
    if m.end() == len(text):
        return m.end() if vtparse.finished(m) or m.lastgroup == "text" else None
    rest = text[m.end():]
    if not vtparse.finished(m) and _is_string(m.group()) and re.fullmatch(vtparse.ESC, rest):
        return None  # the ESC after a string's data may begin its ST
    return m.end()


def _in_pieces(data: bytes, at: list[int]) -> list[bytes]:
    points = [0, *sorted(c for c in at if c < len(data)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


def _byte_spans(text: str) -> list[tuple[int, int | None, re.Match[str]]]:
    """(first byte, byte just past or None if cut short, match) of each token of ``text``."""
    tokens, spans, at = _tokens(text), [], 0
    for i, m in enumerate(tokens):
        size = len(vtparse.encode(m.group()))
        end = _end(text, tokens, i)
        spans.append((at, None if end is None else at + size, m))
        at += size
    return spans


# ---------------------------------------------------------------------------- the grammar against itself

def _stepped_ends(text: str) -> list[int]:
    """Where each token ends, found by stepping the table a character at a time (no pattern)."""
    ground, escape = vtparse.State.GROUND, vtparse.State.ESCAPE
    strings = (vtparse.State.OSC_STRING, vtparse.State.SOS_PM_APC_STRING, vtparse.State.DCS_ENTRY,
               vtparse.State.DCS_PARAM, vtparse.State.DCS_INTERMEDIATE, vtparse.State.DCS_PASSTHROUGH,
               vtparse.State.DCS_IGNORE)
    ends: list[int] = []
    state, in_text, string_end, i = ground, False, -1, 0
    while i < len(text):
        char = text[i]
        if state is not ground and vtparse.aborts(state, char):
            ends.append(i)
            # an ESC that ends a string's data may be the first half of its ST, which ends the string
            string_end = i if char == "\x1b" and state in strings else -1
            state, in_text = ground, False
            continue  # the character begins something of its own
        action, after = vtparse.transition(state, char)
        if state is ground:
            if action is vtparse.ParserAction.PRINT:
                if in_text:
                    ends[-1] = i + 1  # a run of text is one token
                else:
                    ends.append(i + 1)
                in_text = True
            else:
                in_text = False
                if after is ground:
                    ends.append(i + 1)  # a control
        elif after is ground:
            ends.append(i + 1)  # a final, a terminator
            if string_end >= 0 and state is escape and char == "\\":
                ends.remove(string_end)  # ST: part of the string's token
            string_end = -1
        elif state is escape and after is not escape:
            string_end = -1  # the ESC began something else
        state = after
        i += 1
    if state is not ground:
        ends.append(len(text))
    return ends


@SETTINGS
@given(streams)
def test_the_patterns_end_tokens_where_the_table_does(data: bytes) -> None:
    text = vtparse.decode(data)
    assert [m.end() for m in _tokens(text)] == _stepped_ends(text)


@SETTINGS
@given(streams)
def test_the_parser_ends_each_token_where_the_patterns_do(data: bytes) -> None:
    text = vtparse.decode(data)
    tokens = _tokens(text)
    for i, m in enumerate(tokens):
        assert vtparse.end_of(text, m.start()) == _end(text, tokens, i)
        seq = vtparse.parse(m.group())
        assert seq.complete == ((vtparse.finished(m) and m.lastgroup != "text") or seq.kind is Kind.TEXT)
    cut = vtparse.unfinished(text)
    assert cut == next((m.start() for i, m in enumerate(tokens) if _end(text, tokens, i) is None), -1)


# ------------------------------------------------------------------------------------- the consumers

@SETTINGS
@given(streams, cuts)
def test_the_strippers_remove_exactly_the_grammars_sequences(data: bytes, at: list[int]) -> None:
    text = vtparse.decode(data)
    for keep in ("\t\n\r", "\t\n", ""):
        expected = "".join(m.group() for m in _tokens(text) if m.lastgroup == "text" or m.group() in keep)
        assert strip_escapes(text, keep) == expected
    assert strip_ansi(data) == vtparse.encode(strip_escapes(text, "\t\n"))
    assume(not _partial(data))
    cut = vtparse.unfinished(text)
    stream = PlainStream()
    shown = b"".join(stream.feed(piece) for piece in _in_pieces(data, at))
    assert shown == strip_ansi(vtparse.encode(text[:cut] if cut >= 0 else text))


@SETTINGS
@given(streams)
def test_the_query_filter_takes_out_exactly_the_grammars_queries(data: bytes) -> None:
    text = vtparse.decode(data)
    tokens, kept = _tokens(text), []
    for i, m in enumerate(tokens):
        seq = vtparse.parse(m.group())
        cut_short = i == len(tokens) - 1 and not seq.complete
        kept.append(seq.controls.replace("\x7f", "") if is_query(seq) and not cut_short else m.group())
    assert strip_queries(data) == vtparse.encode("".join(kept).replace("\x05", ""))


def _canonical(token: str) -> str:
    """A token as the plainest 7-bit form of the same sequence: no C0 controls inside, no 8-bit introducer, a
    string with its terminator; text and what a terminal does not act on as as many spaces."""
    seq = vtparse.parse(token)
    if seq.kind is Kind.CSI and seq.dispatched:
        return f"\x1b[{seq.private}{seq.params}{seq.intermediates}{seq.final}"
    if seq.kind is Kind.ESC and seq.dispatched:
        return f"\x1b{seq.intermediates}{seq.final}"
    if seq.kind is Kind.OSC:
        return f"\x1b]{seq.data}\x07"
    return " "


@SETTINGS
@given(streams, cuts)
def test_the_mode_tracker_reads_each_sequence_where_the_grammar_ends_it(data: bytes, at: list[int]) -> None:
    assume(not _partial(data))
    text = vtparse.decode(data)
    raw, canonical, pieces = ModeTracker(), ModeTracker(), ModeTracker()
    raw.feed(0, data)
    offset = 0
    for piece in _in_pieces(data, at):
        pieces.feed(offset, piece)
        offset += len(piece)
    canon_end = 0
    for first, end, m in _byte_spans(text):
        if end is None:
            break  # cut short: not read yet
        form = vtparse.encode(_canonical(m.group()))
        canonical.feed(canon_end, form)
        canon_end += len(form)
        assert raw.state_at(end) == canonical.current(), (first, m.group())
        assert pieces.state_at(end) == raw.state_at(end)
    assert pieces.current() == raw.current() == canonical.current()


@SETTINGS
@given(streams)
def test_the_ring_ends_each_sequence_where_the_grammar_does(data: bytes) -> None:
    assume(not _partial(data))
    for first, end, m in _byte_spans(vtparse.decode(data)):
        if m.lastgroup not in ("text", "control"):
            assert sequence_end(data, first) == end, (first, m.group())


@SETTINGS
@given(streams, cuts)
def test_the_ring_never_starts_a_replay_inside_a_sequence(data: bytes, at: list[int]) -> None:
    assume(not _partial(data))
    ring = RingBuffer(1 << 16)
    for piece in _in_pieces(data, at):
        ring.append(piece)
    spans = [(first, end) for first, end, m in _byte_spans(vtparse.decode(data))
             if m.lastgroup not in ("text", "control") and end is not None]
    for offset in range(len(data) + 1):
        start = ring.safe_start(offset)
        inside = [end for first, end in spans if first < offset < end]
        assert start == inside[0] if inside else offset <= start <= offset + 3, (offset, start)
        assert not any(first < start < end for first, end in spans), (offset, start)


def _screen_state(screen: Screen) -> tuple[object, ...]:
    return (screen.render(scrollback=50), screen.title, screen.cursor.x, screen.cursor.y)


@SETTINGS
@given(streams, cuts)
@example(b"\x1b]\x1b\x1b", [])  # an aborted string before an ESC the feed holds back: the token ends at the ESC
@example(b"\xc2\x98\x1b\x1b", [])  # the same, 8-bit
def test_the_screen_model_ends_each_sequence_where_the_grammar_does(data: bytes, at: list[int]) -> None:
    # The model reads as a UTF-8 terminal does: a lone byte 0x9B is U+FFFD, not a CSI.
    seen = codecs.getincrementaldecoder("utf-8")("replace").decode(data)
    cut = vtparse.unfinished(seen)
    canonical_text = "".join(vtparse.parse(m.group()).controls + (m.group() if m.lastgroup in ("text", "control")
                                                                   else _canonical(m.group()).strip(" "))
                             for m in _tokens(seen[:cut] if cut >= 0 else seen))
    whole, canonical, pieces = Screen(20, 5), Screen(20, 5), Screen(20, 5)
    whole.feed(data)
    canonical.feed(vtparse.encode(canonical_text))
    for piece in _in_pieces(data, at):
        pieces.feed(piece)
    assert _screen_state(whole) == _screen_state(canonical)
    assert _screen_state(pieces) == _screen_state(whole)


# ------------------------------------------------------------------------ the grammar's bytes forms

def _c1_free(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False  # not UTF-8, or a character cut by the end
    return not any("\x80" <= char <= "\x9f" for char in text)


@SETTINGS
@given(streams)
def test_the_bytes_forms_end_each_token_where_the_text_forms_do(data: bytes) -> None:
    # What the ring relies on: a token's end found in bytes is the grammar's whenever the token's bytes hold no
    # C1 control, whatever the rest of the stream holds.
    assert vtparse.c1_free(data) == _c1_free(data)
    text = vtparse.decode(data)
    for first, end, m in _byte_spans(text):
        found = vtparse.end_of_bytes(data, first)
        token = data[first:] if found is None else data[first:found]
        if vtparse.c1_free(token):
            assert found == end, (first, m.group())
    if vtparse.c1_free(data):
        cut = vtparse.unfinished(text)
        assert vtparse.unfinished_bytes(data) == (-1 if cut < 0 else len(vtparse.encode(text[:cut])))


@SETTINGS
@given(streams)
def test_the_mode_trackers_bytes_search_finds_what_its_text_search_finds(data: bytes) -> None:
    if not vtparse.c1_free(data):
        return  # read as text (test_the_mode_tracker_reads_each_sequence_where_the_grammar_ends_it)
    text = data.decode("utf-8")
    in_text = [(len(text[:m.start()].encode()), len(text[:m.end()].encode()))
               for m in modes._mode_pattern().finditer(text)]
    assert [m.span() for m in modes._mode_pattern_bytes().finditer(data)] == in_text
