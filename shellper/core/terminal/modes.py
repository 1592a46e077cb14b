"""Terminal modes the child has switched on, by absolute output offset (sans-IO).

Why: a replay that starts after the child entered the alternate screen, enabled mouse
reporting or bracketed paste replays into a terminal in the wrong state (a trim of the ring's
front can drop the alt-screen-enter). And a client that detaches from a TUI must not leave the
user's terminal in mouse or alt-screen mode (peers have shipped that bug: bench/NOTES.md,
"Incidents behind the defaults").

:class:`ModeTracker` watches the output stream cheaply (a C-level search for ESC, then one search the
grammar makes, on the bytes themselves unless they hold a C1 control) and keeps a bounded history of mode
changes with their offsets, so it can say which modes were in effect at any offset still in the ring
(:meth:`ModeTracker.preamble`) and how to switch them off (:meth:`ModeTracker.reset_sequence`).

Also tracked, so that a detach leaves nothing on (as tmux): modifyOtherKeys, the kitty keyboard
stack, pushed titles (``CSI 22 t``, popped again at detach), synchronized output, the cursor style,
the scroll region and origin mode, and every mouse mode on its own (terminals differ on whether
setting one mouse mode replaces another).

Not tracked (documented limits): OSC 7 cwd, colours, charsets, SGR, ``CSI ? Pm r`` (XTRESTORE); the
title is not restored on detach (the terminal's own title is unknown; pushed titles are popped).
The flags of kitty keyboard entries below the top are not known: a preamble pushes the top's.
"""

from __future__ import annotations

import bisect
import functools
import re

from shellper.core.errors import ShellperError
from shellper.core.structs import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import AnyStr

    from shellper.core.terminal import parser

__all__ = [
    "CARRY_MAX",
    "CHECKPOINT_BYTES",
    "FULL_RESET_SEQUENCE",
    "MAX_HISTORY",
    "TITLE_MAX",
    "ModeOffsetError",
    "ModeTracker",
    "TerminalModes",
]

TITLE_MAX = 1024
"""Longest window title tracked (bytes); a longer OSC 0/2 is ignored."""

CARRY_MAX = TITLE_MAX + 16
"""Most bytes of an unfinished sequence kept between :meth:`ModeTracker.feed` calls."""

MAX_HISTORY = 1024
"""Most mode changes remembered after a :meth:`ModeTracker.feed`. Beyond it the oldest are
folded into the base state (down to half). An offset older than the fold is then answered by
scanning the output again from the checkpoint before it (:meth:`ModeTracker.state_at` with a
``read``), or, without the bytes, approximated by the state at the fold."""

CHECKPOINT_BYTES = 256 * 1024
"""Output between two checkpoints (states at known offsets) of a tracker that keeps them: the most
output :meth:`ModeTracker.state_at` scans again to answer an offset older than its history."""

STACK_MAX = 255
"""Deepest title or kitty keyboard stack counted (a program pushing without end is not followed)."""


