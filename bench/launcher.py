"""The warm launcher's figures: launch -> socket accepting, and what 20 idle sessions cost in PSS.

    python -m bench.launcher [--runs N] [--sessions N] [--check]

Launch: ``shellper run`` (the console script) with the launcher warm and with ``SHELLPER_LAUNCHER=off``
(today's cold path, the prefork), ``launch()`` from a running process (a Tower) warm and cold, next to
``tmux new-session -d`` and ``dtach -n`` (each returns once its socket accepts). Variants take turns,
run by run; medians (and quartiles) are printed. Containment none, so a cgroup move's RCU wait is not in it.

Memory: N sessions (``cat``) started warm, then N cold, each answered a tower's STATUS; the PSS of every
shellper (and of the launcher) from /proc/PID/smaps_rollup. The marginal PSS per session is the total's
growth over N: for the warm case the launcher's own PSS before the first session is the base.

Targets (issue 29), each printed with its verdict; with ``--check`` (``make bench``) the exit status is 1 when
a figure misses its target by more than its measured noise: for a ratio of medians, the sum of both sides'
relative interquartile ranges; for a PSS figure, the interquartile range of the sessions' PSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import median
from bench.noise import judge, quartiles, spread
from shellper.client.blocking import Client
from shellper.client.launch import LaunchInfo, launch
from shellper.client.warm import start_launcher
from shellper.core.config import SessionConfig
from shellper.host import warmstart

SHELLPER = str(Path(sys.executable).with_name("shellper"))

TARGETS = {"shellper run, warm": 2.0, "launch() from a process, warm": 1.0}
"""Launch -> socket accepting, at most this many times tmux's ``new-session -d`` in the same run."""
MARGINAL_PSS_MIB = 3.0
"""Marginal PSS per warm session, MiB, at most."""
IDLE_PSS_MIB = 5.0
"""PSS of one idle warm session, MiB, at most."""


def pss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def launcher_pid(directory: str) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            import json

            pid = json.loads(Path(directory, warmstart.LOCK_NAME).read_text())["pid"]
            if os.path.exists(os.path.join(directory, warmstart.SOCKET_NAME)):
                return int(pid)
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise SystemExit("no launcher came up")


def stop(directory: str, name: str) -> None:
    subprocess.run([SHELLPER, "--dir", directory, "stop", "--grace", "0.5", name], capture_output=True, timeout=60,
                   env={**os.environ, warmstart.LAUNCHER_ENV: "off"})


