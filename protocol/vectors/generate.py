#!/usr/bin/env python3
"""Regenerate the golden vectors (frames.json, invalid.json) from the cases declared below.

The files exist so that a second implementation can test itself without running Python: every
case spells out the frame and the exact bytes. Expected outcomes of the stream cases are declared
by hand here, never computed by the codec, so tests/unit/test_wire.py checks the codec against them.

    python3 protocol/vectors/generate.py            # rewrite the files
    python3 protocol/vectors/generate.py --check    # exit 1 if the files are out of date
    python3 protocol/vectors/generate.py --example  # print the hex dump used in PROTOCOL.md
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

import msgpack  # noqa: E402

from shellper.core import structs  # noqa: E402
from shellper.protocol.wire import (  # noqa: E402
    FRAME_CLASSES,
    HEADER,
    MAX_FRAME_SIZE,
    Data,
    DecodedEvent,
    Error,
    Event,
    Exit,
    Frame,
    FrameType,
    Gap,
    Hello,
    Labels,
    Ping,
    Pong,
    Release,
    Replay,
    Reply,
    Resize,
    ScreenReply,
    ScreenRequest,
    Signal,
    Skipped,
    Spawn,
    Status,
    StatusReply,
    Stop,
    Unknown,
    Welcome,
    encode,
)

FRAMES_PATH = HERE / "frames.json"
INVALID_PATH = HERE / "invalid.json"

# --------------------------------------------------------------------------------------------- JSON form


def to_json(value: Any) -> Any:
    """JSON form of a decoded msgpack value: binary becomes {"hex": "..."}, a float {"float": x} (JSON cannot
    tell 2 from 2.0; msgpack can); order of map keys is kept."""
    if isinstance(value, bytes | bytearray):
        return {"hex": bytes(value).hex()}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value


def from_json(value: Any) -> Any:
    """Inverse of to_json: an object whose only key is "hex" is binary, one whose only key is "float" a float."""
    if isinstance(value, dict):
        if list(value) == ["hex"] and isinstance(value["hex"], str):
            return bytes.fromhex(value["hex"])
        if list(value) == ["float"] and isinstance(value["float"], int | float):
            return float(value["float"])
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def frame_to_json(frame: Frame) -> dict[str, Any]:
    return {"type": frame.TYPE.name, "code": int(frame.TYPE), "fields": to_json(frame.to_map())}


def frame_from_json(obj: dict[str, Any]) -> Frame:
    """Build the frame a JSON case describes, field by field (wire keys mapped to attribute names)."""
    cls = FRAME_CLASSES[obj["code"]]
    if cls.TYPE.name != obj["type"]:
        raise ValueError(f"type {obj['type']!r} does not match code {obj['code']}")
    by_key = {f.metadata["key"] or f.name: f.name for f in structs.fields(cls)}
    fields = from_json(obj["fields"])
    unknown = set(fields) - set(by_key)
    if unknown:
        raise ValueError(f"{cls.TYPE.name} has no fields {sorted(unknown)}")
    return cls(**{by_key[k]: v for k, v in fields.items()})


def event_to_json(event: DecodedEvent) -> dict[str, Any]:
    if isinstance(event, Skipped):
        return {"kind": "skipped", "frame_type": event.frame_type, "length": event.length}
    if isinstance(event, Unknown):
        return {"kind": "unknown", "frame_type": event.frame_type, "length": event.length}
    return {"kind": "frame", **frame_to_json(event)}


def event_from_json(obj: dict[str, Any]) -> DecodedEvent:
    if obj["kind"] == "skipped":
        return Skipped(obj["frame_type"], obj["length"])
    if obj["kind"] == "unknown":
        return Unknown(obj["frame_type"], obj["length"])
    return frame_from_json(obj)


def stream_from_json(case: dict[str, Any]) -> bytes:
    """The input bytes of an invalid.json case: "hex", or "hex_parts" for streams too big to spell out."""
    if "hex" in case:
        return bytes.fromhex(case["hex"])
    out = bytearray()
    for part in case["hex_parts"]:
        if "repeat" in part:
            out += bytes.fromhex(part["repeat"]) * part["count"]
        else:
            out += bytes.fromhex(part["hex"])
    return bytes(out)


# --------------------------------------------------------------------------------------------- frames.json

EXIT_CRASH = Exit(
    code=None, signal="SIGSEGV", core=True, uptime=12.5, exit_class="crash",
    reason="killed by SIGSEGV (core dumped)", state="backoff", child_pid=4243, time=1767225600.25,
    restart_in=2.0, stderr_tail="Segmentation fault\n",
)
EXIT_RECORD = EXIT_CRASH.exit_record().to_wire()
"""The exit record as WELCOME and EVENT carry it: all fourteen keys (PROTOCOL.md 6.2)."""
BOOT_ID = "0d6ec1b5-6a4e-4b0e-9c36-3f1f8a2b7c11"
INSTANCE_ID = "9f2c4e61b0a84d7c8e5f1a3b2c4d6e8f"
ALL_BYTES = bytes(range(256))
BIG = 2**63 + 5
U64_MAX = 2**64 - 1

FRAME_CASES: list[tuple[str, Frame]] = [
    ("DATA empty", Data(b"")),
    ("DATA text", Data(b"hello\r\n")),
    ("DATA all 256 byte values", Data(ALL_BYTES)),
    ("DATA utf-8 and escapes", Data("\x1b[1mh\u00e9llo \u2713 \U0001f389\x1b[0m".encode())),
    ("RESIZE 80x24", Resize(cols=80, rows=24)),
    ("RESIZE minimum", Resize(cols=1, rows=1)),
    ("RESIZE maximum", Resize(cols=65535, rows=65535)),
    ("SIGNAL plain name", Signal(signal="INT")),
    ("SIGNAL SIG-prefixed", Signal(signal="SIGTERM")),
    ("EXIT all fields (crash by signal)", EXIT_CRASH),
    ("EXIT minimal (code 0, signal nil, nil optionals left out)", Exit(
        code=0, signal=None, exit_class="clean", reason="exited with code 0", state="exited", time=1767225600.0,
    )),
    ("EXIT negative code, unicode reason", Exit(
        code=-1, signal=None, core=False, uptime=0.001, exit_class="permanent",
        reason="exec failed: \u00abno such file\u00bb /opt/\u00e9t\u00e9/bin", state="fatal",
        child_pid=None, time=1767225600.0, restart_in=None, stderr_tail="",
    )),
    ("EXIT requested on STOP", Exit(
        code=None, signal="SIGTERM", core=False, uptime=3600.0, exit_class="requested",
        reason="stopped on request", state="stopping", child_pid=77, time=1767229200.5,
    )),
    ("REPLAY minimal (empty at 0)", Replay(offset=0)),
    ("REPLAY with data", Replay(offset=1024, data=b"$ ls\r\nREADME\r\n$ ")),
    ("REPLAY with preamble and gap", Replay(
        offset=8388608, data=b"\x1b[2J\x1b[Hok\r\n", gap=4096,
        preamble=b"\x1b[?1049h\x1b[?25l\x1b[?2004h\x1b]2;build\x07",
    )),
    ("REPLAY large uint64 offset", Replay(offset=BIG, data=b"x", gap=BIG - 1)),
    ("REPLAY maximum uint64 offset", Replay(offset=U64_MAX)),
    ("PING without nonce", Ping()),
    ("PING with nonce", Ping(nonce=7)),
    ("PING negative nonce", Ping(nonce=-123456)),
    ("PING uint64 nonce", Ping(nonce=U64_MAX)),
    ("PONG without nonce", Pong()),
    ("PONG with nonce", Pong(nonce=7)),
    ("HELLO minimal", Hello(version=2, role="tower")),
    ("HELLO all fields", Hello(
        version=2, role="terminal", resume_from=BIG, replay_bytes=65536, events_after=17,
        client="tower-client/0.1",
    )),
    ("HELLO viewer, unicode client",
     Hello(version=2, role="viewer", events_after=0, client="\u89c2\u5bdf\u8005 \U0001f440")),
    ("HELLO newer client version", Hello(version=3, role="tower", replay_bytes=0)),
    ("HELLO asking for the rendered screen (version 3)",
     Hello(version=3, role="terminal", client="shellper-attach", terminal=True, detach_byte=0x1C, rendered=1000)),
    ("HELLO handing over a terminal (the fd rides as SCM_RIGHTS)",
     Hello(version=2, role="terminal", replay_bytes=1048576, client="shellper-attach", terminal=True,
           detach_byte=0x1C)),
    ("WELCOME minimal", Welcome(
        version=2, name="s", shellper_pid=1, shellper_start_time=0, boot_id=BOOT_ID,
        instance_id=INSTANCE_ID, state="starting", cols=80, rows=24, ring_start=0, ring_end=0,
    )),
    ("WELCOME all fields", Welcome(
        version=2, name="build-\u00e9", shellper_pid=4242, shellper_start_time=123456789,
        boot_id=BOOT_ID, instance_id=INSTANCE_ID, state="backoff", cols=120, rows=40, ring_start=BIG,
        ring_end=BIG + 8388608, child_pid=None, state_reason="restarting in 2.0 s after crash",
        last_output_at=1767225600.125, exit=EXIT_RECORD, event_seq=42, role="viewer", min_version=2,
        max_frame=MAX_FRAME_SIZE, terminal=True,
    )),
    ("SPAWN minimal", Spawn()),
    ("SPAWN all fields", Spawn(
        argv=["claude", "--resume", "\u00e9t\u00e9 \U0001f680"], cwd="/home/u/\u9879\u76ee",
        env={"LANG": "C.UTF-8", "TERM": "xterm-256color", "EMPTY": ""}, clear_ring=True,
    )),
    ("SPAWN empty env", Spawn(env={}, clear_ring=False)),
    ("ERROR minimal", Error(code="internal", message="")),
    ("ERROR all fields", Error(
        code="bad_field", message="RESIZE frame: field 'cols' must be an unsigned integer, got str",
        frame_type=2, fatal=True,
    )),
    ("ERROR unicode message", Error(code="bad_signal", message="signal \u00abSEGV\u00bb is not allowed")),
    ("EVENT minimal", Event(seq=1, kind="spawned")),
    ("EVENT spawned", Event(seq=1, kind="spawned", time=1767225600.0,
                            data={"child_pid": 4243, "argv": ["bash", "-l"]})),
    ("EVENT exited", Event(seq=2, kind="exited", time=1767225612.5, data=EXIT_RECORD)),
    ("EVENT restart_scheduled", Event(seq=3, kind="restart_scheduled", time=1767225612.5,
                                      data={"delay": 2.0, "at": 1767225614.5})),
    ("EVENT gave_up", Event(seq=4, kind="gave_up", time=1767225700.0,
                            data={"reason": "5 crashes in 60 s with the same last line"})),
    ("EVENT client_attached", Event(seq=5, kind="client_attached", time=1767225701.0,
                                    data={"client_id": 3, "role": "terminal", "client": "afx-attach"})),
    ("EVENT client_detached", Event(seq=6, kind="client_detached", time=1767225702.0,
                                    data={"client_id": 3, "role": "terminal", "reason": "closed"})),
    ("EVENT resized", Event(seq=7, kind="resized", time=1767225703.0, data={"cols": 100, "rows": 30})),
    ("EVENT note (a shellper note in the output stream, PROTOCOL.md 8.5)",
     Event(seq=8, kind="note", time=1767225612.5,
           data={"offset": 4096, "length": 68, "text": "child exit 3; restarting in 0.5 s (restart 1)"})),
    ("EVENT events_missed", Event(seq=0, kind="events_missed", time=1767225704.0,
                                  data={"from": 1, "to": 1041})),
    ("EVENT unknown kind", Event(seq=BIG, kind="from_the_future", data={"x": [1, "two", None, True]})),
    ("STATUS", Status()),
    ("STATUS_REPLY minimal", StatusReply(state="running")),
    ("STATUS_REPLY with info", StatusReply(state="exited", info={
        "child_pid": None, "ring_start": 0, "ring_end": BIG, "event_seq": 9, "output_held": False,
        "last_exit": EXIT_CRASH.exit_record().to_wire(), "clients": 2, "restarts": 1,
    })),
    ("STOP default grace", Stop()),
    ("STOP grace", Stop(grace=2.5)),
    ("STOP grace 0: a float field is float 64 even when whole", Stop(grace=0)),
    ("GAP", Gap(offset=1_048_576, missed=524_288)),
    ("GAP large offsets", Gap(offset=BIG, missed=BIG - 1)),
    ("RELEASE minimal", Release(reason="closing")),
    ("RELEASE after detach", Release(reason="detach", reset=b"\x1b[?1049l\x1b[?25h", offset=BIG)),
    ("SCREEN minimal", ScreenRequest()),
    ("SCREEN with id, ansi, scrollback", ScreenRequest(id=7, format="ansi", scrollback=100)),
    ("SCREEN_REPLY minimal", ScreenReply(offset=0, cols=80, rows=24)),
    ("SCREEN_REPLY text", ScreenReply(offset=BIG, cols=20, rows=3, lines=["$ vim notes", "", "日本"], cursor_x=2,
                                      cursor_y=2, title="notes", scrollback=["earlier line"], id=7)),
    ("SCREEN_REPLY ansi, alternate screen, cursor hidden",
     ScreenReply(offset=42, cols=10, rows=2, lines=["\x1b[0;1;31mred\x1b[0m", ""], cursor_visible=False,
                 alternate=True, format="ansi")),
]

REPLY_FRAME_CASES: list[tuple[str, Frame]] = [
    # version 3: requests with an id, and their answers
    ("RESIZE with id (version 3)", Resize(cols=80, rows=24, id=1)),
    ("SIGNAL with id (version 3)", Signal(signal="TERM", id=2)),
    ("SPAWN with id (version 3)", Spawn(argv=["bash", "-l"], id=3)),
    ("STOP with id (version 3)", Stop(grace=2.5, id=4)),
    ("STATUS with id (version 3)", Status(id=5)),
    ("LABELS minimal", Labels()),
    ("LABELS set and remove, with id (version 3)", Labels(set={"team": "infra", "task": ""}, id=9)),
    ("STATUS_REPLY with id (version 3)", StatusReply(state="running", info={"child_pid": 4243}, id=5)),
    ("REPLY ok to RESIZE", Reply(id=1, frame_type=2, ok=True, result={"cols": 80, "rows": 24})),
    ("REPLY ok to SIGNAL", Reply(id=2, frame_type=3, ok=True, result={"signal": "SIGTERM", "pid": 4243})),
    ("REPLY ok to SPAWN", Reply(id=3, frame_type=10, ok=True, result={"child_pid": 4250, "argv": ["bash", "-l"]})),
    ("REPLY ok to STOP", Reply(id=4, frame_type=15, ok=True, result={"child_pid": 4250})),
    ("REPLY minimal (ok, nothing to report)", Reply(id=U64_MAX, frame_type=2, ok=True)),
    ("REPLY refusing a SIGNAL", Reply(id=6, frame_type=3, ok=False, code="not_running",
                                      message="the child is not running")),
    ("REPLY refusing a RESIZE out of range", Reply(
        id=7, frame_type=2, ok=False, code="bad_field",
        message="RESIZE frame: cols: size 0x24 is outside 1..65535")),
    ("REPLY refusing a SPAWN while stopping", Reply(id=8, frame_type=10, ok=False, code="stopping",
                                                    message="the session is stopping")),
    # every change of state is an event; attach and detach are live only (seq 0)
    ("EVENT state running", Event(seq=2, kind="state", time=1767225600.0,
                                  data={"state": "running", "previous": "starting", "reason": ""})),
    ("EVENT state backoff", Event(seq=9, kind="state", time=1767225612.5, data={
        "state": "backoff", "previous": "running", "reason": "crash: killed by SIGSEGV (core dumped)",
        "restart_at": 1767225614.5})),
    ("EVENT client_attached, live only", Event(seq=0, kind="client_attached", time=1767225701.0,
                                               data={"client_id": 4, "role": "viewer", "client": "probe"})),
]


def frame_cases() -> list[dict[str, Any]]:
    return [{"name": name, **frame_to_json(frame), "hex": encode(frame).hex()}
            for name, frame in FRAME_CASES + REPLY_FRAME_CASES]


# --------------------------------------------------------------------------------------------- invalid.json


def raw(frame_type: int, payload: bytes) -> bytes:
    """A frame built by hand, bypassing the encoder."""
    return HEADER.pack(frame_type, len(payload)) + payload


def pk(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Repeat:
    """A run of one byte string, so that a 16 MiB stream stays a few bytes in the JSON file."""

    chunk: bytes
    count: int


@dataclass(frozen=True)
class StreamCase:
    name: str
    stream: bytes | list[bytes | Repeat]
    error: str | None = None
    frame_type: int | None = None
    field: str | None = None
    events: tuple[DecodedEvent, ...] = ()
    note: str = ""


PING = encode(Ping(nonce=1))
R = FrameType.RESIZE
H = FrameType.HELLO
HELLO_OK = {"version": 2, "role": "tower"}
EXIT_MINIMAL = {"code": 0, "signal": None, "core": False, "uptime": 0.0, "class": "clean", "reason": "",
                "state": "exited", "time": 5.0, "stderr_tail": ""}
"""The exit record's required keys (PROTOCOL.md 6.2), with the nil optionals left out."""
WELCOME_MIN = {"version": 2, "name": "s", "shellper_pid": 1, "shellper_start_time": 0, "boot_id": BOOT_ID,
               "instance_id": INSTANCE_ID, "state": "exited", "cols": 80, "rows": 24, "ring_start": 0,
               "ring_end": 0}


