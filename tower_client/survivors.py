"""What a killed shellper left running, found by its marks (or its cgroup) and ended.

Re-exported from :mod:`shellper.host.survivors`, where it lives so that ``shellper stop`` and a shellper
reusing a dead session's name end what it left the same way, without this package. Nothing is
redefined here.
"""

from __future__ import annotations

from shellper.host.survivors import (
    INSTANCE_ENV,
    MAX_ROUNDS,
    Guard,
    SurvivorReport,
    end_cgroup,
    find_survivors,
    guard,
    protected_pids,
    reap_survivors,
)

__all__ = ["INSTANCE_ENV", "MAX_ROUNDS", "Guard", "SurvivorReport", "end_cgroup", "find_survivors", "guard",
           "protected_pids", "reap_survivors"]
