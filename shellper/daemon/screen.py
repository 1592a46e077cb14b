"""The session's screen model, fed from the ring off the hot path (shellper.core.screen does the emulation).

Output is not fed as it arrives: the model reads the ring in batches, when a terminal attaches or a
SCREEN request or a resize needs it, and before the ring would overwrite bytes it has not seen (at three
quarters of the ring, so a batch is large and fast-forwarding a flood to its last screens pays). A keystroke's echo
costs one comparison; an idle session costs nothing. The figures: bench/NOTES.md, "A screen model".
"""

from __future__ import annotations

from shellper.core import structs
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.core.ring import Scrollback
    from shellper.core.screen import Screen

FEED_CHUNK = 8 * 1024 * 1024
"""Bytes given to the emulator at once while catching up (larger batches fast-forward floods better)."""


class ScreenModel:
    """The screen of the session's output up to ``fed``, caught up on demand."""

    __slots__ = ("_fed_size", "_resizes", "_screen", "cols", "fed", "limit", "ring", "rows")

    def __init__(self, ring: Scrollback, capacity: int, cols: int = 80, rows: int = 24) -> None:
        self.ring = ring
        self.fed = ring.end
        """The output offset the model has seen up to."""
        self.limit = max(1, capacity - capacity // 4)
        """Backlog at which output is fed before more is appended: a quarter of the ring before it trims
        (the ring may trim up to 4 KiB early, and an append is at most 64 KiB)."""
        self.cols, self.rows = cols, rows
        """The session's size now."""
        self._fed_size = (cols, rows)
        """The size the output up to ``fed`` was drawn at (the emulator's, once it exists)."""
        self._screen: Screen | None = None
        """Made on first use: a session nobody looks at never pays for the emulator's import."""
        self._resizes: list[tuple[int, int, int]] = []
        """(offset, cols, rows) of size changes not applied yet: output before each is drawn at the old size."""

    def before_append(self, size: int) -> None:
        """``size`` bytes are about to be appended to the ring: catch up first if they could push unseen
        bytes out of it. The hot path: one subtraction and one comparison."""
        if self.ring.end + size - self.fed > self.limit:
            self.catch_up()

    def after_append(self, offset: int, data: bytes) -> None:
        """An append too large to wait in the ring (larger than ``limit``) is fed at once."""
        if len(data) > self.limit and self.fed == offset:
            self.screen_now().feed(data)
            self.fed = offset + len(data)

    def screen_now(self) -> Screen:
        """The emulator, without catching up."""
        if self._screen is None:
            from shellper.core.screen import Screen
            self._screen = Screen(*self._fed_size)
        return self._screen

    def catch_up(self) -> Screen:
        """Feed what the ring holds beyond ``fed``; the screen is then the screen of the moment."""
        screen = self.screen_now()
        ring = self.ring
        if self.fed < ring.start:  # the ring was cleared for a new child (or output was lost): start over
            self._screen = None
            screen = self.screen_now()
            self.fed = ring.start
        resizes, self._resizes = self._resizes, []
        for offset, cols, rows in resizes:
            self._feed_to(screen, offset)
            screen.resize(cols, rows)
            self._fed_size = (cols, rows)
        self._feed_to(screen, ring.end)
        return screen

    def _feed_to(self, screen: Screen, end: int) -> None:
        ring = self.ring
        while self.fed < end:
            chunk = ring.read(self.fed, min(FEED_CHUNK, end - self.fed))
            if not chunk.data:
                break
            screen.feed(chunk.data)
            self.fed = chunk.offset + len(chunk.data)

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

    def input_modes(self) -> bytes:
        """The input modes in effect now (mouse, bracketed paste, focus, keypad), from the ring's tracker:
        the screen model draws the screen, the cursor, the title, the scroll region and origin mode itself
        (a scroll region set again after the cursor would move it home)."""
        modes = structs.replace(self.ring.modes.current(), alt_screen=False, cursor_visible=True, title=None,
                                scroll_region=None, origin_mode=False)
        return modes.enable_sequence()

    def rendered(self, scrollback: int) -> bytes:
        """What a terminal of the session's size is sent instead of a byte replay (PROTOCOL.md, 8.6)."""
        return self.catch_up().render(scrollback, self.input_modes())

    def reply(self, request: wire.Screen) -> wire.ScreenReply:
        """The answer to a SCREEN request: the screen of the moment, as text or with SGR sequences."""
        from shellper.core.screen import plain_line
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
