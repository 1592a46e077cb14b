"""shellper.core.terminal.workdir: the directory a shell announces with OSC 7, read by the one parser."""

from __future__ import annotations

import pytest

from shellper.core.terminal.workdir import Announced, last_announced, parse_url

CASES = [
    (b"\x1b]7;file://box/home/me\x07", Announced(host="box", path="/home/me")),
    (b"\x1b]7;file:///tmp\x1b\\", Announced(host="", path="/tmp")),  # ST; no host: this one
    (b"\xc2\x9d7;file://box/p\xc2\x9c", Announced(host="box", path="/p")),  # the C1 forms, in UTF-8
    (b"\x1b]7;file://box:22/a%20b/%C3%BC\x07", Announced(host="box", path="/a b/\u00fc")),
    (b"\x1b]7;file://a/1\x07 text \x1b]2;title\x07\x1b]7;file://a/2\x07$ ", Announced(host="a", path="/2")),  # last
    (b"\x1b]7;file://a/1\x07\x1b]7;file://a/cut", Announced(host="a", path="/1")),  # the cut one is not yet said
]


@pytest.mark.parametrize(("output", "announced"), CASES)
def test_the_last_complete_announcement_is_taken(output: bytes, announced: Announced) -> None:
    assert last_announced(output) == announced


@pytest.mark.parametrize("output", [b"", b"plain text /home", b"\x1b]2;file://a/title\x07", b"\x1b]7;http://a/b\x07",
                                    b"\x1b]7;file://a\x07", b"\x1b]7;file://a/p%1b[2J\x07",
                                    b"\x1b]7;file://a/" + b"x" * 5000 + b"\x07", b"\x1b]77;file://a/b\x07"])
def test_anything_else_is_no_directory(output: bytes) -> None:
    assert last_announced(output) is None


def test_an_escape_that_is_no_utf8_is_kept_as_it_is() -> None:
    assert parse_url("file://h/%ff") == Announced(host="h", path="/\u00ff")
