"""The eight workloads: each sets up what it compares, measures, tears down, and returns plain numbers.

Three ways of putting a program's output on a terminal are compared: ``raw`` (the program on the
harness's PTY itself), ``dtach`` (``dtach -n`` + ``dtach -a``) and ``shellper`` (``shellper run`` +
``shellper attach``). The child is bench/child.py in every case, so the bytes are the same. A flood
starts only when its child gets a "go" byte, sent once the client is attached, so it is measured
whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import select
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.child import BANNER, MARKER, flood_bytes
from bench.harness import (
    TICK,
    BenchError,
    Lab,
    MiB,
    Terminal,
    child_argv,
    cpu_ticks,
    median,
    percentile,
    pss_bytes,
    rss_bytes,
    sample,
    shellper_cli,
    wait_file,
)
from shellper.client.blocking import Client, SessionGone
from shellper.client.launch import LaunchInfo
from shellper.protocol import wire

DTACH_CLEAR = b"\x1b[H\x1b[J"
"""What ``dtach -a`` writes once it is in raw mode, just before it asks the master to attach it."""
KINDS = ("raw", "dtach", "shellper")

BANNER_TEXT = BANNER.rstrip(b"\n")
"""What an attach shows of the banner: a rendered replay draws its text, not its newline."""


@dataclass
class Settings:
    """Sizes and counts; ``quick()`` shrinks everything for a smoke run."""

    flood_bytes: int = 64 * MiB
    runs: int = 5  # floods per kind, interleaved; 3 left the median at the mercy of one noisy run (+-15 % here)
    echo_trips: int = 2000
    echo_warmup: int = 200
    echo_rounds: int = 5  # the trips cut into this many stretches of time, a p50 and p99 each: the gates' noise
    ring_bytes: int = 8 * MiB
    replay_runs: int = 5
    big_flood: int = 1024 * MiB
    ingest_bytes: int = 8 * MiB  # issue 29's detached ingest: 8 MiB written with no client, the launch included
    ingest_runs: int = 7
    many_sessions: int = 50
    launch_runs: int = 15
    idle_seconds: float = 10.0
    scale_sessions: int = 50
    scale_bytes: int = 16 * MiB
    codec_seconds: float = 1.5
    ring_bench_total: int = 256 * MiB
    timeout: float = 120.0

    @classmethod
    def quick(cls, idle_seconds: float | None = None) -> Settings:
        return cls(flood_bytes=4 * MiB, runs=1, echo_trips=100, echo_warmup=20, replay_runs=1, big_flood=32 * MiB,
                   many_sessions=4, launch_runs=2, idle_seconds=idle_seconds if idle_seconds is not None else 1.0,
                   scale_sessions=4, scale_bytes=1 * MiB, codec_seconds=0.06, ring_bench_total=8 * MiB,
                   timeout=60.0, ingest_bytes=1 * MiB, ingest_runs=1)


def _mib_s(nbytes: int, seconds: float) -> float:
    return nbytes / MiB / seconds


# ---------------------------------------------------------------------------------------- set-ups


@dataclass
class Attached:
    """A child behind one of the three kinds, with the harness's terminal attached to it."""

    kind: str
    term: Terminal
    name: str = ""
    server_pid: int | None = None  # shellper or dtach master
    client_pid: int | None = None  # shellper attach or dtach -a


def attach(lab: Lab, kind: str, mode: list[str]) -> Attached:
    """Start ``bench/child.py MODE`` behind ``kind`` and attach the harness's terminal to it.

    Returns once the child is in raw mode waiting for input and the client is attached.
    """
    term = lab.terminal()
    if kind == "raw":
        term.spawn(child_argv(*mode, "--banner"))
        term.read_until(BANNER, timeout=30)
        return Attached(kind, term)
    name = lab.name(kind[:2])
    ready = lab.ready_file(name)
    if kind == "dtach":
        assert lab.dtachs is not None
        pid = lab.dtachs.start(name, child_argv(*mode, "--ready-file", str(ready)))
        wait_file(ready, pid=pid)
        proc = term.spawn(lab.dtachs.attach_argv(name))
        term.read_until(DTACH_CLEAR, timeout=30)
        return Attached(kind, term, name, pid, proc.pid)
    info = lab.shellpers.start(name, child_argv(*mode, "--banner"))
    proc = term.spawn(lab.shellpers.attach_argv(name))
    # Replayed (drawn from the screen model: the banner's text, then the cursor placed) or live: the client
    # shows output, so it is attached.
    term.read_until(BANNER_TEXT, timeout=30)
    return Attached(kind, term, name, info.pid, proc.pid)


