"""A handle per session: ``fleet.session(name)`` carries every request, the state, the screen and the
offsets of one session, and says no once the session has left the Fleet."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from support.fleet import make_fleet, wait_for
from support.paths import ROOT

from tower_client import SessionHandle, UnknownSession
from tower_client.fleet import SessionSpec
from tower_client.stream import FleetState, OutputChunk, StateChange


async def screen_shows(handle: SessionHandle, text: str, timeout: float = 10.0) -> list[str]:
    """Poll the handle's screen until a row shows ``text``; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        lines = (await handle.screen()).lines
        if any(text in line for line in lines):
            return lines
        if time.monotonic() > deadline:
            pytest.fail(f"the screen never showed {text!r}: {lines}")
        await asyncio.sleep(0.02)


def test_a_session_handle_carries_its_requests_screen_and_offsets(tmp_path: Path, runtime_dir: Path) -> None:
    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                info = await fleet.launch(SessionSpec("h", ["cat"], cwd=str(ROOT), columns={"team": "blue"}))
                handle = fleet.session("h")
                assert (handle.name, handle.instance_id, handle.shellper_pid) == ("h", info.instance_id, info.pid)
                assert handle.columns["team"] == "blue"
                await wait_for(fleet, lambda i: isinstance(i, StateChange) and i.state is FleetState.RUNNING)
                assert handle.state is FleetState.RUNNING

                await handle.write(b"hello handle\n")
                await wait_for(fleet, lambda i: isinstance(i, OutputChunk) and b"hello handle" in i.data)
                await screen_shows(handle, "hello handle")
                await fleet.sync()
                acked = handle.acknowledged
                assert acked is not None and acked.instance_id == info.instance_id
                assert 0 < acked.offset <= handle.received.next_offset

                await handle.resize(100, 30)
                screen = await handle.screen(scrollback=10)
                assert (screen.cols, screen.rows) == (100, 30)
                assert (await handle.status()).state == "running"

                await handle.stop()
                with pytest.raises(UnknownSession):
                    await handle.write(b"x")
                with pytest.raises(UnknownSession):
                    fleet.session("h")
            finally:
                await fleet.stop_all()

    asyncio.run(main())
