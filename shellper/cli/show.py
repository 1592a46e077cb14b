"""How the commands show durations, sizes, times past and exits to a person."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.core.exitrecord import ExitRecord


def duration(seconds: float | None) -> str:
    """An uptime: 4m05s, 2h07m, 3d04h; - for none."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s < 86400 else f"{s // 86400}d{s % 86400 // 3600:02d}h"


def size(n: int | None) -> str:
    """A byte count: 512B, 8.0M; - for none."""
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n = n / 1024  # type: ignore[assignment]
    return str(n)


def ago(seconds: float) -> str:
    """A past duration as a person says it: 40 s, 3 min, 5 h, 2 days."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"


def short_exit(last: ExitRecord, state: str, next_restart_at: float | None, now: float) -> str:
    """An exit in a few words, for ``ls``: how it ended ("exit 0", "crash: SIGSEGV"), then when, or, while a
    restart is pending, when that comes ("crash: exit 3; restart in 12 s"). ``status`` and ``ls -l`` say why."""
    import math

    if last.spawn_error is not None:
        how = "did not start"
    elif last.signal is not None:
        how = last.signal + (" (core)" if last.core else "")
    elif last.code is not None:
        how = f"exit {last.code}"
    else:
        how = "ended"
    if last.exit_class != "clean":
        how = f"{last.exit_class}: {how}"
    if state == "backoff" and next_restart_at is not None:
        left = next_restart_at - now
        return f"{how}; restart in {math.ceil(left)} s" if left > 0 else f"{how}; restart due now"
    return f"{how}, {ago(now - last.time)} ago"
