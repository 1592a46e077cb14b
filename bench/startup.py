"""The start-up measures, measured again: what each one saves today.

    python -m bench.startup [--runs N] [--launches N]

* ``typing``: what ``import typing`` adds, once the daemon's modules (or ``shellper attach``'s) are loaded:
  time, RSS and private memory.
* records: the daemon's imports (building every record class they define) with shellper.core.structs and
  with the standard ``dataclasses`` in its place (``SHELLPER_RECORDS=dataclasses``).
* launch: ``shellper run`` (the console script's code, to the socket accepting) with the prefork forked
  before the CLI's imports and without it (forked once the CLI has parsed, as :func:`launch` does when it is
  given none), each with both record kinds, and with an ``--env`` (the daemon-to-be is then a fresh
  interpreter, not a fork); containment none, so a cgroup move's RCU wait is not in it.
  Then each session, once it has answered a tower's STATUS, is idle: its RSS, PSS and private memory
  (/proc/PID/smaps_rollup) are what a Tower's sessions cost each.
* commands: ``shellper ls`` (one session to ask) and ``shellper stop`` of a name that has no session, each a
  fresh interpreter running the console script: the whole process's wall time, and its imports' time as
  ``python -X importtime`` sums them. ``--trees A,B`` puts each of those package roots (``git archive`` exports,
  compiled) first on PYTHONPATH in turn, so two versions are compared run by run.

Variants take turns, run by run, so a busy stretch of the machine hits all of them alike; medians are
printed. Run it after ``make compile`` (stale bytecode is recompiled in every process). Figures and what
was decided from them go to bench/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench.harness import Lab, median
from shellper.client.launch import LaunchInfo
from shellper.core.structs import STANDARD_ENV

DAEMON = "shellper.daemon.session, shellper.core.config, shellper.daemon.main"
"""What the prefork imports before it takes the config (shellper.daemon.prefork)."""
ATTACH = "shellper.cli.entry, shellper.cli.commands.attach"
"""What a plain ``shellper attach NAME`` imports (shellper.cli.entry's quick path)."""

_PROBE = """
import time
t0 = time.perf_counter()
import {modules}
t1 = time.perf_counter()
def memory():
    rss = private = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "Rss":
                rss = int(value.split()[0])
            elif key in ("Private_Clean", "Private_Dirty"):
                private += int(value.split()[0])
    return rss, private
rss0, private0 = memory()
t2 = time.perf_counter()
{then}
t3 = time.perf_counter()
rss1, private1 = memory()
print(t1 - t0, t3 - t2, rss0, private0, rss1, private1)
"""

_ENTRY = "from shellper.cli import entry as e\n{patch}e.entry()"
_NO_PREFORK = "e.may_detach = lambda line: False\n"


def probe(modules: str, then: str = "pass", records: str = "") -> list[float]:
    """[modules' import s, ``then``'s s, RSS KiB, private KiB, RSS KiB after, private KiB after]."""
    env = {**os.environ, STANDARD_ENV: records}
    done = subprocess.run([sys.executable, "-c", _PROBE.format(modules=modules, then=then)], env=env,
                          capture_output=True, text=True, check=True, timeout=60)
    return [float(x) for x in done.stdout.split()]


def idle_memory(pid: int) -> list[float]:
    """[RSS, PSS, private] KiB of a process, from /proc/PID/smaps_rollup."""
    got = {"Rss": 0, "Pss": 0, "Private_Clean": 0, "Private_Dirty": 0}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in got:
                got[key] = int(value.split()[0])
    return [got["Rss"], got["Pss"], got["Private_Clean"] + got["Private_Dirty"]]


def launch_once(lab: Lab, prefork: bool, records: str, secret: bool = False) -> list[float]:
    """[seconds to the socket accepting, then the idle session's RSS, PSS and private KiB]; ``secret``: with an
    ``--env K=V``, so the daemon-to-be is a fresh interpreter instead of a fork (prefork.holds_secrets)."""
    name = lab.name("su")
    code = _ENTRY.format(patch="" if prefork else _NO_PREFORK)
    env = {**os.environ, STANDARD_ENV: records, "SHELLPER_LAUNCHER": "off"}  # the prefork path; warm: bench.launcher
    extra = ["--env", "BENCH_TOKEN=x"] if secret else []
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, "--dir", str(lab.dir), "run", "--json", name, *extra,
                           "--containment", "none", "--", "cat"], env=env, capture_output=True, check=True, timeout=60)
    elapsed = time.perf_counter() - t0
    info = LaunchInfo(**json.loads(done.stdout))
    lab.shellpers.adopt(name, info)
    with lab.shellpers.connect(name, replay_bytes=0) as tower:  # what it loads to serve a Tower, counted
        tower.status()
    memory = idle_memory(info.pid)
    lab.shellpers.stop(name)
    return [elapsed, *memory]


