"""shellper.core.text: one escape-sequence rule for ``tail --plain`` and the exit classifier, as a table."""

from __future__ import annotations

import pytest

from shellper.core.exits import last_error_line, normalise_error_line
from shellper.core.text import strip_ansi, strip_escapes

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
]


@pytest.mark.parametrize(("text", "left"), ESCAPES)
def test_one_rule_for_text_and_bytes(text: str, left: str) -> None:
    assert strip_escapes(text) == left
    assert strip_ansi(text.encode()) == left.encode()


def test_only_the_bytes_version_drops_carriage_returns() -> None:
    """``tail --plain`` shows lines; the classifier keeps the CRs, which tell it what a line overwrote."""
    assert strip_ansi(b"50%\r100%\r\n") == b"50%100%\n"
    assert strip_escapes("50%\r100%\r\n") == "50%\r100%\r\n"
    assert last_error_line("progress 50%\r\x1b[2Kfatal: gone\n") == "fatal: gone"


def test_the_classifier_reads_past_every_escape_in_the_table() -> None:
    for text, left in ESCAPES:
        assert last_error_line(f"{text}\n") == left
        assert normalise_error_line(text) == normalise_error_line(left)