def without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}

STREAM_CASES: list[StreamCase] = [
    # --- framing
    StreamCase("truncated header (1 byte)", b"\x06", "truncated", 6),
    StreamCase("truncated header (4 bytes)", b"\x06\x00\x00\x00", "truncated", 6),
    StreamCase("truncated payload", PING[:-1], "truncated", 6),
    StreamCase("truncated DATA payload after a full frame", PING + raw(1, b"hello")[:-2], "truncated", 1,
               events=(Ping(nonce=1),)),
    StreamCase("oversized: 16 MiB + 1 declared, skipped, then a PING decodes",
               [HEADER.pack(1, MAX_FRAME_SIZE + 1), Repeat(b"\x00", MAX_FRAME_SIZE + 1), PING],
               events=(Skipped(1, MAX_FRAME_SIZE + 1), Ping(nonce=1)),
               note="the payload is discarded as it arrives; a shellper answers ERROR too_large instead"),
    StreamCase("oversized: stream ends inside the skipped payload",
               HEADER.pack(8, 0xFFFFFFFF) + b"\x00" * 10, "truncated", 8,
               events=(Skipped(8, 0xFFFFFFFF),)),
    StreamCase("unknown type 0x7F skipped, then a PING decodes", raw(0x7F, b"abc") + PING,
               events=(Unknown(0x7F, 3), Ping(nonce=1))),
    StreamCase("unknown type 0x00 with empty payload", raw(0x00, b"") + PING,
               events=(Unknown(0x00, 0), Ping(nonce=1))),
    StreamCase("unknown type 0xFF with a msgpack payload", raw(0xFF, pk({"a": 1})),
               events=(Unknown(0xFF, 4),)),
    StreamCase("several frames in one chunk", PING + encode(Data(b"ab")) + encode(Resize(cols=80, rows=24)),
               events=(Ping(nonce=1), Data(b"ab"), Resize(cols=80, rows=24))),
    # --- payload not a map
    StreamCase("payload is a msgpack array", raw(6, pk([1])), "bad_payload", 6),
    StreamCase("payload is a msgpack int", raw(2, pk(5)), "bad_payload", 2),
    StreamCase("payload is msgpack nil", raw(13, pk(None)), "bad_payload", 13),
    StreamCase("payload is msgpack bin", raw(8, pk(b"\x81\xa1a\x01")), "bad_payload", 8),
    StreamCase("payload is the never-used byte 0xc1", raw(6, b"\xc1"), "bad_payload", 6),
    StreamCase("payload is garbage bytes", raw(12, b"\xde\xad\xbe\xef"), "bad_payload", 12),
    StreamCase("payload map truncated", raw(2, b"\x82\xa4cols\x50"), "bad_payload", 2),
    StreamCase("payload has trailing bytes after the map", raw(6, pk({"nonce": 1}) + b"\x00"),
               "bad_payload", 6),
    StreamCase("version 1 JSON HELLO", raw(8, b'{"version":1,"clientType":"tower"}'), "bad_payload", 8,
               note="protocol version 1 (JSON) is not served"),
    StreamCase("string is not valid UTF-8", raw(3, b"\x81\xa6signal\xa2\xff\xfe"), "bad_payload", 3),
    StreamCase("integer map key", raw(2, b"\x82\x01\x50\xa4rows\x18"), "bad_payload", 2),
    StreamCase("binary map key", raw(2, pk({b"cols": 80, "rows": 24})), "bad_payload", 2),
    StreamCase("nil map key", raw(6, b"\x81\xc0\x01"), "bad_payload", 6),
    # --- missing required fields
    StreamCase("RESIZE missing rows", raw(R, pk({"cols": 80})), "missing_field", 2, "rows"),
    StreamCase("SCREEN format not a string", raw(0x13, pk({"format": 1})), "bad_field", 0x13, "format"),
    StreamCase("SCREEN id negative", raw(0x13, pk({"id": -1})), "bad_field", 0x13, "id"),
    StreamCase("LABELS set value not a string", raw(0x15, pk({"set": {"k": 1}})), "bad_field", 0x15, "set"),
    StreamCase("HELLO empty payload", raw(H, b""), "missing_field", 8, "version"),
    StreamCase("HELLO missing role", raw(H, pk({"version": 2})), "missing_field", 8, "role"),
    StreamCase("SIGNAL empty map", raw(3, pk({})), "missing_field", 3, "signal"),
    StreamCase("EXIT missing code (nil allowed, absence is not)", raw(4, pk({"signal": None})),
               "missing_field", 4, "code"),
    StreamCase("REPLAY missing offset", raw(5, pk({"data": b""})), "missing_field", 5, "offset"),
    StreamCase("WELCOME missing instance_id", raw(9, pk({
        "version": 2, "name": "s", "shellper_pid": 1, "shellper_start_time": 0, "boot_id": BOOT_ID,
        "state": "running", "cols": 80, "rows": 24, "ring_start": 0, "ring_end": 0,
    })), "missing_field", 9, "instance_id"),
    StreamCase("ERROR missing message", raw(11, pk({"code": "internal"})), "missing_field", 11, "message"),
    StreamCase("EVENT missing kind", raw(12, pk({"seq": 1})), "missing_field", 12, "kind"),
    StreamCase("STATUS_REPLY missing state", raw(14, pk({"info": {}})), "missing_field", 14, "state"),
    StreamCase("GAP missing missed", raw(16, pk({"offset": 5})), "missing_field", 16, "missed"),
    # --- wrong field types
    StreamCase("RESIZE cols as string", raw(R, pk({"cols": "80", "rows": 24})), "bad_field", 2, "cols"),
    StreamCase("RESIZE cols as float", raw(R, pk({"cols": 80.0, "rows": 24})), "bad_field", 2, "cols"),
    StreamCase("RESIZE rows negative", raw(R, pk({"cols": 80, "rows": -1})), "bad_field", 2, "rows"),
    StreamCase("RESIZE cols nil", raw(R, pk({"cols": None, "rows": 24})), "bad_field", 2, "cols"),
    StreamCase("SIGNAL as a number (version 1 style)", raw(3, pk({"signal": 2})), "bad_field", 3, "signal"),
    StreamCase("HELLO role nil", raw(H, pk({"version": 2, "role": None})), "bad_field", 8, "role"),
    StreamCase("HELLO resume_from negative", raw(H, pk({**HELLO_OK, "resume_from": -1})),
               "bad_field", 8, "resume_from"),
    StreamCase("HELLO client nil (not nullable)", raw(H, pk({**HELLO_OK, "client": None})),
               "bad_field", 8, "client"),
    StreamCase("REPLAY data as string", raw(5, pk({"offset": 0, "data": "text"})), "bad_field", 5, "data"),
    StreamCase("EXIT code as float", raw(4, pk({"code": 1.0, "signal": None})), "bad_field", 4, "code"),
    StreamCase("EXIT signal as number", raw(4, pk({"code": None, "signal": 11})), "bad_field", 4, "signal"),
    StreamCase("SPAWN argv as string", raw(10, pk({"argv": "bash -l"})), "bad_field", 10, "argv"),
    StreamCase("SPAWN argv element not a string", raw(10, pk({"argv": ["sleep", 5]})),
               "bad_field", 10, "argv"),
    StreamCase("SPAWN env value not a string", raw(10, pk({"env": {"N": 1}})), "bad_field", 10, "env"),
    StreamCase("EVENT data as array", raw(12, pk({"seq": 1, "kind": "x", "data": []})),
               "bad_field", 12, "data"),
    StreamCase("STOP grace as string", raw(15, pk({"grace": "5"})), "bad_field", 15, "grace"),
    StreamCase("WELCOME exit as array", raw(9, pk({
        "version": 2, "name": "s", "shellper_pid": 1, "shellper_start_time": 0, "boot_id": BOOT_ID,
        "instance_id": INSTANCE_ID, "state": "running", "cols": 80, "rows": 24, "ring_start": 0,
        "ring_end": 0, "exit": [],
    })), "bad_field", 9, "exit"),
    # --- bool is not an integer
    StreamCase("bool where int expected: RESIZE cols", raw(R, pk({"cols": True, "rows": 24})),
               "bad_field", 2, "cols"),
    StreamCase("bool where int expected: HELLO version", raw(H, pk({"version": True, "role": "tower"})),
               "bad_field", 8, "version"),
    StreamCase("bool where int expected: PING nonce", raw(6, pk({"nonce": False})), "bad_field", 6, "nonce"),
    StreamCase("bool where number expected: STOP grace", raw(15, pk({"grace": True})),
               "bad_field", 15, "grace"),
    StreamCase("int where bool expected: ERROR fatal", raw(11, pk({"code": "x", "message": "", "fatal": 1})),
               "bad_field", 11, "fatal"),
    # --- non-string map keys, at any depth, are bad_payload (not bad_field): a property of the encoding
    StreamCase("integer key in a map field: EVENT data", raw(12, pk({"seq": 1, "kind": "x", "data": {1: 2}})),
               "bad_payload", 12),
    StreamCase("binary key in a map field: EVENT data", raw(12, pk({"seq": 1, "kind": "x", "data": {b"k": 1}})),
               "bad_payload", 12),
    StreamCase("binary key in a {str: str} field: SPAWN env", raw(10, pk({"env": {b"PATH": "/bin"}})),
               "bad_payload", 10),
    StreamCase("integer key deep inside: EVENT data.a[0]",
               raw(12, pk({"seq": 1, "kind": "x", "data": {"a": [{7: "x"}]}})), "bad_payload", 12),
    StreamCase("map as a map key: STATUS_REPLY info", raw(14, b"\x82\xa5state\xa7running\xa4info\x81\x81\xa1k\x01\x02"),
               "bad_payload", 14),
    StreamCase("nil key inside WELCOME exit", raw(9, pk({**WELCOME_MIN, "exit": {None: 1}})), "bad_payload", 9),
    # --- the exit record: one schema, checked the same in EXIT, WELCOME.exit and EVENT exited's data
    StreamCase("EXIT missing class", raw(4, pk(without(EXIT_MINIMAL, "class"))), "missing_field", 4, "class"),
    StreamCase("EXIT missing time", raw(4, pk(without(EXIT_MINIMAL, "time"))), "missing_field", 4, "time"),
    StreamCase("EXIT uptime as string", raw(4, pk({**EXIT_MINIMAL, "uptime": "1"})), "bad_field", 4, "uptime"),
    StreamCase("EXIT restarts as string (an extra key the record defines)",
               raw(4, pk({**EXIT_MINIMAL, "restarts": "1"})), "bad_field", 4, "restarts"),
    StreamCase("WELCOME exit missing class", raw(9, pk({**WELCOME_MIN, "exit": without(EXIT_MINIMAL, "class")})),
               "bad_field", 9, "exit"),
    StreamCase("WELCOME exit uptime as string", raw(9, pk({**WELCOME_MIN, "exit": {**EXIT_MINIMAL, "uptime": "1"}})),
               "bad_field", 9, "exit"),
    StreamCase("EVENT exited data missing class",
               raw(12, pk({"seq": 1, "kind": "exited", "data": without(EXIT_MINIMAL, "class")})),
               "bad_field", 12, "data"),
    StreamCase("EVENT exited data uptime as string",
               raw(12, pk({"seq": 1, "kind": "exited", "data": {**EXIT_MINIMAL, "uptime": "1"}})),
               "bad_field", 12, "data"),
    StreamCase("EVENT exited with empty data", raw(12, pk({"seq": 1, "kind": "exited"})), "bad_field", 12, "data"),
    # --- a payload that fails several checks: the first failing check wins (PROTOCOL.md 10.1)
    StreamCase("not UTF-8 and a missing field: bad_payload first", raw(3, b"\x81\xa3sig\xa2\xff\xfe"),
               "bad_payload", 3),
    StreamCase("two bad fields: the first in table order (cols)", raw(R, pk({"rows": "24", "cols": "80"})),
               "bad_field", 2, "cols"),
    StreamCase("a bad field before a missing one in table order", raw(R, pk({"cols": "80"})),
               "bad_field", 2, "cols"),
    StreamCase("a missing field before a bad one in table order", raw(R, pk({"rows": "24"})),
               "missing_field", 2, "cols"),
    # --- accepted variations (no error)
    StreamCase("unknown key ignored", raw(R, pk({"cols": 80, "rows": 24, "future": [1, {"x": b"\x00"}]})),
               events=(Resize(cols=80, rows=24),)),
    StreamCase("unknown keys ignored in HELLO", raw(H, pk({"clientType": "tower", **HELLO_OK, "zz": None})),
               events=(Hello(version=2, role="tower"),)),
    StreamCase("keys in another order: RESIZE", raw(R, pk({"rows": 24, "cols": 80})),
               events=(Resize(cols=80, rows=24),)),
    StreamCase("keys in another order: HELLO", raw(H, pk({
        "client": "c", "events_after": 9, "role": "viewer", "resume_from": 100, "version": 2,
    })), events=(Hello(version=2, role="viewer", resume_from=100, events_after=9, client="c"),)),
    StreamCase("absent nil optionals of the exit record: EXIT", raw(4, pk(EXIT_MINIMAL)),
               events=(Exit(code=0, signal=None, exit_class="clean", state="exited", time=5.0),)),
    StreamCase("explicit nil for an optional",
               raw(H, pk({**HELLO_OK, "resume_from": None, "replay_bytes": None})),
               events=(Hello(version=2, role="tower"),)),
    StreamCase("empty control payload is an empty map: STATUS", raw(13, b""), events=(Status(),)),
    StreamCase("empty control payload is an empty map: PING", raw(6, b""), events=(Ping(),)),
    StreamCase("empty control payload is an empty map: STOP", raw(15, b""), events=(Stop(),)),
    StreamCase("integer in a float field (decodes as the float 3.0)", raw(15, pk({"grace": 3})),
               events=(Stop(grace=3.0),)),
    StreamCase("uint64 in a float field", raw(15, pk({"grace": 2**64 - 1})), events=(Stop(grace=float(2**64 - 1)),)),
    StreamCase("integer in the exit record's float fields: EXIT",
               raw(4, pk({**EXIT_MINIMAL, "uptime": 2, "time": 5, "restart_in": 1})),
               events=(Exit(code=0, signal=None, exit_class="clean", state="exited", time=5.0, uptime=2.0,
                            restart_in=1.0),)),
    StreamCase("exit class and state this version does not know: accepted",
               raw(4, pk({**EXIT_MINIMAL, "class": "oom", "state": "hibernating"})),
               events=(Exit(code=0, signal=None, exit_class="oom", state="hibernating", time=5.0),)),
    StreamCase("EVENT exited carrying an exit record", raw(12, pk({"seq": 3, "kind": "exited", "data": EXIT_MINIMAL})),
               events=(Event(seq=3, kind="exited", data=EXIT_MINIMAL),)),
    StreamCase("float32 in a float field", raw(15, b"\x81\xa5grace\xca" + struct.pack(">f", 2.5)),
               events=(Stop(grace=2.5),)),
    StreamCase("non-minimal integer encoding", raw(R, b"\x82\xa4cols\xcf" + (80).to_bytes(8, "big")
                                                   + b"\xa4rows\xcd\x00\x18"),
               events=(Resize(cols=80, rows=24),)),
    StreamCase("str8 encoding of a short string", raw(3, b"\x81\xd9\x06signal\xd9\x03INT"),
               events=(Signal(signal="INT"),)),
    StreamCase("map16 encoding of a small map", raw(6, b"\xde\x00\x01\xa5nonce\x07"),
               events=(Ping(nonce=7),)),
]

