"""Issue 27: no client trusts whatever listens at a path. Every command and library client, pointed at a
socket another user planted (tests/support/planted.py: a directory of theirs, a world-writable one of ours, a
symlink to theirs, or a directory of ours with their server in it), refuses it with UntrustedSocket (or the
CLI's one line naming the path, the owner found and why) before sending anything: the planted server, run
as ``nobody``, must see no byte, no frame and no terminal descriptor.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import pexpect
import pytest
from support.containment import MODES
from support.frames import read_until
from support.paths import SHELLPER_CLI
from support.planted import DIR_KINDS, KINDS, MARKER, NOBODY, Planted, plant
from support.sessions import Sessions
from support.sshd import SshWorld
from support.waiting import poll_until

from shellper.client.blocking import Client, ClientError
from shellper.client.bridge import bridge
from shellper.client.remote import RemoteClient
from shellper.client.sessions import list_sessions
from shellper.client.stop import send_stop
from shellper.core.trust import UntrustedSocket
from shellper.host.cleanup import StopNotDelivered
from shellper.host.identity import ProcessIdentity
from shellper.host.paths import PathError
from shellper.host.record import read_record
from shellper.protocol import wire
from tower_client.apply import apply
from tower_client.client import AsyncClient, AsyncResumingClient, ResumingClient
from tower_client.discover import discover
from tower_client.reconcile import Registry, reconcile
from tower_client.remote_clients import AsyncRemoteClient

TIMEOUT = 60


@pytest.fixture(params=KINDS)
def planted(request: pytest.FixtureRequest) -> Iterator[Planted]:
    with plant(request.param) as p:
        yield p


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SHELLPER_DIR", "SHELLPER_SESSION")}
    return env


def nothing_delivered(p: Planted) -> None:
    """The planted server got no byte, no frame and no descriptor (a bare connect closed unused, which is how
    the SO_PEERCRED check looks from its side, is allowed)."""
    got = p.received()
    assert p.delivered() == [], got
    assert not any(r.marker for r in got), got


REASONS = {"foreign": f"is owned by uid {NOBODY}, not by us (uid 0)", "open": "is group/world accessible (mode 1777)",
           "symlink": "is a symlink", "peer": f"is served by a process of uid {NOBODY}, not by us (uid 0)"}
"""What the refusal of each kind of planting says it found."""


def refused_line(p: Planted, text: str) -> None:
    """The CLI's message: one line naming the socket, the owner or server found and why."""
    assert "not trusted" in text, text
    assert p.socket in text, text
    assert REASONS[p.kind] in text, text


def refused(p: Planted, exc: UntrustedSocket) -> None:
    assert exc.path == p.socket
    assert exc.owner == (0 if p.kind in ("open", "symlink") else NOBODY)  # lstat's owner of what is at the path
    refused_line(p, str(exc))


def cli(p: Planted, *args: str, stdin: bytes = b"", module: bool = False) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "shellper"] if module else SHELLPER_CLI
    return subprocess.run([*command, "--dir", str(p.dir), *args], input=stdin, capture_output=True,
                          timeout=TIMEOUT, env=_env())


# --------------------------------------------------------------------------------------------- commands

