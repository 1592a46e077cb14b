"""Versions 2 and 3 of the protocol on a connection (protocol/PROTOCOL.md): frames read with wire.Decoder,
judged by the sans-IO shellper.protocol.server.ServerSide, and carried out here, one handler a frame type.

This is the codec a ClientConn starts with; a version-1 client's first frame swaps it for
shellper.daemon.legacyconn.LegacyCodec. Either way the connection's transport, output pump and terminal
are the ClientConn's.
"""

from __future__ import annotations

from shellper.core import structs
from shellper.core.ring import OffsetError
from shellper.core.states import SessionState
from shellper.daemon.pump import REPLAY_CHUNK
from shellper.daemon.terminal import note, window_size
from shellper.protocol import wire
from shellper.protocol.server import PACED, Accepted, Carry, Refuse, ServerSide
from shellper.protocol.wire import FrameType, Role

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    from shellper.core.ring import Chunk
    from shellper.daemon.ports import ConnView
    from shellper.daemon.pump import OutputPump
    from shellper.daemon.terminalsink import TerminalSink

    class CodecOwner(ConnView, Protocol):
        """What a codec (this one, or version 1's) uses of its connection (shellper.daemon.clientconn.ClientConn)."""

        wants_events: bool
        drawn: bool
        keystrokes: wire.Decoder | None

        @property
        def pump(self) -> OutputPump: ...
        @property
        def sink(self) -> TerminalSink: ...

        def handshake_done(self) -> None: ...
        def partial(self, held: int, finished: bool) -> None: ...
        def unread_too_much(self) -> bool: ...
        def answer(self, frame_type: int, rid: int | None, result: dict[str, Any]) -> None: ...
        def refuse(self, frame_type: int, rid: int | None, code: str, message: str) -> None: ...
        def send_frame(self, frame: wire.Frame) -> None: ...
        def _after_gap(self, chunk: Chunk) -> int: ...
        def input(self, data: bytes) -> None: ...
        def join(self) -> None: ...
        def signal_child(self, name: str, rid: int | None = None) -> None: ...
        def respawn(self, spawn: wire.Spawn, *, checked: bool = True) -> None: ...
        def stop_session(self, rid: int | None, grace: float | None) -> None: ...


