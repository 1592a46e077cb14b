"""find_holders / mint_or_reclaim with real processes: foreign holders always win and are never touched."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
import uuid
from collections.abc import Collection
from pathlib import Path

import pytest
from support.paths import SHELLPER_CLI
from support.processes import alive, identity, is_dead, sleeper_argv, tree
from support.run import CGROUP_PARENT
from support.sessions import Sessions
from support.waiting import poll_until

from shellper.client.blocking import Client
from shellper.core.structs import replace
from shellper.host.identity import ProcessIdentity, read_stat
from shellper.host.record import read_record, write_record
from tower_client.apply import apply
from tower_client.discover import discover
from tower_client.holders import Holder, dead_sessions, find_holders, mint_or_reclaim
from tower_client.reconcile import Registry, RegistryRow, reconcile

PAUSE = [sys.executable, "-c", "import signal; signal.pause()"]
"""A stand-in agent CLI: waits for a signal; what follows it in argv is what it "holds"."""


@pytest.fixture
def sid() -> str:
    return str(uuid.uuid4())


def test_no_holders_means_resume(sessions: Sessions, sid: str) -> None:
    sessions.start("idle", sleeper_argv("--session-id", str(uuid.uuid4())))
    assert find_holders(sid, sessions.dir) == []
    assert mint_or_reclaim(sid, sessions.dir).action == "resume"


@pytest.mark.parametrize("form", ["argv", "equals", "exec-a"])
def test_foreign_holder_survives_everything_and_forces_mint(sessions: Sessions, sid: str, form: str) -> None:
    argv = {
        "argv": sleeper_argv("--session-id", sid),
        "equals": sleeper_argv(f"--resume={sid}"),
        "exec-a": ["bash", "-c", f'exec -a "claude --resume {sid}" sleep 120'],
    }[form]
    person = sessions.spawn(argv)
    foreign = identity(person.pid)
    poll_until(lambda: find_holders(sid, sessions.dir), what="the holder to show up")  # exec -a is async
    ours = sessions.start("arch-main", sleeper_argv("--resume", sid))  # an own holder too
    holders = find_holders(sid, sessions.dir, reclaimable={"arch-main"})
    kinds = {h.pid: h.kind for h in holders}
    assert kinds[person.pid] == "foreign"
    assert kinds[ours.child_pid or 0] == "own"
    # every operation a Tower has: the foreign process is never touched
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"arch-main"})
    assert verdict.action == "mint" and verdict.terminated == () and "foreign" in verdict.reason
    report = apply(reconcile(Registry(), discover(sessions.dir), now=time.time()), grace=0.5)
    assert report.ok and [o.result for o in report.outcomes] == ["terminated"]  # only our unregistered one
    assert alive(foreign) and person.poll() is None
    assert mint_or_reclaim(sid, sessions.dir, reclaimable={"arch-main"}).action == "mint"  # held by the person
    assert alive(foreign)


def test_own_shellper_holding_the_id_is_reclaimed(sessions: Sessions, sid: str) -> None:
    info = sessions.start("arch-b", ["sh", "-c", f"exec {sys.executable} -c 'import time; time.sleep(120)' "
                                                  f"--resume {sid}"])
    bystander = sessions.start("arch-c", sleeper_argv("--resume", str(uuid.uuid4())))
    shellper = identity(info.pid)
    child = poll_until(lambda: [h for h in find_holders(sid, sessions.dir, reclaimable={"arch-b"})
                                if h.via == "argv"], what="the child to exec")[0]
    assert child.kind == "own" and child.own is not None and child.own.name == "arch-b"
    members = tree(info.pid)
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"arch-b", "arch-c"})
    assert verdict.action == "reclaim", verdict.reason
    assert [t.name for t in verdict.terminated] == ["arch-b"]
    assert is_dead(shellper) and all(is_dead(m) for m in members)
    assert find_holders(sid, sessions.dir) == []
    assert alive(identity(bystander.pid))


def test_protected_session_is_never_reclaimed(sessions: Sessions, sid: str) -> None:
    info = sessions.start("arch-live", sleeper_argv("--session-id", sid))
    shellper = identity(info.pid)
    verdict = mint_or_reclaim(sid, sessions.dir, protect={"arch-live"}, reclaimable={"arch-live"})
    assert verdict.action == "mint" and "protected" in verdict.reason and verdict.terminated == ()
    assert alive(shellper)


def test_crash_looping_remnant_is_found_through_its_record(sessions: Sessions, sid: str) -> None:
    """Its child is dead (between respawns, or for good): the record's command is the evidence."""
    info = sessions.start("arch-d", [sys.executable, "-c", "pass", "--session-id", sid])
    poll_until(lambda: all(o.state == "exited" for o in discover(sessions.dir)), what="the child to exit")
    holders = find_holders(sid, sessions.dir, reclaimable={"arch-d"})
    assert [(h.pid, h.kind, h.via) for h in holders] == [(info.pid, "own", "record")]
    # not named, it holds the id all the same: foreign
    assert [(h.kind, h.within) for h in find_holders(sid, sessions.dir)] == [("foreign", "arch-d")]
    shellper = identity(info.pid)
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"arch-d"})
    assert verdict.action == "reclaim" and is_dead(shellper)


