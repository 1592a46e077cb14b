"""A resuming client for a session on another host: :class:`~tower_client.client.ResumingClient` whose
connections are :class:`shellper.client.remote.RemoteClient` s (``shellper bridge`` over the host's shared ssh
connection). A dropped ssh connection is one more lost connection: it reconnects with backoff (starting
the host's shared connection again) and resumes at the next byte it has not had, so nothing the ring
still holds is lost.

The asyncio twins, :class:`AsyncRemoteClient` and :class:`AsyncRemoteResumingClient`, are the same over an
asyncio subprocess: the ssh process's stdin and stdout are one end of a socketpair, the client's stream the
other, so a Tower's event loop follows remote sessions as it follows local ones."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tempfile
from typing import IO

from shellper.client.remote import CLOSE_WAIT, RemoteClient, bridge_refusal, last_line, remote_address
from shellper.core.names import validate_name
from shellper.host.ssh import (
    SSH_UNREACHABLE,
    HostUnreachable,
    check_host,
    check_version,
    ensure_master,
    remote_shellper,
    ssh_argv,
)
from shellper.protocol import wire
from shellper.protocol.connection import ClientError, SessionGone
from tower_client.client import (
    CLIENT_NAME,
    CONNECT_TIMEOUT,
    MAX_BUFFERED,
    REQUEST_TIMEOUT,
    AsyncClient,
    AsyncResumingClient,
    ResumingClient,
)
from tower_client.framereader import open_sink_stream
from tower_client.resume import Backoff

__all__ = ["AsyncRemoteClient", "AsyncRemoteResumingClient", "RemoteClient", "RemoteResumingClient",
           "remote_address"]

REMOTE_CONNECT_TIMEOUT = 10.0
"""Seconds to start the host's shared connection and check its shellper's version (an ssh handshake)."""
REMOTE_HANDSHAKE_TIMEOUT = 10.0
"""Seconds from running the bridge to WELCOME and REPLAY: a remote command's start, then the handshake."""


class RemoteResumingClient(ResumingClient):
    """Session ``name`` on ``host`` (``directory``: its runtime directory there, default the remote user's)."""

    def __init__(self, host: str, name: str, role: str = wire.Role.TOWER, *, directory: str | None = None,
                 client_name: str = CLIENT_NAME, backoff: Backoff | None = None,
                 expect_instance_id: str | None = None, timeout: float = CONNECT_TIMEOUT) -> None:
        super().__init__(remote_address(host, name), role, client_name=client_name, backoff=backoff,
                         expect_instance_id=expect_instance_id, timeout=timeout)
        self.host, self.name, self.directory = host, name, directory

    def _new_client(self) -> RemoteClient:
        return RemoteClient(self.host, self.name, self.role, directory=self.directory,
                            client_name=self.client_name, timeout=self.timeout)


