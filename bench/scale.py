"""Issue 30's scale figures: a Tower of 200 sessions on a Fleet, killed with -9 and adopted by the next.

    python -m bench.scale [--sessions 200] [--rate 5] [--window 6] [--repeats 5] [--root /tmp] [--check]

A Tower process (this module with ``--tower``) starts a Fleet, launches N sessions (each child prints a
numbered line ``--rate`` times a second), follows them, acknowledging every item, and measures its own CPU
per delivered item over ``--window`` seconds, in one-second slices. The driver then kills it with SIGKILL
and starts a second Tower on the same registry and journal: its ``start()`` discovers, reconciles and
applies (adopts) all N and attaches to each; it measures the same CPU per item, then times ``--repeats``
more discover + reconcile + apply passes (read-only for sessions that are adopted), stops every session
and exits.

Figures: start of all N (wall, and each launch's median and p90), Tower CPU per delivered item (median of
the slices, both Towers), reconcile of N (discover + reconcile + apply: the adopting start's own pass and
the repeats) and the adopting start to every stream attached. Targets (issue 30): at most
``CPU_PER_ITEM_US`` and ``RECONCILE_MS``; with ``--check`` (``make bench``) the exit status is 1 when a
figure misses its target by more than its measured noise (the relative interquartile range of its
samples).

Nothing is left behind: the driver stops every session of its private runtime directory
(``shellper stop --all``) and removes their cgroups, on success, failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import median, percentile, shellper_cli
from bench.noise import spread

CPU_PER_ITEM_US = 50.0
"""Tower CPU per delivered item, microseconds, at most (issue 30)."""
RECONCILE_MS = 300.0
"""Discover + reconcile + apply of 200 sessions, milliseconds, at most (issue 30)."""

ROOT = Path(__file__).resolve().parent.parent
CHILD = ('i=0; while :; do printf "%s %08d ................................\\n" "$0" "$i"; i=$((i+1)); '
         'read -t "$1" _ ; done')
"""Each session's child: a numbered line every 1/rate s; ``read -t`` on the PTY (no input comes) waits
without starting a process, so 200 children cost the machine little beside the Tower."""


# --------------------------------------------------------------------------------------------- the Tower


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process: the Fleet's helpers too
    return r.ru_utime + r.ru_stime


def _sys_cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def _say(what: dict[str, Any]) -> None:
    print(json.dumps(what), flush=True)


async def _tower(args: argparse.Namespace) -> None:
    import tower_client.fleet as fleet_module
    from tower_client import Fleet, FleetPolicy, SessionSpec

    spans: dict[str, float] = {}

    def timed(key: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await call(*a, **kw)
            finally:
                spans.setdefault(f"{key}_start", t0)
                spans[f"{key}_end"] = time.perf_counter()
        return wrapper

    # The start's own phases, timed where the Fleet calls them (module attributes: nothing else changes).
    fleet_module.discover_async = timed("discover", fleet_module.discover_async)  # type: ignore[attr-defined,assignment]
    fleet_module.apply_async = timed("apply", fleet_module.apply_async)  # type: ignore[attr-defined,assignment]

    fleet = Fleet(args.dir, os.path.join(args.state, "registry.json"), os.path.join(args.state, "journal.json"),
                  policy=FleetPolicy(concurrency=args.concurrency, grace=1.0))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, stop.set)
    t0 = time.perf_counter()
    await fleet.start()
    started = time.perf_counter()
    out: dict[str, Any] = {"phase": "adopt" if args.adopt else "launch", "pid": os.getpid()}
    if args.adopt:
        out["start_ms"] = (started - t0) * 1e3
        out["reconcile_ms"] = (spans["apply_end"] - spans["discover_start"]) * 1e3
        out["discover_ms"] = (spans["discover_end"] - spans["discover_start"]) * 1e3
        out["apply_ms"] = (spans["apply_end"] - spans["apply_start"]) * 1e3
        out["attach_ms"] = (started - spans["apply_end"]) * 1e3
        out["adopted"] = len(fleet.sessions)
    else:
        each: list[float] = []
        launch = fleet.launch

        async def timed_launch(spec: Any) -> Any:
            t = time.perf_counter()
            info = await launch(spec)
            each.append(time.perf_counter() - t)
            return info

        fleet.launch = timed_launch  # type: ignore[method-assign]
        specs = [SessionSpec(f"z{i:03d}", ["bash", "-c", CHILD, f"z{i:03d}", f"{1 / args.rate:.3f}"],
                             cwd=args.dir) for i in range(args.sessions)]
        t1 = time.perf_counter()
        results = await fleet.launch_many(specs)
        out["start_all_s"] = time.perf_counter() - t1
        errors = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
        if errors:
            raise SystemExit(f"launch failed: {errors[:3]} ({len(errors)} of {len(results)})")
        out["start_each_median_ms"] = median(each) * 1e3
        out["start_each_p90_ms"] = percentile(each, 90) * 1e3
        out["start_per_session_ms"] = out["start_all_s"] * 1e3 / args.sessions
        out["launched"] = len(fleet.sessions)

    # Follow: take and acknowledge every item. CPU per item in one-second slices once every stream flows.
    heard: set[str] = set()
    slices: list[float] = []
    count, slice_start, slice_cpu, items_total = 0, 0.0, 0.0, 0
    measuring = False
    window_end = 0.0
    spy: subprocess.Popen[bytes] | None = None
    profiler: Any = None
    window_cpu = window_sys = 0.0
    commits = 0
    warm_deadline = time.monotonic() + 60
    async for item in fleet:  # as examples/tower.py takes them; the children keep the stream flowing
        now = time.monotonic()
        fleet.ack(item)
        heard.add(item.session)
        count += 1
        if measuring and now >= window_end:
            break
        if not measuring:
            if len(heard) >= args.sessions or now > warm_deadline:
                measuring, window_end = True, now + args.window
                if args.py_spy and args.adopt:  # where the window's time goes (the adopting Tower ends cleanly)
                    spy = subprocess.Popen([args.py_spy, "record", "--pid", str(os.getpid()), "-d", f"{args.window:g}",
                                            "-r", "250", "-f", "raw", "-o", f"{args.dir}/../spy.txt"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if args.profile and args.adopt:  # cProfile of the window's main thread (bench use)
                    import cProfile
                    profiler = cProfile.Profile()
                    profiler.enable()
                count, slice_start, slice_cpu = 0, now, _cpu()
                window_cpu, window_sys, commits = slice_cpu, _sys_cpu(), fleet.journal.commits
            continue
        if now - slice_start >= 1.0:
            cpu = _cpu()
            if count:
                slices.append((cpu - slice_cpu) / count * 1e6)
            items_total += count
            count, slice_start, slice_cpu = 0, now, cpu
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    out["cpu_per_item_us"] = slices
    if measuring:  # what the kernel's share was, and how often the journal was committed
        out["sys_share"] = (_sys_cpu() - window_sys) / max(_cpu() - window_cpu, 1e-9)
        out["journal_commits_per_s"] = (fleet.journal.commits - commits) / args.window
    if spy is not None:
        spy.wait()
        with contextlib.suppress(OSError):
            shutil.copy(f"{args.dir}/../spy.txt", args.py_spy_out)
    out["items_per_s"] = items_total / max(args.window, 1e-9)
    out["streams_heard"] = len(heard)
    if args.adopt:
        from tower_client.apply import apply_async
        from tower_client.discover import discover_async
        from tower_client.reconcile import reconcile

        repeats: list[float] = []
        for _ in range(args.repeats):  # the same pass again, with every session already adopted
            t = time.perf_counter()
            observed = await discover_async(args.dir)
            decisions = reconcile(fleet.registry.registry(), observed, now=time.time(), owner=fleet.owner)
            report = await apply_async(decisions, grace=1.0, owner=fleet.owner)
            repeats.append((time.perf_counter() - t) * 1e3)
            bad = [o for o in report.outcomes if o.result != "adopted"]
            if bad:
                out["repeat_not_adopted"] = [o.to_dict()["reason"] for o in bad][:5]
        out["reconcile_repeats_ms"] = repeats
    _say(out)
    if args.adopt:
        t = time.perf_counter()
        stopped = await fleet.stop_all(grace=1.0)
        out2: dict[str, Any] = {"phase": "stopped", "stop_all_s": time.perf_counter() - t,
                                "stop_errors": [str(r) for r in stopped if r is not None][:5]}
        await fleet.close()
        _say(out2)
        return
    # The first Tower follows on until the driver kills it with -9.
    while not stop.is_set():
        taken = await fleet.next(timeout=0.5)
        if taken is not None:
            fleet.ack(taken)


# --------------------------------------------------------------------------------------------- the driver


class Interrupted(Exception):
    pass


def _interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _read_json(proc: subprocess.Popen[str], timeout: float, what: str) -> dict[str, Any]:
    """The next JSON line the Tower prints, within ``timeout`` (a reader thread: the pipe blocks)."""
    assert proc.stdout is not None
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(timeout)
    if not got or not got[0].strip():
        raise SystemExit(f"the Tower gave no {what} within {timeout:g} s (exit status {proc.poll()})")
    value: dict[str, Any] = json.loads(got[0])
    return value


def _ours(run_dir: Path) -> list[int]:
    """Processes of this run: every shellper (and child) the Towers started names the run's directory."""
    mark = str(run_dir).encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if mark in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


