"""The Tower's registry file, owned for the Tower's whole life: read strictly, rewritten atomically.

The format is the one :func:`tower_client.reconcile.load_registry` reads:
``{"sessions": [{"name": ..., "instance_id": ... or null, ...}], ...}``. Every key the library does
not use, at the top level and in each row, is the Tower's own and is written back unchanged. A file
that is not a registry is refused with the same :class:`~tower_client.reconcile.RegistryError` family
(naming the file and what is wrong) and is never overwritten: a Tower must not silently forget the
sessions a damaged file listed.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from typing import Any

from tower_client.atomicfile import read_small, write_atomic
from tower_client.reconcile import (
    MAX_REGISTRY_BYTES,
    Registry,
    RegistryNotJSON,
    RegistryTooLarge,
    RegistryUnreadable,
    parse_registry,
)

__all__ = ["RegistryFile"]

RESERVED = ("name", "instance_id")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


class RegistryFile:
    """The registry as rows of the Tower's columns, by session name, in file order."""

    def __init__(self, path: str | os.PathLike[str], top: dict[str, Any] | None = None,
                 rows: dict[str, dict[str, Any]] | None = None) -> None:
        self.path = os.fspath(path)
        self.top: dict[str, Any] = top or {}
        """Top-level keys other than ``sessions``: the Tower's own, kept as they are."""
        self.rows: dict[str, dict[str, Any]] = rows or {}

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, missing_ok: bool = True) -> RegistryFile:
        """The registry at ``path``; empty if there is none yet (``missing_ok``). RegistryError otherwise."""
        p = os.fspath(path)
        try:
            data = read_small(p, MAX_REGISTRY_BYTES)
        except OSError as exc:
            if "larger than" in str(exc.strerror):
                raise RegistryTooLarge(p, f"larger than {MAX_REGISTRY_BYTES} bytes") from None
            raise RegistryUnreadable(p, f"cannot read: {exc.strerror or exc}") from None
        if data is None:
            if not missing_ok:
                raise RegistryUnreadable(p, "no such file")
            return cls(p)
        try:
            obj = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise RegistryNotJSON(p, f"not valid JSON: {exc}") from None
        parse_registry(obj, p)  # every check reconcile makes, with its errors
        top = {k: v for k, v in obj.items() if k != "sessions"}
        return cls(p, top, {row["name"]: dict(row) for row in obj["sessions"]})

    def registry(self) -> Registry:
        """The typed view reconcile decides from."""
        return parse_registry({"sessions": list(self.rows.values())}, self.path)

    def get(self, name: str) -> Mapping[str, Any] | None:
        row = self.rows.get(name)
        return None if row is None else copy.deepcopy(row)

    def put(self, name: str, instance_id: str | None, **columns: Any) -> None:
        """Add or update ``name``'s row: its instance and the given columns; its other columns stay."""
        bad = [k for k in columns if k in RESERVED]
        if bad:
            raise ValueError(f"{', '.join(bad)} cannot be set as a column")
        row = self.rows.setdefault(name, {"name": name})
        row["instance_id"] = instance_id
        row.update(columns)
        parse_registry({"sessions": [row]}, self.path)  # refuse a row the file could not be read back with

    def remove(self, name: str) -> None:
        self.rows.pop(name, None)

    def encode(self) -> bytes:
        text = json.dumps({**self.top, "sessions": list(self.rows.values())}, indent=1, allow_nan=False)
        return (text + "\n").encode()

    def save(self) -> None:
        """Replace the file atomically (AtomicWriteError: the old one is untouched)."""
        write_atomic(self.path, self.encode())
