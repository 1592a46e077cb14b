"""Stopping says done only when it is: a resuming client's stop() returns once the shellper process is gone,
and a Fleet's stop is journalled before STOP is sent, so a Tower killed mid-stop finishes it on restart
instead of respawning the session."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from shellper.host.identity import ProcessIdentity
from tests.conftest import Sessions
from tower_client.client import AsyncResumingClient, ResumingClient

IGNORES_TERM = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('up', flush=True); time.sleep(300)"]
SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(300)"]


def test_an_async_resuming_clients_stop_returns_once_the_shellper_is_gone(sessions: Sessions,
                                                                          runtime_dir: Path) -> None:
    info = sessions.start("a", SLEEPER)
    ident = ProcessIdentity.of(info.pid)
    assert ident is not None

    async def main() -> None:
        client = AsyncResumingClient(runtime_dir / "a.sock")
        await client.connect(replay_bytes=0)
        try:
            await client.stop(grace=1.0)
            assert not ident.is_alive(), "stop() returned while the shellper still runs"
        finally:
            await client.close()

    asyncio.run(main())


def test_a_blocking_resuming_clients_stop_returns_once_the_shellper_is_gone(sessions: Sessions,
                                                                            runtime_dir: Path) -> None:
    info = sessions.start("a", SLEEPER)
    ident = ProcessIdentity.of(info.pid)
    assert ident is not None
    with ResumingClient(runtime_dir / "a.sock") as client:
        client.connect(replay_bytes=0)
        client.stop(grace=1.0)
        assert not ident.is_alive(), "stop() returned while the shellper still runs"
