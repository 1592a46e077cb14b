"""The benchmark runs end to end in --quick mode and writes its JSON: no timing is checked here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parent.parent


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_quick_bench_completes_and_writes_every_key(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir(mode=0o700)
    out = tmp_path / "latest.json"
    done = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--idle-seconds", "0.2",
                           "--root", str(root), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report) >= {"meta", "settings", "results", "micro", "rows", "table"}
    assert set(report["results"]) == set(WORKLOADS)
    errors = {k: v["error"] for k, v in report["results"].items() if "error" in v}
    assert not errors, errors
    assert set(report["micro"]) == {"codec", "ring"}
    assert "error" not in report["micro"]["codec"] and "error" not in report["micro"]["ring"]
    assert report["rows"] and all({"section", "metric", "checks"} <= set(r) for r in report["rows"])
    assert report["table"] in done.stdout
    # Everything the run started is gone, and so is its runtime directory.
    assert list(root.iterdir()) == []
    assert _processes_mentioning(str(root)) == []


def test_the_connection_micro_benchmark_runs() -> None:
    """bench.bench_conn drives a real ClientConn with a fake session: it must keep up with the connection."""
    from bench import bench_conn

    results = bench_conn.run(repeat=1, scale=0.001)
    assert len(results) == 4 and all(ns > 0 for ns in results.values())
