"""Byte-bounded output ring addressed by absolute offsets (sans-IO).

Why this shape: the original kept a list of chunks
that grew without bound for newline-free TUIs, concatenated the whole history on every
connect, and cut the front at arbitrary bytes. Here the storage is one preallocated
``bytearray`` used circularly, so memory is fixed whatever is appended; reads copy only what
they return; and every front trim moves ``start`` to a boundary that is neither inside a UTF-8
character nor inside an escape sequence, so a replay from ``start`` never begins with garbage.

Offsets are absolute: offset N is the N-th byte the session has produced since it started
(``end`` only ever grows, also across :meth:`RingBuffer.clear`). A client that remembers the
offset it has seen can resume exactly, and learns how much it missed (``gap``).
"""

from __future__ import annotations

import mmap
import re

from shellper.core.defaults import DEFAULT_RING_BYTES
from shellper.core.errors import ShellperError
from shellper.core.structs import record
from shellper.core.terminal.modes import FULL_RESET_SEQUENCE, ModeTracker

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.core.terminal import parser

__all__ = [
    "FORWARD_WINDOW",
    "LOOKBACK_WINDOW",
    "Chunk",
    "OffsetError",
    "Replay",
    "RingBuffer",
    "Scrollback",
    "sequence_end",
]

LOOKBACK_WINDOW = 512
"""How far before a cut we look for an ESC whose sequence may straddle the cut.

The storage keeps this many bytes beyond ``capacity`` so the look-back never reads bytes
that the current append has already overwritten."""

FORWARD_WINDOW = 4096
"""How far past a cut we follow an unfinished sequence before giving up (original: 4096)."""

def sequence_end(buf: bytes, pos: int) -> int | None:
    """Index just past the escape sequence (or control, or text) that begins at ``buf[pos]``, by the grammar
    (:func:`shellper.core.terminal.parser.end_of`): C1 introducers in both forms, C0 controls inside a
    sequence, CAN and SUB included.

    Returns None when ``buf`` ends before the sequence does. A sequence interrupted by another
    ESC (or CAN, SUB, a C1 control) ends where the interruption starts, as in a VT parser.
    """
    if not _parser_loaded:
        _load_parser()
    end = parser.end_of_bytes(buf, pos)
    token = buf[pos:] if end is None else buf[pos:end]
    if token.isascii() or parser.c1_free(token):
        # The token's bytes hold no C1 control: the bytes forms end it where the text forms would (the byte
        # after it, if not ASCII, begins a character that ends a CSI or ESC as a C1 control would).
        return end
    data = buf[pos:]
    held = 0 if data.isascii() else parser.partial_char(data)
    text = parser.decode(data[:len(data) - held])
    end = parser.end_of(text)
    if end is None or (held and end == len(text) and parser.end_of(text + "\xa0") != end):
        return None  # the character cut by the end may go on with it (a string's data)
    return pos + (end if len(text) == len(data) else len(parser.encode(text[:end])))


_parser_loaded = False


def _load_parser() -> None:
    """Import the grammar (:mod:`shellper.core.terminal.parser`) into this module on first use: a session whose
    ring never trims never loads it, and an ``import`` statement in every trim would cost more than the flag."""
    global _parser_loaded, parser
    from shellper.core.terminal import parser

    _parser_loaded = True


_PAST_CONTROLS = re.compile(rb"[^\x00-\x1f\x7f]")


class OffsetError(ShellperError, ValueError):
    """A read asked for an offset the session has not produced (or a negative one)."""

    def __init__(self, offset: int, end: int) -> None:
        super().__init__(f"offset {offset} is outside [0, {end}] (end = bytes produced so far)")
        self.offset = offset
        self.end = end


@record(frozen=True, slots=True)
class Chunk:
    """Result of :meth:`RingBuffer.read`: ``data`` starts at absolute ``offset``; ``gap`` bytes
    before it (from the requested offset) are no longer held."""

    offset: int
    data: bytes
    gap: int


