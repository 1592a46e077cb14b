"""The shellper wire protocol as a sans-IO codec: typed frames in, bytes out, and back.

Framing is ``[1-byte type][4-byte big-endian payload length][payload]``. DATA carries raw PTY bytes so
the hot path pays no msgpack cost; every other known frame carries a msgpack map with string keys.
Unknown keys are ignored and unknown frame types are reported and skipped, so peers of different
versions can talk. Nothing here touches a socket or an event loop (see protocol/PROTOCOL.md).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from enum import Enum, IntEnum, StrEnum

import msgpack

from shellper.core import structs
from shellper.core.defaults import TERMINAL_SIZE_RANGE, terminal_size_in_range
from shellper.core.errors import ShellperError
from shellper.core.exitrecord import ExitRecord, ExitRecordError, check_exit_record
from shellper.core.peertext import quote_peer
from shellper.core.signals import bare_name
from shellper.core.structs import field, record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any, ClassVar, TypeVar, dataclass_transform

    _T = TypeVar("_T")

PROTOCOL_VERSION = 3
"""Version spoken by this codec. Version 3 adds request ids and REPLY, and SCREEN; version 1, the original's
JSON framing, is served by shellper.protocol.legacy, not by this codec."""
MIN_PROTOCOL_VERSION = 2


class Feature(Enum):
    """What a protocol version may have; SINCE says from which version on."""

    REPLY = "request ids, answered by REPLY (or a STATUS_REPLY with the id)"
    SCREEN = "SCREEN and SCREEN_REPLY"
    RENDERED = "HELLO's rendered: the screen drawn from the model instead of the bytes (PROTOCOL.md 8.6)"
    HELLO_SIZE = "HELLO's cols and rows: a relaying terminal's size, applied before the replay"
    GAP_PREAMBLE = "a GAP's preamble: what a terminal writes instead of the output it missed"


SINCE: dict[Feature, int] = {
    Feature.REPLY: 3,
    Feature.SCREEN: 3,
    Feature.RENDERED: 3,
    Feature.HELLO_SIZE: 3,
    Feature.GAP_PREAMBLE: 3,
}
"""The first protocol version with each feature; compare versions through :func:`supports`, not with numbers."""


def supports(version: int, feature: Feature) -> bool:
    return version >= SINCE[feature]


REPLY_VERSION = SINCE[Feature.REPLY]
"""The first version in which requests carry an ``id`` and are answered by REPLY (or an STATUS_REPLY with it)."""
SCREEN_VERSION = SINCE[Feature.SCREEN]
"""The first version with SCREEN / SCREEN_REPLY and HELLO's ``rendered``."""
HEADER = struct.Struct(">BI")
HEADER_SIZE = HEADER.size
MAX_FRAME_SIZE = 16 * 1024 * 1024
"""Largest payload accepted by default; a larger declared length is skipped, never buffered."""
MAX_DRAWING = 6 * 1024 * 1024
"""The longest screen drawing sent in a frame (REPLAY's or GAP's ``preamble``, PROTOCOL.md 8.6): well within
a frame, and so that a drawing, a chunk of output in flight and the high-water mark stay under the 8 MiB of
unread answers that make a client too slow (section 9), whatever it sends before reading."""



class Role(StrEnum):
    """Who a client is (HELLO's ``role``; on the wire, the string): what it may send is
    shellper.protocol.server.MAY_SEND."""

    TOWER = "tower"
    """The one managing client: it may signal, respawn and stop; a new one replaces the old."""
    TERMINAL = "terminal"
    """A person's terminal: it types and resizes."""
    VIEWER = "viewer"
    """Watches only."""


ROLES = tuple(role.value for role in Role)
SIGNALS = ("HUP", "INT", "QUIT", "TERM", "KILL", "CONT", "STOP", "TSTP", "WINCH", "USR1", "USR2")
"""Signal names a tower may send to the child's process group (without the SIG prefix)."""


class FrameType(IntEnum):
    """A frame's type byte on the wire (protocol/PROTOCOL.md, section 4)."""

    DATA = 0x01
    RESIZE = 0x02
    SIGNAL = 0x03
    EXIT = 0x04
    REPLAY = 0x05
    PING = 0x06
    PONG = 0x07
    HELLO = 0x08
    WELCOME = 0x09
    SPAWN = 0x0A
    ERROR = 0x0B
    EVENT = 0x0C
    STATUS = 0x0D
    STATUS_REPLY = 0x0E
    STOP = 0x0F
    GAP = 0x10
    RELEASE = 0x11
    REPLY = 0x12
    SCREEN = 0x13
    SCREEN_REPLY = 0x14
    LABELS = 0x15


# --------------------------------------------------------------------------------------------- errors


class ProtocolError(ShellperError):
    """A frame that cannot be accepted. ``code`` is what an ERROR frame reports for it."""

    code = "protocol"

    def __init__(self, message: str, frame_type: int | None = None, field_name: str | None = None) -> None:
        self.frame_type = frame_type
        self.field_name = field_name
        where = f"{_type_name(frame_type)} frame: " if frame_type is not None else ""
        super().__init__(where + message)
        self.detail = message
        self.request_id: int | None = None
        """A malformed request's ``id`` when it could still be read (version 3): the shellper then answers
        with a REPLY and keeps the connection."""


