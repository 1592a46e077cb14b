"""Frames the pure connection and resume tests build on."""

from __future__ import annotations

from typing import Any

from shellper.protocol import wire

INSTANCE = "a" * 32


def welcome(**changes: Any) -> wire.Welcome:
    fields: dict[str, Any] = dict(version=2, name="t", shellper_pid=100, shellper_start_time=1, boot_id="b",
                                  instance_id=INSTANCE, state="running", cols=80, rows=24, ring_start=0,
                                  ring_end=10, event_seq=7, role="tower")
    return wire.Welcome(**{**fields, **changes})