@record(frozen=True, slots=True)
class TerminalModes:
    """Mode state; the defaults are a freshly reset terminal.

    ``mouse_tracking`` is the active protocol (0 = off, else 9/1000/1002/1003) and
    ``mouse_encoding`` the coordinate encoding (0 = default, else 1005/1006/1015): like xterm
    and xterm.js, setting one replaces the previous and resetting any of them turns it off.
    ``mouse_modes`` is every mouse mode set and not reset by its own number, for terminals
    that keep each on its own (a detach switches all of them off). ``scroll_region`` is the
    DECSTBM parameters (0 = the default) or None for the whole screen; ``title_stack`` and
    ``kitty_keyboard`` count the entries pushed and not popped; ``kitty_flags`` are the top's.
    """

    alt_screen: bool = False
    cursor_visible: bool = True
    bracketed_paste: bool = False
    mouse_tracking: int = 0
    mouse_encoding: int = 0
    focus_reporting: bool = False
    app_cursor_keys: bool = False
    app_keypad: bool = False
    title: bytes | None = None
    mouse_modes: tuple[int, ...] = ()
    sync_output: bool = False
    modify_other_keys: int = 0
    kitty_keyboard: int = 0
    kitty_flags: int = 0
    title_stack: int = 0
    cursor_style: int = 0
    scroll_region: tuple[int, int] | None = None
    origin_mode: bool = False

    def enable_sequence(self, keep_cursor: bool = False) -> bytes:
        """Sequences that take a default terminal to this state (non-default modes only).

        Synchronized output is not switched on: the replay that follows ends the frame, and a
        terminal left waiting for that end would show nothing. ``keep_cursor``: output continues where
        the terminal's cursor is (after a gap), so setting the scroll region does not move it home."""
        out = []
        if self.scroll_region is not None:  # first: setting it moves the cursor home
            region = b"\x1b[%d;%dr" % self.scroll_region
            out.append(b"\x1b7" + region + b"\x1b8" if keep_cursor else region)
        if self.origin_mode:
            out.append(b"\x1b[?6h")
        out += [b"\x1b[22;0t"] * self.title_stack  # pushed before the current title was set
        if self.title is not None:
            out.append(b"\x1b]2;" + self.title + b"\x07")
        # Every mouse mode on its own first, then the active ones, so a terminal where the last set wins
        # ends with the active protocol and encoding.
        out += (b"\x1b[?%dh" % mode for mode in self.mouse_modes
                if mode not in (self.mouse_tracking, self.mouse_encoding))
        out += (_switch(on, getattr(self, name)) for name, (on, _) in _SWITCHES.items()
                if getattr(self, name) != getattr(_DEFAULT_MODES, name))
        if self.modify_other_keys:
            out.append(b"\x1b[>4;%dm" % self.modify_other_keys)
        if self.kitty_keyboard:
            out += [b"\x1b[>%du" % self.kitty_flags] * self.kitty_keyboard
        elif self.kitty_flags:
            out.append(b"\x1b[=%d;1u" % self.kitty_flags)
        if self.cursor_style:
            out.append(b"\x1b[%d q" % self.cursor_style)
        return b"".join(out)

    def disable_sequence(self) -> bytes:
        """Sequences that take a terminal in this state back to defaults (the title excepted; pushed
        titles are popped)."""
        out = []
        if self.origin_mode:
            out.append(b"\x1b[?6l")
        if self.scroll_region is not None:  # the cursor kept: resetting the region moves it home
            out.append(b"\x1b7\x1b[r\x1b8")
        out += (b"\x1b[?%dl" % mode for mode in self.mouse_modes
                if mode not in (self.mouse_tracking, self.mouse_encoding))
        out += (_switch(_SWITCHES[name][1], getattr(self, name)) for name in _DISABLE_ORDER
                if getattr(self, name) != getattr(_DEFAULT_MODES, name))
        if self.modify_other_keys:
            out.append(b"\x1b[>4m")
        if self.kitty_keyboard:
            out.append(b"\x1b[<%du" % self.kitty_keyboard)
        if self.kitty_flags and not self.kitty_keyboard:
            out.append(b"\x1b[=0;1u")
        if self.sync_output:
            out.append(b"\x1b[?2026l")
        if self.cursor_style:
            out.append(b"\x1b[0 q")
        out += [b"\x1b[23;0t"] * self.title_stack
        return b"".join(out)

    def resize_sequence(self) -> bytes:
        """What a terminal does itself when resized, for one that is shown this state's output drawn for
        another size: the scroll region back to the whole screen, the cursor kept (as xterm)."""
        return b"\x1b7\x1b[r\x1b8" if self.scroll_region is not None else b""


_DEFAULT_MODES = TerminalModes()

_SWITCHES = {
    "alt_screen": (b"\x1b[?1049h", b"\x1b[?1049l"),
    "app_cursor_keys": (b"\x1b[?1h", b"\x1b[?1l"),
    "app_keypad": (b"\x1b=", b"\x1b>"),
    "bracketed_paste": (b"\x1b[?2004h", b"\x1b[?2004l"),
    "mouse_tracking": (b"\x1b[?%dh", b"\x1b[?%dl"),
    "mouse_encoding": (b"\x1b[?%dh", b"\x1b[?%dl"),
    "focus_reporting": (b"\x1b[?1004h", b"\x1b[?1004l"),
    "cursor_visible": (b"\x1b[?25l", b"\x1b[?25h"),
}
"""Each switch a TerminalModes field stands for: the sequence that leaves its default, the one that
returns to it (``%d``: the mode's number), in the order :meth:`TerminalModes.enable_sequence` writes them."""
_DISABLE_ORDER = ("mouse_tracking", "mouse_encoding", "focus_reporting", "bracketed_paste", "app_cursor_keys",
                  "app_keypad", "alt_screen", "cursor_visible")
