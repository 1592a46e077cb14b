"""PROTOCOL.md section 2, "When a decoder emits": frames and unknown types once whole, an oversized frame's
`skipped` as soon as its header is in, and nothing from a partial frame."""

from __future__ import annotations

from shellper.protocol.wire import HEADER, Decoder, Ping, Skipped, Unknown, encode

PING = encode(Ping(nonce=1))


def test_a_frame_comes_out_only_once_whole() -> None:
    decoder = Decoder()
    for byte in PING[:-1]:
        decoder.feed(bytes([byte]))
        assert list(decoder.events()) == []
    decoder.feed(PING[-1:])
    assert list(decoder.events()) == [Ping(nonce=1)]


def test_an_unknown_type_comes_out_once_its_payload_is_in() -> None:
    decoder = Decoder()
    decoder.feed(HEADER.pack(0x7F, 3) + b"ab")
    assert list(decoder.events()) == []
    decoder.feed(b"c" + PING)
    assert list(decoder.events()) == [Unknown(0x7F, 3), Ping(nonce=1)]


def test_an_oversized_frame_is_reported_at_its_header_and_the_next_waits_for_its_payload() -> None:
    decoder = Decoder(max_frame=10)
    decoder.feed(HEADER.pack(0x01, 11))
    assert list(decoder.events()) == [Skipped(0x01, 11)]
    decoder.feed(b"\x00" * 10)
    assert list(decoder.events()) == []
    decoder.feed(b"\x00" + PING)
    assert list(decoder.events()) == [Ping(nonce=1)]
