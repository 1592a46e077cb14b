"""One handshake and nothing more: what discover asks each session's socket (asyncio, without a transport).

discover probes every socket of a directory at once. An AsyncClient per probe would build a transport, a
StreamReader and a StreamWriter for two frames; :func:`handshake` connects a non-blocking socket with the
event loop's ``sock_*`` calls and feeds a sans-IO Connection instead. The checks are AsyncClient's (the
socket's directory and file before connecting, the server's credentials after), and so are the errors.
"""

from __future__ import annotations

import asyncio
import socket

from shellper.client.blocking import peer_pid
from shellper.host.trust import check_server, check_socket_dir, check_socket_file
from shellper.protocol import wire
from shellper.protocol.connection import Connection, ConnState, Timeout, connect_error

READ_SIZE = 64 * 1024


async def handshake(path: str, role: str, client_name: str, timeout: float, *,
                    replay_bytes: int | None = None) -> tuple[wire.Welcome, int | None]:
    """WELCOME from the shellper at ``path`` (once its REPLAY has come too) and the pid at the other end of
    the socket (SO_PEERCRED); the connection is closed again. Connecting and the handshake get ``timeout``
    seconds each. Raises as AsyncClient.connect does (SessionNotFound, ConnectionRefused, Timeout,
    RemoteError, ...)."""
    check_socket_dir(path)
    check_socket_file(path)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
    try:
        try:
            async with asyncio.timeout(timeout):
                await loop.sock_connect(sock, path)
        except (OSError, TimeoutError) as exc:
            raise connect_error(path, exc, timeout) from None
        check_server(sock, path)  # closes it if it refuses
        conn = Connection(path, role, client_name)
        try:
            async with asyncio.timeout(timeout):
                try:
                    await loop.sock_sendall(sock, conn.hello(replay_bytes=replay_bytes))
                except OSError as exc:  # the shellper went away: reading says how
                    conn.connection_lost(exc)
                while conn.state is not ConnState.OPEN:
                    if conn.next_event() is None:  # WELCOME, then REPLAY: the connection keeps them
                        try:
                            conn.receive_data(await loop.sock_recv(sock, READ_SIZE))
                        except OSError as exc:
                            conn.connection_lost(exc)
        except TimeoutError:
            raise Timeout(path, f"no WELCOME/REPLAY within {timeout:g} s") from None
        assert conn.welcome is not None
        return conn.welcome, peer_pid(sock)
    finally:
        sock.close()