def detach(lab: Lab, a: Attached) -> None:
    lab.release(a.term)
    if a.kind == "dtach" and lab.dtachs is not None:
        lab.dtachs.stop(a.name)
    elif a.kind == "shellper":
        lab.shellpers.stop(a.name)


def _kinds(lab: Lab) -> list[str]:
    return [k for k in KINDS if k != "dtach" or lab.dtachs is not None]


# ---------------------------------------------------------------------------------------- 1. throughput


@dataclass
class Flood:
    """One flood: how long until its end reached the reader, and how much of it did."""

    seconds: float
    expected: int  # bytes the child wrote, marker included
    delivered: int  # bytes the reader got (for a terminal: with any notes the client added)
    server_cpu_s: float = 0.0  # shellper or dtach master, during the flood
    client_cpu_s: float = 0.0  # shellper attach or dtach -a (the tower client: the harness itself)

    @property
    def skipped(self) -> int:
        return max(0, self.expected - self.delivered)


def flood_once(lab: Lab, kind: str, nbytes: int, timeout: float) -> Flood:
    """Go byte -> marker read by the harness, through ``kind``.

    A shellper waits for a slow terminal only within bounds (shellper.daemon.pacing): one that stalls gets a
    GAP and skips output. So delivered bytes are counted, not assumed.
    """
    a = attach(lab, kind, ["flood", str(nbytes)])
    pids = [p for p in (a.server_pid, a.client_pid) if p is not None]
    try:
        cpu0 = [cpu_ticks(p) for p in pids]
        t0 = time.perf_counter()
        a.term.write(b"g")
        drained = a.term.read_until(MARKER, timeout=timeout)
        cpu = [(after - before) / TICK for before, after in zip(cpu0, [cpu_ticks(p) for p in pids], strict=True)]
        return Flood(drained.done_at - t0, flood_bytes(nbytes), drained.bytes, *cpu)
    finally:
        detach(lab, a)


def tower_flood_once(lab: Lab, nbytes: int, timeout: float) -> Flood:
    """Go byte -> last byte, read by a programmatic tower client (``Client.recv`` loop, no terminal)."""
    name = lab.name("tw")
    ready = lab.ready_file(name)
    info = lab.shellpers.start(name, child_argv("flood", str(nbytes), "--ready-file", str(ready)))
    try:
        wait_file(ready, pid=info.pid)
        with lab.shellpers.connect(name, "tower", replay_bytes=0) as client:
            end = client.output.next_offset + flood_bytes(nbytes)
            delivered = 0
            cpu0 = cpu_ticks(info.pid), resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            client.write(b"g")
            deadline = time.monotonic() + timeout
            while client.output.next_offset < end:
                frame = client.recv(timeout=max(0.0, deadline - time.monotonic()))
                if frame is None:
                    raise BenchError(f"tower client: {end - client.output.next_offset} bytes missing", info.pid)
                if isinstance(frame, wire.Data):
                    delivered += len(frame.data)
            elapsed = time.perf_counter() - t0
            me = resource.getrusage(resource.RUSAGE_SELF)
            return Flood(elapsed, flood_bytes(nbytes), delivered, (cpu_ticks(info.pid) - cpu0[0]) / TICK,
                         me.ru_utime + me.ru_stime - cpu0[1].ru_utime - cpu0[1].ru_stime)
    finally:
        lab.shellpers.stop(name)


