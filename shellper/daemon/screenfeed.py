"""The session's screen model, fed from the ring off the hot path (shellper.core.terminal.screen does the emulation).

Two models watch the output: the ring's mode tracker (shellper.core.terminal.modes: the modes at any offset,
for a byte replay and a gap) and this screen (the screen of the moment). Both know the alternate screen, the
cursor's visibility, the title, the scroll region and origin mode; :data:`SCREEN_MODES` names them, and
:meth:`ScreenModel.modes` is the one record of the session's modes now: the screen's values for those, the
tracker's for the rest (mouse, bracketed paste, keyboard...), which the screen does not model.

Output is not fed as it arrives: the model reads the ring when a terminal attaches or a SCREEN request or a
resize needs it, and before an append when more than :data:`BACKLOG` is unseen (less with a small ring: a
quarter of it before it trims). Then only the oldest piece is fed, or a slice of it, so no single pause is
longer than emulating :data:`FEED_SLICE` bytes, and an attach waits for at most :data:`BACKLOG`. The ring is
read in pieces of :data:`FEED_PIECE` bytes, so what is held at once stays small; a plain piece followed by a
plain piece that scrolls it away is only counted (:meth:`Screen.skip`), so a flood costs about what
fast-forwarding one large batch did. A keystroke's echo costs one comparison; an idle session costs nothing.
The figures: bench/NOTES.md, "A screen model" and "Feeding in pieces".
"""

from __future__ import annotations

from shellper.core import structs
from shellper.core.terminal.modes import TerminalModes
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.core.ring import Scrollback
    from shellper.core.terminal.screen import Screen

BACKLOG = 1024 * 1024
"""Unseen output above which the oldest piece is fed before an append: what a terminal attaching during a
flood waits for is emulating this much (at most), not the three quarters of a ring."""

FEED_PIECE = 256 * 1024
"""Bytes read from the ring at once: bounds the memory a catch-up holds (two pieces); a plain piece is
skipped when the next one (this long: 2,600 lines of 100 characters) scrolls it away."""

FEED_SLICE = 64 * 1024
"""Output that cannot be skipped is emulated this much per append (what one append's pause is bounded by:
about 20 ms for full-screen redraws, bench/NOTES.md)."""


SCREEN_MODES = ("alt_screen", "cursor_visible", "title", "scroll_region", "origin_mode")
"""The fields of :class:`~shellper.core.terminal.modes.TerminalModes` the screen model tracks and draws
itself (:meth:`~shellper.core.terminal.screen.Screen.render`)."""


def screen_modes(screen: Screen, modes: TerminalModes) -> TerminalModes:
    """``modes`` with the screen's own values for :data:`SCREEN_MODES`."""
    region = None if (screen.top, screen.bottom) == (0, screen.rows - 1) else (screen.top + 1, screen.bottom + 1)
    return structs.replace(modes, alt_screen=screen.alternate, cursor_visible=screen.cursor_visible,
                           title=screen.title.encode() if screen.title else None, scroll_region=region,
                           origin_mode=screen.cursor.origin)


