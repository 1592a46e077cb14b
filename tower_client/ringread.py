"""A range of a session's output read by its offsets: ``await read_output(path, start, end)``.

What a store that lost its tail (a Tower's database restored from yesterday, a sink whose disk filled) uses to
fetch exactly the bytes it lacks, while the ring still holds them. It connects as a viewer, so reading takes no
input rights and changes nothing for the session's other clients; it asks for ``resume_from=start`` and keeps
the replay and then the live output up to ``end``. Bytes the ring no longer holds are not invented: the range
starts where the ring does and says how many were missed (PROTOCOL.md section 9's table).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from shellper.protocol import wire
from tower_client.client import AsyncClient, SessionGone, Timeout

READ_TIMEOUT = 10.0
"""Seconds a read waits in all for its range: the handshake and, for an ``end`` past the output written so far,
the session to write up to it."""


@dataclass(frozen=True)
class OutputRange:
    """Output bytes ``data`` at offsets ``start`` .. ``end``. ``missed``: bytes asked for before ``start`` that the
    ring no longer held (0 when it held the whole range)."""

    start: int
    data: bytes
    missed: int = 0

    @property
    def end(self) -> int:
        return self.start + len(self.data)


async def read_output(path: str | os.PathLike[str], start: int = 0, end: int | None = None, *,
                      timeout: float = READ_TIMEOUT) -> OutputRange:
    """The session's output from offset ``start`` to ``end`` (exclusive; None: all it has written so far).

    An ``end`` past what has been written waits for the session to write it, up to ``timeout`` seconds in all
    (then Timeout); a session that ends first raises SessionGone. A ``start`` past the output written so far is
    refused by the shellper (``bad_offset``, as a resume there is). A viewer that falls behind while the session
    floods is told what it missed by a GAP: the range cannot be whole, so that raises SessionGone too, naming it.
    """
    if start < 0 or (end is not None and end < start):
        raise ValueError(f"read_output: the range {start}..{end} is not one (0 <= start <= end)")
    client = AsyncClient(path, wire.Role.VIEWER, client_name="read_output")
    try:
        async with asyncio.timeout(timeout):
            welcome = await client.connect(resume_from=start)
            replay = client.replay
            assert replay is not None  # connect() returns once the REPLAY is in
            stop = welcome.ring_end if end is None else end
            got = bytearray(replay.data)
            while replay.offset + len(got) < stop:
                frame = await client.recv()
                if isinstance(frame, wire.Data):
                    got += frame.data
                elif isinstance(frame, wire.Gap):
                    raise SessionGone(client.path, f"fell behind the ring while reading: {frame.missed} bytes "
                                                   f"before offset {frame.offset} were not delivered")
    except TimeoutError:
        wanted = "its WELCOME and REPLAY" if end is None else f"the output up to offset {end}"
        raise Timeout(client.path, f"{wanted} did not arrive within {timeout:g} s") from None
    finally:
        await client.close()
    first = replay.offset
    return OutputRange(start=first, data=bytes(got[:max(0, stop - first)]), missed=replay.gap)
