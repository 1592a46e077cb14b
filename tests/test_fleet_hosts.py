"""The Fleet across hosts, against the real loopback sshd fixtures: sessions on alpha, on beta and here, one
Tower killed -9 mid-flood and started again, then beta's sshd stopped (its shared connection with it) and
started again while its sessions keep writing. Every byte each session wrote reaches the Tower's store
exactly once; nothing on the unreachable host is terminated or respawned."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fleet import SLEEPER, make_fleet, wait_for
from support.hosts_tower import PHASE_LINES, SESSIONS
from support.paths import ROOT
from support.processes import kill_verified
from support.remote import PY
from support.sessions import Sessions
from support.sshd import DOWN, SshWorld, _listening, find_sshd, ssh_world
from support.waiting import poll_until

from shellper.host import ssh
from shellper.host.identity import ProcessIdentity
from shellper.host.record import read_record
from shellper.host.ssh import SshError
from tower_client import FleetItem, Notice, OutputChunk, SessionSpec
from tower_client.fleethosts import HostLink, WatchUnsupported
from tower_client.watch import WATCH_VERSION

TOWER = Path(__file__).parent / "support" / "hosts_tower.py"

EXPECTED = b"".join(b"%07d\r\n" % i for i in range(2 * PHASE_LINES)) + b"DONE\r\n"


class Tower:
    """tests/support/hosts_tower.py as a process; its JSON lines collected by a thread."""

    def __init__(self, root: Path, runtime: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([PY, str(TOWER), str(root), str(runtime)], stdout=subprocess.PIPE, env=env)
        self.lines: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def said(self, **fields: Any) -> dict[str, Any] | None:
        return next((x for x in self.lines if all(x.get(k) == v for k, v in fields.items())), None)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)  # our own child, by its Popen
        self.proc.wait(10)
        self.reader.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def _sizes(root: Path) -> dict[str, int]:
    sinks = root / "sink"
    return {name: (sinks / name).stat().st_size if (sinks / name).exists() else 0 for name in SESSIONS}


def _stop_sshd(world: SshWorld, alias: str) -> socket.socket:
    """Stop ``alias``'s sshd and hold its port (bound, not listening: connections are refused, as by a host
    that is down) so that no other test run's sshd takes it before it is started again."""
    host = world.hosts[alias]
    assert host.proc is not None
    host.proc.terminate()
    host.proc.wait(10)
    hold = socket.socket()
    hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        hold.bind(("127.0.0.1", host.port))
    except OSError:
        hold.close()
        raise
    return hold


