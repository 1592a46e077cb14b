"""The pen (sans-IO): the attributes a terminal draws the next character with, as one typed value.

SGR parameters, in both the semicolon and the colon (ITU T.416) forms, are parsed into a :class:`Pen`
(:func:`apply`); a pen is written back as SGR (:func:`sgr`, from any state; :func:`change`, from one pen to
another). The pen also holds the OSC 8 hyperlink, which SGR 0 leaves alone (as xterm and VTE).

A pen is a tuple so that the screen model's rows of cells compare and count their pens in C, and pens are
interned by :func:`apply`'s cache, so cells drawn with the same pen usually hold the same object.
"""

from __future__ import annotations

from collections import namedtuple

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import NamedTuple

__all__ = ["DEFAULT", "Pen", "apply", "change", "erase_pen", "link_sequence", "sgr"]

# Attribute flags, each the SGR parameter that sets it.
BOLD, DIM, ITALIC, BLINK, REVERSE, HIDDEN, STRIKE, OVERLINE = 1, 2, 4, 8, 16, 32, 64, 128
_FLAG_CODES = ((BOLD, 1), (DIM, 2), (ITALIC, 3), (BLINK, 5), (REVERSE, 7), (HIDDEN, 8), (STRIKE, 9),
               (OVERLINE, 53))
_SET = {1: BOLD, 2: DIM, 3: ITALIC, 5: BLINK, 6: BLINK, 7: REVERSE, 8: HIDDEN, 9: STRIKE, 53: OVERLINE}
_RESET = {22: BOLD | DIM, 23: ITALIC, 25: BLINK, 27: REVERSE, 28: HIDDEN, 29: STRIKE, 55: OVERLINE}

# Colours: 0 is the default; the kind is in the bits above the value.
_BASIC, _PALETTE, _RGB = 1 << 8, 1 << 9, 1 << 24
"""``_BASIC | i``: SGR 30-37 / 90-97 (i 0-15); ``_PALETTE | n``: 38;5;n; ``_RGB | rrggbb``: 38;2;r;g;b."""

UNDERLINE_STYLES = 6
"""Underline styles (SGR 4:n): none, single, double, curly, dotted, dashed."""


if TYPE_CHECKING:
    class Pen(NamedTuple):
        """Cell attributes: flags (:data:`BOLD`...), underline style (0-5), colours (foreground, background,
        underline; see :data:`_BASIC`) and the OSC 8 hyperlink (``params;uri``, "" for none)."""

        flags: int = 0
        underline: int = 0
        fg: int = 0
        bg: int = 0
        ul_colour: int = 0
        link: str = ""
else:  # the same class without importing typing (what the screen model's first use costs a session)
    Pen = namedtuple("Pen", "flags underline fg bg ul_colour link", defaults=(0, 0, 0, 0, 0, ""))


DEFAULT = Pen()

_interned: dict[Pen, Pen] = {DEFAULT: DEFAULT}
_cache: dict[tuple[int, str], tuple[Pen, Pen]] = {}


def intern(pen: Pen) -> Pen:
    """The one pen equal to ``pen``: cells compare their pens by identity first, and a row of default pens
    is found in C."""
    if len(_interned) > 4096:
        _interned.clear()
        _interned[DEFAULT] = DEFAULT
    return _interned.setdefault(pen, pen)


def apply(pen: Pen, params: str) -> Pen:
    """The pen after SGR ``params`` (the text between ``CSI`` and ``m``), interned. Cached by the pen's
    identity (a tuple's hash is not kept, a string's is)."""
    key = (id(pen), params)
    hit = _cache.get(key)
    if hit is not None and hit[0] is pen:
        return hit[1]
    if len(_cache) > 4096:
        _cache.clear()
    new = intern(_apply(pen, params))
    _cache[key] = (pen, new)
    return new


def _apply(pen: Pen, params: str) -> Pen:
    flags, underline, fg, bg, ul, link = pen
    items = params.split(";") if params else ["0"]
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if ":" in item:  # sub-parameters: one parameter on its own, never the ones after it
            sub = item.split(":")
            code = _int(sub[0])
            if code == 4:
                style = _int(sub[1])
                underline = style if style < UNDERLINE_STYLES else underline
            elif code in (38, 48, 58):
                colour = _colon_colour(sub)
                if colour is not None:
                    fg, bg, ul = _set_colour(code, colour, fg, bg, ul)
            continue
        code = _int(item)
        if code in (38, 48, 58):
            colour, i = _semicolon_colour(items, i)
            if colour is None:
                break  # as xterm: what follows a colour it cannot read is not read either
            fg, bg, ul = _set_colour(code, colour, fg, bg, ul)
        elif code == 0:
            flags = underline = fg = bg = ul = 0
        elif code in _SET:
            flags |= _SET[code]
        elif code in _RESET:
            flags &= ~_RESET[code]
        elif code == 4:
            underline = 1
        elif code == 21:
            underline = 2
        elif code == 24:
            underline = 0
        elif 30 <= code <= 37 or 90 <= code <= 97:
            fg = _BASIC | (code - 30 if code < 90 else code - 82)
        elif 40 <= code <= 47 or 100 <= code <= 107:
            bg = _BASIC | (code - 40 if code < 100 else code - 92)
        elif code == 39:
            fg = 0
        elif code == 49:
            bg = 0
        elif code == 59:
            ul = 0
    return Pen(flags, underline, fg, bg, ul, link)


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _set_colour(code: int, colour: int, fg: int, bg: int, ul: int) -> tuple[int, int, int]:
    if code == 38:
        return colour, bg, ul
    if code == 48:
        return fg, colour, ul
    return fg, bg, colour


