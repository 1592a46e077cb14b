"""One client connection: the transport's callbacks, and the parts that do each job, wired together.

The PTY reader waits for no viewer (only, within bounds, for the tower and terminals: shellper.daemon.pacing).
What the client has had of the output, and the control frames queued behind it, is the connection's
:class:`~shellper.daemon.pump.OutputPump`; a terminal it handed over, with its detach key, its
:class:`~shellper.daemon.terminalsink.TerminalSink`; how it speaks, its codec: versions 2 and 3
(shellper.daemon.wirecodec, over the sans-IO shellper.protocol.server) unless the first frame shows
version 1 (shellper.daemon.legacyconn). What stays here is what every version shares: the peer's
credentials, the handshake's and an unfinished frame's deadlines, the bound on what the session's
connections may hold, and closing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time

from shellper.core.terminal.modes import FULL_RESET_SEQUENCE
from shellper.daemon.pump import MAX_PENDING_CONTROL as MAX_PENDING_CONTROL
from shellper.daemon.pump import REPLAY_CHUNK as REPLAY_CHUNK
from shellper.daemon.pump import TERMINAL_CHUNK as TERMINAL_CHUNK
from shellper.daemon.pump import OutputPump
from shellper.daemon.reactor import Future, Handle
from shellper.daemon.terminal import note
from shellper.daemon.terminalsink import TerminalSink
from shellper.daemon.transport import SocketTransport
from shellper.daemon.wirecodec import WireCodec
from shellper.protocol import wire
from shellper.protocol.firstframe import first_frame_is_legacy

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    from shellper.core.ring import Chunk
    from shellper.daemon.ports import Codec, SessionView
    from shellper.daemon.terminal import Terminal
    from shellper.protocol.wire import Role

    class SessionPort(SessionView, Protocol):
        """What a client connection may use of its session (shellper.daemon.session.Session provides it): the
        connection never imports the session, and this list (with SessionView's) is what to keep narrow."""

        @property
        def handshake_timeout(self) -> float: ...
        @property
        def frame_timeout(self) -> float: ...
        @property
        def max_unread_bytes(self) -> int: ...

        def admit(self, client: ClientConn) -> bool: ...
        def hold_partial(self, delta: int) -> bool: ...
        def new_client_id(self) -> int: ...
        def register(self, client: ClientConn) -> None: ...
        def disconnect(self, client: ClientConn, reason: str) -> None: ...
        def write_input(self, data: bytes, client: ClientConn) -> None: ...
        def send_signal(self, name: str, client: ClientConn, rid: int | None = None) -> None: ...
        def start_respawn(self, spawn: wire.Spawn, client: ClientConn | None, *, checked: bool = True) -> None: ...
        def request_stop(self, grace: float | None = None) -> None: ...
        def stop_for(self, client: ClientConn, rid: int | None, grace: float | None) -> None: ...

HIGH_WATER = 256 * 1024
"""Socket write buffer above which a client counts as slow and stops receiving live output."""
MAX_CLIENTS = 256
"""Connections one session serves at once (pending ones included)."""
MAX_PARTIAL_BYTES = 64 * 1024 * 1024
"""Bytes of unfinished frames a session's connections may hold together (four 16 MiB frames): a connection whose
unfinished frame would take more is closed (ERROR busy). Without it, 256 clients could hold 4 GiB."""
CLOSE_LINGER = 5.0
"""Seconds a closed connection may keep unsent frames while its peer does not read; then it is dropped."""



class ClientConn:
    def __init__(self, session: SessionPort,
                 load_legacy: Callable[[], Callable[[ClientConn], Codec]] | None = None) -> None:
        self.session = session
        self._legacy = load_legacy
        """What loads the codec that serves a version-1 client (shellper.daemon.legacyconn), if this session
        serves them."""
        self._first_bytes: bytearray | None = bytearray() if load_legacy is not None else None
        """What arrived before the first frame showed which version the client speaks (then None)."""
        self.client_id = session.new_client_id()
        self.transport: SocketTransport | None = None
        self.codec: Codec = WireCodec(self)
        """How this client speaks: versions 2 and 3 unless its first frame is version 1's."""
        self.sink = TerminalSink(self)
        self.pump = OutputPump(self, self.sink)
        self.on_output = self.pump.on_output  # the output's hot path calls the pump without a hop through here
        self.keystrokes: wire.Decoder | None = None
        """The codec's decoder once a client that may type is registered (versions 2 and 3): a read that is one
        whole DATA frame goes to the child from here, the hot path of a key, without the codec or the decoder."""
        self.registered = False
        """The handshake's replay is sent: output flows, and requests are judged by the role."""
        self.wants_events = False
        self.drawn = False
        """The client was drawn the screen (a rendered replay, PROTOCOL.md 8.6), and is drawn it again after a gap."""
        self.peer_pid = -1
        """The connecting process (SO_PEERCRED, as of connect()): the log names it."""
        self.connected_at = time.time()
        self._handshake_timer: Handle | None = None
        self._held = 0
        """Bytes of an unfinished frame this connection holds, as counted by the session (hold_partial)."""
        self._partial_since: float | None = None
        """When the unfinished frame began (after the handshake), or when reading it resumed after a pause."""
        self._frame_timer: Handle | None = None
        """Armed when a frame is left unfinished and none is armed; see _frame_expired."""
        self._input_paused = False
        self.closing = False
        self.closed: Future[None] = Future()

    @property
    def role(self) -> Role | None:
        return self.codec.role

    @property
    def name(self) -> str:
        return self.codec.name

    @property
    def terminal(self) -> Terminal | None:
        """The user's terminal, when ``shellper attach`` handed it over: output goes there, not in DATA."""
        return self.sink.terminal

    @property
    def pos(self) -> int:
        return self.pump.pos

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
        if self.closing:
            return
        if self.keystrokes is not None:
            keystroke = self.keystrokes.sole_data(data)
            if keystroke is not None:  # what the codec would do with it: the session takes the bytes
                self.session.write_input(bytes(keystroke), self)
                return
        if self._first_bytes is not None:
            data = self._version_known(data)
            if not data:
                return
        self.codec.feed(data)

    def _version_known(self, data: bytes) -> bytes:
        """Hold the first bytes until the first frame says the version (shellper.protocol.firstframe): a
        version-1 client gets the legacy codec, which takes them; either way they are returned, unchanged."""
        assert self._first_bytes is not None
        self._first_bytes += data
        verdict = first_frame_is_legacy(self._first_bytes)
        if verdict is None:
            return b""
        data, self._first_bytes = bytes(self._first_bytes), None
        if verdict and self._legacy is not None:
            self.codec = self._legacy()(self)
        return data

    @property
    def wants_fds(self) -> bool:
        """Until the handshake, a HELLO may carry the client's terminal (SCM_RIGHTS)."""
        return not self.registered and not self.closing

    def fds_received(self, fds: list[int]) -> None:
        self.sink.keep_fds(fds, self.wants_fds)

    def eof_received(self) -> bool | None:
        self.sink.release("closing")  # the attach client asks for its terminal back: nothing more is written to it
        return None  # close our side too

    def pause_writing(self) -> None:
        if self.sink.terminal is None:  # with a terminal the socket carries only control frames
            self.pump.paused = True

    def resume_writing(self) -> None:
        if self.sink.terminal is None:
            self.pump.paused = False
            self.pump.run()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        self.closing = True
        self._drop_partial()
        self.sink.close()
        self.session.disconnect(self, "closed" if exc is None else f"lost: {exc}")
        if not self.closed.done():
            self.closed.set_result(None)
        self.transport = None  # break the transport <-> protocol cycle: freed now, not at the next full GC

    def transport_gone(self) -> bool:
        """Closed (the peer left) and connection_lost not yet run: writes would only be counted."""
        return self.transport is None or self.transport.is_closing()

    # ----------------------------------------------------------------------------------- input's bounds

    def handshake_done(self) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if not self.registered:
            self.send_error("handshake_timeout",
                            f"no HELLO within {self.session.handshake_timeout:g} s", None, fatal=True)

    def unread_too_much(self) -> bool:
        """After a frame the client sent: whether it asks and never reads the answers (then it is dropped)."""
        # bytes written and not yet taken by its socket: output alone stays below HIGH_WATER + one REPLAY_CHUNK
        if self.transport is None or self.transport.get_write_buffer_size() <= self.session.max_unread_bytes:
            return False
        self._drop_unread()
        return True

    def partial(self, held: int, finished: bool) -> None:
        """After a read: count the unfinished frame left (``held`` bytes) against the session's one bound for all
        connections (MAX_PARTIAL_BYTES), and, after the handshake, give it a deadline (frame_timeout): from now if
        it is new (``finished``: the read finished a frame, so what is held is the next one's beginning)."""
        if self.closing:
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
        if since is None or self.closing:
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
        self.codec.reset()

    def pause_input(self) -> None:
        """The child is not taking input: stop reading what this client types."""
        if self.sink.terminal is not None:
            self.sink.terminal.stop_reading()
        elif self.transport is not None:
            self._input_paused = True  # an unfinished frame's deadline waits while we do not read it
            self.transport.pause_reading()

    def resume_input(self) -> None:
        if self.sink.terminal is not None:
            self.sink.terminal.start_reading()
        elif self.transport is not None and not self.transport.is_closing():
            self._input_paused = False
            if self._partial_since is not None:
                self._partial_since = self.session.loop.clock()
            self.transport.resume_reading()

    # ----------------------------------------------------------------------------------- answers

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
        self.sink.note(message)  # what `shellper attach` shows when it relays
        self._send_reply(wire.Reply(id=rid, frame_type=frame_type, ok=False, code=code, message=message), queued)

    def _send_reply(self, reply: wire.Reply, queued: bool) -> None:
        if queued:
            self.pump.send_control_at(self.session.scrollback.end, wire.encode(reply))
        else:
            self.send_frame(reply)

    def send_frame(self, frame: wire.Frame) -> None:
        if self.transport is not None and not self.closing:
            self.transport.write(wire.encode(frame))

    def send_error(self, code: str, message: str, frame_type: int | None, fatal: bool = False) -> None:
        """An ERROR (fatal: the last frame, then the connection closes), said as the client's version says it."""
        self.codec.send_error(code, message, frame_type, fatal)

    # ----------------------------------------------------------------------------------- asking the session

    def input(self, data: bytes) -> None:
        self.session.write_input(data, self)

    def join(self) -> None:
        """The handshake is done: attached to the session, which announces it (to itself too)."""
        self.session.register(self)

    def signal_child(self, name: str, rid: int | None = None) -> None:
        self.session.send_signal(name, self, rid)

    def respawn(self, spawn: wire.Spawn, *, checked: bool = True) -> None:
        self.session.start_respawn(spawn, self, checked=checked)

    def stop_session(self, rid: int | None, grace: float | None) -> None:
        self.session.stop_for(self, rid, grace)

    # ----------------------------------------------------------------------------------- what the session sends

    def send_control_at(self, offset: int, frame: bytes, action: Callable[[], None] | None = None) -> None:
        self.pump.send_control_at(offset, frame, action)

    def send_exit_at(self, offset: int, frame: bytes, exit_frame: wire.Exit) -> None:
        self.codec.send_exit_at(offset, frame, exit_frame)

    def _after_gap(self, chunk: Chunk) -> int:
        """Output before ``chunk`` is gone for this client: say so, with what a terminal is to write instead of
        it (PROTOCOL.md 8.4): a full mode reset, then the screen of the moment drawn (after a rendered replay)
        or the modes at the chunk's offset. Returns where its output continues: the chunk's offset, or the
        ring's end once the screen was drawn."""
        ring = self.session.scrollback
        at, preamble = chunk.offset, None
        if self.drawn:
            drawing = self.session.rendered_replay(0)
            if self.terminal is not None or len(drawing) <= wire.MAX_DRAWING - len(FULL_RESET_SEQUENCE):
                at, preamble = ring.end, FULL_RESET_SEQUENCE + drawing
        if preamble is None and (self.terminal is not None or self.codec.gap_preamble):
            preamble = ring.gap_preamble(at)
        if self.terminal is not None:
            self.terminal.write(note(f"[shellper: {at - self.pos} bytes skipped]") + (preamble or b""))
        else:
            assert self.transport is not None
            self.transport.write(wire.encode(wire.Gap(offset=at, missed=at - self.pos, preamble=preamble)))
        return at

    def close_after_flush(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        self._drop_partial()
        self.sink.release("closing")
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.pump.write_queued()  # what is queued must still go out before the close
            self.pump.control.clear()
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
                "connected_at": self.connected_at, "behind": max(0, ring_end - self.pump.pos),
                "paused": self.pump.paused, "terminal": self.sink.terminal is not None, **self.codec.described}


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return int(pid), int(uid)
