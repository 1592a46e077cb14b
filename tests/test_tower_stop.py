"""Stopping says done only when it is: a resuming client's stop() returns once the shellper process is gone,
and a Fleet's stop is journalled before STOP is sent, so a Tower killed mid-stop finishes it on restart
instead of respawning the session."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT
from support.sessions import Sessions, left_in
from support.waiting import poll_until

from shellper.client.blocking import Client
from shellper.host.identity import ProcessIdentity, boot_id
from shellper.host.record import read_record
from shellper.protocol.connection import ClientError
from tower_client.client import AsyncResumingClient, ResumingClient
from tower_client.fleet import Fleet, FleetPolicy
from tower_client.progress import ProgressError, ProgressJournal
from tower_client.stream import FleetItem, Notice

IGNORES_TERM = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "signal.signal(signal.SIGHUP, signal.SIG_IGN); print('up', flush=True); time.sleep(300)"]
SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(300)"]


def test_an_async_resuming_clients_stop_returns_once_the_shellper_is_gone(sessions: Sessions,
                                                                          runtime_dir: Path) -> None:
    info = sessions.start("a", SLEEPER)
    ident = ProcessIdentity.of(info.pid)
    assert ident is not None

    async def main() -> None:
        client = AsyncResumingClient(runtime_dir / "a.sock")
        await client.connect(replay_bytes=0)
        try:
            await client.stop(grace=1.0)
            assert not ident.is_alive(), "stop() returned while the shellper still runs"
        finally:
            await client.close()

    asyncio.run(main())


def test_a_blocking_resuming_clients_stop_returns_once_the_shellper_is_gone(sessions: Sessions,
                                                                            runtime_dir: Path) -> None:
    info = sessions.start("a", SLEEPER)
    ident = ProcessIdentity.of(info.pid)
    assert ident is not None
    with ResumingClient(runtime_dir / "a.sock") as client:
        client.connect(replay_bytes=0)
        client.stop(grace=1.0)
        assert not ident.is_alive(), "stop() returned while the shellper still runs"


TOWER = """
import asyncio, sys
from tower_client.fleet import Fleet, FleetPolicy, SessionSpec
from tower_client.stream import OutputChunk

async def main():
    runtime, registry, journal, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    async with Fleet(runtime, registry, journal, policy=FleetPolicy(grace=1.0)) as fleet:
        await fleet.launch(SessionSpec("a", argv))
        while not isinstance(item := await fleet.next(), OutputChunk):
            fleet.ack(item)
        await fleet.sync()
        print("up", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        await fleet.stop("a", grace=2.0)
        print("stopped", flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("restart", ["while_stopping", "after_it_ended"])
def test_a_stop_the_killed_tower_asked_for_is_finished_not_undone(tmp_path: Path, runtime_dir: Path,
                                                                   restart: str) -> None:
    """fleet.stop(grace=2) on a child that ignores TERM, the Tower killed -9 while the shellper is stopping:
    the restarted Fleet finishes the stop (no respawn, row and journal entry dropped, nothing left)."""
    registry, journal = tmp_path / "registry.json", tmp_path / "journal.json"
    tower = subprocess.Popen([sys.executable, "-c", TOWER, str(runtime_dir), str(registry), str(journal),
                              *IGNORES_TERM], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert tower.stdin is not None and tower.stdout is not None
        assert tower.stdout.readline() == b"up\n"
        ident = shellper_identity(runtime_dir, "a")
        tower.stdin.write(b"stop\n")
        tower.stdin.flush()
        poll_until(lambda: session_state(runtime_dir, "a") == "stopping", what="the shellper stopping")
        tower.kill()
    finally:
        tower.kill()
        tower.wait()
        for pipe in (tower.stdin, tower.stdout):
            if pipe is not None:
                pipe.close()
    assert ident.is_alive()  # the stop is under way: its child ignores TERM for 2 s
    if restart == "after_it_ended":
        poll_until(lambda: not ident.is_alive(), timeout=20, what="the shellper's exit")
    assert [r["name"] for r in json.loads(registry.read_text())["sessions"]] == ["a"]  # the kill came mid-stop

    async def main() -> list[FleetItem]:
        seen: list[FleetItem] = []
        async with Fleet(runtime_dir, registry, journal, policy=FleetPolicy(grace=1.0)) as fleet:
            try:
                while (item := await fleet.next(0.5)) is not None:
                    seen.append(item)
                assert fleet.sessions == [] and fleet.registry.get("a") is None, seen
                assert fleet.journal.get("a") is None
            finally:
                await fleet.stop_all()
        return seen

    seen = asyncio.run(main())
    assert not [i for i in seen if isinstance(i, Notice) and i.what in ("respawn", "relaunched", "launched")], seen
    assert [i for i in seen if isinstance(i, Notice) and i.what == "stopped"], seen
    assert not ident.is_alive()
    assert left_in(runtime_dir) == []
    assert json.loads(registry.read_text())["sessions"] == []
    assert ProgressJournal.load(journal).get("a") is None


def shellper_identity(runtime_dir: Path, name: str) -> ProcessIdentity:
    rec = read_record(runtime_dir / f"{name}.json")
    return ProcessIdentity(boot_id(), rec.shellper_pid, rec.shellper_start_time)


def session_state(runtime_dir: Path, name: str) -> str | None:
    try:
        with Client(runtime_dir / f"{name}.sock", "viewer", client_name="test", timeout=5) as client:
            return client.connect(replay_bytes=0).state
    except ClientError:
        return None


def test_the_journal_keeps_a_stop_intent_and_refuses_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "journal.json"
    journal = ProgressJournal(path)
    journal.start("a", "inst")
    journal.start("b", "inst2")
    journal.ack_output("a", "inst", 10)
    before = json.loads(journal.encode())
    assert "stop" not in before["sessions"]["a"]  # a journal without stops reads as it always did
    journal.intend_stop("a", "inst", 2.5)
    journal.save()
    again = ProgressJournal.load(path)
    assert again.stops() == {"a": 2.5}
    assert again.get("a") is not None and again.get("a").offset == 10  # type: ignore[union-attr]
    again.forget("a")
    assert again.stops() == {}
    for bad in (-1, "2", True, None, 1e12):
        row = {"instance_id": "inst", "offset": 0, "event_seq": 0, "stop": bad}
        path.write_text(json.dumps({"version": 1, "sessions": {"a": row}}))
        if bad is None:
            assert ProgressJournal.load(path).stops() == {}
        else:
            with pytest.raises(ProgressError):
                ProgressJournal.load(path)
