"""A session's name, files and record are not another's to use (issue 15: defects 9 and 14).

A displaced shellper (its files removed, another one started under its name) must leave the new one's
files alone; files hard-linked or copied under another name must not get the real session terminated.
"""

from __future__ import annotations

import os
import signal

from conftest import Sessions, poll_until, recv_until, wait_gone
from test_server import expect_closed, status

from shellper import wire
from shellper.record import SessionLock, read_record

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
        files = sorted(p.name for p in sessions.dir.iterdir())
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
    assert sorted(p.name for p in sessions.dir.iterdir()) == files and ys()
    assert SessionLock.is_locked(sessions.dir / "dup.lock")
    with sessions.connect("dup", "viewer") as viewer:
        assert viewer.welcome is not None and viewer.welcome.instance_id == y.instance_id
        assert status(viewer).info["record_error"] is None
    sessions.started.remove(x)
    sessions.stop("dup")
