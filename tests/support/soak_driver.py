"""The soak: many sessions, random clients and faults for a fixed time, invariants checked all along.

One asyncio loop plays the Tower (one tower connection per session, reading everything) and a crowd of
people and faults: terminals and viewers attaching and detaching, resizes, input, signals, SPAWNs,
children killed from outside, and Tower restarts (every tower connection dropped, then discover,
reconcile and apply, then every session resumed where its tower left off). Seeded, bounded, and it stops
by itself after ``seconds``.

Invariants, checked as it goes (an AssertionError names the session and what broke):

* every output stream (towers and attachers) is contiguous, or has an explicit GAP whose ``missed`` is
  exact (a client more than a ring behind a burst gets one; a tower or terminal that stalls, too);
  what any client received equals, byte for byte, what the tower received at the same offsets (the ring
  never hands out wrong, shifted or duplicated bytes);
* the tower sees every event (seq contiguous, never ``events_missed``), every exit has a class, and at
  the end the exits it saw are exactly the record's ``exit_count`` and STATUS's;
* each shellper's fds stay within what its connections and child explain, and come back exactly to the
  starting count; no zombie lives across two checks; at most one live process under each shellper;
  memory is flat (late RSS within a margin of early RSS);
* at the end every shellper, child and marked process is gone and the runtime directory is empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shellper.client.launch import LaunchInfo
from shellper.core.exits import RestartPolicy
from shellper.host.identity import IdentityError, ProcessIdentity, read_stat
from shellper.host.reaper import descendants
from shellper.host.record import read_record
from shellper.protocol import wire
from support.soak import child, fd_count, identity, is_dead, marked, rss_mib
from tower_client.apply import apply
from tower_client.client import AsyncClient, ClientError
from tower_client.discover import discover_async
from tower_client.reconcile import ReconcileAction, Registry, RegistryRow, reconcile

CLASSES = {"clean", "requested", "permanent", "crash"}
POLICY = RestartPolicy(backoff_initial=0.05, backoff_max=0.5, jitter=0.1, breaker_count=4, breaker_window=20,
                       min_uptime=0.5, healthy_uptime=2.0)
KEEP = 4 << 20
EXPECTED_ERRORS = {"not_running", "spawn_failed"}
"""Answers to our own actions on a child that is not running (input, a signal) or cannot start."""
"""Bytes of each tower's stream kept for comparisons (more than the ring holds)."""


@dataclass(frozen=True)
class SoakConfig:
    sessions: int
    seconds: float
    seed: int = 1
    ring_bytes: int = 1024 * 1024
    concurrency: int = 6
    """Actions in flight at once."""
    check_every: float = 2.0
    tower_restart_every: float = 20.0


@dataclass
class Totals:
    actions: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    tower_bytes: int = 0
    attach_bytes: int = 0
    compared_bytes: int = 0
    gaps: int = 0
    gap_bytes: int = 0
    attach_gaps: int = 0
    attach_gap_bytes: int = 0
    tower_restarts: int = 0
    checks: int = 0
    events: int = 0
    rss_peak_early: float = 0.0
    rss_peak_late: float = 0.0

    def summary(self, cfg: SoakConfig, elapsed: float) -> dict[str, Any]:
        return {"sessions": cfg.sessions, "seconds": round(elapsed, 1), "seed": cfg.seed,
                "ring_bytes": cfg.ring_bytes, "actions": dict(self.actions),
                "actions_total": sum(self.actions.values()),
                "exits": dict(self.exits), "tower_restarts": self.tower_restarts, "checks": self.checks,
                "events": self.events, "tower_bytes": self.tower_bytes, "attach_bytes": self.attach_bytes,
                "compared_bytes": self.compared_bytes, "gaps": self.gaps, "gap_bytes": self.gap_bytes,
                "attach_gaps": self.attach_gaps, "attach_gap_bytes": self.attach_gap_bytes,
                "bytes_lost_within_ring": 0, "rss_peak_early_mib": round(self.rss_peak_early, 1),
                "rss_peak_late_mib": round(self.rss_peak_late, 1)}


