"""How a session's processes are held together: what the record, ``ls``, STATUS and reconcile report."""

from __future__ import annotations

from enum import StrEnum


class Containment(StrEnum):
    CGROUP = "cgroup"
    """A cgroup v2 of the session's own, made under the cgroup parent (shellper.host.cgroup)."""
    SYSTEMD_SCOPE = "systemd-scope"
    """The same, under a delegated systemd scope that ``launch()`` asked systemd for."""
    NONE = "none"
    """No cgroup could be made: the session's processes are found by pid, pinned through pidfds."""


CONTAINMENT_REQUESTS = ("auto", Containment.CGROUP, Containment.NONE)
"""What --containment accepts: auto uses a cgroup where one can be made and falls back to none."""