_COMMANDS = {"ls": ["ls"], "stop, no such session": ["stop", "nosuch"]}
_STARTUP = {"_frozen_importlib_external", "zipimport", "encodings", "encodings.utf_8", "_signal", "io", "site",
            "_io", "abc", "_codecs", "codecs", "encodings.aliases"}
"""What ``-X importtime`` lists of the interpreter's own start, before the command's first import."""


def command_once(lab: Lab, tree: str, argv: list[str]) -> list[float]:
    """[wall seconds, seconds of the command's imports, modules imported] of the console script."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH")) if p)
    script = os.path.join(os.path.dirname(sys.executable), "shellper")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", script, "--dir", str(lab.dir), *argv], env=env,
                          capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - t0
    imports = modules = 0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            _, cumulative, name = line[len("import time:"):].split("|")
            modules += 1
            if not name.startswith("  ") and name.strip() not in _STARTUP:  # a top-level import of the command
                imports += int(cumulative)
    return [elapsed, imports / 1e6, modules]


def commands(runs: int, trees: list[str]) -> None:
    kinds = [(tree, key) for tree in trees for key in _COMMANDS]
    got: dict[tuple[str, str], list[list[float]]] = {k: [] for k in kinds}
    with Lab() as lab:
        name = lab.name("cmd")
        lab.shellpers.start(name, ["cat"])
        for i in range(runs):
            for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
                got[kind].append(command_once(lab, kind[0], _COMMANDS[kind[1]]))
        lab.shellpers.stop(name)
    print(f"commands, {runs} each (medians; wall includes -X importtime's own cost)")
    for (tree, key), rows in got.items():
        wall, imports, modules = (median([row[i] for row in rows]) for i in range(3))
        print(f"  {key}{f' ({tree})' if tree else ''}: {wall * 1000:.1f} ms, imports {imports * 1000:.1f} ms, "
              f"{modules:.0f} modules")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="import probes per variant (0: none)")
    parser.add_argument("--launches", type=int, default=20, help="launches per variant (0: none)")
    parser.add_argument("--commands", type=int, default=20, help="runs of each CLI command (0: none)")
    parser.add_argument("--trees", default="", help="package roots to compare, comma-separated (default: this one)")
    args = parser.parse_args()
    if args.commands:
        commands(args.commands, args.trees.split(","))

    variants = {
        "daemon + typing": lambda: probe(DAEMON, "import typing"),
        "attach + typing": lambda: probe(ATTACH, "import typing"),
        "daemon, structs": lambda: probe(DAEMON),
        "daemon, dataclasses": lambda: probe(DAEMON, records="dataclasses"),
        "python -c pass": lambda: probe("sys"),
    }
    got: dict[str, list[list[float]]] = {k: [] for k in variants}
    for i in range(args.runs):
        for key in list(variants)[i % len(variants):] + list(variants)[:i % len(variants)]:
            got[key].append(variants[key]())

    def col(key: str, index: int) -> float:
        return median([row[index] for row in got[key]])

    if args.runs:
        print(f"import probes, {args.runs} each (medians)")
        for key in ("daemon + typing", "attach + typing"):
            print(f"  {key}: typing adds {col(key, 1) * 1000:.2f} ms, RSS {col(key, 4) - col(key, 2):+.0f} KiB, "
                  f"private {col(key, 5) - col(key, 3):+.0f} KiB (the modules before it: {col(key, 0) * 1000:.1f} ms)")
        for key in ("daemon, structs", "daemon, dataclasses", "python -c pass"):
            print(f"  {key}: imports {col(key, 0) * 1000:.1f} ms, RSS {col(key, 2):.0f} KiB, "
                  f"private {col(key, 3):.0f} KiB")
    if not args.launches:
        return 0

    kinds = [(True, "", False), (False, "", False), (True, "", True), (False, "", True), (True, "dataclasses", False),
             (False, "dataclasses", False)]
    times: dict[tuple[bool, str, bool], list[list[float]]] = {k: [] for k in kinds}
    with Lab() as lab:
        for i in range(args.launches):
            for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
                times[kind].append(launch_once(lab, *kind))
    print(f"shellper run to socket accepting, {args.launches} each (medians, containment none)")
    for (prefork, records, secret), rows in times.items():
        values = [row[0] for row in rows]
        rss, pss, private = (median([row[i] for row in rows]) for i in (1, 2, 3))
        print(f"  {'prefork' if prefork else 'no prefork'}{', --env (spawned)' if secret else ''}, "
              f"{records or 'structs'}: {median(values) * 1000:.1f} ms (min {min(values) * 1000:.1f}); "
              f"idle session RSS {rss:.0f} KiB, PSS {pss:.0f}, private {private:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
