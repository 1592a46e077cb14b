"""A Fleet over a private runtime directory, and waiting on its stream."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tower_client.fleet import Fleet, FleetPolicy
from tower_client.stream import FleetItem

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(300)"]


def make_fleet(root: Path, runtime_dir: Path, **policy: Any) -> Fleet:
    return Fleet(runtime_dir, root / "registry.json", root / "journal.json", policy=FleetPolicy(grace=1.0, **policy))


async def wait_for(fleet: Fleet, match: Callable[[FleetItem], bool], timeout: float = 20.0,
                   seen: list[FleetItem] | None = None) -> FleetItem:
    """Consume (and acknowledge) the fleet's stream until an item matches; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        item = await fleet.next(max(0.0, deadline - time.monotonic()))
        if item is None:
            pytest.fail(f"no matching item within {timeout:g} s; seen: {seen[-10:] if seen else '-'}")
        fleet.ack(item)
        if seen is not None:
            seen.append(item)
        if match(item):
            return item
