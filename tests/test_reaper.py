"""shellper.host.reaper against real process trees.

Trees are built by a small "root" (a stand-in shellper: optional subreaper, optionally ignoring
SIGTERM) running a shell script whose processes ignore SIGTERM and SIGHUP, including one that
setsid()s away and one orphan that stays in the root's process group. Every pid a tree reports is
pinned with a pidfd at once; cleanup only ever signals through those pidfds or our own Popen.
While a test runs, the test process is a child subreaper, so every orphan of a killed tree comes
back to us and is reaped: no zombie is left behind (the fixture asserts it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shellper.core import structs
from shellper.host.identity import (
    IdentityError,
    IdentityMismatch,
    NotAChild,
    PidFd,
    ProcessGone,
    ProcessIdentity,
    parent_pid,
    process_group,
    process_state,
)
from shellper.host.reaper import (
    SurvivorError,
    children,
    descendants,
    get_child_subreaper,
    kill_group_and_descendants,
    set_child_subreaper,
    set_parent_death_signal,
    terminate_tree,
)

REPO = str(Path(__file__).resolve().parents[1])

ROOT = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from shellper.host.reaper import set_child_subreaper
if sys.argv[2] == "1":
    set_child_subreaper()
if sys.argv[3] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
print("root", os.getpid(), flush=True)
os.posix_spawn("/bin/sh", ["/bin/sh", "-c", sys.argv[4]], os.environ)
while True:  # reap like a shellper does; wait for the end once childless
    try:
        os.wait()
    except ChildProcessError:
        signal.pause()
"""

# Everything ignores TERM and HUP (ignored dispositions survive fork and exec).
STUBBORN = r"""
trap '' TERM HUP
echo "script $$"
sleep 60 & echo "child $!"
sh -c 'echo "inner $$"; sleep 60 & echo "grandchild $!"; echo inner-ready; wait' &
(setsid sh -c 'echo "escapee $$"; exec sleep 60' &)  # reports itself once setsid() is done
(sleep 60 & echo "groupie $!")
echo ready
wait
"""
STUBBORN_LABELS = {"root", "script", "child", "inner", "grandchild", "escapee", "groupie"}

POLITE = r"""
echo "script $$"
sleep 60 & echo "child $!"
echo ready
wait
"""


@dataclasses.dataclass
class Tree:
    proc: subprocess.Popen[bytes]
    pids: dict[str, int]

    @property
    def root(self) -> int:
        return self.proc.pid


