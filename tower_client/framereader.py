"""A connected Unix stream whose bytes go straight to a callback, in the event loop's read callback.

asyncio's StreamReader buffers what arrives and wakes a task blocked in ``read()``; an
:class:`~tower_client.client.AsyncClient` following a session would then spend a task step (and an
event-loop turn) per read before it decodes a frame. :class:`SinkReader` hands each chunk to its ``sink``
at once instead: the client decodes it where it arrives. The StreamWriter around it works as usual.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterable
from typing import SupportsIndex

Sink = Callable[[bytes], None]
"""Takes a chunk as it arrives; ``b""`` is the end of the stream."""
Failed = Callable[[Exception], None]
"""Takes what ended the stream when it was not a clean end (a reset, a read error)."""


class SinkReader(asyncio.StreamReader):
    """A StreamReader whose every chunk, end and error go to ``sink`` and ``failed`` once they are set (before
    that it buffers as StreamReader does; nothing arrives before the client has sent its HELLO)."""

    sink: Sink | None = None
    failed: Failed | None = None

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        sink = self.sink
        if sink is None:
            super().feed_data(data)
        else:
            sink(bytes(data) if type(data) is not bytes else data)  # the transport's are bytes

    def feed_eof(self) -> None:
        super().feed_eof()
        if self.sink is not None:
            self.sink(b"")

    def set_exception(self, exc: Exception) -> None:
        super().set_exception(exc)
        if self.failed is not None:
            self.failed(exc)


async def open_sink_stream(sock: socket.socket) -> tuple[SinkReader, asyncio.StreamWriter]:
    """``asyncio.open_unix_connection(sock=sock)``, with a :class:`SinkReader`."""
    loop = asyncio.get_running_loop()
    reader = SinkReader(loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.create_unix_connection(lambda: protocol, sock=sock)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)