def _cleanup(run_dir: Path, procs: list[subprocess.Popen[str]]) -> list[str]:
    """End the Towers, every session of the run (through shellper's own stop, which checks each is the
    session's before signalling it) and the cgroups of the run's directory. What is left, said."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
    deadline = time.monotonic() + 120
    while run_dir.exists() and time.monotonic() < deadline:  # a launch cut short by the kill may finish later
        if any(p.suffix == ".json" and not p.name.startswith(".") for p in run_dir.iterdir()):
            subprocess.run([*shellper_cli(), "stop", "--all", "--dir", str(run_dir), "--grace", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=False)
        if not any(p.suffix == ".json" for p in run_dir.iterdir()):  # no session left: the warm launcher's
            with contextlib.suppress(OSError):  # turn (it exits when its socket is removed)
                (run_dir / ".launcher.sock").unlink()
        settle = time.monotonic() + 2
        while _ours(run_dir) and time.monotonic() < settle:
            time.sleep(0.05)  # polling other processes' exits: nothing to wait on
        if not _ours(run_dir) and not any(p.suffix == ".json" for p in run_dir.iterdir()):
            break
    left = [f"pid {pid}" for pid in _ours(run_dir)]
    shutil.rmtree(run_dir.parent, ignore_errors=True)
    left += _remove_cgroups(run_dir)
    return left


def _remove_cgroups(run_dir: Path) -> list[str]:
    """Session cgroups of this run's directory (now removed) that are left: removed if empty."""
    try:
        from shellper.core.owner import default_owner
        from shellper.host.cgroup import SessionCgroup, default_parent, find_leaked_leaves, find_mount
    except ImportError:
        return []
    parent, mount = default_parent(), find_mount()
    if parent is None or mount is None:
        return []
    left = []
    for leaf in find_leaked_leaves(parent, default_owner()):
        if leaf.directory != str(run_dir):
            continue  # another run's or another tool's: not ours to remove
        if leaf.populated or not SessionCgroup(leaf.path, mount).remove():
            left.append(f"cgroup {leaf.path}")
    return left