class TruncatedFrame(ProtocolError):
    code = "truncated"


class BadPayload(ProtocolError):
    code = "bad_payload"


class MissingField(ProtocolError):
    code = "missing_field"


class BadField(ProtocolError):
    code = "bad_field"


class FrameTooLarge(ProtocolError):
    code = "too_large"


def _type_name(frame_type: int | None) -> str:
    if frame_type is None:
        return "?"
    try:
        return FrameType(frame_type).name
    except ValueError:
        return f"0x{frame_type:02x}"


# --------------------------------------------------------------------------------------------- field kinds


def _check_kind(kind: str, value: Any) -> bool:
    """Whether a decoded msgpack value fits a field kind (bool is not an int on the wire)."""
    if kind == "uint":
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**64
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "bin":
        return isinstance(value, bytes)
    if kind == "str_list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "str_map":
        return isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
    if kind == "map":
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    if kind == "list":
        return isinstance(value, list)
    raise AssertionError(f"unknown field kind {kind}")


_KIND_WORDS = {
    "uint": "an unsigned integer",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "a boolean",
    "bin": "binary",
    "str_list": "an array of strings",
    "str_map": "a map of string to string",
    "map": "a map with string keys",
    "list": "an array",
}


def wfield(
    kind: str, *, nullable: bool = False, key: str | None = None, default: Any = structs.MISSING
) -> Any:
    """Declare a wire field: its msgpack kind, whether nil is allowed, its key if not the attribute's name."""
    meta = {"kind": kind, "nullable": nullable, "key": key}
    if isinstance(default, list | dict):
        def factory(d: Any = default) -> Any:
            return type(d)(d)
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# --------------------------------------------------------------------------------------------- frames


if TYPE_CHECKING:
    @dataclass_transform(frozen_default=True, field_specifiers=(wfield,))
    def _frame(cls: type[_T]) -> type[_T]: ...
else:
    _frame = record(frozen=True)
    """Frames are frozen records whose fields are declared with :func:`wfield` (as type checkers are told)."""


@_frame
class Frame:
    """Base of every frame. Control frames are encoded from their record fields."""

    if TYPE_CHECKING:  # declared for type checkers only: at run time dataclasses would take it for a field
        TYPE: ClassVar[FrameType]

    def to_map(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in structs.fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata["nullable"] and f.default is None:
                continue  # optional and absent: omit rather than send nil
            if f.metadata["kind"] == "float" and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)  # a float field is always sent as float 64 (PROTOCOL.md section 3)
            out[f.metadata["key"] or f.name] = value
        return out

    @classmethod
    def from_map(cls, payload: dict[str, Any]) -> Frame:
        try:
            return cls._from_map(payload)
        except ProtocolError as exc:
            if cls.TYPE in ID_REQUESTS and _check_kind("uint", payload.get("id")):
                exc.request_id = payload["id"]
            raise

    @classmethod
    def _from_map(cls, payload: dict[str, Any]) -> Frame:
        kwargs: dict[str, Any] = {}
        for f in structs.fields(cls):
            key = f.metadata["key"] or f.name
            if key not in payload:
                if f.default is structs.MISSING and f.default_factory is structs.MISSING:
                    raise MissingField(f"missing required field {key!r}", cls.TYPE, key)
                continue
            value = payload[key]
            if value is None and f.metadata["nullable"]:
                kwargs[f.name] = None
                continue
            if not _check_kind(f.metadata["kind"], value):
                want = _KIND_WORDS[f.metadata["kind"]] + (" or nil" if f.metadata["nullable"] else "")
                raise BadField(f"field {key!r} must be {want}, got {type(value).__name__}", cls.TYPE, key)
            kwargs[f.name] = float(value) if f.metadata["kind"] == "float" else value
        return cls(**kwargs)


@_frame
class Data(Frame):
    """Raw bytes: PTY output (shellper to client) or input (client to shellper). Not msgpack."""

    TYPE = FrameType.DATA
    data: bytes = wfield("bin", default=b"")


@_frame
class Resize(Frame):
    """The terminal's size in cells; the shellper applies it to the PTY (TIOCSWINSZ, then SIGWINCH)."""

    TYPE = FrameType.RESIZE
    cols: int = wfield("uint")
    rows: int = wfield("uint")
    id: int | None = wfield("uint", nullable=True, default=None)
    """Version 3: answer with a REPLY carrying this id."""


@_frame
class Signal(Frame):
    """A signal, by name from SIGNALS, for the child's process group (tower only)."""

    TYPE = FrameType.SIGNAL
    signal: str = wfield("str")
    id: int | None = wfield("uint", nullable=True, default=None)


