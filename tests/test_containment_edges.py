"""Containment at its edges (issue 27, defects 6-10): a root child that moves itself within the cgroups, a cgroup
made by hand to look like a session's, a cgroup whose runtime directory was removed, a read-only runtime directory.

Real shellpers, real cgroups (we are root; skipped where no cgroup v2 hierarchy can be written) and real mounts.
A "mover" is a session's grandchild that does what only root inside a session can: it moves itself into another
cgroup (a sub-cgroup it makes, its own session's shellper/ part, or another session's), then waits.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.launchers import settled
from support.paths import SHELLPER_CLI
from support.processes import alive, identity, is_dead, tree
from support.run import CGROUP_PARENT, default_parent_made, sweep_dead_runs
from support.sessions import Sessions, left_in
from support.waiting import poll_until

from shellper.core.owner import default_owner
from shellper.host import cgroup
from shellper.host.identity import ProcessIdentity
from shellper.host.record import read_record
from shellper.host.shellpers import holds_listener
from tower_client.apply import apply
from tower_client.discover import discover
from tower_client.reconcile import ReconcileAction, Registry, reconcile

pytestmark = [pytest.mark.skipif(CGROUP_PARENT is None, reason="no writable cgroup v2 hierarchy here (CI has one: "
                                 "root, /sys/fs/cgroup[/unified])"), pytest.mark.kills_sessions]

MOVER = r"""
import os, signal, sys
target, marker = sys.argv[1], sys.argv[2]
with open("/proc/self/cgroup") as f:
    here = [line[3:].strip() for line in f if line.startswith("0::")][0]
