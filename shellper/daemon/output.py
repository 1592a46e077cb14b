"""The child's output: read from its PTY (and its own stderr descriptor), kept in the ring, handed to clients.

A stderr of its own is merged into the stream at boundaries (shellper.core.merge), never inside a line,
character or escape sequence of stdout; a one-shot timer lets held stderr out when both streams are quiet,
and exists only while something is held.

The reader never waits for a viewer: each client takes what it can and catches up from the ring
(shellper.daemon.clientconn). It holds back, by not reading, only while a paced client (the tower, a
terminal) is far behind (shellper.daemon.pacing). The session's own notices go into the same stream.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import time

from shellper.core.merge import StreamMerger
from shellper.core.ring import Scrollback
from shellper.core.terminal.text import strip_escapes
from shellper.daemon.pacing import OutputPacer
from shellper.daemon.screenfeed import ScreenModel
from shellper.daemon.starved import Starvation
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.daemon.clientconn import ClientConn
    from shellper.daemon.reactor import Handle, Reactor
    from shellper.host.child import Child
    from shellper.host.logfile import LogFile

READ_CHUNK = 64 * 1024
"""The buffer reads go into, one after another, and what is handed on is copied out of at its real size:
os.read allocates the whole request and shrinks it, which fragments the heap, and copying each read out
and joining them copied every byte twice (bench/NOTES.md, "Reading the PTY into one buffer")."""
PTY_READ_MAX = 4096
"""The most one read of a PTY returns (4,095 bytes): the room a read is always given (a read of a pipe
may fill what is left of the buffer)."""
READS_PER_WAKEUP = 4
"""Reads per wakeup: drain what is there, but let clients and signals in between."""
READS_DETACHED = 16
"""Reads per wakeup with no client attached (detached ingest): what fills the buffer (16 x 4,095 bytes), appended
at once. Per wakeup and per append the shellper pays the same Python whatever the size; with no client there is
no reader to hand pieces to early, so a flood costs ~25 % less CPU per GiB than at four reads of which every two
are appended (bench/NOTES.md, "Echo, attach flood and ingest against dtach")."""
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
"""Bytes of the child's stderr (or, without a stderr of its own, of its output) kept as exit evidence."""


