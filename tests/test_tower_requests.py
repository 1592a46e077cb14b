"""Awaitable results: the clients' request methods return what the shellper did or raise the typed error of
its refusal (protocol version 3), for the asyncio, blocking and resuming clients alike; and the resuming
clients end cleanly on a stop and at once when the shellper behind the socket has died."""

from __future__ import annotations

import asyncio
import time

import pytest
from support.processes import kill_verified
from support.sessions import Sessions

from shellper.core.errors import ShellperError
from shellper.core.exits import RestartPolicy
from shellper.host.identity import ProcessIdentity
from shellper.protocol import wire
from shellper.protocol.connection import (
    Forbidden,
    NotRunning,
    SessionGone,
    ShellperDead,
    SpawnFailed,
)
from tower_client.client import AsyncClient, AsyncResumingClient, Client, ResumingClient

pytestmark = pytest.mark.kills_sessions

CAT = ["cat"]
ONCE = RestartPolicy(mode="no")


def spawned_pid(frames: list[wire.Frame]) -> int:
    (event,) = [f for f in frames if isinstance(f, wire.Event) and f.kind == "spawned"]
    pid = event.data["child_pid"]
    assert isinstance(pid, int)
    return pid


def test_async_client_requests_return_results(sessions: Sessions) -> None:
    info = sessions.start("areq", CAT)

    async def main() -> None:
        async with AsyncClient(info.socket) as tower, AsyncClient(info.socket, "viewer") as viewer:
            await tower.connect(replay_bytes=0)
            await viewer.connect(replay_bytes=0)
            assert tower.replies and tower.session_state == "running"
            await tower.resize(120, 40)
            assert (await tower.status()).info["cols"] == 120
            assert await tower.signal("WINCH") == info.child_pid
            pid = await tower.spawn(["cat"])
            assert isinstance(pid, int) and pid != info.child_pid
            frames: list[wire.Frame] = []
            async with asyncio.timeout(10):
                while tower.session_state != "running" or not any(isinstance(f, wire.Event) and f.kind == "spawned"
                                                                  for f in frames):
                    frame = await tower.recv()
                    assert frame is not None
                    frames.append(frame)
            assert spawned_pid(frames) == pid
            with pytest.raises(SpawnFailed) as failed:
                await tower.spawn(["/nonexistent/program"])
            assert isinstance(failed.value, ShellperError) and "nonexistent" in failed.value.message
            with pytest.raises(ValueError):  # refused before it is sent (BadRequest is a ValueError too)
                await tower.resize(0, 24)
            with pytest.raises(Forbidden):
                await viewer.resize(80, 24)
            with pytest.raises(Forbidden):
                await viewer.signal("TERM")
            # what a client that skips the checks sends
            await viewer.send_bytes(wire.encode(wire.Resize(cols=0, rows=1, id=77)))
            async with asyncio.timeout(10):
                while not isinstance(refused := await viewer.recv(), wire.Reply):
                    pass
            assert (refused.id, refused.ok, refused.code) == (77, False, "forbidden")
            assert isinstance(await viewer.status(), wire.StatusReply)  # the connection stays
            assert await tower.signal("TERM") == pid
            async with asyncio.timeout(10):
                while tower.session_state != "exited":  # (the SPAWN's replaced child's EXIT came before)
                    await tower.recv()
            with pytest.raises(NotRunning):
                await tower.signal("TERM")
            await tower.stop(grace=1.0)  # returns once the tree has ended
            async with asyncio.timeout(10):
                async for _ in tower:
                    pass
            assert isinstance(tower.closed_error, SessionGone)

    asyncio.run(main())


def test_blocking_client_requests_return_results(sessions: Sessions) -> None:
    info = sessions.start("breq", CAT, policy=ONCE)
    with Client(info.socket, client_name="test") as tower:
        tower.connect(replay_bytes=0)
        assert tower.replies and tower.session_state == "running" and not tower.exited
        tower.resize(90, 30)
        status = tower.status()
        assert (status.state, status.info["cols"], status.info["rows"]) == ("running", 90, 30)
        pid = tower.spawn(["cat"])
        assert isinstance(pid, int) and pid != info.child_pid
        assert tower.signal("KILL") == pid
        with pytest.raises(ValueError):
            tower.signal("SEGV")
        deadline = time.monotonic() + 10
        while tower.session_state != "exited" and time.monotonic() < deadline:
            tower.recv(timeout=1)
        assert tower.exited and tower.last_exit is not None and tower.session_state == "exited"
        with pytest.raises(NotRunning):
            tower.signal("TERM")
        tower.stop(grace=1.0)
        with pytest.raises(SessionGone):
            while True:
                tower.recv(timeout=10)