class ScreenModel:
    """The screen of the session's output up to ``fed``, caught up on demand."""

    __slots__ = ("_ahead", "_fed_size", "_resizes", "_screen", "cols", "fed", "lag", "limit", "ring", "rows")

    def __init__(self, ring: Scrollback, capacity: int, cols: int = 80, rows: int = 24) -> None:
        self.ring = ring
        self.fed = ring.end
        """The output offset the model has seen up to."""
        self.limit = max(1, capacity - capacity // 4)
        """The most unseen output the ring may hold: a quarter of the ring before it trims (the ring may trim
        up to 4 KiB early, and an append is at most 64 KiB); a larger append is fed at once."""
        self.lag = min(self.limit, BACKLOG)
        """Backlog at which the oldest output is fed before more is appended."""
        self.cols, self.rows = cols, rows
        """The session's size now."""
        self._fed_size = (cols, rows)
        """The size the output up to ``fed`` was drawn at (the emulator's, once it exists)."""
        self._screen: Screen | None = None
        """Made on first use: a session nobody looks at never pays for the emulator's import."""
        self._ahead: tuple[int, bytes, int] | None = None
        """The piece read last: (offset, bytes, line feeds or -1 when not plain)."""
        self._resizes: list[tuple[int, int, int]] = []
        """(offset, cols, rows) of size changes not applied yet: output before each is drawn at the old size."""

    def before_append(self, size: int) -> None:
        """``size`` bytes are about to be appended to the ring: catch up first if they could push unseen
        bytes out of it. The hot path: one subtraction and one comparison."""
        if self.ring.end + size - self.fed > self.lag:
            self._advance(self.ring.end + size - self.lag)

    def after_append(self, offset: int, data: bytes) -> None:
        """An append too large to wait in the ring (larger than ``limit``) is fed at once."""
        if len(data) > self.limit and self.fed == offset:
            screen = self.screen_now()
            for at in range(0, len(data), FEED_PIECE):
                screen.feed(data[at:at + FEED_PIECE])
            self.fed = offset + len(data)

    def screen_now(self) -> Screen:
        """The emulator, without catching up."""
        if self._screen is None:
            from shellper.core.terminal.screen import Screen
            self._screen = Screen(*self._fed_size)
        return self._screen

    def catch_up(self) -> Screen:
        """Feed what the ring holds beyond ``fed``; the screen is then the screen of the moment."""
        return self._advance(self.ring.end)

    def _advance(self, target: int) -> Screen:
        """Feed the ring's output up to ``target`` at least (a piece may go past it), size changes in turn."""
        screen = self.screen_now()
        ring = self.ring
        if self.fed < ring.start:  # the ring was cleared for a new child (or output was lost): start over
            self._screen = None
            screen = self.screen_now()
            self.fed = ring.start
        while self._resizes and self._resizes[0][0] <= target:
            offset, cols, rows = self._resizes.pop(0)
            self._feed_to(screen, offset, offset)
            screen.resize(cols, rows)
            self._fed_size = (cols, rows)
        self._feed_to(screen, target, self._resizes[0][0] if self._resizes else ring.end)
        return screen

    def _feed_to(self, screen: Screen, target: int, end: int) -> None:
        """Feed pieces from ``fed`` until ``target`` is reached, looking ahead at most to ``end``: a plain
        piece is only counted when the next one scrolls it away."""
        piece, lines = self._piece(self.fed, end)
        while piece and self.fed < target:
            after = self.fed + len(piece)
            following, following_lines = self._piece(after, end)
            if following and screen.skip(piece, following, lines, following_lines):
                self.fed, piece, lines = after, following, following_lines
                continue
            # Emulated in full: only as much as the target needs, at least a slice (the pause's bound).
            size = max(target - self.fed, FEED_SLICE)
            if size >= len(piece):
                screen.feed(piece)
                self.fed, piece, lines = after, following, following_lines
            else:
                screen.feed(piece[:size])
                self.fed += size
                piece, lines = self._piece(self.fed, end)

    def _piece(self, at: int, end: int) -> tuple[bytes, int]:
        """Up to :data:`FEED_PIECE` bytes of the ring from ``at``, ending after a line feed where one is in
        its second half (a piece cut inside an SGR sequence or a CRLF could not be skipped), and its
        :func:`~shellper.core.terminal.screen.plain_lines`. The piece read last is kept: looked ahead at as the
        following one, it is the next one fed, so each byte of a flood is read and checked once."""
        if at >= end:
            return b"", -1
        ahead = self._ahead
        if ahead is not None and ahead[0] == at and at + len(ahead[1]) <= end:
            return ahead[1], ahead[2]
        from shellper.core.terminal.screen import plain_lines
        size = min(FEED_PIECE, end - at, self.ring.end - at)
        if at + size < end:
            lf = self.ring.ring.rfind(b"\n", at + size // 2, at + size)
            if lf >= 0:
                size = lf + 1 - at
        data = self.ring.read(at, size).data
        if at + len(data) < end:
            lines = plain_lines(data)
            self._ahead = (at, data, lines)  # kept only whole: a piece cut by ``end`` grows when read again
            return data, lines
        return data, plain_lines(data)

    def resize(self, cols: int, rows: int) -> None:
        """The session's terminal changed size: output before now is drawn at the old size, at the next
        catch-up (a window being dragged costs a tuple per SIGWINCH, not an emulation of the backlog)."""
        if (cols, rows) == (self.cols, self.rows):
            return
        self.cols, self.rows = cols, rows
        if self.fed == self.ring.end and not self._resizes:
            if self._screen is not None:
                self._screen.resize(cols, rows)
            self._fed_size = (cols, rows)
            return
        self._resizes.append((self.ring.end, cols, rows))
        if len(self._resizes) > 64:
            self.catch_up()

    def modes(self) -> TerminalModes:
        """The session's modes now: the screen's for :data:`SCREEN_MODES`, the ring's tracker's for the rest."""
        return screen_modes(self.catch_up(), self.ring.modes.current())

    def input_modes(self) -> bytes:
        """What the rendered screen is followed by: the modes the screen model does not draw itself (mouse,
        bracketed paste, focus, keypad...). Its own are drawn by the render, in their place (a scroll region
        set again after the cursor would move it home)."""
        default = TerminalModes()
        drawn = {name: getattr(default, name) for name in SCREEN_MODES}
        return structs.replace(self.ring.modes.current(), **drawn).enable_sequence()

    def rendered(self, scrollback: int, limit: int | None = None) -> bytes:
        """What a terminal of the session's size is sent instead of a byte replay (PROTOCOL.md, 8.6); with
        ``limit``, fewer scrollback lines if that keeps it within (the screen alone may not be)."""
        return self.catch_up().render(scrollback, self.input_modes(), limit)

    def reply(self, request: wire.ScreenRequest) -> wire.ScreenReply:
        """The answer to a SCREEN request: the screen of the moment, as text or with SGR sequences."""
        from shellper.core.terminal.screen import plain_line
        screen = self.catch_up()
        ansi = request.format == "ansi"
        lines = screen.ansi_lines() if ansi else screen.lines()
        history = screen.behind(request.scrollback)
        if not ansi:
            history = [plain_line(line) for line in history]
        cursor = screen.cursor
        return wire.ScreenReply(offset=self.fed, cols=screen.cols, rows=screen.rows, lines=lines,
                                cursor_x=cursor.x, cursor_y=cursor.y, cursor_visible=screen.cursor_visible,
                                alternate=screen.alternate, title=screen.title, scrollback=history,
                                format=request.format, id=request.id)
