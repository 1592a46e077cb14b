"""``shellper screen --html``: a session's screen (and scrollback) as one self-contained HTML document, colours
and attributes kept, for sharing what a program did. What the program wrote is text in it, never markup: every
run is HTML-escaped, every control character shown as its escape, every sequence but SGR dropped, and the
document's Content-Security-Policy forbids scripts besides."""

from __future__ import annotations

import html
import re

from shellper.core.terminal import parser as vtparse
from shellper.core.terminal import pen as pens
from shellper.core.terminal.text import printable

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.protocol import wire

FOREGROUND, BACKGROUND = "#d0d0d0", "#1c1c1c"
"""The default colours: a dark terminal's."""
BASIC = ("#000000", "#cd0000", "#00cd00", "#cdcd00", "#0000ee", "#cd00cd", "#00cdcd", "#e5e5e5",
         "#7f7f7f", "#ff0000", "#00ff00", "#ffff00", "#5c5cff", "#ff00ff", "#00ffff", "#ffffff")
"""xterm's 16 colours."""
_CUBE = (0, 95, 135, 175, 215, 255)
_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{title}</title>
<style>
body {{ margin: 0; background: {bg}; color: {fg}; }}
pre {{ margin: 0; padding: 1em; font: 14px/1.25 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }}
</style>
</head>
<body>
<pre>{body}</pre>
</body>
</html>
"""


def colour(value: int) -> str | None:
    """A pen's colour as CSS, None for the default (pen.py's encoding: basic, palette or RGB in the low bits)."""
    if not value:
        return None
    if value & pens._RGB:
        return f"#{value & 0xFFFFFF:06x}"
    index = value & 255
    if value & pens._BASIC or index < 16:
        return BASIC[index & 15]
    if index < 232:
        index -= 16
        r, g, b = _CUBE[index // 36], _CUBE[index // 6 % 6], _CUBE[index % 6]
        return f"#{r:02x}{g:02x}{b:02x}"
    grey = 8 + 10 * (index - 232)
    return f"#{grey:02x}{grey:02x}{grey:02x}"


def style(pen: pens.Pen) -> str:
    """The CSS of a pen's attributes ("" for the default pen)."""
    fg, bg = colour(pen.fg), colour(pen.bg)
    if pen.flags & pens.REVERSE:
        fg, bg = bg or BACKGROUND, fg or FOREGROUND
    if pen.flags & pens.BOLD and pen.fg & pens._BASIC and (pen.fg & 255) < 8:
        fg = BASIC[(pen.fg & 255) + 8]  # bold brightens the eight basic colours, as xterm draws them
    rules = []
    if fg:
        rules.append(f"color:{fg}")
    if bg:
        rules.append(f"background:{bg}")
    if pen.flags & pens.BOLD:
        rules.append("font-weight:bold")
    if pen.flags & pens.DIM:
        rules.append("opacity:.6")
    if pen.flags & pens.ITALIC:
        rules.append("font-style:italic")
    lines = [name for flag, name in ((pens.STRIKE, "line-through"), (pens.OVERLINE, "overline")) if pen.flags & flag]
    if pen.underline:
        lines.insert(0, "underline")
    if lines:
        rules.append(f"text-decoration:{' '.join(lines)}")
    if pen.flags & pens.HIDDEN:
        rules.append("visibility:hidden")
    return ";".join(rules)


def line_html(line: str) -> str:
    """One row of SGR-coloured text as HTML: spans for the runs whose pen is not the default."""
    out: list[str] = []
    pen = pens.DEFAULT
    for m in re.finditer(vtparse.TOKEN, line):
        seq = vtparse.parse(m.group(0))
        if seq.kind is vtparse.Kind.TEXT:
            text = html.escape(printable(seq.data), quote=True)
            css = style(pen)
            out.append(f'<span style="{css}">{text}</span>' if css else text)
        elif (seq.kind is vtparse.Kind.CSI and seq.final == "m" and seq.dispatched and not seq.private
              and not seq.intermediates):
            pen = pens.apply(pen, seq.params)
        # anything else (a hyperlink, a control) is left out: the document shows text
    return "".join(out)


def document(reply: wire.ScreenReply, name: str) -> str:
    """The screen of ``reply`` (asked in the ``ansi`` format), scrollback first, as a whole HTML page."""
    lines = [*reply.scrollback, *reply.lines]
    while lines and not lines[-1]:
        lines.pop()
    title = f"shellper: {name}" + (f" ({reply.title})" if reply.title else "")
    return _PAGE.format(title=html.escape(printable(title), quote=True), fg=FOREGROUND, bg=BACKGROUND,
                        body="\n".join(line_html(line) for line in lines))