"""The order :meth:`TerminalModes.disable_sequence` undoes them: input modes first, the screen last."""


def _switch(sequence: bytes, value: object) -> bytes:
    return sequence % value if b"%d" in sequence else sequence


FULL_RESET_SEQUENCE = (
    # Origin mode off and the whole screen as scroll region, the cursor kept: each alone moves it home, and
    # output may go on where it is (after a gap). DECRC restores origin mode as DECSC found it, so a session
    # that had it on keeps it on, which with a whole-screen region changes nothing.
    b"\x1b7\x1b[?6l\x1b[r\x1b8"
    b"\x1b[?9l\x1b[?1000l\x1b[?1001l\x1b[?1002l\x1b[?1003l"  # mouse tracking off
    b"\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1016l"  # mouse encodings off
    b"\x1b[?1004l\x1b[?2004l"  # focus reporting, bracketed paste off
    b"\x1b[?1l\x1b>"  # normal cursor keys, numeric keypad
    b"\x1b[>4m\x1b[<%du\x1b[=0;1u" % STACK_MAX  # modifyOtherKeys off, kitty keyboard stack emptied
    + b"\x1b[?2026l"  # synchronized output ended
    b"\x1b[?1049l\x1b[?25h\x1b[0 q"  # main screen (restores the cursor saved by ?1049h), cursor shown
)
"""Switches every tracked mode to its default whatever the state (not RIS: keeps the screen). Pushed
titles are not popped: how many is unknown.

For a client that cannot know the state, e.g. after an uncontrolled disconnect. Note that
``?1049l`` also restores the cursor position saved when the alternate screen was entered."""

_MODE_SEQUENCES = {
    # What the grammar (shellper.core.terminal.parser) is asked to find: one search over the data finds
    # every sequence that may change a tracked mode, and the common ones (cursor moves, SGR, erases: no
    # private marker, another final) fail at their final in C (bench/NOTES.md, "Mode tracking for the
    # detach reset").
    "csi_finals": "rt",  # DECSTBM, XTWINOPS (the title stack)
    "marked_csi_finals": "hlpumnq",  # DEC modes, DECSTR, kitty keyboard, XTMODKEYS, DECSCUSR
    "esc_finals": "=>c",  # DECKPAM, DECKPNM, RIS
    "osc_prefixes": ("0;", "2;"),  # the title
}
_PARAMS_MAX = 64
"""Longest parameter string followed (a hostile number costs nothing)."""


_parser_loaded = False


def _load_parser() -> None:
    """Import the grammar (:mod:`shellper.core.terminal.parser`) into this module on first use: a session whose
    output has no ESC never loads it, and an ``import`` statement in every feed would cost more than the flag."""
    global _parser_loaded, parser
    from shellper.core.terminal import parser

    _parser_loaded = True


@functools.lru_cache(maxsize=1)
def _mode_pattern() -> re.Pattern[str]:
    """The search for :data:`_MODE_SEQUENCES` in text that may hold C1 controls."""
    if not _parser_loaded:
        _load_parser()
    return re.compile(parser.pattern(**_MODE_SEQUENCES))  # type: ignore[arg-type]


@functools.lru_cache(maxsize=1)
def _mode_pattern_bytes() -> re.Pattern[bytes]:
    """The same search, made by the grammar for bytes that hold no C1 control (:func:`parser.c1_free`, most
    output): the old tracker's bytes regex, derived."""
    if not _parser_loaded:
        _load_parser()
    return re.compile(parser.pattern(**_MODE_SEQUENCES, eight_bit=False).encode("ascii"))  # type: ignore[arg-type]


class ModeOffsetError(ShellperError, ValueError):
    """Output was fed at an offset before the end of what was already fed."""

    def __init__(self, offset: int, expected: int) -> None:
        super().__init__(f"feed at offset {offset}, but output up to {expected} was already fed")
        self.offset = offset
        self.expected = expected


