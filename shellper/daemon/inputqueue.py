"""What clients type, on its way to the child: straight into the PTY, queued while the child takes no more,
and the sending clients held back while the queue is long."""

from __future__ import annotations

import contextlib
import os

from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.daemon.clientconn import ClientConn
    from shellper.daemon.reactor import Reactor
    from shellper.host.child import Child
    from shellper.host.logfile import LogFile

INPUT_HIGH_WATER = 1024 * 1024
"""Pending keyboard input above which we stop reading from the sending client (the child is slow)."""


class InputQueue:
    """Input for the current child, in the order it arrived."""

    def __init__(self, loop: Reactor, log: LogFile) -> None:
        self.loop = loop
        self.log = log
        self._child: Child | None = None
        self._pending = bytearray()
        self._paused: set[ClientConn] = set()

    def attach(self, child: Child) -> None:
        """Input goes to this newly spawned child from now on."""
        self._child = child

    def detach(self) -> None:
        """The child is gone: what was meant for it is dropped, and the clients it held back may send again."""
        child, self._child = self._child, None
        if child is not None:
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_writer(child.master_fd)
        self._pending.clear()
        self._resume()

    def forget(self, client: ClientConn) -> None:
        """A client went away: it is not held back any more."""
        self._paused.discard(client)

    def write(self, data: bytes, client: ClientConn) -> None:
        if self._child is None:
            client.send_error("not_running", "the child is not running; input dropped", wire.FrameType.DATA)
            return
        if not self._pending:  # the usual case, a keystroke: straight to the PTY
            try:
                written = os.write(self._child.master_fd, data)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                self.log.write(f"input write failed: {exc}")
                return
            if written == len(data):
                return
            self._pending += data[written:]
            self._flush()
        else:
            self._pending += data
        if len(self._pending) > INPUT_HIGH_WATER:
            client.pause_input()
            self._paused.add(client)

    def _flush(self) -> None:
        child = self._child
        if child is None:
            self._pending.clear()
            self._resume()
            return
        try:
            while self._pending:
                n = os.write(child.master_fd, self._pending[:65536])
                del self._pending[:n]
        except BlockingIOError:
            pass
        except OSError as exc:
            self.log.write(f"input write failed: {exc}")
            self._pending.clear()
        with contextlib.suppress(ValueError, OSError):
            if self._pending:
                self.loop.add_writer(child.master_fd, self._flush)
            else:
                self.loop.remove_writer(child.master_fd)
        if len(self._pending) <= INPUT_HIGH_WATER // 2:
            self._resume()

    def _resume(self) -> None:
        """Read again from the clients held back while the child was not taking their input."""
        for client in self._paused:
            client.resume_input()
        self._paused.clear()