def _floods(key: str, floods: list[Flood]) -> dict[str, Any]:
    """Medians over the runs: delivered MiB/s (what reached the reader), effective MiB/s (flood size
    over time to its end), and the most bytes skipped in any run."""
    return {
        f"{key}_mib_s": median([_mib_s(f.delivered, f.seconds) for f in floods]),
        f"{key}_effective_mib_s": median([_mib_s(f.expected, f.seconds) for f in floods]),
        f"{key}_skipped": max(f.skipped for f in floods),
        f"{key}_server_cpu_s_per_gib": median([f.server_cpu_s * 1024 * MiB / max(1, f.delivered) for f in floods]),
        f"{key}_client_cpu_s_per_gib": median([f.client_cpu_s * 1024 * MiB / max(1, f.delivered) for f in floods]),
        f"{key}_runs": [dataclasses.asdict(f) for f in floods],
    }


def throughput(lab: Lab, s: Settings) -> dict[str, Any]:
    """Kinds interleaved run by run, so a change in the machine's load hits them all alike."""
    out: dict[str, Any] = {"bytes": s.flood_bytes, "runs": s.runs}
    floods: dict[str, list[Flood]] = {kind: [] for kind in [*_kinds(lab), "tower"]}
    for _ in range(s.runs):
        for kind in floods:
            floods[kind].append(tower_flood_once(lab, s.flood_bytes, s.timeout) if kind == "tower"
                                else flood_once(lab, kind, s.flood_bytes, s.timeout))
    for kind, runs in floods.items():
        out.update(_floods(kind, runs))
    return out


# ---------------------------------------------------------------------------------------- 2. echo


ECHO_BLOCK = 100
"""Trips in a row per kind before the next kind takes its turn (see :func:`echo`)."""


