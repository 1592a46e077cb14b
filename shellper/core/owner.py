"""Who a session belongs to: the owner a Tower acts for, so Towers sharing a runtime directory never touch
each other's sessions."""

from __future__ import annotations

import os

from shellper.core.errors import ShellperError

OWNER_ENV = "SHELLPER_OWNER"
MAX_OWNER_LEN = 64


class BadOwner(ShellperError, ValueError):
    """An owner that cannot be recorded and compared safely."""

    def __init__(self, owner: object, reason: str) -> None:
        self.owner = owner
        self.reason = reason
        super().__init__(f"invalid owner {owner!r}: {reason}")


def validate_owner(owner: str) -> str:
    """Return ``owner`` if it is 1-64 printable characters without white space or '/'."""
    if not isinstance(owner, str):
        raise BadOwner(owner, "must be a string")
    if not owner:
        raise BadOwner(owner, "is empty")
    if len(owner) > MAX_OWNER_LEN:
        raise BadOwner(owner, f"is {len(owner)} characters; at most {MAX_OWNER_LEN} allowed")
    if not owner.isprintable() or any(c.isspace() or c == "/" for c in owner):
        raise BadOwner(owner, "contains white space, '/' or a control character")
    return owner


def default_owner() -> str:
    """``$SHELLPER_OWNER``, else the user's name, else ``uid-N``."""
    explicit = os.environ.get(OWNER_ENV)
    if explicit:
        return validate_owner(explicit)
    import pwd  # only when no owner is given

    try:
        return validate_owner(pwd.getpwuid(os.geteuid()).pw_name)
    except (KeyError, BadOwner):
        return f"uid-{os.geteuid()}"
