"""shellper.protocol.legacy as tables: the original's protocol test catalogue (original.md section 6.1)
rewritten against this codec, plus the version sniffing, the rights table and the launch config."""

from __future__ import annotations

import json
import struct

import pytest

from shellper.protocol import firstframe, legacy, wire
from shellper.protocol.legacy import (
    ALLOWED_SIGNALS,
    FrameReader,
    LegacyAction,
    LegacyError,
    RawFrame,
    SkippedFrame,
)
from shellper.protocol.wire import FrameType


def frames(reader: FrameReader, *chunks: bytes) -> list[RawFrame | SkippedFrame]:
    return [f for chunk in chunks for f in reader.feed(chunk)]


# --------------------------------------------------------------------------------------------- encodeFrame


def test_encode_frame_header_is_type_then_big_endian_length() -> None:
    assert legacy.encode(FrameType.DATA, b"abc") == b"\x01\x00\x00\x00\x03abc"
    assert legacy.encode(FrameType.PING) == b"\x06\x00\x00\x00\x00"


def test_json_payloads_are_compact_as_javascript_writes_them() -> None:
    assert legacy.encode_json(FrameType.RESIZE, {"cols": 80, "rows": 24})[5:] == b'{"cols":80,"rows":24}'


# --------------------------------------------------------------------------------------------- round trips

ROUND_TRIPS = [
    ("DATA string", FrameType.DATA, "héllo\r\n".encode()),
    ("DATA binary", FrameType.DATA, bytes(range(256))),
    ("RESIZE", FrameType.RESIZE, b'{"cols":120,"rows":40}'),
    ("SIGNAL", FrameType.SIGNAL, b'{"signal":2}'),
    ("EXIT", FrameType.EXIT, legacy.encode_exit(0, None)[5:]),
    ("EXIT with signal", FrameType.EXIT, legacy.encode_exit(None, "SIGKILL")[5:]),
    ("REPLAY", FrameType.REPLAY, b"\x1b[31mred\x1b[0m\n" * 100),
    ("PING", FrameType.PING, b""),
    ("PONG", FrameType.PONG, b""),
    ("HELLO", FrameType.HELLO, b'{"version":1,"clientType":"terminal"}'),
    ("WELCOME", FrameType.WELCOME, legacy.welcome(child_pid=42, cols=80, rows=24, start_ms=1, last_data_ms=2)[5:]),
    ("SPAWN", FrameType.SPAWN, b'{"command":"bash","args":["-l"],"cwd":"/","env":{"A":"b"}}'),
]


@pytest.mark.parametrize(("frame_type", "payload"), [(t, p) for _, t, p in ROUND_TRIPS],
                         ids=[n for n, _, _ in ROUND_TRIPS])
def test_round_trip(frame_type: int, payload: bytes) -> None:
    assert frames(FrameReader(), legacy.encode(frame_type, payload)) == [RawFrame(frame_type, payload)]


def test_decoded_payloads_have_the_original_fields_and_types() -> None:
    assert json.loads(legacy.encode_exit(0, None)[5:]) == {"code": 0, "signal": "0"}
    assert json.loads(legacy.encode_exit(None, "SIGKILL")[5:]) == {"code": 0, "signal": "9"}
    # a command that never ran: node-pty's forked child, whose exec failed, exited 1
    assert json.loads(legacy.encode_exit(None, None, spawned=False)[5:]) == {"code": 1, "signal": "0"}
    welcome = json.loads(legacy.welcome(child_pid=None, cols=1, rows=2, start_ms=3, last_data_ms=4)[5:])
    assert welcome == {"version": 1, "pid": -1, "cols": 1, "rows": 2, "startTime": 3, "lastDataAt": 4,
                       "alwaysSendsReplay": True}
    assert legacy.parse_hello(b'{"version":1}') == legacy.Hello(version=1, client_type="tower")
    assert legacy.parse_hello(b'{"version":9,"clientType":"x"}').client_type == "x"
    assert legacy.parse_spawn(b'{"command":"c","args":["a"],"cwd":"/","env":{"K":"v"}}') == \
        legacy.SpawnRequest(argv=["c", "a"], cwd="/", env={"K": "v"})