@_frame
class Exit(Frame):
    """The child exited. Carries the exit record; ``state`` is the session state that follows."""

    TYPE = FrameType.EXIT
    code: int | None = wfield("int", nullable=True)
    signal: str | None = wfield("str", nullable=True)
    core: bool = wfield("bool", default=False)
    uptime: float = wfield("float", default=0.0)
    exit_class: str = wfield("str", key="class", default="")
    reason: str = wfield("str", default="")
    state: str = wfield("str", default="")
    child_pid: int | None = wfield("int", nullable=True, default=None)
    time: float = wfield("float", default=0.0)
    restart_in: float | None = wfield("float", nullable=True, default=None)
    stderr_tail: str = wfield("str", default="")

    @classmethod
    def from_map(cls, payload: dict[str, Any]) -> Frame:
        frame = super().from_map(payload)
        _check_exit_record(payload, cls.TYPE, None)
        return frame

    @classmethod
    def of(cls, exit_record: ExitRecord) -> Exit:
        """The EXIT frame of an exit record: the record's fields this frame has (all but the last three)."""
        return cls(**{f.name: getattr(exit_record, f.name) for f in structs.fields(cls)})

    def exit_record(self) -> ExitRecord:
        """This frame's exit record; raises ExitRecordError if a field the record needs is unusable."""
        return ExitRecord.from_wire(self.to_map())

    def describe(self) -> str:
        """The child's end in one line: the shellper's reason if it gave one, else the code or signal."""
        if self.reason:
            return self.reason
        if self.code is not None:
            return f"code {self.code}"
        if self.signal:
            return f"killed by {self.signal}" + (" (core dumped)" if self.core else "")
        return "child exited"

    def restart_note(self) -> str:
        """What a terminal shows when the child exited and the shellper restarts it."""
        when = f" in {self.restart_in:g} s" if self.restart_in is not None else ""
        return f"[exited: {self.describe()}; restarting{when}]"


@_frame
class Replay(Frame):
    """First frame of output after WELCOME: ``data`` starts at absolute ``offset``.

    ``gap`` counts bytes the client asked for that the ring no longer holds. ``preamble`` re-establishes
    the terminal modes in effect at ``offset``; it is not part of the output stream and has no offset.
    """

    TYPE = FrameType.REPLAY
    offset: int = wfield("uint")
    data: bytes = wfield("bin", default=b"")
    gap: int = wfield("uint", default=0)
    preamble: bytes = wfield("bin", default=b"")


@_frame
class Ping(Frame):
    """Asks for a PONG with the same nonce: a liveness check, and a barrier after frames sent before it."""

    TYPE = FrameType.PING
    nonce: int | None = wfield("int", nullable=True, default=None)


@_frame
class Pong(Frame):
    """The answer to a PING, carrying its nonce."""

    TYPE = FrameType.PONG
    nonce: int | None = wfield("int", nullable=True, default=None)


@_frame
class Hello(Frame):
    """Client's opening frame. ``resume_from`` = the offset it already has output up to."""

    TYPE = FrameType.HELLO
    version: int = wfield("uint")
    role: str = wfield("str")
    resume_from: int | None = wfield("uint", nullable=True, default=None)
    replay_bytes: int | None = wfield("uint", nullable=True, default=None)
    events_after: int | None = wfield("uint", nullable=True, default=None)
    client: str = wfield("str", default="")
    terminal: bool | None = wfield("bool", nullable=True, default=None)
    """True: this HELLO's bytes carry the client's terminal (one fd, SCM_RIGHTS) for the shellper to use."""
    detach_byte: int | None = wfield("uint", nullable=True, default=None)
    """With ``terminal``: the byte that, typed, ends the attach (the shellper watches the input for it)."""
    rendered: int | None = wfield("uint", nullable=True, default=None)
    """Version 3, a terminal or viewer: replay the rendered screen instead of bytes, after up to this many
    lines of the main screen's scrollback (protocol/PROTOCOL.md, 8.6)."""
    cols: int | None = wfield("uint", nullable=True, default=None)
    """Version 3, a terminal that relays: its size, applied to the session before the replay (with ``rows``)."""
    rows: int | None = wfield("uint", nullable=True, default=None)


@_frame
class Welcome(Frame):
    """The shellper's answer to HELLO: who it is, the session's state and size, and the ring's bounds."""

    TYPE = FrameType.WELCOME
    version: int = wfield("uint")
    name: str = wfield("str")
    shellper_pid: int = wfield("uint")
    shellper_start_time: int = wfield("uint")
    boot_id: str = wfield("str")
    instance_id: str = wfield("str")
    state: str = wfield("str")
    cols: int = wfield("uint")
    rows: int = wfield("uint")
    ring_start: int = wfield("uint")
    ring_end: int = wfield("uint")
    child_pid: int | None = wfield("int", nullable=True, default=None)
    state_reason: str = wfield("str", default="")
    last_output_at: float | None = wfield("float", nullable=True, default=None)
    exit: dict[str, Any] | None = wfield("map", nullable=True, default=None)
    event_seq: int = wfield("uint", default=0)
    role: str = wfield("str", default="")
    min_version: int = wfield("uint", default=MIN_PROTOCOL_VERSION)
    max_frame: int = wfield("uint", default=MAX_FRAME_SIZE)
    terminal: bool | None = wfield("bool", nullable=True, default=None)
    """True: the shellper took the terminal the HELLO passed, and reads and writes it itself."""

    @classmethod
    def from_map(cls, payload: dict[str, Any]) -> Frame:
        frame = super().from_map(payload)
        if payload.get("exit") is not None:
            _check_exit_record(payload["exit"], cls.TYPE, "exit")
        return frame

    def exit_record(self) -> ExitRecord | None:
        """The child's last exit (:meth:`ExitRecord.to_wire`'s map in ``exit``), or None if it has not exited;
        raises ExitRecordError for a malformed one."""
        return None if self.exit is None else ExitRecord.from_wire(self.exit)


