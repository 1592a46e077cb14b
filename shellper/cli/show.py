"""How the commands show durations, sizes and times past to a person."""

from __future__ import annotations


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
