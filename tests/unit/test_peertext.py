"""shellper.core.peertext.quote_peer: what a peer sent, quoted for a log or an error reply, bounded."""

from __future__ import annotations

import pytest

from shellper.core.peertext import PEER_QUOTE_CHARS, quote_peer

_TABLE: list[tuple[object, str]] = [
    ("tower", "'tower'"),
    ("", "''"),
    ("a" * PEER_QUOTE_CHARS, repr("a" * PEER_QUOTE_CHARS)),
    ("a" * (PEER_QUOTE_CHARS + 1), repr("a" * PEER_QUOTE_CHARS) + f"... ({PEER_QUOTE_CHARS + 1} chars)"),
    ("x" * 4_000_000, repr("x" * PEER_QUOTE_CHARS) + "... (4000000 chars)"),
    ("\x1b[2J\r\n\x07", r"'\x1b[2J\r\n\x07'"),  # repr: no control character reaches a log or a terminal
    (b"\x00" * 100, repr(b"\x00" * PEER_QUOTE_CHARS) + "... (100 bytes)"),
    (1, "1"),
    (-2.5, "-2.5"),
    (True, "True"),
    (None, "None"),
    (10 ** 5000, "<int of 16610 bits>"),  # repr would be refused (int_max_str_digits) or long
    ([1] * 1000, "<list of 1000>"),
    ({"a": "b" * 10_000}, "<dict of 1>"),
    (object(), "<object>"),
]


@pytest.mark.parametrize(("value", "quoted"), _TABLE,
                         ids=[f"{type(v).__name__}-{i}" for i, (v, _) in enumerate(_TABLE)])
def test_quote_peer(value: object, quoted: str) -> None:
    assert quote_peer(value) == quoted


def test_a_quote_is_bounded_whatever_the_characters() -> None:
    """repr may write one character as up to ten (``'\\U0010ffff'``): still a bound, ten times the limit."""
    worst = "\U0010ffff" * 10_000
    assert len(quote_peer(worst)) <= 10 * PEER_QUOTE_CHARS + 40
    assert quote_peer("abc", limit=2) == "'ab'... (3 chars)"


def test_a_bad_environment_is_described_not_quoted() -> None:
    """What names a bad variable says which, and of what type its value is, never the values: those of
    the others may be secrets, and these messages reach logs and error replies."""
    from shellper.core.execve import env_problem
    from shellper.protocol import wire

    secret = "s3cret-value"
    with pytest.raises(wire.BadField) as err:
        wire.check_fields(wire.Spawn(argv=["sh"], env={"API_KEY": secret, "COUNT": 1}))  # type: ignore[dict-item]
    assert secret not in str(err.value) and "<dict of 2>" in str(err.value)
    for key, value in ((1, secret), ("COUNT", 1), (secret, None)):
        problem = env_problem(key, value)
        assert problem is not None and "expected strings" in problem
        assert secret not in problem or key == secret  # a name is shown; a value never
