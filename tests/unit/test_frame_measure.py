"""The shellper's per-type frame limits as tables (PROTOCOL.md section 11): wire.measure, the decoder under
HANDSHAKE_LIMITS and SESSION_LIMITS, and version 1's JSON nested too deep."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shellper.core.defaults import FRAME_TIMEOUT
from shellper.daemon.clientconn import MAX_PARTIAL_BYTES
from shellper.protocol import legacy, wire
from shellper.protocol.wire import FrameType, PayloadLimit

UNLIMITED = PayloadLimit(size=wire.MAX_FRAME_SIZE, objects=1 << 40, depth=1 << 20)


def objects_and_depth(value: Any, depth: int = 0) -> tuple[int, int]:
    """What measure counts, the slow way: every value (keys too) and the deepest container."""
    if isinstance(value, dict):
        n, deepest = 1, depth + 1
        for k, v in value.items():
            for item in (k, v):
                c, d = objects_and_depth(item, depth + 1)
                n, deepest = n + c, max(deepest, d)
        return n, deepest
    if isinstance(value, list):
        n, deepest = 1, depth + 1
        for item in value:
            c, d = objects_and_depth(item, depth + 1)
            n, deepest = n + c, max(deepest, d)
        return n, deepest
    return 1, depth


SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(width=32) | st.floats()
           | st.text(max_size=40) | st.binary(max_size=300)
           | st.builds(lambda n: "\u00e9" * n, st.integers(0, 70000)) | st.builds(bytes, st.integers(0, 70000))
           | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=20)))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=20)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=20), max_leaves=60)


@settings(max_examples=80, deadline=None, database=None)
@given(value=VALUES)
def test_measure_counts_every_value_and_the_deepest_container(value: Any) -> None:
    payload = msgpack.packb(value, use_bin_type=True)
    count, depth = objects_and_depth(value)
    wire.measure(payload, PayloadLimit(size=len(payload), objects=count, depth=depth), 6)  # exactly fits
    with pytest.raises(wire.FrameTooLarge, match="objects"):
        wire.measure(payload, PayloadLimit(size=len(payload), objects=count - 1, depth=depth), 6)
    if depth:
        with pytest.raises(wire.FrameTooLarge, match="deeper"):
            wire.measure(payload, PayloadLimit(size=len(payload), objects=count, depth=depth - 1), 6)


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


def _decode(data: bytes, limits: tuple[PayloadLimit, ...]) -> list[Any]:
    """Events, then the error code (or None) of decoding ``data`` under ``limits``."""
    decoder = wire.Decoder(limits=limits)
    decoder.feed(data)
    out: list[Any] = []
    try:
        while (event := decoder.next_event()) is not None:
            out.append(event)
    except wire.ProtocolError as exc:
        return [*out, exc.code]
    return [*out, None]


CASES = [
    # (name, limits, stream, what comes out)
    ("HELLO of exactly 4 KiB", wire.HANDSHAKE_LIMITS,
     _frame(8, msgpack.packb({"version": 3, "role": "viewer", "client": "c" * 4061})), ["Hello", None]),
    ("HELLO of 4 KiB + 1, skipped at its header", wire.HANDSHAKE_LIMITS,
     struct.pack(">BI", 8, 4097), ["Skipped 4096", None]),
    ("any type before the handshake, unknown ones too", wire.HANDSHAKE_LIMITS,
     struct.pack(">BI", 0x42, 4097), ["Skipped 4096", None]),
    ("DATA before the handshake", wire.HANDSHAKE_LIMITS, struct.pack(">BI", 1, 4097), ["Skipped 4096", None]),
    ("DATA of 16 MiB after it", wire.SESSION_LIMITS, struct.pack(">BI", 1, wire.MAX_FRAME_SIZE), [None]),
    ("PING of 64 KiB + 1", wire.SESSION_LIMITS, struct.pack(">BI", 6, 65537), ["Skipped 65536", None]),
    ("a shellper-only type from a client", wire.SESSION_LIMITS, struct.pack(">BI", 0x0E, 65537),
     ["Skipped 65536", None]),
    ("SPAWN of 2 MiB + 1", wire.SESSION_LIMITS, struct.pack(">BI", 0x0A, 2 * 1024 * 1024 + 1),
     ["Skipped 2097152", None]),
    ("unknown type of 16 MiB after the handshake", wire.SESSION_LIMITS, struct.pack(">BI", 0x42, 1 << 24), [None]),
    ("HELLO with 256 objects", wire.HANDSHAKE_LIMITS,
     _frame(8, msgpack.packb({"version": 3, "role": "viewer", **{f"k{i}": 0 for i in range(125)}})),
     ["Hello", None]),
    ("HELLO with 257 objects", wire.HANDSHAKE_LIMITS,
     _frame(8, msgpack.packb({"version": 3, "role": "viewer", "x": [0] * 252})), ["too_large"]),
    ("PING of 4097 empty maps in 4 KiB", wire.SESSION_LIMITS, _frame(6, b"\x81\xa1x\xdc\x10\x00" + b"\x80" * 4096),
     ["too_large"]),
    ("PING nested 16 deep", wire.SESSION_LIMITS, _frame(6, b"\x81\xa1x" + b"\x91" * 14 + b"\x90"), ["Ping", None]),
    ("PING nested 17 deep", wire.SESSION_LIMITS, _frame(6, b"\x81\xa1x" + b"\x91" * 15 + b"\x90"), ["too_large"]),
    ("too many objects before invalid UTF-8: the limit first", wire.SESSION_LIMITS,
     _frame(6, b"\xdf\x00\x01\x00\x00" + b"\xa0\xc0" * 2048 + b"\xa1\xff\xc0"), ["too_large"]),
    ("a byte no value starts with, before the limit: bad_payload", wire.SESSION_LIMITS,
     _frame(6, b"\x81\xa1x\xdc\xff\xff\xc1" + b"\x80" * 5000), ["bad_payload"]),
    ("a count the payload cannot hold: bad_payload", wire.SESSION_LIMITS,
     _frame(6, b"\xdf\xff\xff\xff\xff\xa0\xc0"), ["bad_payload"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_limits_by_type_and_handshake(case: tuple[str, tuple[PayloadLimit, ...], bytes, list[Any]]) -> None:
    _, limits, stream, want = case
    got = [f"Skipped {e.limit}" if isinstance(e, wire.Skipped) else type(e).__name__ if isinstance(e, wire.Frame)
           else e for e in _decode(stream, limits)]
    assert got == want


def test_without_limits_the_decoder_is_the_reference_one() -> None:
    """Clients and the golden vectors decode with max_frame alone: a 64 KiB + 1 PING, 5000 objects, are fine."""
    ping = msgpack.packb({"nonce": 1, "x": [{}] * 5000, "pad": "p" * 61000})
    assert len(ping) > 65536
    assert [type(e).__name__ for e in wire.decode_all(_frame(6, ping))] == ["Ping"]


def test_the_tables_name_every_type() -> None:
    assert len(wire.HANDSHAKE_LIMITS) == len(wire.SESSION_LIMITS) == 256
    assert set(wire.HANDSHAKE_LIMITS) == {wire.HELLO_LIMIT}
    assert wire.SESSION_LIMITS[FrameType.DATA] == wire.RAW_LIMIT
    assert wire.SESSION_LIMITS[FrameType.SPAWN] == wire.SPAWN_LIMIT
    assert wire.SESSION_LIMITS[FrameType.HELLO] == wire.HELLO_LIMIT
    assert all(wire.SESSION_LIMITS[t] == wire.CONTROL_LIMIT for t in wire.FRAME_CLASSES
               if t not in (FrameType.DATA, FrameType.SPAWN, FrameType.HELLO))


# --------------------------------------------------------------------------------------------- version 1

DEEP = b'{"command":"x","cwd":"/","env":{},"args":' + b"[" * 50_000 + b"]" * 50_000 + b"}"
"""Deeper than json parses (a RecursionError), within SPAWN's count of objects."""