class Scope:
    """What a test started: our Popen children and pidfds pinned on everything they reported."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pinned: dict[int, tuple[PidFd, ProcessIdentity]] = {}

    def pin(self, pid: int, *, may_be_gone: bool = False) -> None:
        try:
            fd = PidFd.open(pid)
        except ProcessGone:
            if may_be_gone:
                return
            raise
        ident = ProcessIdentity.of(pid)
        if ident is None and may_be_gone:  # it exited and was reaped between the two reads
            fd.close()
            return
        assert ident is not None and fd.is_unreaped()
        self.pinned[pid] = (fd, ident)

    def dead(self, pid: int) -> bool:
        return self.pinned[pid][0].wait_dead(0)

    def tree(self, script: str, *, subreaper: bool, ignore_term: bool, new_session: bool = True,
             labels: set[str] | None = None) -> Tree:
        proc = subprocess.Popen(
            [sys.executable, "-c", ROOT, REPO, str(int(subreaper)), str(int(ignore_term)), script],
            stdout=subprocess.PIPE,
            start_new_session=new_session,
        )
        self.procs.append(proc)
        self.pin(proc.pid)
        wanted = {"ready", "inner-ready", "escapee"} if labels is None else labels
        pids = _read_labels(proc, wanted)
        for pid in pids.values():
            if pid not in self.pinned:  # a short-lived script may be gone (and reaped) already
                self.pin(pid, may_be_gone=True)
        return Tree(proc, pids)

    def cleanup(self) -> list[int]:
        """Kill what is left, reap what came back to us; return pids left as zombies."""
        for fd, _ in self.pinned.values():
            with contextlib.suppress(ProcessGone):
                fd.send_signal(signal.SIGKILL)
        for fd, _ in self.pinned.values():
            fd.wait_dead(5)
        for p in self.procs:
            p.wait(timeout=5)
            if p.stdout is not None:
                p.stdout.close()
        for pid in self.pinned:
            with contextlib.suppress(ChildProcessError):  # reaped by its parent, or not ours
                os.waitpid(pid, os.WNOHANG)
        left = [pid for pid, (fd, _) in self.pinned.items() if fd.is_unreaped()]
        for fd, _ in self.pinned.values():
            fd.close()
        return left


def _read_labels(proc: subprocess.Popen[bytes], wanted: set[str], timeout: float = 10.0) -> dict[str, int]:
    """Read 'label pid' lines until every wanted label was seen (event-driven, with a deadline)."""
    assert proc.stdout is not None
    pids: dict[str, int] = {}
    seen: set[str] = set()
    buf = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not wanted <= seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"tree did not report {wanted - seen}"
            if not sel.select(remaining):
                continue
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"tree closed stdout before reporting {wanted - seen}"
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                label, _, pid = line.decode().partition(" ")
                seen.add(label)
                if pid:
                    pids[label] = int(pid)
    return pids


@pytest.fixture
def scope() -> Iterator[Scope]:
    was = get_child_subreaper()
    set_child_subreaper(True)
    s = Scope()
    try:
        yield s
    finally:
        left = s.cleanup()
        set_child_subreaper(was)
    assert not left, f"zombies left behind: {left}"


# ------------------------------------------------------------------------- discovery


def test_descendants_of_subreaper_root_include_escapees(scope: Scope) -> None:
    t = scope.tree(STUBBORN, subreaper=True, ignore_term=True)
    p = t.pids
    assert set(p) == STUBBORN_LABELS
    found = descendants(t.root)
    assert set(found) == {p["script"], p["child"], p["inner"], p["grandchild"], p["escapee"], p["groupie"]}
    assert found.index(p["script"]) < found.index(p["inner"]) < found.index(p["grandchild"])
    assert set(children(t.root)) == {p["script"], p["escapee"], p["groupie"]}  # orphans came back
    assert parent_pid(p["escapee"]) == t.root
    assert descendants(p["child"]) == []


def test_descendants_of_missing_pid_is_empty() -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    assert descendants(p.pid) == [] and children(p.pid) == []


# ------------------------------------------------------------------------- terminate_tree


@pytest.mark.parametrize("root_ignores_term", [True, False])
def test_terminate_tree_kills_stubborn_grandchildren(scope: Scope, root_ignores_term: bool) -> None:
    t = scope.tree(STUBBORN, subreaper=True, ignore_term=root_ignores_term)
    ident = ProcessIdentity.of(t.root)
    assert ident is not None
    report = terminate_tree(ident, grace=0.3)
    everyone = set(t.pids.values())
    assert all(scope.dead(pid) for pid in everyone)
    assert report.pid == t.root and report.group_signalled
    assert set(report.termed) == everyone
    stubborn = everyone - {t.root} if not root_ignores_term else everyone
    assert set(report.killed) == stubborn
    assert report.denied == ()
    assert 0.3 <= report.elapsed < 3.3
    # "dead" includes "exited, not yet reaped": the root stays our zombie until we reap it
    assert scope.pinned[t.root][0].is_unreaped()
    expected = -signal.SIGKILL if root_ignores_term else -signal.SIGTERM
    assert t.proc.wait(timeout=5) == expected


def test_terminate_tree_returns_as_soon_as_tree_exits(scope: Scope) -> None:
    t = scope.tree(POLITE, subreaper=False, ignore_term=False, labels={"ready"})
    ident = ProcessIdentity.of(t.root)
    assert ident is not None
    report = terminate_tree(ident, grace=10.0)
    assert report.killed == ()
    assert report.elapsed < 3.0  # woken by pidfds, not by the grace period
    assert all(scope.dead(pid) for pid in t.pids.values())


def test_stopped_job_gets_sigcont_to_handle_sigterm(scope: Scope) -> None:
    """A stopped process with a TERM handler can only run it once continued."""
    code = ("import signal, sys, os; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
            "print('me', os.getpid(), flush=True); signal.pause()")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    scope.procs.append(p)
    scope.pin(p.pid)
    _read_labels(p, {"me"})  # handler installed
    fd, ident = scope.pinned[p.pid]
    fd.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while process_state(p.pid) != "T":
        assert time.monotonic() < deadline, "did not stop"
    report = terminate_tree(ident, grace=10.0)
    assert report.killed == () and report.elapsed < 5.0
    assert p.wait(timeout=5) == 0  # exited through its handler


@pytest.mark.parametrize("include_group", [True, False])
def test_without_subreaper_only_the_group_reaches_orphans(scope: Scope, include_group: bool) -> None:
    """Documented limit: a double-forked setsid() grandchild escapes a root that is no subreaper;
    an orphan that stayed in the root's group is reached only through the group."""
    t = scope.tree(STUBBORN, subreaper=False, ignore_term=True)
    p = t.pids
    # both orphans were re-parented to us (the test's subreaper), away from the tree
    assert parent_pid(p["escapee"]) == parent_pid(p["groupie"]) == os.getpid()
    assert p["escapee"] not in descendants(t.root) and p["groupie"] not in descendants(t.root)
    assert process_group(p["groupie"]) == t.root
    ident = ProcessIdentity.of(t.root)
    assert ident is not None
    report = terminate_tree(ident, grace=0.2, include_group=include_group)
    assert report.group_signalled == include_group
    assert scope.dead(p["groupie"]) == include_group == (p["groupie"] in report.killed)
    assert not scope.dead(p["escapee"]) and p["escapee"] not in report.termed
    assert all(scope.dead(pid) for label, pid in p.items() if label not in ("escapee", "groupie"))