class AsyncRemoteClient(AsyncClient):
    """An asyncio connection to session ``name`` on ``host`` (``directory``: its runtime directory there,
    default the remote user's), through ``shellper bridge`` over the host's shared ssh connection. The
    remote version is checked once per host and process (VersionMismatch); ssh's own blocking steps (the
    check, starting the shared connection) run in a thread, so the event loop is not held up."""

    def __init__(self, host: str, name: str, role: str = wire.Role.TOWER, *, directory: str | None = None,
                 client_name: str = CLIENT_NAME, connect_timeout: float = REMOTE_CONNECT_TIMEOUT,
                 handshake_timeout: float = REMOTE_HANDSHAKE_TIMEOUT, request_timeout: float = REQUEST_TIMEOUT,
                 max_buffered: int = MAX_BUFFERED) -> None:
        validate_name(name)
        check_host(host)
        super().__init__(remote_address(host, name), role, client_name=client_name, connect_timeout=connect_timeout,
                         handshake_timeout=handshake_timeout, request_timeout=request_timeout,
                         max_buffered=max_buffered)
        self.host, self.name, self.directory = host, name, directory
        self.proc: asyncio.subprocess.Process | None = None
        self._stderr: IO[bytes] | None = None
        self.ended: tuple[int, str] | None = None
        """How the last ssh process ended: its exit status and the last line it wrote to stderr."""

    async def _open_stream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            await asyncio.to_thread(check_version, self.host, self.connect_timeout)  # once per process and host
            await asyncio.to_thread(ensure_master, self.host, self.connect_timeout)  # again after it died
        except HostUnreachable as exc:  # worth retrying: a resuming client backs off and tries again
            raise SessionGone(self.path, str(exc)) from exc
        await self._reap()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        args = [*(["--dir", self.directory] if self.directory else []), "bridge", self.name]
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - a file, read after ssh ends; closed by _reap
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *ssh_argv(self.host, remote_shellper(args)), stdin=theirs.fileno(), stdout=theirs.fileno(),
                stderr=self._stderr)
        except OSError as exc:
            ours.close()
            raise SessionGone(self.path, f"cannot run ssh: {exc}") from None
        finally:
            theirs.close()
        try:
            return await open_sink_stream(ours)
        except BaseException:
            ours.close()
            raise

    async def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                      events_after: int | None = None, expect_instance_id: str | None = None,
                      expect_pid: int | None = None, rendered: int | None = None,
                      size: tuple[int, int] | None = None) -> wire.Welcome:
        """As AsyncClient.connect; a bridge or ssh that ended before WELCOME is reported in its own words:
        SessionNotFound when the remote has no such session, SessionGone (worth retrying) otherwise.
        ``expect_pid`` is the remote shellper's pid as it says in WELCOME (no peer credentials over ssh)."""
        self.ended = None
        try:
            return await super().connect(resume_from=resume_from, replay_bytes=replay_bytes,
                                         events_after=events_after, expect_instance_id=expect_instance_id,
                                         expect_pid=expect_pid, rendered=rendered, size=size)
        except ClientError as exc:
            why = await self._reap() or self.ended  # a failed handshake has closed (and reaped) already
            if why is None or self.conn.welcome is not None or not isinstance(exc, SessionGone):
                raise  # not a bridge that ended unanswered: the shellper's own refusal, as is
            bridge_refusal(self.path, why[1], exc)
            what = "ssh could not connect" if why[0] == SSH_UNREACHABLE else f"the bridge exited {why[0]}"
            raise SessionGone(self.path, f"{what}: {why[1]}") from exc

    def peer_pid(self) -> None:
        """None: the socket's peer is this process's own socketpair, not the shellper."""
        return None

    async def _reap(self) -> tuple[int, str] | None:
        """End and wait for the ssh process (ours); its status and last stderr line, if any."""
        proc, err = self.proc, self._stderr
        self.proc, self._stderr = None, None
        if proc is None:
            return None
        try:
            try:
                async with asyncio.timeout(CLOSE_WAIT):
                    code = await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                code = await proc.wait()
        except BaseException:  # cancelled: the loop's child watcher still reaps it once it has ended
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            if err is not None:
                err.close()
            raise
        return code, last_line(err)

    async def close(self) -> None:
        await super().close()  # the socket's end-of-file ends the bridge, then ssh
        with contextlib.suppress(OSError):
            self.ended = await self._reap() or self.ended


class AsyncRemoteResumingClient(AsyncResumingClient):
    """An :class:`AsyncRemoteClient` that reconnects with backoff (starting the host's shared connection
    again) and resumes at the next byte it has not handed on: a dropped ssh connection loses nothing the
    ring still holds."""

    def __init__(self, host: str, name: str, role: str = wire.Role.TOWER, *, directory: str | None = None,
                 client_name: str = CLIENT_NAME, backoff: Backoff | None = None,
                 expect_instance_id: str | None = None, connect_timeout: float = REMOTE_CONNECT_TIMEOUT,
                 handshake_timeout: float = REMOTE_HANDSHAKE_TIMEOUT,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        validate_name(name)
        check_host(host)
        super().__init__(remote_address(host, name), role, client_name=client_name, backoff=backoff,
                         expect_instance_id=expect_instance_id, connect_timeout=connect_timeout,
                         handshake_timeout=handshake_timeout, request_timeout=request_timeout)
        self.host, self.name, self.directory = host, name, directory

    def _new_client(self) -> AsyncClient:
        c, h, r = self._timeouts
        return AsyncRemoteClient(self.host, self.name, self.role, directory=self.directory,
                                 client_name=self.client_name, connect_timeout=c, handshake_timeout=h,
                                 request_timeout=r)
