"""One client connection: handshake, its own position in the ring, and its frames.

The PTY reader waits for no terminal or viewer (only, within bounds, for the tower: shellper.pacing).
A caught-up client is handed each output frame as it is produced; one whose socket is full stops
receiving and later catches up from the ring at its own pace, getting a GAP with the exact count if it
fell behind the ring's start. Control frames are never dropped:
they are queued at the output offset they belong after, so an EXIT never overtakes the output before it.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import struct
import time
from collections import deque

from shellper import wire
from shellper.reactor import Future, Handle
from shellper.ring import OffsetError
from shellper.transport import SocketTransport

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs each shellper ~2.5 ms and 0.5 MiB
if TYPE_CHECKING:
    from typing import Any

    from shellper.server import Session

REPLAY_CHUNK = 1024 * 1024
"""Most output bytes in REPLAY or in one catch-up DATA frame."""
HIGH_WATER = 256 * 1024
"""Socket write buffer above which a client counts as slow and stops receiving live output."""
MAX_CLIENTS = 256
"""Connections one session serves at once (pending ones included)."""
MAX_PENDING_CONTROL = 1000
"""Control frames queued for a client that does not read; past this it is closed as too slow."""
MAX_UNREAD_BYTES = 8 * 1024 * 1024
"""Bytes written to a client and not yet taken by its socket, checked after each frame it sends us.
Output alone stays below HIGH_WATER + one REPLAY_CHUNK; only answers (PONG, STATUS_REPLY) to requests
it never reads can pile up past this. Then it is too slow: closed at once, its buffer freed."""
CLOSE_LINGER = 5.0
"""Seconds a closed connection may keep unsent frames while its peer does not read; then it is dropped."""

_CLIENT_FRAMES = (wire.Data, wire.Resize, wire.Signal, wire.Spawn, wire.Stop, wire.Status, wire.Ping, wire.Pong)
_TOWER_ONLY = (wire.Signal, wire.Spawn, wire.Stop)


class ClientConn:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.client_id = session.new_client_id()
        self.transport: SocketTransport | None = None
        self.decoder = wire.Decoder()
        self.role = ""
        self.name = ""
        self.registered = False
        self.wants_events = False
        self.paused = False
        self.pos = 0
        self.connected_at = time.time()
        self._control: deque[tuple[int, bytes]] = deque()
        self._handshake_timer: Handle | None = None
        self._closing = False
        self.closed: Future[None] = Future()

    # ----------------------------------------------------------------------------------- transport

    def connection_made(self, transport: SocketTransport) -> None:
        self.transport = transport
        self.transport.set_write_buffer_limits(high=HIGH_WATER)
        sock = transport.get_extra_info("socket")
        uid = peer_uid(sock) if sock is not None else -1
        if uid not in (os.getuid(), 0):
            self.session.log.write(f"refused client {self.client_id}: peer uid {uid}")
            self.send_error("forbidden", f"peer uid {uid} may not use this session", None, fatal=True)
            return
        if len(self.session.connections) >= MAX_CLIENTS:
            self.send_error("too_many_clients", f"this session already has {MAX_CLIENTS} clients", None, fatal=True)
            return
        self.session.connections.add(self)
        self._handshake_timer = self.session.loop.call_later(
            self.session.config.handshake_timeout, self._handshake_expired)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self.registered and self.role != "viewer":
            keystroke = self.decoder.sole_data(data)
            if keystroke is not None:  # one whole DATA frame: what _handle would do, without the decoder
                self.session.write_input(bytes(keystroke), self)
                return
        self.decoder.feed(data)
        try:
            for event in self.decoder.events():
                if self._closing:
                    return
                self._handle(event)
                if self.transport is not None and self.transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
                    self._drop_unread()
                    return
        except wire.ProtocolError as exc:
            self.send_error(exc.code, str(exc), exc.frame_type, fatal=True)

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.pump()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        self._closing = True
        self.session.connections.discard(self)
        self.session.unregister(self, "closed" if exc is None else f"lost: {exc}")
        if not self.closed.done():
            self.closed.set_result(None)
        self.transport = None  # break the transport <-> protocol cycle: freed now, not at the next full GC

    # ----------------------------------------------------------------------------------- output

    def on_output(self, old_end: int, frame: bytes) -> None:
        """New output was appended at ``old_end``; ``frame`` is it as a DATA frame."""
        if not self.registered or self._closing or self.paused or self._transport_gone():
            return
        if self.pos == old_end and not self._control:
            assert self.transport is not None
            self.transport.write(frame)
            self.pos = self.session.scrollback.end
        else:
            self.pump()

    def _transport_gone(self) -> bool:
        """Closed (the peer left) and connection_lost not yet run: writes would only be counted."""
        return self.transport is None or self.transport.is_closing()

    def pump(self) -> None:
        """Send what this client has not had yet, until its socket is full."""
        if not self.registered or self._closing or self._transport_gone():
            return
        assert self.transport is not None
        ring = self.session.scrollback
        while not self.paused:
            self._flush_control()
            end = ring.end
            if self.pos >= end:
                break
            limit = REPLAY_CHUNK
            if self._control:
                # Stop at the next control frame's offset; if the ring has dropped everything up to it,
                # the GAP alone takes us past it, and it goes out before any later output.
                limit = max(0, min(limit, self._control[0][0] - max(self.pos, ring.start)))
            chunk = ring.read(self.pos, limit)
            if chunk.gap:
                self.transport.write(wire.encode(wire.Gap(offset=chunk.offset, missed=chunk.gap)))
            if chunk.data:
                self.transport.write(wire.encode_data(chunk.data))
            self.pos = chunk.offset + len(chunk.data)
        self._flush_control()
        if self.session.tower is self:
            self.session.pacer.on_progress()

    def _flush_control(self) -> None:
        assert self.transport is not None
        while self._control and self._control[0][0] <= self.pos:
            self.transport.write(self._control.popleft()[1])

    def send_control_at(self, offset: int, frame: bytes) -> None:
        """Queue a control frame to go out once this client has had the output before ``offset``."""
        if self._closing or self.transport is None:
            return
        if self.pos >= offset and not self._control and not self.paused:
            self.transport.write(frame)
            return
        # Not reading: queued (and counted) here, not piled up without limit in the transport.
        if len(self._control) >= MAX_PENDING_CONTROL:
            self.send_error("too_slow", "client is not reading; too many control frames pending", None, fatal=True)
            return
        self._control.append((offset, frame))

    def send_frame(self, frame: wire.Frame) -> None:
        if self.transport is not None and not self._closing:
            self.transport.write(wire.encode(frame))

    def send_error(self, code: str, message: str, frame_type: int | None, fatal: bool = False) -> None:
        if self.transport is None or self._closing:
            return
        if fatal:  # a fatal ERROR is the last frame: what is queued goes first
            while self._control:
                self.transport.write(self._control.popleft()[1])
        self.transport.write(wire.encode(wire.Error(code=code, message=message, frame_type=frame_type, fatal=fatal)))
        if fatal:
            self.session.log.write(f"client {self.client_id} ({self.role or 'pending'}): {code}: {message}")
            self.close_after_flush()

    def close_after_flush(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        if self.transport is not None:
            with contextlib.suppress(Exception):
                # Bypass pause: what is queued must still go out before the close.
                for _, frame in self._control:
                    self.transport.write(frame)
            self._control.clear()
            self.transport.close()
            # A peer that never reads would keep the connection (fd and buffer) forever.
            self.session.loop.call_later(CLOSE_LINGER, self._abort_if_open)

    def _abort_if_open(self) -> None:
        if self.transport is not None and not self.closed.done():
            self.transport.abort()

    def _drop_unread(self) -> None:
        """The client asks and never reads the answers: tell it (best effort) and free its buffer now."""
        assert self.transport is not None
        size = self.transport.get_write_buffer_size()
        self.send_error("too_slow", f"{size} bytes of answers left unread", None, fatal=True)
        self.transport.abort()

    def describe(self) -> dict[str, Any]:
        ring_end = self.session.scrollback.end
        return {"client_id": self.client_id, "role": self.role, "client": self.name,
                "connected_at": self.connected_at, "behind": max(0, ring_end - self.pos),
                "paused": self.paused}

    # ----------------------------------------------------------------------------------- input

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if not self.registered:
            self.send_error("handshake_timeout",
                            f"no HELLO within {self.session.config.handshake_timeout:g} s", None, fatal=True)

    def _handle(self, event: wire.DecodedEvent) -> None:
        if isinstance(event, wire.Skipped):
            raise wire.FrameTooLarge(f"declared length {event.length} exceeds the {self.decoder.max_frame} byte limit",
                                     event.frame_type)
        if isinstance(event, wire.Unknown):
            return
        if not self.registered:
            if not isinstance(event, wire.Hello):
                raise NotHello(f"the first frame must be HELLO, not {event.TYPE.name}", event.TYPE)
            self._hello(event)
            return
        session = self.session
        if isinstance(event, wire.Hello):
            raise wire.ProtocolError("HELLO was already received", event.TYPE)
        if not isinstance(event, _CLIENT_FRAMES):
            self.send_error("protocol", f"{event.TYPE.name} is sent by the shellper, not by clients", event.TYPE)
            return
        if isinstance(event, _TOWER_ONLY) and self.role != "tower":
            self.send_error("forbidden", f"{event.TYPE.name} is accepted only from the tower, not a {self.role}",
                            event.TYPE)
            return
        if isinstance(event, wire.Data):
            if self.role == "viewer":
                self.send_error("forbidden", "a viewer may not send input", event.TYPE)
            elif event.data:
                session.write_input(event.data, self)
        elif isinstance(event, wire.Resize):
            if self.role == "viewer":
                self.send_error("forbidden", "a viewer may not resize", event.TYPE)
            elif not (1 <= event.cols <= 65535 and 1 <= event.rows <= 65535):
                bad = "cols" if not 1 <= event.cols <= 65535 else "rows"
                raise wire.BadField(f"{bad}: size {event.cols}x{event.rows} is outside 1..65535", event.TYPE, bad)
            else:
                session.resize(event.cols, event.rows)
        elif isinstance(event, wire.Signal):
            session.send_signal(event.signal, self)
        elif isinstance(event, wire.Spawn):
            session.loop.create_task(session.respawn(event, self))
        elif isinstance(event, wire.Stop):
            if event.grace is not None and not (math.isfinite(event.grace) and event.grace >= 0):
                raise wire.BadField(f"grace {event.grace!r} must be a finite number >= 0", event.TYPE, "grace")
            session.request_stop(event.grace)
        elif isinstance(event, wire.Status):
            self.send_frame(session.status())
        elif isinstance(event, wire.Ping):
            self.send_frame(wire.Pong(nonce=event.nonce))

    def _hello(self, hello: wire.Hello) -> None:
        session = self.session
        if hello.version < wire.MIN_PROTOCOL_VERSION:
            self.send_error("unsupported_version", f"protocol version {hello.version} is not supported; this "
                            f"shellper speaks {wire.MIN_PROTOCOL_VERSION}..{wire.PROTOCOL_VERSION}",
                            wire.FrameType.HELLO, fatal=True)
            return
        if hello.role not in wire.ROLES:
            self.send_error("bad_role", f"role {hello.role!r} is not one of {', '.join(wire.ROLES)}",
                            wire.FrameType.HELLO, fatal=True)
            return
        ring = session.scrollback
        if hello.resume_from is not None:
            if hello.resume_from > ring.end:
                self.send_error("bad_offset", f"resume_from {hello.resume_from} is past the end of output "
                                f"({ring.end})", wire.FrameType.HELLO, fatal=True)
                return
            start = hello.resume_from
        elif hello.replay_bytes is not None:
            start = ring.safe_start(max(ring.start, ring.end - hello.replay_bytes))
        else:
            start = ring.start
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        self.role, self.name = hello.role, hello.client[:200]
        self.wants_events = hello.role == "tower" or hello.events_after is not None
        self.send_frame(session.welcome(self.role))
        try:
            replay = session.scrollback.replay(start, REPLAY_CHUNK)
        except OffsetError as exc:  # pragma: no cover - checked above
            self.send_error("bad_offset", str(exc), wire.FrameType.HELLO, fatal=True)
            return
        self.send_frame(wire.Replay(offset=replay.offset, data=replay.data, gap=replay.gap,
                                    preamble=replay.preamble))
        self.pos = replay.offset + len(replay.data)
        self.registered = True
        if session.child is None and session.last_exit is not None:
            self.send_control_at(ring.end, wire.encode(wire.Exit.from_map(session.last_exit)))
        if hello.events_after is not None:
            for event in session.events_after(hello.events_after):
                self.send_control_at(ring.end, wire.encode(event))
        session.register(self)  # announces this client, to itself too, after the history it asked for
        self.pump()


class NotHello(wire.ProtocolError):
    code = "not_hello"


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])
