"""shellper.core.detachkeys: the detach key in typed input, doubled to send it through."""

from __future__ import annotations

import pytest

from shellper.core.detachkeys import KeysEnd, read_keys

K = 0x1C
T, P, D = KeysEnd.TYPING, KeysEnd.PENDING, KeysEnd.DETACH


@pytest.mark.parametrize(("data", "pending", "sent", "end"), [
    (b"abc", False, b"abc", T),
    (b"", False, b"", T),
    (b"ab\x1c", False, b"ab", P),  # a lone key ending the read: wait for its double
    (b"ab\x1cxy", False, b"ab", D),  # followed by anything else: detach, the rest dropped
    (b"ab\x1c\x1cxy", False, b"ab\x1cxy", T),  # doubled in one read: sent once
    (b"\x1c\x1c\x1c", False, b"\x1c", P),
    (b"\x1c\x1c\x1c\x1c", False, b"\x1c\x1c", T),
    (b"\x1cz", True, b"\x1cz", T),  # the double arrived in the next read
    (b"\x1c", True, b"\x1c", T),
    (b"\x1c\x1c", True, b"\x1c", P),
    (b"z", True, b"", D),  # something else after a lone key: the detach stands
    (b"", True, b"", D),  # end of input
])
def test_read_keys(data: bytes, pending: bool, sent: bytes, end: KeysEnd) -> None:
    assert read_keys(data, K, pending) == (sent, end)


def test_no_detach_key_sends_everything() -> None:
    assert read_keys(b"a\x1c\x1cb\x1c", None, False) == (b"a\x1c\x1cb\x1c", T)