REPLY_STREAM_CASES: list[StreamCase] = [
    StreamCase("REPLY missing ok", raw(0x12, pk({"id": 1, "frame_type": 2})), "missing_field", 0x12, "ok"),
    StreamCase("REPLY id negative", raw(0x12, pk({"id": -1, "frame_type": 2, "ok": True})),
               "bad_field", 0x12, "id"),
    StreamCase("REPLY ok as integer", raw(0x12, pk({"id": 1, "frame_type": 2, "ok": 1})),
               "bad_field", 0x12, "ok"),
    StreamCase("RESIZE id as string", raw(R, pk({"cols": 80, "rows": 24, "id": "1"})), "bad_field", 2, "id",
               note="the id cannot be read: a shellper answers with a fatal ERROR"),
    StreamCase("RESIZE with id, cols as string", raw(R, pk({"cols": "80", "rows": 24, "id": 9})),
               "bad_field", 2, "cols",
               note="the id can be read: a version-3 shellper answers REPLY {id: 9, ok: false, code: bad_field} "
                    "and keeps the connection"),
    StreamCase("STATUS with id nil is a STATUS without id", raw(13, pk({"id": None})), events=(Status(),)),
]


def _stream_json(stream: bytes | list[bytes | Repeat]) -> dict[str, Any]:
    if isinstance(stream, bytes):
        return {"hex": stream.hex()}
    return {"hex_parts": [
        {"repeat": p.chunk.hex(), "count": p.count} if isinstance(p, Repeat) else {"hex": p.hex()}
        for p in stream
    ]}


