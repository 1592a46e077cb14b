"""The Fleet's life says no: requests before start() and after close() raise typed errors, the stream ends
on close (from a signal handler too), and the stream carries each event once, without the library's own
connections and probes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from shellper.core.errors import ShellperError
from tests.conftest import ROOT
from tests.test_fleet import SLEEPER, make_fleet, wait_for
from tower_client import FleetClosed, FleetNotStarted
from tower_client.fleet import SessionSpec
from tower_client.stream import FleetItem, OutputChunk


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