def config(directory: str, name: str) -> SessionConfig:
    return SessionConfig(name=name, argv=["cat"], dir=directory, cwd="/", env=dict(os.environ), containment="none")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--check", action="store_true", help="exit 1 when a figure misses its target by more than "
                        "its measured noise")
    args = parser.parse_args()
    missed: list[str] = []
    base = tempfile.mkdtemp(prefix="spbl-", dir="/tmp")
    os.chmod(base, 0o700)
    warm_dir, cold_dir = os.path.join(base, "w"), os.path.join(base, "c")
    os.mkdir(warm_dir, 0o700)
    os.mkdir(cold_dir, 0o700)
    tmux_sock, dtach_sock = os.path.join(base, "tmux.sock"), os.path.join(base, "dtach.sock")
    counter = iter(range(1_000_000))
    try:
        os.environ[warmstart.LAUNCHER_ENV] = "on"
        start_launcher(warm_dir)
        launcher_pid(warm_dir)

        def cli(directory: str, on: bool) -> float:
            name = f"r{next(counter)}"
            env = {**os.environ, warmstart.LAUNCHER_ENV: "on" if on else "off"}
            t0 = time.perf_counter()
            subprocess.run([SHELLPER, "--dir", directory, "run", name, "--containment", "none", "--", "cat"], env=env,
                           capture_output=True, check=True, timeout=60)
            elapsed = time.perf_counter() - t0
            stop(directory, name)
            return elapsed

        def library(directory: str, on: bool) -> float:
            name = f"l{next(counter)}"
            os.environ[warmstart.LAUNCHER_ENV] = "on" if on else "off"
            t0 = time.perf_counter()
            launch(config(directory, name))
            elapsed = time.perf_counter() - t0
            stop(directory, name)
            return elapsed

        def tmux() -> float:
            t0 = time.perf_counter()
            subprocess.run(["tmux", "-S", tmux_sock, "new-session", "-d", "cat"], check=True, timeout=60)
            elapsed = time.perf_counter() - t0
            subprocess.run(["tmux", "-S", tmux_sock, "kill-server"], capture_output=True, timeout=60)
            return elapsed

        def dtach() -> float:
            t0 = time.perf_counter()
            subprocess.run(["dtach", "-n", dtach_sock, "cat"], check=True, timeout=60)
            elapsed = time.perf_counter() - t0
            out = subprocess.run(["fuser", dtach_sock], capture_output=True, text=True)
            for pid in out.stdout.split():
                subprocess.run(["kill", pid], capture_output=True)
            deadline = time.monotonic() + 5
            while os.path.exists(dtach_sock) and time.monotonic() < deadline:
                time.sleep(0.01)
            return elapsed

        variants = {
            "shellper run, warm": lambda: cli(warm_dir, True),
            "shellper run, cold (prefork)": lambda: cli(cold_dir, False),
            "launch() from a process, warm": lambda: library(warm_dir, True),
            "launch() from a process, cold": lambda: library(cold_dir, False),
            "tmux new-session -d": tmux,
            "dtach -n": dtach,
        }
        got: dict[str, list[float]] = {k: [] for k in variants}
        keys = list(variants)
        for i in range(args.runs):
            for key in keys[i % len(keys):] + keys[:i % len(keys)]:
                got[key].append(variants[key]())
        tmux_ms = median(got["tmux new-session -d"]) * 1000
        print(f"launch -> socket accepting, {args.runs} runs each, median [q1-q3] ms, x tmux")
        for key, values in got.items():
            q1, q3 = quartiles(values)
            ratio = median(values) * 1000 / tmux_ms
            verdict = ""
            if key in TARGETS:
                noise = spread(values) + spread(got["tmux new-session -d"])
                verdict = judge(f"{key} <= {TARGETS[key]:g}x tmux", ratio, TARGETS[key] * (1 + noise), missed,
                                f"noise {noise:.0%}")
            print(f"  {key:32} {median(values) * 1000:7.1f} [{q1 * 1000:.1f}-{q3 * 1000:.1f}]  {ratio:5.2f}x{verdict}")

        for label, directory, on in (("warm", warm_dir, True), ("cold", cold_dir, False)):
            os.environ[warmstart.LAUNCHER_ENV] = "on" if on else "off"
            launcher = launcher_pid(directory) if on else 0
            before = pss(launcher) if on else 0
            infos: list[LaunchInfo] = []
            for _ in range(args.sessions):
                info = launch(config(directory, f"m{next(counter)}"))
                infos.append(info)
                with Client(Path(info.socket), "tower", client_name="bench") as tower:
                    tower.connect(replay_bytes=0)
                    tower.status()
            each = [pss(info.pid) for info in infos]
            after = pss(launcher) if on else 0
            total = sum(each) + after - before
            print(f"{label}: {args.sessions} sessions, PSS per shellper median {median(each) / 1024:.2f} MiB; "
                  f"launcher {before / 1024:.2f} -> {after / 1024:.2f} MiB; marginal PSS per session "
                  f"{total / args.sessions / 1024:.2f} MiB (total with launcher {(sum(each) + after) / 1024:.1f} MiB)")
            if on:
                q1, q3 = quartiles([float(e) for e in each])
                noise = (q3 - q1) / 1024
                marginal = total / args.sessions / 1024
                print("  " + judge(f"marginal PSS per session <= {MARGINAL_PSS_MIB:g} MiB", marginal,
                                   MARGINAL_PSS_MIB + noise, missed, f"noise {noise:.2f} MiB").strip())
                print("  " + judge(f"idle PSS of a session <= {IDLE_PSS_MIB:g} MiB", median(each) / 1024,
                                   IDLE_PSS_MIB + noise, missed, f"noise {noise:.2f} MiB").strip())
            for info in infos:
                stop(directory, info.name)
    finally:
        os.environ[warmstart.LAUNCHER_ENV] = "off"
        subprocess.run(["tmux", "-S", tmux_sock, "kill-server"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    if missed:
        print(f"missed beyond noise: {'; '.join(missed)}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