def test_shellper_of_another_directory_is_foreign(sessions: Sessions, other: Sessions, sid: str) -> None:
    theirs = other.start("arch-x", sleeper_argv("--session-id", sid))
    theirs_id = identity(theirs.pid)
    child = identity(theirs.child_pid or 0)
    [holder] = find_holders(sid, sessions.dir, reclaimable={"arch-x"})
    assert holder.pid == child.pid and holder.kind == "foreign"
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"arch-x"})
    assert verdict.action == "mint" and verdict.terminated == ()
    assert alive(theirs_id) and alive(child)
    # seen from its own directory it is ours (classification is relative to the runtime dir)
    assert [h.kind for h in find_holders(sid, other.dir, reclaimable={"arch-x"})] == ["own"]


def test_registered_session_is_left_to_the_tower_by_holders_lookup(sessions: Sessions, sid: str) -> None:
    """find_holders only reports; nothing is signalled by looking."""
    info = sessions.start("arch-e", sleeper_argv("--session-id", sid))
    before = identity(info.pid)
    for _ in range(3):
        assert [h.kind for h in find_holders(sid, sessions.dir, reclaimable={"arch-e"})] == ["own"]
    assert alive(before)
    decisions = reconcile(Registry((RegistryRow("arch-e"),)), discover(sessions.dir), now=time.time())
    assert [str(d.action) for d in decisions] == ["adopt"]

# --------------------------------------------------------------------------------------------- reclaimable


def argv_holders(sid: str, d: Path, reclaimable: Collection[str] = ()) -> list[Holder]:
    return [h for h in find_holders(sid, d, reclaimable=reclaimable) if h.via == "argv"]


def test_a_cli_typed_in_a_session_shell_is_foreign_unless_that_session_is_named(sessions: Sessions,
                                                                                sid: str) -> None:
    """A person's CLI, typed in a shell a shellper runs, was "own": mint_or_reclaim ended the whole shell
    session by default. Now nothing is reclaimable unless named, so nothing is ended."""
    info = sessions.start("shell", ["sh"])
    with Client(info.socket, "tower", client_name="test", timeout=10) as client:
        client.connect(replay_bytes=0)
        client.write(f"{shlex.join([*PAUSE, '--resume', sid])}\n".encode())
    [cli] = poll_until(lambda: argv_holders(sid, sessions.dir), what="the typed CLI to start")
    assert (cli.kind, cli.own, cli.within) == ("foreign", None, "shell")
    assert cli.reason == (f"is a descendant of verified shellper {info.pid} (session 'shell'), a session not "
                          "named reclaimable")
    shellper, members = identity(info.pid), tree(info.pid)
    assert any(m.pid == cli.pid for m in members)
    for named in ((), ("another",)):
        verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable=named)
        assert verdict.action == "mint" and verdict.terminated == () and "foreign" in verdict.reason
        assert alive(shellper) and all(alive(m) for m in members)
    # named by the Tower, the session is its own to end, whole
    [cli] = argv_holders(sid, sessions.dir, reclaimable={"shell"})
    assert cli.kind == "own" and cli.to_dict()["session"] == "shell"
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"shell"})
    assert verdict.action == "reclaim", verdict.reason
    assert is_dead(shellper) and all(is_dead(m) for m in members)


