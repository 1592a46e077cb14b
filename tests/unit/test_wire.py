"""The wire codec against the golden vectors, the spec, and arbitrary fragmentation and garbage."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shellper.core import structs
from shellper.protocol import wire
from shellper.protocol.wire import (
    FRAME_CLASSES,
    HEADER,
    HEADER_SIZE,
    MAX_FRAME_SIZE,
    BadField,
    BadPayload,
    Data,
    DecodedEvent,
    Decoder,
    Event,
    Exit,
    Frame,
    FrameTooLarge,
    FrameType,
    MissingField,
    Ping,
    ProtocolError,
    Resize,
    Skipped,
    Status,
    TruncatedFrame,
    Unknown,
    Welcome,
    decode_all,
    encode,
    encode_data,
)

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "protocol" / "vectors"
SPEC = ROOT / "protocol" / "PROTOCOL.md"


def _load_generate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vectors_generate", VECTORS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


gen = _load_generate()
FRAME_VECTORS: list[dict[str, Any]] = json.loads((VECTORS / "frames.json").read_text(encoding="utf-8"))
STREAM_VECTORS: list[dict[str, Any]] = json.loads((VECTORS / "invalid.json").read_text(encoding="utf-8"))


def drain(decoder: Decoder) -> tuple[list[DecodedEvent], ProtocolError | None]:
    """Every event a decoder yields until it wants more bytes or raises."""
    events: list[DecodedEvent] = []
    try:
        while (event := decoder.next_event()) is not None:
            events.append(event)
    except ProtocolError as exc:
        return events, exc
    return events, None


def run_stream(
    chunks: list[bytes], max_frame: int = MAX_FRAME_SIZE
) -> tuple[list[DecodedEvent], ProtocolError | None]:
    """Decode a whole stream, then end it; stops at the first error like a shellper does."""
    decoder = Decoder(max_frame)
    events: list[DecodedEvent] = []
    for chunk in chunks:
        decoder.feed(chunk)
        got, err = drain(decoder)
        events += got
        if err is not None:
            return events, err
    try:
        decoder.close()
    except ProtocolError as exc:
        return events, exc
    return events, None


# --------------------------------------------------------------------------------------------- vectors


def test_vector_files_match_declared_cases() -> None:
    """The JSON files are what generate.py declares: edit the cases there, then regenerate."""
    assert gen.frame_cases() == FRAME_VECTORS
    assert gen.invalid_cases() == STREAM_VECTORS


def test_vectors_cover_every_frame_type() -> None:
    assert {v["code"] for v in FRAME_VECTORS} == {int(t) for t in FrameType}


@pytest.mark.parametrize("vector", FRAME_VECTORS, ids=[v["name"] for v in FRAME_VECTORS])
def test_frame_vector_encodes(vector: dict[str, Any]) -> None:
    frame = gen.frame_from_json(vector)
    assert (int(frame.TYPE), frame.TYPE.name) == (vector["code"], vector["type"])
    assert encode(frame).hex() == vector["hex"]


@pytest.mark.parametrize("vector", FRAME_VECTORS, ids=[v["name"] for v in FRAME_VECTORS])
def test_frame_vector_decodes(vector: dict[str, Any]) -> None:
    frame = gen.frame_from_json(vector)
    decoded = decode_all(bytes.fromhex(vector["hex"]))
    assert decoded == [frame]
    assert isinstance(decoded[0], Frame)
    # The wire map holds exactly the listed keys, in the listed order.
    assert list(decoded[0].to_map()) == list(vector["fields"])
    assert gen.to_json(decoded[0].to_map()) == vector["fields"]


@pytest.mark.parametrize("vector", FRAME_VECTORS, ids=[v["name"] for v in FRAME_VECTORS])
def test_frame_vector_decodes_byte_by_byte(vector: dict[str, Any]) -> None:
    raw = bytes.fromhex(vector["hex"])
    events, err = run_stream([raw[i:i + 1] for i in range(len(raw))])
    assert err is None
    assert events == [gen.frame_from_json(vector)]


@pytest.mark.parametrize("vector", STREAM_VECTORS, ids=[v["name"] for v in STREAM_VECTORS])
def test_stream_vector(vector: dict[str, Any]) -> None:
    stream = gen.stream_from_json(vector)
    expected = [gen.event_from_json(e) for e in vector["events"]]
    chunkings = [[stream]]
    if len(stream) < 4096:
        chunkings.append([stream[i:i + 1] for i in range(len(stream))])
    else:
        chunkings.append([stream[i:i + 65536] for i in range(0, len(stream), 65536)])
    for chunks in chunkings:
        events, err = run_stream(chunks)
        assert events == expected
        if vector["error"] is None:
            assert err is None
        else:
            assert err is not None and err.code == vector["error"]
            assert err.frame_type == vector["frame_type"]
            assert err.field_name == vector["field"]


# --------------------------------------------------------------------------------------------- the spec


def test_spec_contains_the_worked_example() -> None:
    assert gen.example_hexdump() in SPEC.read_text(encoding="utf-8")


def test_worked_example_is_a_consistent_exchange() -> None:
    """The example's REPLAY and DATA line up with WELCOME.ring_end, as the offset rules require."""
    hello, welcome, replay, data = (frame for _, frame in gen.EXAMPLE)
    assert isinstance(welcome, wire.Welcome) and isinstance(replay, wire.Replay)
    assert isinstance(data, Data) and isinstance(hello, wire.Hello)
    assert replay.offset + len(replay.data) == welcome.ring_end
    assert welcome.version == min(hello.version, wire.PROTOCOL_VERSION) and welcome.role == hello.role


