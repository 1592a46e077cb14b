"""``make bench``: shellper next to a raw PTY and dtach, in one table, saved as JSON.

    python -m bench.run [--quick] [--idle-seconds S] [--only throughput,echo,...] [--out PATH] [--check]

Every figure is printed with its ratio and, where the project set one, its target and PASS/FAIL.
A run always completes and always writes the JSON. Issue 29's gates (detached ingest, attach flood,
echo p50 and p99, each against dtach's in the same run) are printed after the table with their ratio
and noise; with ``--check`` (``make bench``) the exit status is 1 when one misses its target by more
than its measured noise. Everything the run starts lives in a private runtime directory and is
stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import platform
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import Lab, MiB, shellper_cli
from bench.noise import RatioGate
from bench.workloads import WORKLOADS, Settings, run_all

DEFAULT_OUT = Path(__file__).resolve().with_name("results") / "latest.json"


@dataclass
class Check:
    """One comparison: ``value`` (a ratio or an absolute figure) against the target it must meet."""

    label: str
    value: float | None
    target: str
    ok: bool | None


@dataclass
class Row:
    section: str
    metric: str
    unit: str
    shellper: float | None = None
    dtach: float | None = None
    base: float | None = None  # raw PTY, or the row's named baseline
    checks: list[Check] = field(default_factory=list)


def _get(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, int | float) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def at_least(label: str, value: float | None, limit: float, unit: str = "x") -> Check:
    return Check(label, value, f">= {limit:g}{unit}", None if value is None else value >= limit)


def at_most(label: str, value: float | None, limit: float, unit: str = "x", strict: bool = False) -> Check:
    if value is None:
        return Check(label, None, f"{'<' if strict else '<='} {limit:g}{unit}", None)
    ok = value < limit if strict else value <= limit
    return Check(label, value, f"{'<' if strict else '<='} {limit:g}{unit}", ok)


def build_rows(results: dict[str, Any], micro: dict[str, Any]) -> list[Row]:
    """Turn the workloads' numbers into table rows with their checks against the project's targets."""
    rows: list[Row] = []

    def section(key: str) -> dict[str, Any]:
        value = results.get(key) or {}
        if "error" in value:  # the section's figures are missing: say why, and build no rows from it
            rows.append(Row(key, f"ERROR: {value['error']}", ""))
            return {}
        return value if isinstance(value, dict) else {}

    t = section("throughput")
    if t:
        mb = t["bytes"] // MiB
        sp, dt, raw = _get(t, "shellper_mib_s"), _get(t, "dtach_mib_s"), _get(t, "raw_mib_s")
        rows.append(Row("throughput", f"attach flood {mb} MiB, delivered, median of {t['runs']}", "MiB/s",
                        sp, dt, raw, [at_least("shellper/dtach", _ratio(sp, dt), 1.25),
                                      at_least("shellper/raw", _ratio(sp, raw), 0.65)]))
        rows.append(Row("throughput", "attach flood: flood size / time to its end", "MiB/s",
                        _get(t, "shellper_effective_mib_s"), _get(t, "dtach_effective_mib_s"),
                        _get(t, "raw_effective_mib_s")))
        skipped = _get(t, "shellper_skipped")
        rows.append(Row("throughput", "attach flood: bytes skipped (GAP), worst run", "B", skipped,
                        _get(t, "dtach_skipped"), _get(t, "raw_skipped"), [at_most("absolute", skipped, 0, "")]))
        for who in ("server", "client"):
            rows.append(Row("throughput", f"attach flood: {who} CPU per GiB delivered", "s",
                            _get(t, f"shellper_{who}_cpu_s_per_gib"), _get(t, f"dtach_{who}_cpu_s_per_gib")))
        tw = _get(t, "tower_mib_s")
        rows.append(Row("throughput", f"tower client flood {mb} MiB (no terminal), delivered", "MiB/s", tw, None,
                        raw, [at_least("tower/raw", _ratio(tw, raw), 0.9)]))
        skipped = _get(t, "tower_skipped")
        rows.append(Row("throughput", "tower client flood: bytes skipped (GAP), worst run", "B", skipped, None, None,
                        [at_most("absolute", skipped, 0, "")]))
        rows.append(Row("throughput", "tower client flood: shellper CPU per GiB", "s",
                        _get(t, "tower_server_cpu_s_per_gib")))
        rows.append(Row("throughput", "tower client flood: client (harness) CPU per GiB", "s",
                        _get(t, "tower_client_cpu_s_per_gib")))

    e = section("echo")
    if e:
        for pct, limit in (("p50", 1.0), ("p99", 1.2)):
            sp, dt, raw = _get(e, f"shellper_{pct}_us"), _get(e, f"dtach_{pct}_us"), _get(e, f"raw_{pct}_us")
            rows.append(Row("echo", f"echo round trip {pct}, {e['trips']} trips", "us", sp, dt, raw,
                            [at_most("shellper/dtach", _ratio(sp, dt), limit)]))
        rows.append(Row("echo", "echo round trip max", "us", _get(e, "shellper_max_us"), _get(e, "dtach_max_us"),
                        _get(e, "raw_max_us")))

    r = section("replay")
    if r:
        ring = r["ring_bytes"] // MiB
        rows.append(Row("replay", f"full {ring} MiB ring -> new tower client ({_get(r, 'tower_bytes') or 0:.0f} B)",
                        "ms", _get(r, "tower_ms"), None, None, [at_most("absolute", _get(r, "tower_ms"), 40, " ms",
                                                                        strict=True)]))
        for label, what in (("full", "full ring"), ("default", "attach --raw default")):
            nbytes = _get(r, f"terminal_{label}_bytes") or 0
            raw = _get(r, f"raw_{label}_ms")
            total, drain = _get(r, f"terminal_{label}_ms"), _get(r, f"terminal_{label}_drain_ms")
            rows.append(Row("replay", f"{what} ({nbytes / MiB:.2f} MiB) -> terminal, attach spawn -> last byte",
                            "ms", total, None, raw, [at_most("shellper/raw drain", _ratio(total, raw), 1.3)]))
            rows.append(Row("replay", f"{what} -> terminal, first byte -> last byte", "ms", drain, None, raw,
                            [at_most("shellper/raw drain", _ratio(drain, raw), 1.3)]))
        rows.append(Row("replay", "attach start-up, spawn -> banner (tiny ring)", "ms", _get(r, "attach_startup_ms")))

    m = section("memory")
    if m:
        def mib(key: str) -> float | None:
            v = _get(m, key)
            return None if v is None else v / MiB

        rows.append(Row("memory", "idle RSS", "MiB", mib("idle_rss"), mib("dtach_rss"), None,
                        [at_most("absolute", mib("idle_rss"), 16, " MiB")]))
        rows.append(Row("memory", "idle PSS", "MiB", mib("idle_pss"), mib("dtach_pss"), None,
                        [at_most("absolute", mib("idle_pss"), 10, " MiB")]))
        rows.append(Row("memory", f"RSS after {m['ring_bytes'] // MiB} MiB of output", "MiB", mib("ring_rss")))
        rows.append(Row("memory", f"PSS after {m['ring_bytes'] // MiB} MiB of output", "MiB", mib("ring_pss")))
        rss_limit = mib("big_rss_limit")
        rows.append(Row("memory", f"RSS after {m['big_flood'] // MiB} MiB flood, no client", "MiB", mib("big_rss"),
                        None, None, [at_most("idle+ring+2M", mib("big_rss"), rss_limit or 0, " MiB")]))
        rows.append(Row("memory", f"PSS after {m['big_flood'] // MiB} MiB flood, no client", "MiB", mib("big_pss")))
        rows.append(Row("memory", "ingest rate with no client (child start included)", "MiB/s",
                        _get(m, "ingest_mib_s")))
        rows.append(Row("memory", f"marginal PSS per session ({m.get('many_sessions')} x cat)", "MiB",
                        mib("marginal_pss")))

    ig = section("ingest")
    if ig:
        sp, dt = _get(ig, "shellper_mib_s"), _get(ig, "dtach_mib_s")
        rows.append(Row("ingest", f"{ig['bytes'] // MiB} MiB with no client, launch included, median of "
                        f"{ig['runs']}", "MiB/s", sp, dt, None, [at_least("shellper/dtach", _ratio(sp, dt), 1.0)]))
        rows.append(Row("ingest", "  of which launch -> returned (shellper: launch(); dtach: dtach -n + socket)", "ms",
                        _get(ig, "shellper_launch_ms"), _get(ig, "dtach_launch_ms")))

    la = section("launch")
    if la:
        sp, dt, py = _get(la, "shellper_ms"), _get(la, "dtach_ms"), _get(la, "python_ms")
        rows.append(Row("launch", f"launch -> socket accepting, median of {la['runs']} (base: python3 -c pass)",
                        "ms", sp, dt, py, [at_most("absolute", sp, 60, " ms"),
                                           at_most("shellper/python", _ratio(sp, py), 3)]))

    i = section("idle")
    if i:
        secs = i["seconds"]
        for state in ("detached", "attached"):
            for what, unit, key in (("wakeups", "count", "wakeups"), ("CPU (ticks)", "ms", "cpu_ms"),
                                    ("CPU (schedstat)", "us", "cpu_ns")):
                scale_by = 1000.0 if key == "cpu_ns" else 1.0
                sp = _get(i, f"shellper_{state}_{key}")
                dt = _get(i, f"dtach_{state}_{key}")
                sp, dt = (None if v is None else v / scale_by for v in (sp, dt))
                checks = [at_most("absolute", sp, 0, "")] if key in ("wakeups", "cpu_ms") else []
                rows.append(Row("idle", f"idle {secs:g} s {state}: server {what}", unit, sp, dt, None, checks))
        for what, unit, key in (("wakeups", "count", "wakeups"), ("CPU (ticks)", "ms", "cpu_ms"),
                                ("CPU (schedstat)", "us", "cpu_ns")):
            scale_by = 1000.0 if key == "cpu_ns" else 1.0
            sp, dt = _get(i, f"attach_client_{key}"), _get(i, f"dtach_client_{key}")
            sp, dt = (None if v is None else v / scale_by for v in (sp, dt))
            checks = [at_most("absolute", sp, 0, "")] if key in ("wakeups", "cpu_ms") else []
            rows.append(Row("idle", f"idle {secs:g} s attached: attach client {what}", unit, sp, dt, None, checks))

    sc = section("scale")
    if sc:
        n, each = sc["sessions"], sc["bytes_each"] // MiB
        delivered, expected = _get(sc, "delivered_total"), float(sc["expected_total"])
        rows.append(Row("scale", f"{n} sessions x {each} MiB -> tower clients: bytes delivered", "B", delivered, None,
                        _get(sc, "raw_delivered_total"),
                        [Check("all delivered", expected, f"== {expected:.0f}",
                               None if delivered is None else delivered == expected)]))
        lost = _get(sc, "lost_bytes")
        rows.append(Row("scale", "bytes lost to GAP", "B", lost, None, None, [at_most("absolute", lost, 0, "")]))
        sp, raw = _get(sc, "aggregate_mib_s"), _get(sc, "raw_aggregate_mib_s")
        rows.append(Row("scale", "aggregate throughput (base: raw PTYs)", "MiB/s", sp, None, raw,
                        [Check("shellper/raw", _ratio(sp, raw), "", None)]))
        rows.append(Row("scale", "shellper CPU, all sessions", "s", _get(sc, "shellper_cpu_s")))
        rows.append(Row("scale", "children CPU (base: raw PTYs' children)", "s", _get(sc, "children_cpu_s"), None,
                        _get(sc, "raw_children_cpu_s")))
        rows.append(Row("scale", "harness (tower clients) CPU", "s", _get(sc, "harness_cpu_s")))

    for name, figures in (micro.get("codec") or {}).items():
        if name == "error":
            rows.append(Row("codec", f"ERROR: {figures}", ""))
            continue
        rows.append(Row("codec", f"{name}: encode+decode", "frames/s", figures["roundtrip_fps"]))
        rows.append(Row("codec", f"{name}: encode+decode", "MiB/s", figures["roundtrip_mib_s"]))
    for name, value in (micro.get("ring") or {}).items():
        if name == "error":
            rows.append(Row("ring", f"ERROR: {value}", ""))
            continue
        metric, _, unit = name.rpartition(" (")
        rows.append(Row("ring", metric, unit.rstrip(")"), value))
    return rows


GATES = (
    ("ingest", "shellper_runs_mib_s", "dtach_runs_mib_s", RatioGate("detached ingest", 1.0, True)),
    ("throughput", "shellper_runs", "dtach_runs", RatioGate("attach flood, delivered MiB/s", 1.0, True)),
    ("echo", "shellper_rounds_p50_us", "dtach_rounds_p50_us", RatioGate("echo p50", 1.0, False)),
    ("echo", "shellper_rounds_p99_us", "dtach_rounds_p99_us", RatioGate("echo p99", 1.0, False)),
)
"""Issue 29's targets: (workload, shellper's repeated figures, dtach's, the gate)."""


