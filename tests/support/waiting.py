"""Waiting without sleeping as synchronisation: on a pidfd, or polling a predicate with a deadline."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import Any, NoReturn

import pytest


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """Wait (on a pidfd, no polling) until ``pid`` has exited; True if it did."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def poll_until(predicate: Any, timeout: float = 10.0, interval: float = 0.02, what: str = "condition",
               fail: Callable[[str], NoReturn] = pytest.fail) -> Any:
    """Poll ``predicate`` until it returns something truthy, or ``fail`` (the test, by default) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