class Output:
    """Reads the current child's output into the ring and hands it to every client that is caught up."""

    def __init__(self, loop: Reactor, log: LogFile, ring_bytes: int, clients: dict[int, ClientConn]) -> None:
        self.loop = loop
        self.scrollback = Scrollback(ring_bytes)
        self.screen = ScreenModel(self.scrollback, ring_bytes)
        """The screen of the output (shellper.daemon.screenfeed), fed from the ring in batches."""
        self.last_output_at: float | None = None
        self.notices = True
        """Whether :meth:`notice` writes anything (off for legacy-main: shellper.daemon.legacymain)."""
        self.stderr_tail = bytearray()
        """The end of what the child wrote to a stderr of its own: evidence for classifying its exit."""
        # Anonymous pages, not a bytearray: zero-filled, its 64 KiB were resident in every session from the
        # start, where a read touches only the pages it fills (two, but in a starved flood).
        self._read_view = memoryview(mmap.mmap(-1, READ_CHUNK))
        self._starvation = Starvation()  # see FORWARD_BATCH
        self._clients = clients
        """The attached clients (shellper.daemon.registry keeps them): each gets every output it is ready for."""
        self.paced: list[ClientConn] = []
        """The clients output waits for, within bounds (shellper.daemon.pacing): the tower and the terminals."""
        self.pacer = OutputPacer(loop, max(1, ring_bytes // 2), readers=lambda: self.paced,
                                 end=lambda: self.scrollback.end, pause=self._hold, resume=self._release,
                                 log=log.write)
        self._child: Child | None = None
        self._merger: StreamMerger | None = None
        """Only for a child with a stderr of its own: holds stderr until stdout is at a boundary."""
        self._flush_timer: Handle | None = None
        self._flush_at = 0.0
        self._child_start = 0
        self._stderr_separate = False
        """Whether the last child had a stderr of its own (kept after it is gone, for its exit evidence)."""
        """Where the current child's output starts in the ring: its exit evidence is read from there."""

    def attach(self, child: Child) -> None:
        """Read a newly spawned child's output."""
        self._child = child
        self.stderr_tail.clear()
        self._child_start = self.scrollback.end
        self._stderr_separate = child.stderr_fd is not None
        self._merger = StreamMerger() if self._stderr_separate else None
        for fd in child.output_fds():
            self.loop.add_reader(fd, self._on_readable, child, fd)

    def detach(self) -> None:
        """Stop reading the child's descriptors (it is gone, or the session never started) and drop any hold."""
        self.pacer.forget()
        self._cancel_flush()
        self._merger = None
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
        if self._merger is not None:
            self._cancel_flush()
            if held := self._merger.end():
                self.append(held)

    def exit_evidence(self) -> str:
        """The end of what the current child wrote to stderr, or without a stderr of its own, of its output.

        From the ring, that is plain text: escape sequences removed, carriage returns kept (the classifier
        keeps what a carriage return overwrote last).
        """
        if self._stderr_separate:
            return bytes(self.stderr_tail).decode("utf-8", "replace")
        end = self.scrollback.end
        start = max(self._child_start, end - STDERR_TAIL_BYTES, self.scrollback.start)
        data = self.scrollback.read(start, end - start).data if end > start else b""
        return strip_escapes(bytes(data).decode("utf-8", "replace"))

    def pace(self, client: ClientConn) -> None:
        self.paced.append(client)

    def unpace(self, client: ClientConn) -> None:
        if client in self.paced:
            self.paced.remove(client)
            self.pacer.on_progress()  # one fewer to wait for

    def _on_readable(self, child: Child, fd: int) -> None:
        # Reads go one after another into the one buffer, and what is handed on is copied out once.
        view, size = self._read_view, 0
        if self._clients:
            forward_at = READ_CHUNK - PTY_READ_MAX if self._starvation.starved else FORWARD_BATCH
            reads = READS_PER_WAKEUP
        else:  # nobody to hand a piece to early, nor a key to let in: the buffer's worth in one append
            forward_at, reads = READ_CHUNK - PTY_READ_MAX, READS_DETACHED
        for _ in range(reads):
            try:
                n = os.readv(fd, (view[size:],))
            except BlockingIOError:
                break
            except OSError:  # EIO: every slave end is closed
                n = 0
            if not n:
                self.loop.remove_reader(fd)
                break
            size += n
            if size >= forward_at:
                self._output_from(child, fd, view[:size].tobytes())
                size = 0
            elif n < SHORT_READ:
                break
        if size:
            self._output_from(child, fd, view[:size].tobytes())

    def _output_from(self, child: Child, fd: int, data: bytes) -> None:
        self._starvation.output(len(data))
        merger = self._merger
        if merger is not None:
            now = self.loop.time()
            if fd == child.stderr_fd:
                self.stderr_tail += data
                if len(self.stderr_tail) > STDERR_TAIL_BYTES:
                    del self.stderr_tail[:-STDERR_TAIL_BYTES]
                data = merger.err(data, now)
            else:
                data = merger.out(data, now)
            self._schedule_flush()
            if not data:
                return
        self.append(data)

    def _schedule_flush(self) -> None:
        """A timer for the quiet flush while stderr is held; none otherwise.

        Output moves the time it is due later: the timer is left as it is and, when it fires early,
        set again (not a new timer per read).
        """
        due = self._merger.flush_due() if self._merger is not None else None
        if due is None:
            self._cancel_flush()
        elif self._flush_timer is None or due < self._flush_at:
            self._cancel_flush()
            self._flush_at = due
            self._flush_timer = self.loop.call_later(due - self.loop.time(), self._on_quiet)

    def _cancel_flush(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None

    def _on_quiet(self) -> None:
        self._flush_timer = None
        if self._merger is not None:
            if held := self._merger.on_quiet(self.loop.time()):
                self.append(held)
            self._schedule_flush()

    def append(self, data: bytes) -> None:
        """Append to the ring and hand to every client that is caught up."""
        old_end = self.scrollback.end
        screen = self.screen
        screen.before_append(len(data))
        self.scrollback.append(data)
        if len(data) > screen.limit:
            screen.after_append(old_end, data)
        self.last_output_at = time.time()
        if self._clients:
            frame = b""  # the DATA frame, built once and only for a client that takes frames
            for client in self._clients.values():
                if not frame and client.sink.terminal is None:
                    frame = wire.encode_data(data)
                client.on_output(old_end, data, frame)
            if self.paced:
                self.pacer.on_output(old_end + len(data))

    def notice(self, text: str) -> tuple[int, int] | None:
        """A one-line notice for people attached; it is part of the output stream (and the ring), in the
        format PROTOCOL.md 8.5 gives. Returns (offset, length): where it sits in the stream; None when
        notices are off (legacy-main)."""
        if not self.notices:
            return None
        start = self.scrollback.end
        note = notice_bytes(text)
        self.append(note)
        return start, len(note)

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


def notice_bytes(text: str) -> bytes:
    """A shellper note as it goes into the stream: on a line of its own, in reverse video (PROTOCOL.md 8.5)."""
    return b"\r\n\x1b[7m[shellper] " + text.encode() + b"\x1b[0m\r\n"