class WireCodec:
    """The version-2/3 half of one connection: its decoder, its protocol state, its handshake and requests."""

    described: dict[str, Any] = {}
    """What STATUS adds about this connection (version 1 says its version)."""

    def __init__(self, conn: CodecOwner) -> None:
        self.conn = conn
        self.side = ServerSide()
        self.decoder = wire.Decoder(limits=wire.HANDSHAKE_LIMITS)
        """Until a HELLO is accepted every frame is held to HELLO's limit (4 KiB), then each type to its own."""
        self._handlers: dict[FrameType, Callable[[Any, int | None], None]] = {
            FrameType.DATA: self._input, FrameType.STATUS: self._status, FrameType.PING: self._ping,
            FrameType.PONG: self._pong, FrameType.SCREEN: self._screen, FrameType.RESIZE: self._resize,
            FrameType.STOP: self._stop, FrameType.SIGNAL: self._signal, FrameType.SPAWN: self._spawn,
            FrameType.LABELS: self._labels}

    @property
    def role(self) -> Role | None:
        return self.side.role

    @property
    def name(self) -> str:
        return self.side.name

    @property
    def gap_preamble(self) -> bool:
        return self.side.gap_preamble

    def feed(self, data: bytes) -> None:
        conn = self.conn
        self.decoder.feed(data)
        finished = self._decode()
        conn.partial(self.decoder.buffered, finished)

    def reset(self) -> None:
        """The connection closes: what the decoder held is dropped."""
        self.decoder = wire.Decoder(limits=wire.HANDSHAKE_LIMITS)
        self.conn.keystrokes = None

    def _decode(self) -> bool:
        """Handle every frame the decoder now holds whole; whether there was one."""
        conn = self.conn
        finished = False
        while not conn.closing:
            try:
                event = self.decoder.next_event()
                if event is None:
                    return finished
                finished = True
                outcome = self.side.receive(event, stopping=conn.session.stopping)
                if isinstance(outcome, Carry):
                    self._handlers[outcome.frame.TYPE](outcome.frame, outcome.rid)
                elif isinstance(outcome, Refuse):
                    conn.refuse(outcome.frame_type, outcome.rid, outcome.code, outcome.message)
                elif outcome is not None:
                    self._hello(outcome)
            except wire.ProtocolError as exc:
                finished = True
                if not self.side.answerable(exc):
                    conn.send_error(exc.code, str(exc), exc.frame_type, fatal=True)
                    return finished
                assert exc.frame_type is not None and exc.request_id is not None
                conn.refuse(exc.frame_type, exc.request_id, exc.code, str(exc))
            if conn.unread_too_much():
                return finished
        return finished

    # ----------------------------------------------------------------------------------- requests

    def _input(self, frame: wire.Data, rid: int | None) -> None:
        if frame.data:
            self.conn.input(frame.data)

    def _status(self, frame: wire.Status, rid: int | None) -> None:
        status = self.conn.session.status()
        self.conn.send_frame(status if rid is None else structs.replace(status, id=rid))

    def _ping(self, frame: wire.Ping, rid: int | None) -> None:
        self.conn.send_frame(wire.Pong(nonce=frame.nonce))

    def _pong(self, frame: wire.Pong, rid: int | None) -> None:
        return

    def _screen(self, frame: wire.ScreenRequest, rid: int | None) -> None:
        self.conn.send_frame(self.conn.session.screen_reply(frame))

    def _resize(self, frame: wire.Resize, rid: int | None) -> None:
        self.conn.session.resize(frame.cols, frame.rows)
        self.conn.answer(frame.TYPE, rid, {"cols": frame.cols, "rows": frame.rows})

    def _stop(self, frame: wire.Stop, rid: int | None) -> None:
        self.conn.stop_session(rid, frame.grace)

    def _signal(self, frame: wire.Signal, rid: int | None) -> None:
        self.conn.signal_child(frame.signal, rid)

    def _labels(self, frame: wire.Labels, rid: int | None) -> None:
        from shellper.core.labels import BadLabel

        try:
            labels = self.conn.session.set_labels(frame.set)
        except BadLabel as exc:
            self.conn.refuse(frame.TYPE, rid, "bad_field", f"set: {exc}")
            return
        self.conn.answer(frame.TYPE, rid, {"labels": labels})

    def _spawn(self, frame: wire.Spawn, rid: int | None) -> None:
        spawn = frame if rid is not None or frame.id is None else structs.replace(frame, id=None)
        self.conn.respawn(spawn)

    # ----------------------------------------------------------------------------------- handshake

    def _hello(self, hello: wire.Hello) -> None:
        conn, session = self.conn, self.conn.session
        ring = session.scrollback
        accepted = self.side.hello(hello, last_event=session.event_seq, output_end=ring.end)
        if not isinstance(accepted, Accepted):
            conn.send_error(accepted.code, accepted.message, accepted.frame_type, fatal=True)
            return
        if hello.resume_from is not None:
            start = hello.resume_from
        elif hello.replay_bytes is not None:
            start = ring.safe_start(max(ring.start, ring.end - hello.replay_bytes))
        else:
            start = ring.start
        conn.handshake_done()
        self.decoder.limits = wire.SESSION_LIMITS  # from the next frame on
        rendered = accepted.rendered
        conn.wants_events = accepted.wants_events
        conn.pump.paced = accepted.role in PACED
        sink = conn.sink
        sink.take(accepted.may_hand_over, hello.detach_byte)
        terminal = sink.terminal
        if accepted.size is not None and terminal is None:  # a relaying terminal's size: the drawing is made for it
            session.resize(*accepted.size)
        welcome = session.welcome(accepted.role, terminal=terminal is not None)
        conn.send_frame(welcome if welcome.version == accepted.version
                        else structs.replace(welcome, version=accepted.version))
        drawing = b""
        if rendered is not None and terminal is None:  # the drawing goes in a frame: within one
            drawing = session.rendered_replay(rendered, wire.MAX_DRAWING)
            if len(drawing) > wire.MAX_DRAWING:  # the screen alone is too long (every cell a long link?)
                rendered = None  # the byte replay of 8.3 instead, bounded as always
        if rendered is not None:
            start = ring.end  # no bytes: the screen is drawn instead
        try:
            replay = ring.replay(start, REPLAY_CHUNK)
        except OffsetError as exc:  # pragma: no cover - checked above
            conn.send_error("bad_offset", str(exc), FrameType.HELLO, fatal=True)
            return
        pump = conn.pump
        pump.pos = replay.offset + len(replay.data)
        if terminal is not None:  # the history goes to the terminal; REPLAY says where it ends
            resized = window_size(terminal.fd) not in (None, (session.cols, session.rows))
            if accepted.role is not Role.VIEWER:
                sink.follow_size()  # before the first key, not on it: a SIGWINCH amid typing confuses shells
            # REPLAY leaves first: once a person sees output, the client has its whole handshake, so a
            # shellper killed an instant later reads as "[session closed]", not as a failed attach.
            if rendered is not None:
                pump.pos, conn.drawn = ring.end, True
                screen = session.rendered_replay(rendered)
                conn.send_frame(wire.Replay(offset=pump.pos))
                terminal.write(screen)
            else:
                conn.send_frame(wire.Replay(offset=pump.pos, gap=replay.gap))
                terminal.write(ring.shown(replay, resized))
                if replay.gap:
                    terminal.write(note(f"[shellper: {replay.gap} bytes skipped]"))
            terminal.start_reading()
        elif rendered is not None:  # the drawing is the preamble: it has no offset, live output follows
            pump.pos, conn.drawn = ring.end, True
            conn.send_frame(wire.Replay(offset=pump.pos, preamble=drawing))
        else:
            conn.send_frame(wire.Replay(offset=replay.offset, data=replay.data, gap=replay.gap,
                                        preamble=replay.preamble))
        conn.registered = True
        if self.side.may_send(FrameType.DATA):
            conn.keystrokes = self.decoder
        ended = session.ended_exit()
        if ended is not None:
            exit_frame = wire.Exit.of(ended)
            self.send_exit_at(ring.end, wire.encode(exit_frame), exit_frame)
        if hello.events_after is not None:
            for event in session.events_after(hello.events_after):
                pump.send_control_at(ring.end, wire.encode(event))
        conn.join()  # announces this client, to itself too, after the history it asked for
        pump.run()

    # ----------------------------------------------------------------------------------- what the session sends

    def after_gap(self, chunk: Chunk) -> int:
        return self.conn._after_gap(chunk)  # in ClientConn: it decides between the screen and the modes

    def send_exit_at(self, offset: int, frame: bytes, exit_frame: wire.Exit) -> None:
        """An EXIT, after the output before it. A handed-over terminal is given back before a final one
        and shown a note before a restart (what ``shellper attach`` shows when it relays)."""
        action = None
        if self.conn.sink.terminal is not None:
            if exit_frame.state == SessionState.BACKOFF:
                action = lambda: self._show_restart(exit_frame)  # noqa: E731
            else:
                action = lambda: self.conn.sink.release("exit")  # noqa: E731
        self.conn.pump.send_control_at(offset, frame, action)

    def _show_restart(self, exit_frame: wire.Exit) -> None:
        terminal = self.conn.sink.terminal
        if terminal is not None:  # the new child starts on a fresh terminal, as the first did
            from shellper.core.terminal.restore import restore_sequence  # here: only a restart needs it

            session = self.conn.session
            terminal.write(session.scrollback.modes.reset_sequence() + restore_sequence(session.cols)
                           + note(exit_frame.restart_note()))

    def send_error(self, code: str, message: str, frame_type: int | None, fatal: bool = False) -> None:
        conn = self.conn
        transport = conn.transport
        if transport is None or conn.closing:
            return
        if fatal:  # a fatal ERROR is the last frame: what is queued goes first
            conn.sink.release("closing")
            conn.pump.write_queued()
        else:
            conn.sink.note(message)
        transport.write(wire.encode(wire.Error(code=code, message=message, frame_type=frame_type, fatal=fatal)))
        if fatal:
            conn.session.log.write(f"client {conn.client_id} ({self.side.role or 'pending'}): {code}: {message}")
            conn.close_after_flush()
