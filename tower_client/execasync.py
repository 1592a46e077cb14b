"""``execute_async``: run a command in a session's shell and wait for it, over an asyncio client; the blocking
form is shellper.client.execute's ``execute``, which holds what the two share (:class:`ExecRun`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from shellper.client.execute import INTERRUPT_WAIT, POLL, ExecRun, lost
from shellper.core.execmark import LOOKBACK, ExecResult
from shellper.protocol.connection import ClientError
from tower_client.client import AsyncClient

__all__ = ["execute_async"]


async def execute_async(client: AsyncClient, command: str, *, timeout: float | None = None,
                        on_output: Callable[[bytes], None] | None = None) -> ExecResult:
    """As shellper.client.execute.execute, over an AsyncClient (connected here if it is not yet)."""
    run = ExecRun(command, timeout, on_output)
    try:
        if client.welcome is None:
            await client.connect(replay_bytes=LOOKBACK)
        assert client.welcome is not None
        recent = client.replay.data if client.replay is not None else b""
        typed = run.prepare(client.welcome, recent, await client.status(), client.peer_pid(), client.role)
        await client.write(typed)
        deadline = None if run.timeout is None else time.monotonic() + run.timeout
        while not run.done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                await _interrupt(client, run)
                break
            frame = await client.recv(timeout=left)
            if frame is not None:
                run.feed(frame, client.output.next_offset)
    except ClientError as exc:
        raise lost(exc) from None
    return run.result()


async def _interrupt(client: AsyncClient, run: ExecRun) -> None:
    await client.write(run.interrupt())
    until = time.monotonic() + INTERRUPT_WAIT
    while (back := run.shell_back()) is not True and (left := until - time.monotonic()) > 0:
        frame = await client.recv(timeout=min(left, POLL) if back is False else left)
        if frame is not None:
            run.feed(frame, client.output.next_offset)
    run.interrupted = run.shell_back()