def _spec_section(frame_type: FrameType) -> str:
    text = SPEC.read_text(encoding="utf-8")
    match = re.search(rf"^### 0x{frame_type:02X} {frame_type.name}\b.*?(?=^### |^## )", text, re.M | re.S)
    assert match, f"PROTOCOL.md has no section '### 0x{frame_type:02X} {frame_type.name}'"
    return match.group(0)


@pytest.mark.parametrize("frame_type", list(FrameType), ids=lambda t: t.name)
def test_spec_documents_every_frame_and_field(frame_type: FrameType) -> None:
    text = SPEC.read_text(encoding="utf-8")
    assert re.search(rf"^\| 0x{frame_type:02X} \| {frame_type.name} \|", text, re.M)
    section = _spec_section(frame_type)
    for f in structs.fields(FRAME_CLASSES[frame_type]):
        key = f.metadata["key"] or f.name
        if frame_type != FrameType.DATA:
            assert f"| `{key}` |" in section, f"{frame_type.name}.{key} is not in its field table"


ERROR_CODES = {
    "protocol": None, "not_hello": True, "handshake_timeout": True, "unsupported_version": True,
    "bad_role": True, "bad_payload": True, "missing_field": True, "bad_field": True, "too_large": True,
    "truncated": True, "forbidden": None, "replaced": True, "bad_signal": False, "bad_offset": True,
    "not_running": False, "spawn_failed": False, "too_slow": True, "too_many_clients": True, "internal": True,
    "frame_timeout": True, "busy": True,
}


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_spec_error_table(code: str) -> None:
    """Each ERROR code has a row saying whether it is fatal (None: depends on the case)."""
    text = SPEC.read_text(encoding="utf-8")
    row = re.search(rf"^\| `{code}` \| (\w+)", text, re.M)
    assert row, f"no row for {code}"
    assert row.group(1) == {True: "yes", False: "no", None: "depends"}[ERROR_CODES[code]]


@pytest.mark.parametrize(
    ("exc", "code"),
    [(ProtocolError, "protocol"), (TruncatedFrame, "truncated"), (BadPayload, "bad_payload"),
     (MissingField, "missing_field"), (BadField, "bad_field"), (FrameTooLarge, "too_large")],
)
def test_exception_codes_are_error_codes(exc: type[ProtocolError], code: str) -> None:
    assert exc.code == code and code in ERROR_CODES


# --------------------------------------------------------------------------------------------- units


@pytest.mark.parametrize("frame", [Data(b"x"), wire.Resize(cols=80, rows=24), wire.Exit(code=1, signal=None)],
                         ids=["data", "resize", "exit"])
def test_frames_are_immutable(frame: wire.Frame) -> None:
    name = structs.fields(frame)[0].name
    with pytest.raises(structs.FrozenInstanceError):
        setattr(frame, name, getattr(frame, name))
    with pytest.raises(structs.FrozenInstanceError):
        delattr(frame, name)
    with pytest.raises(structs.FrozenInstanceError):
        frame.extra = 1  # type: ignore[attr-defined]
    assert structs.replace(frame) == frame and hash(structs.replace(frame)) == hash(frame)