@_frame
class Spawn(Frame):
    """Replace the child. Absent fields reuse the session's current command, cwd and environment."""

    TYPE = FrameType.SPAWN
    argv: list[str] | None = wfield("str_list", nullable=True, default=None)
    cwd: str | None = wfield("str", nullable=True, default=None)
    env: dict[str, str] | None = wfield("str_map", nullable=True, default=None)
    clear_ring: bool = wfield("bool", default=False)
    id: int | None = wfield("uint", nullable=True, default=None)


@_frame
class Error(Frame):
    """What went wrong; with ``fatal`` the shellper closes this connection right after it."""

    TYPE = FrameType.ERROR
    code: str = wfield("str")
    message: str = wfield("str")
    frame_type: int | None = wfield("uint", nullable=True, default=None)
    fatal: bool = wfield("bool", default=False)


@_frame
class Event(Frame):
    """A numbered session event (spawned, exited, client_attached, ...), for clients that asked for events."""

    TYPE = FrameType.EVENT
    seq: int = wfield("uint")
    kind: str = wfield("str")
    time: float = wfield("float", default=0.0)
    data: dict[str, Any] = wfield("map", default={})

    @classmethod
    def from_map(cls, payload: dict[str, Any]) -> Frame:
        frame = super().from_map(payload)
        if payload["kind"] == EXITED_EVENT:
            _check_exit_record(payload.get("data", {}), cls.TYPE, "data")
        return frame


EXITED_EVENT = "exited"
"""The event kind whose ``data`` is an exit record."""
NOTE_EVENT = "note"
"""The event kind that marks a shellper note in the output stream: ``data`` is {offset, length, text}."""


def _check_exit_record(record: Any, frame_type: FrameType, carrier: str | None) -> None:
    """The exit record's one check (PROTOCOL.md 6.2), for each frame that carries one: a bad entry is
    ``bad_field`` naming the entry, or ``missing_field``; inside WELCOME or EVENT, the carrier's field."""
    try:
        check_exit_record(record)
    except ExitRecordError as exc:
        name = exc.key if carrier is None else carrier
        where = "" if carrier is None else f"{carrier}: "
        error = MissingField if exc.problem == "is missing" and carrier is None else BadField
        raise error(where + str(exc), frame_type, name) from None


@_frame
class Status(Frame):
    """A request for a STATUS_REPLY (with an ``id``, version 3: the STATUS_REPLY carries it back)."""

    TYPE = FrameType.STATUS
    id: int | None = wfield("uint", nullable=True, default=None)


@_frame
class ScreenRequest(Frame):
    """Version 3: a request for the rendered screen (a SCREEN_REPLY echoing ``id``)."""

    TYPE = FrameType.SCREEN
    id: int | None = wfield("uint", nullable=True, default=None)
    format: str = wfield("str", default="text")
    """``text``: plain rows; ``ansi``: rows with SGR sequences (colours, bold...)."""
    scrollback: int = wfield("uint", default=0)
    """How many of the main screen's scrollback lines to add, at most."""


SCREEN_FORMATS = ("text", "ansi")


@_frame
class ScreenReply(Frame):
    """The screen of the moment: what a terminal attached now would show, at output ``offset``."""

    TYPE = FrameType.SCREEN_REPLY
    offset: int = wfield("uint")
    cols: int = wfield("uint")
    rows: int = wfield("uint")
    lines: list[str] = wfield("str_list", default=[])
    cursor_x: int = wfield("uint", default=0)
    cursor_y: int = wfield("uint", default=0)
    cursor_visible: bool = wfield("bool", default=True)
    alternate: bool = wfield("bool", default=False)
    title: str = wfield("str", default="")
    scrollback: list[str] = wfield("str_list", default=[])
    format: str = wfield("str", default="text")
    id: int | None = wfield("uint", nullable=True, default=None)


@_frame
class Labels(Frame):
    """Version 3: set the session's labels (shellper.core.labels): each key of ``set`` to its value, an empty
    value removing the key. Answered, with an ``id``, by a REPLY whose result holds the labels now."""

    TYPE = FrameType.LABELS
    set: dict[str, str] = wfield("str_map", default={})
    id: int | None = wfield("uint", nullable=True, default=None)


