"""The terminal a client handed over (``shellper attach``): output written there instead of in DATA
frames, keys read from it up to the detach key, and the terminal given back (RELEASE) on detach, exit,
hang-up or close. shellper.daemon.terminal does the non-blocking I/O; this is what one connection does
with it.
"""

from __future__ import annotations

import os

from shellper.core.defaults import clamp_terminal_size
from shellper.core.detachkeys import KeysEnd, read_keys
from shellper.daemon.terminal import Terminal, note, window_size
from shellper.protocol import wire
from shellper.protocol.wire import Role

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Protocol

    from shellper.daemon.ports import ConnView
    from shellper.daemon.pump import OutputPump

    class SinkOwner(ConnView, Protocol):
        """What the sink uses of its connection (shellper.daemon.clientconn.ClientConn)."""

        @property
        def pump(self) -> OutputPump: ...

        def input(self, data: bytes) -> None: ...


class TerminalSink:
    """One connection's handed-over terminal (none until a HELLO hands one over), and its detach key."""

    def __init__(self, conn: SinkOwner) -> None:
        self.conn = conn
        self.terminal: Terminal | None = None
        """The user's terminal, when ``shellper attach`` handed it over: output goes there, not in DATA."""
        self.released = False
        """The handed-over terminal was given back: this connection gets no more output."""
        self.detach_byte: int | None = None
        self._fds: list[int] = []
        """The descriptor that came with the HELLO's bytes (SCM_RIGHTS), until the HELLO is handled."""

    def keep_fds(self, fds: list[int], wanted: bool) -> None:
        """Keep the first descriptor for the HELLO; any other is closed at once."""
        for fd in fds:
            if wanted and not self._fds:
                self._fds.append(fd)
            else:
                os.close(fd)

    def take(self, may_hand_over: bool, detach_byte: int | None) -> None:
        """Use the terminal the HELLO carried, if it asked, may, and it is one; else the client relays."""
        fd = self._fds.pop() if self._fds else None
        self.close()  # any other descriptor
        if fd is None:
            return
        if not (may_hand_over and os.isatty(fd)):
            os.close(fd)
            return
        self.detach_byte = detach_byte
        try:
            self.terminal = Terminal(self.conn.session.loop, fd, self)
        except OSError:
            os.close(fd)

    def note(self, message: str) -> None:
        """What ``shellper attach`` shows when it relays an ERROR or a refusal."""
        if self.terminal is not None:
            self.terminal.write(note(f"shellper: {message}"))

    def follow_size(self) -> None:
        """Give the child the handed-over terminal's size, if it changed (one ioctl)."""
        assert self.terminal is not None
        size = window_size(self.terminal.fd)
        session = self.conn.session
        if size is not None and size != (session.cols, session.rows):
            session.resize(*clamp_terminal_size(*size))

    def release(self, reason: str, typed: bytes = b"") -> None:
        """Give the handed-over terminal back: stop using it, close our descriptor, send RELEASE."""
        if self.terminal is None:
            return
        self.close()
        self.released = True
        conn = self.conn
        reset = conn.session.scrollback.modes.reset_sequence()
        if conn.transport is not None and not conn.transport_gone():
            conn.transport.write(wire.encode(wire.Release(reason=reason, reset=reset, offset=conn.pump.pos,
                                                               typed=typed or None)))

    def close(self) -> None:
        if self.terminal is not None:
            self.terminal.close()
            self.terminal = None
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    # ----------------------------------------------------------------------------------- Terminal's owner

    def terminal_input(self, data: bytes) -> None:
        """Keys typed on the handed-over terminal: to the child, up to the detach byte (which, typed twice,
        is sent through: shellper.core.detachkeys)."""
        key = self.detach_byte
        if key is None or key not in data:  # a keystroke's hot path: nothing to split or copy
            conn = self.conn
            if self.terminal is not None and conn.role is not Role.VIEWER:
                self.follow_size()
                conn.input(data)
            return
        data, end, after = read_keys(data, key)
        conn = self.conn
        if data and conn.role is not Role.VIEWER and self.terminal is not None:
            self.follow_size()  # a resize attach has not reported yet must reach the child before these keys
            conn.input(data)
        if end is KeysEnd.DETACH:
            self._detach(after)

    def _detach(self, typed: bytes) -> None:
        if self.terminal is not None and not self.conn.closing:
            self.release("detach", typed)
            self.conn.close_after_flush()

    def terminal_paused(self) -> None:
        self.conn.pump.paused = True

    def terminal_resumed(self) -> None:
        self.conn.pump.paused = False
        self.conn.pump.run()

    def terminal_hangup(self, why: str) -> None:
        self.conn.session.log.write(f"client {self.conn.client_id}: terminal gone ({why})")
        self.release("hangup")
        self.conn.close_after_flush()