@pytest.mark.parametrize("where", ["same-dir", "other-dir"])
def test_a_session_started_inside_a_named_one_is_not_that_one(sessions: Sessions, other: Sessions, sid: str,
                                                              where: str, tmp_path: Path) -> None:
    """"outer" is named; "inner" was started from inside it (its shellper is re-parented to outer's, and
    inherited outer's marker). Neither inner's shellper (whose argv, `shellper run ... --resume ID`, carries
    the id) nor its child belongs to outer: both foreign, nothing ended."""
    inner_dir = sessions.dir if where == "same-dir" else other.dir
    run_inner = shlex.join([*SHELLPER_CLI, "--dir", str(inner_dir), "run", "inner", "--", *PAUSE, "--resume", sid])
    script = tmp_path / "outer.sh"  # so that outer's own recorded command does not carry the id
    script.write_text(f"{run_inner} >/dev/null && exec {shlex.join(PAUSE)}\n")
    outer = sessions.start("outer", ["sh", str(script)])
    inner_rec = poll_until(lambda: _record_with_child(inner_dir / "inner.json"), what="inner's child")
    inner, inner_child = identity(inner_rec.shellper_pid), identity(inner_rec.child_pid or 0)
    other.track(inner)
    assert inner.pid in {m.pid for m in tree(outer.pid)}  # the case: inner runs under outer's shellper
    holders = poll_until(lambda: (hs := find_holders(sid, sessions.dir, reclaimable={"outer"})) and len(hs) == 2
                         and hs, what="inner's shellper and child as holders")
    assert {h.pid: h.kind for h in holders} == {inner.pid: "foreign", inner_child.pid: "foreign"}
    if where == "same-dir":
        assert {h.within for h in holders} == {"inner"}
    outer_id, members = identity(outer.pid), tree(outer.pid)
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"outer"})
    assert verdict.action == "mint" and verdict.terminated == () and "foreign" in verdict.reason
    assert alive(outer_id) and all(alive(m) for m in members)
    # seen from its own directory, inner is reclaimable when named (and outer is not touched)
    verdict = mint_or_reclaim(sid, inner_dir, grace=0.5, reclaimable={"inner"})
    assert verdict.action == "reclaim", verdict.reason
    assert is_dead(inner) and is_dead(inner_child) and alive(outer_id)


def test_a_leftover_of_a_dead_session_started_inside_a_named_one_is_not_that_one(sessions: Sessions, sid: str,
                                                                                  tmp_path: Path) -> None:
    """"inner", started inside the named "outer", is killed; what it left is re-parented to outer's shellper
    (a subreaper) with no shellper between them, but it carries inner's marker, not outer's: foreign."""
    held = shlex.join([*PAUSE, "--resume", sid])
    run_inner = shlex.join([*SHELLPER_CLI, "--dir", str(sessions.dir), "run", "inner", "--", "sh", "-c",
                            f"setsid {held} & exec {shlex.join(PAUSE)}"])
    script = tmp_path / "outer.sh"
    script.write_text(f"{run_inner} >/dev/null && exec {shlex.join(PAUSE)}\n")
    outer = sessions.start("outer", ["sh", str(script)])
    # (foreign until inner's record is written: its child is spawned first)
    [cli] = poll_until(lambda: [h for h in argv_holders(sid, sessions.dir, reclaimable={"inner"})
                                if h.form == "argv" and h.kind == "own"], what="inner's CLI")
    assert cli.within == "inner" and cli.argv == (*PAUSE, "--resume", sid)
    inner = identity(read_record(sessions.dir / "inner.json").shellper_pid)
    leftover = identity(cli.pid)
    os.kill(inner.pid, signal.SIGKILL)  # started by this test (inside outer)
    poll_until(lambda: is_dead(inner), what="inner's shellper to die")
    poll_until(lambda: (st := read_stat(leftover.pid)) is not None and st.ppid == outer.pid,
               what="the leftover to be re-parented to outer's shellper")
    for named in ({"outer"}, {"inner"}, {"outer", "inner"}):
        [h] = find_holders(sid, sessions.dir, reclaimable=named)
        assert (h.pid, h.kind, h.within) == (leftover.pid, "foreign", "outer"), h.reason
    outer_id, members = identity(outer.pid), tree(outer.pid)
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"outer", "inner"})
    assert verdict.action == "mint" and verdict.terminated == () and verdict.reaped == ()
    assert alive(outer_id) and all(alive(m) for m in members)