# --------------------------------------------------------------------------------------------- FrameParser


def test_multiple_frames_in_one_chunk() -> None:
    stream = legacy.encode(1, b"a") + legacy.encode(6) + legacy.encode(1, b"b")
    assert frames(FrameReader(), stream) == [RawFrame(1, b"a"), RawFrame(6, b""), RawFrame(1, b"b")]


def test_fragmented_frames_across_chunks_at_every_split() -> None:
    stream = legacy.encode(1, b"hello") + legacy.encode_json(2, {"cols": 1, "rows": 2})
    want = frames(FrameReader(), stream)
    for cut in range(len(stream) + 1):
        assert frames(FrameReader(), stream[:cut], stream[cut:]) == want
    assert frames(FrameReader(), *(bytes([b]) for b in stream)) == want


def test_split_exactly_at_the_header_boundary() -> None:
    frame = legacy.encode(1, b"payload")
    reader = FrameReader()
    assert frames(reader, frame[:5]) == []
    assert frames(reader, frame[5:]) == [RawFrame(1, b"payload")]


def test_oversized_frames_are_skipped_and_parsing_goes_on() -> None:
    size = legacy.MAX_FRAME_SIZE + 1
    reader = FrameReader()
    got = frames(reader, struct.pack(">BI", 5, size), b"x" * 1000, b"x" * (size - 1000) + legacy.encode(1, b"next"))
    assert got == [SkippedFrame(5, size), RawFrame(1, b"next")]


def test_exactly_16_mib_is_accepted() -> None:
    got = frames(FrameReader(), legacy.encode(5, b"y" * legacy.MAX_FRAME_SIZE))
    assert len(got) == 1 and isinstance(got[0], RawFrame) and len(got[0].payload) == legacy.MAX_FRAME_SIZE


def test_unknown_frame_types_pass_through() -> None:
    assert frames(FrameReader(), legacy.encode(0x42, b"?")) == [RawFrame(0x42, b"?")]


@pytest.mark.parametrize("tail", [b"\x01\x00\x00", b"\x01\x00\x00\x00\x05ab"], ids=["header", "payload"])
def test_incomplete_frame_at_end_of_stream_is_an_error(tail: bytes) -> None:
    reader = FrameReader()
    frames(reader, legacy.encode(6) + tail)
    with pytest.raises(LegacyError, match="Incomplete frame"):
        reader.close()


# --------------------------------------------------------------------------------------------- parseJsonPayload


@pytest.mark.parametrize("payload", [b"{oops", b"", b"[1,2]", b"\xff\xfe", b"42"],
                         ids=["invalid", "empty", "array", "not utf-8", "number"])
def test_invalid_json_payloads_raise(payload: bytes) -> None:
    with pytest.raises(LegacyError, match="Invalid RESIZE payload"):
        legacy.parse_json_payload(payload, "RESIZE")


def test_valid_json_payload() -> None:
    assert legacy.parse_json_payload(b'{"a":[1]}', "X") == {"a": [1]}


RESIZES = [
    (b'{"cols":100,"rows":30}', (100, 30)),
    (b'{"cols":100.7,"rows":30}', (100, 30)),
    (b'{"cols":0,"rows":99999}', (1, 65535)),
    (b'{"cols":"80","rows":24}', None),
    (b'{"cols":true,"rows":24}', None),
    (b'{"cols":NaN,"rows":24}', None),
    (b'{"rows":24}', None),
]


@pytest.mark.parametrize(("payload", "size"), RESIZES, ids=[p.decode() for p, _ in RESIZES])
def test_resize(payload: bytes, size: tuple[int, int] | None) -> None:
    if size is None:
        with pytest.raises(LegacyError):
            legacy.parse_resize(payload)
    else:
        assert legacy.parse_resize(payload) == size


@pytest.mark.parametrize("payload", [b'{"command":"","cwd":"/","env":{}}', b'{"command":"c","cwd":"/","env":{"A":1}}',
                                     b'{"command":"c","args":[1],"cwd":"/","env":{}}', b'{"command":"c","env":{}}'])
def test_bad_spawn_payloads(payload: bytes) -> None:
    with pytest.raises(LegacyError, match="Invalid SPAWN payload"):
        legacy.parse_spawn(payload)


