"""shellper.core.detachkeys: the detach key in typed input detaches at once; what follows it is kept."""

from __future__ import annotations

import pytest

from shellper.core.detachkeys import KeysEnd, read_keys

K = 0x1C
T, D = KeysEnd.TYPING, KeysEnd.DETACH


@pytest.mark.parametrize(("data", "sent", "end", "after"), [
    (b"abc", b"abc", T, b""),
    (b"", b"", T, b""),
    (b"ab\x1c", b"ab", D, b""),  # a lone key ending the read: detach at once, no waiting for a double
    (b"ab\x1cxy", b"ab", D, b"xy"),  # followed by more: detach, the rest kept for the terminal it returns to
    (b"ab\x1c\x1cxy", b"ab\x1cxy", T, b""),  # doubled in one read: sent once
    (b"\x1c\x1c\x1c", b"\x1c", D, b""),
    (b"\x1c\x1c\x1c\x1c", b"\x1c\x1c", T, b""),
    (b"\x1c\x1c\x1cecho hi\r", b"\x1c", D, b"echo hi\r"),
])
def test_read_keys(data: bytes, sent: bytes, end: KeysEnd, after: bytes) -> None:
    assert read_keys(data, K) == (sent, end, after)


def test_no_detach_key_sends_everything() -> None:
    assert read_keys(b"a\x1c\x1cb\x1c", None) == (b"a\x1c\x1cb\x1c", T, b"")