def test_encode_data_matches_encode() -> None:
    payload = bytes(range(256)) * 3
    assert encode_data(payload) == encode(Data(payload))
    assert encode_data(memoryview(payload)) == encode(Data(payload))


_KEY = wire.encode_data(b"a")


@pytest.mark.parametrize(("buffered", "chunk", "payload"), [
    (b"", _KEY, b"a"),
    (b"", wire.encode_data(b"x" * 70000), b"x" * 70000),
    (b"", memoryview(_KEY), b"a"),
    (b"", wire.encode_data(b""), None),  # empty DATA: the decoder's business
    (b"", _KEY[:-1], None),  # incomplete
    (b"", _KEY + _KEY, None),  # two frames
    (b"", _KEY + b"\x01", None),  # a frame and the start of another
    (b"", wire.encode(wire.Ping(nonce=1)), None),  # not DATA
    (b"", b"\x01\x00\x00", None),  # a partial header
    (_KEY[:2], _KEY, None),  # something is buffered already
], ids=["key", "64k", "memoryview", "empty", "short", "two", "and-more", "ping", "header", "buffered"])
def test_sole_data_takes_only_one_whole_data_frame(buffered: bytes, chunk: bytes, payload: bytes | None) -> None:
    d = Decoder()
    d.feed(buffered)
    got = d.sole_data(chunk)
    assert (None if got is None else bytes(got)) == payload
    assert d.buffered == len(buffered)  # nothing consumed either way


def test_sole_data_respects_the_frame_limit_and_a_skip_in_progress() -> None:
    d = Decoder(max_frame=4)
    assert d.sole_data(wire.encode_data(b"12345")) is None
    d.feed(HEADER.pack(FrameType.DATA, 10) + b"12")  # an oversized frame being skipped
    assert isinstance(next(d.events()), wire.Skipped)
    assert d.sole_data(wire.encode_data(b"ab")) is None  # the rest of the skipped payload comes first


def test_exact_limit_is_accepted_and_one_more_is_skipped() -> None:
    limit = 100
    exact = encode(Data(b"a" * limit))
    over = encode(Data(b"b" * (limit + 1)))
    ping = encode(Ping(nonce=9))
    events, err = run_stream([exact + over + ping], max_frame=limit)
    assert err is None
    assert events == [Data(b"a" * limit), Skipped(FrameType.DATA, limit + 1), Ping(nonce=9)]


def test_default_limit_accepts_exactly_16_mib() -> None:
    payload = bytes(MAX_FRAME_SIZE)
    assert decode_all(encode_data(payload)) == [Data(payload)]


def test_oversized_skip_across_many_small_chunks() -> None:
    """An oversized frame trickling in is discarded as it comes: nothing of it is ever buffered."""
    limit = 1000
    ping = encode(Ping(nonce=3))
    stream = HEADER.pack(FrameType.HELLO, limit + 1) + b"\xaa" * (limit + 1) + ping
    decoder = Decoder(limit)
    events: list[DecodedEvent] = []
    for i in range(0, len(stream), 3):
        decoder.feed(stream[i:i + 3])
        got, err = drain(decoder)
        assert err is None
        events += got
        assert decoder.buffered < len(ping)  # at most a piece of the PING, never the 1001 skipped bytes
    decoder.close()
    assert events == [Skipped(FrameType.HELLO, limit + 1), Ping(nonce=3)]


def test_oversized_16_mib_skip_in_64k_chunks() -> None:
    stream = HEADER.pack(FrameType.DATA, MAX_FRAME_SIZE + 1) + bytes(MAX_FRAME_SIZE + 1) + encode(Status())
    decoder = Decoder()
    events: list[DecodedEvent] = []
    for i in range(0, len(stream), 65536):
        decoder.feed(stream[i:i + 65536])
        got, err = drain(decoder)
        assert err is None
        events += got
        assert decoder.buffered <= 65536
    decoder.close()
    assert events == [Skipped(FrameType.DATA, MAX_FRAME_SIZE + 1), Status()]


TRUNCATION_FRAMES = [
    encode(Ping(nonce=1)),
    encode(Data(b"hello world")),
    encode(Resize(cols=80, rows=24)),
    encode(wire.Hello(version=2, role="viewer", client="x")),
    HEADER.pack(0x7F, 4) + b"abcd",
]