# Internally a state is (flags, title): flags packs every mode into one int, so applying a
# sequence is two bit operations and the hot path never builds dataclasses.
_ALT, _HIDDEN, _PASTE, _FOCUS, _APP_CURSOR, _APP_KEYPAD, _SYNC, _ORIGIN = 1, 2, 4, 8, 16, 32, 64, 128
_TRACKING_SHIFT, _TRACKING_MASK = 8, 0x700
_ENCODING_SHIFT, _ENCODING_MASK = 12, 0x3000
_TRACKING = (0, 9, 1000, 1002, 1003)
_ENCODING = (0, 1005, 1006, 1015)
_MOK_SHIFT, _MOK_MASK = 16, 0x3 << 16  # modifyOtherKeys 0..3
_MOUSE_MODES = (9, 1000, 1001, 1002, 1003, 1005, 1006, 1015, 1016)
_MOUSE_SHIFT = 18  # one bit per mouse mode, in _MOUSE_MODES order (bits 18..26)
_MOUSE_BIT = {mode: 1 << (_MOUSE_SHIFT + i) for i, mode in enumerate(_MOUSE_MODES)}
_STYLE_SHIFT, _STYLE_MASK = 28, 0x7 << 28  # DECSCUSR 0..6
_TITLES_SHIFT, _TITLES_MASK = 32, 0xFF << 32  # title stack depth
_KITTY_SHIFT, _KITTY_MASK = 40, 0xFF << 40  # kitty keyboard stack depth
_KFLAGS_SHIFT, _KFLAGS_MASK = 48, 0x1F << 48  # kitty keyboard flags of the top entry
_TOP_SHIFT, _BOTTOM_SHIFT, _MARGIN_MASK = 56, 68, 0xFFF  # DECSTBM parameters (0: default)
_REGION_MASK = (_MARGIN_MASK << _TOP_SHIFT) | (_MARGIN_MASK << _BOTTOM_SHIFT)
_REGION_SET = 1 << 80  # a region is set (its parameters may both be defaults, as in CSI ;24r)
_RIS = -1  # the mask of a full reset: clears every flag (and, specially, the title)

_FLAG_OF_MODE = {47: _ALT, 1047: _ALT, 1049: _ALT, 2004: _PASTE, 1004: _FOCUS, 1: _APP_CURSOR,
                 66: _APP_KEYPAD, 2026: _SYNC, 6: _ORIGIN}  # 66 = DECNKM, the same switch as DECKPAM/DECKPNM

_State = tuple[int, "bytes | None"]


def _to_modes(flags: int, title: bytes | None) -> TerminalModes:
    top, bottom = (flags >> _TOP_SHIFT) & _MARGIN_MASK, (flags >> _BOTTOM_SHIFT) & _MARGIN_MASK
    return TerminalModes(
        alt_screen=bool(flags & _ALT),
        cursor_visible=not flags & _HIDDEN,
        bracketed_paste=bool(flags & _PASTE),
        mouse_tracking=_TRACKING[(flags & _TRACKING_MASK) >> _TRACKING_SHIFT],
        mouse_encoding=_ENCODING[(flags & _ENCODING_MASK) >> _ENCODING_SHIFT],
        focus_reporting=bool(flags & _FOCUS),
        app_cursor_keys=bool(flags & _APP_CURSOR),
        app_keypad=bool(flags & _APP_KEYPAD),
        title=title,
        mouse_modes=tuple(mode for mode, bit in _MOUSE_BIT.items() if flags & bit),
        sync_output=bool(flags & _SYNC),
        modify_other_keys=(flags & _MOK_MASK) >> _MOK_SHIFT,
        kitty_keyboard=(flags & _KITTY_MASK) >> _KITTY_SHIFT,
        kitty_flags=(flags & _KFLAGS_MASK) >> _KFLAGS_SHIFT,
        title_stack=(flags & _TITLES_MASK) >> _TITLES_SHIFT,
        cursor_style=(flags & _STYLE_MASK) >> _STYLE_SHIFT,
        scroll_region=(top, bottom) if flags & _REGION_SET else None,
        origin_mode=bool(flags & _ORIGIN),
    )


def _params(text: bytes) -> list[int]:
    """CSI parameters, an empty one as 0 (each capped, so a hostile number costs nothing)."""
    return [min(int(p), 0xFFF) if p else 0 for p in text.split(b";")]