def run(sessions: int, rate: float, window: float, repeats: int, root: Path, concurrency: int,
        extra: tuple[str, ...] = ()) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="sps-", dir=root))
    run_dir, state = base / "run", base / "state"
    run_dir.mkdir(mode=0o700)
    state.mkdir()
    procs: list[subprocess.Popen[str]] = []
    common = [sys.executable, "-m", "bench.scale", "--tower", "--dir", str(run_dir), "--state", str(state),
              "--sessions", str(sessions), "--rate", str(rate), "--window", str(window), "--repeats", str(repeats),
              "--concurrency", str(concurrency), *extra]
    log = open(base / "tower.log", "w")  # noqa: SIM115 (closed in the finally below)
    try:
        first = subprocess.Popen(common, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
        procs.append(first)
        launched = _read_json(first, 120 + sessions + 4 * window, "launch figures")
        first.kill()  # the Tower's kill -9: its sessions run on
        first.wait()
        second = subprocess.Popen([*common, "--adopt"], cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
        procs.append(second)
        adopted = _read_json(second, 120 + 4 * window + repeats * 30, "adoption figures")
        stopped = _read_json(second, 120, "stop figures")
        second.wait(60)
        return {"launch": launched, "adopt": adopted, "stop": stopped}
    except BaseException:
        log.flush()
        with contextlib.suppress(OSError):
            sys.stderr.write((base / "tower.log").read_text()[-3000:])
        raise
    finally:
        log.close()
        left = _cleanup(run_dir, procs)
        if left:
            print(f"bench.scale: left after cleanup: {', '.join(left[:10])}", file=sys.stderr)


def report(figures: dict[str, Any], sessions: int, load: tuple[float, float]) -> tuple[str, list[str]]:
    """The printed figures, and the targets missed beyond their noise."""
    la, ad = figures["launch"], figures["adopt"]
    missed: list[str] = []
    lines = [f"scale: {sessions} sessions on a Fleet (load average {load[0]:.2f} before, {load[1]:.2f} after, "
             f"{os.cpu_count()} CPUs)",
             f"  start of all {la['launched']}: {la['start_all_s']:.2f} s wall, {la['start_per_session_ms']:.1f} ms "
             f"per session; each launch median {la['start_each_median_ms']:.1f} ms, "
             f"p90 {la['start_each_p90_ms']:.1f} ms",
             f"  items delivered: {la['items_per_s']:.0f}/s (first Tower), "
             f"{ad['items_per_s']:.0f}/s (adopting Tower); journal commits {la.get('journal_commits_per_s', 0):.0f}/s "
             f"and {ad.get('journal_commits_per_s', 0):.0f}/s; the kernel's share of the Tower's CPU "
             f"{la.get('sys_share', 0):.0%} and {ad.get('sys_share', 0):.0%}"]

    def judge(what: str, samples: list[float], limit: float, unit: str) -> None:
        value, noise = median(samples), spread(samples)
        ok = value <= limit * (1 + noise)
        if not ok:
            missed.append(f"{what} {value:.1f} {unit} > {limit:g} {unit} (+{noise:.0%} noise)")
        shown = ", ".join(f"{v:.0f}" for v in samples)
        lines.append(f"  {what}: median {value:.1f} {unit} [{shown}]; target <= {limit:g} {unit}, noise "
                     f"{noise:.0%}: {'PASS' if ok else 'FAIL'}")

    judge("Tower CPU per item", [*la["cpu_per_item_us"], *ad["cpu_per_item_us"]], CPU_PER_ITEM_US, "us")
    judge(f"reconcile of {ad['adopted']}", [ad["reconcile_ms"], *ad["reconcile_repeats_ms"]], RECONCILE_MS, "ms")
    lines.append(f"  the adopting start: {ad['start_ms']:.0f} ms to {ad['adopted']} streams attached (discover "
                 f"{ad['discover_ms']:.0f} ms, apply {ad['apply_ms']:.0f} ms, attach {ad['attach_ms']:.0f} ms)")
    if ad["adopted"] != sessions:
        missed.append(f"adopted {ad['adopted']} of {sessions}")
    if "repeat_not_adopted" in ad:
        missed.append(f"a repeated reconcile did not adopt: {ad['repeat_not_adopted']}")
    st = figures["stop"]
    errors = f"; errors {st['stop_errors']}" if st["stop_errors"] else ""
    lines.append(f"  stop of all: {st['stop_all_s']:.2f} s{errors}")
    return "\n".join(lines), missed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.scale", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sessions", type=int, default=200)
    p.add_argument("--rate", type=float, default=5.0, help="lines a second each child prints (default 5)")
    p.add_argument("--window", type=float, default=6.0, help="seconds of CPU-per-item slices per Tower (default 6)")
    p.add_argument("--repeats", type=int, default=5, help="extra reconcile passes timed by the adopting Tower")
    p.add_argument("--concurrency", type=int, default=8, help="the Fleet's launch concurrency (default 8)")
    p.add_argument("--root", type=Path, default=Path("/tmp"), help="where the private directory is made")
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    p.add_argument("--check", action="store_true", help="exit 1 when a figure misses its target beyond noise")
    p.add_argument("--py-spy", default="", help="py-spy binary: sample the adopting Tower's window (bench use)")
    p.add_argument("--py-spy-out", default="/tmp/bench-scale-spy.txt", help="where its raw samples go")
    p.add_argument("--profile", default="", help="cProfile the adopting Tower's window into this file (bench use)")
    p.add_argument("--tower", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--adopt", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    p.add_argument("--state", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.tower:
        asyncio.run(_tower(args))
        return 0
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # unwind through the cleanup
        signal.signal(sig, _interrupted)
    before = os.getloadavg()[0]
    try:
        extra = ("--py-spy", args.py_spy, "--py-spy-out", args.py_spy_out) if args.py_spy else ()
        extra += ("--profile", str(Path(args.profile).resolve())) if args.profile else ()
        figures = run(args.sessions, args.rate, args.window, args.repeats, args.root, args.concurrency, extra)
    except Interrupted as exc:
        print(f"bench.scale: interrupted ({exc}); every session it started was stopped", file=sys.stderr)
        return 130
    text, missed = report(figures, args.sessions, (before, os.getloadavg()[0]))
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"figures": figures, "missed": missed}, indent=2) + "\n")
    if missed:
        print(f"missed beyond noise: {'; '.join(missed)}")
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
