"""Terminal modes the child has switched on, by absolute output offset (sans-IO).

Why: a replay that starts after the child entered the alternate screen, enabled mouse
reporting or bracketed paste replays into a terminal in the wrong state (a trim of the ring's
front can drop the alt-screen-enter). And a client that detaches from a TUI must not leave the
user's terminal in mouse or alt-screen mode (peers have shipped that bug: bench/NOTES.md,
"Incidents behind the defaults").

:class:`ModeTracker` watches the output stream cheaply (a C-level search for ESC, then one
precompiled regex) and keeps a bounded history of mode changes with their offsets, so it can
say which modes were in effect at any offset still in the ring (:meth:`ModeTracker.preamble`)
and how to switch them off (:meth:`ModeTracker.reset_sequence`).

Not tracked (documented limits): kitty keyboard flags, modifyOtherKeys, OSC 7 cwd, colours,
scroll regions, charsets, SGR; the title is not restored on detach (the terminal's own title
is unknown; an attach client can push/pop it with ``CSI 22;0 t`` / ``CSI 23;0 t``).
"""

from __future__ import annotations

import bisect
import functools
import re

from shellper.core.errors import ShellperError
from shellper.core.structs import record

__all__ = [
    "CARRY_MAX",
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
folded into the base state (down to half), so a preamble for an offset older than the fold is
approximated by the state at the fold. A TUI toggling the cursor twice per frame keeps exact
history for its last ~256-512 frames."""


@record(frozen=True, slots=True)
class TerminalModes:
    """Mode state; the defaults are a freshly reset terminal.

    ``mouse_tracking`` is the active protocol (0 = off, else 9/1000/1002/1003) and
    ``mouse_encoding`` the coordinate encoding (0 = default, else 1005/1006/1015): like xterm
    and xterm.js, setting one replaces the previous and resetting any of them turns it off.
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

    def enable_sequence(self) -> bytes:
        """Sequences that take a default terminal to this state (non-default modes only)."""
        out = [] if self.title is None else [b"\x1b]2;" + self.title + b"\x07"]
        out += (_switch(on, getattr(self, name)) for name, (on, _) in _SWITCHES.items()
                if getattr(self, name) != getattr(_DEFAULT_MODES, name))
        return b"".join(out)

    def disable_sequence(self) -> bytes:
        """Sequences that take a terminal in this state back to defaults (title excepted)."""
        return b"".join(_switch(_SWITCHES[name][1], getattr(self, name)) for name in _DISABLE_ORDER
                        if getattr(self, name) != getattr(_DEFAULT_MODES, name))


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
    b"\x1b[?9l\x1b[?1000l\x1b[?1002l\x1b[?1003l"  # mouse tracking off
    b"\x1b[?1005l\x1b[?1006l\x1b[?1015l"  # mouse encodings off
    b"\x1b[?1004l\x1b[?2004l"  # focus reporting, bracketed paste off
    b"\x1b[?1l\x1b>"  # normal cursor keys, numeric keypad
    b"\x1b[?1049l\x1b[?25h"  # main screen (restores the cursor saved by ?1049h), cursor shown
)
"""Switches every tracked mode to its default whatever the state (not RIS: keeps the screen).

For a client that cannot know the state, e.g. after an uncontrolled disconnect. Note that
``?1049l`` also restores the cursor position saved when the alternate screen was entered."""

# One pass over the data finds every sequence that changes a tracked mode.
_MODE_RE = re.compile(
    rb"\x1b(?:"
    rb"\[\?([0-9;]{0,64})([hl])"  # 1, 2: DEC private mode set/reset (combined params)
    rb"|(\[!p)"  # 3: DECSTR soft reset
    rb"|([=>c])"  # 4: DECKPAM / DECKPNM / RIS
    rb"|\][02];([^\x07\x1b]{0,%d})(?:\x07|\x1b\\)" % TITLE_MAX  # 5: OSC 0/2 title
    + rb")"
)
# An unfinished sequence at the end of the data that could still become one of the above.
_PARTIAL_RE = re.compile(rb"\x1b(?:\[[\x20-\x3f]*|\][^\x07\x1b]*\x1b?)?")


class ModeOffsetError(ShellperError, ValueError):
    """Output was fed at an offset before the end of what was already fed."""

    def __init__(self, offset: int, expected: int) -> None:
        super().__init__(f"feed at offset {offset}, but output up to {expected} was already fed")
        self.offset = offset
        self.expected = expected


# Internally a state is (flags, title): flags packs every mode into one int, so applying a
# sequence is two bit operations and the hot path never builds dataclasses.
_ALT, _HIDDEN, _PASTE, _FOCUS, _APP_CURSOR, _APP_KEYPAD = 1, 2, 4, 8, 16, 32
_TRACKING_SHIFT, _TRACKING_MASK = 8, 0x700
_ENCODING_SHIFT, _ENCODING_MASK = 12, 0x3000
_TRACKING = (0, 9, 1000, 1002, 1003)
_ENCODING = (0, 1005, 1006, 1015)
_RIS = -1  # the mask of a full reset: clears every flag (and, specially, the title)

_FLAG_OF_MODE = {47: _ALT, 1047: _ALT, 1049: _ALT, 2004: _PASTE, 1004: _FOCUS, 1: _APP_CURSOR,
                 66: _APP_KEYPAD}  # 66 = DECNKM, the same switch as DECKPAM/DECKPNM