_RELATIVE = (0, 0, True)


@functools.lru_cache(maxsize=512)
def _effect(seq: bytes) -> tuple[int, int, bool]:
    """(mask, value, relative) of a matched non-title sequence: flags become (flags & ~mask) | value, or, for
    a relative one (a title or kitty keyboard push or pop), what :func:`_stack` makes of them.

    Every other sequence sets modes to fixed values whatever the previous state, which is
    what makes this cacheable per distinct sequence. A match that changes nothing is (0, 0, False).
    """
    if seq == b"\x1bc":
        return _RIS, 0, False
    if seq == b"\x1b=":
        return _APP_KEYPAD, _APP_KEYPAD, False
    if seq == b"\x1b>":
        return _APP_KEYPAD, 0, False
    prefix, final = seq[2:3], seq[-1:]
    if prefix in (b"?", b"!", b"<", b">", b"="):
        body = seq[3:-1]
    else:
        prefix, body = b"", seq[2:-1]
    if final == b"q":  # DECSCUSR (CSI Ps SP q)
        if prefix:
            return 0, 0, False
        return _STYLE_MASK, min(_params(body[:-1])[0], 6) << _STYLE_SHIFT, False
    if prefix == b"!":  # DECSTR resets DECTCEM, DECCKM, DECNKM, DECOM and the margins
        if seq != b"\x1b[!p":
            return 0, 0, False
        return _HIDDEN | _APP_CURSOR | _APP_KEYPAD | _ORIGIN | _REGION_MASK | _REGION_SET, 0, False
    if final == b"u":  # kitty keyboard: push, pop, set
        return _RELATIVE if prefix in (b"<", b">", b"=") else (0, 0, False)
    if final == b"t":  # XTWINOPS: only the title stack is followed
        return _RELATIVE if not prefix and body[:2] in (b"22", b"23") and body[2:3] in (b"", b";") else (0, 0, False)
    if final == b"m" or final == b"n":  # XTMODKEYS: only modifyOtherKeys (resource 4) is followed
        if prefix != b">":
            return 0, 0, False
        params = _params(body)
        if final == b"n" or seq == b"\x1b[>m":  # CSI > 4 n disables it; CSI > m resets every resource
            return (_MOK_MASK, 0, False) if final == b"m" or params[0] == 4 else (0, 0, False)
        if params[0] != 4:
            return 0, 0, False
        return _MOK_MASK, min(params[1] if len(params) > 1 else 0, 3) << _MOK_SHIFT, False
    if final == b"r":  # DECSTBM: no parameters (or 0s) is the whole screen
        if prefix:
            return 0, 0, False  # CSI ? Pm r: XTRESTORE, not followed
        params = [*_params(body), 0, 0][:2]
        if params[0] <= 1 and params[1] == 0:
            return _REGION_MASK | _REGION_SET, 0, False
        return (_REGION_MASK | _REGION_SET,
                _REGION_SET | params[0] << _TOP_SHIFT | params[1] << _BOTTOM_SHIFT, False)
    if prefix != b"?" or final not in (b"h", b"l"):
        return 0, 0, False
    on = final == b"h"
    mask = value = 0
    for param in body.split(b";"):
        if not param:
            continue
        mode = int(param)
        if mode in _MOUSE_BIT:  # each on its own, besides the active protocol and encoding below
            bit = _MOUSE_BIT[mode]
            mask |= bit
            value = (value & ~bit) | (bit * on)
        if mode in _FLAG_OF_MODE:
            field, bits = _FLAG_OF_MODE[mode], _FLAG_OF_MODE[mode] * on
        elif mode == 25:
            field, bits = _HIDDEN, _HIDDEN * (not on)
        elif mode in _TRACKING and mode:
            field, bits = _TRACKING_MASK, _TRACKING.index(mode) << _TRACKING_SHIFT if on else 0
        elif mode in _ENCODING and mode:
            field, bits = _ENCODING_MASK, _ENCODING.index(mode) << _ENCODING_SHIFT if on else 0
        else:
            continue
        mask |= field
        value = (value & ~field) | bits
    return mask, value, False