def _figures(section: dict[str, Any], key: str) -> list[float]:
    """A workload's repeated figures; a flood's runs are records, judged by their delivered rate."""
    got = section.get(key) or []
    return [f["delivered"] / MiB / f["seconds"] if isinstance(f, dict) else float(f) for f in got]


def gates(results: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Each gate's verdict line (ratio and noise), and the misses beyond noise; a workload not run is n/a."""
    lines: list[str] = []
    missed: list[str] = []
    for workload, ours, theirs, gate in GATES:
        section = results.get(workload) or {}
        lines.append(gate.verdict(_figures(section, ours), _figures(section, theirs), missed))
    return lines, missed


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit in ("B", "count", "frames/s"):
        return f"{value:,.0f}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}"


def render(rows: list[Row]) -> str:
    """One table: metric, unit, the three columns, then each check (ratio or figure, target, verdict)."""
    head = ("section", "metric", "unit", "shellper", "dtach", "raw/base", "check", "value", "target", "ok")
    lines: list[tuple[str, ...]] = [head]
    for row in rows:
        checks = row.checks or [Check("", None, "", None)]
        for n, c in enumerate(checks):
            cells = (row.section, row.metric, row.unit, _fmt(row.shellper, row.unit), _fmt(row.dtach, row.unit),
                     _fmt(row.base, row.unit)) if n == 0 else ("", "", "", "", "", "")
            verdict = "" if not c.label else ("n/a" if c.ok is None else "PASS" if c.ok else "FAIL")
            if not c.target and c.label:
                verdict = ""
            value = "" if not c.label else _fmt(c.value, row.unit if c.label in ("absolute", "all delivered",
                                                                                    "idle+ring+2M") else "")
            lines.append((*cells, c.label, value, c.target, verdict))
    widths = [max(len(line[k]) for line in lines) for k in range(len(head))]
    right = {3, 4, 5, 7}
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(cell.rjust(w) if k in right else cell.ljust(w)
                             for k, (cell, w) in enumerate(zip(line, widths, strict=True))).rstrip())
        if n == 0:
            out.append("-" * len(out[0]))
    return "\n".join(out)


