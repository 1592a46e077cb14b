"""The warm launcher's own cgroup: a leaf of its own under the shellper cgroup parent, so it neither lives in
nor keeps alive the cgroup of the caller that started it (docs/DESIGN.md, "The warm launcher").

The launcher records where it was started (its *origin*: the caller's cgroup), moves into
``PARENT/launcher.<dir key>``, and a session it forks that runs uncontained moves back into the origin before it
forks its child (a contained one makes its own leaf from the launcher's and moves into it once it reported ready,
as a cold one does from its caller's): the session's cgroups are then a cold start's. At its
exit the launcher leaves its leaf and removes it. Where no writable parent is found (no cgroup v2 hierarchy,
a systemd manager without ``$SHELLPER_CGROUP_PARENT``, the parent inside a session's cgroup) it stays where
it was started, as a cold start's intermediate would.
"""

from __future__ import annotations

import contextlib
import os

from shellper.host.cgroup import (
    LAUNCHER_ORIGIN,
    PARENT_ENV,
    default_parent,
    dir_key,
    find_mount,
    own_cgroup,
    session_cgroup_of,
    systemd_manages_cgroups,
)

LEAF_PREFIX = "launcher."
"""A launcher's leaf is ``launcher.<dir key>``: never parsed as a session's (shellper.host.cgroup.LeafName)."""


def leaf_name(runtime_dir: str) -> str:
    return LEAF_PREFIX + dir_key(runtime_dir)


def is_launcher_leaf(name: str) -> bool:
    rest = name[len(LEAF_PREFIX):]
    return name.startswith(LEAF_PREFIX) and len(rest) == 12 and set(rest) <= set("0123456789abcdef")


class LauncherCgroup:
    """Where the launcher was started, and the leaf it moved into (None: it stayed there)."""

    def __init__(self, origin: str | None, leaf: str | None, why: str = "") -> None:
        self.origin = origin
        """The origin's absolute path in the v2 hierarchy; None without one."""
        self.leaf = leaf
        self.why = why
        """Why it stayed in its origin, for the log ("" when it moved)."""

    @classmethod
    def move_out(cls, runtime_dir: str) -> LauncherCgroup:
        """Move this process (the launcher) into its own leaf for ``runtime_dir``, where it can."""
        mount, here = find_mount(), own_cgroup()
        if mount is None or here is None:
            return cls(None, None, "no cgroup v2 hierarchy")
        origin = mount if here == "/" else mount + here
        if systemd_manages_cgroups() and not os.environ.get(PARENT_ENV):
            return cls(origin, None, "a systemd manager owns the hierarchy")
        parent = default_parent()
        if parent is None:
            return cls(origin, None, "no writable cgroup parent")
        real = os.path.realpath(parent)
        if not real.startswith(mount + "/") or session_cgroup_of(real[len(mount):]) is not None:
            return cls(origin, None, f"the cgroup parent {parent} is not one a launcher may use")
        leaf = os.path.join(real, leaf_name(runtime_dir))
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(real, 0o755)
            with contextlib.suppress(FileExistsError):  # one a killed launcher of this directory left
                os.mkdir(leaf, 0o755)
            _write_procs(leaf)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.rmdir(leaf)
            return cls(origin, None, f"cannot move into {leaf}: {exc.strerror}")
        return cls(origin, leaf)

    def origin_for_the_session(self) -> None:
        """In a session the launcher forked: where it goes if it runs uncontained (its caller's cgroup), read by
        the daemon (shellper.host.cgroup.back_to_launcher_origin); nothing where the launcher stayed there."""
        LAUNCHER_ORIGIN.clear()
        if self.leaf is not None and self.origin is not None:
            LAUNCHER_ORIGIN.append(self.origin)

    def leave(self) -> None:
        """At the launcher's exit: out of its leaf (to the leaf's parent, else the hierarchy's root, else its
        origin), which is then removed; errors ignored (an empty leaf a later launcher reuses)."""
        if self.leaf is None:
            return
        for target in (os.path.dirname(self.leaf), find_mount(), self.origin):
            if target is None:
                continue
            try:
                _write_procs(target)
                break
            except OSError:
                continue
        with contextlib.suppress(OSError):
            os.rmdir(self.leaf)


def _write_procs(cgroup: str) -> None:
    fd = os.open(os.path.join(cgroup, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)
