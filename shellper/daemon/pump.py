"""One client's output: its own position in the ring, and the control frames queued behind that output.

A caught-up client is handed each output frame as it is produced; one whose socket (or handed-over
terminal) is full stops receiving and later catches up from the ring at its own pace, told of a gap if it
fell behind the ring's start (how it is told is its protocol's: ClientConn._after_gap, or nothing for
version 1). Control frames are never dropped: they are queued at the output offset they belong after, so
an EXIT never overtakes the output before it.
"""

from __future__ import annotations

from collections import deque

from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    from shellper.daemon.ports import Codec, ConnView, SinkView

    class PumpOwner(ConnView, Protocol):
        """What the pump uses of its connection (shellper.daemon.clientconn.ClientConn)."""

        @property
        def codec(self) -> Codec: ...

REPLAY_CHUNK = 1024 * 1024
"""Most output bytes in REPLAY or in one catch-up DATA frame."""
TERMINAL_CHUNK = 256 * 1024
"""Most ring bytes handed to a handed-over terminal per write while it catches up."""
MAX_PENDING_CONTROL = 1000
"""Control frames queued for a client that does not read; past this it is closed as too slow."""


class OutputPump:
    """What of the output one connection has had (``pos``), whether it may take more now (``paused``), and
    the control frames waiting for their place in the stream."""

    def __init__(self, conn: PumpOwner, sink: SinkView) -> None:
        self.conn = conn
        self.sink = sink
        self.ring = conn.session.scrollback
        """The session's ring (one for its life): read directly on the output's hot path, as is ``sink``."""
        self.pos = 0
        self.paused = False
        self.paced = False
        """The connection's role is waited for (shellper.protocol.server.PACED): it reports what it took."""
        self.control: deque[tuple[int, bytes, Callable[[], None] | None]] = deque()

    def on_output(self, old_end: int, data: bytes, frame: bytes) -> None:
        """New output ``data`` was appended at ``old_end``; ``frame`` is it as a DATA frame (empty for
        a client with a handed-over terminal, which writes ``data`` itself)."""
        conn, sink = self.conn, self.sink
        if not conn.registered or conn.closing or sink.released:
            return
        transport = conn.transport
        if transport is None or transport.is_closing():  # conn.transport_gone(), inline: once per client per read
            return
        terminal = sink.terminal
        if self.paused:
            if terminal is not None:
                terminal.flush()  # see Terminal.flush; may resume us, which catches up from the ring
            return
        if self.pos == old_end and not self.control:
            if terminal is not None:
                terminal.write(data)
            else:
                transport.write(frame)
            self.pos = old_end + len(data)  # the ring's end now, without two property hops per client per read
        else:
            self.run()

    def run(self) -> None:
        """Send what this client has not had yet, until its socket is full."""
        conn = self.conn
        if not conn.registered or conn.closing or conn.transport_gone():
            return
        transport, sink, ring = conn.transport, self.sink, self.ring
        assert transport is not None
        while not self.paused:
            self.flush_control()
            end = ring.end
            if self.pos >= end or sink.released or conn.closing:
                break
            terminal = sink.terminal
            limit = REPLAY_CHUNK if terminal is None else TERMINAL_CHUNK
            if self.control:
                # Stop at the next control frame's offset; if the ring has dropped everything up to it,
                # the GAP alone takes us past it, and it goes out before any later output.
                limit = max(0, min(limit, self.control[0][0] - max(self.pos, ring.start)))
            chunk = ring.read(self.pos, limit)
            data, at = chunk.data, chunk.offset
            if chunk.gap:
                at = conn.codec.after_gap(chunk)
                if at != chunk.offset:  # the screen drawn shows everything before ``at``
                    data = b""
            if terminal is not None:
                terminal.write(data)
            elif data:
                transport.write(wire.encode_data(data))
            self.pos = at + len(data)
        self.flush_control()
        if self.paced:
            conn.session.output_taken()

    def flush_control(self) -> None:
        transport = self.conn.transport
        assert transport is not None
        while self.control and self.control[0][0] <= self.pos:
            _, frame, action = self.control.popleft()
            if action is not None:
                action()
            transport.write(frame)

    def send_control_at(self, offset: int, frame: bytes, action: Callable[[], None] | None = None) -> None:
        """Queue a control frame to go out once this client has had the output before ``offset``;
        ``action`` runs just before it is sent (what a handed-over terminal shows for it)."""
        conn = self.conn
        if conn.closing or conn.transport is None:
            return
        if self.pos >= offset and not self.control and not self.paused:
            if action is not None:
                action()
            conn.transport.write(frame)
            return
        # Not reading: queued (and counted) here, not piled up without limit in the transport.
        if len(self.control) >= MAX_PENDING_CONTROL:
            conn.send_error("too_slow", "client is not reading; too many control frames pending", None, fatal=True)
            return
        self.control.append((offset, frame, action))

    def write_queued(self) -> None:
        """The connection closes: what is queued goes out now, whatever its offset (pause bypassed)."""
        transport = self.conn.transport
        assert transport is not None
        while self.control:
            transport.write(self.control.popleft()[1])