@_frame
class StatusReply(Frame):
    """The answer to STATUS: the session state and a map of details (pids, ring, clients, exits)."""

    TYPE = FrameType.STATUS_REPLY
    state: str = wfield("str")
    info: dict[str, Any] = wfield("map", default={})
    id: int | None = wfield("uint", nullable=True, default=None)
    """The STATUS's id, when it had one (version 3)."""

    def last_exit(self) -> ExitRecord | None:
        """The child's last exit (``info["last_exit"]``), or None; raises ExitRecordError for a malformed one."""
        last = self.info.get("last_exit")
        return None if last is None else ExitRecord.from_wire(last)


@_frame
class Stop(Frame):
    """End the session: terminate the child's tree (``grace`` seconds before SIGKILL), then exit."""

    TYPE = FrameType.STOP
    grace: float | None = wfield("float", nullable=True, default=None)
    id: int | None = wfield("uint", nullable=True, default=None)


@_frame
class Gap(Frame):
    """Output this client missed because it fell behind the ring: ``missed`` bytes, resuming at ``offset``."""

    TYPE = FrameType.GAP
    offset: int = wfield("uint")
    missed: int = wfield("uint")
    preamble: bytes | None = wfield("bin", nullable=True, default=None)
    """Version 3, a terminal or viewer: what to write instead of the missed bytes (PROTOCOL.md 8.4): a full
    mode reset, then the screen drawn (a connection that asked ``rendered``) or the modes at ``offset``."""


@_frame
class Release(Frame):
    """The shellper has stopped using the terminal this client handed it (and closed its descriptor).

    ``reason``: ``detach`` (the detach byte was typed), ``hangup`` (the terminal returned EOF or an
    error), ``exit`` (the child ended the session), ``closing`` (the client or the shellper is closing).
    ``reset`` switches off the modes the session left on; ``offset`` is where the terminal's output ends;
    ``typed``, on a detach, what was read after the detach key (the client gives it back to its terminal).
    """

    TYPE = FrameType.RELEASE
    reason: str = wfield("str")
    reset: bytes = wfield("bin", default=b"")
    offset: int = wfield("uint", default=0)
    typed: bytes | None = wfield("bin", nullable=True, default=None)


@_frame
class Reply(Frame):
    """Version 3: the one answer to a request that carried an ``id``: ``ok`` with what was done in
    ``result``, or not ok with an error ``code`` (REPLY_CODES) and a ``message`` for people."""

    TYPE = FrameType.REPLY
    id: int = wfield("uint")
    frame_type: int = wfield("uint")
    ok: bool = wfield("bool")
    code: str = wfield("str", default="")
    message: str = wfield("str", default="")
    result: dict[str, Any] = wfield("map", default={})


REPLY_CODES = ("bad_field", "missing_field", "bad_signal", "forbidden", "not_running", "spawn_failed", "stopping",
               "internal")
"""The error codes a REPLY carries (PROTOCOL.md 5, REPLY): a client may meet others from a newer shellper."""
ID_REQUESTS = frozenset({FrameType.RESIZE, FrameType.SIGNAL, FrameType.SPAWN, FrameType.STOP, FrameType.STATUS,
                         FrameType.SCREEN, FrameType.LABELS})
"""The requests that may carry an ``id`` (version 3) and are then answered exactly once."""

_DATA_TYPE = int(FrameType.DATA)

FRAME_CLASSES: dict[int, type[Frame]] = {
    cls.TYPE: cls
    for cls in (Data, Resize, Signal, Exit, Replay, Ping, Pong, Hello, Welcome, Spawn, Error, Event, Status,
                StatusReply, Stop, Gap, Release, Reply, ScreenRequest, ScreenReply, Labels)
}


@record(frozen=True)
class Skipped:
    """A frame whose declared length exceeded the limit; its payload was discarded unread."""

    frame_type: int
    length: int
    limit: int = field(default=MAX_FRAME_SIZE, compare=False)
    """The limit it exceeded (the decoder's, or its type's under :class:`PayloadLimit` limits)."""


@record(frozen=True)
class Unknown:
    """A frame of a type this codec does not know; a newer peer sent it and it is ignored."""

    frame_type: int
    length: int


DecodedEvent = Frame | Skipped | Unknown


# --------------------------------------------------------------------------------------------- limits


@record(frozen=True)
class PayloadLimit:
    """What one frame of a type may cost the shellper that receives it (PROTOCOL.md section 11): ``size``
    payload bytes and, for a msgpack payload, at most ``objects`` values (every map, array, key and value,
    the payload map included) nested at most ``depth`` containers deep. A one-byte msgpack value (an empty
    map) costs Python about 70 bytes, so the object count, not the size, is what bounds a decoded frame."""

    size: int
    objects: int = 0
    """0: not msgpack (DATA, a type the shellper does not know): never decoded, it costs its size."""
    depth: int = 0


