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
MAX_UNREAD_BYTES = 8 * 1024 * 1024
"""Bytes a client may leave unread before it is dropped as too slow (checked after each frame it sends): output
alone stays far below it (a slow client stops getting live output), so only answers (PONG, STATUS_REPLY) to
requests it never reads pile up to it."""
FRAME_TIMEOUT = 30.0
"""Seconds a client has, after its handshake, to finish a frame it has begun sending (counted while the shellper
reads it): an unfinished frame holds up to 16 MiB. Ample for 16 MiB through a slow ssh link."""

STDERR_MODES = ("pty", "merged", "pipe")
"""Where the child's fd 2 goes: a PTY of its own, the main PTY (the default), or a pipe; a config may
also ask for ``auto``, which is ``merged`` (shellper.core.config.resolve_stderr_mode)."""

STDERR_REQUESTS = ("auto", *STDERR_MODES)
"""What --stderr accepts: auto is merged (shellper.core.config.resolve_stderr_mode), kept so configs that name
it still work."""

# --------------------------------------------------------------------------- restart policy
# shellper.core.exits.RestartPolicy's defaults.

#: Restart mode: "no" (never restart), "on-failure" (restart crashes only), "always"
#: (restart crashes and clean exits). Requested and permanent exits never restart.
RESTART_MODES: tuple[str, ...] = ("no", "on-failure", "always")
DEFAULT_MODE = "on-failure"
#: First restart delay, seconds; multiplied by the factor per restart in a streak, capped at
#: the max (Docker: 100 ms doubling to 60 s; pm2: x1.5 capped at 15 s; k8s: 10 s .. 300 s).
DEFAULT_BACKOFF_INITIAL = 1.0
DEFAULT_BACKOFF_MAX = 60.0
DEFAULT_BACKOFF_FACTOR = 2.0
#: Fraction of the delay that an injected random value in [0, 1] may remove (jitter only
#: shortens a delay, so worst-case timings stay the documented ones). 0 disables.
DEFAULT_JITTER = 0.2
#: A run at least this long is healthy: it resets the backoff streak and all breaker
#: history (Docker 10 s, pm2 30 s, the original 300 s, Kubernetes 600 s).
DEFAULT_HEALTHY_UPTIME = 60.0
#: A restarted run shorter than this is "unstable" and counts toward the breaker. 10 s,
#: not pm2/s6's 1 s: agent CLIs boot for seconds before they fail.
DEFAULT_MIN_UPTIME = 10.0
#: Breaker: this many unstable exits (runs shorter than min_uptime: crashes, plus clean exits
#: under "always") within the window of active time -> fatal.
DEFAULT_BREAKER_COUNT = 5
DEFAULT_BREAKER_WINDOW = 60.0
#: The same normalised last error line on this many consecutive crashes -> fatal. 0 disables.
DEFAULT_SAME_ERROR_COUNT = 3
#: Under "always": this many clean exits in a row, each after a run shorter than
#: clean_exit_uptime -> fatal: a program that keeps exiting at once is not being used. 0 disables.
DEFAULT_CLEAN_EXIT_COUNT = 5
DEFAULT_CLEAN_EXIT_UPTIME = 2.0
#: Lifetime cap on crash restarts since construction or the last reset() (i.e. the last
#: SPAWN). Catches slow loops the breaker does not (runs between min_uptime and
#: healthy_uptime with varying errors): at the 60 s backoff cap that is hours, not days.
#: Clean restarts under "always" are not counted. None disables.
DEFAULT_MAX_RESTARTS: int | None = 100
#: Exit codes that retrying cannot fix (BSD sysexits EX_USAGE=64, EX_CONFIG=78), like
#: systemd's RestartPreventExitStatus. 126/127 are always permanent (EXEC_FAILURE_CODES).
DEFAULT_PREVENT_CODES: frozenset[int] = frozenset({64, 78})
#: Case-insensitive regexes searched in the last fatal_scan_lines lines of the stderr tail.
#: "already in use": a live holder of the session/port/lock will not go away by retrying.
DEFAULT_FATAL_PATTERNS: tuple[str, ...] = (r"already in use",)
#: Only the end of the tail is scanned, so a long run's old output cannot poison a crash.
DEFAULT_FATAL_SCAN_LINES = 10
#: Signals whose death counts as clean when not requested. Empty by default (a signal death
#: nobody asked for is a crash); systemd's choice would be {SIGHUP, SIGINT, SIGTERM, SIGPIPE}.
DEFAULT_CLEAN_SIGNALS: frozenset[int] = frozenset()


def terminal_size_in_range(cols: object, rows: object) -> bool:
    """Whether both are integers (not bools) in 1..MAX_TERMINAL_DIMENSION."""
    return all(not isinstance(n, bool) and isinstance(n, int) and 1 <= n <= MAX_TERMINAL_DIMENSION
               for n in (cols, rows))


def clamp_terminal_size(cols: int, rows: int) -> tuple[int, int]:
    """A terminal's size as a RESIZE may carry it: neither above MAX_TERMINAL_DIMENSION."""
    return min(cols, MAX_TERMINAL_DIMENSION), min(rows, MAX_TERMINAL_DIMENSION)