@pytest.mark.parametrize("raw", TRUNCATION_FRAMES, ids=lambda r: f"type-0x{r[0]:02x}")
def test_close_on_partial_frame_names_its_type(raw: bytes) -> None:
    for cut in range(1, len(raw)):
        decoder = Decoder()
        decoder.feed(raw[:cut])
        assert decoder.next_event() is None
        with pytest.raises(TruncatedFrame) as info:
            decoder.close()
        assert info.value.frame_type == raw[0]
        assert info.value.code == "truncated"


def test_close_inside_a_skipped_frame_names_its_type() -> None:
    decoder = Decoder(10)
    decoder.feed(HEADER.pack(FrameType.REPLAY, 11) + b"12345")
    assert decoder.next_event() == Skipped(FrameType.REPLAY, 11)
    with pytest.raises(TruncatedFrame) as info:
        decoder.close()
    assert info.value.frame_type == FrameType.REPLAY


def test_close_on_a_frame_boundary_is_quiet() -> None:
    decoder = Decoder()
    decoder.feed(encode(Ping()) + encode(Status()))
    assert list(decoder.events()) == [Ping(), Status()]
    decoder.close()
    decoder.close()


def test_decoder_carries_on_after_a_bad_frame() -> None:
    """A bad frame is consumed before the error is raised, so the next frame decodes."""
    decoder = Decoder()
    decoder.feed(HEADER.pack(FrameType.RESIZE, 1) + b"\xc1" + encode(Ping(nonce=5)))
    with pytest.raises(BadPayload) as info:
        decoder.next_event()
    assert info.value.frame_type == FrameType.RESIZE and info.value.code == "bad_payload"
    assert decoder.next_event() == Ping(nonce=5)
    assert decoder.buffered == 0


def test_unknown_type_is_reported_not_decoded() -> None:
    assert decode_all(HEADER.pack(0x42, 2) + b"\xc1\xc1") == [Unknown(0x42, 2)]


def test_error_message_names_frame_and_field() -> None:
    payload = b"\x82\xa4cols\xc3\xa4rows\x18"  # {"cols": true, "rows": 24}
    with pytest.raises(BadField) as info:
        decode_all(HEADER.pack(FrameType.RESIZE, len(payload)) + payload)
    assert info.value.field_name == "cols"
    assert "RESIZE" in str(info.value) and "cols" in str(info.value)


def test_large_buffers_are_compacted() -> None:
    """Consumed bytes are released even when the buffer never runs empty (chunks straddle frames)."""
    decoder = Decoder()
    frame = encode_data(b"z" * 4000)
    stream = frame * 150
    largest = 0
    for i in range(0, len(stream), 3000):
        decoder.feed(stream[i:i + 3000])
        assert all(event == Data(b"z" * 4000) for event in decoder.events())
        largest = max(largest, len(decoder._buf))
    decoder.close()
    assert largest < 3 * 65536  # without compaction this reaches the whole 600 KB stream


# --------------------------------------------------------------------------------------------- properties

_INT_RANGE = {"uint": (0, 2**64 - 1), "int": (-(2**63), 2**64 - 1)}
_msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _kind_strategy(kind: str) -> st.SearchStrategy[Any]:
    if kind in _INT_RANGE:
        lo, hi = _INT_RANGE[kind]
        return st.integers(lo, hi)
    return {
        "float": st.floats(allow_nan=False),
        "str": st.text(max_size=40),
        "bool": st.booleans(),
        "bin": st.binary(max_size=300),
        "str_list": st.lists(st.text(max_size=10), max_size=5),
        "str_map": st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=5),
        "map": st.dictionaries(st.text(max_size=10), _msgpack_values, max_size=5),
        "list": st.lists(_msgpack_values, max_size=5),
    }[kind]