class RingBuffer:
    """Circular byte store holding the newest ``<= capacity`` bytes of a stream.

    Each trim moves ``start`` to a safe replay boundary (see :meth:`safe_start`), so ``start`` may
    be up to ``FORWARD_WINDOW`` bytes later than ``end - capacity``: ``size`` can be a little
    below ``capacity`` even when the ring is full. Memory is ``capacity + LOOKBACK_WINDOW``
    bytes, allocated once. Only a sequence still unfinished at ``end`` (possible only when it
    is longer than ``capacity``) or longer than the windows can leave ``start`` inside it.
    """

    __slots__ = ("_buf", "_capacity", "_end", "_mv", "_phys", "_start")

    def __init__(self, capacity: int = DEFAULT_RING_BYTES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._phys = capacity + LOOKBACK_WINDOW
        # Anonymous memory: pages become resident only as output fills them, so an idle session with an
        # 8 MiB ring does not cost 8 MiB (a zero-filled bytearray would be resident from the start).
        self._buf = mmap.mmap(-1, self._phys)
        self._mv = memoryview(self._buf)
        self._start = 0
        self._end = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def start(self) -> int:
        """Absolute offset of the oldest byte held (a safe replay boundary)."""
        return self._start

    @property
    def end(self) -> int:
        """Absolute offset just past the newest byte: total bytes ever appended."""
        return self._end

    @property
    def size(self) -> int:
        return self._end - self._start

    def __len__(self) -> int:
        return self._end - self._start

    def append(self, data: bytes) -> None:
        """Add output; trim the front (to a safe boundary) if over capacity.

        O(len(data)) for the copy plus O(LOOKBACK_WINDOW + FORWARD_WINDOW) C-level scanning
        when a trim happens; an append larger than the storage keeps only its tail.
        """
        n = len(data)
        if n == 0:
            return
        old_start = self._start
        new_end = self._end + n
        keep = min(n, self._phys)
        self._write(new_end - keep, memoryview(data)[n - keep :])
        self._end = new_end
        if new_end - old_start > self._capacity:
            cut = new_end - self._capacity
            self._start = self._align(cut, floor=old_start)

    def read(self, offset: int, max_bytes: int) -> Chunk:
        """Up to ``max_bytes`` contiguous bytes from ``max(offset, start)``; copies only those.

        Raises :class:`OffsetError` if ``offset`` is negative or beyond ``end``.
        """
        if offset < 0 or offset > self._end:
            raise OffsetError(offset, self._end)
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        first = max(offset, self._start)
        last = min(self._end, first + max_bytes)
        return Chunk(first, self._copy(first, last), first - offset)

    def rfind(self, byte: bytes, first: int, last: int) -> int:
        """The offset of the last ``byte`` in ``[first, last)`` (clamped to what the ring holds), or -1;
        searched where it lies, without a copy."""
        first, last = max(first, self._start), min(last, self._end)
        if first >= last:
            return -1
        i, n = first % self._phys, last - first
        if i + n > self._phys:  # wraps: the part at the storage's start holds the later bytes
            at = self._buf.rfind(byte, 0, i + n - self._phys)
            if at >= 0:
                return last - (i + n - self._phys) + at
            n = self._phys - i
        at = self._buf.rfind(byte, i, i + n)
        return first + (at - i) if at >= 0 else -1

    def clear(self) -> None:
        """Drop all content; offsets keep increasing (``start = end``)."""
        self._start = self._end

    def safe_start(self, offset: int) -> int:
        """First safe replay boundary at or after ``offset`` (clamped to ``[start, end]``).

        Safe means: not inside an escape sequence whose ESC lies within ``LOOKBACK_WINDOW``
        bytes before, and not on a UTF-8 continuation byte. Best effort by design: a sequence
        longer than the windows (a big DCS/sixel image, an OSC 52 paste) cannot be skipped
        and the cut falls back to the next UTF-8 character start.
        """
        offset = min(max(offset, self._start), self._end)
        return self._align(offset, floor=self._start)

    # -- internals -------------------------------------------------------------------

    def _align(self, cut: int, floor: int) -> int:
        """Move ``cut`` forward to a safe boundary; scan only bytes in ``[floor, end)``.

        ``floor`` is the previous ``start``, itself a boundary, so the look-back never starts
        its reasoning in the middle of an older sequence it cannot see.
        """
        end, buf, phys = self._end, self._buf, self._phys
        if cut >= end:
            return end
        if buf[cut % phys] & 0xC0 == 0x80:  # a continuation byte: not the usual case
            cut = self._after_character(cut, floor)
            if cut >= end:
                return end
        # One copy (every trim costs this much): the look-back and the bytes a sequence it finds most often ends in.
        first = cut - LOOKBACK_WINDOW if cut - LOOKBACK_WINDOW > floor else floor
        hi = cut + 64 if cut + 64 < end else end
        i = first % phys
        span = bytes(self._mv[i:i + hi - first]) if i + hi - first <= phys else self._copy(first, hi)
        before = cut - first
        esc = span.rfind(b"\x1b", 0, before)
        if esc < 0 and (span.isascii() or span[:before].isascii()):
            return cut  # no ESC and no C1 control: nothing is cut short
        if first > floor and buf[i] & 0xC0 == 0x80:
            # The look-back begins on a character's start too: a window that began inside one would read its
            # last bytes as C1 controls. Its first bytes are skipped, not their lead looked up: in a trim the
            # bytes before the window are the ones this append overwrote.
            skip = 1
            while skip < 3 and span[skip] & 0xC0 == 0x80:
                skip += 1
            span, before, esc = span[skip:], before - skip, esc - skip if esc >= 0 else esc
        if not _parser_loaded:
            _load_parser()
        if esc >= 0:
            # When the bytes from the last ESC hold no C1 control and end in more than controls (an ESC followed
            # by controls only may begin a string's ST), the ESC is the last introducer, and the sequence it
            # begins the only one the cut may split: the old finder's path, on the grammar's bytes forms.
            tail = span[esc:before]
            if (tail.isascii() or parser.c1_free(tail)) and (
                    0x20 <= tail[-1] < 0x7F or _PAST_CONTROLS.search(tail, 1) is not None):
                stop = parser.end_of_bytes(span, esc)
                if stop is not None and stop <= before:
                    return cut  # the sequence ends before the cut
                if stop is not None and (span[esc:stop].isascii() or parser.c1_free(span[esc:stop])):
                    return cut - before + stop
        seq_start = self._cut_short(span[:before], cut)
        if seq_start >= 0:
            # Most sequences are short: try a small window first, then the full one.
            for hi in (min(end, cut + 64), min(end, cut + FORWARD_WINDOW)):
                window, at = self._copy(seq_start, hi), 0
                # From a string that an ESC at the cut may have ended, the next token may be the one cut.
                while (stop := sequence_end(window, at)) is not None and seq_start + stop < cut:
                    at = stop
                if stop is not None:
                    return seq_start + stop  # right after the straddling sequence (or the cut, a boundary)
                if hi == end or hi - cut >= FORWARD_WINDOW:
                    break  # unfinished within bounds: the cut stays (on a character's start)
        return cut

    def _after_character(self, cut: int, floor: int) -> int:
        """``cut``, or the end of the UTF-8 character it splits. A byte 0x80-0xBF that continues no
        character is one of its own (to the grammar, 0x80-0x9F are C1 controls): a cut before it stays."""
        buf, phys, end = self._buf, self._phys, self._end
        if cut >= end or buf[cut % phys] & 0xC0 != 0x80:  # not a continuation byte: the usual case
            return cut
        for lead in range(cut - 1, max(floor, cut - 3) - 1, -1):
            byte = buf[lead % phys]
            if byte & 0xC0 == 0x80:
                continue
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            stop = min(end, lead + need)
            if 0xC2 <= byte <= 0xF4 and stop > cut and all(
                    buf[i % phys] & 0xC0 == 0x80 for i in range(cut, stop)):
                return stop
            break
        return cut

    def _cut_short(self, back: bytes, cut: int) -> int:
        """Where the sequence that ``cut`` cuts short begins, looked for in ``back``, the bytes before ``cut`` (by
        the grammar: :func:`shellper.core.terminal.parser.unfinished`), or -1."""
        esc = back.rfind(b"\x1b")
        if esc < 0:
            if parser.c1_free(back):
                return -1
        else:
            tail = back[esc:]
            if (tail.isascii() or parser.c1_free(tail)) and _PAST_CONTROLS.search(tail, 1) is not None:
                # No C1 control follows this ESC, so it is the last introducer, and something not a control
                # follows it (an ESC followed by controls only may begin a string's ST): it alone decides.
                start = parser.unfinished_bytes(tail)
                return -1 if start < 0 else cut - len(tail) + start
        text = parser.decode(back)
        start = parser.unfinished(text)
        if start < 0:
            return -1
        return cut - len(parser.encode(text[start:]))

    def _write(self, at: int, data: memoryview) -> None:
        i = at % self._phys
        first = min(len(data), self._phys - i)
        self._buf[i : i + first] = data[:first]
        if first < len(data):
            self._buf[: len(data) - first] = data[first:]

    def _copy(self, first: int, last: int) -> bytes:
        n = last - first
        if n <= 0:
            return b""
        i = first % self._phys
        if i + n <= self._phys:
            return bytes(self._mv[i : i + n])
        return b"".join((self._mv[i:], self._mv[: i + n - self._phys]))


@record(frozen=True, slots=True)
class Replay:
    """What to send a client that (re)attaches: ``preamble`` then ``data``.

    ``data`` starts at absolute ``offset``; ``gap`` bytes the client asked for are gone;
    ``end`` is the ring's end when the replay was taken (``offset + len(data) < end`` means
    there is more to read).
    """

    offset: int
    gap: int
    preamble: bytes
    data: bytes
    end: int


class Scrollback:
    """A :class:`RingBuffer` and a :class:`ModeTracker` kept in step: what the server uses.

    The tracker's history is folded whenever the ring trims, so mode memory is bounded by
    what the ring holds.
    """

    __slots__ = ("modes", "ring")

    def __init__(self, capacity: int = DEFAULT_RING_BYTES) -> None:
        self.ring = RingBuffer(capacity)
        self.modes = ModeTracker(checkpoints=True)

    @property
    def start(self) -> int:
        return self.ring.start

    @property
    def end(self) -> int:
        return self.ring.end

    def append(self, data: bytes) -> None:
        """Record output: the ring keeps the bytes, the tracker notes the modes they switch."""
        offset = self.ring.end
        old_start = self.ring.start
        self.ring.append(data)
        self.modes.feed(offset, data)
        if self.ring.start != old_start:
            self.modes.forget_before(self.ring.start)

    def read(self, offset: int, max_bytes: int) -> Chunk:
        """Live output for a client at ``offset`` (see :meth:`RingBuffer.read`)."""
        return self.ring.read(offset, max_bytes)

    def safe_start(self, offset: int) -> int:
        """First safe replay boundary at or after ``offset`` (see :meth:`RingBuffer.safe_start`)."""
        return self.ring.safe_start(offset)

    def replay(
        self, from_offset: int | None = None, max_bytes: int = DEFAULT_RING_BYTES, *, resume: bool = False
    ) -> Replay:
        """Bytes from ``from_offset`` (None: from the ring start), at most ``max_bytes``.

        The preamble depends on what the client's terminal already holds:

        * ``resume=False`` (a fresh terminal at defaults, e.g. a new viewer or a tail): the
          modes in effect at the replay start (alt screen, mouse, title, ...), so a TUI
          replays into the right screen even when its ``?1049h`` was trimmed away.
        * ``resume=True`` and no gap: nothing. The client's terminal already has those modes;
          re-sending ``?1049h`` would overwrite the cursor it saved when entering the alt
          screen (and clear the alt screen on terminals that do so on every ``?1049h``).
        * ``resume=True`` with a gap: :data:`FULL_RESET_SEQUENCE` then the modes at the new
          start, because the client's modes describe bytes it will never receive.

        Raises :class:`OffsetError` if ``from_offset`` is negative or beyond ``end``.
        """
        ring = self.ring
        chunk = ring.read(ring.start if from_offset is None else from_offset, max_bytes)
        if not resume:
            preamble = self.modes.preamble(chunk.offset, self._held)
        elif chunk.gap:
            preamble = self.gap_preamble(chunk.offset)
        else:
            preamble = b""
        return Replay(chunk.offset, chunk.gap, preamble, chunk.data, ring.end)

    def gap_preamble(self, offset: int) -> bytes:
        """What a terminal that missed output up to ``offset`` is sent before the output from there: every
        mode it may have switched off, then the modes in effect at ``offset``, its cursor kept where the
        output it did get left it."""
        return FULL_RESET_SEQUENCE + self.modes.preamble(offset, self._held, keep_cursor=True)

    def shown(self, replay: Replay, resized: bool) -> bytes:
        """What a terminal is shown for ``replay`` (shellper attach's raw replay): the preamble, the output
        with its queries taken out (a terminal would answer them again, into the session's input), and,
        for a terminal of another size than the output was drawn for, what a terminal does itself on a
        resize (the scroll region reset: a stale one from the replayed bytes would cut the program's
        redraw short)."""
        from shellper.core.terminal.queries import strip_queries  # here: a Tower's session never loads it

        shown = replay.preamble + strip_queries(replay.data)
        if resized:
            shown += self.modes.state_at(replay.offset + len(replay.data), self._held).resize_sequence()
        return shown

    def _held(self, first: int, last: int) -> bytes | None:
        """The output between two offsets, or None where the ring no longer holds it (for
        :meth:`ModeTracker.state_at`: a replay's preamble is exact however many modes changed since)."""
        if first < self.ring.start or last > self.ring.end:
            return None
        return self.ring.read(first, last - first).data

    def clear(self) -> bytes:
        """Drop content and mode history (a new child starts at terminal defaults).

        Returns the sequence that switches off the old child's modes: send it to attached
        clients so a dead TUI's alt screen or mouse mode does not outlive it.
        """
        reset = self.modes.reset_sequence()
        self.ring.clear()
        self.modes.clear(self.ring.end)
        return reset
