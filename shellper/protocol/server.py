"""The shellper's side of a version-2/3 connection, sans I/O: the handshake's checks and what each frame a
client sends comes to, as tables (who may send what, what each version has) and small frozen records.

shellper.daemon.clientconn feeds a :class:`ServerSide` the frames it decodes and carries out what comes
back: an :class:`Accepted` or :class:`Fatal` handshake, a :class:`Carry` (do the request), a
:class:`Refuse` (answer that it was not done) or nothing. It knows no session beyond the few numbers a check
needs, and touches no socket. The client's side is shellper.protocol.connection; version 1 is
shellper.protocol.legacy.
"""

from __future__ import annotations

from shellper.core.peertext import quote_peer
from shellper.core.structs import record
from shellper.protocol import wire
from shellper.protocol.wire import Feature, FrameType, Role, supports

CLIENT_FRAMES = frozenset({FrameType.DATA, FrameType.RESIZE, FrameType.SIGNAL, FrameType.SPAWN, FrameType.STOP,
                           FrameType.STATUS, FrameType.PING, FrameType.PONG, FrameType.SCREEN, FrameType.LABELS})
"""The frame types a client sends; any other known type is the shellper's (a non-fatal ERROR)."""
_TOWER_ONLY = frozenset({FrameType.SIGNAL, FrameType.SPAWN, FrameType.STOP})

MAY_SEND: dict[Role, frozenset[FrameType]] = {
    Role.TOWER: CLIENT_FRAMES,
    Role.TERMINAL: CLIENT_FRAMES - _TOWER_ONLY,
    Role.VIEWER: CLIENT_FRAMES - _TOWER_ONLY - {FrameType.DATA, FrameType.RESIZE, FrameType.LABELS},
}
"""The rights table: what each role may send. Anything else of CLIENT_FRAMES is refused (``forbidden``)."""

WHY_NOT: dict[FrameType, str] = {
    FrameType.DATA: "a {role} may not send input",
    FrameType.RESIZE: "a {role} may not resize",
    FrameType.LABELS: "a {role} may not label the session",
}
"""What a refusal by MAY_SEND says, by frame type; the tower's requests say TOWER_ONLY_TEXT."""
TOWER_ONLY_TEXT = "{frame} is accepted only from the tower, not a {role}"

NEEDS: dict[FrameType, Feature] = {FrameType.SCREEN: Feature.SCREEN, FrameType.LABELS: Feature.REPLY}
"""Frames a version before their feature's does not have (a non-fatal ERROR ``protocol``)."""

HELD_WHILE_STOPPING = frozenset({FrameType.RESIZE, FrameType.SIGNAL, FrameType.SPAWN})
"""Requests refused (``stopping``) while the session stops, when they carry an id (else carried out)."""
RANGE_CHECKED = frozenset({FrameType.RESIZE, FrameType.STOP, FrameType.SCREEN})
"""Requests whose values wire.check_request holds to ranges: refused with an id, fatal without one."""
ANSWERABLE = frozenset({"bad_field", "missing_field"})
"""Codes of a malformed request that is answered by a REPLY (with an id, version 3) instead of closing."""

PACED = frozenset({Role.TOWER, Role.TERMINAL})
"""Roles the output waits for (within bounds: shellper.daemon.pacing), told when they took output."""
SHOWS_TERMINAL = frozenset({Role.TERMINAL, Role.VIEWER})
"""Roles behind a person's terminal: they may hand it over, ask for the screen drawn, get a GAP's preamble."""
NAME_MAX = 200
"""Characters of HELLO's ``client`` kept (the log and STATUS name it)."""


@record(frozen=True)
class Accepted:
    """A HELLO accepted: who the client is and what the handshake is to give it."""

    role: Role
    name: str
    version: int
    """The lower of the HELLO's version and ours: what this connection speaks."""
    rendered: int | None
    """Draw the screen (after this many lines of scrollback) instead of replaying bytes."""
    wants_events: bool
    may_hand_over: bool
    """The HELLO offered its terminal and this role may hand one over."""
    size: tuple[int, int] | None
    """A relaying terminal's size, to apply unless its terminal was handed over (then that terminal's counts)."""


@record(frozen=True)
class Fatal:
    """The handshake is refused: a fatal ERROR, then the connection closes."""

    code: str
    message: str
    frame_type: int | None = FrameType.HELLO


@record(frozen=True)
class Carry:
    """Carry out ``frame``; ``rid`` is the id to answer (None: before version 3, or none given)."""

    frame: wire.Frame
    rid: int | None


@record(frozen=True)
class Refuse:
    """Not carried out: a REPLY that is not ok when ``rid`` is set, else a non-fatal ERROR."""

    frame_type: int
    rid: int | None
    code: str
    message: str


class NotHello(wire.ProtocolError):
    code = "not_hello"