def _frame_strategy(cls: type[Frame]) -> st.SearchStrategy[Frame]:
    """Any valid frame of one class: every field drawn from its wire kind, nil where allowed."""
    if cls is Data:
        return st.builds(Data, st.binary(max_size=2000))
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in structs.fields(cls):
        strategy = _kind_strategy(f.metadata["kind"])
        if (cls, f.name) == (Welcome, "exit"):  # an exit record (PROTOCOL.md 6.2), checked as such
            strategy = _frame_strategy(Exit).map(lambda e: e.to_map())
        elif (cls, f.name) == (Event, "kind"):  # an exited event's data is an exit record: drawn apart
            strategy = strategy.filter(lambda kind: kind != "exited")
        if f.metadata["nullable"]:
            strategy = st.none() | strategy
        kwargs[f.name] = strategy
    return st.builds(cls, **kwargs)


any_frame = st.one_of([_frame_strategy(cls) for cls in FRAME_CLASSES.values()])


@pytest.mark.parametrize("cls", list(FRAME_CLASSES.values()), ids=lambda c: c.TYPE.name)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_frame_class_round_trips(cls: type[Frame], data: st.DataObject) -> None:
    frame = data.draw(_frame_strategy(cls))
    assert decode_all(encode(frame)) == [frame]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=st.lists(any_frame, max_size=8), data=st.data())
def test_any_split_decodes_the_same_frames(frames: list[Frame], data: st.DataObject) -> None:
    stream = b"".join(encode(f) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    bounds = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    events, err = run_stream(chunks)
    assert err is None
    assert events == frames


_known_types = st.sampled_from([int(t) for t in FrameType])
_framed_garbage = st.lists(
    st.tuples(_known_types | st.integers(0, 255), st.binary(max_size=64)).map(
        lambda tp: HEADER.pack(tp[0], len(tp[1])) + tp[1]
    ),
    max_size=6,
).map(b"".join)


@settings(max_examples=200, deadline=None)
@given(
    garbage=st.binary(max_size=3000) | _framed_garbage,
    max_frame=st.sampled_from([0, 16, 1024, MAX_FRAME_SIZE]),
    data=st.data(),
)
def test_garbage_only_raises_protocol_errors(garbage: bytes, max_frame: int, data: st.DataObject) -> None:
    decoder = Decoder(max_frame)
    pos = 0
    while pos < len(garbage):
        size = data.draw(st.integers(1, 512))
        chunk = garbage[pos:pos + size]
        pos += size
        decoder.feed(chunk)
        while True:
            try:
                if decoder.next_event() is None:
                    break
            except ProtocolError:
                continue  # the bad frame was consumed; keep going like a lenient client would
        assert decoder.buffered <= max_frame + HEADER_SIZE + len(chunk)
    try:
        decoder.close()
    except TruncatedFrame as exc:
        assert exc.code == "truncated"


@pytest.mark.parametrize(("name", "bare"), [("KILL", "KILL"), ("kill", "KILL"), ("SIGkill", "KILL"),
                                            ("SIGWINCH", "WINCH"), ("BOGUS", None), ("", None), (9, None),
                                            (None, None)])
def test_bare_signal(name: object, bare: str | None) -> None:
    assert wire.bare_signal(name) == bare


@pytest.mark.parametrize(("frame", "field"), [
    (wire.Resize(cols=0, rows=24), "cols"), (wire.Resize(cols=80, rows=65536), "rows"),
    (wire.Resize(cols=True, rows=24), "cols"), (wire.Stop(grace=-1.0), "grace"),
    (wire.Stop(grace=float("nan")), "grace"), (wire.Stop(grace=float("inf")), "grace"),
    (wire.Resize(cols=80, rows=24), None), (wire.Resize(cols=65535, rows=1), None), (wire.Stop(grace=None), None),
    (wire.Stop(grace=0), None), (wire.Signal(signal="BOGUS"), None),
    (wire.Hello(version=3, role="terminal", cols=80, rows=24), None), (wire.Hello(version=3, role="terminal"), None),
    (wire.Hello(version=3, role="terminal", cols=80), "rows"),
    (wire.Hello(version=3, role="terminal", rows=24), "cols"),
    (wire.Hello(version=3, role="terminal", cols=0, rows=24), "cols"),
    (wire.Hello(version=3, role="terminal", cols=80, rows=65536), "rows"),
])
def test_check_request(frame: wire.Frame, field: str | None) -> None:
    """One set of range rules, applied by the shellper (fatal bad_field) and by tower_client before sending."""
    if field is None:
        wire.check_request(frame)
        return
    with pytest.raises(wire.BadField) as caught:
        wire.check_request(frame)
    assert caught.value.field_name == field and caught.value.frame_type == frame.TYPE