COMMANDS = {
    "send": ["send", "work", MARKER.decode(), "--enter"],
    "tail": ["tail", "work", "-n", "5"],
    "screen": ["screen", "work"],
    "status": ["status", "work"],
    "signal": ["signal", "work", "INT"],
    "resize": ["resize", "work", "100", "30"],
    "restart": ["restart", "work"],
    "stop": ["stop", "work", "--grace", "0"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_refuses_a_planted_socket(planted: Planted, command: str) -> None:
    done = cli(planted, *COMMANDS[command])
    err = done.stderr.decode(errors="replace")
    nothing_delivered(planted)
    assert done.returncode == 1, (done.stdout, err)
    assert len(err.strip().splitlines()) == 1, err
    refused_line(planted, err)


@pytest.mark.parametrize("module", [False, True], ids=["quick", "cli"])
def test_bridge_refuses_a_planted_socket_and_forwards_nothing(planted: Planted, module: bool) -> None:
    """What a remote Tower sends through the bridge (a SPAWN with its environment) never reaches it."""
    spawn = wire.encode(wire.Spawn(argv=["sh"], env={"TOKEN": MARKER.decode()}))
    done = cli(planted, "bridge", "work", stdin=spawn, module=module)
    err = done.stderr.decode(errors="replace")
    nothing_delivered(planted)
    assert done.returncode == 1 and done.stdout == b"", (done.stdout, err)
    refused_line(planted, err)


def _attach(p: Planted, *args: str, module: bool = False) -> tuple[int, str]:
    """Attach from a real terminal (pexpect's PTY): the terminal it would hand over is there to be stolen."""
    command = [sys.executable, "-m", "shellper"] if module else SHELLPER_CLI
    term = pexpect.spawn(command[0], [*command[1:], "--dir", str(p.dir), *args], env=_env(), timeout=TIMEOUT)
    try:
        term.expect(pexpect.EOF)
        out = term.before.decode(errors="replace")
    finally:
        term.close()
    return term.exitstatus, out


@pytest.mark.parametrize(("how", "args"), [
    ("quick", ["attach", "work"]),  # the console script's quick path (shellper.cli.attach.quick_main)
    ("cli", ["attach", "work"]),  # the full CLI (python -m shellper)
    ("relay", ["attach", "work", "--relay"]),
    ("create", ["attach", "-c", "work", "--", "sh"]),  # -c: the planted lock says it runs
], ids=lambda v: v if isinstance(v, str) else "")
def test_attach_never_hands_its_terminal_to_a_planted_socket(planted: Planted, how: str, args: list[str]) -> None:
    status, out = _attach(planted, *args, module=how in ("cli", "create"))
    nothing_delivered(planted)
    assert status == 1, out
    refused_line(planted, out)


# --------------------------------------------------------------------------------------------- library clients


def test_the_blocking_client_refuses_before_passing_a_terminal(planted: Planted) -> None:
    primary, secondary = pty.openpty()
    try:
        client = Client(planted.socket, "terminal")
        with pytest.raises(UntrustedSocket) as caught:
            client.connect(replay_bytes=0, terminal_fd=secondary)
        assert client.sock is None
    finally:
        os.close(primary)
        os.close(secondary)
    refused(planted, caught.value)
    nothing_delivered(planted)


def test_the_asyncio_client_refuses(planted: Planted) -> None:
    async def go() -> UntrustedSocket:
        client = AsyncClient(planted.socket, "tower")
        try:
            with pytest.raises(UntrustedSocket) as caught:
                await client.connect(replay_bytes=0)
            return caught.value
        finally:
            await client.close()

    refused(planted, asyncio.run(go()))
    nothing_delivered(planted)


def test_the_resuming_client_refuses_and_does_not_retry(planted: Planted) -> None:
    client = ResumingClient(planted.socket, "tower")
    try:
        with pytest.raises(UntrustedSocket) as caught:
            client.connect(replay_bytes=0)
    finally:
        client.close()
    refused(planted, caught.value)
    nothing_delivered(planted)


def test_the_asyncio_resuming_client_refuses(planted: Planted) -> None:
    async def go() -> UntrustedSocket:
        client = AsyncResumingClient(planted.socket, "tower")
        try:
            with pytest.raises(UntrustedSocket) as caught:
                await client.connect(replay_bytes=0)
            return caught.value
        finally:
            await client.close()

    refused(planted, asyncio.run(go()))
    nothing_delivered(planted)


@pytest.mark.parametrize("how", ["blocking", "asyncio"])
def test_a_resuming_client_does_not_reconnect_into_a_planted_directory(sessions: Sessions, how: str) -> None:
    """The runtime directory goes (a tmp cleaner) and another user makes one of theirs at its path while a
    Tower's resuming client is connected: the reconnection is refused (UntrustedSocket, not retried), not
    made to their socket."""
    sessions.start("work", ["sh", "-c", "while :; do echo tick; sleep 0.2; done"])
    path = str(sessions.dir / "work.sock")
    moved = sessions.dir.with_name(sessions.dir.name + "-away")
    with plant("foreign") as p:
        theirs = p.dir
        try:
            if how == "blocking":
                client = ResumingClient(path, "tower")
                try:
                    client.connect(replay_bytes=0)
                    os.rename(sessions.dir, moved)
                    os.rename(theirs, sessions.dir)
                    client.abort()
                    with pytest.raises(UntrustedSocket) as caught:
                        while True:
                            client.recv(timeout=10)
                finally:
                    client.close()
                error = caught.value
            else:
                async def go() -> UntrustedSocket:
                    aclient = AsyncResumingClient(path, "tower")
                    try:
                        await aclient.connect(replay_bytes=0)
                        os.rename(sessions.dir, moved)
                        os.rename(theirs, sessions.dir)
                        aclient.abort()
                        with pytest.raises(UntrustedSocket) as caught:
                            while True:
                                await aclient.recv(timeout=10)
                        return caught.value
                    finally:
                        await aclient.close()
                error = asyncio.run(go())
        finally:
            if moved.exists():
                os.rename(sessions.dir, theirs)
                os.rename(moved, sessions.dir)
        assert error.path == path and error.owner == NOBODY and REASONS["foreign"] in str(error)
        nothing_delivered(p)
    sessions.stop("work", grace=0.5)


def test_send_stop_refuses(planted: Planted) -> None:
    """What ``shellper stop`` and tower_client's terminate send STOP with."""
    with pytest.raises(StopNotDelivered) as caught:
        send_stop(planted.socket, 0.0, lambda client, welcome: None, client_name="test")
    assert isinstance(caught.value.__cause__, UntrustedSocket)
    refused(planted, caught.value.__cause__)
    nothing_delivered(planted)


def test_the_bridge_function_refuses(planted: Planted) -> None:
    read_end, write_end = os.pipe()
    out_r, out_w = os.pipe()
    try:
        os.write(write_end, wire.encode(wire.Spawn(argv=["sh"], env={"TOKEN": MARKER.decode()})))
        with pytest.raises(UntrustedSocket) as caught:
            bridge(planted.socket, read_end, out_w)
    finally:
        for fd in (read_end, write_end, out_r, out_w):
            os.close(fd)
    refused(planted, caught.value)
    nothing_delivered(planted)


@pytest.mark.parametrize("kind", ["peer"])
def test_listing_a_directory_with_a_foreign_server_asks_it_nothing(kind: str) -> None:
    """``ls`` (list_sessions) probes each socket: a server of another user in our directory is not asked."""
    with plant(kind) as p:
        found = list_sessions(str(p.dir))
        assert [s.name for s in found] == ["work"]
        nothing_delivered(p)


@pytest.mark.parametrize("kind", DIR_KINDS)
def test_ls_refuses_a_planted_directory(kind: str) -> None:
    with plant(kind) as p:
        done = cli(p, "ls")
        assert done.returncode == 1, done
        nothing_delivered(p)


@pytest.mark.parametrize("kind", DIR_KINDS)
@pytest.mark.parametrize("command", ["stop", "status"])
def test_stop_and_status_read_and_remove_nothing_in_a_planted_directory(kind: str, command: str) -> None:
    """With no lock held there, ``stop`` would take the session for a dead one and clean its files up, and
    ``status`` would show its record: in a directory of another user, neither looks before refusing."""
    with plant(kind, locked=False, record=b'{"name": "work", "command": ["PLANTED-RECORD"]}') as p:
        files = sorted(os.listdir(p.dir))
        done = cli(p, command, "work")
        err = done.stderr.decode(errors="replace")
        assert sorted(os.listdir(p.dir)) == files
        assert done.returncode == 1 and b"PLANTED-RECORD" not in done.stdout + done.stderr, (done.stdout, err)
        refused_line(p, err)
        nothing_delivered(p)


# --------------------------------------------------------------------------------------------- chaos (make soak)

ACTIONS = ("send", "tail", "screen", "status", "signal", "resize", "restart", "stop", "bridge", "ls", "attach",
           "attach-c", "client", "async", "resuming", "send_stop", "discover")


def _act(p: Planted, action: str) -> None:
    """One thing a person or a Tower does with the planted directory; whatever it says, it must send nothing."""
    if action in COMMANDS:
        cli(p, *COMMANDS[action])
    elif action == "bridge":
        cli(p, "bridge", "work", stdin=wire.encode(wire.Spawn(argv=["sh"], env={"TOKEN": MARKER.decode()})))
    elif action == "ls":
        cli(p, "ls")
    elif action in ("attach", "attach-c"):
        _attach(p, *(["attach", "work"] if action == "attach" else ["attach", "-c", "work", "--", "sh"]),
                module=action == "attach-c")
    elif action == "client":
        primary, secondary = pty.openpty()
        try:
            with contextlib.suppress(ClientError), Client(p.socket, "terminal") as client:
                client.connect(replay_bytes=0, terminal_fd=secondary)
        finally:
            os.close(primary)
            os.close(secondary)
    elif action == "async":
        async def go() -> None:
            client = AsyncClient(p.socket, "tower")
            try:
                with contextlib.suppress(ClientError):
                    await client.connect(replay_bytes=0)
            finally:
                await client.close()
        asyncio.run(go())
    elif action == "resuming":
        client = ResumingClient(p.socket, "tower")
        with contextlib.suppress(ClientError):
            client.connect(replay_bytes=0)
        client.close()
    elif action == "send_stop":
        with contextlib.suppress(StopNotDelivered):
            send_stop(p.socket, 0.0, lambda client, welcome: None, client_name="chaos").close()
    else:
        assert action == "discover"
        with contextlib.suppress(PathError):
            decisions = reconcile(Registry(()), discover(p.dir), now=time.time())
            apply(decisions, grace=0.5)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_planted_directories_under_chaos(sessions: Sessions, mode: str) -> None:
    """``make soak``: a real session runs (in each containment mode) while, for PLANTED_ROUNDS rounds, a random
    command or client is pointed at a random planting, with a random lock and sometimes a copy of the real
    session's record (its shellper's identity, its cgroup) put there by the other user. Nothing reaches any
    planted server, and the real session, its child and its cgroup are never touched."""
    rounds = int(os.environ.get("PLANTED_ROUNDS", "60"))
    rng = random.Random(int(os.environ.get("PLANTED_SEED", "27")))
    info = sessions.start("work", ["sh", "-c", "while :; do echo tick; sleep 0.2; done"], containment=mode)
    record = read_record(sessions.dir / "work.json")
    shellper = ProcessIdentity(record.boot_id, record.shellper_pid, record.shellper_start_time)
    child = ProcessIdentity.of(poll_until(lambda: read_record(sessions.dir / "work.json").child_pid, what="the child"))
    assert child is not None
    forged = (sessions.dir / "work.json").read_bytes()
    counts: Counter[str] = Counter()
    actions = [a for _ in range(rounds // len(ACTIONS) + 1) for a in rng.sample(ACTIONS, len(ACTIONS))][:rounds]
    for action in actions:  # every action in each pass over them, in a random order
        kind = rng.choice(KINDS)
        copy = kind != "peer" and rng.random() < 0.5  # only root could write into our directory
        with plant(kind, locked=rng.random() < 0.7, record=forged if copy else None) as p:
            _act(p, action)
            assert p.delivered() == [], (kind, action, p.received())
        assert shellper.is_alive() and child.is_alive(), (kind, action)
        counts[action] += 1
    with sessions.connect("work", "viewer", replay_bytes=0) as viewer:  # still serving, still ticking
        read_until(viewer, b"tick")
    assert read_record(sessions.dir / "work.json").instance_id == info.instance_id
    sessions.stop("work", grace=0.5)
    print(f"\nplanted chaos ({mode}): {rounds} rounds, {dict(sorted(counts.items()))}")


# --------------------------------------------------------------------------------------------- remote clients


@pytest.mark.parametrize("kind", ["foreign", "peer"])
def test_remote_clients_get_the_bridges_refusal_and_do_not_retry(remote: SshWorld, kind: str) -> None:
    """Through ssh, the bridge on the far host refuses; the client here raises UntrustedSocket (not SessionGone,
    which a resuming client would retry), and the planted server there got nothing."""
    with plant(kind) as p:
        client = RemoteClient("alpha", "work", directory=str(p.dir), timeout=20.0)
        try:
            with pytest.raises(UntrustedSocket) as caught:
                client.connect(replay_bytes=0)
        finally:
            client.close()
        text = str(caught.value)
        assert caught.value.path == "alpha:work" and "not trusted: on the remote host" in text, text
        assert REASONS[kind] in text, text

        async def go() -> UntrustedSocket:
            aclient = AsyncRemoteClient("alpha", "work", directory=str(p.dir))
            try:
                with pytest.raises(UntrustedSocket) as caught:
                    await aclient.connect(replay_bytes=0)
                return caught.value
            finally:
                await aclient.close()

        assert "on the remote host" in str(asyncio.run(go()))
        nothing_delivered(p)
