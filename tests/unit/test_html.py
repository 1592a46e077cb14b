"""shellper.cli.html: a pen's colours and attributes as CSS, and a row's text as HTML that never turns to markup."""

from __future__ import annotations

import pytest

from shellper.cli.html import BACKGROUND, FOREGROUND, line_html, style
from shellper.core.terminal import pen as pens


@pytest.mark.parametrize(("sgr", "css"), [
    ("0", ""), ("31", "color:#cd0000"), ("1;31", "color:#ff0000;font-weight:bold"), ("91", "color:#ff0000"),
    ("38;5;196", "color:#ff0000"), ("38;5;232", "color:#080808"), ("38;5;4", "color:#0000ee"),
    ("48;2;1;2;3", "background:#010203"), ("7", f"color:{BACKGROUND};background:{FOREGROUND}"),
    ("3;4;9", "font-style:italic;text-decoration:underline line-through"), ("2;8", "opacity:.6;visibility:hidden"),
])
def test_sgr_becomes_css(sgr: str, css: str) -> None:
    assert style(pens.apply(pens.DEFAULT, sgr)) == css


def test_a_row_is_text_whatever_it_holds() -> None:
    row = "\x1b[32mok\x1b[0m <b>&</b>\x1b]8;;http://x/\x1b\\link\x1b]8;;\x1b\\\x07\x1b[2J"
    assert line_html(row) == '<span style="color:#00cd00">ok</span> &lt;b&gt;&amp;&lt;/b&gt;link'
