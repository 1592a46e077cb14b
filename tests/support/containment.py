"""Containment modes and nested sessions: what the containment, adversary and trust tests share."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from shellper.host import cgroup
from shellper.host.identity import ProcessIdentity
from shellper.host.record import SessionRecord, read_record
from shellper.host.shellpers import holds_listener, session_cgroup
from support.paths import SHELLPER_CLI
from support.processes import identity
from support.run import CGROUP_PARENT
from support.sessions import Sessions
from support.waiting import poll_until
from tower_client.discover import discover
from tower_client.reconcile import Registry, RegistryRow, reconcile

needs_cgroup = pytest.mark.skipif(CGROUP_PARENT is None, reason="no writable cgroup v2 hierarchy here (CI has one: "
                                  "root, /sys/fs/cgroup[/unified]); the fallback tests still run")
MODES = [pytest.param("cgroup", marks=needs_cgroup), "none"]


def decide(d: Path, *rows: RegistryRow, owner: str | None = None) -> list:  # type: ignore[type-arg]
    return reconcile(Registry(rows), discover(d), now=time.time(), owner=owner)


def nested_argv(inner_dir: Path, mode: str) -> list[str]:
    """An outer child that starts session "inner" of ``inner_dir`` from inside, then waits."""
    cli = " ".join(SHELLPER_CLI)
    return ["sh", "-c", f"{cli} --dir {inner_dir} run inner --containment {mode} -- sh -c 'sleep 300' "
            f"> /dev/null; echo started; sleep 300"]


def settled(record: SessionRecord, directory: str) -> bool:
    """The shellper listens and, when contained, has moved into its own cgroup, which it does only after
    reporting ready: until then it is still inside the cgroup it was started from (a documented limit)."""
    if not holds_listener(record.shellper_pid, record.socket):
        return False
    group = session_cgroup(record, directory)
    return group is None or cgroup.member_of(record.shellper_pid, group.relative + "/" + cgroup.SHELLPER_SUB)


def start_nested(sessions: Sessions, other: Sessions, outer_mode: str, inner_mode: str) -> tuple[
        ProcessIdentity, ProcessIdentity, ProcessIdentity]:
    """Outer session "outer" of ``sessions`` whose child starts "inner" of ``other``: (outer, inner shellper,
    inner child), all tracked for cleanup."""
    outer = sessions.start("outer", nested_argv(other.dir, inner_mode), containment=outer_mode)
    inner = poll_until(lambda: (other.dir / "inner.json").exists() and read_record(other.dir / "inner.json"),
                       what="the inner session")
    inner_shellper = ProcessIdentity(inner.boot_id, inner.shellper_pid, inner.shellper_start_time)
    other.track(inner_shellper)
    poll_until(lambda: settled(inner, str(other.dir)), what="the inner shellper in its own cgroup")
    child = poll_until(lambda: read_record(other.dir / "inner.json").child_pid, what="the inner child")
    inner_child = identity(child)
    other.track(inner_child)
    return ProcessIdentity(outer.boot_id, outer.pid, outer.start_time), inner_shellper, inner_child
