"""A connection from a version-1 client (the TypeScript original's protocol), served beside version 2 and 3.

A :class:`~shellper.daemon.clientconn.ClientConn` starts with the version-2/3 codec and takes a
:class:`LegacyCodec` instead when the first frame's payload is JSON (shellper.protocol.firstframe). Only
the frame codec, the handshake and how errors, exits and gaps are said differ: the connection is
registered, paced, handed output from the ring, told of exits and replaced as a tower exactly as a
version-2 one is, so clients of both versions can share a session. What a version-1 client may do is the
table in shellper.protocol.legacy (RIGHTS).
"""

from __future__ import annotations

import time

from shellper.core.peertext import quote_peer
from shellper.core.states import SessionState
from shellper.protocol import legacy, wire
from shellper.protocol.legacy import LegacyAction, LegacyError
from shellper.protocol.server import PACED
from shellper.protocol.wire import FrameType

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any

    from shellper.core.exitrecord import ExitRecord
    from shellper.core.ring import Chunk
    from shellper.daemon.wirecodec import CodecOwner
    from shellper.protocol.wire import Role

HANDSHAKE_EXIT_WAIT = 1.0
"""The longest a retained EXIT waits for the client to read the handshake before it is sent anyway."""
READ_POLL = 0.002
"""How often, meanwhile, the shellper looks whether the client has read it (there is no event for that)."""
_SILENT_ERRORS = frozenset({"not_running", "spawn_failed"})
"""Refusals the original made without a word: input or a signal while no child runs; a SPAWN whose command
could not start, which its EXIT and the log's "spawn failed" and "PTY exited" lines tell (not a protocol error)."""


