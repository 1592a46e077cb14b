"""The files the package carries for people rather than for Python: shell completions and the man page
(shellper/share, made by tools/completions.py)."""

from __future__ import annotations

import os

SHARE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "share")


def shared_path(name: str) -> str:
    return os.path.join(SHARE, name)


def read_shared(name: str) -> str:
    with open(shared_path(name), encoding="utf-8") as f:
        return f.read()
