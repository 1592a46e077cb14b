"""strip_queries: every query a terminal answers is taken out of replayed output, nothing else is."""

from __future__ import annotations

import pytest

from shellper.core.terminal.queries import strip_queries

QUERIES = [
    b"\x1b[6n",  # CPR
    b"\x1b[5n",  # DSR status
    b"\x1b[?6n",  # DECXCPR
    b"\x1b[?15n", b"\x1b[?25n", b"\x1b[?26n", b"\x1b[?996n",  # private status reports, colour scheme
    b"\x1b[c", b"\x1b[0c",  # DA1
    b"\x1b[>c", b"\x1b[>0c",  # DA2
    b"\x1b[=c", b"\x1b[=0c",  # DA3
    b"\x1b[?2004$p", b"\x1b[?1049$p", b"\x1b[4$p",  # DECRQM
    b"\x1b[>q", b"\x1b[>0q",  # XTVERSION
    b"\x1b[14t", b"\x1b[16t", b"\x1b[18t", b"\x1b[11t", b"\x1b[13t", b"\x1b[21t", b"\x1b[20t",  # XTWINOPS
    b"\x1b[x", b"\x1b[1x",  # DECREQTPARM
    b"\x1b[?4m",  # XTQMODKEYS
    b"\x1b[?u",  # kitty keyboard
    b"\x1b[1$w", b"\x1b[1$u", b"\x1b[&u", b"\x1b[1;1;1;1;10;10*y",  # DECRQPSR, DECRQTSR, DECRQUPSS, DECRQCRA
    b"\x1b[?1;1;0S",  # XTSMGRAPHICS
    b"\x1b]10;?\x07", b"\x1b]11;?\x1b\\", b"\x1b]12;?\x07", b"\x1b]4;1;?\x07", b"\x1b]4;1;?;2;?\x07",  # colours
    b"\x1b]52;c;?\x07",  # clipboard read
    b"\x1bP$qm\x1b\\", b"\x1bP$q\"p\x1b\\",  # DECRQSS
    b"\x1bP+q544e\x1b\\",  # XTGETTCAP
    b"\x1b_Gi=31,s=1,v=1,a=q,t=d,f=24;AAAA\x1b\\",  # kitty graphics query
    b"\x05",  # ENQ
    b"\x1bZ", b"\xc2\x9a", b"\x9a",  # DECID, as ESC Z, as the C1 control U+009A, as a lone byte 0x9A
    b"\x1b]52;c;aGk=\x07", b"\x1b]52;p;aGk=\x1b\\",  # clipboard writes: replayed, they would write again
    b"\xc2\x9b6n", b"\x9b6n", b"\xc2\x9b>c",  # 8-bit CSI: U+009B (UTF-8), a lone byte 0x9B (an 8-bit terminal's)
    b"\xc2\x9d11;?\xc2\x9c", b"\x1b]11;?\x9c",  # an OSC query, 8-bit OSC and ST
    b"\x1b]1337;ReportCellSize\x07",  # iTerm2
]

NOT_QUERIES = [
    b"plain text", b"\x1b[31m", b"\x1b[2J\x1b[H", b"\x1b[?1049h", b"\x1b[?2004l", b"\x1b[10;20H",
    b"\x1b[>4;2m", b"\x1b[>4m", b"\x1b[>4n",  # modifyOtherKeys set / reset / disable: not questions
    b"\x1b[22;0t", b"\x1b[23;0t", b"\x1b[8;24;80t", b"\x1b[24t",  # title stack, resize: no answer
    b"\x1b[>1u", b"\x1b[<u", b"\x1b[=1;1u", b"\x1b[u", b"\x1b[s",  # kitty keyboard set, SCORC, SCOSC
    b"\x1b[2 q", b"\x1b[!p", b"\x1b[1;23r",
    b"\x1b]0;a title?\x07", b"\x1b]2;what?\x1b\\", b"\x1b]8;;http://x/?a=1\x1b\\", b"\x1b]11;rgb:0/0/0\x07",
    b"\x1b[6\x18n", b"\x1b[6\x1an",  # CAN and SUB abort a sequence: the n is text
    b"\x1b[1?6n",  # a private marker after a parameter: the grammar ignores the sequence
    "caf\u00e9 \u2014 \u009c".encode(),  # non-ASCII text, and an ST on its own
    b"\x1bPq#0;2;0;0;0#0~~\x1b\\",  # sixel
    b"\x1b_Gi=31,a=T;AAAA\x1b\\",  # kitty graphics display
]


@pytest.mark.parametrize("query", QUERIES)
def test_a_query_is_taken_out(query: bytes) -> None:
    assert strip_queries(b"before" + query + b"after") == b"beforeafter"


@pytest.mark.parametrize("kept", NOT_QUERIES)
def test_other_sequences_are_kept(kept: bytes) -> None:
    data = b"a" + kept + b"\x1b[6nb"
    assert strip_queries(data) == b"a" + kept + b"b"


@pytest.mark.parametrize("text", [
    b"\x1b]2;\x1b[6n",  # an unterminated title, then a query: the query still goes
])
def test_an_unterminated_string_does_not_hide_a_query(text: bytes) -> None:
    assert b"\x1b[6n" not in strip_queries(text)


@pytest.mark.parametrize(("text", "left"), [
    (b"a\x1b[6\x08nb", b"a\x08b"),  # a DSR to a VT500 parser: the BS is executed, the DSR answered
    (b"a\x1b\x08[6nb", b"a\x08b"),  # a C0 control between ESC and [ too
    (b"a\x1b[\x056nb", b"ab"),  # ENQ inside a query goes with it
    (b"a\x1b[31\x05mb", b"a\x1b[31mb"),  # and inside any other sequence
    (b"a\x1b[6\x7fnb", b"ab"),  # DEL is ignored
])
def test_controls_inside_a_query(text: bytes, left: bytes) -> None:
    assert strip_queries(text) == left


def test_bytes_that_are_not_utf8_are_kept_as_they_are() -> None:
    data = b"\xff\xfe\xe2\x80 \x1b[6n\xc3"
    assert strip_queries(data) == b"\xff\xfe\xe2\x80 \xc3"


def test_a_query_inside_a_string_sequence_is_its_text() -> None:
    data = b"\x1b]2;title with [6n and ?\x07"
    assert strip_queries(data) == data


def test_a_query_cut_by_the_end_is_kept() -> None:
    assert strip_queries(b"x\x1b[") == b"x\x1b["
    assert strip_queries(b"x\x1b]10;?") == b"x\x1b]10;?"


def test_data_without_escapes_is_returned_as_is() -> None:
    data = b"no escapes here\r\n" * 100
    assert strip_queries(data) is data


def test_many_queries_among_output() -> None:
    frame = b"\x1b[H\x1b[2J\x1b[1;31mred\x1b[0m\x1b[6n\x1b]10;?\x07text\x1b[c"
    assert strip_queries(frame * 1000) == b"\x1b[H\x1b[2J\x1b[1;31mred\x1b[0mtext" * 1000
