"""A terminal screen model (sans-IO): what a terminal shows after a stream of output bytes.

Why: a byte window of the output cannot always rebuild the screen (a status row drawn once, the main
screen's text before a long alternate-screen session). The shellper feeds this model the same output
as its ring, so a reattaching terminal can be drawn the screen of the moment, and a Tower or
``shellper screen`` can read it as text.

No emulator library on PyPI was fast enough for Python 3.11 (bench/NOTES.md, "A screen model"), so this
is a small VT/xterm emulator written for throughput: printable runs are written into rows by slice
assignment, and a long run of plain text (no escape sequence but colours) is fast-forwarded to its
last lines when what scrolled away before them cannot be seen any more (shellper.core.terminal.flood).

Split as tmux splits its own: the tokens are read here and dispatched through the tables of
shellper.core.terminal.commands (tmux's input.c) to this class's writing operations (screen-write.c),
which change the cells of shellper.core.terminal.grid (grid.c) with a pen (shellper.core.terminal.pen);
shellper.core.terminal.render draws the model back as bytes.

Covered: main and alternate screens (47, 1047, 1048, 1049), cursor and DECSC/DECRC, scroll regions
(DECSTBM) and origin mode, autowrap with xterm's pending wrap, insert mode, G0/G1 charsets with DEC
line drawing, wide and combining characters, SGR (colours in every form, underline styles and colour),
OSC 8 hyperlinks, reverse video (DECSCNM), insert/delete of lines and characters, erase, tab stops (HTS,
TBC), REP, title (OSC 0/2), and a bounded scrollback of main-screen lines (:data:`SCROLLBACK_LINES`).
Queries are never answered: the model only watches. Not modelled: reflow on resize, left/right margins,
double-width lines, the title stack.
"""

from __future__ import annotations

import codecs
import re

from shellper.core.terminal import commands, flood
from shellper.core.terminal import parser as vtparse
from shellper.core.terminal.flood import plain_lines
from shellper.core.terminal.grid import plain_line, render_row
from shellper.core.terminal.pen import apply
from shellper.core.terminal.writer import MAX_COLS, MAX_ROWS, SCROLLBACK_LINES, ScreenWriter

__all__ = ["MAX_COLS", "MAX_ROWS", "SCROLLBACK_LINES", "Screen", "plain_line", "plain_lines"]

CARRY_MAX = 4096
"""Longest unfinished escape sequence kept between feeds; a longer one (a huge OSC) is dropped."""

FAST_FORWARD_MIN = 32 * 1024
"""Characters of plain text below which fast-forwarding is not tried (finding where to start costs)."""

_TOKEN = re.compile(
    # The grammar is shellper.core.terminal.parser's; the commonest well-formed sequences come first, as groups a
    # branch in run tells apart at once, and everything else (8-bit C1 forms, C0 controls inside a
    # sequence, aborted ones) begins at an ESC or a C1 control: its end is the grammar's (vtparse.token_end),
    # and it is classified by vtparse.parse. Both end a sequence in the same place. The grammar's own
    # pattern is not part of this one: it took 2 ms of the 2.5 this one's compiling costs on a session's
    # first attach, and output that needs it is rare.
    r"([^\x00-\x1f\x7f-\x9f]+)"  # 1: printable run
    r"|\x1b\[([\x3c-\x3f]?[\x30-\x3b]*)([\x20-\x2f]*)([\x40-\x7e])"  # 2, 3, 4: CSI params, intermediates, final
    r"|\x1b\]([^\x00-\x1f\x7f-\x9f]*)(?:\x07|\x1b\\)"  # 5: OSC
    r"|\x1b([\x20-\x2f]+)([\x30-\x7e])"  # 6, 7: ESC with intermediates (charsets, DECALN)
    r"|\x1b([\x30-\x4f\x51-\x57\x59\x5a\x5c\x60-\x7e])"  # 8: ESC final
    r"|([\x00-\x1a\x1c-\x1f\x7f])"  # 9: a C0 control (not ESC)
    r"|([\x1b\x80-\x9f])",  # 10: where any other token of the grammar begins
    re.S,
)