def _record_with_child(path: Path) -> object:
    try:
        rec = read_record(path)
    except (OSError, ValueError):
        return None
    return rec if rec.child_pid else None


# --------------------------------------------------------------------------------------------- survivors


CONTAINMENTS = ["none", pytest.param("cgroup", marks=pytest.mark.skipif(
    CGROUP_PARENT is None, reason="no writable cgroup v2 hierarchy here"))]


def dead_with_survivor(sessions: Sessions, name: str, sid: str, containment: str) -> ProcessIdentity:
    """Session ``name`` whose shellper was SIGKILLed, leaving a setsid'd CLI holding ``sid`` (with the
    session's marker in its environment, and in its cgroup if it has one) running."""
    held = shlex.join([*PAUSE, "--resume", sid])
    info = sessions.start(name, ["sh", "-c", f"setsid {held} & exec {shlex.join(PAUSE)}"],
                           containment=containment)
    [cli] = poll_until(lambda: [h for h in argv_holders(sid, sessions.dir, reclaimable={name})
                                if h.kind == "own" and h.argv == (*PAUSE, "--resume", sid)],
                       what="the setsid'd CLI to start")
    survivor = identity(cli.pid)
    sessions.track(survivor)
    shellper, child = identity(info.pid), identity(info.child_pid or 0)
    os.kill(info.pid, signal.SIGKILL)  # our own shellper, just launched
    poll_until(lambda: is_dead(shellper) and is_dead(child), what="the shellper and its child to die")
    poll_until(lambda: [d for d in dead_sessions(sessions.dir) if d.name == name], what="the lock to be free")
    return survivor


@pytest.mark.parametrize("containment", CONTAINMENTS)
@pytest.mark.parametrize("pid", ["gone", "reused"])
def test_what_a_dead_named_session_left_holding_the_id_is_reclaimed(sessions: Sessions, sid: str, pid: str,
                                                                    containment: str) -> None:
    """A killed shellper's leftover carrying its marker was "foreign" for ever (mint, every time); it is the
    dead session's, reclaimable when that session is named, and ended through reap_survivors."""
    keep = sessions.start("keep", PAUSE)
    person = sessions.spawn([*PAUSE, "--resume", str(uuid.uuid4())])  # a bystander holding another id
    survivor = dead_with_survivor(sessions, "gone", sid, containment)
    if pid == "reused":  # the recorded pid now names another process (with other start ticks)
        path = sessions.dir / "gone.json"
        write_record(path, replace(read_record(path), shellper_pid=person.pid))
    [unnamed] = find_holders(sid, sessions.dir)
    assert (unnamed.pid, unnamed.kind) == (survivor.pid, "foreign")
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"keep"})
    assert verdict.action == "mint" and "foreign" in verdict.reason and alive(survivor)
    [h] = find_holders(sid, sessions.dir, reclaimable={"gone"})
    assert h.kind == "own" and h.survivor_of is not None and h.survivor_of.name == "gone"
    assert h.to_dict()["session"] == "gone" and h.to_dict()["shellper_pid"] is None
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"gone"})
    assert verdict.action == "reclaim", verdict.reason
    assert verdict.terminated == () and [r.pids for r in verdict.reaped] == [(survivor.pid,)]
    assert verdict.to_dict()["reaped"][0]["name"] == "gone"
    assert is_dead(survivor) and alive(identity(keep.pid)) and person.poll() is None
    assert find_holders(sid, sessions.dir, reclaimable={"gone"}) == []
    assert (unnamed.within, unnamed.left_behind) == ("gone", True) and "not named" in unnamed.reason


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_a_dead_session_whose_instance_a_live_one_claims_reclaims_nothing(sessions: Sessions, sid: str,
                                                                          containment: str) -> None:
    """A suspect record (its instance id also claimed by a live session: a copy) ends nothing: its leftover
    is foreign even when named."""
    survivor = dead_with_survivor(sessions, "gone", sid, containment)
    live = sessions.start("twin", PAUSE)
    path = sessions.dir / "twin.json"
    write_record(path, replace(read_record(path), instance_id=read_record(sessions.dir / "gone.json").instance_id))
    [h] = find_holders(sid, sessions.dir, reclaimable={"gone"})
    assert (h.kind, h.within) == ("foreign", "gone") and "suspect" in h.reason
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"gone", "twin"})
    assert verdict.action == "mint" and verdict.reaped == () and verdict.terminated == ()
    assert alive(survivor) and alive(identity(live.pid))