def invalid_cases() -> list[dict[str, Any]]:
    out = []
    for c in STREAM_CASES + REPLY_STREAM_CASES:
        case: dict[str, Any] = {"name": c.name, **_stream_json(c.stream), "error": c.error,
                                "frame_type": c.frame_type, "field": c.field,
                                "events": [event_to_json(e) for e in c.events]}
        if c.note:
            case["note"] = c.note
        out.append(case)
    return out


# --------------------------------------------------------------------------------------------- example

EXAMPLE_OUTPUT = b"$ echo hi\r\nhi\r\n$ "
EXAMPLE: list[tuple[str, Frame]] = [
    ("client -> shellper", Hello(version=2, role="tower", replay_bytes=65536, client="example/1")),
    ("shellper -> client", Welcome(
        version=2, name="demo", shellper_pid=4242, shellper_start_time=1234567, boot_id=BOOT_ID,
        instance_id=INSTANCE_ID, state="running", cols=80, rows=24, ring_start=0,
        ring_end=len(EXAMPLE_OUTPUT), child_pid=4243, last_output_at=1767225600.5, event_seq=1,
        role="tower",
    )),
    ("shellper -> client", Replay(offset=0, data=EXAMPLE_OUTPUT, preamble=b"\x1b[?2004h")),
    ("shellper -> client", Data(b"ls\r\n")),
]


def hexdump(data: bytes) -> list[str]:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i:i + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"  {i:04x}  {hexes:<47}  |{text}|")
    return lines


def example_hexdump() -> str:
    """The worked example in PROTOCOL.md, exactly as it appears there."""
    lines: list[str] = []
    for direction, frame in EXAMPLE:
        wire = encode(frame)
        size = len(wire) - HEADER.size
        lines.append(f"{direction}: {frame.TYPE.name} (type 0x{frame.TYPE:02x}, payload {size} bytes)")
        lines.extend(hexdump(wire))
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


# --------------------------------------------------------------------------------------------- main


def render(cases: list[dict[str, Any]]) -> str:
    return json.dumps(cases, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="fail if the files differ from the cases")
    parser.add_argument("--example", action="store_true", help="print the PROTOCOL.md worked example")
    args = parser.parse_args(argv)
    if args.example:
        sys.stdout.write(example_hexdump())
        return 0
    wanted = {FRAMES_PATH: render(frame_cases()), INVALID_PATH: render(invalid_cases())}
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for p in stale:
            print(f"out of date: {p}", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.write_text(wanted[p], encoding="utf-8")
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
