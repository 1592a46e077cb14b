"""The states a session is in, as the record, WELCOME, STATUS, EXIT and every client name them."""

from __future__ import annotations

from enum import StrEnum


class SessionState(StrEnum):
    """What the shellper is doing with its child. On the wire and in the record: the value, a string."""

    STARTING = "starting"
    """Spawning the first child, or a SPAWN's new one."""
    RUNNING = "running"
    BACKOFF = "backoff"
    """The child crashed; a restart is scheduled (``next_restart_at``)."""
    EXITED = "exited"
    """The child ended for good without a fault (clean, requested): a husk until SPAWN, STOP or the TTL."""
    FATAL = "fatal"
    """The child ended for good: a permanent error, or the crash-loop breaker tripped."""
    STOPPING = "stopping"
    """A STOP is ending the tree; the shellper exits next."""

    @property
    def ended(self) -> bool:
        """The child is gone for good and nothing restarts it (a husk)."""
        return self in (SessionState.EXITED, SessionState.FATAL)
