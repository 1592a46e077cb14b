"""Merging a separate stderr into the output stream at boundaries, so neither stream is cut (sans-IO).

A child with a stderr of its own (``--stderr pty`` or ``pipe``) writes two streams that the session
shows as one. Merged in read order, stderr text lands inside stdout's lines, UTF-8 characters and
escape sequences, and the screen is corrupted. Here stdout is never held (it is the screen's stream,
and holding it would slow every program down); stderr is held until stdout is at the end of a line,
and then goes out up to the end of its own last line, so whole lines of each alternate. Two things
end a hold early. Both streams quiet for FLUSH_AFTER_QUIET (a prompt written to stderr, a line that
stays unfinished): held stderr goes out up to its last whole character or sequence, unless stdout
stopped inside one. More than HELD_STDERR_MAX bytes held: they go out at once, in the middle of a
stdout line (and, only if stdout stopped inside an escape sequence or character, inside that);
a stderr sequence or character is never cut.
"""

from __future__ import annotations

from shellper.core.ring import FORWARD_WINDOW, sequence_end

HELD_STDERR_MAX = 16 * 1024
"""Bytes of stderr held for stdout to reach the end of a line; beyond it they go out at once."""
FLUSH_AFTER_QUIET = 0.03
"""Seconds without output on either stream after which held stderr goes out even in the middle of a
stdout line or of its own: short enough that nobody waits for a prompt written to stderr, long enough
for a line written in pieces."""

_NEWLINE = 0x0A


def incomplete_suffix(data: bytes | bytearray) -> int:
    """How many bytes at the end of ``data`` are an unfinished escape sequence or UTF-8 character (by the
    grammar of :mod:`shellper.core.terminal.parser`, as the ring and the screen read output).

    An escape sequence that started more than FORWARD_WINDOW bytes back counts as finished, as the
    ring counts it: a stream is never held up by a sequence that never ends.
    """
    window = bytes(data[max(0, len(data) - FORWARD_WINDOW):])
    if window.isascii():
        esc = window.rfind(b"\x1b")
        if esc < 0 or sequence_end(window, esc) is not None:
            return 0  # the common case: no ESC, or the last one's sequence finished
    from shellper.core.terminal import parser  # here: a merged stream without escapes never loads it

    held = parser.partial_char(window)
    text = parser.decode(window[:len(window) - held])
    start = parser.unfinished(text)
    return held + (len(parser.encode(text[start:])) if start >= 0 else 0)


def line_cut(data: bytes | bytearray) -> int:
    """Index just past the last newline of ``data`` that is not inside an escape sequence (0: none)."""
    end = len(data)
    while (newline := data.rfind(b"\n", 0, end)) >= 0:
        if incomplete_suffix(data[:newline + 1]) == 0:
            return newline + 1
        end = newline
    return 0


class StreamMerger:
    """Stdout and a separate stderr in, one stream out; each call returns the bytes to append, in order.

    ``now`` is any monotonic clock in seconds. While something is held, :meth:`flush_due` says when
    :meth:`on_quiet` may let it out; nothing else needs a timer.
    """

    __slots__ = ("_held", "_last_at", "_out_at_line_end", "_out_pending", "held_max", "quiet")

    def __init__(self, held_max: int = HELD_STDERR_MAX, quiet: float = FLUSH_AFTER_QUIET) -> None:
        self.held_max = held_max
        self.quiet = quiet
        self._held = bytearray()
        self._out_pending = b""
        """Stdout's unfinished escape sequence or UTF-8 character at its end, so far."""
        self._out_at_line_end = True
        self._last_at = float("-inf")
        """When either stream last wrote."""

    @property
    def held(self) -> int:
        """Bytes of stderr waiting."""
        return len(self._held)

    def out(self, data: bytes, now: float) -> bytes:
        """Stdout: goes out at once, followed by whatever held stderr it lets out."""
        if not data:
            return b""
        self._last_at = now
        tail = data if len(data) >= FORWARD_WINDOW or not self._out_pending else self._out_pending + data
        pending = incomplete_suffix(tail)
        self._out_pending = tail[len(tail) - pending:] if pending else b""
        self._out_at_line_end = not pending and data[-1] == _NEWLINE
        if self._held and self._out_at_line_end:
            return data + self._release(line_cut(self._held))
        return data

    def err(self, data: bytes, now: float) -> bytes:
        """Stderr: what of it (and of what was held) can go out now; the rest is held."""
        self._held += data
        self._last_at = now
        if len(self._held) > self.held_max:
            return self._release(len(self._held) - incomplete_suffix(self._held))
        return self._release(line_cut(self._held)) if self._out_at_line_end else b""

    def flush_due(self) -> float | None:
        """When :meth:`on_quiet` would let something out; None while nothing is held or stdout is mid-sequence."""
        if not self._held or self._out_pending or self._cut(float("inf")) == 0:
            return None
        return self._last_at + self.quiet

    def on_quiet(self, now: float) -> bytes:
        """Both streams have been quiet (the time :meth:`flush_due` named has come): let held stderr out."""
        if not self._held or not self._quiet_at(now):
            return b""
        return self._release(self._cut(now))

    def end(self) -> bytes:
        """The streams are over: everything held goes out."""
        return self._release(len(self._held))

    def _quiet_at(self, now: float) -> bool:
        return not self._out_pending and now - self._last_at >= self.quiet

    def _cut(self, now: float) -> int:
        """How much held stderr may go out: to its last whole sequence if stdout is quiet, else its last line end."""
        if self._quiet_at(now):
            return len(self._held) - incomplete_suffix(self._held)
        return line_cut(self._held) if self._out_at_line_end else 0

    def _release(self, cut: int) -> bytes:
        if cut <= 0:
            return b""
        released = bytes(self._held[:cut])
        del self._held[:cut]
        return released
