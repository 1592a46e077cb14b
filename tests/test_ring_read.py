"""tower_client.read_output: a range of a session's output read by its offsets, exactly what its ring holds, with
what the ring no longer held said, never invented."""

from __future__ import annotations

import asyncio

import pytest
from support.paths import PY
from support.sessions import Sessions
from support.waiting import poll_until

from shellper.core.defaults import MIN_RING_BYTES
from shellper.core.errors import ClientError
from tower_client import OutputRange, Timeout, read_output

LINES = "import sys\nfor i in range({n}): sys.stdout.write('line %06d\\n' % i)\nsys.stdout.flush()\nsys.stdin.read()"


def _ring(sessions: Sessions, name: str) -> tuple[int, bytes]:
    """(ring_start, the ring's bytes) as a tower's replay of the whole ring has them."""
    with sessions.connect(name, replay_bytes=None) as tower:
        assert tower.replay is not None
        return tower.replay.offset, tower.replay.data


def test_a_range_is_the_rings_bytes_at_those_offsets(sessions: Sessions) -> None:
    info = sessions.start("r", [PY, "-c", LINES.format(n=2000)])
    try:
        poll_until(lambda: _ring(sessions, "r")[1].endswith(b"line 001999\r\n"), what="all 2000 lines in the ring")
        start, ring = _ring(sessions, "r")
        assert start == 0
        whole = asyncio.run(read_output(info.socket))
        assert whole == OutputRange(start=0, data=ring, missed=0)
        middle = asyncio.run(read_output(info.socket, 1000, 5000))
        assert (middle.start, middle.end, middle.data, middle.missed) == (1000, 5000, ring[1000:5000], 0)
        assert asyncio.run(read_output(info.socket, len(ring), len(ring))).data == b""
    finally:
        sessions.stop("r")


def test_bytes_the_ring_no_longer_holds_are_said_not_invented(sessions: Sessions) -> None:
    info = sessions.start("small", [PY, "-c", LINES.format(n=20000)], ring_bytes=MIN_RING_BYTES)
    try:
        poll_until(lambda: _ring(sessions, "small")[1].endswith(b"line 019999\r\n"), what="the last line in the ring")
        ring_start, ring = _ring(sessions, "small")
        assert ring_start > 0
        got = asyncio.run(read_output(info.socket, 10, ring_start + 100))
        assert (got.start, got.missed, got.data) == (ring_start, ring_start - 10, ring[:100])
    finally:
        sessions.stop("small")


def test_an_end_not_yet_written_is_waited_for_or_times_out(sessions: Sessions) -> None:
    info = sessions.start("later", ["cat"])
    try:
        with sessions.connect("later") as tower:
            def reader_connected() -> bool:
                return any(c["client"] == "read_output" for c in tower.status().info["clients"])

            async def read_while_typing() -> OutputRange:
                reading = asyncio.ensure_future(read_output(info.socket, 0, 6))
                # typed only once the read is connected and waiting: the bytes come live, not in its replay
                await asyncio.to_thread(poll_until, reader_connected, what="the read to connect")
                await asyncio.to_thread(tower.write, b"abc\n")
                return await reading
            got = asyncio.run(read_while_typing())
        assert got.data.startswith(b"abc") and got.end == 6  # the echo and cat's copy: at least 6 bytes
        with pytest.raises(Timeout):
            asyncio.run(read_output(info.socket, 0, 10**6, timeout=0.5))
    finally:
        sessions.stop("later")


def test_a_start_past_the_output_or_a_backwards_range_is_refused(sessions: Sessions) -> None:
    info = sessions.start("refused", ["cat"])
    try:
        with pytest.raises(ClientError, match=r"offset"):
            asyncio.run(read_output(info.socket, 10**9))
        with pytest.raises(ValueError, match="not one"):
            asyncio.run(read_output(info.socket, 5, 4))
    finally:
        sessions.stop("refused")