# --------------------------------------------------------------------------------------------- frame types, signals


def test_known_frame_types_are_exactly_the_originals() -> None:
    """Version 1 knows the first ten of version 2's frame types, by the same numbers and names."""
    assert set(range(0x01, 0x0B)) == firstframe.LEGACY_TYPES
    assert {FrameType(t).name for t in firstframe.LEGACY_TYPES} == {
        "DATA", "RESIZE", "SIGNAL", "EXIT", "REPLAY", "PING", "PONG", "HELLO", "WELCOME", "SPAWN"}


def test_allowed_signals_are_exactly_the_five() -> None:
    assert set(ALLOWED_SIGNALS) == {1, 2, 9, 15, 28}
    assert all(name in wire.SIGNALS for name in ALLOWED_SIGNALS.values())
    for refused in (3, 10, 12, 19, 0, -1):
        assert refused not in ALLOWED_SIGNALS


def _is_deliberate_exit(payload: dict[str, object]) -> bool:
    """The original's isDeliberateExit (#1241): code 0 and no signal."""
    return payload["code"] == 0 and payload["signal"] in (None, "", "0")


@pytest.mark.parametrize(("code", "signal", "deliberate"), [
    (0, None, True), (None, "SIGKILL", False), (None, "SIGTERM", False), (1, None, False), (137, None, False),
], ids=["clean", "killed", "terminated", "nonzero", "128+9 from a shell"])
def test_exit_payloads_classify_as_the_original_did(code: int | None, signal: str | None, deliberate: bool) -> None:
    assert _is_deliberate_exit(legacy.exit_payload(code, signal)) is deliberate


def test_constants() -> None:
    assert legacy.LEGACY_VERSION == 1
    assert legacy.MAX_FRAME_SIZE == 16 * 1024 * 1024
    assert legacy.HEADER_SIZE == 5
    assert legacy.REPLAY_PAYLOAD_MAX == 8 * 1024 * 1024


# --------------------------------------------------------------------------------------------- who speaks version 1


SNIFF = [
    ("JSON HELLO", legacy.encode_json(8, {"version": 1}), True),
    ("JSON SIGNAL before HELLO", legacy.encode_json(3, {"signal": 9}), True),
    ("header only, JSON type", struct.pack(">BI", 8, 30), None),
    ("less than a header", b"\x08\x00", None),
    ("msgpack HELLO", wire.encode(wire.Hello(version=2, role="tower")), False),
    ("msgpack PING", wire.encode(wire.Ping()), False),
    ("DATA first", legacy.encode(1, b"{looks like json"), False),
    ("empty PING", legacy.encode(6), False),
    ("unknown type", legacy.encode(0x42, b"{"), False),
    ("version 2 type", legacy.encode(0x0F, b"{"), False),
    ("oversized", struct.pack(">BI", 8, legacy.MAX_FRAME_SIZE + 1), False),
    ("over the handshake's 4 KiB", struct.pack(">BI", 8, wire.HELLO_LIMIT.size + 1), False),  # too_large at once
    ("the handshake's 4 KiB", struct.pack(">BI", 8, wire.HELLO_LIMIT.size), None),
    ("HTTP", b"GET / HTTP/1.1\r\n", False),
]


@pytest.mark.parametrize(("stream", "verdict"), [(s, v) for _, s, v in SNIFF], ids=[n for n, _, _ in SNIFF])
def test_first_frame_decides_the_version(stream: bytes, verdict: bool | None) -> None:
    assert legacy.first_frame_is_legacy(stream) is verdict


@pytest.mark.parametrize("frame", [wire.Hello(version=2, role="viewer", resume_from=5, client="{x}"),
                                   wire.Resize(cols=1, rows=1), wire.Signal(signal="TERM"), wire.Spawn(argv=["a"]),
                                   wire.Stop(grace=1.0), wire.Status(), wire.Ping(nonce=7)],
                         ids=lambda f: type(f).__name__)
def test_no_version_2_control_frame_looks_like_version_1(frame: wire.Frame) -> None:
    assert legacy.first_frame_is_legacy(wire.encode(frame)) is False


