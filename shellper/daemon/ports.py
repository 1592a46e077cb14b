"""What a client connection's parts (its output pump, terminal sink and codec) may use of the connection and
of the session, as protocols for the type checker only: the parts sit below shellper.daemon.clientconn and
never import it, as the connection never imports the session. Keep these lists narrow.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any, Protocol

    from shellper.core.exitrecord import ExitRecord
    from shellper.core.ring import Chunk, Scrollback
    from shellper.daemon.reactor import Reactor
    from shellper.daemon.terminal import Terminal
    from shellper.daemon.transport import SocketTransport
    from shellper.host.logfile import LogFile
    from shellper.protocol import wire
    from shellper.protocol.wire import Role

    class SessionView(Protocol):
        """What a connection and its parts may use of the session, beside what names the connection
        (shellper.daemon.clientconn.SessionPort adds that). The ring is shared (each connection reads its own
        position in it); everything else is asked for."""

        loop: Reactor
        log: LogFile
        scrollback: Scrollback
        created_at: float

        @property
        def cols(self) -> int: ...
        @property
        def rows(self) -> int: ...
        @property
        def event_seq(self) -> int: ...
        @property
        def stopping(self) -> bool: ...

        def welcome(self, role: str, terminal: bool = False) -> wire.Welcome: ...
        def ended_exit(self) -> ExitRecord | None: ...
        def status(self) -> wire.StatusReply: ...
        def events_after(self, seq: int) -> list[wire.Event]: ...
        def output_taken(self) -> None: ...
        def resize(self, cols: int, rows: int) -> None: ...
        def screen_reply(self, request: wire.ScreenRequest) -> wire.ScreenReply: ...
        def rendered_replay(self, scrollback: int, limit: int | None = None) -> bytes: ...

    class Codec(Protocol):
        """How a connection speaks: shellper.daemon.wirecodec.WireCodec (versions 2 and 3) or
        shellper.daemon.legacyconn.LegacyCodec (version 1)."""

        described: dict[str, Any]
        """What STATUS adds about the connection."""

        @property
        def role(self) -> Role | None: ...
        @property
        def name(self) -> str: ...
        @property
        def gap_preamble(self) -> bool: ...

        def feed(self, data: bytes) -> None: ...
        def reset(self) -> None: ...
        def after_gap(self, chunk: Chunk) -> int: ...
        def send_exit_at(self, offset: int, frame: bytes, exit_frame: wire.Exit) -> None: ...
        def send_error(self, code: str, message: str, frame_type: int | None, fatal: bool = False) -> None: ...

    class SinkView(Protocol):
        """What the output pump uses of a connection's terminal sink."""

        @property
        def terminal(self) -> Terminal | None: ...
        @property
        def released(self) -> bool: ...

    class ConnView(Protocol):
        """What every part uses of its connection; the parts' own owner protocols add to it."""

        client_id: int
        registered: bool
        """The handshake's replay is sent: output flows."""
        closing: bool

        @property
        def session(self) -> SessionView: ...
        @property
        def transport(self) -> SocketTransport | None: ...
        @property
        def role(self) -> Role | None: ...

        def transport_gone(self) -> bool: ...
        def send_error(self, code: str, message: str, frame_type: int | None, fatal: bool = False) -> None: ...
        def close_after_flush(self) -> None: ...
