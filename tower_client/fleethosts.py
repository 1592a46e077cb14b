"""Following the Fleet's sessions on other hosts: a registry row with a ``host`` is launched, adopted,
reconciled and followed through that host's shared ssh connection (shellper.host.ssh).

What a pidfd and inotify tell the Fleet about a local session comes, for a remote one, from the host's
watch (``tower-client watch`` there, protocol/WATCH.md): one ssh channel per host streaming each record
of the owner's sessions and each shellper's exit. A host that cannot be reached is left alone: its
sessions are never terminated or respawned because it did not answer; its watch and its sessions'
clients try again with backoff, and once the watch is back (``synced``) a host whose rows were not
reconciled yet is reconciled and adopted, and a session whose shellper ended meanwhile is handled as a
death. A lost ssh connection loses no byte: each session's client resumes at the next offset it had not had.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from shellper.client.launch import LaunchInfo
from shellper.core.config import SessionConfig
from shellper.core.errors import ShellperError
from shellper.host.record import RecordError, SessionRecord
from shellper.host.ssh import SshError, check_version, ensure_master, remote_tower, run_remote, ssh_argv
from tower_client.client import SessionGone
from tower_client.fleetfollow import FLEET_CLIENT_NAME, Following
from tower_client.fleetmember import FleetRemoteClient, Member
from tower_client.hosts import HOST_UNREACHABLE, reconcile_hosts
from tower_client.options import SessionSpec
from tower_client.resume import Backoff
from tower_client.stream import Notice
from tower_client.watch import WATCH_VERSION

HOST_BACKOFF = Backoff(initial=0.2, factor=2.0, max_delay=5.0, max_attempts=sys.maxsize)
"""Delays between attempts to reach a host again (its watch, its reconcile, each of its sessions' clients):
0.2 s doubling to 5 s, without a last attempt: a host that is down is waited for, never given up."""
HOST_COLUMN = "host"
WATCH_TIMEOUT = 30.0
"""Seconds a host's watch has to say ``synced`` (the snapshot of its records) once its ssh channel runs."""
REMOTE_TIMEOUT = 30.0
"""Seconds a host has for a launch or a reap over ssh."""


USAGE_ERROR = 2
"""The exit status of a tower-client that does not know the command or option it was given (argparse's)."""


class WatchUnsupported(SshError):
    """The host's tower-client does not serve the watch request of this version: the Fleet cannot follow
    sessions there (install the same shellper version on it)."""


class HostLink:
    """One host's watch: ``tower-client watch`` over the host's shared connection, run again with backoff
    whenever it ends. ``on_line(host, event)`` gets every line after the header; ``on_down(host, why)``
    is called once each time the watch is lost or cannot be had."""

    def __init__(self, host: str, owner: str, on_line: Callable[[str, dict[str, Any]], None],
                 on_down: Callable[[str, str], None]) -> None:
        self.host, self.owner = host, owner
        self.on_line, self.on_down = on_line, on_down
        self.up = False
        self.records: dict[str, SessionRecord] = {}
        """The owner's sessions on the host, as the watch said them (alive or not), by name."""
        self.alive: set[str] = set()
        self.task: asyncio.Task[None] | None = None
        self.proc: asyncio.subprocess.Process | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"fleet watch {self.host}")

    async def _run(self) -> None:
        attempt = 0
        while True:
            try:
                await self._watch_once()
                why = "the watch ended (ssh connection lost)"
            except WatchUnsupported as exc:
                self.on_down(self.host, str(exc))
                return  # an older tower-client there: trying again changes nothing
            except (SshError, OSError, ValueError, TimeoutError) as exc:
                why = str(exc) or type(exc).__name__
            if self.up:
                attempt = 0
            self.up = False
            self.on_down(self.host, why)
            attempt += 1
            await asyncio.sleep(HOST_BACKOFF.delay(attempt))  # the backoff between attempts

    async def _watch_once(self) -> None:
        await asyncio.to_thread(check_version, self.host, WATCH_TIMEOUT)
        await asyncio.to_thread(ensure_master, self.host)
        args = ["--owner", self.owner, "watch", "--watch-version", str(WATCH_VERSION)]
        with tempfile.TemporaryFile() as err:
            proc = self.proc = await asyncio.create_subprocess_exec(
                *ssh_argv(self.host, remote_tower(args)), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=err, limit=1 << 24)
            assert proc.stdout is not None
            try:
                async with asyncio.timeout(WATCH_TIMEOUT):
                    header = await proc.stdout.readline()
                    code = None if header.strip() else await proc.wait()
                self._check_header(header, err, code)
                self.records.clear()
                self.alive.clear()
                while line := await proc.stdout.readline():
                    self._line(json.loads(line))
            finally:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
                self.proc = None

    def _check_header(self, header: bytes, err: Any, code: int | None = None) -> None:
        """The first line is the header of this watch version; WatchUnsupported for a refusal or an older
        tower-client's usage error (exit 2: retrying changes nothing), SshError for anything else (ssh's
        own failure, 255, is worth retrying)."""
        try:
            data = json.loads(header) if header.strip() else None
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("watch") == WATCH_VERSION and "error" not in data:
            return
        err.seek(0)
        words = (data or {}).get("detail") if isinstance(data, dict) else None
        words = words or last_line_of(err.read()) or header.decode(errors="replace").strip()
        if data is None and code != USAGE_ERROR:
            raise SshError(self.host, f"the watch ended before its first line (exit {code}): {words or '-'}")
        raise WatchUnsupported(self.host, f"its tower-client does not serve the watch request (version "
                               f"{WATCH_VERSION}): {words}; install the same shellper version there")

    def _line(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "record":
            try:
                record = SessionRecord.from_json(json.dumps(event["record"]).encode())
            except (RecordError, KeyError, TypeError, ValueError):
                return
            self.records[record.name] = record
            if event.get("alive"):
                self.alive.add(record.name)
            else:
                self.alive.discard(record.name)
        elif kind == "exit":
            self.alive.discard(str(event.get("name")))
        elif kind == "synced":
            self.up = True
        self.on_line(self.host, event)

    async def close(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class HostFollowing(Following):
    """The Fleet's sessions on other hosts: one :class:`HostLink` per host, reconcile and adopt through it."""

    _links: dict[str, HostLink]
    _host_pending: set[str]
    """Hosts whose registry rows are not reconciled yet (unreachable so far): done once their watch syncs."""
    _host_down: set[str]

    def _hosts_init(self) -> None:
        self._links, self._host_pending, self._host_down = {}, set(), set()

    def _row_host(self, name: str) -> str | None:
        row = self.registry.rows.get(name)
        host = row.get(HOST_COLUMN) if row is not None else None
        return host if isinstance(host, str) else None

    def _start_hosts(self) -> None:
        """Reconcile every host the registry names once its watch has said what runs there."""
        for name in self.registry.rows:
            host = self._row_host(name)
            if host is not None:
                self._host_pending.add(host)
                self._link(host)

    def _link(self, host: str) -> HostLink:
        link = self._links.get(host)
        if link is None:
            link = self._links[host] = HostLink(host, self.owner, self._host_line, self._host_lost)
            link.start()
        return link

    async def _close_hosts(self) -> None:
        for link in list(self._links.values()):
            await link.close()
        self._links.clear()

    def _remote_client(self, m: Member) -> FleetRemoteClient:
        assert m.host is not None
        return FleetRemoteClient(m.host, m.name, m.died, backoff=HOST_BACKOFF, expect_instance_id=m.instance_id,
                                 client_name=FLEET_CLIENT_NAME)

    # ----------------------------------------------------------------------------------- the watch's news

    def _host_lost(self, host: str, why: str) -> None:
        if host not in self._host_down:
            self._host_down.add(host)
            self._emit(Notice("", HOST_UNREACHABLE, host, f"host {host}: {why}; its sessions are left alone and "
                              "it is tried again with backoff"))

    def _host_line(self, host: str, event: dict[str, Any]) -> None:
        kind, name = event.get("event"), event.get("name")
        mine = {n: m for n, m in self.members.items() if m.host == host}
        if kind == "synced":
            if host in self._host_down:
                self._host_down.discard(host)
                self._emit(Notice("", "host_reachable", host, f"host {host}: watched again"))
            if host in self._host_pending:
                self._host_pending.discard(host)
                self._later(self._reconcile_host(host))
            link = self._links[host]
            for m in mine.values():  # its shellper ended while the host could not be watched
                rec = link.records.get(m.name)
                # No record is no proof of a death (a clean stop removes it, a launch may write it after the
                # snapshot): that session's client finds out when it reconnects.
                if rec is not None and (rec.instance_id != m.instance_id or m.name not in link.alive):
                    self._died(m)
        elif kind == "exit" and isinstance(name, str) and name in mine:
            if mine[name].instance_id == event.get("instance_id"):
                self._died(mine[name])
        elif kind == "record" and isinstance(name, str) and self._links[host].up and event.get("alive") \
                and name not in self.members and name not in self.registry.rows and name not in self._launching:
            self._emit(Notice(name, "appeared", "unregistered", f"a shellper of this owner on host {host}, not "
                                  "launched by this Tower: the next start terminates it unless it is registered"))

    # ----------------------------------------------------------------------------------- reconcile and adopt

    async def _reconcile_host(self, host: str) -> None:
        """Reconcile and apply ``host``'s rows there; adopt, respawn, finish journalled stops. A host that does
        not answer is left alone and asked again once its watch syncs again."""
        stops = self.journal.stops()
        rows = [{k: v for k, v in row.items() if k not in ("launch", "agent")} for name, row in
                self.registry.rows.items() if self._row_host(name) == host and name not in stops]
        stopping = [n for n in stops if self._row_host(n) == host]
        # A session being launched now may be there before its row: registered (any instance) so that it is
        # not terminated as unregistered, and whatever is decided for it is not acted on.
        launching = sorted(self._launching - {row["name"] for row in rows})
        rows += [{"name": name, "instance_id": None, HOST_COLUMN: host} for name in launching]
        outcome = (await asyncio.to_thread(reconcile_hosts, {"sessions": rows}, hosts=[host], apply_=True,
                                           owner=self.owner, grace=self.policy.grace,
                                           husk_max_age=self.policy.husk_max_age))[0]
        if outcome.error is not None:
            self._host_pending.add(host)
            self._host_lost(host, outcome.error)
            if self._links[host].up:  # the watch runs but reconcile failed: ask again after a while
                self._later(self._retry_reconcile(host))
            return
        respawn: list[str] = []
        adopt: list[SessionRecord] = []
        link = self._links[host]
        for d in outcome.decisions:
            name, action, reason = str(d.get("name")), d.get("action"), str(d.get("reason"))
            if name in launching:
                continue
            self._emit(Notice(name, str(action), reason, str(d.get("error") or d.get("outcome") or d.get("detail"))))
            if d.get("ok") is False or name in stopping:
                continue
            if action == "adopt" and name not in self.members:
                record = link.records.get(name)
                if record is None or record.instance_id != d.get("instance_id"):
                    self._emit(Notice(name, "failed", "adopt", f"host {host}: its watch has no record of it"))
                else:
                    adopt.append(record)
            elif action == "respawn":
                respawn.append(name)
            elif action == "terminate" and reason == "husk_expired":
                self.registry.remove(name)
                self.journal.forget(name)
        for name in stopping:
            if not any(d.get("name") == name and d.get("ok") is False for d in outcome.decisions):
                self.registry.remove(name)
                self.journal.forget(name)
                self._emit(Notice(name, "stopped", "stop_requested", f"the stop requested before the Tower's "
                                  f"restart is done (host {host})"))
        await self._save_registry()
        await self._bounded([self._adopt_remote(host, record) for record in adopt])  # each a bridge to start
        if host in self._host_pending and link.up:  # an adopt failed while the watch runs: ask again later
            self._later(self._retry_reconcile(host))
        for name in respawn:
            await self._relaunch(name, "respawn")

    async def _adopt_remote(self, host: str, record: SessionRecord) -> None:
        try:
            await self._attach(record, adopted=True, host=host)
        except SessionGone as exc:  # the host went meanwhile: adopted once its watch syncs again
            self._host_pending.add(host)
            self._emit(Notice(record.name, "failed", "adopt", f"{exc}; tried again once host {host} is back"))
        except (ShellperError, OSError) as exc:
            self._emit(Notice(record.name, "failed", "adopt", str(exc)))

    async def _retry_reconcile(self, host: str) -> None:
        await asyncio.sleep(HOST_BACKOFF.max_delay)  # the backoff before asking the host again
        if host in self._host_pending and self._links.get(host) is not None and self._links[host].up:
            self._host_pending.discard(host)
            await self._reconcile_host(host)

    # ----------------------------------------------------------------------------------- launch, reap

    async def _launch_remote(self, spec: SessionSpec, argv: list[str]) -> tuple[SessionConfig, LaunchInfo,
                                                                                SessionRecord]:
        """Start ``spec`` (its command ``argv``) on its host: ``tower-client launch`` there, the config on stdin
        (argv and env never show in a command line), with the spec's ``cwd`` and ``env`` or, when None, that
        login's own (the config's are placeholders). SshError, or ShellperError with the remote's words."""
        assert spec.host is not None
        host = spec.host
        config = SessionConfig(name=spec.name, argv=argv, dir="/", cwd=spec.cwd or "/", env=dict(spec.env or {}),
                               owner=self.owner, **spec.options.config_fields())
        self._link(host)
        data = json.loads(config.to_json())
        data.pop("dir", None)
        data.update(cwd=spec.cwd, env=None if spec.env is None else dict(spec.env))
        done = await asyncio.to_thread(self._run_tower, host, ["--owner", self.owner, "launch"],
                                       json.dumps(data).encode())
        try:
            answer = json.loads(done.stdout)
            info = LaunchInfo(**answer["info"])
            record = SessionRecord.from_json(json.dumps(answer["record"]).encode())
        except (ValueError, KeyError, TypeError, RecordError):
            why = last_line_of(done.stderr) or f"exit {done.returncode}"
            raise ShellperError(f"host {host}: launch of {config.name!r} failed: {why}") from None
        return config, info, record

    @staticmethod
    def _run_tower(host: str, args: list[str], data: bytes | None = None) -> Any:
        check_version(host, REMOTE_TIMEOUT)
        return run_remote(host, remote_tower(args), input=data, timeout=REMOTE_TIMEOUT)

    async def _clean_remote(self, host: str, name: str) -> None:
        """A dead shellper's leftovers on ``host`` (``tower-client reap`` there: its survivors, its files)."""
        try:
            done = await asyncio.to_thread(self._run_tower, host, ["--owner", self.owner, "reap", name, "--grace",
                                                                   str(self.policy.grace), "--json"])
        except SshError as exc:
            self._emit(Notice(name, "failed", "reap", str(exc)))
            return
        ok = done.returncode == 0
        self._emit(Notice(name, "reaped" if ok else "failed", "dead", f"host {host}: "
                          f"{last_line_of(done.stdout if ok else done.stderr) or done.returncode}"))

    async def _reap_remote(self, m: Member) -> None:
        """A remote shellper that did not go within grace + STOP_MARGIN: reaped there, identity-checked."""
        assert m.host is not None
        await self._clean_remote(m.host, m.name)


def last_line_of(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""