RIGHTS = [
    ("tower", FrameType.DATA, LegacyAction.INPUT), ("terminal", FrameType.DATA, LegacyAction.INPUT),
    ("tower", FrameType.RESIZE, LegacyAction.RESIZE), ("terminal", FrameType.RESIZE, LegacyAction.RESIZE),
    ("tower", FrameType.SIGNAL, LegacyAction.SIGNAL), ("terminal", FrameType.SIGNAL, LegacyAction.IGNORE),
    ("tower", FrameType.SPAWN, LegacyAction.SPAWN), ("terminal", FrameType.SPAWN, LegacyAction.IGNORE),
    ("tower", FrameType.PING, LegacyAction.PONG), ("terminal", FrameType.PING, LegacyAction.PONG),
    ("tower", FrameType.HELLO, LegacyAction.IGNORE), ("tower", FrameType.PONG, LegacyAction.IGNORE),
    ("tower", FrameType.EXIT, LegacyAction.IGNORE), ("tower", FrameType.REPLAY, LegacyAction.IGNORE),
    ("tower", FrameType.WELCOME, LegacyAction.IGNORE), ("tower", 0x0F, LegacyAction.IGNORE),
    ("tower", 0x42, LegacyAction.IGNORE),
]


@pytest.mark.parametrize(("kind", "frame_type", "action"), RIGHTS, ids=[f"{k}-{t:#x}" for k, t, _ in RIGHTS])
def test_rights(kind: str, frame_type: int, action: LegacyAction) -> None:
    assert legacy.action_for(kind, frame_type) is action


@pytest.mark.parametrize(("client_type", "kind"), [("tower", "tower"), ("terminal", "terminal"), ("Tower", "terminal"),
                                                   ("viewer", "terminal"), ("", "terminal")])
def test_only_exactly_tower_is_a_tower(client_type: str, kind: str) -> None:
    assert legacy.client_kind(client_type) == kind


# --------------------------------------------------------------------------------------------- launch config


def test_launch_config_and_the_session_name_rule() -> None:
    cfg = legacy.parse_launch_config(json.dumps({
        "command": "claude", "args": ["--resume", "x"], "cwd": "/w", "env": {"A": "1"}, "cols": 100, "rows": 30,
        "socketPath": "/home/u/.codev/run/shellper-0b9e7a3c-1d2e-4f50-9a6b-7c8d9e0f1a2b.sock",
        "replayBufferBytes": 1 << 20}))
    assert cfg.argv == ["claude", "--resume", "x"] and cfg.env == {"A": "1"} and (cfg.cols, cfg.rows) == (100, 30)
    assert cfg.directory == "/home/u/.codev/run"
    assert cfg.session_name == "shellper-0b9e7a3c-1d2e-4f50-9a6b-7c8d9e0f1a2b"
    assert cfg.replay_bytes == 1 << 20 and cfg.replay_lines is None


@pytest.mark.parametrize(("config", "message"), [
    ("{", "Invalid JSON config"), ("[]", "Invalid JSON config"),
    ('{"cwd":"/","socketPath":"/r/s.sock"}', "command"),
    ('{"command":"c","socketPath":"/r/s.sock"}', "cwd"),
    ('{"command":"c","cwd":"/"}', "socketPath"),
    ('{"command":"c","cwd":"/","socketPath":"/r/s.sock","cols":0}', "cols"),
    ('{"command":"c","cwd":"/","socketPath":"/r/s.sock","env":{"A":2}}', "env"),
    ('{"command":"c","cwd":"/","socketPath":"/r/s.sock","replayBufferBytes":-1}', "replayBufferBytes"),
])
def test_bad_launch_configs(config: str, message: str) -> None:
    with pytest.raises(LegacyError, match=message):
        legacy.parse_launch_config(config)


@pytest.mark.parametrize("path", ["/r/s.socket", "/r/.sock", "/r/"])
def test_a_socket_path_without_a_name_is_refused(path: str) -> None:
    cfg = legacy.parse_launch_config(json.dumps({"command": "c", "cwd": "/", "socketPath": path}))
    with pytest.raises(LegacyError, match=r"must end in <name>\.sock"):
        assert cfg.session_name


def test_ready_line() -> None:
    assert legacy.ready_line(12, 34) == b'{"pid":12,"startTime":34}'