MAX_DEPTH = 16
"""Deepest nesting of containers in a payload the shellper decodes (the payload map is depth 1)."""
HELLO_LIMIT = PayloadLimit(size=4096, objects=256, depth=MAX_DEPTH)
"""A HELLO, and every frame before the handshake whatever its type: all a peer not yet known can make the
shellper hold. A HELLO is about 100 bytes."""
CONTROL_LIMIT = PayloadLimit(size=64 * 1024, objects=4096, depth=MAX_DEPTH)
"""Every other msgpack frame a client sends (RESIZE, PING, STATUS...), also those only the shellper sends."""
SPAWN_LIMIT = PayloadLimit(size=2 * 1024 * 1024, objects=65536, depth=MAX_DEPTH)
"""SPAWN's argv and env: Linux's default ARG_MAX is 2 MiB for both, so no larger SPAWN could run."""
RAW_LIMIT = PayloadLimit(size=MAX_FRAME_SIZE)
"""DATA, and a frame of a type the shellper does not know (after the handshake): skipped, never decoded."""


def _session_limits() -> tuple[PayloadLimit, ...]:
    table = [RAW_LIMIT] * 256
    for code in FRAME_CLASSES:
        table[code] = CONTROL_LIMIT
    table[FrameType.DATA], table[FrameType.HELLO], table[FrameType.SPAWN] = RAW_LIMIT, HELLO_LIMIT, SPAWN_LIMIT
    return tuple(table)


HANDSHAKE_LIMITS = (HELLO_LIMIT,) * 256
"""The shellper's limits by frame type code until a HELLO is accepted."""
SESSION_LIMITS = _session_limits()
"""The shellper's limits by frame type code after the handshake."""

# How each first byte of a msgpack value is measured: (kind, header bytes, width of its length or count field,
# items per count). A scalar's header is its whole size; str, bin and ext add their length to the header.
_SCALAR, _SIZED, _CONTAINER, _INVALID = range(4)


def _format_table() -> tuple[tuple[int, int, int, int], ...]:
    fixed = {0xC0: 1, 0xC2: 1, 0xC3: 1, 0xCA: 5, 0xCB: 9, 0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9, 0xD0: 2,
             0xD1: 3, 0xD2: 5, 0xD3: 9, 0xD4: 3, 0xD5: 4, 0xD6: 6, 0xD7: 10, 0xD8: 18}
    sized = {0xC4: (2, 1), 0xC5: (3, 2), 0xC6: (5, 4), 0xC7: (3, 1), 0xC8: (4, 2), 0xC9: (6, 4), 0xD9: (2, 1),
             0xDA: (3, 2), 0xDB: (5, 4)}
    containers = {0xDC: (3, 2, 1), 0xDD: (5, 4, 1), 0xDE: (3, 2, 2), 0xDF: (5, 4, 2)}
    table = []
    for b in range(256):
        if b <= 0x7F or b >= 0xE0:
            table.append((_SCALAR, 1, 0, 0))
        elif b <= 0x8F:
            table.append((_CONTAINER, 1, 0, 2))
        elif b <= 0x9F:
            table.append((_CONTAINER, 1, 0, 1))
        elif b <= 0xBF:
            table.append((_SCALAR, 1 + (b & 0x1F), 0, 0))
        elif b in fixed:
            table.append((_SCALAR, fixed[b], 0, 0))
        elif b in sized:
            table.append((_SIZED, *sized[b], 0))
        elif b in containers:
            table.append((_CONTAINER, *containers[b]))
        else:
            table.append((_INVALID, 0, 0, 0))
    return tuple(table)


_formats: tuple[tuple[int, int, int, int], ...] = ()
"""_format_table(), made on the first measure (not at import: what the CLI imports is paid at each start)."""


def measure(payload: bytes, limit: PayloadLimit, frame_type: int) -> None:
    """Raise FrameTooLarge if ``payload`` holds more msgpack objects, or nests deeper, than ``limit``, by
    reading its structure from the start without building anything (so at most ``limit.objects`` steps).
    It stops quietly where the structure ends or breaks (a byte no value starts with, the payload's end):
    decoding then reports what is wrong with it (``bad_payload``)."""
    global _formats
    formats = _formats or (_formats := _format_table())
    n, pos, objects = len(payload), 0, 0
    most, deepest = limit.objects, limit.depth
    outer: list[int] = []  # the items still to come in each enclosing container
    todo = 1  # the items still to come at this level: the payload's one value
    while True:
        if not todo:
            if not outer:
                return
            todo = outer.pop()
            continue
        if pos >= n:
            return
        todo -= 1
        objects += 1
        if objects > most:
            raise FrameTooLarge(f"payload holds more than {most} msgpack objects", frame_type)
        kind, header, width, per = formats[payload[pos]]
        if kind == _SCALAR:
            pos += header
            continue
        if kind == _INVALID or pos + header > n:
            return
        count = int.from_bytes(payload[pos + 1:pos + 1 + width], "big") if width else payload[pos] & 0x0F
        pos += header
        if kind == _SIZED:
            pos += count
            continue
        if len(outer) + 1 > deepest:
            raise FrameTooLarge(f"payload nests deeper than {deepest} maps or arrays", frame_type)
        if count:
            outer.append(todo)
            todo = count * per


