"""shellper.core.terminal.text: one escape-sequence rule for ``tail --plain`` and the exit classifier, as a table."""

from __future__ import annotations

import pytest

from shellper.core.exits import last_error_line, normalise_error_line
from shellper.core.terminal.text import printable, strip_ansi, strip_escapes

ESCAPES = [
    # (terminal text, what is left of it)
    ("plain", "plain"),
    ("\x1b[1;31merror\x1b[0m", "error"),                 # CSI: SGR
    ("\x1b[?1049hscreen\x1b[?1049l", "screen"),          # CSI with a private prefix
    ("\x1b[2 qcursor", "cursor"),                        # CSI with an intermediate
    ("\x1b]0;title\x07after", "after"),                  # OSC ended by BEL
    ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC ended by ST
    ("\x1b]0;cut short\x1b[0mrest", "rest"),             # OSC cut short by the next escape
    ("\x1bPq#0;1;2\x1b\\dcs", "dcs"),                    # DCS
    ("\x1b_apc\x1b\\\x1b^pm\x1b\\\x1bXsos\x1b\\end", "end"),  # APC, PM, SOS
    ("\x1b7saved\x1b8", "saved"),                        # two-byte: save and restore the cursor
    ("\x1bcreset", "reset"),                             # two-byte: full reset
    ("\x1b=\x1b>keypad", "keypad"),                      # two-byte: keypad modes
    ("\x1b(Bcharset\x1b)0", "charset"),                  # nF: charset selection
    ("\x1bMup", "up"),                                   # two-byte: reverse index
    ("tab\tand é", "tab\tand é"),
    ("a\u009b2Jb", "ab"),                                 # 8-bit CSI (U+009B): erase display
    ("a\u009d52;c;aGk=\u009cb", "ab"),                   # 8-bit OSC 52 to 8-bit ST: a clipboard write
    ("a\x1b]52;c;aGk=\u009cb", "ab"),                    # 7-bit OSC, 8-bit ST
    ("a\u0085b\u0084c", "abc"),                           # other C1 controls (NEL, IND)
    ("a\x1b[6\x08nb", "ab"),                             # a C0 control inside a CSI does not end it
    ("a\x1b\x08[2Jb", "ab"),                             # nor between ESC and [
    ("a\x1b[2\x18Jb", "aJb"),                            # CAN aborts it: the J is text
    ("a\x1b]0;t\u009b6nb", "ab"),                        # a C1 control ends an OSC and starts its own
    ("bell\x07 and \x00nul", "bell and nul"),            # C0 controls but tab, LF and CR
]


@pytest.mark.parametrize(("text", "left"), ESCAPES)
def test_one_rule_for_text_and_bytes(text: str, left: str) -> None:
    assert strip_escapes(text) == left
    assert strip_ansi(text.encode()) == left.encode()


def test_the_bytes_version_drops_bel_bs_and_c1_and_keeps_bytes_that_are_not_utf8() -> None:
    assert strip_ansi(b"a\x07b\x08c\xc2\x9b2Jd\x9b2Je\xff\xe2\x80\x94") == b"abcde\xff\xe2\x80\x94"


@pytest.mark.parametrize(("text", "shown"), [
    ("plain, with spaces: é —", "plain, with spaces: é —"),
    ("evil\x1b]52;c;aGk=\x07", "evil\\x1b]52;c;aGk=\\x07"),
    ("a\u009b2J", "a\\x9b2J"),
    ("two\nlines\r", "two\\nlines\\r"),
    ("right\u202eleft", "right\\u202eleft"),  # a bidirectional override
    ("lone \udc9b byte", "lone \\udc9b byte"),
])
def test_printable_shows_every_control_as_its_escape(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_only_the_bytes_version_drops_carriage_returns() -> None:
    """``tail --plain`` shows lines; the classifier keeps the CRs, which tell it what a line overwrote."""
    assert strip_ansi(b"50%\r100%\r\n") == b"50%100%\n"
    assert strip_escapes("50%\r100%\r\n") == "50%\r100%\r\n"
    assert last_error_line("progress 50%\r\x1b[2Kfatal: gone\n") == "fatal: gone"


def test_the_classifier_reads_past_every_escape_in_the_table() -> None:
    for text, left in ESCAPES:
        assert last_error_line(f"{text}\n") == left
        assert normalise_error_line(text) == normalise_error_line(left)
