"""The asyncio clients of a session on another host (tower_client.remote_clients's AsyncRemoteClient and
AsyncRemoteResumingClient), against the real sshd instances of tests/support/sshd.py: output, a request
with its reply, a missing session, and a resume after the host's ssh connection is killed mid-flood."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from support.remote import FLOOD, FLOOD_LINES, TIMEOUT, shellper

from shellper.host import ssh
from shellper.protocol import wire
from tower_client.client import SessionNotFound
from tower_client.remote_clients import AsyncRemoteClient, AsyncRemoteResumingClient
from tower_client.resume import Backoff, Reconnected

pytestmark = pytest.mark.usefixtures("remote")  # the private ssh configuration; sessions stopped afterwards


async def _until(client: AsyncRemoteClient, needle: bytes, seen: bytearray) -> None:
    """Read DATA into ``seen`` until ``needle`` is in it (TIMEOUT s at most)."""
    async with asyncio.timeout(TIMEOUT):
        while needle not in seen:
            frame = await client.recv()
            if isinstance(frame, wire.Data):
                seen += frame.data


def test_async_client_reads_output_and_gets_a_spawn_reply() -> None:
    started = shellper("--host", "alpha", "run", "acat", "--containment", "none", "--", "cat")
    assert started.returncode == 0, started.stderr

    async def main() -> tuple[int | None, tuple[int, str] | None]:
        client = AsyncRemoteClient("alpha", "acat")
        try:
            welcome = await client.connect()
            assert welcome.version == wire.PROTOCOL_VERSION and client.replies  # v3: requests get replies
            seen = bytearray()
            await client.write(b"async over ssh\n")
            await _until(client, b"async over ssh\r\n", seen)
            pid = await client.spawn(["sh", "-c", "echo spawned-$$; exec cat"], timeout=TIMEOUT)
            await _until(client, f"spawned-{pid}".encode(), seen)
            assert (await client.status()).state == "running"
            proc = client.proc
            assert proc is not None and proc.returncode is None  # the ssh process carries the stream
        finally:
            await client.close()
        return pid, client.ended

    pid, ended = asyncio.run(main())
    assert isinstance(pid, int) and pid > 0
    assert ended is not None  # closing ended the ssh process, and waited for it


def test_async_client_reports_a_missing_session() -> None:
    async def main() -> None:
        client = AsyncRemoteClient("alpha", "nothing")
        try:
            with pytest.raises(SessionNotFound) as caught:
                await client.connect()
        finally:
            await client.close()
        assert "alpha:nothing" in str(caught.value) and "no such session" in str(caught.value)
        assert client.proc is None  # its ssh process was waited for

    asyncio.run(main())


def test_async_resume_after_the_ssh_connection_is_killed_mid_flood() -> None:
    started = shellper("--host", "alpha", "run", "aflood", "--containment", "none", "--", "python3", "-c", FLOOD)
    assert started.returncode == 0, started.stderr
    expected = b"go\r\n" + b"".join(b"%07d\r\n" % i for i in range(FLOOD_LINES)) + b"DONE\r\n"

    async def main() -> tuple[bytes, list[int], list[Reconnected], int | None]:
        got = bytearray()
        killed: list[int] = []
        reconnects: list[Reconnected] = []
        backoff = Backoff(initial=0.05, max_delay=0.5, max_attempts=20)
        async with AsyncRemoteResumingClient("alpha", "aflood", backoff=backoff) as client:
            await client.connect(resume_from=0)
            await client.write(b"go\n")
            deadline = time.monotonic() + 60
            while len(got) < len(expected):
                assert time.monotonic() < deadline, f"{len(got)} of {len(expected)} bytes after 60 s"
                item = await client.recv(timeout=5)
                if isinstance(item, Reconnected):
                    reconnects.append(item)
                elif isinstance(item, wire.Gap):
                    pytest.fail(f"lost {item.missed} bytes at {item.offset}")
                elif isinstance(item, wire.Data):
                    got += item.data
                if not killed and len(got) >= 1 << 20:  # mid-flood: the host's one ssh connection dies
                    pid = await asyncio.to_thread(ssh.master_pid, "alpha")
                    assert pid is not None
                    os.kill(pid, signal.SIGKILL)  # the master this test's client started (ssh.ensure_master)
                    killed.append(pid)
            new = await asyncio.to_thread(ssh.master_pid, "alpha")
        return bytes(got), killed, reconnects, new

    got, killed, reconnects, new = asyncio.run(main())
    assert killed and reconnects, "the connection was never dropped"
    assert reconnects[0].gap == 0
    assert new is not None and new != killed[0]  # one new shared connection, made by the reconnect
    assert got == expected  # every byte once, in order: 0 lost within the ring
