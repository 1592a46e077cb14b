"""What a Tower chooses for its Fleet and for each session it launches: typed options, checked when built.

Apart from :mod:`tower_client.fleet` so that ``tower_client`` exports them without importing the Fleet (the
``tower-client`` command does not pay for it); the Fleet re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shellper.core.defaults import DEFAULT_GRACE
from tower_client.agent import AgentCommand
from tower_client.resume import Backoff

__all__ = ["FleetPolicy", "OnDeath", "SessionSpec"]


class OnDeath(StrEnum):
    """What the Fleet does when a shellper dies while the Tower runs (not stopped: died)."""

    RESPAWN = "respawn"
    """End what its tree left, remove its files, and start it again from its registry row."""
    REAP = "reap"
    """End what its tree left, remove its files, drop its row."""
    REPORT = "report"
    """Only report it (StateChange gone + Notice died); files and row stay for the Tower to decide."""


@dataclass(frozen=True)
class FleetPolicy:
    on_death: OnDeath = OnDeath.RESPAWN
    concurrency: int = 4
    """Sessions started or stopped at once by launch_many / stop_many / the start's respawns."""
    grace: float = DEFAULT_GRACE
    """Seconds a stopping session's tree gets between SIGTERM and SIGKILL."""
    husk_max_age: float | None = None
    """Passed to reconcile: a husk older than this is terminated on start (None: kept)."""
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, not {self.concurrency!r}")
        if not isinstance(self.grace, int | float) or not self.grace >= 0:
            raise ValueError(f"grace must be a number of seconds >= 0, not {self.grace!r}")


@dataclass(frozen=True)
class SessionSpec:
    """A session to launch: its command (``argv``, or ``agent`` for an agent CLI whose conversation id
    the Fleet resolves), ``cwd`` and ``env`` (default: the Tower's), other SessionConfig fields in
    ``options`` (cols, rows, ring_bytes, policy, husk_ttl, ...) and the Tower's own registry columns."""

    name: str
    argv: Sequence[str] = ()
    agent: AgentCommand | None = None
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    columns: Mapping[str, Any] = field(default_factory=dict)