def _stack(flags: int, seq: bytes) -> int:
    """Flags after a title push/pop or a kitty keyboard stack change (relative: not cacheable)."""
    if seq.endswith(b"t"):
        depth = (flags & _TITLES_MASK) >> _TITLES_SHIFT
        depth = min(depth + 1, STACK_MAX) if seq[2:4] == b"22" else max(depth - 1, 0)
        return (flags & ~_TITLES_MASK) | depth << _TITLES_SHIFT
    kind, params = seq[2:3], _params(seq[3:-1])
    depth = (flags & _KITTY_MASK) >> _KITTY_SHIFT
    kflags = (flags & _KFLAGS_MASK) >> _KFLAGS_SHIFT
    if kind == b">":  # push
        depth, kflags = min(depth + 1, STACK_MAX), params[0] & 0x1F
    elif kind == b"<":  # pop n (default 1)
        depth = max(depth - max(params[0], 1), 0)
        kflags = kflags if depth else 0  # the flags below the top are not known
    else:  # = flags ; mode: 1 set, 2 add, 3 remove
        how = params[1] if len(params) > 1 else 1
        value = params[0] & 0x1F
        kflags = value if how <= 1 else kflags | value if how == 2 else kflags & ~value
    return (flags & ~(_KITTY_MASK | _KFLAGS_MASK)) | depth << _KITTY_SHIFT | kflags << _KFLAGS_SHIFT


def _read(token: str) -> tuple[bytes | None, bytes | None]:
    """What a sequence found by :func:`_mode_pattern` is to the tracker: (its 7-bit form without C0 controls,
    as :func:`_effect` reads it, or None for one that changes nothing: not dispatched, or not a form a
    tracked mode is set with; the title an OSC 0 or 2 sets, or None: one longer than :data:`TITLE_MAX`
    is ignored)."""
    seq = parser.parse(token)
    if seq.kind is parser.Kind.OSC:
        title = seq.data[2:].encode("utf-8", "surrogateescape")
        return None, (title if len(title) <= TITLE_MAX else None)
    if not seq.dispatched:
        return None, None
    if seq.kind is parser.Kind.ESC:
        return (b"\x1b" + seq.final.encode() if not seq.intermediates else None), None
    params, inter = seq.params, seq.intermediates
    if ":" in params or len(params) > _PARAMS_MAX:
        return None, None
    if inter == "!":  # DECSTR, read by _effect as a prefix
        return b"\x1b[!" + params.encode() + seq.final.encode(), None
    if inter not in ("", " ") or (inter == " ") != (seq.final == "q"):
        return None, None
    return f"\x1b[{seq.private}{params}{inter}{seq.final}".encode(), None


_Effect = tuple[int, int, "bytes | None", "bytes | None"]
"""What a sequence the tracker's search finds does: (mask, value, stacked, title). Flags become ``(flags &
~mask) | value``; or, with ``stacked`` (a title or kitty keyboard push or pop, relative), what :func:`_stack`
makes of them; or the title becomes ``title``."""
_NO_EFFECT: _Effect = (0, 0, None, None)


@functools.lru_cache(maxsize=512)
def _effect_of(token: str) -> _Effect:
    """What ``token`` (a match of the tracker's search) does (:data:`_Effect`), by the grammar's reading of it."""
    if not _parser_loaded:
        _load_parser()
    canonical, title = _read(token)
    if title is not None:
        return 0, 0, None, title
    if canonical is None:
        return _NO_EFFECT
    mask, value, relative = _effect(canonical)
    return (0, 0, canonical, None) if relative else (mask, value, None, None)


@functools.lru_cache(maxsize=512)
def _effect_of_bytes(token: bytes) -> _Effect:
    """:func:`_effect_of` for a match on bytes (one cache lookup per sequence: most repeat)."""
    return _effect_of(token.decode("utf-8", "surrogateescape"))


