"""One client connection: handshake, its own position in the ring, and its frames.

The PTY reader waits for no viewer (only, within bounds, for the tower and terminals: shellper.daemon.pacing).
A caught-up client is handed each output frame as it is produced; one whose socket is full stops
receiving and later catches up from the ring at its own pace, getting a GAP with the exact count if it
fell behind the ring's start. A client that handed over its terminal (shellper.daemon.terminal) gets its
output written there instead of in DATA frames, with the same positions, pauses and catch-up.
Control frames are never dropped: they are queued at the output offset they belong after, so an EXIT
never overtakes the output before it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from collections import deque

from shellper.core import structs
from shellper.core.defaults import clamp_terminal_size
from shellper.core.detachkeys import DOUBLE_KEY_WINDOW, KeysEnd, read_keys
from shellper.core.peertext import quote_peer
from shellper.core.ring import Chunk, OffsetError
from shellper.core.states import SessionState
from shellper.core.terminal.modes import FULL_RESET_SEQUENCE
from shellper.daemon.reactor import Future, Handle
from shellper.daemon.terminal import Terminal, note, window_size
from shellper.daemon.transport import SocketTransport
from shellper.protocol import wire
from shellper.protocol.firstframe import first_frame_is_legacy

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    from shellper.core.exitrecord import ExitRecord
    from shellper.core.ring import Scrollback
    from shellper.daemon.reactor import Reactor
    from shellper.host.logfile import LogFile

    class SessionPort(Protocol):
        """What a client connection may use of its session (shellper.daemon.session.Session provides it): the
        connection never imports the session, and this list is what to keep narrow. The ring is shared
        (each connection reads its own position in it); everything else is asked for."""

        loop: Reactor
        log: LogFile
        scrollback: Scrollback
        created_at: float

        @property
        def handshake_timeout(self) -> float: ...
        @property
        def frame_timeout(self) -> float: ...
        @property
        def cols(self) -> int: ...
        @property
        def rows(self) -> int: ...

        def admit(self, client: ClientConn) -> bool: ...
        def hold_partial(self, delta: int) -> bool: ...
        def new_client_id(self) -> int: ...
        def register(self, client: ClientConn) -> None: ...
        def disconnect(self, client: ClientConn, reason: str) -> None: ...
        def welcome(self, role: str, terminal: bool = False) -> wire.Welcome: ...
        def ended_exit(self) -> ExitRecord | None: ...
        def status(self) -> wire.StatusReply: ...
        def events_after(self, seq: int) -> list[wire.Event]: ...
        @property
        def event_seq(self) -> int: ...
        def write_input(self, data: bytes, client: ClientConn) -> None: ...
        def output_taken(self) -> None: ...
        def resize(self, cols: int, rows: int) -> None: ...
        def send_signal(self, name: str, client: ClientConn, rid: int | None = None) -> None: ...
        def start_respawn(self, spawn: wire.Spawn, client: ClientConn | None) -> None: ...
        def request_stop(self, grace: float | None = None) -> None: ...
        def stop_for(self, client: ClientConn, rid: int | None, grace: float | None) -> None: ...
        @property
        def stopping(self) -> bool: ...
        def screen_reply(self, request: wire.ScreenRequest) -> wire.ScreenReply: ...
        def rendered_replay(self, scrollback: int) -> bytes: ...

REPLAY_CHUNK = 1024 * 1024
"""Most output bytes in REPLAY or in one catch-up DATA frame."""
TERMINAL_CHUNK = 256 * 1024
"""Most ring bytes handed to a handed-over terminal per write while it catches up."""
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
MAX_PARTIAL_BYTES = 64 * 1024 * 1024
"""Bytes of unfinished frames a session's connections may hold together (four 16 MiB frames): a connection whose
unfinished frame would take more is closed (ERROR busy). Without it, 256 clients could hold 4 GiB."""
CLOSE_LINGER = 5.0
"""Seconds a closed connection may keep unsent frames while its peer does not read; then it is dropped."""

_CLIENT_FRAMES = (wire.Data, wire.Resize, wire.Signal, wire.Spawn, wire.Stop, wire.Status, wire.Ping, wire.Pong,
                  wire.ScreenRequest)
_TOWER_ONLY = (wire.Signal, wire.Spawn, wire.Stop)


class ClientConn:
    def __init__(self, session: SessionPort, load_legacy: Callable[[], type[ClientConn]] | None = None) -> None:
        self.session = session
        self._legacy = load_legacy
        """What loads the class that serves a version-1 client (shellper.daemon.legacyconn), if this session
        serves them."""
        self._first_bytes: bytearray | None = bytearray() if load_legacy is not None else None
        """What arrived before the first frame showed which version the client speaks (then None)."""
        self.client_id = session.new_client_id()
        self.transport: SocketTransport | None = None
        self.decoder = wire.Decoder(limits=wire.HANDSHAKE_LIMITS)
        """Until a HELLO is accepted every frame is held to HELLO's limit (4 KiB), then each type to its own."""
        self.role = ""
        self.name = ""
        self.version = wire.PROTOCOL_VERSION
        """The protocol version this connection speaks: the lower of its HELLO's and ours."""
        self.registered = False
        self.wants_events = False
        self.paused = False
        self.pos = 0
        self.peer_pid = -1
        """The connecting process (SO_PEERCRED, as of connect()): the log names it."""
        self.connected_at = time.time()
        self._control: deque[tuple[int, bytes, Callable[[], None] | None]] = deque()
        self.terminal: Terminal | None = None
        """The user's terminal, when ``shellper attach`` handed it over: output goes there, not in DATA."""
        self.released = False
        """The handed-over terminal was given back: this connection gets no more output."""
        self.drawn = False
        """The client was drawn the screen (a rendered replay, PROTOCOL.md 8.6), and is drawn it again after a gap."""
        self.detach_byte: int | None = None
        self._detach_timer: Handle | None = None
        """A lone detach key ended the last read: it detaches when this fires, unless doubled first."""
        self._fds: list[int] = []
        self._handshake_timer: Handle | None = None
        self._held = 0
        """Bytes of an unfinished frame this connection holds, as counted by the session (hold_partial)."""
        self._partial_since: float | None = None
        """When the unfinished frame began (after the handshake), or when reading it resumed after a pause."""
        self._frame_timer: Handle | None = None
        """Armed when a frame is left unfinished and none is armed; see _frame_expired."""
        self._input_paused = False
        self._closing = False
        self.closed: Future[None] = Future()

    # ----------------------------------------------------------------------------------- transport

    def connection_made(self, transport: SocketTransport) -> None:
        self.transport = transport
        self.transport.set_write_buffer_limits(high=HIGH_WATER)
        sock = transport.get_extra_info("socket")
        self.peer_pid, uid = peer_credentials(sock) if sock is not None else (-1, -1)
        if uid not in (os.getuid(), 0):
            self.session.log.write(f"refused client {self.client_id}: peer uid {uid}")
            self.send_error("forbidden", f"peer uid {uid} may not use this session", None, fatal=True)
            return
        if not self.session.admit(self):
            self.send_error("too_many_clients", f"this session already has {MAX_CLIENTS} clients", None, fatal=True)
            return
        self._handshake_timer = self.session.loop.call_later(self.session.handshake_timeout, self._handshake_expired)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._first_bytes is not None:
            data = self._version_known(data)
            if not data:
                return
        if self.registered and self.role != "viewer":
            keystroke = self.decoder.sole_data(data)
            if keystroke is not None:  # one whole DATA frame: what _handle would do, without the decoder
                self.session.write_input(bytes(keystroke), self)
                return
        self.decoder.feed(data)
        finished = self._decode()
        self._partial(self.decoder.buffered, finished)

    def _decode(self) -> bool:
        """Handle every frame the decoder now holds whole; whether there was one."""
        finished = False
        while not self._closing:
            try:
                event = self.decoder.next_event()
                if event is None:
                    return finished
                finished = True
                self._handle(event)
            except wire.ProtocolError as exc:
                finished = True
                if not self._answerable(exc):
                    self.send_error(exc.code, str(exc), exc.frame_type, fatal=True)
                    return finished
                assert exc.frame_type is not None and exc.request_id is not None
                self.refuse(exc.frame_type, exc.request_id, exc.code, str(exc))
            if self.transport is not None and self.transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
                self._drop_unread()
                return finished
        return finished

    def _partial(self, held: int, finished: bool) -> None:
        """After a read: count the unfinished frame left (``held`` bytes) against the session's one bound for all
        connections (MAX_PARTIAL_BYTES), and, after the handshake, give it a deadline (frame_timeout): from now if
        it is new (``finished``: the read finished a frame, so what is held is the next one's beginning)."""
        if self._closing:
            return
        if held > self._held and not self.session.hold_partial(held - self._held):
            self.send_error("busy", f"unfinished frames would hold more than {MAX_PARTIAL_BYTES} bytes across "
                            f"the session's connections", None, fatal=True)
            return
        if held < self._held:
            self.session.hold_partial(held - self._held)
        self._held = held
        if not held:
            self._partial_since = None
        elif self.registered and (self._partial_since is None or finished):
            self._partial_since = self.session.loop.clock()
            if self._frame_timer is None:
                self._frame_timer = self.session.loop.call_later(self.session.frame_timeout, self._frame_expired)

    def _frame_expired(self) -> None:
        """The deadline of the frame that was unfinished when this timer was armed. Frames finished in time do
        not cancel it (a cancelled timer stays in the reactor's heap till its time, so cancelling after each
        read that ends mid-frame would pile them up): it fires once, finds the frame done, and is not re-armed;
        or finds a later one, and is re-armed for that one's deadline. Idle, no timer runs."""
        self._frame_timer = None
        since, timeout = self._partial_since, self.session.frame_timeout
        if since is None or self._closing:
            return
        now = self.session.loop.clock()
        left = timeout if self._input_paused else since + timeout - now
        if left > 0:
            self._frame_timer = self.session.loop.call_later(left, self._frame_expired)
            return
        self.send_error("frame_timeout", f"a frame begun {now - since:.0f} s ago is still unfinished "
                        f"({self._held} bytes of it received)", None, fatal=True)

    def _drop_partial(self) -> None:
        """The connection is closing: what it held of an unfinished frame is freed and no longer counted."""
        if self._held:
            self.session.hold_partial(-self._held)
            self._held = 0
        self._partial_since = None
        if self._frame_timer is not None:
            self._frame_timer.cancel()
            self._frame_timer = None
        self.decoder = wire.Decoder(limits=wire.HANDSHAKE_LIMITS)

    def _answerable(self, exc: wire.ProtocolError) -> bool:
        """A malformed request whose ``id`` could be read, after the handshake of a version-3 connection, is
        answered with a REPLY that is not ok; the connection stays (the frame's bounds were intact)."""
        return (exc.request_id is not None and exc.frame_type is not None and self.registered
                and self.version >= wire.REPLY_VERSION and exc.code in ("bad_field", "missing_field"))

    def answer(self, frame_type: int, rid: int | None, result: dict[str, Any], *, queued: bool = False) -> None:
        """A request went well: a REPLY with ``result`` if it carried an id (else nothing is said). At once,
        like STATUS_REPLY; ``queued`` (SPAWN, STOP): like EXIT and EVENT, after what was generated before it,
        so it never overtakes the EXIT it caused."""
        if rid is not None:
            self._send_reply(wire.Reply(id=rid, frame_type=frame_type, ok=True, result=result), queued)

    def refuse(self, frame_type: int, rid: int | None, code: str, message: str, *, queued: bool = False) -> None:
        """A request was not carried out: a REPLY that is not ok if it carried an id, else a non-fatal ERROR
        (version 2's answer). ``queued`` as for :meth:`answer`."""
        if rid is None:
            self.send_error(code, message, frame_type)
            return
        if self.terminal is not None:  # what `shellper attach` shows when it relays
            self.terminal.write(note(f"shellper: {message}"))
        self._send_reply(wire.Reply(id=rid, frame_type=frame_type, ok=False, code=code, message=message), queued)

    def _send_reply(self, reply: wire.Reply, queued: bool) -> None:
        if queued:
            self.send_control_at(self.session.scrollback.end, wire.encode(reply))
        else:
            self.send_frame(reply)

    def _version_known(self, data: bytes) -> bytes:
        """Hold the first bytes until the first frame says the version (shellper.protocol.legacy): a
        version-1 client turns this connection into the legacy class, which takes them; otherwise they
        are this connection's, unchanged."""
        assert self._first_bytes is not None
        self._first_bytes += data
        verdict = first_frame_is_legacy(self._first_bytes)
        if verdict is None:
            return b""
        data, self._first_bytes = bytes(self._first_bytes), None
        if verdict and self._legacy is not None:
            # This object is already the transport's protocol, counted by the registry and timing the handshake:
            # it changes class (LegacyConn's one attribute starts as a class default) rather than hand that over.
            self.__class__ = self._legacy()
            self.data_received(data)
            return b""
        return data

    @property
    def wants_fds(self) -> bool:
        """Until the handshake, a HELLO may carry the client's terminal (SCM_RIGHTS)."""
        return not self.registered and not self._closing

    def fds_received(self, fds: list[int]) -> None:
        """Keep the first descriptor for the HELLO; any other is closed at once."""
        for fd in fds:
            if self.wants_fds and not self._fds:
                self._fds.append(fd)
            else:
                os.close(fd)

    def eof_received(self) -> bool | None:
        self.release("closing")  # the attach client asks for its terminal back: nothing more is written to it
        return None  # close our side too

    def pause_writing(self) -> None:
        if self.terminal is None:  # with a terminal the socket carries only control frames
            self.paused = True

    def resume_writing(self) -> None:
        if self.terminal is None:
            self.paused = False
            self.pump()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        self._closing = True
        self._drop_partial()
        self._close_terminal()
        self.session.disconnect(self, "closed" if exc is None else f"lost: {exc}")
        if not self.closed.done():
            self.closed.set_result(None)
        self.transport = None  # break the transport <-> protocol cycle: freed now, not at the next full GC

    # ----------------------------------------------------------------------------------- output

    def on_output(self, old_end: int, data: bytes, frame: bytes) -> None:
        """New output ``data`` was appended at ``old_end``; ``frame`` is it as a DATA frame (empty for
        a client with a handed-over terminal, which writes ``data`` itself)."""
        if not self.registered or self._closing or self.released or self._transport_gone():
            return
        if self.paused:
            if self.terminal is not None:
                self.terminal.flush()  # see Terminal.flush; may resume us, which catches up from the ring
            return
        if self.pos == old_end and not self._control:
            if self.terminal is not None:
                self.terminal.write(data)
            else:
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
            if self.pos >= end or self.released or self._closing:
                break
            terminal = self.terminal
            limit = REPLAY_CHUNK if terminal is None else TERMINAL_CHUNK
            if self._control:
                # Stop at the next control frame's offset; if the ring has dropped everything up to it,
                # the GAP alone takes us past it, and it goes out before any later output.
                limit = max(0, min(limit, self._control[0][0] - max(self.pos, ring.start)))
            chunk = ring.read(self.pos, limit)
            data, at = chunk.data, chunk.offset
            if chunk.gap:
                at = self._after_gap(chunk)
                if at != chunk.offset:  # the screen drawn shows everything before ``at``
                    data = b""
            if terminal is not None:
                terminal.write(data)
            elif data:
                self.transport.write(wire.encode_data(data))
            self.pos = at + len(data)
        self._flush_control()
        if self.role in ("tower", "terminal"):
            self.session.output_taken()

    def _after_gap(self, chunk: Chunk) -> int:
        """Output before ``chunk`` is gone for this client: say so, with what a terminal is to write instead of
        it (PROTOCOL.md 8.4): a full mode reset, then the screen of the moment drawn (after a rendered replay)
        or the modes at the chunk's offset. Returns where its output continues: the chunk's offset, or the
        ring's end once the screen was drawn."""
        ring = self.session.scrollback
        at, preamble = chunk.offset, None
        if self.drawn:
            at, preamble = ring.end, FULL_RESET_SEQUENCE + self.session.rendered_replay(0)
        elif self.terminal is not None or (self.version >= wire.SCREEN_VERSION and self.role in ("terminal", "viewer")):
            preamble = ring.gap_preamble(at)
        if self.terminal is not None:
            self.terminal.write(note(f"[shellper: {at - self.pos} bytes skipped]") + (preamble or b""))
        else:
            assert self.transport is not None
            self.transport.write(wire.encode(wire.Gap(offset=at, missed=at - self.pos, preamble=preamble)))
        return at

    def _flush_control(self) -> None:
        assert self.transport is not None
        while self._control and self._control[0][0] <= self.pos:
            _, frame, action = self._control.popleft()
            if action is not None:
                action()
            self.transport.write(frame)

    def send_control_at(self, offset: int, frame: bytes, action: Callable[[], None] | None = None) -> None:
        """Queue a control frame to go out once this client has had the output before ``offset``;
        ``action`` runs just before it is sent (what a handed-over terminal shows for it)."""
        if self._closing or self.transport is None:
            return
        if self.pos >= offset and not self._control and not self.paused:
            if action is not None:
                action()
            self.transport.write(frame)
            return
        # Not reading: queued (and counted) here, not piled up without limit in the transport.
        if len(self._control) >= MAX_PENDING_CONTROL:
            self.send_error("too_slow", "client is not reading; too many control frames pending", None, fatal=True)
            return
        self._control.append((offset, frame, action))

    def send_exit_at(self, offset: int, frame: bytes, exit_frame: wire.Exit) -> None:
        """An EXIT, after the output before it. A handed-over terminal is given back before a final one
        and shown a note before a restart (what ``shellper attach`` shows when it relays)."""
        action = None
        if self.terminal is not None:
            if exit_frame.state == SessionState.BACKOFF:
                action = lambda: self._show_restart(exit_frame)  # noqa: E731
            else:
                action = lambda: self.release("exit")  # noqa: E731
        self.send_control_at(offset, frame, action)

    def _show_restart(self, exit_frame: wire.Exit) -> None:
        if self.terminal is not None:  # switch off what the dead child left on
            self.terminal.write(self.session.scrollback.modes.reset_sequence() + note(exit_frame.restart_note()))

    # ----------------------------------------------------------------------------------- terminal

    def release(self, reason: str) -> None:
        """Give the handed-over terminal back: stop using it, close our descriptor, send RELEASE."""
        if self.terminal is None:
            return
        self._close_terminal()
        self.released = True
        reset = self.session.scrollback.modes.reset_sequence()
        if self.transport is not None and not self._transport_gone():
            self.transport.write(wire.encode(wire.Release(reason=reason, reset=reset, offset=self.pos)))

    def _close_terminal(self) -> None:
        if self._detach_timer is not None:
            self._detach_timer.cancel()
            self._detach_timer = None
        if self.terminal is not None:
            self.terminal.close()
            self.terminal = None
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def terminal_input(self, data: bytes) -> None:
        """Keys typed on the handed-over terminal: to the child, up to the detach byte (which, typed twice,
        is sent through: shellper.core.detachkeys)."""
        pending = self._detach_timer is not None
        if self._detach_timer is not None:
            self._detach_timer.cancel()
            self._detach_timer = None
        data, end = read_keys(data, self.detach_byte, pending)
        if data and self.role != "viewer" and self.terminal is not None:
            self._follow_size()  # a resize attach has not reported yet must reach the child before these keys
            self.session.write_input(data, self)
        if end is KeysEnd.PENDING:
            self._detach_timer = self.session.loop.call_later(DOUBLE_KEY_WINDOW, self._detach)
        elif end is KeysEnd.DETACH:
            self._detach()

    def _detach(self) -> None:
        self._detach_timer = None
        if self.terminal is not None and not self._closing:
            self.release("detach")
            self.close_after_flush()

    def _follow_size(self) -> None:
        """Give the child the handed-over terminal's size, if it changed (one ioctl)."""
        assert self.terminal is not None
        size = window_size(self.terminal.fd)
        session = self.session
        if size is not None and size != (session.cols, session.rows):
            session.resize(*clamp_terminal_size(*size))

    def terminal_paused(self) -> None:
        self.paused = True

    def terminal_resumed(self) -> None:
        self.paused = False
        self.pump()

    def terminal_hangup(self, why: str) -> None:
        self.session.log.write(f"client {self.client_id}: terminal gone ({why})")
        self.release("hangup")
        self.close_after_flush()

    def pause_input(self) -> None:
        """The child is not taking input: stop reading what this client types."""
        if self.terminal is not None:
            self.terminal.stop_reading()
        elif self.transport is not None:
            self._input_paused = True  # an unfinished frame's deadline waits while we do not read it
            self.transport.pause_reading()

    def resume_input(self) -> None:
        if self.terminal is not None:
            self.terminal.start_reading()
        elif self.transport is not None and not self.transport.is_closing():
            self._input_paused = False
            if self._partial_since is not None:
                self._partial_since = self.session.loop.clock()
            self.transport.resume_reading()

    def send_frame(self, frame: wire.Frame) -> None:
        if self.transport is not None and not self._closing:
            self.transport.write(wire.encode(frame))

    def send_error(self, code: str, message: str, frame_type: int | None, fatal: bool = False) -> None:
        if self.transport is None or self._closing:
            return
        if fatal:  # a fatal ERROR is the last frame: what is queued goes first
            self.release("closing")
            while self._control:
                self.transport.write(self._control.popleft()[1])
        elif self.terminal is not None:  # what `shellper attach` shows when it relays
            self.terminal.write(note(f"shellper: {message}"))
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
        self._drop_partial()
        self.release("closing")
        if self.transport is not None:
            with contextlib.suppress(Exception):
                # Bypass pause: what is queued must still go out before the close.
                for _, frame, _action in self._control:
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
                "paused": self.paused, "terminal": self.terminal is not None}

    # ----------------------------------------------------------------------------------- input

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if not self.registered:
            self.send_error("handshake_timeout",
                            f"no HELLO within {self.session.handshake_timeout:g} s", None, fatal=True)

    def _handle(self, event: wire.DecodedEvent) -> None:
        if isinstance(event, wire.Skipped):
            raise wire.FrameTooLarge(f"declared length {event.length} exceeds the {event.limit} byte limit"
                                     + ("" if self.registered else " before the handshake"), event.frame_type)
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
        rid: int | None = getattr(event, "id", None) if self.version >= wire.REPLY_VERSION else None
        if isinstance(event, _TOWER_ONLY) and self.role != "tower":
            self.refuse(event.TYPE, rid, "forbidden",
                        f"{event.TYPE.name} is accepted only from the tower, not a {self.role}")
            return
        if isinstance(event, wire.Data):
            if self.role == "viewer":
                self.send_error("forbidden", "a viewer may not send input", event.TYPE)
            elif event.data:
                session.write_input(event.data, self)
        elif isinstance(event, wire.Status):
            status = session.status()
            self.send_frame(status if rid is None else structs.replace(status, id=rid))
        elif isinstance(event, wire.Ping):
            self.send_frame(wire.Pong(nonce=event.nonce))
        elif isinstance(event, wire.Pong):
            return
        elif isinstance(event, wire.ScreenRequest):
            if self.version < wire.SCREEN_VERSION:
                self.send_error("protocol", "SCREEN needs protocol version 3", event.TYPE)
                return
            if self._in_range(event, rid):
                self.send_frame(session.screen_reply(event))
        elif isinstance(event, wire.Resize) and self.role == "viewer":
            self.refuse(event.TYPE, rid, "forbidden", "a viewer may not resize")
        elif rid is not None and session.stopping and not isinstance(event, wire.Stop):
            self.refuse(event.TYPE, rid, "stopping", f"the session is stopping: {event.TYPE.name} not carried out")
        elif isinstance(event, wire.Resize | wire.Stop):
            if not self._in_range(event, rid):
                return
            if isinstance(event, wire.Resize):
                session.resize(event.cols, event.rows)
                self.answer(event.TYPE, rid, {"cols": event.cols, "rows": event.rows})
            else:
                session.stop_for(self, rid, event.grace)
        elif isinstance(event, wire.Signal):
            session.send_signal(event.signal, self, rid)
        elif isinstance(event, wire.Spawn):
            session.start_respawn(event if rid is not None or event.id is None else structs.replace(event, id=None),
                                  self)

    def _in_range(self, request: wire.Frame, rid: int | None) -> bool:
        """Whether ``request``'s values are in the ranges the spec gives (wire.check_request). Out of range
        with an ``id``, it is refused by a REPLY and the connection stays; without one, it is fatal."""
        try:
            wire.check_request(request)
        except wire.BadField as exc:
            if rid is None:
                raise
            self.refuse(request.TYPE, rid, exc.code, str(exc))
            return False
        return True

    def _hello(self, hello: wire.Hello) -> None:
        session = self.session
        if hello.version < wire.MIN_PROTOCOL_VERSION:
            self.send_error("unsupported_version", f"protocol version {hello.version} is not supported; this "
                            f"shellper speaks {wire.MIN_PROTOCOL_VERSION}..{wire.PROTOCOL_VERSION}",
                            wire.FrameType.HELLO, fatal=True)
            return
        if hello.role not in wire.ROLES:
            self.send_error("bad_role", f"role {quote_peer(hello.role)} is not one of {', '.join(wire.ROLES)}",
                            wire.FrameType.HELLO, fatal=True)
            return
        last_event = session.event_seq
        if hello.events_after is not None and hello.events_after > last_event:
            # as resume_from past the end: a position this session never reached belongs to another stream
            self.send_error("bad_offset", f"events_after {hello.events_after} is past the last event "
                            f"({last_event})", wire.FrameType.HELLO, fatal=True)
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
        self.decoder.limits = wire.SESSION_LIMITS  # from the next frame on
        if hello.detach_byte is not None and hello.detach_byte > 0xFF:
            raise wire.BadField(f"detach_byte {hello.detach_byte} is not a byte (0..255)", hello.TYPE, "detach_byte")
        self.role, self.name = hello.role, hello.client[:200]
        self.version = min(hello.version, wire.PROTOCOL_VERSION)
        # Version 3: the screen drawn from the screen model instead of the bytes (PROTOCOL.md, 8.6).
        rendered = (hello.rendered if self.version >= 3 and hello.resume_from is None
                    and hello.role in ("terminal", "viewer") else None)
        self.wants_events = hello.role == "tower" or hello.events_after is not None
        if self.version >= 3 and self.role == "terminal":  # where HELLO's size means something (else ignored)
            wire.check_request(hello)
        self._take_terminal(hello)
        if (hello.cols is not None and hello.rows is not None and self.version >= 3 and self.role == "terminal"
                and self.terminal is None):  # a relaying terminal's size: the drawing is made for it (8.6)
            session.resize(hello.cols, hello.rows)
        welcome = session.welcome(self.role, terminal=self.terminal is not None)
        self.send_frame(welcome if welcome.version == self.version else structs.replace(welcome, version=self.version))
        if rendered is not None:
            start = ring.end  # no bytes: the screen is drawn instead
        try:
            replay = session.scrollback.replay(start, REPLAY_CHUNK)
        except OffsetError as exc:  # pragma: no cover - checked above
            self.send_error("bad_offset", str(exc), wire.FrameType.HELLO, fatal=True)
            return
        self.pos = replay.offset + len(replay.data)
        if self.terminal is not None:  # the history goes to the terminal; REPLAY says where it ends
            resized = window_size(self.terminal.fd) not in (None, (session.cols, session.rows))
            if self.role != "viewer":
                self._follow_size()  # before the first key, not on it: a SIGWINCH amid typing confuses shells
            # REPLAY leaves first: once a person sees output, the client has its whole handshake, so a
            # shellper killed an instant later reads as "[session closed]", not as a failed attach.
            if rendered is not None:
                self.pos, self.drawn = ring.end, True
                screen = session.rendered_replay(rendered)
                self.send_frame(wire.Replay(offset=self.pos))
                self.terminal.write(screen)
            else:
                self.send_frame(wire.Replay(offset=self.pos, gap=replay.gap))
                self.terminal.write(session.scrollback.shown(replay, resized))
                if replay.gap:
                    self.terminal.write(note(f"[shellper: {replay.gap} bytes skipped]"))
            self.terminal.start_reading()
        elif rendered is not None:  # the drawing is the preamble: it has no offset, live output follows
            self.pos, self.drawn = ring.end, True
            self.send_frame(wire.Replay(offset=self.pos, preamble=session.rendered_replay(rendered)))
        else:
            self.send_frame(wire.Replay(offset=replay.offset, data=replay.data, gap=replay.gap,
                                        preamble=replay.preamble))
        self.registered = True
        ended = session.ended_exit()
        if ended is not None:
            exit_frame = wire.Exit.of(ended)
            self.send_exit_at(ring.end, wire.encode(exit_frame), exit_frame)
        if hello.events_after is not None:
            for event in session.events_after(hello.events_after):
                self.send_control_at(ring.end, wire.encode(event))
        session.register(self)  # announces this client, to itself too, after the history it asked for
        self.pump()

    def _take_terminal(self, hello: wire.Hello) -> None:
        """Use the terminal the HELLO carried, if it asked, may, and it is one; else the client relays."""
        fd = self._fds.pop() if self._fds else None
        self._close_terminal()  # any other descriptor
        if fd is None:
            return
        if not (hello.terminal and self.role in ("terminal", "viewer") and os.isatty(fd)):
            os.close(fd)
            return
        self.detach_byte = hello.detach_byte
        try:
            self.terminal = Terminal(self.session.loop, fd, self)
        except OSError:
            os.close(fd)


class NotHello(wire.ProtocolError):
    code = "not_hello"


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return int(pid), int(uid)