def run_micro(s: Settings) -> dict[str, Any]:
    """The codec and ring micro-benchmarks (their own printing is captured: one table is printed)."""
    from bench import bench_codec, bench_ring

    micro: dict[str, Any] = {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            micro["codec"] = bench_codec.run(s.codec_seconds)
    except Exception as exc:
        micro["codec"] = {"error": f"{type(exc).__name__}: {exc}"}
    saved = bench_ring.TOTAL
    bench_ring.TOTAL = s.ring_bench_total
    try:
        micro["ring"] = bench_ring.run()
    except Exception as exc:
        micro["ring"] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        bench_ring.TOTAL = saved
    return micro


def _terminated(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.run", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="tiny sizes and counts: a smoke run, figures not meaningful")
    p.add_argument("--idle-seconds", type=float, default=None, help="idle window (default 10 s; 1 s with --quick)")
    p.add_argument("--only", default="", help=f"comma-separated workloads among: {', '.join(WORKLOADS)}")
    p.add_argument("--no-micro", action="store_true", help="skip the codec and ring micro-benchmarks")
    p.add_argument("--dtach", default=shutil.which("dtach"), help="dtach binary (default: from PATH)")
    p.add_argument("--no-dtach", action="store_true", help="leave the dtach column empty")
    p.add_argument("--root", type=Path, default=Path("/tmp"),
                   help="where the private runtime directory is made (default /tmp; keep it short)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    p.add_argument("--check", action="store_true", help="exit 1 when an issue 29 gate (ingest, attach flood, "
                   "echo p50/p99 against dtach) misses its target by more than its measured noise")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)  # unwind through Lab.close: nothing is left running
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in only if w not in WORKLOADS]
    if unknown:
        p.error(f"--only: unknown workload(s) {', '.join(unknown)}")
    s = Settings.quick(args.idle_seconds) if args.quick else Settings()
    if args.idle_seconds is not None:
        s.idle_seconds = args.idle_seconds
    dtach = None if args.no_dtach else args.dtach

    def progress(what: str) -> None:
        print(f"[bench] {what} ...", file=sys.stderr, flush=True)

    started = time.time()
    load_before = os.getloadavg()
    if load_before[0] > 1.0:
        print(f"[bench] warning: load average {load_before[0]:.2f} before the run: other work shares the "
              f"{os.cpu_count()} CPUs, so timings will be noisy", file=sys.stderr)
    with Lab(dtach, args.root) as lab:
        results = run_all(lab, s, only or None, progress)
    micro: dict[str, Any] = {}
    if not args.no_micro:
        progress("codec + ring micro-benchmarks")
        micro = run_micro(s)
    rows = build_rows(results, micro)
    table = render(rows)
    print(table)
    verdicts, missed = gates(results)
    print("\nissue 29 gates (a miss beyond the noise fails --check):")
    print("\n".join(verdicts))
    report = {
        "meta": {
            "started": started, "seconds": time.time() - started, "quick": args.quick,
            "python": sys.version.split()[0], "executable": sys.executable, "machine": platform.machine(),
            "kernel": platform.release(), "cpus": os.cpu_count(), "dtach": dtach,
            "shellper_cli": " ".join(shellper_cli()), "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        },
        "settings": dataclasses.asdict(s),
        "results": results,
        "micro": micro,
        "rows": [dataclasses.asdict(r) for r in rows],
        "table": table,
        "gates": verdicts,
        "missed": missed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    failed = sum(1 for r in rows for c in r.checks if c.ok is False)
    passed = sum(1 for r in rows for c in r.checks if c.ok)
    print(f"\ntargets: {passed} pass, {failed} fail; load average {load_before[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; written to {args.out}")
    if missed:
        print(f"missed beyond noise: {'; '.join(missed)}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