def _rgb(r: str, g: str, b: str) -> int | None:
    red, green, blue = _int(r), _int(g), _int(b)
    if max(red, green, blue) > 255:
        return None
    return _RGB | red << 16 | green << 8 | blue


def _semicolon_colour(items: list[str], i: int) -> tuple[int | None, int]:
    """``38;5;n`` or ``38;2;r;g;b`` (items from ``i``, after the 38): the colour and where reading goes on."""
    kind = items[i] if i < len(items) else ""
    if kind == "5" and i + 1 < len(items):
        n = _int(items[i + 1])
        return (_PALETTE | n if n < 256 else None), i + 2
    if kind == "2" and i + 3 < len(items):
        return _rgb(*items[i + 1:i + 4]), i + 4
    return None, i


def _colon_colour(sub: list[str]) -> int | None:
    """``38:5:n``, ``38:2::r:g:b`` (with a colour space id, maybe empty) or ``38:2:r:g:b`` (as tmux reads)."""
    kind = sub[1] if len(sub) > 1 else ""
    if kind == "5" and len(sub) > 2:
        n = _int(sub[2])
        return _PALETTE | n if n < 256 else None
    if kind == "2" and len(sub) >= 5:
        return _rgb(*sub[-3:]) if len(sub) == 5 else _rgb(*sub[3:6])
    return None


_erase_cache: dict[int, tuple[Pen, Pen]] = {}


def erase_pen(pen: Pen) -> Pen:
    """What erased cells take: the pen's background alone (xterm's back colour erase)."""
    if not pen.bg:
        return DEFAULT
    hit = _erase_cache.get(id(pen))
    if hit is not None and hit[0] is pen:
        return hit[1]
    if len(_erase_cache) > 1024:
        _erase_cache.clear()
    erased = intern(Pen(bg=pen.bg))
    _erase_cache[id(pen)] = (pen, erased)
    return erased


def _colour_sgr(base: int, colour: int) -> str:
    """A colour as SGR parameters: ``base`` is 38, 48 or 58. The underline colour is written in the colon
    form only: a terminal that does not know 58 skips a colon parameter whole, but would read ``58;2;1;2;3``
    as dim, bold and italic."""
    if colour & _RGB:
        r, g, b = colour >> 16 & 255, colour >> 8 & 255, colour & 255
        return f"58:2::{r}:{g}:{b}" if base == 58 else f"{base};2;{r};{g};{b}"
    if colour & _PALETTE:
        return f"58:5:{colour & 255}" if base == 58 else f"{base};5;{colour & 255}"
    index = colour & 255
    return str(base - 8 + index if index < 8 else base + 52 + index - 8)


def _underline_sgr(style: int) -> str:
    return "4" if style == 1 else f"4:{style}"


def params(pen: Pen) -> list[str]:
    """The SGR parameters that set ``pen`` on a default one: flags and underline in parameter order, then
    the colours (the hyperlink is not SGR)."""
    out = []
    for flag, code in _FLAG_CODES:
        if code == 5 and pen.underline:
            out.append(_underline_sgr(pen.underline))
        if pen.flags & flag:
            out.append(str(code))
    if pen.fg:
        out.append(_colour_sgr(38, pen.fg))
    if pen.bg:
        out.append(_colour_sgr(48, pen.bg))
    if pen.ul_colour:
        out.append(_colour_sgr(58, pen.ul_colour))
    return out


_sgr_cache: dict[Pen, str] = {}


def sgr(pen: Pen) -> str:
    """The SGR sequence that sets exactly ``pen``'s attributes from any state: ``CSI 0;... m``."""
    text = _sgr_cache.get(pen)
    if text is None:
        if len(_sgr_cache) > 4096:
            _sgr_cache.clear()
        text = _sgr_cache[pen] = "\x1b[" + ";".join(["0", *params(pen)]) + "m" if pen[:5] != DEFAULT[:5] \
            else "\x1b[0m"
    return text


def link_sequence(link: str) -> str:
    """The OSC 8 that starts hyperlink ``link`` (``params;uri``), or ends the one open when ""."""
    return f"\x1b]8;{link}\x1b\\" if link else "\x1b]8;;\x1b\\"


def change(old: Pen, new: Pen) -> str:
    """The shortest of: what turns ``old`` into ``new`` attribute by attribute, or a reset and ``new``;
    with the OSC 8 that changes the hyperlink when it differs."""
    link = link_sequence(new.link) if old.link != new.link else ""
    if old[:5] == new[:5]:
        return link
    full = sgr(new)
    removed, added = old.flags & ~new.flags, new.flags & ~old.flags
    if removed & (BOLD | DIM):  # 22 takes both off: the one kept is set again
        added |= new.flags & (BOLD | DIM)
    out = [str(code) for code, mask in _RESET.items() if removed & mask]
    out += [str(code) for flag, code in _FLAG_CODES if added & flag]
    if old.underline != new.underline:
        out.append(_underline_sgr(new.underline) if new.underline else "24")
    for base, was, now in ((38, old.fg, new.fg), (48, old.bg, new.bg), (58, old.ul_colour, new.ul_colour)):
        if was != now:
            out.append(_colour_sgr(base, now) if now else str(base + 1))
    diff = "\x1b[" + ";".join(out) + "m"
    return (diff if len(diff) < len(full) else full) + link
