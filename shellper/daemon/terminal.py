"""A user's terminal that ``shellper attach`` handed to the shellper, which then reads and writes it itself.

Why: relaying through the attach process puts a second process, two wakeups and two copies between the
child and the screen on every keystroke and every screenful; tmux avoids that by passing the client's
terminal to its server, and so do we (protocol section 7.4). The descriptor is the attach client's own
open of the terminal, so making it non-blocking here leaves the user's shell's descriptor alone.

Writes go straight to the terminal while it takes them; what it refuses is kept (like the socket
transport does) and the owner is told to stop sending above a high-water mark and to resume below a
quarter of it. A terminal that returns EOF or an error has hung up: the owner hears of it once.
"""

from __future__ import annotations

import contextlib
import os
import termios
from collections import deque

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Protocol

    from shellper.daemon.reactor import Reactor

    class TerminalOwner(Protocol):
        def terminal_input(self, data: bytes) -> None: ...
        def terminal_paused(self) -> None: ...
        def terminal_resumed(self) -> None: ...
        def terminal_hangup(self, why: str) -> None: ...

HIGH_WATER = 256 * 1024
"""Bytes the terminal has not taken yet above which its client stops getting live output (and later
catches up from the ring, as a slow socket client does)."""
READ_SIZE = 4096
"""A terminal hands over at most its line discipline's 4 KiB per read; a larger request only costs an
allocation per keystroke."""
WRITEV_MAX = 64

_DIM = b"\x1b[2m"
_PLAIN = b"\x1b[0m"


def note(text: str) -> bytes:
    """A dim line of shellper's own between session output; not part of the session's stream."""
    return b"\r\n" + _DIM + text.encode(errors="replace") + _PLAIN + b"\r\n"


def window_size(fd: int) -> tuple[int, int] | None:
    """(cols, rows) of the terminal on ``fd``, or None if it is not one or reports no size."""
    try:
        rows, cols = termios.tcgetwinsize(fd)
    except (OSError, termios.error):
        return None
    if cols <= 0 or rows <= 0:
        return None
    return cols, rows


class Terminal:
    """One handed-over terminal on the reactor: non-blocking writes with a backlog, reads of input."""

    def __init__(self, reactor: Reactor, fd: int, owner: TerminalOwner) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self._reactor = reactor
        self._owner = owner
        self._backlog: deque[bytes | memoryview] = deque()
        self.buffered = 0
        self._paused = False
        self._reading = False
        self.closed = False

    def start_reading(self) -> None:
        if not self._reading and not self.closed:
            self._reading = True
            self._reactor.add_reader(self.fd, self._read_ready)

    def stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._reactor.remove_reader(self.fd)

    def write(self, data: bytes | memoryview) -> None:
        if self.closed or not data:
            return
        if self._backlog:  # behind already: queue it, and offer the terminal what it may take by now
            self._backlog.append(data)
            self.buffered += len(data)
            self.flush()
        else:
            try:
                n = os.write(self.fd, data)
            except BlockingIOError:
                n = 0
            except OSError as exc:
                self._hangup(f"write failed: {exc.strerror or exc}")
                return
            if n == len(data):
                return
            data = memoryview(data)[n:]
            self._reactor.add_writer(self.fd, self.flush)
            self._backlog.append(data)
            self.buffered += len(data)
        if not self._paused and self.buffered > HIGH_WATER:
            self._paused = True
            self._owner.terminal_paused()

    def close(self) -> None:
        """Stop using the terminal; what it has not taken is dropped."""
        if self.closed:
            return
        self.closed = True
        self._backlog.clear()
        self.buffered = 0
        self._reactor.forget_fd(self.fd)
        with contextlib.suppress(OSError):
            os.close(self.fd)

    # ----------------------------------------------------------------------------------- events

    def flush(self) -> None:
        """Write what the terminal will take of the backlog. Called when epoll says it is writable, and
        also on each new piece of output, so room the terminal made meanwhile is filled without a wakeup
        of its own (bench/NOTES.md, "Writing to a handed-over terminal")."""
        backlog = self._backlog
        if not backlog:
            return
        buffers = list(backlog) if len(backlog) <= WRITEV_MAX else [backlog[i] for i in range(WRITEV_MAX)]
        try:
            n = os.writev(self.fd, buffers)
        except BlockingIOError:
            return
        except OSError as exc:
            self._hangup(f"write failed: {exc.strerror or exc}")
            return
        self.buffered -= n
        while n:
            head = backlog[0]
            if len(head) <= n:
                n -= len(head)
                backlog.popleft()
            else:
                backlog[0] = memoryview(head)[n:]
                n = 0
        if not backlog:
            self._reactor.remove_writer(self.fd)
        if self._paused and self.buffered <= HIGH_WATER // 4:
            self._paused = False
            self._owner.terminal_resumed()

    def _read_ready(self) -> None:
        try:
            data = os.read(self.fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # EIO: the terminal hung up
            self._hangup(f"read failed: {exc.strerror or exc}")
            return
        if not data:
            self._hangup("end of input")
            return
        self._owner.terminal_input(data)

    def _hangup(self, why: str) -> None:
        if not self.closed:
            self.stop_reading()
            self._owner.terminal_hangup(why)