def _restart_sshd(world: SshWorld, alias: str, hold: socket.socket) -> None:
    host = world.hosts[alias]
    sshd = find_sshd()
    assert sshd is not None
    hold.close()
    proc = host.proc = subprocess.Popen([sshd, "-f", str(world.base / f"sshd-{alias}.conf"), "-D", "-e"],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
    poll_until(lambda: proc.poll() is not None or _listening(proc, host.port), 10, what=f"sshd {alias} again")
    assert proc.poll() is None, f"sshd {alias} could not listen on its port again"


@pytest.fixture
def hosts(runtime_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshWorld]:
    """A world of its own (this test stops and starts an sshd: what it starts ends with it); afterwards every
    session on either host and here is stopped."""
    with ssh_world() as world:
        for key, value in world.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(ssh, "_checked", {})
        try:
            yield world
        finally:
            for directory in [runtime_dir, *(h.runtime for h in world.hosts.values())]:
                names = [sock.stem for sock in directory.glob("*.sock")]
                if names:
                    subprocess.run([PY, "-m", "shellper", "--dir", str(directory), "stop", "--grace", "0.2", *names],
                                   capture_output=True, timeout=60)


@pytest.mark.ssh  # a world of its own (the hosts fixture), not the shared one conftest marks
def test_a_fleet_on_two_hosts_survives_a_tower_kill_and_a_lost_host(hosts: SshWorld, tmp_path: Path,
                                                                    runtime_dir: Path) -> None:
    remote = hosts
    root = tmp_path / "tower"
    root.mkdir()
    first = Tower(root, runtime_dir)
    try:
        poll_until(lambda: first.said(ready=sorted(SESSIONS)) or first.proc.poll() is not None, 30,
                   what="the first Tower's launches")
        assert first.said(ready=sorted(SESSIONS)), first.lines
        poll_until(lambda: all(_sizes(root).values()), 20, what="output of every session in the store")
    finally:
        first.kill()
    before = _sizes(root)
    assert sum(before.values()) < len(SESSIONS) * len(EXPECTED)  # killed mid-flood
    registry = json.loads((root / "registry.json").read_text())
    placed = {row["name"]: row.get("host") for row in registry["sessions"]}
    assert placed == SESSIONS
    instances = {row["name"]: row["instance_id"] for row in registry["sessions"]}

    second = Tower(root, runtime_dir)
    hold: socket.socket | None = None
    try:
        poll_until(lambda: any("ready" in x for x in second.lines) or second.proc.poll() is not None, 30,
                   what="the second Tower's start")
        adopted = poll_until(lambda: [n for n in SESSIONS if second.said(notice="adopt", session=n)]
                             if all(second.said(notice="adopt", session=n) for n in SESSIONS) else None,
                             30, what=f"every session adopted, here and on both hosts: {second.lines}")
        assert sorted(adopted) == sorted(SESSIONS)
        # beta goes away: its sshd and the shared connection the Tower's bridges and watch ride on
        hold = _stop_sshd(remote, "beta")
        ssh.stop_master("beta")
        poll_until(lambda: second.said(notice="host_unreachable", reason="beta"), 30, what="beta unreachable")
        (root / "phase2").touch()  # every flood's second half, beta's while it cannot be reached
        poll_until(lambda: all(size == len(EXPECTED) for name, size in _sizes(root).items()
                               if SESSIONS[name] != "beta"), 30, what="the reachable sessions' output")
        _restart_sshd(remote, "beta", hold)
        poll_until(lambda: second.said(notice="host_reachable", reason="beta"), 30, what="beta reachable again")
        poll_until(lambda: all(size == len(EXPECTED) for size in _sizes(root).values()), 30,
                   what=f"every session's whole output (now {_sizes(root)}; {second.lines})")
    finally:
        second.kill()
        if hold is not None:
            hold.close()
    for name in SESSIONS:  # exactly what each wrote: nothing lost, nothing twice, in order
        assert (root / "sink" / name).read_bytes() == EXPECTED, name
    assert not [x for x in second.lines if "missed" in x]
    assert not [x for x in second.lines if x.get("notice") in ("terminate", "respawn", "relaunched", "died")], \
        second.lines
    after = json.loads((root / "registry.json").read_text())
    assert {row["name"]: row["instance_id"] for row in after["sessions"]} == instances


def _watch(directory: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([PY, "-m", "tower_client.cli", "--dir", str(directory), "watch", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _line(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the watch writes each line at once; a dead watch gives b"" and fails below
    assert line, "the watch ended"
    return dict(json.loads(line))


def test_the_watch_says_records_and_exits_and_ends_with_its_input(sessions: Sessions) -> None:
    """What a pidfd and inotify say locally, as the watch request says it over ssh (protocol/WATCH.md)."""
    sessions.start("w1", SLEEPER)
    watch = _watch(sessions.dir)
    try:
        header = _line(watch)
        assert header["watch"] == WATCH_VERSION and header["dir"] == str(sessions.dir)
        first = _line(watch)
        assert (first["event"], first["name"], first["alive"]) == ("record", "w1", True)
        assert _line(watch) == {"event": "synced"}
        info = sessions.start("w2", SLEEPER)  # a session that appears: inotify's news
        new = _line(watch)
        assert (new["event"], new["name"], new["alive"], new["record"]["instance_id"]) == \
            ("record", "w2", True, info.instance_id)
        sessions.stop("w2")  # its shellper exits: the pidfd's news
        events = [_line(watch) for _ in range(2)]
        assert {"event": "exit", "name": "w2", "instance_id": info.instance_id, "shellper_pid": info.pid} in events
        assert watch.stdin is not None
        watch.stdin.close()  # the ssh channel's end: the watch ends
        assert watch.wait(10) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
        watch.wait()
        assert watch.stdout is not None
        watch.stdout.close()
    sessions.stop("w1")


def test_a_watch_of_another_version_is_refused_with_one_line(runtime_dir: Path) -> None:
    watch = _watch(runtime_dir, "--watch-version", str(WATCH_VERSION + 1))
    try:
        refusal = _line(watch)
        assert watch.wait(10) == 2
    finally:
        assert watch.stdin is not None and watch.stdout is not None
        watch.stdin.close()
        watch.stdout.close()
    assert refusal["error"] == "unsupported_version" and refusal["watch"] == WATCH_VERSION
    with tempfile.TemporaryFile() as err:  # what the Fleet makes of it, and of an older tower-client's usage error
        link = HostLink("gpu1", "me", lambda host, event: None, lambda host, why: None)
        with pytest.raises(WatchUnsupported, match="this host serves watch version"):
            link._check_header(json.dumps(refusal).encode(), err)
        err.write(b"tower-client: error: argument command: invalid choice: 'watch'\n")
        with pytest.raises(WatchUnsupported, match=r"invalid choice: 'watch'.*install the same shellper version"):
            link._check_header(b"", err, 2)
        err.write(b"ssh: connect to host 127.0.0.1 port 22: Connection refused\n")
        with pytest.raises(SshError) as lost:  # ssh's own failure is worth trying again, not a refusal
            link._check_header(b"", err, ssh.SSH_UNREACHABLE)
        assert not isinstance(lost.value, WatchUnsupported)


def test_a_host_session_dies_is_respawned_there_and_stops(remote: SshWorld, tmp_path: Path,
                                                          runtime_dir: Path) -> None:
    """A shellper on alpha killed -9: its host's watch says so (no pidfd here), its leftovers are reaped
    there and it is launched there again; then fleet.stop ends it there and drops its row."""
    alpha = remote.hosts["alpha"].runtime

    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            info = await fleet.launch(SessionSpec("r1", SLEEPER, host="alpha"))
            assert fleet.registry.rows["r1"]["host"] == "alpha"
            await wait_for(fleet, lambda i: isinstance(i, OutputChunk) and b"up" in i.data)
            record = read_record(alpha / "r1.json")
            assert record.instance_id == info.instance_id
            await asyncio.to_thread(kill_verified, ProcessIdentity(record.boot_id, record.shellper_pid,
                                                                   record.shellper_start_time))
            await wait_for(fleet, lambda i: isinstance(i, Notice) and i.what == "died")
            await wait_for(fleet, lambda i: isinstance(i, Notice) and i.what == "relaunched", 30)
            assert fleet.registry.rows["r1"]["instance_id"] not in (None, info.instance_id)
            await wait_for(fleet, lambda i: isinstance(i, OutputChunk) and b"up" in i.data)
            await fleet.stop("r1")
            assert "r1" not in fleet.registry.rows
            assert not (alpha / "r1.sock").exists()

    asyncio.run(main())


def test_a_host_that_cannot_be_reached_at_start_is_left_alone(remote: SshWorld, tmp_path: Path,
                                                              runtime_dir: Path) -> None:
    """A row on a host whose port refuses connections: the Fleet says so, keeps the row and its journal
    entry, decides nothing about it (no terminate, no respawn) and keeps trying; local rows start meanwhile."""
    (tmp_path / "registry.json").write_text(json.dumps({"sessions": [
        {"name": "far", "instance_id": "0123456789abcdef0123456789abcdef", "host": DOWN,
         "launch": {"argv": SLEEPER, "cwd": None, "env": None}}]}))

    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            seen: list[FleetItem] = []
            down = await wait_for(fleet, lambda i: isinstance(i, Notice) and i.what == "host_unreachable", seen=seen)
            assert isinstance(down, Notice) and down.reason == DOWN
            await fleet.launch(SessionSpec("near", SLEEPER))  # this machine's rows do not wait for a host
            await wait_for(fleet, lambda i: isinstance(i, OutputChunk) and i.session == "near", seen=seen)
            await fleet.stop("near")
            assert "far" in fleet.registry.rows and "far" not in fleet.sessions
            assert not [i for i in seen if i.session == "far"], seen  # nothing decided, launched or declared dead

    asyncio.run(main())
    assert [row["name"] for row in json.loads((tmp_path / "registry.json").read_text())["sessions"]] == ["far"]


def test_a_stop_journalled_before_the_tower_died_is_finished_on_its_host(remote: SshWorld, tmp_path: Path,
                                                                       runtime_dir: Path) -> None:
    """The intent to stop a session on alpha is on disk, the Tower goes before sending STOP: the next start
    ends it there (it is no longer registered for that host's reconcile), drops its row, never respawns it."""
    alpha = remote.hosts["alpha"].runtime

    async def main() -> None:
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            info = await fleet.launch(SessionSpec("r2", SLEEPER, host="alpha"))
            fleet.journal.intend_stop("r2", info.instance_id, 1.0)  # what stop() commits before its STOP
            await fleet.sync()
        assert (alpha / "r2.sock").exists()  # the Fleet closed: the session runs on
        async with make_fleet(tmp_path, runtime_dir) as fleet:
            seen: list[FleetItem] = []
            await wait_for(fleet, lambda i: isinstance(i, Notice) and i.what == "stopped", 30, seen=seen)
            assert [i.what for i in seen if isinstance(i, Notice)] == ["terminate", "stopped"], seen
            assert "r2" not in fleet.registry.rows and fleet.journal.get("r2") is None
        poll_until(lambda: not (alpha / "r2.sock").exists(), 10, what="r2 ended on alpha")

    asyncio.run(main())