@pytest.mark.parametrize("driver", ["async", "blocking"])
def test_stopping_a_husk_ends_the_resuming_stream_cleanly(sessions: Sessions, driver: str) -> None:
    """stop() on a session whose child has exited used to reconnect for ~7 s and end in SessionNotFound."""
    info = sessions.start("husk", ["true"], policy=ONCE)

    async def run_async() -> None:
        async with AsyncResumingClient(info.socket) as tower:
            await tower.connect(replay_bytes=0)
            async with asyncio.timeout(10):
                while not (tower.exit is not None or tower.session_state == "exited"):
                    await tower.recv()
            await tower.stop(grace=1.0)
            async for _ in tower:  # ends, without an error
                pass

    def run_blocking() -> None:
        with ResumingClient(info.socket) as tower:
            tower.connect(replay_bytes=0)
            while tower.session_state != "exited":
                tower.recv(timeout=10)
            tower.stop(grace=1.0)
            for _ in tower:
                pass

    started = time.monotonic()
    if driver == "async":
        asyncio.run(run_async())
    else:
        run_blocking()
    took = time.monotonic() - started
    assert took < 2.0, f"the stream took {took:.2f} s to end"


@pytest.mark.parametrize("driver", ["async", "blocking"])
def test_a_dead_shellper_is_noticed_at_once(sessions: Sessions, driver: str) -> None:
    """A shellper killed -9 leaves a stale socket: the resuming client says so at once (ShellperDead)
    instead of waiting out its backoff (about 7 s with the defaults). bench/NOTES.md has the figures."""
    info = sessions.start("dead", CAT)
    shellper = ProcessIdentity(info.boot_id, info.pid, info.start_time)

    async def run_async() -> float:
        async with AsyncResumingClient(info.socket) as tower:
            await tower.connect(replay_bytes=0)
            killed = time.monotonic()
            kill_verified(shellper)
            with pytest.raises(ShellperDead):
                async with asyncio.timeout(30):
                    async for _ in tower:
                        pass
            return time.monotonic() - killed

    def run_blocking() -> float:
        with ResumingClient(info.socket) as tower:
            tower.connect(replay_bytes=0)
            killed = time.monotonic()
            kill_verified(shellper)
            with pytest.raises(ShellperDead):
                for _ in tower:
                    pass
            return time.monotonic() - killed

    took = asyncio.run(run_async()) if driver == "async" else run_blocking()
    print(f"stale socket noticed after {took * 1000:.0f} ms ({driver})")
    assert took < 1.0, f"the dead shellper was noticed after {took:.2f} s"


def test_a_spawned_child_that_fails_on_its_own_is_a_crash(sessions: Sessions) -> None:
    """A SPAWN ends the old child on request; the new one that then exits 3 on its own, seconds later,
    is a crash and is restarted under on-failure (it used to be classed `requested`, and left exited)."""
    info = sessions.start("respawn", CAT, policy=RestartPolicy(backoff_initial=0.1, jitter=0.0))

    async def main() -> None:
        async with AsyncClient(info.socket) as tower:
            await tower.connect(replay_bytes=0)
            pid = await tower.spawn(["sh", "-c", "read line; exit 3"])
            exits: list[wire.Exit] = []
            async with asyncio.timeout(20):
                while not any(e.child_pid == pid for e in exits):
                    frame = await tower.recv()
                    if isinstance(frame, wire.Exit):
                        exits.append(frame)
                    if tower.session_state == "running" and frame is not None and \
                            isinstance(frame, wire.Event) and frame.kind == "state":
                        await tower.write(b"go\n")
            replaced, own = exits
            assert (replaced.child_pid, replaced.exit_class) == (info.child_pid, "requested")
            assert (own.code, own.exit_class, own.state) == (3, "crash", "backoff")
            async with asyncio.timeout(20):  # and it is restarted
                while not (isinstance(frame := await tower.recv(), wire.Event) and frame.kind == "spawned"):
                    pass
            await tower.stop(grace=1.0)

    asyncio.run(main())