# --------------------------------------------------------------------------------------------- matching


def test_short_flag_redirections_and_backticks_are_holders(sessions: Sessions, sid: str) -> None:
    """`-r ID`, an id right before a redirection, and one inside backticks were missed."""
    held = shlex.join([*PAUSE, "-r", sid])
    short = sessions.spawn([*PAUSE, "-r", sid])
    redirected = sessions.spawn(["sh", "-c", f"{shlex.join(PAUSE)} --resume {sid}>/dev/null; :"])
    backticks = sessions.spawn(["sh", "-c", f"x=`{held}`; :"])
    want = {short.pid: "argv", redirected.pid: "shell", backticks.pid: "shell"}
    found = poll_until(lambda: (f := {h.pid: h.form for h in find_holders(sid, sessions.dir)
                                      if h.pid in want}) == want and f, what="the three holders")
    assert found == want
    assert all(h.kind == "foreign" for h in find_holders(sid, sessions.dir))
    assert mint_or_reclaim(sid, sessions.dir).action == "mint"


pytestmark = pytest.mark.kills_sessions


# --------------------------------------------------------------------------------------------- cgroup, owners


@pytest.mark.skipif(CGROUP_PARENT is None, reason="no writable cgroup v2 hierarchy here")
def test_a_leftover_that_cleared_its_environment_is_still_the_dead_sessions_through_its_cgroup(
        sessions: Sessions, sid: str) -> None:
    """`env -i` drops the marker; the dead session's cgroup still holds the process, so it is the dead
    session's (reclaimable when named), not a foreigner forcing a fresh id for ever."""
    held = shlex.join(["env", "-i", *PAUSE, "--resume", sid])
    info = sessions.start("gone", ["sh", "-c", f"setsid {held} & exec {shlex.join(PAUSE)}"], containment="cgroup")
    [cli] = poll_until(lambda: [h for h in find_holders(sid, sessions.dir) if h.argv[:1] == (PAUSE[0],)],
                       what="the env -i'd CLI to start")
    survivor = identity(cli.pid)
    sessions.track(survivor)
    shellper = identity(info.pid)
    os.kill(info.pid, signal.SIGKILL)  # our own shellper, just launched
    poll_until(lambda: is_dead(shellper) and [d for d in dead_sessions(sessions.dir) if d.name == "gone"],
               what="the session to be dead")
    [h] = find_holders(sid, sessions.dir, reclaimable={"gone"})
    assert h.kind == "own" and h.survivor_of is not None and h.survivor_of.name == "gone", h.reason
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"gone"})
    assert verdict.action == "reclaim", verdict.reason
    assert is_dead(survivor)


def test_a_named_session_of_another_owner_is_never_reclaimed(sessions: Sessions, sid: str) -> None:
    info = sessions.start("theirs", ["sh", "-c", f"exec {shlex.join(PAUSE)} --resume {sid}"], owner="bob")
    poll_until(lambda: [h for h in find_holders(sid, sessions.dir, reclaimable={"theirs"}) if h.via == "argv"],
               what="the child to exec")
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"theirs"}, owner="alice")
    assert verdict.action == "mint" and "another owner" in verdict.reason and verdict.terminated == ()
    assert alive(identity(info.pid))


def test_reclaiming_holds_the_owner_lock(sessions: Sessions, sid: str) -> None:
    from tower_client.apply import OwnerBusy, hold_owner_lock

    info = sessions.start("mine", ["sh", "-c", f"exec {shlex.join(PAUSE)} --resume {sid}"], owner="alice")
    poll_until(lambda: [h for h in find_holders(sid, sessions.dir, reclaimable={"mine"}) if h.via == "argv"],
               what="the child to exec")
    other_tower = hold_owner_lock(str(sessions.dir), "alice")
    try:
        with pytest.raises(OwnerBusy):
            mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"mine"}, owner="alice")
        assert alive(identity(info.pid))
    finally:
        other_tower.release()
    assert mint_or_reclaim(sid, sessions.dir, grace=0.5, reclaimable={"mine"}, owner="alice").action == "reclaim"
