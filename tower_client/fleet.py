"""The supervisor layer a Tower holds for its whole life: one object for every session it runs.

A :class:`Fleet` owns the Tower's registry file (:mod:`tower_client.registry_file`) and its journal of
consumed positions (:mod:`tower_client.progress`). ``await fleet.start()`` reconciles the runtime
directory against the registry and applies the decisions for the Tower's owner (reconcile + apply:
adopt, terminate, clean, respawn), attaches one resuming client per session at the position the
journal says the Tower consumed, and starts watching: the runtime directory through inotify, each
shellper through a pidfd (readable the moment it exits), each stream through its connection. No timer
runs while nothing happens.

``async for item in fleet`` is one stream of everything across sessions (:mod:`tower_client.stream`);
``fleet.ack(item)`` records that the Tower consumed it, and the journal commits acknowledgements in the
background (``await fleet.sync()`` waits for that). A Tower killed with -9 and started again resumes
every stream at the last committed acknowledgement: nothing the ring still holds is lost, nothing before
that point comes twice.

Blocking work (launching a shellper, apply, mint-or-reclaim, terminations with grace periods, fsync)
runs in threads, never on the event loop; groups of sessions start and stop with bounded concurrency.

The Fleet is built in four parts, one module each: the merged stream and what every part shares
(:mod:`tower_client.fleetstream`), following each session (:mod:`tower_client.fleetfollow`, with
:mod:`tower_client.fleetmember`), the sessions on other hosts (:mod:`tower_client.fleethosts`: a row's
``host``, followed through that host's watch), and here its life, launching and stopping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import Iterable
from typing import Any

from shellper.client.launch import LaunchInfo, launch
from shellper.core.config import SessionConfig
from shellper.core.errors import ShellperError
from shellper.core.names import validate_name
from shellper.core.owner import default_owner
from shellper.host.identity import IdentityError, ProcessGone, ProcessIdentity, open_verified
from shellper.host.paths import SessionPaths, ensure_runtime_dir
from shellper.host.record import SessionRecord, read_record
from shellper.protocol import wire
from tower_client.agent import AgentCommand, resolve
from tower_client.apply import Report, apply_async, terminate_session
from tower_client.client import (
    AsyncResumingClient,
    ClientError,
    SessionGone,
    Timeout,
)
from tower_client.discover import discover_async
from tower_client.errors import FleetClosed, FleetError, FleetNotStarted, UnknownSession
from tower_client.fleetfollow import FLEET_CLIENT_NAME, STOP_MARGIN
from tower_client.fleethosts import HOST_COLUMN, HostFollowing
from tower_client.fleetmember import Member
from tower_client.fleetsession import SessionHandle
from tower_client.fleetstream import MAX_PENDING_BYTES, Inbox, SessionStream
from tower_client.inotify import DirWatch
from tower_client.options import FleetPolicy, OnDeath, SessionOptions, SessionSpec
from tower_client.progress import ProgressJournal
from tower_client.reconcile import ReconcileAction, ReconcileDecision, Registry, reconcile
from tower_client.registry_file import RegistryFile
from tower_client.stream import FleetState, Notice, StateChange

__all__ = ["FLEET_CLIENT_NAME", "MAX_PENDING_BYTES", "STOP_MARGIN", "Fleet", "FleetClosed", "FleetError",
           "FleetNotStarted", "FleetPolicy", "OnDeath", "SessionHandle", "SessionOptions", "SessionSpec",
           "UnknownSession"]

AGENT_RELAUNCHES = 3
"""Automatic relaunches of an agent whose conversation id was in use, per session and Fleet life."""
IN_USE = re.compile(r"already in use", re.IGNORECASE)
"""What an agent CLI says when its conversation id is held (shellper's default fatal pattern too)."""
ATTACH_CONCURRENCY = 32
"""Adopted sessions a starting Fleet attaches to at once."""
LAUNCH_COLUMN = "launch"
AGENT_COLUMN = "agent"


class Fleet(HostFollowing):
    """Every session of one Tower (one owner) in one runtime directory. See the module docstring.

    Its parts: the merged stream and shared state (:class:`~tower_client.fleetstream.MergedStream`), following
    each session (:class:`~tower_client.fleetfollow.Following`), and here its life, launching and stopping."""

    def __init__(self, runtime_dir: str | os.PathLike[str], registry: str | os.PathLike[str],
                 journal: str | os.PathLike[str], *, owner: str | None = None,
                 policy: FleetPolicy | None = None) -> None:
        self.dir = os.fspath(runtime_dir)
        self.owner = default_owner() if owner is None else owner
        self.policy = policy or FleetPolicy()
        self.registry = RegistryFile.load(registry)  # a bad file is refused here, before anything is done
        self.journal = ProgressJournal.load(journal)
        self.members: dict[str, Member] = {}
        self.report: Report | None = None
        """What the start's apply did."""
        self._queue = Inbox()
        self._watch: DirWatch | None = None
        self._registry_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False
        self._closed = False
        self._closing: asyncio.Task[None] | None = None
        self._agent_relaunches: dict[str, int] = {}
        self._launching: set[str] = set()
        """Names being launched now: their record appears before their registry row."""
        self._streams: dict[str, SessionStream] = {}
        """Sessions whose items go to a stream of their own (SessionHandle.stream) instead of the merged one."""
        self._hosts_init()

    # ----------------------------------------------------------------------------------- life

    async def start(self) -> None:
        """Reconcile and apply for this owner, adopt and respawn, then watch. RegistryError / ProgressError
        were raised by the constructor already; OwnerBusy if another Tower of this owner is applying.
        FleetClosed after close(), FleetError if it was started already: a Fleet starts once."""
        if self._closed:
            raise FleetClosed(None, "this Fleet was closed: make a new one to start again")
        if self._started:
            raise FleetError(None, "this Fleet was started already")
        self._started = True
        ensure_runtime_dir(self.dir)
        self._watch = DirWatch(self.dir, self._changed)  # first: nothing that happens from now on is missed
        self._watch.start()
        observed = await discover_async(self.dir)
        # A stop the previous life asked for and did not see through is finished, not undone: its session
        # is decided as if it were not registered (terminated if it runs, cleaned if it left files), never
        # respawned.
        # Rows on other hosts are reconciled there, each once its host's watch has said what runs on it
        # (tower_client.fleethosts): a host that cannot be reached now is left alone, not decided from here.
        stops = {n: g for n, g in self.journal.stops().items() if self._row_host(n) is None}
        registry = self.registry.registry()
        registry = Registry(tuple(r for r in registry.rows if r.name not in stops and self._row_host(r.name) is None),
                            registry.path)
        decisions = reconcile(registry, observed, now=time.time(), husk_max_age=self.policy.husk_max_age,
                              owner=self.owner)
        to_stop = [d for d in decisions if d.name in stops]
        decisions = [d for d in decisions if d.name not in stops]
        report = self.report = await apply_async(decisions, grace=self.policy.grace, owner=self.owner)
        respawn: list[str] = []
        adopt: list[SessionRecord] = []
        for outcome in report.outcomes:
            d = outcome.decision
            self._emit(Notice(d.name, str(d.action), d.reason, outcome.error or outcome.detail))
            if not outcome.ok or d.cgroup is not None:
                continue
            if d.action is ReconcileAction.ADOPT and d.observed is not None and d.observed.record is not None:
                adopt.append(d.observed.record)
            elif d.action is ReconcileAction.RESPAWN:
                respawn.append(d.name)
            elif d.action is ReconcileAction.TERMINATE and d.reason == "husk_expired":
                self.registry.remove(d.name)
                self.journal.forget(d.name)
        await self._adopt_all(adopt)
        for name, grace in stops.items():
            await self._finish_stop(name, grace, [d for d in to_stop if d.name == name], report)
        for name in list(self.journal):
            if name not in self.registry.rows:
                self.journal.forget(name)
        await self._save_registry()
        self._start_hosts()
        await self._bounded([self._relaunch(name, "respawn") for name in respawn])

    async def _adopt_all(self, records: list[SessionRecord]) -> None:
        """Attach to every adopted session, ATTACH_CONCURRENCY at once: each waits on its own shellper's
        handshake, so 200 one after another made most of a restarted Tower's start (bench/NOTES.md)."""
        gate = asyncio.Semaphore(ATTACH_CONCURRENCY)

        async def one(record: SessionRecord) -> None:
            async with gate:
                try:
                    await self._attach(record, adopted=True)
                except (ClientError, IdentityError, FleetError) as exc:
                    self._emit(Notice(record.name, "failed", "adopt", str(exc)))

        results = await asyncio.gather(*(one(r) for r in records), return_exceptions=True)
        for result in results:  # anything else, as from one at a time, once none is left half attached
            if isinstance(result, BaseException):
                raise result

    async def _finish_stop(self, name: str, grace: float, decisions: list[ReconcileDecision], report: Report) -> None:
        """Carry out a journalled stop: end the session if it runs (waiting out a shellper still stopping,
        within grace + STOP_MARGIN), clean what it left, then drop its row and journal entry. A session that
        cannot be dealt with now (left for another reason) keeps its row and the intent for the next start."""
        done = True
        for d in decisions:
            if d.action is ReconcileAction.LEAVE and d.reason == "stopping" and d.observed is not None \
                    and d.observed.record is not None:
                ok, detail = await self._await_stopping(d.observed.record, grace)
                self._emit(Notice(name, "stop", "stop_requested", detail))
                if ok:
                    await self._clean_dead(name)
                done = done and ok
            elif d.action in (ReconcileAction.TERMINATE, ReconcileAction.CLEAN):
                outcome = (await apply_async([d], grace=grace, owner=self.owner)).outcomes[0]
                report.outcomes.append(outcome)
                self._emit(Notice(name, str(d.action), "stop_requested", outcome.error or outcome.detail))
                done = done and outcome.ok
            else:
                self._emit(Notice(name, str(d.action), d.reason, "a stop was requested: tried again at the next start"))
                done = False
        if done:
            self.registry.remove(name)
            self.journal.forget(name)
            self._emit(Notice(name, "stopped", "stop_requested", f"the stop requested with grace {grace:g} s "
                              "before the Tower's restart is done"))

    async def _await_stopping(self, record: SessionRecord, grace: float) -> tuple[bool, str]:
        """A shellper still carrying out a STOP: wait for its exit (its pidfd), and end it with signals if it
        is still there after grace + STOP_MARGIN. (done, what happened)."""
        try:
            pidfd = open_verified(ProcessIdentity(record.boot_id, record.shellper_pid, record.shellper_start_time))
        except IdentityError:
            return True, "the shellper had gone"
        try:
            if await asyncio.to_thread(pidfd.wait_dead, grace + STOP_MARGIN):
                return True, f"shellper {record.shellper_pid} finished stopping"
        finally:
            pidfd.close()
        paths = SessionPaths.for_name(self.dir, record.name)
        try:
            term = await asyncio.to_thread(terminate_session, record, paths, grace=grace)
        except ProcessGone:
            return True, f"shellper {record.shellper_pid} finished stopping"
        except ShellperError as exc:  # not ours any more, or something outlived SIGKILL: said, not hidden
            return False, f"shellper {record.shellper_pid}: {exc}"
        return not term.kept, f"shellper {record.shellper_pid} ended via {term.method}"

    def shutdown(self) -> None:
        """Begin closing, from a signal handler or any callback: the stream ends at once (``async for``
        stops, ``next()`` raises FleetClosed) and requests raise FleetClosed; ``await close()`` (or
        leaving ``async with``) waits until the journal is committed. The sessions run on."""
        if self._closing is None:
            self._end_stream()
            self._closing = asyncio.get_running_loop().create_task(self._close(), name="fleet close")

    async def close(self) -> None:
        """Stop watching and reading and commit the journal; the sessions run on (a Tower restarting must
        not end them). ``stop_all`` first to end them. Safe to call again, and while a shutdown() runs."""
        self.shutdown()
        assert self._closing is not None
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        for task in list(self._tasks):
            task.cancel()
        await self._close_hosts()
        for m in list(self.members.values()):
            await self._detach(m)
        self.members.clear()
        with contextlib.suppress(ShellperError):
            await self.journal.close()

    async def __aenter__(self) -> Fleet:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------------------------- launching

    async def launch(self, spec: SessionSpec) -> LaunchInfo:
        """Start a session (the agent's command line from the mint-or-reclaim verdict), record it in the
        registry, and attach its stream from offset 0. LaunchError / ConfigError / FleetError (FleetNotStarted,
        FleetClosed)."""
        self._check_live(spec.name)
        validate_name(spec.name)
        if spec.name in self.members or spec.name in self._launching:
            raise FleetError(spec.name, f"session {spec.name!r} is already in this fleet")
        self._launching.add(spec.name)
        try:
            return await self._launch(spec)
        finally:
            self._launching.discard(spec.name)

    async def _launch(self, spec: SessionSpec) -> LaunchInfo:
        argv, agent = list(spec.argv), spec.agent
        if agent is not None:
            resolved = await resolve(agent, self.dir, spec.name, owner=self.owner, grace=self.policy.grace)
            argv = resolved.argv
            agent = AgentCommand(agent.argv, resolved.conversation_id, agent.resume_flag, agent.mint_flag)
            self._emit(Notice(spec.name, resolved.action, resolved.reason, resolved.conversation_id))
        if spec.host is not None:  # that host's own cwd and environment unless the spec names them (null)
            config, info, record = await self._launch_remote(spec, argv)
        else:
            config = SessionConfig(name=spec.name, argv=argv, dir=self.dir, cwd=spec.cwd or os.getcwd(),
                                   env=dict(os.environ if spec.env is None else spec.env), owner=self.owner,
                                   **spec.options.config_fields())
            info = await asyncio.to_thread(launch, config)
        launch_column = {k: v for k, v in json.loads(config.to_json()).items() if k not in ("name", "dir", "argv")}
        launch_column["argv"] = list(spec.argv) if agent is None else []
        if spec.host is not None:
            launch_column.update(cwd=spec.cwd, env=None if spec.env is None else dict(spec.env))
        columns: dict[str, Any] = {**spec.columns, LAUNCH_COLUMN: launch_column}
        if spec.host is not None:
            columns[HOST_COLUMN] = spec.host
        if agent is not None:
            columns[AGENT_COLUMN] = agent.to_column()
        self.registry.put(spec.name, info.instance_id, **columns)
        await self._save_registry()
        if spec.host is None:
            record = await asyncio.to_thread(read_record, info.record)
        self.journal.start(spec.name, info.instance_id)
        await self._attach(record, adopted=False, host=spec.host)
        self._emit(Notice(spec.name, "launched", "launch", f"pid {info.pid}, instance {info.instance_id}"))
        return info

    async def launch_many(self, specs: Iterable[SessionSpec]) -> list[LaunchInfo | BaseException]:
        """Launch with at most ``policy.concurrency`` starting at once; each result or its error, in order."""
        self._check_live()
        return await self._bounded([self.launch(s) for s in specs])

    async def relaunch(self, name: str) -> LaunchInfo:
        """Start ``name`` again from its registry row (after a fatal crash loop, say): its shellper, if any,
        is stopped first; an agent's conversation goes through mint-or-reclaim again."""
        self._check_live(name)
        if name in self.members:
            await self.stop(name, forget=False)
        return await self._relaunch_row(name)

    async def _relaunch(self, name: str, why: str) -> None:
        try:
            info = await self._relaunch_row(name)
        except (ShellperError, OSError, ValueError, TypeError, KeyError) as exc:  # a hand-edited row too
            self._emit(Notice(name, "failed", why, f"{type(exc).__name__}: {exc}"))
        else:
            self._emit(Notice(name, "relaunched", why, f"pid {info.pid}, instance {info.instance_id}"))

    async def _relaunch_row(self, name: str) -> LaunchInfo:
        row = self.registry.get(name)
        if row is None or not isinstance(row.get(LAUNCH_COLUMN), dict):
            raise FleetError(name, f"session {name!r} has no {LAUNCH_COLUMN!r} column in the registry to start it from")
        column = dict(row[LAUNCH_COLUMN])
        agent = AgentCommand.from_column(row[AGENT_COLUMN]) if AGENT_COLUMN in row else None
        argv = column.pop("argv", [])
        # A host row's cwd and env may be null (that host's own): placeholders for the check, null for the spec.
        cwd, env = column.get("cwd"), column.get("env")
        config = SessionConfig.from_json(json.dumps({**column, "name": name, "dir": self.dir, "argv": argv or ["-"],
                                                     "cwd": cwd or "/", "env": env or {}}))
        options = {k: getattr(config, k) for k in column if k not in ("cwd", "env", "owner")}
        columns = {k: v for k, v in row.items()
                   if k not in ("name", "instance_id", LAUNCH_COLUMN, AGENT_COLUMN, HOST_COLUMN)}
        return await self.launch(SessionSpec(name, argv, agent, cwd and config.cwd, None if env is None else config.env,
                                             SessionOptions.from_mapping(options), columns, host=self._row_host(name)))

    # ----------------------------------------------------------------------------------- requests

    def client(self, name: str) -> AsyncResumingClient:
        """The session's resuming client, for requests the Fleet does not wrap (write, resize, signal)."""
        m = self._member(name)
        assert m.client is not None
        return m.client

    async def spawn(self, name: str, argv: list[str] | None = None, *, cwd: str | None = None,
                    env: dict[str, str] | None = None, timeout: float = 10.0) -> int:
        """Start the session's child again (SPAWN) and return the new child's pid. A version-3 shellper
        answers with a REPLY carrying it, or a refusal raised as its typed error (SpawnFailed,
        SessionStopping, Forbidden...); from a version-2 shellper the pid comes from the ``spawned`` event
        that follows. Timeout if no answer comes within ``timeout`` seconds (the old child's tree is ended
        first: allow for its grace period)."""
        m = self._member(name)
        live = self.client(name).client
        if live is None:
            raise SessionGone(m.paths.socket, "not connected (reconnecting or ended)")
        frame = live.conn.checked(wire.Spawn(argv=argv, cwd=cwd, env=env))
        if live.conn.replies:  # matched by its id; a refusal raises its typed error
            pid = await live.spawn(argv, cwd=cwd, env=env, timeout=timeout)
            if pid is None:
                raise FleetError(name, "the shellper's answer to SPAWN carries no child pid")
            return pid
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        m.spawns.append(fut)
        try:
            await live.send(frame)
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            raise Timeout(m.paths.socket, f"no spawned event within {timeout:g} s") from None
        finally:
            if fut in m.spawns:
                m.spawns.remove(fut)

    # ----------------------------------------------------------------------------------- stopping

    async def stop(self, name: str, grace: float | None = None, *, forget: bool = True) -> None:
        """End the session (STOP over its socket; signals through pidfds, in a thread, if it does not go
        within grace + STOP_MARGIN) and, with ``forget``, drop its registry row and journal entry. With
        ``forget`` the intent is committed to the journal before the STOP is sent (ProgressError if that
        fails: nothing is sent), so a Tower killed meanwhile finishes the stop at its next start."""
        m = self._member(name)
        m.stopping = True
        m.room.set()
        grace = self.policy.grace if grace is None else grace
        if forget:  # on disk before the STOP goes: a Tower killed meanwhile finishes the stop on restart
            self.journal.intend_stop(name, m.instance_id, grace)
            await self.journal.sync()
        if not m.died.is_set() and m.client is not None:
            with contextlib.suppress(ClientError):
                await m.client.stop(grace)
        try:
            async with asyncio.timeout(grace + STOP_MARGIN):
                await m.died.wait()
        except TimeoutError:
            if m.host is not None:
                await self._reap_remote(m)
            else:
                with contextlib.suppress(IdentityError):
                    await asyncio.to_thread(terminate_session, m.record, m.paths, grace=grace)
        if m.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await m.task
        if forget:
            self.registry.remove(name)
            self.journal.forget(name)
            self._end_stream_of(name)
            await self._save_registry()

    async def stop_many(self, names: Iterable[str], grace: float | None = None) -> list[BaseException | None]:
        """Stop with at most ``policy.concurrency`` at once (the grace periods run concurrently)."""
        self._check_live()
        return await self._bounded([self.stop(n, grace) for n in names])

    async def stop_all(self, grace: float | None = None) -> list[BaseException | None]:
        self._check_live()
        return await self.stop_many(list(self.members), grace)

    # ----------------------------------------------------------------------------------- an agent whose id is in use

    def _id_in_use(self, m: Member, change: StateChange) -> None:
        """An agent that gave up because its conversation id is in use (the shellper's fatal pattern) is
        launched again through the verdict, which mints a fresh id while somebody else holds it: the
        "already in use" loop ends after one round. At most AGENT_RELAUNCHES per session and Fleet life."""
        ex = change.exit
        row = self.registry.rows.get(m.name)
        if ex is None or row is None or AGENT_COLUMN not in row or m.stopping:
            return
        if not IN_USE.search(f"{ex.reason}\n{ex.stderr_tail}"):
            return
        count = self._agent_relaunches.get(m.name, 0)
        if count >= AGENT_RELAUNCHES:
            self._emit(Notice(m.name, "failed", "id in use", f"relaunched {count} times already: left fatal"))
            return
        self._agent_relaunches[m.name] = count + 1
        self._later(self._relaunch_in_use(m.name))

    async def _relaunch_in_use(self, name: str) -> None:
        try:
            info = await self.relaunch(name)
        except (ShellperError, OSError, ValueError, TypeError, KeyError) as exc:
            self._emit(Notice(name, "failed", "id in use", f"{type(exc).__name__}: {exc}"))
        else:
            self._emit(Notice(name, "relaunched", "id in use", f"pid {info.pid}, instance {info.instance_id}"))

    # ----------------------------------------------------------------------------------- views

    def session(self, name: str) -> SessionHandle:
        """A handle on ``name``: every request, its state, its screen and its offsets (UnknownSession if the
        Fleet has no such session, FleetNotStarted / FleetClosed as for every request)."""
        self._member(name)
        return SessionHandle(self, name)

    @property
    def sessions(self) -> list[str]:
        """Names of the sessions the Fleet is attached to now."""
        return sorted(self.members)

    def state(self, name: str) -> FleetState | None:
        return self._member(name).tracker.state

    def decisions(self) -> list[ReconcileDecision]:
        return [o.decision for o in self.report.outcomes] if self.report is not None else []
