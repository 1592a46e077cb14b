"""find_holders / mint_or_reclaim with real processes: foreign holders always win and are never touched."""

from __future__ import annotations

import shlex
import sys
import time
import uuid

import pytest
from conftest import poll_until
from test_tower_support import Sessions, alive, identity, is_dead, other, sessions, sleeper_argv, tree

from tower_client.apply import apply
from tower_client.discover import discover
from tower_client.holders import find_holders, mint_or_reclaim
from tower_client.reconcile import Registry, RegistryRow, reconcile

PAUSE = [sys.executable, "-c", "import signal; signal.pause()"]
"""A stand-in agent CLI: waits for a signal; what follows it in argv is what it "holds"."""


@pytest.fixture
def sid() -> str:
    return str(uuid.uuid4())


def test_no_holders_means_resume(sessions: Sessions, sid: str) -> None:
    sessions.launch("idle", sleeper_argv("--session-id", str(uuid.uuid4())))
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
    ours = sessions.launch("arch-main", sleeper_argv("--resume", sid))  # an own holder too
    holders = find_holders(sid, sessions.dir)
    kinds = {h.pid: h.kind for h in holders}
    assert kinds[person.pid] == "foreign"
    assert kinds[ours.child_pid or 0] == "own"
    # every operation a Tower has: the foreign process is never touched
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5)
    assert verdict.action == "mint" and verdict.terminated == () and "foreign" in verdict.reason
    report = apply(reconcile(Registry(), discover(sessions.dir), now=time.time()), grace=0.5)
    assert report.ok and [o.result for o in report.outcomes] == ["terminated"]  # only our unregistered one
    assert alive(foreign) and person.poll() is None
    assert mint_or_reclaim(sid, sessions.dir).action == "mint"  # still held, by the person
    assert alive(foreign)


def test_own_shellper_holding_the_id_is_reclaimed(sessions: Sessions, sid: str) -> None:
    info = sessions.launch("arch-b", ["sh", "-c", f"exec {sys.executable} -c 'import time; time.sleep(120)' "
                                                  f"--resume {sid}"])
    bystander = sessions.launch("arch-c", sleeper_argv("--resume", str(uuid.uuid4())))
    shellper = identity(info.pid)
    child = poll_until(lambda: [h for h in find_holders(sid, sessions.dir) if h.via == "argv"],
                     what="the child to exec")[0]
    assert child.kind == "own" and child.own is not None and child.own.name == "arch-b"
    members = tree(info.pid)
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5)
    assert verdict.action == "reclaim", verdict.reason
    assert [t.name for t in verdict.terminated] == ["arch-b"]
    assert is_dead(shellper) and all(is_dead(m) for m in members)
    assert find_holders(sid, sessions.dir) == []
    assert alive(identity(bystander.pid))


def test_protected_session_is_never_reclaimed(sessions: Sessions, sid: str) -> None:
    info = sessions.launch("arch-live", sleeper_argv("--session-id", sid))
    shellper = identity(info.pid)
    verdict = mint_or_reclaim(sid, sessions.dir, protect={"arch-live"})
    assert verdict.action == "mint" and "protected" in verdict.reason and verdict.terminated == ()
    assert alive(shellper)


def test_crash_looping_remnant_is_found_through_its_record(sessions: Sessions, sid: str) -> None:
    """Its child is dead (between respawns, or for good): the record's command is the evidence."""
    info = sessions.launch("arch-d", [sys.executable, "-c", "pass", "--session-id", sid])
    poll_until(lambda: all(o.state == "exited" for o in discover(sessions.dir)), what="the child to exit")
    holders = find_holders(sid, sessions.dir)
    assert [(h.pid, h.kind, h.via) for h in holders] == [(info.pid, "own", "record")]
    shellper = identity(info.pid)
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5)
    assert verdict.action == "reclaim" and is_dead(shellper)


def test_shellper_of_another_directory_is_foreign(sessions: Sessions, other: Sessions, sid: str) -> None:
    theirs = other.launch("arch-x", sleeper_argv("--session-id", sid))
    theirs_id = identity(theirs.pid)
    child = identity(theirs.child_pid or 0)
    [holder] = find_holders(sid, sessions.dir)
    assert holder.pid == child.pid and holder.kind == "foreign"
    verdict = mint_or_reclaim(sid, sessions.dir, grace=0.5)
    assert verdict.action == "mint" and verdict.terminated == ()
    assert alive(theirs_id) and alive(child)
    # seen from its own directory it is ours (classification is relative to the runtime dir)
    assert [h.kind for h in find_holders(sid, other.dir)] == ["own"]


def test_registered_session_is_left_to_the_tower_by_holders_lookup(sessions: Sessions, sid: str) -> None:
    """find_holders only reports; nothing is signalled by looking."""
    info = sessions.launch("arch-e", sleeper_argv("--session-id", sid))
    before = identity(info.pid)
    for _ in range(3):
        assert [h.kind for h in find_holders(sid, sessions.dir)] == ["own"]
    assert alive(before)
    decisions = reconcile(Registry((RegistryRow("arch-e"),)), discover(sessions.dir), now=time.time())
    assert [str(d.action) for d in decisions] == ["adopt"]

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


__all__ = ["other", "sessions"]  # the fixtures, re-exported for pytest
