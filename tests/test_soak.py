"""``make soak``: many sessions under random clients, signals, SPAWNs and Tower restarts for a fixed time.

The fast version (5 sessions, a few seconds) runs in ``make test``; the slow one runs 50 sessions for
``SOAK_SECONDS`` (default 600; CI sets 120). ``SOAK_REPORT=path`` writes the figures as JSON.
See soak_driver.py for what is checked, and RELIABILITY.md for the figures of the last run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from support.sessions import Sessions
from support.soak import scales
from support.soak_driver import SoakConfig, run_soak


@dataclass(frozen=True)
class SoakScale:
    sessions: int
    seconds: float | None  # None: $SOAK_SECONDS, default 600
    check_every: float
    tower_restart_every: float


@scales(SoakScale(5, 6.0, 1.0, 2.5), SoakScale(50, None, 5.0, 30.0))
def test_soak(sessions: Sessions, scale: SoakScale) -> None:
    seconds = scale.seconds if scale.seconds is not None else float(os.environ.get("SOAK_SECONDS", "600"))
    cfg = SoakConfig(sessions=scale.sessions, seconds=seconds, seed=int(os.environ.get("SOAK_SEED", "1")),
                     check_every=scale.check_every, tower_restart_every=scale.tower_restart_every)
    summary = run_soak(cfg, sessions.dir, sessions.start, lambda name: sessions.stop(name, grace=1.0))
    print("\nsoak: " + json.dumps(summary, sort_keys=True))
    if report := os.environ.get("SOAK_REPORT"):
        Path(report).write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    assert summary["tower_restarts"] >= 1 and summary["checks"] >= 3
    assert summary["compared_bytes"] > 0
    assert sum(summary["exits"].values()) > 0 and summary["actions"]["attach"] > 0