def _follow(flags: int, title: bytes | None, matches: Iterable[re.Match[AnyStr]],
            effect_of: Callable[[AnyStr], _Effect], where: Callable[[int], int],
            offsets: list[int], states: list[_State]) -> _State:
    """Apply each match's effect from state ``(flags, title)``; for each that changes the state, note where it
    takes effect (``where`` of the match's end) and the state after it. Returns the last state."""
    for m in matches:
        mask, value, stacked, new_title = effect_of(m.group())
        if new_title is not None:
            if new_title == title:
                continue
            title = new_title
        elif stacked is not None:
            new_flags = _stack(flags, stacked)
            if new_flags == flags:
                continue
            flags = new_flags
        else:
            new_flags = (flags & ~mask) | value
            if mask == _RIS:  # a full reset forgets the title too
                if new_flags == flags and title is None:
                    continue
                title = None
            elif new_flags == flags:
                continue
            flags = new_flags
        offsets.append(where(m.end()))
        states.append((flags, title))
    return flags, title


def _byte_offsets(text: str, base: int) -> Callable[[int], int]:
    """The offset of the byte at each index into ``text`` (decoded output at offset ``base``), asked for in
    increasing order: each costs the encoding of the text since the one before."""
    seen = [0, base]  # index, offset

    def where(index: int) -> int:
        seen[1] += len(text[seen[0]:index].encode("utf-8", "surrogateescape"))
        seen[0] = index
        return seen[1]

    return where


def _scan(flags: int, title: bytes | None, data: bytes, offset: int, offsets: list[int], states: list[_State],
          ) -> tuple[_State, bytes]:
    """Follow the sequences of output ``data`` (at ``offset``) that its end does not cut short (see
    :func:`_follow`); returns the last state and the bytes from the first that it does (to be read with what
    follows). On the bytes when they hold no C1 control (most output: nothing is decoded), else on the text."""
    if not _parser_loaded:
        _load_parser()
    held = 0 if data.isascii() else parser.partial_char(data)
    body = data[:len(data) - held] if held else data
    if body.isascii() or parser.c1_free(body):
        cut = parser.unfinished_bytes(body)
        matches = _mode_pattern_bytes().finditer(body, 0, len(body) if cut < 0 else cut)
        state = _follow(flags, title, matches, _effect_of_bytes, offset.__add__, offsets, states)
        return state, (body[cut:] if cut >= 0 else b"") + data[len(body):]
    text = parser.decode(body)
    cut = parser.unfinished(text)
    found = _mode_pattern().finditer(text, 0, len(text) if cut < 0 else cut)
    state = _follow(flags, title, found, _effect_of, _byte_offsets(text, offset), offsets, states)
    return state, (parser.encode(text[cut:]) if cut >= 0 else b"") + data[len(body):]


