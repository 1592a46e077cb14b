"""The Fleet's life says no: requests before start() and after close() raise typed errors, the stream ends
on close (from a signal handler too), and the stream carries each event once, without the library's own
connections and probes."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fleet import SLEEPER, make_fleet, wait_for
from support.paths import ROOT

from shellper.client.blocking import Client
from shellper.core.errors import ShellperError
from shellper.host.paths import SessionPaths
from shellper.host.record import read_record
from tower_client import FleetClosed, FleetNotStarted, discover
from tower_client.apply import verify_session
from tower_client.fleet import Fleet, SessionSpec
from tower_client.progress import ProgressJournal
from tower_client.stream import FleetItem, FleetState, OutputChunk, SessionEvent, StateChange


async def drain(fleet: object, seconds: float) -> list[FleetItem]:
    """Everything the stream hands out until it has been quiet for ``seconds`` (acknowledged)."""
    out: list[FleetItem] = []
    while (item := await fleet.next(seconds)) is not None:  # type: ignore[attr-defined]
        fleet.ack(item)  # type: ignore[attr-defined]
        out.append(item)
    return out


# --------------------------------------------------------------------------------------------- life


def test_a_fleet_not_started_refuses_requests(tmp_path: Path, runtime_dir: Path) -> None:
    async def main() -> None:
        fleet = make_fleet(tmp_path, runtime_dir)
        with pytest.raises(FleetNotStarted):
            await fleet.launch(SessionSpec("a", SLEEPER, cwd=str(ROOT)))
        with pytest.raises(FleetNotStarted):
            await fleet.stop("a")
        with pytest.raises(FleetNotStarted):
            await fleet.stop_all()
        with pytest.raises(FleetNotStarted):
            fleet.client("a")
        assert not list(runtime_dir.iterdir())  # nothing was launched
        assert issubclass(FleetNotStarted, ShellperError)

    asyncio.run(main())


def test_a_closed_fleet_refuses_requests_and_its_stream_ends(tmp_path: Path, runtime_dir: Path) -> None:
    async def main() -> None:
        fleet = make_fleet(tmp_path, runtime_dir)
        async with fleet:
            await fleet.launch(SessionSpec("a", SLEEPER, cwd=str(ROOT)))
            await wait_for(fleet, lambda i: isinstance(i, OutputChunk))
        assert fleet.closed
        with pytest.raises(FleetClosed):
            await fleet.launch(SessionSpec("b", SLEEPER, cwd=str(ROOT)))
        assert not (runtime_dir / "b.json").exists() and fleet.registry.get("b") is None
        with pytest.raises(FleetClosed):
            await fleet.next(0.1)
        assert [item async for item in fleet] == []
        with pytest.raises(FleetClosed):
            await fleet.start()
        with pytest.raises(FleetClosed):
            await fleet.stop_all()
        async with make_fleet(tmp_path, runtime_dir) as again:  # the session ran on: end it
            await again.stop_all()

    asyncio.run(main())


def test_a_started_fleet_does_not_start_twice(tmp_path: Path, runtime_dir: Path) -> None:
    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            with pytest.raises(ShellperError):
                await fleet.start()

    asyncio.run(main())


def test_shutdown_from_a_signal_handler_ends_the_iteration(tmp_path: Path, runtime_dir: Path) -> None:
    """The Tower's `async for` ends when a signal handler calls shutdown(); leaving `async with` waits
    for the close."""
    async def main() -> None:
        fleet = make_fleet(tmp_path, runtime_dir)
        loop = asyncio.get_running_loop()
        seen: list[FleetItem] = []
        async with fleet:
            await fleet.launch(SessionSpec("a", SLEEPER, cwd=str(ROOT)))
            loop.call_later(0.5, fleet.shutdown)  # as loop.add_signal_handler(SIGTERM, fleet.shutdown) would
            started = time.monotonic()
            async with asyncio.timeout(10):
                async for item in fleet:
                    fleet.ack(item)
                    seen.append(item)
            assert time.monotonic() - started < 5
        assert fleet.closed and any(isinstance(i, OutputChunk) for i in seen)
        async with make_fleet(tmp_path, runtime_dir) as again:
            await again.stop_all()

    asyncio.run(main())





# --------------------------------------------------------------------------------------------- the stream


def test_each_event_is_one_item_and_the_first_state_comes_once(tmp_path: Path, runtime_dir: Path) -> None:
    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                await fleet.launch(SessionSpec("a", SLEEPER, cwd=str(ROOT)))
                seen: list[FleetItem] = []


                def both(_: FleetItem) -> bool:  # output and state come in either order
                    return (any(isinstance(i, StateChange) and i.state is FleetState.RUNNING for i in seen)
                            and any(isinstance(i, OutputChunk) and b"up" in i.data for i in seen))

                await wait_for(fleet, both, seen=seen)
                seen += await drain(fleet, 0.5)
                running = [i for i in seen if isinstance(i, StateChange) and i.state is FleetState.RUNNING]
                assert len(running) == 1, seen
                assert running[0].child_pid is not None and running[0].seq
                assert not [i for i in seen if isinstance(i, SessionEvent) and i.kind == "state"], seen
                seqs = [i.seq for i in seen if isinstance(i, StateChange | SessionEvent) and i.seq]
                assert len(seqs) == len(set(seqs)), seen
            finally:
                await fleet.stop_all()

    asyncio.run(main())


def test_the_librarys_own_connections_and_probes_are_not_news(tmp_path: Path, runtime_dir: Path) -> None:
    """Neither the Fleet's own connection nor the probes of a start (discover, verify) show up as attach or
    detach events; a viewer that is somebody else's does."""
    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                await fleet.launch(SessionSpec("a", SLEEPER, cwd=str(ROOT)))
                seen: list[FleetItem] = []
                await wait_for(fleet, lambda i: isinstance(i, OutputChunk) and b"up" in i.data, seen=seen)
                record = read_record(runtime_dir / "a.json")
                await asyncio.to_thread(discover, runtime_dir)  # another Tower's start, `tower-client ls`
                await asyncio.to_thread(verify_session, record, SessionPaths.for_name(str(runtime_dir), "a"))

                def someone() -> None:
                    viewer = Client(runtime_dir / "a.sock", "viewer", client_name="someone", timeout=5)
                    viewer.connect(replay_bytes=0)
                    viewer.close()

                await asyncio.to_thread(someone)
                await wait_for(fleet, lambda i: isinstance(i, SessionEvent) and i.kind == "client_detached", seen=seen)
                events = [i for i in seen if isinstance(i, SessionEvent) and i.kind.startswith("client_")]
                assert [(e.kind, e.data.get("client")) for e in events] == [
                    ("client_attached", "someone"), ("client_detached", None)], events
            finally:
                await fleet.stop_all()

    asyncio.run(main())


