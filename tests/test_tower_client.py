"""tower_client.client against real shellpers (and a few fake servers for the error paths)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from support.processes import identity, is_dead, kill_verified
from support.sessions import Sessions
from support.waiting import poll_until

from shellper.core.exitrecord import ExitClass
from shellper.protocol import wire
from tower_client.client import (
    READ_SIZE,
    AsyncClient,
    AsyncResumingClient,
    Backoff,
    Client,
    ClientError,
    ConnectionRefused,
    InstanceMismatch,
    PeerMismatch,
    ProtocolViolation,
    Reconnected,
    RemoteError,
    ResumingClient,
    SessionGone,
    SessionNotFound,
    Timeout,
)

CAT = ["cat"]


def echoed(token: bytes) -> Callable[[bytes], bool]:
    """The tty's echo and cat's copy of ``token`` have both arrived."""
    return lambda b: b.count(token) >= 2


async def read_until(client: AsyncClient, predicate: Callable[[bytes], bool], got: bytearray,
                     timeout: float = 10.0) -> None:
    """Consume frames into ``got`` (DATA only) until ``predicate(got)``."""
    async with asyncio.timeout(timeout):
        while not predicate(bytes(got)):
            frame = await client.recv()
            if isinstance(frame, wire.Data):
                got += frame.data


# --------------------------------------------------------------------------------------------- basics


def test_async_client_handshake_requests_and_exit(sessions: Sessions) -> None:
    info = sessions.start("basic", CAT)

    async def main() -> None:
        async with AsyncClient(info.socket) as c:
            welcome = await c.connect(expect_instance_id=info.instance_id, expect_pid=info.pid)
            assert isinstance(welcome, wire.Welcome) and welcome.name == "basic" and welcome.role == "tower"
            assert c.peer_pid() == info.pid and not c.exited
            assert c.replay is not None and c.output.next_offset == c.replay.offset + len(c.replay.data)
            assert (await c.status()).state == "running"
            assert await c.ping() >= 0
            await c.resize(101, 33)
            status = await c.status()
            assert (status.info["cols"], status.info["rows"]) == (101, 33)
            got = bytearray(c.replay.data)
            await c.write(b"hello\n")
            await read_until(c, lambda b: b.count(b"hello") >= 2, got)  # tty echo + cat's copy
            assert c.output.next_offset == c.replay.offset + len(got)
            await c.signal("TERM")
            async with asyncio.timeout(10):
                async for frame in c:
                    if isinstance(frame, wire.Exit):
                        break
            assert c.exited and c.exit is not None and c.exit.signal == "SIGTERM"
            last = c.last_exit
            assert last is not None and (last.exit_class, last.signal) == (ExitClass.REQUESTED, "SIGTERM")
        async with AsyncClient(info.socket, "viewer") as late:  # the same exit, as WELCOME reports it
            await late.connect()
            assert late.exit is None and late.last_exit is not None and wire.Exit.of(late.last_exit) == c.exit

    asyncio.run(main())


def test_async_client_refuses_wrong_instance_or_pid(sessions: Sessions) -> None:
    info = sessions.start("who", CAT)

    async def main() -> None:
        with pytest.raises(InstanceMismatch) as e1:
            await AsyncClient(info.socket).connect(expect_instance_id="0" * 32)
        assert e1.value.path == info.socket and e1.value.found == info.instance_id
        with pytest.raises(PeerMismatch) as e2:
            await AsyncClient(info.socket, "viewer").connect(expect_pid=info.pid + 100000)
        assert e2.value.path == info.socket

    asyncio.run(main())


# --------------------------------------------------------------------------------------------- typed errors


def _fake_server(path: str, reply: bytes | None) -> Callable[[], Awaitable[asyncio.AbstractServer]]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # the HELLO has started arriving
        if reply:
            writer.write(reply)
            await writer.drain()
        writer.close()

    async def start() -> asyncio.AbstractServer:
        return await asyncio.start_unix_server(handle, path)

    return start


@pytest.mark.parametrize(("reply", "error"), [
    (None, SessionGone),
    (b"\x09\x00\x00\x00\x01\xc1", ProtocolViolation),  # WELCOME whose payload is not msgpack
    (wire.encode(wire.Pong(nonce=1)), ProtocolViolation),  # not WELCOME
    (wire.encode(wire.Error(code="unsupported_version", message="no", fatal=True)), RemoteError),
    (b"\x09\x00\x00\x01", SessionGone),  # closes inside a header
])
def test_async_client_typed_errors_from_servers(tmp_path: Path, reply: bytes | None,
                                                error: type[ClientError]) -> None:
    path = str(tmp_path / "x.sock")

    async def main() -> None:
        server = await _fake_server(path, reply)()
        async with server:
            with pytest.raises(error) as info:
                await AsyncClient(path, handshake_timeout=5).connect()
            assert info.value.path == path

    asyncio.run(main())


def test_async_client_typed_connect_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.sock")
    stale = str(tmp_path / "stale.sock")
    silent = str(tmp_path / "silent.sock")
    s1 = socket.socket(socket.AF_UNIX)
    s1.bind(stale)
    s1.close()  # the file stays; nobody listens
    s2 = socket.socket(socket.AF_UNIX)
    s2.bind(silent)
    s2.listen(1)  # connect succeeds (backlog), but nothing ever answers

    async def main() -> None:
        for path, kind in ((missing, SessionNotFound), (stale, ConnectionRefused), (silent, Timeout)):
            with pytest.raises(kind) as info:
                await AsyncClient(path, handshake_timeout=0.2).connect()
            assert info.value.path == path

    try:
        asyncio.run(main())
    finally:
        s2.close()


# --------------------------------------------------------------------------------------------- resume


def test_resume_from_offset_gives_exact_bytes(sessions: Sessions) -> None:
    """Connect, read some, disconnect, more output is produced, reconnect with resume_from: no loss."""
    info = sessions.start("resume", CAT)

    async def main() -> None:
        tower = AsyncClient(info.socket)
        await tower.connect()
        assert tower.replay is not None and tower.replay.offset == 0
        seen = bytearray(tower.replay.data)
        await tower.write(b"one\n")
        await read_until(tower, lambda b: b.count(b"one") >= 2, seen)
        resume_at = tower.output.next_offset
        assert resume_at == len(seen)
        await tower.close()

        term = AsyncClient(info.socket, "terminal")  # produces output while the tower is away
        await term.connect()
        assert term.replay is not None
        full = bytearray(term.replay.data)
        await term.write(b"two\n")
        await read_until(term, lambda b: b.count(b"two\r\n") >= 2, full)  # both lines whole: nothing follows
        status = await term.status()
        assert status.info["ring_end"] == len(full)  # everything produced so far is in `full`
        await term.close()

        again = AsyncClient(info.socket)
        await again.connect(resume_from=resume_at)
        assert again.replay is not None
        assert (again.replay.offset, again.replay.gap, again.replay.preamble) == (resume_at, 0, b"")
        assert bytes(seen) + again.replay.data == bytes(full)
        assert again.output.next_offset == len(full)
        await again.close()

    asyncio.run(main())


def test_async_client_stops_reading_past_max_buffered_and_loses_nothing(sessions: Sessions) -> None:
    """A caller that does not take frames: past ``max_buffered`` bytes queued the client stops reading its
    socket (the ring keeps what follows); once the caller takes them it reads on, and the stream is exact."""
    flood = 600_000
    info = sessions.start("buffered", ["sh", "-c", f"head -c {flood} /dev/zero | tr '\\0' x; echo end; sleep 300"])

    async def main() -> None:
        tower = AsyncClient(info.socket, max_buffered=64 * 1024)
        await tower.connect()
        got = bytearray(tower.replay.data if tower.replay else b"")
        assert tower._writer is not None
        transport = tower._writer.transport
        async with asyncio.timeout(10):
            while transport.is_reading():  # polled: what is queued meanwhile is the point
                await asyncio.sleep(0.01)
        assert 64 * 1024 <= tower._buffered < 64 * 1024 + READ_SIZE
        async with asyncio.timeout(10):
            while b"end\r\n" not in got:
                frame = await tower.recv()
                assert not isinstance(frame, wire.Gap)
                if isinstance(frame, wire.Data):
                    got += frame.data
        assert transport.is_reading()
        assert bytes(got) == b"x" * flood + b"end\r\n" and tower.output.next_offset == len(got)
        await tower.close()

    asyncio.run(main())


def test_async_resuming_client_loses_nothing_across_a_dropped_connection(sessions: Sessions) -> None:
    info = sessions.start("drop", CAT)

    async def main() -> None:
        term = AsyncClient(info.socket, "terminal")
        await term.connect()
        full = bytearray(term.replay.data if term.replay else b"")
        tower = AsyncResumingClient(info.socket)
        await tower.connect()
        stream = bytearray()
        markers: list[Reconnected] = []

        async def pull(until: bytes) -> None:
            async with asyncio.timeout(10):
                while until not in stream:
                    item = await tower.recv()
                    if isinstance(item, wire.Data):
                        stream.extend(item.data)
                    elif isinstance(item, Reconnected):
                        markers.append(item)
                    elif isinstance(item, wire.Gap):
                        raise AssertionError(f"unexpected gap {item}")

        for i in range(6):
            line = f"line-{i}\n".encode()
            await term.write(line)
            await read_until(term, echoed(line.strip()), full)
            if i == 2:
                tower.abort()  # the connection drops; lines 3.. are produced while it is gone
            if i < 2:
                await pull(line.strip() + b"\r\n" + line.strip())
        await pull(b"line-5\r\nline-5")
        await read_until(term, lambda b: b.endswith(b"line-5\r\n"), full)
        async with asyncio.timeout(10):
            while len(stream) < len(full):
                item = await tower.recv()
                if isinstance(item, wire.Data):
                    stream.extend(item.data)
        assert bytes(stream) == bytes(full)
        assert tower.reconnects == 1 and len(markers) == 1 and markers[0].gap == 0
        assert tower.output.next_offset == len(full) and tower.output.gaps == []
        await tower.close()
        await term.close()

    asyncio.run(main())


def test_sync_resuming_client_loses_nothing(sessions: Sessions) -> None:
    info = sessions.start("sync", CAT)
    term = Client(info.socket, "terminal")
    term.connect()
    assert term.replay is not None
    full = bytearray(term.replay.data)

    def term_until(token: bytes) -> None:
        while full.count(token) < 2:  # tty echo + cat's copy
            frame = term.recv(10)
            assert frame is not None, f"no output for {token!r}"
            if isinstance(frame, wire.Data):
                full.extend(frame.data)

    with ResumingClient(info.socket) as tower:
        tower.connect()
        stream = bytearray()
        term.write(b"alpha\n")
        term_until(b"alpha")
        tower.abort()
        term.write(b"beta\n")
        term_until(b"beta")
        kinds = []
        while len(stream) < len(full):
            item = tower.recv(10)
            assert item is not None
            kinds.append(type(item).__name__)
            if isinstance(item, wire.Data):
                stream.extend(item.data)
        assert bytes(stream) == bytes(full)
        assert "Reconnected" in kinds and tower.reconnects == 1 and tower.output.next_offset == len(full)
    term.close()


def test_an_async_resuming_client_closed_while_it_reconnects_stays_closed(sessions: Sessions) -> None:
    """close() from another task while recv() waits out the backoff: the attempt that follows must not
    revive the stream with a connection nobody will close."""
    info = sessions.start("closing", CAT)

    async def main() -> None:
        tower = AsyncResumingClient(info.socket, backoff=Backoff(initial=0.3))
        await tower.connect()

        async def read() -> None:
            while True:
                await tower.recv()

        reader = asyncio.create_task(read())
        tower.abort()
        async with asyncio.timeout(10):
            while tower.client is not None:  # the reader saw the loss: it backs off now
                await asyncio.sleep(0.01)
        await tower.close()
        with pytest.raises(SessionGone, match="closed by this client"):
            async with asyncio.timeout(10):
                await reader
        assert tower.client is None

    asyncio.run(main())


def test_resuming_client_does_not_resume_a_stopped_session(sessions: Sessions) -> None:
    info = sessions.start("stopme", CAT)
    shellper = identity(info.pid)

    async def main() -> None:
        tower = AsyncResumingClient(info.socket)
        await tower.connect()
        await tower.stop(grace=1.0)
        items = [item async for item in tower]  # ends: EXIT(state=stopping), then the close
        assert any(isinstance(i, wire.Exit) and i.state == "stopping" for i in items)
        assert tower.reconnects == 0
        with pytest.raises(SessionGone):
            await tower.recv()

    asyncio.run(main())
    poll_until(lambda: is_dead(shellper), what="the shellper to exit")


def test_resuming_client_yields_to_a_newer_tower(sessions: Sessions) -> None:
    """A second tower replaces the first; the first must not reconnect and fight it."""
    info = sessions.start("two-towers", CAT)

    async def main() -> None:
        first = AsyncResumingClient(info.socket)
        await first.connect()
        second = AsyncClient(info.socket)
        await second.connect()
        async with asyncio.timeout(10):
            items = [item async for item in first]
        assert any(isinstance(i, wire.Error) and i.code == "replaced" for i in items)
        assert first.reconnects == 0
        assert (await second.ping()) >= 0  # the newer tower is still connected
        await second.close()

    asyncio.run(main())


def test_resuming_client_refuses_a_new_instance_under_the_same_name(sessions: Sessions) -> None:
    """Offsets of one instance mean nothing to the next: resuming must fail, typed, not splice."""
    info = sessions.start("reborn", CAT)
    shellper = identity(info.pid)
    sessions.track(identity(info.child_pid or 0))

    async def main() -> None:
        viewer = AsyncResumingClient(info.socket, "viewer")
        await viewer.connect()
        kill_verified(shellper)  # dies without a word: the viewer just loses its connection
        reborn = sessions.start("reborn", CAT)
        assert reborn.instance_id != info.instance_id
        with pytest.raises(InstanceMismatch) as e:
            async with asyncio.timeout(20):
                async for _ in viewer:
                    pass
        assert e.value.expected == info.instance_id and e.value.found == reborn.instance_id
        await viewer.close()

    asyncio.run(main())

pytestmark = pytest.mark.kills_sessions
