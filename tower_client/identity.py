"""Process identity for the Tower side: the same types the shellper writes into its record.

Re-exported from :mod:`shellper.host.identity` and :mod:`shellper.host.reaper` so a Tower has one import for
"who is this pid" (boot id + pid + kernel start ticks), pidfds that a recycled pid can never alias,
and the identity-checked tree teardown. Nothing is redefined here: one implementation, one set of
exception types.
"""

from __future__ import annotations

from shellper.host.identity import (
    IdentityError,
    IdentityMismatch,
    IdentityUnreadable,
    InvalidIdentityRecord,
    PidFd,
    ProcessGone,
    ProcessIdentity,
    ProcStat,
    boot_id,
    cmdline,
    open_verified,
    read_stat,
    start_time,
)
from shellper.host.reaper import SurvivorError, TerminateReport, descendants, terminate_tree

__all__ = [
    "IdentityError",
    "IdentityMismatch",
    "IdentityUnreadable",
    "InvalidIdentityRecord",
    "PidFd",
    "ProcStat",
    "ProcessGone",
    "ProcessIdentity",
    "SurvivorError",
    "TerminateReport",
    "boot_id",
    "cmdline",
    "descendants",
    "open_verified",
    "read_stat",
    "start_time",
    "terminate_tree",
]
