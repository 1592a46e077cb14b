"""shellper.core.terminal._tables, the parser's table and patterns derived ahead of time: equal to what
shellper.core.terminal.tablegen derives from the diagram's rows (regenerate it with ``python -m
shellper.core.terminal.tablegen``), and the searches ``unfinished`` picks for text with no C1 control
reading it as the full grammar does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shellper.core.terminal import parser, tablegen


def test_the_checked_in_tables_are_the_derivation() -> None:
    assert tablegen.TABLES.read_text() == tablegen.render(tablegen.derive()), (
        "shellper/core/terminal/_tables.py is stale: run python -m shellper.core.terminal.tablegen")


def test_the_parser_holds_the_derived_table() -> None:
    derived = {int(state): [(int(a), int(s)) for a, s in row] for state, row in tablegen.TABLE.items()}
    taken = {int(state): [(int(a), int(s)) for a, s in row] for state, row in parser.TABLE.items()}
    assert taken == derived
    assert tablegen._tokens()["TOKEN"] == parser.TOKEN


_PIECES = ["a", "é", "│", " ", "\x1b", "[", "]", "P", "\\", "?", "1", ";", "m", "0", "\x07", "\x18", "\x08",
           "\x1b[", "\x1b]0;", "\x1bP", "\x1b\\", "\x1b(", "\x9b", "\x9d", "\x9c", "\udc9b"]


def _full(text: str) -> int:
    """``unfinished`` with the grammar's full (8-bit) searches, whatever the text holds."""
    return parser._unfinished_in(text, parser._last_introducer,
                                 lambda _t, _p: parser._TEXT_SEARCHES or parser._searches(
                                     parser._TEXT_SEARCHES, parser._FORMS, str))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=14))
def test_unfinished_reads_text_as_the_full_grammar(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert parser.unfinished(text) == _full(text)
