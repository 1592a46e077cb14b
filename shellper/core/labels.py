"""A session's labels: short ``key=value`` pairs a person or a Tower puts on it (``shellper set NAME k=v``) to
find it again (``ls --where k=v``). They live in the session's record and its STATUS; a label is shown by
``ls -l`` and is no secret. Keys and values are bounded and printable, as anything ``ls`` prints must be."""

from __future__ import annotations

from shellper.core.errors import ShellperError

MAX_LABELS = 32
"""Labels on one session at most: enough to describe it, too few to make its record large."""
MAX_KEY_LEN = 64
MAX_VALUE_LEN = 256
KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/")
"""A key's characters: those of names (core/names.py) and '/', for a prefix (``team/owner``)."""


class BadLabel(ShellperError, ValueError):
    """A label that cannot be kept: a bad key, a value too long or not printable, too many."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def validate_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise BadLabel("a label's key must be a non-empty string")
    if len(key) > MAX_KEY_LEN:
        raise BadLabel(f"label key {key[:MAX_KEY_LEN]!r}...: at most {MAX_KEY_LEN} characters")
    if not set(key) <= KEY_CHARS or not key[0].isalnum():
        raise BadLabel(f"label key {key!r}: letters, digits and _ . - / only, starting with a letter or digit")
    return key


def validate_value(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise BadLabel(f"label {key!r}: its value must be a string")
    if len(value) > MAX_VALUE_LEN:
        raise BadLabel(f"label {key!r}: its value is {len(value)} characters, at most {MAX_VALUE_LEN}")
    if not value.isprintable():
        raise BadLabel(f"label {key!r}: its value holds a control character")
    return value


def validate_labels(labels: object) -> dict[str, str]:
    """``labels`` if it is a map of at most MAX_LABELS valid labels (none with an empty value)."""
    if not isinstance(labels, dict):
        raise BadLabel("labels must be a map of key to value")
    if len(labels) > MAX_LABELS:
        raise BadLabel(f"{len(labels)} labels: at most {MAX_LABELS}")
    for key, value in labels.items():
        validate_value(validate_key(key), value)
        if not value:
            raise BadLabel(f"label {key!r}: an empty value (an empty value removes a label)")
    return dict(labels)


def apply_changes(labels: dict[str, str], changes: dict[str, str]) -> dict[str, str]:
    """``labels`` with ``changes`` made: each key set to its value, or removed where the value is empty;
    BadLabel (and nothing changed) if a change is bad or the result would hold too many."""
    merged = dict(labels)
    for key, value in changes.items():
        validate_value(validate_key(key), value)
        if value:
            merged[key] = value
        else:
            merged.pop(key, None)
    if len(merged) > MAX_LABELS:
        raise BadLabel(f"{len(merged)} labels: at most {MAX_LABELS}")
    return merged


def parse_assignment(text: str) -> tuple[str, str]:
    """``key=value`` (``key=``: remove it) as the command line gives it."""
    key, sep, value = text.partition("=")
    if not sep:
        raise BadLabel(f"{text!r}: expected KEY=VALUE (KEY= removes the label)")
    validate_value(validate_key(key), value)
    return key, value


def matches(labels: dict[str, str], wanted: dict[str, str]) -> bool:
    """Whether every ``key=value`` wanted is among ``labels`` (``key=`` wanted: the key is absent)."""
    return all(labels.get(key, "") == value for key, value in wanted.items())