class Screen(ScreenWriter):
    """The screen a terminal of ``cols`` x ``rows`` shows after the bytes given to :meth:`feed`."""

    def __init__(self, cols: int = 80, rows: int = 24, scrollback_lines: int = SCROLLBACK_LINES) -> None:
        super().__init__(cols, rows, scrollback_lines)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._carry = ""

    # ----------------------------------------------------------------------------------------- input

    def feed(self, data: bytes) -> None:
        """Take output bytes (any split: escape sequences and UTF-8 characters may straddle feeds)."""
        if len(data) >= FAST_FORWARD_MIN and not self._carry and not self._decoder.getstate()[0]:
            data = flood.fast_forward_bytes(self, data)
        text, self._carry = vtparse.hold_back(self._carry + self._decoder.decode(data), CARRY_MAX)
        if len(text) >= FAST_FORWARD_MIN:
            start = flood.plain_tail(text)
            if len(text) - start >= FAST_FORWARD_MIN:
                if start:  # the state the plain tail starts from
                    self.run(text[:start])
                    text = text[start:]
                text = flood.fast_forward(self, text)
        self.run(text)

    def run(self, text: str) -> None:
        """Act on decoded text, whose end cuts no sequence short."""
        pos, size = 0, len(text)
        while pos < size:
            pos = self._run_from(text, pos)

    def _run_from(self, text: str, pos: int) -> int:
        """:meth:`run` from ``pos`` up to the end (its length) or past the first token that is not one of the
        common forms (where it went on from)."""
        csi, controls = commands.csi, commands.CONTROLS
        for m in _TOKEN.finditer(text, pos):
            run = m.group(1)
            if run is not None:
                self.draw(run)
                continue
            final = m.group(4)
            if final is not None:
                params = m.group(2)
                if final == "m" and not m.group(3) and not params.startswith(("<", "=", ">", "?")):
                    self.cursor.attr = apply(self.cursor.attr, params)  # SGR, the commonest, at once
                else:
                    csi(self, params, m.group(3), final)
            elif m.group(9) is not None:
                handler = controls.get(m.group(9))
                if handler is not None:
                    handler(self)
            elif m.group(8) is not None:
                commands.esc(self, "", m.group(8))
            elif m.group(7) is not None:
                commands.esc(self, m.group(6), m.group(7))
            elif m.group(5) is not None:
                commands.osc(self, m.group(5))
            elif m.group(10) is not None:
                start = m.start()
                end = vtparse.token_end(text, start)
                commands.sequence(self, text[start:end])
                return end
        return len(text)

    def skip(self, data: bytes, following: bytes, data_lines: int | None = None,
             following_lines: int | None = None) -> bool:
        """Take ``data`` without drawing it when ``following`` surely scrolls all of it away
        (shellper.core.terminal.flood.skip); False: nothing was done, and ``data`` is to be fed."""
        if self._carry or self._decoder.getstate()[0]:
            return False
        return flood.skip(self, data, following, data_lines, following_lines)
    # ---------------------------------------------------------------------------------------- output

    def lines(self) -> list[str]:
        """The screen as plain text, one string per row, trailing blanks removed."""
        return ["".join(chars).rstrip() for chars in self.grid.chars]

    def ansi_lines(self) -> list[str]:
        """The screen's rows with SGR (and OSC 8) sequences (each ends at default attributes)."""
        return [render_row(c, a) for c, a in zip(self.grid.chars, self.grid.attrs, strict=True)]

    def behind(self, count: int) -> list[str]:
        """What lies above the screen a person sees, the last ``count`` lines: the scrollback, and on the
        alternate screen, the main screen's rows after it (its empty rows at the bottom left out)."""
        lines = list(self.scrollback)
        if self.alternate:
            rows = [render_row(c, a) for c, a in zip(self.main.chars, self.main.attrs, strict=True)]
            while rows and not rows[-1]:
                rows.pop()
            lines += rows
        return lines[max(0, len(lines) - count):] if count else []

    def render(self, scrollback: int = 0, input_modes: bytes = b"", limit: int | None = None) -> bytes:
        """Bytes that take a terminal of this size, in any state, to this screen
        (shellper.core.terminal.render); ``input_modes`` (shellper.core.terminal.modes) go last. ``limit``:
        the oldest scrollback lines are left out to keep the whole within it, if they can."""
        from shellper.core.terminal.render import render
        return render(self, scrollback, None if limit is None else limit - len(input_modes)) + input_modes

    def text(self) -> str:
        return "\n".join(self.lines()).rstrip("\n") + "\n"