leaf = sys.argv[3] + os.path.dirname(here)  # the session's leaf (we start in its child/ part)
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    where = target if target.startswith("/") else os.path.join(leaf, target)
    os.makedirs(where, exist_ok=True)  # a sub-cgroup of its own making, if it is one
    with open(os.path.join(where, "cgroup.procs"), "w") as f:
        f.write("0")
    with open(marker + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(marker + ".tmp", marker)
    signal.pause()
signal.pause()
"""


def mount() -> str:
    found = cgroup.find_mount()
    assert found is not None
    return found


def launch_mover(sessions: Sessions, name: str, target: str, tmp: Path) -> tuple[ProcessIdentity, ProcessIdentity]:
    """Session ``name`` whose grandchild moves itself into ``target`` (absolute, or relative to the session's
    leaf): (the shellper, the mover), both tracked for cleanup."""
    marker = tmp / f"{name}.mover"
    info = sessions.start(name, [sys.executable, "-c", MOVER, target, str(marker), mount()], containment="cgroup",
                           grace=0.3)
    mover = identity(int(poll_until(lambda: marker.exists() and marker.read_text(), what="the mover")))
    sessions.track(mover)
    return identity(info.pid), mover


def settle(sessions: Sessions, name: str) -> cgroup.SessionCgroup:
    """The session's cgroup, once its shellper has moved into its shellper/ part."""
    rec = read_record(sessions.dir / f"{name}.json")
    assert rec.cgroup is not None
    group = cgroup.SessionCgroup(rec.cgroup, mount())
    poll_until(lambda: holds_listener(rec.shellper_pid, rec.socket)
               and cgroup.member_of(rec.shellper_pid, group.relative + "/" + cgroup.SHELLPER_SUB),
               what="the shellper in its shellper/ part")
    return group


def kill9(ident: ProcessIdentity) -> None:
    os.kill(ident.pid, signal.SIGKILL)  # a shellper this test launched, verified by identity() just before
    poll_until(lambda: is_dead(ident), what=f"shellper {ident.pid} to die")


def tower(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``tower-client`` against ``directory``; ``reconcile`` with an empty registry (on stdin)."""
    registry = ["--registry", "-"] if args[:1] == ("reconcile",) else []
    return subprocess.run([sys.executable, "-m", "tower_client.cli", "--dir", str(directory), *args, *registry],
                          capture_output=True, text=True, timeout=60, input='{"sessions": []}')


def shellper(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SHELLPER_CLI, "--dir", str(directory), *args], capture_output=True, text=True, timeout=60)


def end(ident: ProcessIdentity) -> None:
    """SIGKILL a process this test started (verified: this boot, its start ticks) and wait for it."""
    if alive(ident):
        os.kill(ident.pid, signal.SIGKILL)
    poll_until(lambda: is_dead(ident), what=f"{ident.pid} to die")


# --------------------------------------------------------------------------------------------- 6: strangers


def test_a_stranger_in_a_killed_sessions_shellper_part_does_not_save_its_leftovers(
        sessions: Sessions, tmp_path: Path) -> None:
    """Defect 6: a root child of session b moved into a's shellper/; a's shellper was then killed. Reconcile
    took the stranger for a's live shellper ("suspect"): a's leftovers ran on, and its cgroup stayed forever.
    Now a's leftovers are ended, the stranger is named and not signalled, and the cgroup goes once it leaves."""
    a_shellper = identity(sessions.start("a", ["sh", "-c", "trap '' HUP TERM; (setsid sh -c 'trap \"\" HUP TERM; "
                                                "while :; do sleep 1; done' &); while :; do sleep 1; done"],
                                          containment="cgroup", grace=0.3).pid)
    group = settle(sessions, "a")
    leftovers = poll_until(lambda: len(tree(a_shellper.pid)) >= 3 and tree(a_shellper.pid), what="a's tree")
    _, stranger = launch_mover(sessions, "b", group.sub(cgroup.SHELLPER_SUB), tmp_path)
    assert cgroup.own_cgroup(stranger.pid) == group.relative + "/" + cgroup.SHELLPER_SUB
    kill9(a_shellper)
    found = reconcile(Registry(), discover(sessions.dir), now=time.time())
    assert [(d.name, d.action, d.reason) for d in found if d.name == "a"] == [("a", ReconcileAction.CLEAN, "dead")]
    report = apply([d for d in found if d.name == "a"], grace=0.3)
    assert all(is_dead(m) for m in leftovers), report.to_dict()
    assert alive(stranger)
    outcome = report.outcomes[0]
    assert not outcome.ok and str(stranger.pid) in (outcome.error or ""), outcome  # named, and the cgroup kept
    assert os.path.isdir(group.path)
    end(stranger)  # it leaves: the cgroup, now no record's, is a stray that is verifiably a's
    found = reconcile(Registry(), discover(sessions.dir), now=time.time())
    assert [(d.action, d.reason, d.cgroup) for d in found if d.name == "a"] == [
        (ReconcileAction.CLEAN, "stray_cgroup", group.path)]
    assert apply([d for d in found if d.name == "a"]).ok
    assert not os.path.exists(group.path)
    assert shellper(sessions.dir, "stop", "b").returncode == 0


def test_stop_does_not_claim_success_while_a_child_that_moved_into_shellper_lives(
        sessions: Sessions, tmp_path: Path) -> None:
    """Defect 6: the session's root child moved into its own shellper/; `stop` returned 0 while it lived on.
    Now stop fails naming it (it is not signalled: nothing proves whose it is), and the cgroup is kept."""
    shellper_ident, mover = launch_mover(sessions, "s", cgroup.SHELLPER_SUB, tmp_path)
    group = settle(sessions, "s")
    done = shellper(sessions.dir, "stop", "s", "--grace", "0.3")
    assert done.returncode == 1, done.stdout + done.stderr
    assert str(mover.pid) in done.stderr and "not signalled" in done.stderr, done.stderr
    poll_until(lambda: is_dead(shellper_ident), what="the shellper to exit")
    assert alive(mover) and os.path.isdir(group.path)
    assert left_in(sessions.dir) == []
    end(mover)
    assert tower(sessions.dir, "reconcile", "--apply").returncode == 0
    assert not os.path.exists(group.path)


# --------------------------------------------------------------------------------------------- 7: sub-cgroups


@pytest.mark.parametrize("where", ["child/sub", "sub", "."])
def test_stop_ends_and_removes_a_sub_cgroup_a_root_child_made(sessions: Sessions, tmp_path: Path, where: str) -> None:
    """Defect 7: a sub-cgroup made by a root child kept the session's cgroup after `stop` (rmdir of child/
    failed, ENOTEMPTY), or, made beside child/ (or in the leaf itself), kept its process alive."""
    shellper_ident, mover = launch_mover(sessions, "s", where, tmp_path)
    group = settle(sessions, "s")
    done = shellper(sessions.dir, "stop", "s", "--grace", "0.3")
    assert done.returncode == 0, done.stderr
    poll_until(lambda: is_dead(shellper_ident), what="the shellper to exit")
    assert is_dead(mover)
    assert not os.path.exists(group.path)


@pytest.mark.parametrize("where", ["child/sub", "."])
def test_reconcile_removes_a_stray_cgroup_with_a_sub_cgroup_and_says_so_truthfully(
        sessions: Sessions, tmp_path: Path, where: str) -> None:
    """Defect 7: every `reconcile --apply` printed "removed cgroup X", rc 0, while X (holding a sub-cgroup a root
    child made) was still there. A process in the leaf itself is ended too (no cgroup.kill spares shellper/)."""
    shellper_ident, mover = launch_mover(sessions, "s", where, tmp_path)
    group = settle(sessions, "s")
    kill9(shellper_ident)
    for p in sessions.dir.iterdir():
        p.unlink()
    done = tower(sessions.dir, "reconcile", "--apply", "--grace", "0.3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"removed cgroup {group.path}" in done.stdout
    assert is_dead(mover)
    assert not os.path.exists(group.path)
    again = tower(sessions.dir, "reconcile", "--apply")
    assert again.stdout.strip() == "nothing to do", again.stdout


# --------------------------------------------------------------------------------------------- 8: proof


def test_a_hand_made_cgroup_named_like_a_sessions_is_never_signalled(sessions: Sessions) -> None:
    """Defect 8: stray cgroups were recognised by name alone, and both keys in a name are hashes of public
    strings: a hand-made cgroup so named had its unrelated process SIGTERMed and SIGKILLed by reconcile --apply.
    A shellper's own leaf carries a proof a stranger cannot set (trusted.* on a root-owned leaf); a user.*
    attribute on a root-owned leaf, which its maker can set, proves nothing."""
    real = sessions.start("r", ["sleep", "300"], containment="cgroup")
    rec = read_record(sessions.dir / "r.json")
    assert CGROUP_PARENT is not None and rec.cgroup is not None
    leaf = cgroup.LeafName.of(str(sessions.dir), default_owner(), "h", secrets.token_hex(16))
    path = os.path.join(CGROUP_PARENT, str(leaf))
    for sub in ("", "child", "shellper"):
        os.mkdir(os.path.join(path, sub))
    os.setxattr(path, "user.shellper.dir", os.fsencode(os.path.realpath(sessions.dir)))
    victim = sessions.spawn(["sleep", "300"])
    ident = identity(victim.pid)
    with open(os.path.join(path, "child", "cgroup.procs"), "w") as f:
        f.write(str(victim.pid))
    found = reconcile(Registry(), discover(sessions.dir), now=time.time())
    apply([d for d in found if d.name == "h"], grace=0.3)
    assert alive(ident)
    assert [(d.name, d.action, d.reason) for d in found] == [("h", ReconcileAction.LEAVE, "stray_cgroup_unproven"),
                                                             ("r", ReconcileAction.TERMINATE, "unregistered")]
    assert cgroup.proof(rec.cgroup) == (os.path.realpath(sessions.dir), "")
    assert "carries no shellper proof" in cgroup.proof(path)[1]
    assert alive(identity(real.pid))


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace, to SIGKILL a shellper at its setxattr")
def test_a_shellper_killed_before_its_cgroup_proof_leaves_nothing_after_reconcile(sessions: Sessions) -> None:
    """make test's kill soak found it: a shellper SIGKILLed between making its leaf and setting the proof left a
    leaf that no reconcile would touch. strace delivers the SIGKILL at exactly that setxattr."""
    assert CGROUP_PARENT is not None
    strace = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=setxattr", "-e", "inject=setxattr:signal=SIGKILL"]
    started = subprocess.run([*strace, *SHELLPER_CLI, "--dir", str(sessions.dir), "run", "--containment", "cgroup",
                              "--cgroup-parent", CGROUP_PARENT, "k", "--", "sleep", "300"],
                             capture_output=True, text=True, timeout=60)
    assert started.returncode != 0 and "exited before it was ready" in started.stderr, started
    key = cgroup.dir_key(str(sessions.dir))
    leaves = [os.path.join(CGROUP_PARENT, e) for e in os.listdir(CGROUP_PARENT)
              if (leaf := cgroup.LeafName.parse(e)) is not None and leaf.dir_key == key]
    assert len(leaves) == 1 and "no shellper proof" in cgroup.proof(leaves[0])[1]
    assert cgroup.SessionCgroup(leaves[0], cgroup.find_mount() or "").bare()
    applied = tower(sessions.dir, "reconcile", "--apply")
    assert "which held nothing" in applied.stdout, applied
    assert not os.path.exists(leaves[0]) and left_in(sessions.dir) == []


def test_a_bare_leaf_without_proof_is_removed_and_anything_more_is_left(sessions: Sessions) -> None:
    """A shellper SIGKILLed between making its leaf and setting the proof left a leaf that reconcile would never
    touch (make test's kill soak found one). A leaf of this user holding nothing, not even a sub-cgroup, is now
    removed; an unproven one with a sub-cgroup, or another user's, is still left."""
    assert CGROUP_PARENT is not None

    def leaf(name: str, subs: tuple[str, ...] = ()) -> str:
        path = os.path.join(CGROUP_PARENT, str(cgroup.LeafName.of(str(sessions.dir), default_owner(), name,
                                                                  secrets.token_hex(16))))
        for sub in ("", *subs):
            os.mkdir(os.path.join(path, sub))
        return path

    cut_short, with_sub, foreign = leaf("k"), leaf("s", ("child",)), leaf("f")
    os.chown(foreign, 65534, 65534)
    try:
        found = reconcile(Registry(), discover(sessions.dir), now=time.time())
        assert [(d.name, d.action, d.reason) for d in found] == [
            ("f", ReconcileAction.LEAVE, "stray_cgroup_unproven"), ("k", ReconcileAction.CLEAN, "stray_cgroup_bare"),
            ("s", ReconcileAction.LEAVE, "stray_cgroup_unproven")]
        report = apply(found, grace=0.3)
        assert [(o.decision.name, o.result) for o in report.outcomes] == [
            ("f", "reported"), ("k", "cleaned"), ("s", "reported")]
        assert not os.path.exists(cut_short) and os.path.isdir(with_sub) and os.path.isdir(foreign)
    finally:
        for path in (with_sub, foreign, cut_short):
            for root, _dirs, _files in os.walk(path, topdown=False):
                os.rmdir(root)


# --------------------------------------------------------------------------------------------- 9: leaked leaves


def test_reconcile_removes_the_owners_empty_cgroups_whose_runtime_directory_is_gone(
        sessions: Sessions, other: Sessions) -> None:
    """Defect 9: a shellper killed, then its runtime directory removed, left its empty cgroup forever (27 were
    found on one machine): discovery goes by directory. Any reconcile of the owner now removes it; one that
    still holds processes is reported and left."""
    gone = other.start("g", ["sleep", "300"], containment="cgroup")
    gone_cgroup = read_record(other.dir / "g.json").cgroup
    assert gone_cgroup is not None
    kill9(identity(gone.pid))
    poll_until(lambda: not cgroup.SessionCgroup(gone_cgroup, mount()).populated(), what="the child to die with it")
    settled(other.dir)  # a launcher exits when the directory goes; still starting, it could write in it
    shutil.rmtree(other.dir)
    dry = tower(sessions.dir, "reconcile")
    assert f"leaked    {gone_cgroup}: its runtime directory {other.dir} no longer exists: would be removed" \
        in dry.stdout, dry.stdout
    assert os.path.isdir(gone_cgroup)
    done = tower(sessions.dir, "reconcile", "--apply")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"removed   {gone_cgroup}" in done.stdout, done.stdout
    assert not os.path.exists(gone_cgroup)


def test_a_new_test_run_removes_the_empty_cgroups_a_killed_run_left() -> None:
    """Defect 9: a test run killed before its pytest_unconfigure left MOUNT/shellper-test-<pid> behind."""

    dead = subprocess.Popen(["true"])
    dead.wait()
    parent = os.path.join(mount(), f"shellper-test-{dead.pid}")
    if os.path.exists(parent):
        pytest.skip(f"{parent} exists already")
    leaf = os.path.join(parent, str(cgroup.LeafName.of("/nowhere", "x", "s", "0" * 32)))
    for sub in ("", "/child", "/shellper"):
        os.makedirs(leaf + sub)
    assert CGROUP_PARENT is not None
    removed = sweep_dead_runs(mount())
    assert parent in removed and not os.path.exists(parent)
    assert os.path.isdir(CGROUP_PARENT)  # this run's own, alive


def test_a_cgroup_parent_a_session_made_and_left_is_a_leak(sessions: Sessions) -> None:
    """A shellper started from an environment scrubbed of SHELLPER_ variables (tests/test_screens.py's did) makes its
    session's cgroup in the machine's default parent, and the parent, which stays after the session: the leak
    check says so and removes it (support.run.default_parent_made). Shown with a stand-in inside the run's own
    parent, which shellper makes as it would the default: the real one, made here, would be seen as made by the
    test another worker runs meanwhile."""
    assert CGROUP_PARENT is not None
    stand_in = os.path.join(CGROUP_PARENT, f"default-{secrets.token_hex(4)}")
    info = sessions.start("stray", ["cat"], containment="cgroup", cgroup_parent=stand_in)
    rec = read_record(info.record)
    assert rec.cgroup is not None and os.path.dirname(rec.cgroup) == stand_in
    sessions.stop("stray")
    made = default_parent_made(existed=False, parent=stand_in)
    assert made is not None and made.endswith("is removed"), made
    assert not os.path.exists(stand_in)
    assert default_parent_made(existed=False, parent=stand_in) is None
    assert default_parent_made(existed=True, parent=CGROUP_PARENT) is None and os.path.isdir(CGROUP_PARENT)


# --------------------------------------------------------------------------------------------- 10: read-only


@pytest.fixture
def ro_sessions() -> Iterator[tuple[Sessions, Path]]:
    """Sessions in a runtime directory that :func:`read_only` makes read-only: a read-only bind mount of the
    directory on itself, so what the shellper has open stays writable but nothing in it can be unlinked or
    created (needs mount(2); skipped without)."""
    d = Path(tempfile.mkdtemp(prefix="sp-ro-", dir="/tmp"))
    os.chmod(d, 0o700)
    s = Sessions(d, strict=False)
    try:
        yield s, d
    finally:
        # os.path.ismount cannot see a bind mount of a directory on its own file system: umount until it fails
        for _ in range(3):
            if subprocess.run(["umount", str(d)], capture_output=True, check=False).returncode != 0:
                break
        s.cleanup()
        shutil.rmtree(d, ignore_errors=True)


def read_only(d: Path) -> None:
    done = subprocess.run(["mount", "--bind", str(d), str(d)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip() or done.returncode}")
    subprocess.run(["mount", "-o", "remount,bind,ro", str(d)], check=True)


def writable(d: Path) -> None:
    subprocess.run(["umount", str(d)], check=True)


def test_reconcile_apply_in_a_read_only_runtime_directory_says_so_in_one_line(
        ro_sessions: tuple[Sessions, Path]) -> None:
    """Defect 10: `tower-client reconcile --apply` died with a LockError traceback."""
    sessions, mnt = ro_sessions
    info = sessions.start("k", ["sleep", "300"], containment="cgroup")
    kill9(identity(info.pid))
    read_only(mnt)
    done = tower(mnt, "reconcile", "--apply")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Read-only file system" in done.stderr and "nothing was done" in done.stderr, done.stderr
    writable(mnt)
    assert tower(mnt, "reconcile", "--apply").returncode == 0
    assert left_in(mnt) == []


def test_stop_in_a_read_only_runtime_directory_says_why_the_files_stay(ro_sessions: tuple[Sessions, Path]) -> None:
    """Defect 10: `stop` said the shellper "died before it finished stopping (killed?)" when it had stopped and
    only could not unlink its files."""
    sessions, mnt = ro_sessions
    info = sessions.start("s", ["sleep", "300"], containment="cgroup")
    rec = read_record(mnt / "s.json")
    child = identity(int(poll_until(lambda: read_record(mnt / "s.json").child_pid, what="the child")))
    read_only(mnt)
    done = shellper(mnt, "stop", "s", "--grace", "0.3")
    assert done.returncode == 1
    assert "killed?" not in done.stderr and "read-only file system" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert is_dead(identity(info.pid)) and is_dead(child)
    assert rec.cgroup is not None and not os.path.exists(rec.cgroup)
    writable(mnt)
    again = shellper(mnt, "stop", "s")
    assert again.returncode == 0, again.stderr
    assert left_in(mnt) == []