class Stream:
    """Offsets of one client's output: DATA continues at ``next``; a GAP must count exactly what it skips."""

    def __init__(self, who: str, start: int, gap: int) -> None:
        self.who = who
        self.next = start
        self.gaps: list[tuple[int, int]] = [(start, gap)] if gap else []
        self.buf = bytearray()
        self.buf_start = start
        self.received = 0

    def data(self, data: bytes) -> None:
        self.received += len(data)
        self.buf += data
        self.next += len(data)
        if len(self.buf) > 2 * KEEP:  # amortised: one move per KEEP bytes
            cut = len(self.buf) - KEEP
            del self.buf[:cut]
            self.buf_start += cut

    def gap(self, frame: wire.Gap) -> None:
        assert frame.missed == frame.offset - self.next > 0, f"{self.who}: GAP {frame} at position {self.next}"
        self.gaps.append((frame.offset, frame.missed))
        self.next = frame.offset
        self.buf.clear()
        self.buf_start = frame.offset

    def slice(self, start: int, end: int) -> bytes:
        return bytes(self.buf[start - self.buf_start:end - self.buf_start])


class Soak:
    def __init__(self, cfg: SoakConfig, directory: Path, start: Callable[..., LaunchInfo],
                 stop: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.dir = directory
        self.start_session = start
        self.stop_session = stop
        self.rng = random.Random(cfg.seed)
        self.totals = Totals()
        self.names = [f"s{i:02d}" for i in range(cfg.sessions)]
        self.info: dict[str, LaunchInfo] = {}
        self.shellpers: dict[str, ProcessIdentity] = {}
        self.towers: dict[str, AsyncClient] = {}
        self.streams: dict[str, Stream] = {}
        self.seq: dict[str, int] = {}
        self.exits_seen: Counter[str] = Counter()
        self.readers: dict[str, asyncio.Task[None]] = {}
        self.base_fds: dict[str, int] = {}
        self.children: set[ProcessIdentity] = set()
        self.zombies: dict[str, set[int]] = {}
        self.rss: dict[str, list[float]] = {}
        self.busy: set[str] = set()
        self.gate = asyncio.Lock()  # held by a Tower restart: no action meanwhile
        self.failures: list[str] = []

    # ----------------------------------------------------------------------------------- towers

    async def connect_tower(self, name: str, first: bool) -> None:
        info = self.info[name]
        tower = AsyncClient(info.socket, "tower", client_name="soak-tower")
        if first:
            await tower.connect(resume_from=0, events_after=0, expect_instance_id=info.instance_id)
        else:
            await tower.connect(resume_from=self.streams[name].next, events_after=self.seq[name],
                                expect_instance_id=info.instance_id)
        assert tower.replay is not None
        stream = self.streams.get(name) or Stream(f"tower {name}", tower.replay.offset, tower.replay.gap)
        if not first:
            want = stream.next
            assert tower.replay.offset - tower.replay.gap == want, f"tower {name}: resumed at {tower.replay}"
            if tower.replay.gap:
                stream.gap(wire.Gap(offset=tower.replay.offset, missed=tower.replay.gap))
                self.totals.gaps += 1
                self.totals.gap_bytes += tower.replay.gap
        stream.data(tower.replay.data)
        self.totals.tower_bytes += len(tower.replay.data)
        self.streams[name] = stream
        self.seq.setdefault(name, 0)
        self.towers[name] = tower
        self.readers[name] = asyncio.get_running_loop().create_task(self.read_tower(name, tower))

    async def read_tower(self, name: str, tower: AsyncClient) -> None:
        stream = self.streams[name]
        try:
            async for frame in tower:
                if isinstance(frame, wire.Data):
                    stream.data(frame.data)
                    self.totals.tower_bytes += len(frame.data)
                elif isinstance(frame, wire.Gap):  # the tower fell a whole ring behind a burst: exact, counted
                    stream.gap(frame)
                    self.totals.gaps += 1
                    self.totals.gap_bytes += frame.missed
                elif isinstance(frame, wire.Event) and frame.seq == 0 and frame.kind != "events_missed":
                    pass  # live only (a client's attach or detach): not part of the numbered sequence
                elif isinstance(frame, wire.Event):
                    if frame.kind == "events_missed" or frame.seq != self.seq[name] + 1:
                        self.failures.append(f"tower {name}: event {frame.seq} {frame.kind} after {self.seq[name]}")
                    self.seq[name] = frame.seq
                    self.totals.events += 1
                    if frame.kind == "exited":
                        cls = frame.data.get("class")
                        if cls not in CLASSES or not frame.data.get("reason"):
                            self.failures.append(f"tower {name}: unclassified exit {frame.data}")
                        self.exits_seen[name] += 1
                        self.totals.exits[str(cls)] += 1
                    elif frame.kind == "spawned":
                        with contextlib.suppress(AssertionError):
                            self.children.add(identity(int(frame.data["child_pid"])))
                elif isinstance(frame, wire.Exit):
                    if frame.exit_class not in CLASSES:
                        self.failures.append(f"tower {name}: EXIT without a class: {frame}")
                elif isinstance(frame, wire.Error) and (frame.fatal or frame.code not in EXPECTED_ERRORS):
                    self.failures.append(f"tower {name}: ERROR {frame.code}: {frame.message}")
        except ClientError as exc:
            self.failures.append(f"tower {name}: {exc}")
        except AssertionError as exc:
            self.failures.append(str(exc))

    async def drop_towers(self) -> None:
        for name, tower in list(self.towers.items()):
            tower.abort()
            self.readers[name].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.readers[name]
            await tower.close()
        self.towers.clear()

    async def restart_tower(self) -> None:
        """The Tower dies and comes back: discover, reconcile (all must be adopted), apply, resume."""
        async with self.gate:
            async with asyncio.timeout(30):
                while self.busy:
                    await asyncio.sleep(0.01)  # polling with a deadline for actions in flight to end
            await self.drop_towers()
            observed = await discover_async(self.dir)
            registry = Registry(tuple(RegistryRow(n, self.info[n].instance_id) for n in self.names))
            decisions = reconcile(registry, observed, now=time.time())
            wrong = [(d.name, d.action, d.reason) for d in decisions if d.action is not ReconcileAction.ADOPT]
            assert not wrong and len(decisions) == len(self.names), f"Tower restart decided {wrong}"
            report = await asyncio.get_running_loop().run_in_executor(None, apply, decisions)
            assert report.ok and {o.result for o in report.outcomes} == {"adopted"}, report.to_dict()
            for name in self.names:
                await self.connect_tower(name, first=False)
            self.totals.tower_restarts += 1

    # ----------------------------------------------------------------------------------- actions

    async def attach(self, name: str) -> None:
        """A terminal or viewer comes and goes; its bytes must be the tower's bytes at the same offsets."""
        info = self.info[name]
        tower = self.streams[name]
        role = self.rng.choice(["terminal", "viewer"])
        how = self.rng.choice(["all", "tail", "resume", "live"])
        hello: dict[str, Any] = {}
        if how == "tail":
            hello["replay_bytes"] = self.rng.randrange(0, 64 * 1024)
        elif how == "resume":
            hello["resume_from"] = max(0, tower.next - self.rng.randrange(0, 2 * self.cfg.ring_bytes))
        elif how == "live":
            hello["replay_bytes"] = 0
        client = AsyncClient(info.socket, role, client_name="soak-attach")
        try:
            await client.connect(**hello)
            assert client.replay is not None
            replay = client.replay
            if "resume_from" in hello:
                assert replay.offset - replay.gap == hello["resume_from"], f"{name}: {hello} -> {replay}"
            mine = Stream(f"{role} on {name}", replay.offset, replay.gap)
            mine.data(replay.data)
            deadline = time.monotonic() + self.rng.uniform(0.05, 1.0)
            while (left := deadline - time.monotonic()) > 0:
                frame = await client.recv(timeout=left)
                if isinstance(frame, wire.Data):
                    mine.data(frame.data)
                elif isinstance(frame, wire.Gap):
                    mine.gap(frame)
                if role == "terminal" and self.rng.random() < 0.05:
                    await client.resize(self.rng.randint(20, 300), self.rng.randint(5, 100))
            self.totals.attach_bytes += mine.received
            self.totals.attach_gaps += len(mine.gaps)
            self.totals.attach_gap_bytes += sum(missed for _, missed in mine.gaps)
            self.compare(name, mine)
        finally:
            if self.rng.random() < 0.3:
                client.abort()
            await client.close()

    async def stall(self, name: str) -> None:
        """A viewer that stops reading while the child bursts more than the ring: the child is not held
        up, and when the viewer reads again it gets a GAP counting exactly what the ring dropped."""
        status = await self.towers[name].status()
        if status.state != "running" or "ticker" not in " ".join(status.info["argv"]):
            return  # nobody to burst
        reader, writer = await asyncio.open_unix_connection(self.info[name].socket, limit=4096)
        try:
            writer.write(wire.encode(wire.Hello(version=wire.PROTOCOL_VERSION, role="viewer", replay_bytes=0,
                                                client="soak-stall")))
            decoder = wire.Decoder()
            frames: list[wire.DecodedEvent] = []
            async with asyncio.timeout(10):
                while not any(isinstance(f, wire.Replay) for f in frames):
                    decoder.feed(await reader.read(65536))
                    frames += list(decoder.events())
            at = next(i for i, f in enumerate(frames) if isinstance(f, wire.Replay))
            replay = frames[at]
            assert isinstance(replay, wire.Replay)
            mine = Stream(f"stalled viewer on {name}", replay.offset, replay.gap)
            mine.data(replay.data)
            for f in frames[at + 1:]:  # output that came in the same read as the REPLAY
                if isinstance(f, wire.Data):
                    mine.data(f.data)
                elif isinstance(f, wire.Gap):
                    mine.gap(f)
            tower = self.streams[name]
            target = tower.next + 3 * self.cfg.ring_bytes
            await self.towers[name].write(b"burst %d\n" % (4 * self.cfg.ring_bytes))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    while tower.next < target:
                        await asyncio.sleep(0.01)  # waiting for the tower to see the burst (polling, bounded)
            end = tower.next
            async with asyncio.timeout(10):
                while mine.next < end:
                    chunk = await reader.read(1 << 20)
                    assert chunk, f"{name}: the stalled viewer was disconnected"
                    decoder.feed(chunk)
                    for f in decoder.events():
                        if isinstance(f, wire.Data):
                            mine.data(f.data)
                        elif isinstance(f, wire.Gap):
                            mine.gap(f)
            self.compare(name, mine)
            self.totals.attach_bytes += mine.received
            self.totals.attach_gaps += len(mine.gaps)
            self.totals.attach_gap_bytes += sum(missed for _, missed in mine.gaps)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def compare(self, name: str, other: Stream) -> None:
        tower = self.streams[name]
        lo = max(other.buf_start, tower.buf_start)
        hi = min(other.next, tower.next)
        if hi > lo:
            a, b = other.slice(lo, hi), tower.slice(lo, hi)
            assert a == b, f"{other.who}: bytes {lo}..{hi} differ from the tower's"
            self.totals.compared_bytes += hi - lo

    async def act(self, name: str) -> None:
        tower = self.towers[name]
        kind = self.rng.choices(
            ["attach", "stall", "resize", "input", "burst", "signal", "kill", "exit", "spawn", "status"],
            weights=[30, 4, 10, 20, 6, 6, 4, 4, 8, 10])[0]
        self.totals.actions[kind] += 1
        if kind == "attach":
            await self.attach(name)
        elif kind == "stall":
            await self.stall(name)
        elif kind == "resize":
            await tower.resize(self.rng.randint(1, 400), self.rng.randint(1, 200))
        elif kind == "input":
            await tower.write(b"hello %d\n" % self.rng.randrange(10**6))
        elif kind == "burst":  # more than the ring at times: slow attachers must get exact GAPs
            await tower.write(b"burst %d\n" % self.rng.choice([1000, 30_000, 200_000, 600_000]))
        elif kind == "exit":
            await tower.write(b"exit %d\n" % self.rng.choice([0, 1, 3, 42]))
        elif kind == "signal":
            await tower.signal(self.rng.choice(["INT", "TERM", "HUP", "KILL", "USR1", "WINCH", "CONT"]))
        elif kind == "kill":  # a crash from outside: the child we started, by pidfd after an identity check
            status = await tower.status()
            pid = status.info.get("child_pid")
            if pid:
                with contextlib.suppress(AssertionError):
                    ident = identity(int(pid))
                    if ident in self.children:
                        os.kill(ident.pid, signal.SIGKILL)
        elif kind == "spawn":
            argv = self.rng.choice([child("ticker", "0.1")] * 6 + [child("ticker", "0.03")] * 2 + [
                ["sh", "-c", "echo bye; exit 0"], ["sh", "-c", "exit 3"], child("crash"), ["/nonexistent/agent"]])
            await tower.spawn(argv)
        elif kind == "status":
            status = await tower.status()
            assert status.state in ("starting", "running", "backoff", "exited", "fatal"), status.state

    async def worker(self, deadline: float) -> None:
        while time.monotonic() < deadline and not self.failures:
            async with self.gate:
                free = [n for n in self.names if n not in self.busy]
                if not free:
                    name = None
                else:
                    name = self.rng.choice(free)
                    self.busy.add(name)
            if name is None:
                await asyncio.sleep(0.01)  # pacing the workload
                continue
            try:
                await self.act(name)
            except AssertionError as exc:
                self.failures.append(str(exc))
            except ClientError as exc:  # a child gone mid-request is normal; a lost shellper is not
                if not self.alive(name):
                    self.failures.append(f"{name}: shellper died: {exc}")
            finally:
                self.busy.discard(name)

    def alive(self, name: str) -> bool:
        return not is_dead(self.shellpers[name])

    # ----------------------------------------------------------------------------------- checks

    def check(self, name: str, late: bool) -> None:
        pid = self.info[name].pid
        assert self.alive(name), f"{name}: the shellper died"
        live, zombies = [], set()
        for p in descendants(pid):
            try:
                st = read_stat(p)
            except IdentityError:
                continue
            if st is not None:
                (zombies.add(p) if st.state == "Z" else live.append(p))
        assert len(live) <= 1, f"{name}: {len(live)} live processes under the shellper: {live}"
        lingering = zombies & self.zombies.get(name, set())
        assert not lingering, f"{name}: zombies {sorted(lingering)} outlived a check"
        self.zombies[name] = zombies
        fds = fd_count(pid)
        # listener, lock, log, epoll, signal pipe ..., the tower, attachers (at most the concurrency), pidfds
        limit = self.base_fds[name] + 2 * self.cfg.concurrency + 4
        assert fds <= limit, f"{name}: {fds} fds open (started with {self.base_fds[name]})"
        rss = rss_mib(pid)
        self.rss.setdefault(name, []).append(rss)
        if late:
            self.totals.rss_peak_late = max(self.totals.rss_peak_late, rss)
        else:
            self.totals.rss_peak_early = max(self.totals.rss_peak_early, rss)

    async def checker(self, started: float, deadline: float) -> None:
        while time.monotonic() < deadline and not self.failures:
            await asyncio.sleep(self.cfg.check_every)  # the check period, not synchronisation
            late = time.monotonic() > started + (deadline - started) * 2 / 3
            for name in self.names:
                try:
                    self.check(name, late)
                except AssertionError as exc:
                    self.failures.append(str(exc))
            self.totals.checks += 1

    async def tower_restarter(self, deadline: float) -> None:
        while time.monotonic() + self.cfg.tower_restart_every < deadline and not self.failures:
            await asyncio.sleep(self.cfg.tower_restart_every * self.rng.uniform(0.5, 1.0))  # workload pacing
            try:
                await self.restart_tower()
            except AssertionError as exc:
                self.failures.append(str(exc))

    # ----------------------------------------------------------------------------------- run

    async def run(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        infos = await asyncio.gather(*(loop.run_in_executor(None, self.launch, n) for n in self.names))
        self.info = dict(zip(self.names, infos, strict=True))
        for name in self.names:
            await self.connect_tower(name, first=True)
        await self.settle()
        for name in self.names:
            self.base_fds[name] = fd_count(self.info[name].pid)
        started = time.monotonic()
        deadline = started + self.cfg.seconds
        tasks = [loop.create_task(self.worker(deadline)) for _ in range(self.cfg.concurrency)]
        tasks.append(loop.create_task(self.checker(started, deadline)))
        tasks.append(loop.create_task(self.tower_restarter(deadline)))
        await asyncio.gather(*tasks)
        assert not self.failures, "\n".join(self.failures[:20])
        await self.finish()
        assert not self.failures, "\n".join(self.failures[:20])
        return self.totals.summary(self.cfg, time.monotonic() - started)

    def launch(self, name: str) -> LaunchInfo:
        info = self.start_session(name, child("ticker", "0.1"), ring_bytes=self.cfg.ring_bytes, policy=POLICY,
                                  grace=1.0)
        if info.child_pid is not None:
            self.children.add(identity(info.child_pid))
        self.shellpers[name] = identity(info.pid)
        return info

    async def settle(self) -> None:
        """Every session running a ticker, no attacher, every event read: a quiescent point."""
        for name in self.names:
            tower = self.towers[name]
            status = await tower.status()
            if status.state != "running" or "ticker" not in " ".join(status.info["argv"]):
                await tower.spawn(child("ticker", "0.1"))
            async with asyncio.timeout(30):
                while True:
                    status = await tower.status()
                    clients = status.info["clients"]
                    if status.state == "running" and len(clients) == 1 and "ticker" in " ".join(status.info["argv"]):
                        break
                    await asyncio.sleep(0.05)  # polling with a deadline

    async def finish(self) -> None:
        """Quiesce; fds exactly back to the start; every exit seen, recorded and reported; then stop all."""
        await self.settle()
        for name in self.names:
            pid = self.info[name].pid
            async with asyncio.timeout(10):
                while fd_count(pid) != self.base_fds[name]:
                    await asyncio.sleep(0.05)  # polling with a deadline
            status = await self.towers[name].status()
            async with asyncio.timeout(10):
                while self.exits_seen[name] != status.info["exit_count"]:
                    await asyncio.sleep(0.02)  # the reader task catching up
            record = read_record(self.dir / f"{name}.json")
            assert record.exit_count == status.info["exit_count"] == self.exits_seen[name], (
                f"{name}: record {record.exit_count}, status {status.info['exit_count']}, seen {self.exits_seen[name]}")
            assert all(e.exit_class in CLASSES for e in record.exits), f"{name}: unclassified exit in the record"
        shellpers = list(self.shellpers.values())
        await self.drop_towers()
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, self.stop_session, n) for n in self.names))
        left = [str(i.pid) for i in [*shellpers, *self.children] if not is_dead(i)]
        assert not left, f"processes left after stopping every session: {left}"
        stray = [p for n in self.names for p in marked(self.info[n].instance_id)]
        assert not stray, f"marked processes left: {stray}"
        left = [p.name for p in self.dir.iterdir() if p.name != "logs"]  # logs/: stopped sessions' logs, kept
        assert left == [], f"files left: {left}"
        for name, samples in self.rss.items():
            third = max(1, len(samples) // 3)
            early, late = max(samples[:third]), max(samples[-third:])
            assert late <= early + 16, f"{name}: RSS grew from {early:.0f} to {late:.0f} MiB"


def run_soak(cfg: SoakConfig, directory: Path, start: Callable[..., LaunchInfo],
             stop: Callable[[str], None]) -> dict[str, Any]:
    soak = Soak(cfg, directory, start, stop)
    return asyncio.run(_bounded(soak, cfg))


async def _bounded(soak: Soak, cfg: SoakConfig) -> dict[str, Any]:
    async with asyncio.timeout(cfg.seconds + 180 + cfg.sessions * 3):
        try:
            return await soak.run()
        finally:
            await soak.drop_towers()
