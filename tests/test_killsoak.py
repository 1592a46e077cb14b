"""``make soak``: kill -9 a shellper at a random moment of every state, bystanders alive, then
``tower-client reconcile --apply``; nothing of the session may survive, no bystander may be signalled, no
file, cgroup or zombie may be left. Per containment mode (cgroup: a per-run parent under the v2 mount;
none). See killsoak_driver.py for a trial and what is measured, RELIABILITY.md for the last figures.

The fast version (``make test``) runs KILLSOAK_FAST_TRIALS (default 5) trials per mode, the slow one
KILLSOAK_TRIALS (default 200). KILLSOAK_SEED (default: a fresh one, printed) fixes the states and moments;
KILLSOAK_ONLY=3,17 re-runs those trials of the seed; KILLSOAK_REPORT=file.json keeps the figures (one
object per mode, merged into the file).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest
from killsoak_driver import KillSoakConfig, Mode, Summary, cgroup_available, run_killsoak
from soak_support import scales

OPEN_DEFECTS = ("issue 15: a dead session's processes are not yet ended through its cgroup, nor looked for "
                "at all when its record names no child (backoff, restart loop, husk, between SPAWN's kill "
                "and spawn: defect 11), and its cgroup is not removed")
"""Why survivors, files and cgroups left are expected today: the test reports them as an expected failure
(with the figures) instead of failing. Set to "" once tower_client ends a dead session through its cgroup
and looks for survivors in every state: then any of them fails the test."""


@dataclass(frozen=True)
class KillScale:
    trials_env: str
    default: int


SEED = int(os.environ.get("KILLSOAK_SEED") or secrets.randbelow(1 << 31))
"""One seed for both modes of a run: their trial plans complement each other (killsoak_driver.state_of)."""


@scales(KillScale("KILLSOAK_FAST_TRIALS", 5), KillScale("KILLSOAK_TRIALS", 200))
@pytest.mark.parametrize("mode", [Mode.CGROUP, Mode.NONE], ids=lambda m: str(m))
def test_kill_at_a_random_moment(scale: KillScale, mode: Mode) -> None:
    if mode is Mode.CGROUP and cgroup_available() is None:
        pytest.skip("needs root and a writable cgroup v2 hierarchy (/sys/fs/cgroup or /sys/fs/cgroup/unified)")
    only = os.environ.get("KILLSOAK_ONLY")
    cfg = KillSoakConfig(mode=mode, trials=int(os.environ.get(scale.trials_env, str(scale.default))), seed=SEED,
                         only=frozenset(int(i) for i in only.split(",")) if only else None,
                         progress=print if scale.default > 50 else None)
    summary = run_killsoak(cfg)
    report = summary.report()
    print("\n" + report)
    _keep(summary)
    t = summary.totals(summary.results)
    assert t["trials"] == len(summary.results) > 0
    hard = {k: t[k] for k in ("signalled", "zombies", "errors", "stop_left")}
    assert not any(hard.values()), f"{hard}\n{report}"
    contained = {k: t[k] for k in ("survivors", "files_left", "cgroups_left", "apply_failed")}
    if any(contained.values()):
        if OPEN_DEFECTS:
            pytest.xfail(f"{OPEN_DEFECTS}: {contained}\n{report}")
        pytest.fail(f"{contained}\n{report}")


def _keep(summary: Summary) -> None:
    path = os.environ.get("KILLSOAK_REPORT")
    if not path:
        return
    p = Path(path)
    data = json.loads(p.read_text()) if p.exists() else {}
    data[summary.mode.value] = {**summary.to_dict(), "table": summary.table()}
    p.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