def test_leader_outside_own_group_never_signals_our_group(scope: Scope) -> None:
    t = scope.tree(STUBBORN, subreaper=True, ignore_term=True, new_session=False)
    assert process_group(t.root) == os.getpgrp() != t.root
    ident = ProcessIdentity.of(t.root)
    assert ident is not None
    report = terminate_tree(ident, grace=0.2)
    assert not report.group_signalled
    assert all(scope.dead(pid) for pid in t.pids.values())  # reached one by one as descendants


def test_zombie_leader_still_pins_its_group(scope: Scope) -> None:
    """The leader exited (unreaped); its group lives on in an orphan that ignores TERM."""
    script = "trap '' TERM HUP; echo \"script $$\"; (sleep 60 & echo \"groupie $!\"); echo ready"
    t = scope.tree(script, subreaper=False, ignore_term=False, labels={"ready"})
    # take the root down ourselves (our own child) and keep it as a zombie
    scope.pinned[t.root][0].send_signal(signal.SIGKILL)
    assert scope.pinned[t.root][0].wait_dead(5)
    ident = scope.pinned[t.root][1]
    assert not ident.is_alive()
    report = terminate_tree(ident, grace=0.2)
    assert report.killed == (t.pids["groupie"],)
    assert scope.dead(t.pids["groupie"])


def test_terminate_tree_refuses_mismatch_and_leaves_tree_alone(scope: Scope) -> None:
    t = scope.tree(STUBBORN, subreaper=True, ignore_term=False)
    ident = ProcessIdentity.of(t.root)
    assert ident is not None
    forged = structs.replace(ident, start_time=ident.start_time + 1)
    with pytest.raises(IdentityMismatch):
        terminate_tree(forged, grace=0.1)
    assert not any(scope.dead(pid) for pid in t.pids.values())


def test_terminate_tree_refuses_dead_leader_and_self(scope: Scope) -> None:
    p = subprocess.Popen(["true"])
    ident = ProcessIdentity.of(p.pid)  # exists until reaped, even if already exited
    assert ident is not None
    p.wait()
    with pytest.raises(ProcessGone):
        terminate_tree(ident, grace=0.1)
    with pytest.raises(IdentityError):
        terminate_tree(ProcessIdentity.current(), grace=0.1)


FREEZER = Path("/sys/fs/cgroup/freezer")


@pytest.mark.skipif(not (FREEZER / "cgroup.procs").exists() or not os.access(FREEZER, os.W_OK),
                    reason="needs a writable cgroup v1 freezer to make a process unkillable")
