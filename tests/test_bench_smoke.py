"""The benchmark runs end to end in --quick mode and writes its JSON: no timing is checked here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.waiting import poll_until

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


def _scale(root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "bench.scale", "--sessions", "3", "--rate", "20", "--window", "1.5",
            "--repeats", "1", "--root", str(root), *extra]


def test_the_scale_bench_runs_small_and_leaves_nothing(tmp_path: Path) -> None:
    """bench.scale end to end with 3 sessions: both Towers' figures, the kill -9 and the adoption of all 3;
    no timing is checked (the 200-session run with --check is make bench's)."""
    root = tmp_path / "r"
    root.mkdir(mode=0o700)
    out = tmp_path / "scale.json"
    done = subprocess.run(_scale(root, "--out", str(out)), cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())["figures"]
    assert figures["launch"]["launched"] == 3 and figures["adopt"]["adopted"] == 3
    assert figures["launch"]["cpu_per_item_us"] and figures["adopt"]["cpu_per_item_us"]
    assert "repeat_not_adopted" not in figures["adopt"] and not figures["stop"]["stop_errors"]
    assert "reconcile of 3" in done.stdout and "left after cleanup" not in done.stderr
    assert list(root.iterdir()) == []
    assert _processes_mentioning(str(root)) == []


def test_the_scale_bench_interrupted_stops_every_session(tmp_path: Path) -> None:
    """SIGTERM to bench.scale while its first Tower follows its sessions: every session and the Tower end,
    and the run's directory is removed."""
    root = tmp_path / "r"
    root.mkdir(mode=0o700)
    bench = subprocess.Popen(_scale(root, "--window", "60"), cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        def three_sessions() -> bool:
            return any(len(list(run.glob("z*.sock"))) == 3 for run in root.glob("*/run"))

        poll_until(three_sessions, timeout=120, what="the first Tower's 3 sessions")
        assert len(_processes_mentioning(str(root))) >= 3
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=120)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert bench.returncode == 130, err[-3000:]
    assert "interrupted" in err and "left after cleanup" not in err
    assert list(root.iterdir()) == []
    assert _processes_mentioning(str(root)) == []
