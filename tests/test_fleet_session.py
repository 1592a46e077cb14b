"""A handle per session: ``fleet.session(name)`` carries every request, the state, the screen and the
offsets of one session, and says no once the session has left the Fleet."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fleet import make_fleet, wait_for
from support.paths import ROOT

from tower_client import FleetClosed, FleetError, SessionHandle, SessionStream, UnknownSession
from tower_client.fleet import SessionSpec
from tower_client.stream import FleetItem, FleetState, OutputChunk, StateChange


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


# --------------------------------------------------------------------------------------------- its own stream


async def take_until(stream: SessionStream, match: Callable[[FleetItem], bool], seen: list[FleetItem],
                     timeout: float = 20.0) -> FleetItem:
    """Take (and acknowledge) a session stream's items until one matches; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        item = await stream.next(max(0.0, deadline - time.monotonic()))
        if item is None:
            pytest.fail(f"no matching item within {timeout:g} s; seen: {seen[-10:]}")
        stream.ack(item)
        seen.append(item)
        if match(item):
            return item


def test_a_handle_stream_takes_its_sessions_items_and_the_merged_stream_the_rest(
        tmp_path: Path, runtime_dir: Path) -> None:
    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                await fleet.launch(SessionSpec("own", ["cat"], cwd=str(ROOT)))
                await fleet.launch(SessionSpec("other", ["cat"], cwd=str(ROOT)))
                running: set[str] = set()  # what came before the stream opened stays in the merged stream
                while running != {"own", "other"}:
                    up = await wait_for(fleet, lambda i: isinstance(i, StateChange) and i.state is FleetState.RUNNING)
                    running.add(up.session)  # type: ignore[union-attr]
                handle = fleet.session("own")
                mine: list[FleetItem] = []
                async with handle.stream() as items:
                    with pytest.raises(FleetError):
                        handle.stream()  # one at a time
                    await handle.write(b"to own\n")
                    await fleet.session("other").write(b"to other\n")
                    last = await take_until(items, lambda i: isinstance(i, OutputChunk) and b"to own" in i.data, mine)
                    merged: list[FleetItem] = []
                    await wait_for(fleet, lambda i: isinstance(i, OutputChunk) and b"to other" in i.data, seen=merged)
                    assert {i.session for i in mine} == {"own"}  # type: ignore[union-attr]
                    assert "own" not in {i.session for i in merged}  # type: ignore[union-attr]
                    await fleet.sync()  # acknowledged through the handle's stream: the same journal
                    pos = handle.acknowledged
                    assert pos is not None and pos.offset == last.end  # type: ignore[union-attr]
                    await handle.write(b"left behind\n")  # comes to the open stream, is not taken there
                    deadline = time.monotonic() + 10
                    while b"left behind" not in b"".join(
                            i.data for i in list(items._queue._queue) if isinstance(i, OutputChunk)):  # type: ignore[attr-defined]
                        assert time.monotonic() < deadline, "the output never reached the handle's stream"
                        await asyncio.sleep(0.02)
                assert items.closed
                # closed: what it had not handed out goes to the merged stream, then everything later
                await handle.write(b"after close\n")
                after: list[FleetItem] = []
                await wait_for(fleet, lambda i: isinstance(i, OutputChunk) and b"after close" in i.data, seen=after)
                text = b"".join(i.data for i in after if isinstance(i, OutputChunk) and i.session == "own")
                assert text.index(b"left behind") < text.index(b"after close")
            finally:
                await fleet.stop_all()

    asyncio.run(main())


def test_a_handle_stream_ends_when_its_session_leaves_and_when_the_fleet_closes(
        tmp_path: Path, runtime_dir: Path) -> None:
    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            try:
                await fleet.launch(SessionSpec("gone", ["cat"], cwd=str(ROOT)))
                await fleet.launch(SessionSpec("stays", ["cat"], cwd=str(ROOT)))
                items = fleet.session("gone").stream()
                stays = fleet.session("stays").stream()
                seen: list[FleetItem] = []
                await fleet.session("gone").write(b"hello\n")
                await take_until(items, lambda i: isinstance(i, OutputChunk) and b"hello" in i.data, seen)
                await fleet.session("gone").stop()
                async with asyncio.timeout(20):
                    rest = [item async for item in items]  # ends by itself, after the session's last item
                assert any(isinstance(i, StateChange) and i.state is FleetState.GONE for i in rest)
                assert items.closed
                await fleet.close()
                async with asyncio.timeout(5):
                    async for _ in stays:  # ends at once when the Fleet closes
                        pass
                with pytest.raises(FleetClosed):
                    await stays.next(0)
            finally:
                if not fleet.closed:
                    await fleet.stop_all()
                else:
                    async with make_fleet(tmp_path, runtime_dir) as again:
                        await again.stop_all()

    asyncio.run(main())