def test_unkillable_process_raises_survivor_error(scope: Scope) -> None:
    """A task in a frozen v1 cgroup cannot act on SIGKILL until thawed: a genuine survivor."""
    cg = FREEZER / f"shellper-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    cg.mkdir()
    p = subprocess.Popen(["sleep", "60"], start_new_session=True)
    scope.procs.append(p)
    scope.pin(p.pid)
    try:
        (cg / "cgroup.procs").write_text(str(p.pid))
        (cg / "freezer.state").write_text("FROZEN")
        deadline = time.monotonic() + 5
        while (cg / "freezer.state").read_text().strip() != "FROZEN":
            assert time.monotonic() < deadline, "cgroup did not freeze"
        ident = scope.pinned[p.pid][1]
        with pytest.raises(SurvivorError) as info:
            terminate_tree(ident, grace=0.1, confirm_timeout=0.3)
        assert info.value.pids == (p.pid,)
        report = info.value.report
        assert report is not None and report.killed == (p.pid,) and report.termed == (p.pid,)
        assert not scope.dead(p.pid)
    finally:
        with contextlib.suppress(ProcessGone):
            scope.pinned[p.pid][0].send_signal(signal.SIGKILL)
        (cg / "freezer.state").write_text("THAWED")
        p.wait(timeout=5)
        cg.rmdir()


# ------------------------------------------------------------------------- own child


def test_kill_group_and_descendants_of_own_child(scope: Scope) -> None:
    t = scope.tree(STUBBORN, subreaper=True, ignore_term=True)
    p = t.pids
    with pytest.raises(NotAChild) as info:  # a grandchild's pid is not pinned by us
        kill_group_and_descendants(p["child"], signal.SIGKILL)
    assert info.value.ppid == p["script"] and not scope.dead(p["child"])
    signalled = kill_group_and_descendants(t.root, signal.SIGKILL)
    # (a member may be reaped by its dying parent before its turn: then it is not listed)
    assert signalled[0] == t.root and set(signalled) <= set(p.values())
    assert all(scope.pinned[pid][0].wait_dead(5) for pid in p.values())
    assert t.proc.wait(timeout=5) == -signal.SIGKILL
    with pytest.raises(ProcessGone):  # reaped: its number is free again, refuse
        kill_group_and_descendants(t.root, signal.SIGKILL)


# ------------------------------------------------------------------------- prctl helpers


def test_child_subreaper_toggles() -> None:
    was = get_child_subreaper()
    try:
        set_child_subreaper(True)
        assert get_child_subreaper()
        set_child_subreaper(False)
        assert not get_child_subreaper()
    finally:
        set_child_subreaper(was)


def test_parent_death_signal_kills_orphan(scope: Scope) -> None:
    middle = r"""
import subprocess, sys
c = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]], stdout=sys.stdout)
sys.stdin.read()
"""
    child = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from shellper.host.reaper import set_parent_death_signal
set_parent_death_signal(signal.SIGKILL)
print("child", os.getpid(), flush=True)
signal.pause()
"""
    m = subprocess.Popen([sys.executable, "-c", middle, REPO, child], stdout=subprocess.PIPE,
                         stdin=subprocess.PIPE)
    scope.procs.append(m)
    scope.pin(m.pid)
    pid = _read_labels(m, {"child"})["child"]
    scope.pin(pid)
    assert m.stdin is not None
    m.stdin.close()  # the middle process exits; its child must follow
    assert scope.pinned[pid][0].wait_dead(5)


def test_parent_death_signal_rejects_bad_signal() -> None:
    with pytest.raises(OSError) as info:
        set_parent_death_signal(1000)
    assert info.value.errno == 22


def test_reap_children_nohang_reaps_all_exited_children() -> None:
    """Runs in a helper: reaping *all* children inside pytest would steal others' Popen children."""
    helper = r"""
import json, os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from shellper.host.identity import PidFd
from shellper.host.reaper import reap_children_nohang
assert reap_children_nohang() == []
pids = [os.posix_spawn("/bin/sh", ["/bin/sh", "-c", f"exit {n}"], os.environ) for n in (3, 4)]
live = os.posix_spawn("/bin/sleep", ["sleep", "30"], os.environ)
for pid in pids:
    with PidFd.open(pid) as fd:
        assert fd.wait_dead(5)
got = reap_children_nohang()
with PidFd.open(live) as fd:
    fd.send_signal(9)
    assert fd.wait_dead(5)
got2 = reap_children_nohang()
print(json.dumps({"pids": pids, "live": live, "got": got, "got2": got2}))
"""
    out = subprocess.run([sys.executable, "-c", helper, REPO], capture_output=True, check=True, timeout=20)
    r = json.loads(out.stdout)
    assert sorted((pid, os.waitstatus_to_exitcode(st)) for pid, st in r["got"]) == sorted(
        zip(r["pids"], [3, 4], strict=True)
    )
    assert [(pid, os.waitstatus_to_exitcode(st)) for pid, st in r["got2"]] == [(r["live"], -9)]