class ModeTracker:
    """Tracks mode changes in the output stream with the offset where each takes effect.

    A change takes effect at the offset just past its sequence. History is a base state
    (valid at ``base_offset``) plus up to :data:`MAX_HISTORY` ``(offset, state)`` entries;
    :meth:`forget_before` folds entries the ring no longer needs into the base. With
    ``checkpoints``, the state is also kept every :data:`CHECKPOINT_BYTES` of output, so that
    :meth:`state_at` can answer an offset older than the history exactly from the output itself.
    """

    __slots__ = ("_base", "_base_offset", "_carry", "_checkpoint_due", "_cp_offsets", "_cp_states",
                 "_fed_end", "_offsets", "_states")

    def __init__(self, checkpoints: bool = False) -> None:
        self._base: _State = (0, None)  # (flags, title)
        self._base_offset = 0
        self._offsets: list[int] = []
        self._states: list[_State] = []
        self._carry = b""
        self._fed_end: int | None = None
        self._cp_offsets: list[int] = []
        self._cp_states: list[_State] = []
        self._checkpoint_due = 0 if checkpoints else -1  # -1: no checkpoints kept

    def __len__(self) -> int:
        """Number of changes held in the history (excluding the base)."""
        return len(self._offsets)

    @property
    def base_offset(self) -> int:
        """Offsets before this are answered approximately (with the base state) without a ``read``."""
        return self._base_offset

    def feed(self, offset: int, data: bytes) -> None:
        """Note output ``data`` produced at absolute ``offset``. Cheap when it has no ESC."""
        fed_end = self._fed_end
        if fed_end is not None and offset != fed_end:
            if offset < fed_end:
                raise ModeOffsetError(offset, fed_end)
            self._carry = b""  # discontinuity: an unfinished sequence cannot continue
            if self._checkpoint_due >= 0:  # the output in between is not known: no scan may cross it
                self._checkpoint(offset)
        self._fed_end = offset + len(data)
        if 0 <= self._checkpoint_due <= offset and not self._carry:
            self._checkpoint(offset)
        if not self._carry:
            # Nothing to follow without an ESC, an 8-bit CSI or OSC (a string's introducer does not matter: each of
            # those ends a string) and a character cut by the end (its last byte may be 0x9B): three memchr
            # scans, cheaper than an isascii over a long read.
            if b"\x1b" not in data and b"\x9b" not in data and b"\x9d" not in data and (not data or data[-1] < 0x80):
                return
            buf, buf_offset = data, offset
        else:
            buf, buf_offset = self._carry + data, offset - len(self._carry)
            self._carry = b""
        offsets, states = self._offsets, self._states
        _, carry = _scan(*(states[-1] if states else self._base), buf, buf_offset, offsets, states)
        if len(offsets) > MAX_HISTORY:  # fold the oldest entries: amortised O(1) per change
            self._fold(offsets[len(offsets) - MAX_HISTORY // 2 - 1])
        self._carry = carry if len(carry) <= CARRY_MAX else b""  # a huge OSC cut by the end: dropped, not held

    def _checkpoint(self, offset: int) -> None:
        """Note the state at ``offset``, where no sequence is unfinished (the carry is empty)."""
        self._cp_offsets.append(offset)
        self._cp_states.append(self._state_before(offset))
        self._checkpoint_due = offset + CHECKPOINT_BYTES

    def current(self) -> TerminalModes:
        """Modes in effect after everything fed so far."""
        return _to_modes(*(self._states[-1] if self._states else self._base))

    def _state_before(self, offset: int) -> _State:
        """The state from the history for ``offset`` (the base for offsets before ``base_offset``)."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._states[i - 1] if i else self._base

    def state_at(self, offset: int, read: Callable[[int, int], bytes | None] | None = None) -> TerminalModes:
        """Modes in effect at ``offset``.

        For an offset before ``base_offset``, ``read(first, last)`` (the output between two offsets,
        or None where it is no longer held) lets the tracker scan the output again from its last
        checkpoint before ``offset``: exact. Without it, or without the bytes: the base state.
        """
        if offset < self._base_offset and read is not None:
            i = bisect.bisect_right(self._cp_offsets, offset)
            if i:
                first = self._cp_offsets[i - 1]
                data = read(first, offset)
                if data is not None:
                    state, _ = _scan(*self._cp_states[i - 1], data, first, [], [])
                    return _to_modes(*state)
        return _to_modes(*self._state_before(offset))

    def preamble(self, offset: int, read: Callable[[int, int], bytes | None] | None = None,
                 keep_cursor: bool = False) -> bytes:
        """Sequences establishing the modes in effect at ``offset``, for a default terminal
        (``read``: see :meth:`state_at`; ``keep_cursor``: see :meth:`TerminalModes.enable_sequence`)."""
        return self.state_at(offset, read).enable_sequence(keep_cursor)

    def reset_sequence(self) -> bytes:
        """Sequences returning a terminal that saw all output so far to default modes."""
        return self.current().disable_sequence()

    def _fold(self, offset: int) -> None:
        """Fold history at or before ``offset`` into the base."""
        i = bisect.bisect_right(self._offsets, offset)
        if i:
            self._base = self._states[i - 1]
            del self._offsets[:i]
            del self._states[:i]
        self._base_offset = max(self._base_offset, offset)

    def forget_before(self, offset: int) -> None:
        """Fold changes at or before ``offset`` into the base: replays start no earlier. Checkpoints
        before the last one at or before ``offset`` go too (nothing is read before ``offset`` again)."""
        self._fold(offset)
        i = bisect.bisect_right(self._cp_offsets, offset)
        if i > 1:
            del self._cp_offsets[:i - 1]
            del self._cp_states[:i - 1]

    def clear(self, offset: int) -> None:
        """Forget everything: from ``offset`` on, a new program starts at default modes."""
        self._base = (0, None)
        self._base_offset = offset
        self._offsets.clear()
        self._states.clear()
        self._carry = b""
        self._fed_end = offset
        self._cp_offsets.clear()
        self._cp_states.clear()
        if self._checkpoint_due >= 0:
            self._checkpoint(offset)