def test_a_spawns_starting_state_does_not_say_not_restarted(tmp_path: Path, runtime_dir: Path) -> None:
    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                await fleet.launch(SessionSpec("a", SLEEPER, cwd=str(ROOT)))
                await wait_for(fleet, lambda i: isinstance(i, StateChange) and i.state is FleetState.RUNNING)
                seen: list[FleetItem] = []
                pid = await fleet.spawn("a")
                await wait_for(fleet, lambda i: isinstance(i, StateChange) and i.child_pid == pid, seen=seen)
                starting = [i for i in seen if isinstance(i, StateChange) and i.state is FleetState.STARTING]
                assert len(starting) == 1, seen
                assert "not restarted" not in starting[0].reason and "SPAWN" in starting[0].reason, starting
                assert starting[0].exit is not None and "not restarted" not in starting[0].exit.reason
            finally:
                await fleet.stop_all()

    asyncio.run(main())


# --------------------------------------------------------------------------------------------- adopt


def test_an_adopted_fatal_session_keeps_its_reason_and_exit(tmp_path: Path, runtime_dir: Path) -> None:
    """A session driven to fatal, everything acknowledged, the Tower restarted: the adopted state says why it
    is fatal (as WELCOME and STATUS do) and carries the child's exit, not 'adopted' and nothing."""
    crash = [sys.executable, "-c", "import sys; print('cannot go on', file=sys.stderr); sys.exit(127)"]

    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            await fleet.launch(SessionSpec("a", crash, cwd=str(ROOT)))
            fatal = await wait_for(fleet, lambda i: isinstance(i, StateChange) and i.state is FleetState.FATAL)
            await drain(fleet, 0.3)
            await fleet.sync()
        assert isinstance(fatal, StateChange) and fatal.exit is not None
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                adopted = await wait_for(fleet, lambda i: isinstance(i, StateChange))
                assert isinstance(adopted, StateChange) and adopted.state is FleetState.FATAL
                assert adopted.reason == fatal.reason and "127" in adopted.reason, (adopted, fatal)
                assert adopted.exit is not None and adopted.exit.code == 127
                assert adopted.exit.reason == fatal.exit.reason
                status = await fleet.client("a").status()
                assert status.info.get("state_reason") == adopted.reason, status.info
            finally:
                await fleet.stop_all()

    asyncio.run(main())


def test_the_example_tower_shuts_down_cleanly_on_sigterm(tmp_path: Path, runtime_dir: Path) -> None:
    """SIGTERM: the example's `async for` ends, the journal is committed and it exits 0; its sessions run on
    and the next start adopts them."""
    state = tmp_path / "state"
    tower = subprocess.Popen([sys.executable, str(ROOT / "examples" / "tower.py"), "--dir", str(runtime_dir),
                              "--state", str(state), "--floods", "2", "--seconds", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert tower.stderr is not None
        running = 0
        while running < 2:  # both floods' running state reached the Tower's loop
            line = tower.stderr.readline()
            assert line, "the example ended early"
            running += line.startswith(b"f0") and b": running" in line
        tower.send_signal(signal.SIGTERM)
        out, _ = tower.communicate(timeout=30)
    finally:
        if tower.poll() is None:
            tower.kill()
            tower.communicate()
    journal = ProgressJournal.load(state / "journal.json")
    adopted: list[str] = []

    async def main() -> None:  # adopts what ran on, and ends it
        async with Fleet(runtime_dir, state / "registry.json", state / "journal.json") as fleet:
            adopted.extend(fleet.sessions)
            await fleet.stop_all(grace=1.0)

    asyncio.run(main())
    assert tower.returncode == 0 and out == b""
    assert {"f00", "f01"} <= set(journal)
    assert {"f00", "f01"} <= set(adopted)  # they ran on