class LegacyCodec:
    """The version-1 half of one connection: its frame reader, its handshake and what its frames do."""

    described: dict[str, Any] = {"protocol_version": legacy.LEGACY_VERSION}
    gap_preamble = False

    def __init__(self, conn: CodecOwner) -> None:
        self.conn = conn
        self.role: Role | None = None
        self.name = ""
        # Before the HELLO, frames are ignored: held to HELLO's limit (4 KiB), a larger one skipped unread.
        self._reader = legacy.FrameReader(limits=wire.HANDSHAKE_LIMITS)
        conn.session.log.write(f"Connection accepted: client {conn.client_id} speaks protocol version 1")

    def feed(self, data: bytes) -> None:
        conn, reader = self.conn, self._reader
        finished = False
        for frame in reader.feed(data):
            finished = True
            if conn.closing:
                return
            if isinstance(frame, legacy.SkippedFrame):
                continue  # as the original: dropped without a word, and parsing carries on
            try:
                self._frame(frame)
            except LegacyError as exc:
                self.send_error("protocol", str(exc), frame.frame_type, fatal=True)
                return
            if conn.registered:
                reader.limits = wire.SESSION_LIMITS  # version 2's per-type sizes (PROTOCOL.md 11), for the same types
            if conn.unread_too_much():
                return
        conn.partial(reader.buffered, finished)

    def reset(self) -> None:
        """The connection closes: what the reader held is dropped."""
        self._reader = legacy.FrameReader(limits=wire.HANDSHAKE_LIMITS)

    def _frame(self, frame: legacy.RawFrame) -> None:
        conn = self.conn
        if not conn.registered:  # before the handshake only a HELLO counts (pre-HELLO gating)
            if frame.frame_type == FrameType.HELLO:
                self._hello(legacy.parse_hello(frame.payload))
            return
        session = conn.session
        assert self.role is not None
        action = legacy.action_for(self.role, frame.frame_type)
        if action is LegacyAction.INPUT:
            if frame.payload:
                conn.input(frame.payload)
        elif action is LegacyAction.RESIZE:
            session.resize(*legacy.parse_resize(frame.payload))
        elif action is LegacyAction.SIGNAL:
            signum = legacy.parse_signal(frame.payload)
            name = legacy.ALLOWED_SIGNALS.get(signum)
            if name is None:  # the connection stays up
                session.log.write(f"Protocol error: signal {signum} is not allowed "
                                  f"(allowed: {', '.join(map(str, legacy.ALLOWED_SIGNALS))})")
                return
            conn.signal_child(name)
        elif action is LegacyAction.SPAWN:
            spawn = legacy.parse_spawn(frame.payload)
            session.log.write(f"SPAWN: command={spawn.argv[0]}, killing old PTY pid={self._child_pid()}")
            # Unchecked, as node-pty: a command that cannot start ends the old child all the same and is
            # told as the new child's EXIT {code: 1, signal: "0"}, never refused in silence.
            conn.respawn(wire.Spawn(argv=spawn.argv, cwd=spawn.cwd, env=spawn.env, clear_ring=True), checked=False)
        elif action is LegacyAction.PONG:
            self._write(legacy.encode(FrameType.PONG))

    def _hello(self, hello: legacy.Hello) -> None:
        conn = self.conn
        session = conn.session
        conn.handshake_done()
        session.log.write(f"HELLO: version={quote_peer(hello.version)}, clientType={quote_peer(hello.client_type)}")
        self.role, self.name = legacy.client_kind(hello.client_type), hello.client_type[:200]
        conn.pump.paced = self.role in PACED
        state = session.welcome(self.role)
        start_ms = int(session.created_at * 1000)
        last = state.last_output_at
        pid = self._child_pid()
        self._write(legacy.welcome(child_pid=None if pid < 0 else pid, cols=state.cols, rows=state.rows,
                                   start_ms=start_ms, last_data_ms=start_ms if last is None else int(last * 1000)))
        session.log.write(f"WELCOME sent: pid={pid}, version={legacy.LEGACY_VERSION}")
        ring = session.scrollback
        self._write(legacy.encode(FrameType.REPLAY, self._replay()))  # always, even empty
        conn.pump.pos = ring.end
        conn.registered = True
        ended = session.ended_exit()
        conn.join()  # a tower replaces the tower before it, of either version
        conn.pump.run()
        if ended is not None:
            session.log.write(f"EXIT replayed to late connection {conn.client_id}: code={ended.code}")
            self._exit_once_read(ended, time.monotonic() + HANDSHAKE_EXIT_WAIT)

    def _exit_once_read(self, ended: ExitRecord, deadline: float) -> None:
        """The retained EXIT, once the client has read its WELCOME and REPLAY (or at ``deadline``): the
        original's Tower subscribes to exits only once connect() has resolved on the WELCOME, so an EXIT
        it read together with the handshake was lost (bench/NOTES.md, "The retained EXIT")."""
        conn = self.conn
        transport, session = conn.transport, conn.session
        if transport is None or conn.closing or session.ended_exit() is not ended:
            return  # gone, or a SPAWN came since: its own exits reach this connection as any exit does
        if transport.unread_by_peer() and time.monotonic() < deadline:
            session.loop.call_later(READ_POLL, lambda: self._exit_once_read(ended, deadline))
            return
        conn.pump.send_control_at(session.scrollback.end, _exit_frame(ended.code, ended.signal, ended.child_pid))

    def _child_pid(self) -> int:
        """The child's pid as the original gave it: the running child's, else the last one's, dead (node-pty's
        pid outlived its process), else -1 (none ever ran)."""
        session = self.conn.session
        assert self.role is not None
        pid = session.welcome(self.role).child_pid
        if pid is None:
            ended = session.ended_exit()
            pid = None if ended is None else ended.child_pid
        return -1 if pid is None else pid

    def _replay(self) -> bytes:
        """The newest output, at most REPLAY_PAYLOAD_MAX bytes, in one payload; it starts with the terminal
        modes in effect where it starts when they fit (the original lost an alt screen cut off the front)."""
        ring = self.conn.session.scrollback
        start = ring.safe_start(max(ring.start, ring.end - legacy.REPLAY_PAYLOAD_MAX))
        replay = ring.replay(start, legacy.REPLAY_PAYLOAD_MAX)
        if len(replay.preamble) + len(replay.data) <= legacy.REPLAY_PAYLOAD_MAX:
            return replay.preamble + replay.data
        return replay.data

    def _write(self, frame: bytes) -> None:
        if self.conn.transport is not None and not self.conn.closing:
            self.conn.transport.write(frame)

    # ----------------------------------------------------------------------------------- what the session sends

    def after_gap(self, chunk: Chunk) -> int:
        """Version 1 has no GAP: output the ring no longer holds is skipped without a word."""
        return chunk.offset

    def send_exit_at(self, offset: int, frame: bytes, exit_frame: wire.Exit) -> None:
        if exit_frame.state == SessionState.STARTING:
            return  # the child a SPAWN replaced: the original ignored its exit
        self.conn.pump.send_control_at(offset, _exit_frame(exit_frame.code, exit_frame.signal, exit_frame.child_pid))

    def send_error(self, code: str, message: str, frame_type: int | None, fatal: bool = False) -> None:
        """Version 1 has no ERROR frame: the log says it, and a fatal one closes the connection."""
        conn = self.conn
        if conn.transport is None or conn.closing:
            return
        if code == "replaced":
            conn.session.log.write(f"Replacing existing tower connection {conn.client_id}")
        elif code not in _SILENT_ERRORS:
            conn.session.log.write(f"Protocol error: {message} (client {conn.client_id})")
        if fatal:
            conn.close_after_flush()


def _exit_frame(code: int | None, signal: str | None, child_pid: int | None) -> bytes:
    return legacy.encode_exit(code, signal, spawned=child_pid is not None)