# --------------------------------------------------------------------------------------------- encode


def bare_signal(name: object) -> str | None:
    """The SIGNALS entry a SIGNAL frame's name means ("kill", "SIGKILL" -> "KILL"), or None."""
    if not isinstance(name, str):
        return None
    bare = bare_name(name)
    return bare if bare in SIGNALS else None


def check_fields(frame: Frame) -> None:
    """Raise BadField unless every field of ``frame`` has a value its wire kind allows: what the peer's decoder
    checks, applied before sending, so a client's mistake is its own error and not a fatal ERROR that costs the
    connection. DATA is raw bytes and not checked here."""
    if isinstance(frame, Data):
        return
    for f in structs.fields(frame):
        value = getattr(frame, f.name)
        if value is None and f.metadata["nullable"]:
            continue
        if not _check_kind(f.metadata["kind"], value):
            key = f.metadata["key"] or f.name
            want = _KIND_WORDS[f.metadata["kind"]] + (" or nil" if f.metadata["nullable"] else "")
            # quote_peer: a map (SPAWN's env) is named by its type and size, never shown
            raise BadField(f"field {key!r} must be {want}, got {quote_peer(value)}", frame.TYPE, key)


def check_request(frame: Frame) -> None:
    """The ranges a shellper holds HELLO's size, RESIZE and STOP to (a violation is a fatal bad_field). Pure, so a
    client can apply the same rules before it sends, and keep its connection."""
    if isinstance(frame, Hello) and (frame.cols is not None or frame.rows is not None):
        if frame.cols is None or frame.rows is None:
            raise BadField("cols and rows come together", frame.TYPE, "cols" if frame.cols is None else "rows")
        for name in ("cols", "rows"):
            if not terminal_size_in_range(getattr(frame, name), 1):
                raise BadField(f"{name}: size {frame.cols}x{frame.rows} is outside {TERMINAL_SIZE_RANGE}", frame.TYPE,
                               name)
    elif isinstance(frame, Resize):
        for name in ("cols", "rows"):
            value = getattr(frame, name)
            if not terminal_size_in_range(value, 1):
                raise BadField(f"{name}: size {frame.cols}x{frame.rows} is outside {TERMINAL_SIZE_RANGE}", frame.TYPE,
                               name)
    elif isinstance(frame, ScreenRequest) and frame.format not in SCREEN_FORMATS:
        raise BadField(f"format {frame.format!r} is not one of {', '.join(SCREEN_FORMATS)}", frame.TYPE, "format")
    elif isinstance(frame, Stop) and frame.grace is not None:
        grace = frame.grace
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not (math.isfinite(grace) and grace >= 0):
            raise BadField(f"grace {grace!r} must be a finite number >= 0", frame.TYPE, "grace")
    if isinstance(frame, Hello | Spawn):  # the two a caller fills as it likes: held to the shellper's limits
        _check_limit(frame)


def _check_limit(frame: Hello | Spawn) -> None:
    limit = SESSION_LIMITS[frame.TYPE]
    try:
        payload = _pack(frame.to_map())
    except (TypeError, ValueError):
        return  # a field of the wrong type: check_fields (or the shellper's decoder) says which
    field_name, what = ("client", "HELLO") if isinstance(frame, Hello) else (None, "SPAWN's argv and env")
    if len(payload) > limit.size:
        raise BadField(f"{what} would take {len(payload)} bytes, more than the {limit.size} a shellper accepts",
                       frame.TYPE, field_name)
    try:
        measure(payload, limit, frame.TYPE)
    except FrameTooLarge as exc:
        raise BadField(f"{what}: {exc.detail}, more than a shellper accepts", frame.TYPE, field_name) from None


def encode(frame: Frame) -> bytes:
    """The bytes of one frame. Raises FrameTooLarge past the 32-bit length field."""
    payload = frame.data if isinstance(frame, Data) else _pack(frame.to_map())
    if len(payload) > 0xFFFFFFFF:
        raise FrameTooLarge(f"payload of {len(payload)} bytes does not fit a frame", frame.TYPE)
    return HEADER.pack(frame.TYPE, len(payload)) + payload


def encode_data(data: bytes | bytearray | memoryview) -> bytes:
    """A DATA frame without building a Data object: the hot path."""
    return HEADER.pack(FrameType.DATA, len(data)) + data


def _pack(payload: dict[str, Any]) -> bytes:
    return msgpack.packb(payload, use_bin_type=True)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------- decode


def decode_payload(frame_type: int, payload: bytes, limit: PayloadLimit | None = None) -> Frame:
    """Build the frame object for a known type from its payload (empty control payload = empty map).
    With ``limit``, a payload holding more objects or nesting deeper is FrameTooLarge, before decoding."""
    cls = FRAME_CLASSES[frame_type]
    if cls is Data:
        return Data(payload)
    if not payload:
        mapping: Any = {}
    else:
        if limit is not None and limit.objects and len(payload) > min(limit.objects, limit.depth):
            measure(payload, limit, frame_type)  # (each object and each level takes a byte: a PING needs no count)
        try:
            mapping = msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True,
                                      object_pairs_hook=_str_keyed_map)
        except _NonStringKey:
            raise BadPayload("map keys must be strings, at every depth", frame_type) from None
        except Exception as exc:  # msgpack raises several types (ExtraData, FormatError, ValueError, ...)
            raise BadPayload(f"payload is not valid msgpack ({type(exc).__name__})", frame_type) from None
        if not isinstance(mapping, dict):
            raise BadPayload(f"payload must be a msgpack map, got {type(mapping).__name__}", frame_type)
    return cls.from_map(mapping)