def _to_modes(flags: int, title: bytes | None) -> TerminalModes:
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
    )


@functools.lru_cache(maxsize=512)
def _effect(seq: bytes) -> tuple[int, int]:
    """(mask, value) of a matched non-title sequence: flags become (flags & ~mask) | value.

    Every tracked sequence sets modes to fixed values whatever the previous state, which is
    what makes this cacheable per distinct sequence.
    """
    if seq == b"\x1bc":
        return _RIS, 0
    if seq == b"\x1b=":
        return _APP_KEYPAD, _APP_KEYPAD
    if seq == b"\x1b>":
        return _APP_KEYPAD, 0
    if seq == b"\x1b[!p":  # DECSTR resets DECTCEM, DECCKM and DECNKM
        return _HIDDEN | _APP_CURSOR | _APP_KEYPAD, 0
    on = seq.endswith(b"h")
    mask = value = 0
    for param in seq[3:-1].split(b";"):
        if not param:
            continue
        mode = int(param)
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
    return mask, value


class ModeTracker:
    """Tracks mode changes in the output stream with the offset where each takes effect.

    A change takes effect at the offset just past its sequence. History is a base state
    (valid at ``base_offset``) plus up to :data:`MAX_HISTORY` ``(offset, state)`` entries;
    :meth:`forget_before` folds entries the ring no longer needs into the base.
    """

    __slots__ = ("_base", "_base_offset", "_carry", "_fed_end", "_offsets", "_states")

    def __init__(self) -> None:
        self._base: tuple[int, bytes | None] = (0, None)  # (flags, title)
        self._base_offset = 0
        self._offsets: list[int] = []
        self._states: list[tuple[int, bytes | None]] = []
        self._carry = b""
        self._fed_end: int | None = None

    def __len__(self) -> int:
        """Number of changes held in the history (excluding the base)."""
        return len(self._offsets)

    @property
    def base_offset(self) -> int:
        """Offsets before this are answered approximately (with the base state)."""
        return self._base_offset

    def feed(self, offset: int, data: bytes) -> None:
        """Note output ``data`` produced at absolute ``offset``. Cheap when it has no ESC."""
        fed_end = self._fed_end
        if fed_end is not None and offset != fed_end:
            if offset < fed_end:
                raise ModeOffsetError(offset, fed_end)
            self._carry = b""  # discontinuity: an unfinished sequence cannot continue
        self._fed_end = offset + len(data)
        if not self._carry:
            if b"\x1b" not in data:
                return
            buf, buf_offset = data, offset
        else:
            buf, buf_offset = self._carry + data, offset - len(self._carry)
            self._carry = b""
        offsets, states = self._offsets, self._states
        flags, title = states[-1] if states else self._base
        for m in _MODE_RE.finditer(buf):
            if m.lastindex == 5:  # OSC 0/2 title
                new_flags, new_title = flags, m.group(5)
            else:
                mask, value = _effect(m.group())
                new_flags = (flags & ~mask) | value
                new_title = None if mask == _RIS else title
            if new_flags != flags or new_title != title:
                flags, title = new_flags, new_title
                offsets.append(buf_offset + m.end())
                states.append((flags, title))
        if len(offsets) > MAX_HISTORY:  # fold the oldest entries: amortised O(1) per change
            self.forget_before(offsets[len(offsets) - MAX_HISTORY // 2 - 1])
        self._carry = self._unfinished_tail(buf)

    def current(self) -> TerminalModes:
        """Modes in effect after everything fed so far."""
        return _to_modes(*(self._states[-1] if self._states else self._base))

    def state_at(self, offset: int) -> TerminalModes:
        """Modes in effect at ``offset`` (the base state for offsets before ``base_offset``)."""
        i = bisect.bisect_right(self._offsets, offset)
        return _to_modes(*(self._states[i - 1] if i else self._base))

    def preamble(self, offset: int) -> bytes:
        """Sequences establishing the modes in effect at ``offset``, for a default terminal."""
        return self.state_at(offset).enable_sequence()

    def reset_sequence(self) -> bytes:
        """Sequences returning a terminal that saw all output so far to default modes."""
        return self.current().disable_sequence()

    def forget_before(self, offset: int) -> None:
        """Fold changes at or before ``offset`` into the base: replays start no earlier."""
        i = bisect.bisect_right(self._offsets, offset)
        if i:
            self._base = self._states[i - 1]
            del self._offsets[:i]
            del self._states[:i]
        self._base_offset = max(self._base_offset, offset)

    def clear(self, offset: int) -> None:
        """Forget everything: from ``offset`` on, a new program starts at default modes."""
        self._base = (0, None)
        self._base_offset = offset
        self._offsets.clear()
        self._states.clear()
        self._carry = b""
        self._fed_end = offset

    @staticmethod
    def _unfinished_tail(buf: bytes) -> bytes:
        """The tail of ``buf`` that may be the start of a tracked sequence (bounded)."""
        p = buf.rfind(b"\x1b", max(0, len(buf) - CARRY_MAX))
        if p < 0:
            return b""
        if _PARTIAL_RE.fullmatch(buf, p) is not None:
            if p == len(buf) - 1:  # a lone ESC may be the first half of an OSC's ST
                q = buf.rfind(b"\x1b", max(0, len(buf) - CARRY_MAX), p)
                if q >= 0 and _PARTIAL_RE.fullmatch(buf, q) is not None and buf[q + 1] == 0x5D:
                    return buf[q:]
            return buf[p:]
        return b""
