"""A session's name, files and record are not another's to use (issue 15: defects 9 and 14).

A displaced shellper (its files removed, another one started under its name) must leave the new one's
files alone; files hard-linked or copied under another name must not get the real session terminated.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

import pytest
from support.frames import expect_closed, recv_until, status
from support.sessions import Sessions, files_in
from support.waiting import poll_until, wait_gone

from shellper.core.structs import replace
from shellper.host.record import SessionLock, read_record, write_record
from shellper.protocol import wire
from tower_client.apply import apply
from tower_client.cli import main as tower_cli
from tower_client.discover import discover
from tower_client.reconcile import ReconcileAction, Registry, RegistryRow, reconcile

# ----------------------------------------------------------------------------- defect 14: displaced


def test_a_displaced_shellper_leaves_the_new_sessions_files_alone(sessions: Sessions) -> None:
    """X's files are removed while X lives and Y starts under the same name. Then X gets SIGUSR1 (which
    used to rewrite the record as X's), its child exits (a record write of its own) and it stops (which
    used to remove Y's socket, record and log): Y's files must stay Y's throughout."""
    x = sessions.start("dup", ["cat"])
    with sessions.connect("dup", "tower") as to_x:
        for suffix in (".sock", ".json", ".lock", ".log"):
            (sessions.dir / f"dup{suffix}").unlink()
        y = sessions.start("dup", ["cat"])
        files = files_in(sessions.dir)
        assert files == ["dup.json", "dup.lock", "dup.log", "dup.sock"]

        def ys() -> bool:
            return read_record(sessions.dir / "dup.json").instance_id == y.instance_id

        assert ys()
        os.kill(x.pid, signal.SIGUSR1)
        poll_until(lambda: status(to_x).info["record_error"] or not ys(), what="X to handle SIGUSR1")
        assert ys(), "the displaced shellper wrote its own identity over the live session's record"
        error = status(to_x).info["record_error"]
        assert "is not the lock this shellper holds" in str(error) and "left alone" in str(error), error
        assert x.child_pid is not None
        os.kill(x.child_pid, signal.SIGKILL)  # an exit: X's record write, refused as well
        recv_until(to_x, wire.Event, where=lambda e: e.kind == "spawned")
        assert ys()
        to_x.send(wire.Stop(grace=1.0))
        expect_closed(to_x)
    assert wait_gone(x.pid, 10)
    assert files_in(sessions.dir) == files and ys()
    assert SessionLock.is_locked(sessions.dir / "dup.lock")
    with sessions.connect("dup", "viewer") as viewer:
        assert viewer.welcome is not None and viewer.welcome.instance_id == y.instance_id
        assert status(viewer).info["record_error"] is None
    sessions.started.remove(x)
    sessions.stop("dup")


# ----------------------------------------------------------------------------- defect 9: hard links


@pytest.mark.parametrize("variant", ["copy", "name_edited", "name_and_socket_edited", "lock_only"])
def test_hard_links_under_another_name_never_get_the_real_session_ended(sessions: Sessions, variant: str,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """fake.lock is a hard link of real.lock, fake.sock of real.sock (not in "lock_only"), fake.json a copy of
    real.json (as is, or with its name, and its socket, edited to fake's). No registry row names "fake", so
    reconcile used to decide terminate/unregistered for it, and apply ended the real, registered session
    (over the shared socket, or by signals when only the lock was linked); so did tower-client reap fake.
    Now: fake is never acted on, and the real session is left alone too while another name shares its files."""
    info = sessions.start("real", ["cat"])
    d = sessions.dir
    os.link(d / "real.lock", d / "fake.lock")
    if variant != "lock_only":
        os.link(d / "real.sock", d / "fake.sock")
    record = read_record(d / "real.json")
    if variant == "copy":
        shutil.copyfile(d / "real.json", d / "fake.json")
    elif variant == "name_edited":
        write_record(d / "fake.json", replace(record, name="fake"))
    else:
        write_record(d / "fake.json", replace(record, name="fake", socket=str(d / "fake.sock")))
    decisions = reconcile(Registry((RegistryRow("real"),)), discover(d), now=time.time())
    report = apply(decisions, grace=1.0)

    def real_lives() -> bool:
        return not wait_gone(info.pid, 0) and info.child_pid is not None and not wait_gone(info.child_pid, 0)

    assert real_lives(), f"the real session was ended: {report}"
    assert report.ok, report
    assert tower_cli(["--dir", str(d), "reap", "fake"]) != 0
    assert "refused" in capsys.readouterr().out
    assert real_lives(), "tower-client reap fake ended the real session"
    with sessions.connect("real", "viewer") as viewer:
        assert viewer.welcome is not None and viewer.welcome.instance_id == info.instance_id
    got = {(x.name, x.action, x.reason) for x in decisions}
    fake = "record_unreadable" if variant == "copy" else "name_mismatch"  # a record naming "real" is unusable
    assert got == {("fake", ReconcileAction.LEAVE, fake), ("real", ReconcileAction.LEAVE, "name_mismatch")}, decisions
    for suffix in (".lock", ".sock", ".json"):
        (d / f"fake{suffix}").unlink(missing_ok=True)
    decisions = reconcile(Registry((RegistryRow("real"),)), discover(d), now=time.time())
    assert [(x.name, x.action, x.reason) for x in decisions] == [("real", ReconcileAction.ADOPT, "running")]
    sessions.stop("real")
