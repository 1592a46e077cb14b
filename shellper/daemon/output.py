"""The child's output: read from its PTY (and its own stderr descriptor), kept in the ring, handed to clients.

The reader never waits for a viewer: each client takes what it can and catches up from the ring
(shellper.daemon.clientconn). It holds back, by not reading, only while a paced client (the tower, a
terminal) is far behind (shellper.daemon.pacing). The session's own notices go into the same stream.
"""

from __future__ import annotations

import contextlib
import os
import time

from shellper.core.ring import Scrollback
from shellper.daemon.pacing import OutputPacer
from shellper.daemon.starved import Starvation
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.daemon.clientconn import ClientConn
    from shellper.daemon.reactor import Reactor
    from shellper.host.child import Child
    from shellper.host.logfile import LogFile

READ_CHUNK = 64 * 1024
"""Bytes asked for per read. Reads go into one reused buffer and are copied out at their real size:
os.read allocates the whole request and shrinks it, which fragments the heap (bench/NOTES.md,
"Reading the PTY into one buffer")."""
READS_PER_WAKEUP = 4
"""Reads per wakeup: drain what is there, but let clients and signals in between."""
FORWARD_BATCH = 8000
"""Bytes read after which they go to the ring and the clients without waiting for the wakeup's other
reads, so the client (a terminal, a tower) works on them while the shellper reads on: in a flood, every
two reads (a PTY hands over at most 4,095 bytes per read). Not while the shellper waits for a CPU longer
than it runs (shellper.daemon.starved): then each hand-off's wakeup of a client costs more than it gains, and a
wakeup's reads go out together (up to READ_CHUNK). The figures: bench/NOTES.md, 2026-12-03 ("output is
handed to the clients every two PTY reads")."""
SHORT_READ = 512
"""A read this small drained the PTY (a keystroke's echo, a prompt): the read after it would only
fail with EAGAIN, which costs a syscall and an exception on every keystroke. Epoll is level-triggered,
so anything written meanwhile wakes us again."""
STDERR_TAIL_BYTES = 8 * 1024


class Output:
    """Reads the current child's output into the ring and hands it to every client that is caught up."""

    def __init__(self, loop: Reactor, log: LogFile, ring_bytes: int, clients: dict[int, ClientConn]) -> None:
        self.loop = loop
        self.scrollback = Scrollback(ring_bytes)
        self.last_output_at: float | None = None
        self.stderr_tail = bytearray()
        """The end of what the child wrote to a stderr of its own: evidence for classifying its exit."""
        read_buffer = bytearray(READ_CHUNK)  # see READ_CHUNK
        self._read_into, self._read_view = (read_buffer,), memoryview(read_buffer)
        self._starvation = Starvation()  # see FORWARD_BATCH
        self._clients = clients
        """The attached clients (shellper.daemon.registry keeps them): each gets every output it is ready for."""
        self.paced: list[ClientConn] = []
        """The clients output waits for, within bounds (shellper.daemon.pacing): the tower and the terminals."""
        self.pacer = OutputPacer(loop, max(1, ring_bytes // 2), readers=lambda: self.paced,
                                 end=lambda: self.scrollback.end, pause=self._hold, resume=self._release,
                                 log=log.write)
        self._child: Child | None = None

    def attach(self, child: Child) -> None:
        """Read a newly spawned child's output."""
        self._child = child
        self.stderr_tail.clear()
        for fd in child.output_fds():
            self.loop.add_reader(fd, self._on_readable, child, fd)

    def detach(self) -> None:
        """Stop reading the child's descriptors (it is gone, or the session never started) and drop any hold."""
        self.pacer.forget()
        child, self._child = self._child, None
        if child is not None:
            for fd in child.output_fds():
                with contextlib.suppress(ValueError, OSError):
                    self.loop.remove_reader(fd)

    def drain(self, child: Child) -> None:
        """Take what the child left in its descriptors before they are closed."""
        for fd in child.output_fds():
            with contextlib.suppress(OSError):
                self._on_readable(child, fd)

    def pace(self, client: ClientConn) -> None:
        self.paced.append(client)

    def unpace(self, client: ClientConn) -> None:
        if client in self.paced:
            self.paced.remove(client)
            self.pacer.on_progress()  # one fewer to wait for

    def _on_readable(self, child: Child, fd: int) -> None:
        batch: list[bytes] = []
        size = 0
        forward_at = READ_CHUNK if self._starvation.starved else FORWARD_BATCH
        for _ in range(READS_PER_WAKEUP):
            try:
                chunk = self._read_view[:os.readv(fd, self._read_into)].tobytes()
            except BlockingIOError:
                break
            except OSError:  # EIO: every slave end is closed
                chunk = b""
            if not chunk:
                self.loop.remove_reader(fd)
                break
            batch.append(chunk)
            size += len(chunk)
            if size >= forward_at:
                self._output_from(child, fd, batch)
                batch, size = [], 0
            elif len(chunk) < SHORT_READ:
                break
        if batch:
            self._output_from(child, fd, batch)

    def _output_from(self, child: Child, fd: int, chunks: list[bytes]) -> None:
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._starvation.output(len(data))
        if fd == child.stderr_fd:
            self.stderr_tail += data
            if len(self.stderr_tail) > STDERR_TAIL_BYTES:
                del self.stderr_tail[:-STDERR_TAIL_BYTES]
        self.append(data)

    def append(self, data: bytes) -> None:
        """Append to the ring and hand to every client that is caught up."""
        old_end = self.scrollback.end
        self.scrollback.append(data)
        self.last_output_at = time.time()
        if self._clients:
            frame = b""  # the DATA frame, built once and only for a client that takes frames
            for client in self._clients.values():
                if not frame and client.terminal is None:
                    frame = wire.encode_data(data)
                client.on_output(old_end, data, frame)
            if self.paced:
                self.pacer.on_output()

    def notice(self, text: str) -> None:
        """A one-line notice for people attached; it is part of the output stream (and the ring)."""
        self.append(b"\r\n\x1b[7m[shellper] " + text.encode() + b"\x1b[0m\r\n")

    def _hold(self) -> None:
        """A paced client is far behind: stop reading the child's output until it catches up."""
        if self._child is not None:
            for fd in self._child.output_fds():
                self.loop.remove_reader(fd)

    def _release(self) -> None:
        child = self._child
        if child is not None:
            for fd in child.output_fds():
                self.loop.add_reader(fd, self._on_readable, child, fd)