def echo(lab: Lab, s: Settings) -> dict[str, Any]:
    """All kinds attached at once and taking turns, ``ECHO_BLOCK`` trips each, so that a change in the
    machine's load during the run hits them alike (one kind after another, a busy minute once fell on
    one kind only and moved its p50 by 1.5x)."""
    out: dict[str, Any] = {"trips": s.echo_trips, "warmup": s.echo_warmup, "block": ECHO_BLOCK}
    attached: dict[str, Attached] = {}
    samples: dict[str, list[float]] = {}
    try:
        for kind in _kinds(lab):
            attached[kind] = attach(lab, kind, ["echo"])
            samples[kind] = []
        for a in attached.values():
            for _ in range(s.echo_warmup):
                a.term.roundtrip()
        while any(len(v) < s.echo_trips for v in samples.values()):
            for kind, a in attached.items():
                todo = min(ECHO_BLOCK, s.echo_trips - len(samples[kind]))
                samples[kind].extend(a.term.roundtrip() / 1000 for _ in range(todo))
    finally:
        for a in attached.values():
            detach(lab, a)
    for kind, got in samples.items():
        out[f"{kind}_p50_us"] = percentile(got, 50)
        out[f"{kind}_p99_us"] = percentile(got, 99)
        out[f"{kind}_max_us"] = max(got)
        # Consecutive stretches of the same minutes for every kind (the kinds take turns block by block).
        size = max(1, len(got) // max(1, s.echo_rounds))
        stretches = [got[i:i + size] for i in range(0, len(got) - size + 1, size)]
        out[f"{kind}_rounds_p50_us"] = [percentile(part, 50) for part in stretches]
        out[f"{kind}_rounds_p99_us"] = [percentile(part, 99) for part in stretches]
    return out


# ---------------------------------------------------------------------------------------- 3. replay


def _attach_replay(lab: Lab, name: str, replay_bytes: int | None, timeout: float) -> tuple[float, float, int]:
    """``shellper attach --raw`` on a fresh terminal: (spawn -> marker, first byte -> marker, bytes). The byte
    replay: the drawn screen (the default) has no marker to wait for at the end of the bytes."""
    term = lab.terminal()
    try:
        t0 = time.perf_counter()
        term.spawn(lab.shellpers.attach_argv(name, replay_bytes, raw=True))
        drained = term.read_until(MARKER, timeout=timeout)
        return drained.done_at - t0, drained.done_at - drained.first_at, drained.bytes
    finally:
        lab.release(term)


def replay(lab: Lab, s: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {"ring_bytes": s.ring_bytes, "runs": s.replay_runs}
    name = lab.name("rp")
    total = s.ring_bytes + MiB  # overfill: the ring is full and has trimmed
    info = lab.shellpers.start(name, child_argv("flood", str(total), "--now"), ring_bytes=s.ring_bytes)
    try:
        lab.shellpers.wait_ring_end(name, flood_bytes(total), s.timeout)
        tower_times: list[float] = []
        for _ in range(s.replay_runs):
            t0 = time.perf_counter()
            with lab.shellpers.connect(name, "tower") as client:
                assert client.welcome is not None and client.replay is not None
                end = client.welcome.ring_end
                while client.output.next_offset < end:
                    if client.recv(timeout=s.timeout) is None:
                        raise BenchError("replay to tower client stalled", info.pid)
                tower_times.append(time.perf_counter() - t0)
                out["tower_bytes"] = end - client.replay.offset
        out["tower_ms"] = median(tower_times) * 1000
        for label, size in (("default", None), ("full", s.ring_bytes + MiB)):
            runs = [_attach_replay(lab, name, size, s.timeout) for _ in range(s.replay_runs)]
            out[f"terminal_{label}_ms"] = median([r[0] for r in runs]) * 1000
            out[f"terminal_{label}_drain_ms"] = median([r[1] for r in runs]) * 1000
            out[f"terminal_{label}_bytes"] = runs[0][2]
    finally:
        lab.shellpers.stop(name)
    # What starting the attach client costs, with nothing to replay but the banner.
    startup: list[float] = []
    for _ in range(s.replay_runs):
        name = lab.name("rs")
        lab.shellpers.start(name, child_argv("echo", "--banner"))
        term = lab.terminal()
        try:
            t0 = time.perf_counter()
            term.spawn(lab.shellpers.attach_argv(name))
            startup.append(term.read_until(BANNER_TEXT, timeout=30).done_at - t0)
        finally:
            lab.release(term)
            lab.shellpers.stop(name)
    out["attach_startup_ms"] = median(startup) * 1000
    # The baselines: the harness draining the same amounts straight from a child on its PTY.
    for label in ("default", "full"):
        nbytes = max(1, out[f"terminal_{label}_bytes"] - len(MARKER))
        out[f"raw_{label}_ms"] = median([flood_once(lab, "raw", nbytes, s.timeout).seconds
                                         for _ in range(s.replay_runs)]) * 1000
    return out


# ---------------------------------------------------------------------------------------- 4. memory


def _settle() -> None:
    time.sleep(0.3)


def memory(lab: Lab, s: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {"ring_bytes": s.ring_bytes, "big_flood": s.big_flood}
    sp = lab.shellpers
    name = lab.name("mi")
    info = sp.start(name, ["cat"], ring_bytes=s.ring_bytes)
    _settle()
    out["idle_rss"], out["idle_pss"] = rss_bytes(info.pid), pss_bytes(info.pid)
    sp.stop(name)

    name = lab.name("mr")
    info = sp.start(name, child_argv("flood", str(s.ring_bytes), "--now"), ring_bytes=s.ring_bytes)
    sp.wait_ring_end(name, flood_bytes(s.ring_bytes), s.timeout)
    _settle()
    out["ring_rss"], out["ring_pss"] = rss_bytes(info.pid), pss_bytes(info.pid)
    sp.stop(name)

    name = lab.name("mb")
    t0 = time.perf_counter()
    info = sp.start(name, child_argv("flood", str(s.big_flood), "--now"), ring_bytes=s.ring_bytes)
    sp.wait_ring_end(name, flood_bytes(s.big_flood), max(s.timeout, 600.0))
    out["ingest_mib_s"] = _mib_s(s.big_flood, time.perf_counter() - t0)
    _settle()
    out["big_rss"], out["big_pss"] = rss_bytes(info.pid), pss_bytes(info.pid)
    out["big_rss_limit"] = out["idle_rss"] + s.ring_bytes + 2 * MiB
    sp.stop(name)

    if lab.dtachs is not None:
        name = lab.name("md")
        pid = lab.dtachs.start(name, ["cat"])
        _settle()
        out["dtach_rss"], out["dtach_pss"] = rss_bytes(pid), pss_bytes(pid)
        lab.dtachs.stop(name)

    names = [lab.name("mm") for _ in range(s.many_sessions)]
    infos = [sp.start(n, ["cat"], ring_bytes=s.ring_bytes) for n in names]
    _settle()
    total_pss = sum(pss_bytes(i.pid) for i in infos)
    out["many_sessions"] = s.many_sessions
    out["many_pss_total"] = total_pss
    out["many_rss_total"] = sum(rss_bytes(i.pid) for i in infos)
    out["marginal_pss"] = total_pss / s.many_sessions
    sp.stop(*names)
    return out


def ingest(lab: Lab, s: Settings) -> dict[str, Any]:
    """Detached ingest (issue 29): launch -> a child's ``flood --now`` of ``ingest_bytes`` written, no client
    attached; shellper and dtach taking turns. Both end at the same point: the child's last write returned,
    which is when the server has read all but what the PTY buffers."""
    out: dict[str, Any] = {"bytes": s.ingest_bytes, "runs": s.ingest_runs}
    rates: dict[str, list[float]] = {kind: [] for kind in ("shellper", "dtach") if kind in _kinds(lab)}
    launches: dict[str, list[float]] = {kind: [] for kind in rates}
    for _ in range(s.ingest_runs):
        for kind, got in rates.items():
            name = lab.name("in")
            done = lab.ready_file(name)
            argv = child_argv("flood", str(s.ingest_bytes), "--now", "--done-file", str(done))
            t0 = time.perf_counter()
            if kind == "dtach":
                assert lab.dtachs is not None
                pid = lab.dtachs.start(name, argv)
            else:
                pid = lab.shellpers.start(name, argv).pid
            launches[kind].append(time.perf_counter() - t0)  # part of the figure, as in the issue's
            wait_file(done, timeout=s.timeout, pid=pid)
            got.append(_mib_s(s.ingest_bytes, time.perf_counter() - t0))
            if kind == "dtach":
                assert lab.dtachs is not None
                lab.dtachs.stop(name)
            else:
                lab.shellpers.stop(name)
    for kind, got in rates.items():
        out[f"{kind}_mib_s"] = median(got)
        out[f"{kind}_runs_mib_s"] = got
        out[f"{kind}_launch_ms"] = median(launches[kind]) * 1000
    return out


# ---------------------------------------------------------------------------------------- 5. launch


def launch_time(lab: Lab, s: Settings) -> dict[str, Any]:
    """``shellper run``, ``dtach -n`` and ``python3 -c pass`` taking turns, run by run (as :func:`echo`)."""
    out: dict[str, Any] = {"runs": s.launch_runs, "shellper_cmd": " ".join(shellper_cli())}
    times: dict[str, list[float]] = {"shellper": [], "dtach": [], "python": []}
    for _ in range(s.launch_runs):
        name = lab.name("la")
        t0 = time.perf_counter()
        done = subprocess.run([*shellper_cli(), "--dir", str(lab.dir), "run", "--json", name, "--", "cat"],
                              capture_output=True, check=False, timeout=60)
        times["shellper"].append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise BenchError(f"shellper run failed: {done.stderr.decode(errors='replace').strip()}")
        lab.shellpers.adopt(name, LaunchInfo(**json.loads(done.stdout)))
        if not lab.shellpers.socket(name).exists():
            raise BenchError(f"shellper run returned before {lab.shellpers.socket(name)} existed")
        lab.shellpers.stop(name)
        if lab.dtachs is not None:
            name = lab.name("ld")
            lab.dtachs.start(name, ["cat"])
            times["dtach"].append(lab.dtachs.last_launch)
            lab.dtachs.stop(name)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times["python"].append(time.perf_counter() - t0)
    for kind, got in times.items():
        if got:
            out[f"{kind}_ms"] = median(got) * 1000
    return out


# ---------------------------------------------------------------------------------------- 6. idle


def idle(lab: Lab, s: Settings) -> dict[str, Any]:
    """All set-ups idle side by side over one window: CPU and context switches of each process."""
    watched: dict[str, int] = {}
    name = lab.name("id")
    watched["shellper_detached"] = lab.shellpers.start(name, ["cat"]).pid
    attached: list[Attached] = []
    try:
        a = attach(lab, "shellper", ["echo"])
        attached.append(a)
        assert a.server_pid is not None and a.client_pid is not None
        watched["shellper_attached"], watched["attach_client"] = a.server_pid, a.client_pid
        if lab.dtachs is not None:
            dname = lab.name("di")
            watched["dtach_detached"] = lab.dtachs.start(dname, ["cat"])
            a = attach(lab, "dtach", ["echo"])
            attached.append(a)
            assert a.server_pid is not None and a.client_pid is not None
            watched["dtach_attached"], watched["dtach_client"] = a.server_pid, a.client_pid
        time.sleep(0.5)  # let start-up work finish
        before = {k: sample(pid) for k, pid in watched.items()}
        time.sleep(s.idle_seconds)
        after = {k: sample(pid) for k, pid in watched.items()}
    finally:
        for a in attached:
            detach(lab, a)
        lab.shellpers.stop(name)
        if lab.dtachs is not None:
            lab.dtachs.stop()
    out: dict[str, Any] = {"seconds": s.idle_seconds}
    for key in watched:
        d = before[key].delta(after[key])
        out[f"{key}_cpu_ms"] = d.ticks * 1000 / TICK
        out[f"{key}_cpu_ns"] = d.cpu_ns
        out[f"{key}_wakeups"] = d.wakeups
    return out


# ---------------------------------------------------------------------------------------- 7. scale


def _drain_all(sources: dict[int, Callable[[], int]], expected: int, timeout: float) -> dict[int, int]:
    """Poll every fd, calling its reader (which returns bytes accounted) until each has ``expected``."""
    got = dict.fromkeys(sources, 0)
    poller = select.poll()
    for fd in sources:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    left = len(sources)
    while left:
        if time.monotonic() > deadline:
            short = {fd: expected - n for fd, n in got.items() if n < expected}
            raise BenchError(f"scale: {len(short)} streams short of {expected} bytes: {short}")
        for fd, _ in poller.poll(1000):
            got[fd] += sources[fd]()
            if got[fd] >= expected:
                poller.unregister(fd)
                left -= 1
    return got


def _tower_reader(client: Client, lost: list[int]) -> Callable[[], int]:
    assert client.sock is not None
    sock = client.sock

    def read() -> int:
        try:
            chunk = sock.recv(1 << 20)
        except (BlockingIOError, TimeoutError):
            return 0
        if not chunk:
            raise SessionGone(client.path, "closed during the scale flood")
        client.decoder.feed(chunk)
        n = 0
        for event in client.decoder.events():
            if isinstance(event, wire.Data):
                n += len(event.data)
            elif isinstance(event, wire.Gap):
                lost.append(event.missed)
                n += event.missed
        return n

    return read


def _pty_reader(fd: int) -> Callable[[], int]:
    def read() -> int:
        try:
            return len(os.read(fd, 1 << 20))
        except BlockingIOError:
            return 0

    return read


def scale(lab: Lab, s: Settings) -> dict[str, Any]:
    n, size = s.scale_sessions, s.scale_bytes
    expected = flood_bytes(size)
    out: dict[str, Any] = {"sessions": n, "bytes_each": size, "expected_total": n * expected}
    names = [lab.name("sc") for _ in range(n)]
    infos = [lab.shellpers.start(nm, child_argv("flood", str(size), "--ready-file", str(lab.ready_file(nm))))
             for nm in names]
    clients: list[Client] = []
    try:
        for nm, info in zip(names, infos, strict=True):
            wait_file(lab.ready_file(nm), pid=info.pid)
            clients.append(lab.shellpers.connect(nm, "tower", replay_bytes=0))
        lost: list[int] = []
        readers = {c.fileno(): _tower_reader(c, lost) for c in clients}
        pids = [i.pid for i in infos]
        kids = [i.child_pid for i in infos if i.child_pid is not None]
        cpu0 = [cpu_ticks(p) for p in pids], [cpu_ticks(p) for p in kids], resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        for c in clients:
            c.write(b"g")
        got = _drain_all(readers, expected, s.timeout)
        elapsed = time.perf_counter() - t0
        cpu1 = [cpu_ticks(p) for p in pids], [cpu_ticks(p) for p in kids], resource.getrusage(resource.RUSAGE_SELF)
    finally:
        for c in clients:
            c.close()
        lab.shellpers.stop(*names)
    out["lost_bytes"] = sum(lost)
    out["delivered_total"] = sum(got.values()) - out["lost_bytes"]
    out["seconds"] = elapsed
    out["aggregate_mib_s"] = _mib_s(n * size, elapsed)
    out["shellper_cpu_s"] = (sum(cpu1[0]) - sum(cpu0[0])) / TICK
    out["children_cpu_s"] = (sum(cpu1[1]) - sum(cpu0[1])) / TICK
    out["harness_cpu_s"] = (cpu1[2].ru_utime + cpu1[2].ru_stime) - (cpu0[2].ru_utime + cpu0[2].ru_stime)
    out.update({f"raw_{k}": v for k, v in _scale_raw(lab, s).items()})
    return out


def _scale_raw(lab: Lab, s: Settings) -> dict[str, Any]:
    """The same floods on plain PTYs drained by the harness: the ceiling for the machine."""
    n, size = s.scale_sessions, s.scale_bytes
    terms = [lab.terminal() for _ in range(n)]
    try:
        names = [lab.name("sr") for _ in range(n)]
        for term, nm in zip(terms, names, strict=True):
            term.spawn(child_argv("flood", str(size), "--ready-file", str(lab.ready_file(nm))))
        for nm in names:
            wait_file(lab.ready_file(nm))
        kids = [t.proc.pid for t in terms if t.proc is not None]
        cpu0 = sum(cpu_ticks(p) for p in kids)
        t0 = time.perf_counter()
        for term in terms:
            term.write(b"g")
        got = _drain_all({t.master: _pty_reader(t.master) for t in terms}, flood_bytes(size), s.timeout)
        elapsed = time.perf_counter() - t0
        cpu1 = sum(cpu_ticks(p) for p in kids)
    finally:
        for term in terms:
            lab.release(term)
    return {"delivered_total": sum(got.values()), "seconds": elapsed, "aggregate_mib_s": _mib_s(n * size, elapsed),
            "children_cpu_s": (cpu1 - cpu0) / TICK}


WORKLOADS: dict[str, Callable[[Lab, Settings], dict[str, Any]]] = {
    "throughput": throughput,
    "echo": echo,
    "replay": replay,
    "memory": memory,
    "ingest": ingest,
    "launch": launch_time,
    "idle": idle,
    "scale": scale,
}


def run_all(lab: Lab, s: Settings, only: list[str] | None = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every workload (or those in ``only``); a failing one is recorded as its error, the rest still run."""
    results: dict[str, Any] = {}
    for key, fn in WORKLOADS.items():
        if only and key not in only:
            continue
        if progress:
            progress(key)
        try:
            results[key] = fn(lab, s)
        except Exception as exc:  # one broken workload must not hide the others' figures
            results[key] = {"error": f"{type(exc).__name__}: {exc}"}
        with contextlib.suppress(Exception):
            lab.shellpers.stop()
            if lab.dtachs is not None:
                lab.dtachs.stop()
    return results