class _NonStringKey(ShellperError):
    """Raised inside msgpack's map hook; turned into BadPayload by decode_payload."""


def _str_keyed_map(pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    """Every map in a payload, at any depth, has string keys (PROTOCOL.md section 3): checked on the pairs,
    before any key is hashed, so a key msgpack cannot hash (a map, an array) is refused the same way."""
    for key, _value in pairs:
        if type(key) is not str:
            raise _NonStringKey
    return dict(pairs)


class Decoder:
    """Incremental frame decoder: feed bytes in any fragmentation, take frames out.

    Memory is bounded by ``max_frame`` plus what one ``feed`` call hands in: an oversized frame is
    discarded as it arrives. A bad frame raises after it has been consumed, so a caller that wants to
    carry on may; the shellper closes that client instead.

    ``limits`` (the shellper's: HANDSHAKE_LIMITS, SESSION_LIMITS) gives each type code its own
    PayloadLimit instead of ``max_frame``; a caller may switch them between frames.
    """

    def __init__(self, max_frame: int = MAX_FRAME_SIZE, limits: tuple[PayloadLimit, ...] | None = None) -> None:
        self.max_frame = max_frame
        self.limits = limits
        self._buf = bytearray()
        self._pos = 0
        self._skip = 0
        self._skip_type = 0

    @property
    def buffered(self) -> int:
        """Bytes held, waiting for the rest of a frame."""
        return len(self._buf) - self._pos

    def sole_data(self, chunk: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview | None:
        """The payload, if nothing is buffered and ``chunk`` is exactly one whole non-empty DATA frame:
        a keystroke or its echo, the common case, which then skips ``feed`` and ``events``. None
        otherwise, and nothing is consumed: feed the chunk as usual."""
        n = len(chunk) - HEADER_SIZE
        if n <= 0 or chunk[0] != _DATA_TYPE or self._skip or self._pos != len(self._buf):
            return None
        limit = self.max_frame if self.limits is None else self.limits[_DATA_TYPE].size
        if int.from_bytes(chunk[1:HEADER_SIZE], "big") != n or n > limit:
            return None
        return chunk[HEADER_SIZE:]

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._skip:
            drop = min(self._skip, len(data))
            self._skip -= drop
            data = memoryview(data)[drop:]
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def next_event(self) -> DecodedEvent | None:
        """The next complete frame (or Skipped/Unknown marker), or None until more bytes arrive."""
        buf = self._buf
        avail = len(buf) - self._pos
        if avail < HEADER_SIZE:
            return None
        frame_type, length = HEADER.unpack_from(buf, self._pos)
        limits = self.limits
        limit = None if limits is None else limits[frame_type]
        most = self.max_frame if limit is None else limit.size
        if length > most:
            self._pos += HEADER_SIZE
            drop = min(length, len(buf) - self._pos)
            self._pos += drop
            self._skip = length - drop
            self._skip_type = frame_type
            self._compact()
            return Skipped(frame_type, length, most)
        if avail < HEADER_SIZE + length:
            self._compact()
            return None
        start = self._pos + HEADER_SIZE
        self._pos = start + length
        if frame_type not in FRAME_CLASSES:
            self._compact()
            return Unknown(frame_type, length)
        with memoryview(buf) as view:  # one copy of the payload, not two (a slice of buf, then bytes)
            payload = bytes(view[start:start + length])
        self._compact()
        return decode_payload(frame_type, payload, limit)

    def events(self) -> Iterator[DecodedEvent]:
        """Every complete event now buffered."""
        while (event := self.next_event()) is not None:
            yield event

    def close(self) -> None:
        """The stream ended: complain if it ended inside a frame."""
        remaining = self.buffered + self._skip
        if remaining:
            frame_type = self._buf[self._pos] if self.buffered else self._skip_type
            raise TruncatedFrame(
                f"stream ended inside a frame: {remaining} bytes missing or unparsed", frame_type
            )

    def _compact(self) -> None:
        # Drop consumed bytes once they dominate the buffer: amortised O(1) per byte.
        if self._pos > 65536 and self._pos * 2 > len(self._buf):
            del self._buf[:self._pos]
            self._pos = 0


def decode_all(data: bytes, max_frame: int = MAX_FRAME_SIZE) -> list[DecodedEvent]:
    """Decode a complete byte string; raises TruncatedFrame if it ends inside a frame."""
    decoder = Decoder(max_frame)
    decoder.feed(data)
    events = list(decoder.events())
    decoder.close()
    return events