def test_version_1_json_nested_too_deep_is_an_invalid_payload() -> None:
    with pytest.raises(legacy.LegacyError, match=r"Invalid SPAWN payload"):
        legacy.parse_spawn(DEEP)


@pytest.mark.parametrize("parse", [legacy.parse_hello, legacy.parse_resize, legacy.parse_signal, legacy.parse_spawn],
                         ids=["HELLO", "RESIZE", "SIGNAL", "SPAWN"])
def test_version_1_json_held_to_the_object_count_of_its_type(parse: Any) -> None:
    """HELLO 256, SPAWN 65536, others 4096 values (counted from above: commas, colons, brackets)."""
    n = {legacy.parse_hello: 128, legacy.parse_spawn: 32768}.get(parse, 2048)
    within = b'{"cols":80,"rows":24,"signal":2,"command":"x","cwd":"/","env":{},"x":[' + b"0," * (n - 12) + b"0]}"
    parse(within)
    with pytest.raises(legacy.LegacyError, match=r"Invalid \w+ payload"):
        parse(within.replace(b'"x":[', b'"x":[' + b"{}," * (n + 2)))


def test_version_1_frames_before_hello_are_held_to_4_kib() -> None:
    reader = legacy.FrameReader(limits=wire.HANDSHAKE_LIMITS)
    big = legacy.encode(FrameType.HELLO, b"{" + b" " * 4095 + b"}")
    events = list(reader.feed(big + legacy.encode(FrameType.PING)))
    assert [type(e).__name__ for e in events] == ["SkippedFrame", "RawFrame"] and reader.buffered == 0


@pytest.mark.parametrize(("frame", "problem"), [
    (wire.Hello(version=3, role="viewer", client="c" * 5000), "5[0-9]{3} bytes, more than the 4096"),
    (wire.Spawn(argv=["true", *["x"] * 70_000]), "more than 65536 msgpack objects"),
    (wire.Spawn(argv=["true"], env={"BIG": "v" * (2 << 20)}), "more than the 2097152"),
], ids=["HELLO client name", "SPAWN argv entries", "SPAWN env bytes"])
def test_a_client_is_told_before_it_sends_what_the_shellper_would_refuse(frame: wire.Frame, problem: str) -> None:
    """check_request (what tower_client and the sans-IO connection apply) holds HELLO and SPAWN to the shellper's
    limits, so the caller's mistake is an error of its own, not a fatal too_large that costs the connection."""
    with pytest.raises(wire.BadField, match=problem):
        wire.check_request(frame)
    wire.check_request(wire.Spawn(argv=["true"], env={f"V{i}": "v" * 150 for i in range(10_000)}))
    wire.check_request(wire.Hello(version=3, role="viewer", client="c" * 3000))


def test_the_spec_states_the_limits_the_code_has() -> None:
    spec = (Path(__file__).resolve().parents[2] / "protocol" / "PROTOCOL.md").read_text(encoding="utf-8")
    for limit in (wire.HELLO_LIMIT, wire.CONTROL_LIMIT, wire.SPAWN_LIMIT):
        assert f"({limit.size:,} bytes" in spec and f"| {limit.objects:,} | {limit.depth} |" in spec, limit
    assert f"| {MAX_PARTIAL_BYTES // (1 << 20)} MiB |" in spec and f"| {FRAME_TIMEOUT:g} s |" in spec
