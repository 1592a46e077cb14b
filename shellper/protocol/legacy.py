"""Protocol version 1, the TypeScript original's wire, as a pure codec and its rules as tables.

The framing is version 2's (``[type][4-byte big-endian length][payload]``, the same type numbers), but
every control payload is compact JSON with the original's field names, and the original's rules hold:
frames before HELLO are ignored, a HELLO without ``clientType`` is a tower's, only a tower may SIGNAL
(one of five numbers) and SPAWN, unknown and oversized frames are dropped without a word (the original
had no ERROR frame). ``docs/LEGACY.md`` says what a version-1 client gets and what it does not.

A connection is version 1 if its first frame is a control frame whose payload is a JSON object
(:func:`first_frame_is_legacy`, in shellper.protocol.firstframe so that telling needs none of this module).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from enum import IntEnum

from shellper.core.errors import ShellperError
from shellper.core.peertext import quote_peer
from shellper.core.signals import signal_number
from shellper.core.structs import record
from shellper.protocol.firstframe import HEADER as HEADER
from shellper.protocol.firstframe import HEADER_SIZE as HEADER_SIZE
from shellper.protocol.firstframe import MAX_FRAME_SIZE as MAX_FRAME_SIZE
from shellper.protocol.firstframe import first_frame_is_legacy as first_frame_is_legacy
from shellper.protocol.wire import CONTROL_LIMIT, HELLO_LIMIT, SPAWN_LIMIT, FrameType, PayloadLimit, Role

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any

LEGACY_VERSION = 1
REPLAY_PAYLOAD_MAX = 8 * 1024 * 1024
"""The most output bytes one REPLAY carries: the newest ones."""
SPAWN_FAILED_CODE = 1
"""EXIT's ``code`` for a command that never ran: node-pty forks, the exec (or chdir) fails in the child, and
the child exits 1, so the original sent ``{code: 1, signal: "0"}``."""
GRACE = 2.0
"""Seconds a legacy session's child has between SIGTERM and SIGKILL (on SPAWN and on the shellper's SIGTERM):
the original's Tower SIGKILLs the shellper 5 s after its SIGTERM, and the session must be cleaned up by then
even when the child ignores SIGTERM, as an interactive shell does."""
MARKER = "shellper-main.js"
"""What a Tower's process scanners look for in a shellper's command line (original.md section 8)."""

ALLOWED_SIGNALS: dict[int, str] = {1: "HUP", 2: "INT", 9: "KILL", 15: "TERM", 28: "WINCH"}
"""The numbers a tower may SIGNAL, and the name each is sent as."""


class LegacyAction(IntEnum):
    """What the shellper does with a frame from a version-1 client after its HELLO."""

    IGNORE = 0
    INPUT = 1
    RESIZE = 2
    SIGNAL = 3
    SPAWN = 4
    PONG = 5


RIGHTS: dict[tuple[Role, int], LegacyAction] = {
    **{(client, FrameType.DATA): LegacyAction.INPUT for client in (Role.TOWER, Role.TERMINAL)},
    **{(client, FrameType.RESIZE): LegacyAction.RESIZE for client in (Role.TOWER, Role.TERMINAL)},
    **{(client, FrameType.PING): LegacyAction.PONG for client in (Role.TOWER, Role.TERMINAL)},
    (Role.TOWER, FrameType.SIGNAL): LegacyAction.SIGNAL,
    (Role.TOWER, FrameType.SPAWN): LegacyAction.SPAWN,
}
"""(kind of client, frame type) -> action; anything not here is ignored silently (a terminal's SIGNAL or
SPAWN, a second HELLO, the shellper's own frame types, unknown types)."""


def action_for(client_kind: Role, frame_type: int) -> LegacyAction:
    return RIGHTS.get((client_kind, frame_type), LegacyAction.IGNORE)


def client_kind(client_type: str) -> Role:
    """Exactly ``tower`` is a tower; any other clientType has a terminal's (restricted) rights."""
    return Role.TOWER if client_type == Role.TOWER else Role.TERMINAL


class LegacyError(ShellperError):
    """A version-1 payload that cannot be used; the message is what the log says after "Protocol error: "."""


# --------------------------------------------------------------------------------------------- framing


def encode(frame_type: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(frame_type, len(payload)) + payload


def encode_json(frame_type: int, value: dict[str, Any]) -> bytes:
    """A control frame, its payload serialised as JavaScript's JSON.stringify does (compact)."""
    return encode(frame_type, json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


@record(frozen=True)
class RawFrame:
    frame_type: int
    payload: bytes


@record(frozen=True)
class SkippedFrame:
    """A frame whose declared length is over MAX_FRAME_SIZE: its payload was discarded as it arrived."""

    frame_type: int
    length: int


class FrameReader:
    """The original's streaming parser: any fragmentation, oversized frames skipped, unknown types passed on.

    ``limits`` (the shellper's: wire.HANDSHAKE_LIMITS before the HELLO, then wire.SESSION_LIMITS) gives each type its
    own size instead of ``max_frame``: a frame over it is oversized, skipped unread as the original skipped those over
    16 MiB. A caller may switch them between frames."""

    def __init__(self, max_frame: int = MAX_FRAME_SIZE, limits: tuple[PayloadLimit, ...] | None = None) -> None:
        self.max_frame = max_frame
        self.limits = limits
        self._buf = bytearray()
        self._skip = 0

    @property
    def buffered(self) -> int:
        """Bytes held of an unfinished frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[RawFrame | SkippedFrame]:
        if self._skip:
            drop = min(self._skip, len(data))
            self._skip -= drop
            data = memoryview(data)[drop:]
        self._buf += data
        pos = 0
        buf = self._buf
        try:
            while len(buf) - pos >= HEADER_SIZE:
                frame_type, length = HEADER.unpack_from(buf, pos)
                if length > (self.max_frame if self.limits is None else self.limits[frame_type].size):
                    pos += HEADER_SIZE
                    drop = min(length, len(buf) - pos)
                    pos += drop
                    self._skip = length - drop
                    yield SkippedFrame(frame_type, length)
                    continue
                if len(buf) - pos < HEADER_SIZE + length:
                    break
                start = pos + HEADER_SIZE
                pos = start + length
                yield RawFrame(frame_type, bytes(buf[start:pos]))
        finally:
            del buf[:pos]

    def close(self) -> None:
        """The stream ended: raise LegacyError if it ended inside a frame."""
        remaining = len(self._buf) + self._skip
        if remaining:
            raise LegacyError(f"Incomplete frame: {remaining} bytes remaining at end of stream")


# --------------------------------------------------------------------------------------------- payloads


def parse_json_payload(payload: bytes, what: str, most: int = CONTROL_LIMIT.objects) -> dict[str, Any]:
    """A JSON object, or LegacyError("Invalid <what> payload").

    Held to ``most`` values, version 2's count for the frame's type (wire.CONTROL_LIMIT, HELLO_LIMIT, SPAWN_LIMIT),
    counted from above without parsing: every value but the first is after a comma or a colon, or opens a
    container (those characters inside strings are counted too, so a payload can only be overcounted). A one-byte
    JSON value can cost Python 50 bytes; nesting too deep for the parser is the same error."""
    if len(payload) > most and sum(payload.count(c) for c in (b",", b":", b"[", b"{")) >= most:
        raise LegacyError(f"Invalid {what} payload")
    try:
        value = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nested deeper than json parses
        raise LegacyError(f"Invalid {what} payload") from None
    if not isinstance(value, dict):
        raise LegacyError(f"Invalid {what} payload")
    return value


@record(frozen=True)
class Hello:
    version: Any
    """Logged, never checked (as the original)."""
    client_type: str


def parse_hello(payload: bytes) -> Hello:
    value = parse_json_payload(payload, "HELLO", HELLO_LIMIT.objects)
    client_type = value.get("clientType")
    if not isinstance(client_type, str):  # no clientType: a tower's HELLO
        client_type = Role.TOWER.value
    return Hello(version=value.get("version"), client_type=client_type)


def _number(value: Any) -> bool:
    """A JSON number (Python's json also reads NaN and Infinity, which no size can be)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_resize(payload: bytes) -> tuple[int, int]:
    """``{cols, rows}`` as whole numbers in 1..65535 (the original passed any number to node-pty; a PTY
    holds only that range, so a number outside it is brought into it)."""
    value = parse_json_payload(payload, "RESIZE")
    cols, rows = value.get("cols"), value.get("rows")
    if not (_number(cols) and _number(rows)):
        raise LegacyError("Invalid RESIZE payload")
    return _dimension(cols), _dimension(rows)


def _dimension(n: Any) -> int:
    return max(1, min(65535, int(n)))


def parse_signal(payload: bytes) -> int:
    value = parse_json_payload(payload, "SIGNAL")
    signum = value.get("signal")
    if not isinstance(signum, int) or isinstance(signum, bool):
        raise LegacyError("Invalid SIGNAL payload")
    return signum


@record(frozen=True)
class SpawnRequest:
    argv: list[str]
    cwd: str
    env: dict[str, str]


def parse_spawn(payload: bytes) -> SpawnRequest:
    value = parse_json_payload(payload, "SPAWN", SPAWN_LIMIT.objects)
    command, args, cwd, env = (value.get(k) for k in ("command", "args", "cwd", "env"))
    if args is None:
        args = []
    if not (isinstance(command, str) and command and isinstance(cwd, str) and isinstance(args, list)
            and all(isinstance(a, str) for a in args) and isinstance(env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise LegacyError("Invalid SPAWN payload")
    return SpawnRequest(argv=[command, *args], cwd=cwd, env=dict(env))


def welcome(*, child_pid: int | None, cols: int, rows: int, start_ms: int, last_data_ms: int) -> bytes:
    """WELCOME: ``pid`` is the child's (-1 when none runs), ``startTime`` the shellper's start (epoch ms)."""
    return encode_json(FrameType.WELCOME, {
        "version": LEGACY_VERSION, "pid": -1 if child_pid is None else child_pid, "cols": cols, "rows": rows,
        "startTime": start_ms, "lastDataAt": last_data_ms, "alwaysSendsReplay": True})


def exit_payload(code: int | None, signal: str | None, *, spawned: bool = True) -> dict[str, Any]:
    """EXIT as node-pty reported it: a normal exit is ``{code: N, signal: "0"}``, a death by signal
    ``{code: 0, signal: "9"}`` (the signal as a decimal string); a command that never ran is the exit of
    node-pty's forked child whose exec failed, ``{code: SPAWN_FAILED_CODE, signal: "0"}``."""
    if not spawned:
        return {"code": SPAWN_FAILED_CODE, "signal": "0"}
    signum = signal_number(signal) if signal else None
    if signum is not None:
        return {"code": 0, "signal": str(signum)}
    return {"code": 0 if code is None else code, "signal": "0"}


def encode_exit(code: int | None, signal: str | None, *, spawned: bool = True) -> bytes:
    return encode_json(FrameType.EXIT, exit_payload(code, signal, spawned=spawned))


# --------------------------------------------------------------------------------------------- launch


@record(frozen=True)
class LaunchConfig:
    """The original's launch config: ``{command, args, cwd, env, cols, rows, socketPath}`` and the
    optional ``replayBufferLines`` / ``replayBufferBytes``."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    cols: int
    rows: int
    socket_path: str
    replay_lines: int | None = None
    replay_bytes: int | None = None

    @property
    def directory(self) -> str:
        return os.path.dirname(os.path.abspath(self.socket_path))

    @property
    def session_name(self) -> str:
        """The session's name: the socket's file name without ``.sock`` (``shellper-<id>.sock`` ->
        ``shellper-<id>``), so the session's socket, record, lock and log sit beside each other as the
        original's socket and log did. Raises LegacyError if the path has no such name."""
        base = os.path.basename(self.socket_path)
        if not base.endswith(".sock") or len(base) == len(".sock"):
            raise LegacyError(f"Invalid config: socketPath {self.socket_path!r} must end in <name>.sock")
        return base[:-len(".sock")]


def parse_launch_config(text: str) -> LaunchConfig:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json parses
        raise LegacyError("Invalid JSON config") from None
    if not isinstance(value, dict):
        raise LegacyError("Invalid JSON config")

    def need(key: str, ok: bool, what: str | None = None) -> None:
        """The numbers are quoted (bounded); the strings, lists and objects are described, never quoted:
        this lands in the log, and ``env`` and ``args`` are where a Tower puts the child's secrets."""
        if not ok:
            raise LegacyError(f"Invalid config: {key} {quote_peer(value.get(key)) if what is None else what}")

    command, args, cwd, env = (value.get(k) for k in ("command", "args", "cwd", "env"))
    args = [] if args is None else args
    env = {} if env is None else env
    need("command", isinstance(command, str) and bool(command), "must be a non-empty string")
    need("args", isinstance(args, list) and all(isinstance(a, str) for a in args), "must be an array of strings")
    need("cwd", isinstance(cwd, str) and bool(cwd), "must be a non-empty string")
    need("env", isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()),
         "must be an object of strings")
    need("socketPath", isinstance(value.get("socketPath"), str) and bool(value.get("socketPath")))
    sizes = {}
    for key, default in (("cols", 80), ("rows", 24)):
        n = value.get(key, default)
        need(key, _number(n) and 1 <= n <= 65535)
        sizes[key] = int(n)
    optional: dict[str, int | None] = {}
    for key in ("replayBufferLines", "replayBufferBytes"):
        n = value.get(key)
        need(key, n is None or (_number(n) and n > 0))
        optional[key] = None if n is None else int(n)
    assert isinstance(command, str) and isinstance(cwd, str)
    return LaunchConfig(argv=[command, *args], cwd=cwd, env=dict(env), cols=sizes["cols"], rows=sizes["rows"],
                        socket_path=value["socketPath"], replay_lines=optional["replayBufferLines"],
                        replay_bytes=optional["replayBufferBytes"])


def ready_line(pid: int, start_ms: int) -> bytes:
    """What the launcher reads from stdout before it closes: ``{"pid":<shellper pid>,"startTime":<ms>}``."""
    return json.dumps({"pid": pid, "startTime": start_ms}, separators=(",", ":")).encode()