class ServerSide:
    """One connection's protocol state on the shellper's side: pending until a HELLO is accepted, then open
    with a role and a version."""

    __slots__ = ("_replies", "_rights", "name", "open", "role", "version")

    def __init__(self) -> None:
        self.role: Role | None = None
        self.name = ""
        self.version = wire.PROTOCOL_VERSION
        self.open = False
        # Read on every frame, so looked up once (a Feature's hash is a Python call).
        self._rights: frozenset[FrameType] = frozenset()
        self._replies = False

    def has(self, feature: Feature) -> bool:
        return supports(self.version, feature)

    def may_send(self, frame_type: FrameType) -> bool:
        return frame_type in self._rights

    @property
    def gap_preamble(self) -> bool:
        """Whether a GAP to this client carries a preamble (a handed-over terminal always gets one)."""
        return self.role in SHOWS_TERMINAL and self.has(Feature.GAP_PREAMBLE)

    def answerable(self, exc: wire.ProtocolError) -> bool:
        """A malformed request whose ``id`` could be read, after the handshake, with replies: answered by a
        REPLY that is not ok; the connection stays (the frame's bounds were intact)."""
        return (exc.request_id is not None and exc.frame_type is not None and self.open and self.has(Feature.REPLY)
                and exc.code in ANSWERABLE)

    def hello(self, hello: wire.Hello, *, last_event: int, output_end: int) -> Accepted | Fatal:
        """Check a HELLO against what this session has; raises wire.BadField for a value out of range."""
        if hello.version < wire.MIN_PROTOCOL_VERSION:
            return Fatal("unsupported_version", f"protocol version {hello.version} is not supported; this shellper "
                         f"speaks {wire.MIN_PROTOCOL_VERSION}..{wire.PROTOCOL_VERSION}")
        if hello.role not in wire.ROLES:
            return Fatal("bad_role", f"role {quote_peer(hello.role)} is not one of {', '.join(wire.ROLES)}")
        if hello.events_after is not None and hello.events_after > last_event:
            # as resume_from past the end: a position this session never reached belongs to another stream
            return Fatal("bad_offset", f"events_after {hello.events_after} is past the last event ({last_event})")
        if hello.resume_from is not None and hello.resume_from > output_end:
            return Fatal("bad_offset", f"resume_from {hello.resume_from} is past the end of output ({output_end})")
        if hello.detach_byte is not None and hello.detach_byte > 0xFF:
            raise wire.BadField(f"detach_byte {hello.detach_byte} is not a byte (0..255)", hello.TYPE, "detach_byte")
        role = Role(hello.role)
        self.role, self.name = role, hello.client[:NAME_MAX]
        self.version = min(hello.version, wire.PROTOCOL_VERSION)
        self._rights, self._replies = MAY_SEND[role], self.has(Feature.REPLY)
        sized = self.has(Feature.HELLO_SIZE) and role is Role.TERMINAL  # where HELLO's size means something
        if sized:
            wire.check_request(hello)
        self.open = True
        shows = role in SHOWS_TERMINAL
        return Accepted(
            role=role, name=self.name, version=self.version,
            rendered=hello.rendered if self.has(Feature.RENDERED) and hello.resume_from is None and shows else None,
            wants_events=role is Role.TOWER or hello.events_after is not None,
            may_hand_over=bool(hello.terminal) and shows,
            size=(hello.cols, hello.rows) if sized and hello.cols is not None and hello.rows is not None else None)

    def receive(self, event: wire.DecodedEvent, *, stopping: bool) -> wire.Hello | Carry | Refuse | None:
        """What a decoded frame comes to: the HELLO to check (before the handshake), a request to carry out or
        refuse, or nothing. Raises wire.ProtocolError for what closes the connection (unless answerable)."""
        if isinstance(event, wire.Skipped):
            raise wire.FrameTooLarge(f"declared length {event.length} exceeds the {event.limit} byte limit"
                                     + ("" if self.open else " before the handshake"), event.frame_type)
        if isinstance(event, wire.Unknown):
            return None
        kind = event.TYPE
        if not self.open:
            if not isinstance(event, wire.Hello):
                raise NotHello(f"the first frame must be HELLO, not {kind.name}", kind)
            return event
        if kind is FrameType.HELLO:
            raise wire.ProtocolError("HELLO was already received", kind)
        if kind not in CLIENT_FRAMES:
            return Refuse(kind, None, "protocol", f"{kind.name} is sent by the shellper, not by clients")
        rid: int | None = getattr(event, "id", None) if self._replies else None
        if kind not in self._rights:
            assert self.role is not None
            text = WHY_NOT.get(kind, TOWER_ONLY_TEXT)
            return Refuse(kind, rid, "forbidden", text.format(frame=kind.name, role=self.role.value))
        feature = NEEDS.get(kind)
        if feature is not None and not self.has(feature):
            return Refuse(kind, None, "protocol", f"{kind.name} needs protocol version {wire.SINCE[feature]}")
        if rid is not None and stopping and kind in HELD_WHILE_STOPPING:
            return Refuse(kind, rid, "stopping", f"the session is stopping: {kind.name} not carried out")
        if kind in RANGE_CHECKED:
            try:
                wire.check_request(event)
            except wire.BadField as exc:
                if rid is None:
                    raise
                return Refuse(kind, rid, exc.code, str(exc))
        return Carry(event, rid)
