"""A session's defaults and the ranges its settings must stay in, for every layer that applies them.

Imports nothing, so the wire codec, the host layer and ``shellper attach`` use them at no cost;
:class:`shellper.core.config.SessionConfig` checks a whole config against them.
"""

from __future__ import annotations

DEFAULT_COLS = 80
DEFAULT_ROWS = 24
MAX_TERMINAL_DIMENSION = 65535
"""Most columns or rows a terminal may have: the kernel's winsize holds each in an unsigned short."""
TERMINAL_SIZE_RANGE = f"1..{MAX_TERMINAL_DIMENSION}"
"""How messages name the range of columns and rows."""
DEFAULT_TERM = "xterm-256color"

SCREEN_SCROLLBACK_LINES = 1000
"""Main-screen lines a session's screen model keeps above its screen (shellper.core.terminal.screen), and what
``shellper attach`` asks to be drawn back into the terminal's own scrollback."""
DEFAULT_RING_BYTES = 8 * 1024 * 1024
MIN_RING_BYTES = 64 * 1024
MAX_RING_BYTES = 1024 * 1024 * 1024

DEFAULT_GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL when a session's processes are ended."""
KILL_SECONDS = 10.0
"""How long a teardown that cannot use a cgroup (containment none) freezes and SIGKILLs a tree that keeps
forking before what is left counts as surviving: the stop then fails, naming it, and the record is kept."""
DEFAULT_HUSK_TTL = 3600.0
"""Seconds a session started by ``shellper run`` stays after its child ended for good (a husk: ~12 MiB, its ring
and exits kept for ``tail`` and ``status``) before it stops itself: long enough to come back and read why it
ended, short enough that husks do not pile up. A Tower passes its own; ``launch()``'s config keeps None (forever)."""
HANDSHAKE_TIMEOUT = 10.0
"""Seconds a new connection has to send its HELLO."""
FRAME_TIMEOUT = 30.0
"""Seconds a client has, after its handshake, to finish a frame it has begun sending (counted while the shellper
reads it): an unfinished frame holds up to 16 MiB. Ample for 16 MiB through a slow ssh link."""

STDERR_MODES = ("pty", "merged", "pipe")
"""Where the child's fd 2 goes: a PTY of its own, the main PTY (the default), or a pipe; a config may
also ask for ``auto``, which is ``merged`` (shellper.core.config.resolve_stderr_mode)."""


def terminal_size_in_range(cols: object, rows: object) -> bool:
    """Whether both are integers (not bools) in 1..MAX_TERMINAL_DIMENSION."""
    return all(not isinstance(n, bool) and isinstance(n, int) and 1 <= n <= MAX_TERMINAL_DIMENSION
               for n in (cols, rows))


def clamp_terminal_size(cols: int, rows: int) -> tuple[int, int]:
    """A terminal's size as a RESIZE may carry it: neither above MAX_TERMINAL_DIMENSION."""
    return min(cols, MAX_TERMINAL_DIMENSION), min(rows, MAX_TERMINAL_DIMENSION)
