"""The library's mistakes are the caller's own errors, in one family: an invalid request is refused before it
reaches the wire (the connection is kept), a blocking call inside a running event loop says so (and leaves no
coroutine behind), and what the library raises at its callers is a ShellperError."""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest
from support.sessions import Sessions

from shellper.client.blocking import Client, InvalidRequest
from shellper.core.errors import BadArgument, InsideEventLoop, ShellperError
from shellper.protocol import wire
from tower_client import (
    Report,
    Verdict,
    apply,
    apply_async,
    discover,
    mint_or_reclaim,
    mint_or_reclaim_async,
    observe,
)
from tower_client.client import AsyncClient, ResumingClient

CONVERSATION = "5b0c7a34-2f1e-4d7c-9a51-3c2b8e0f6d19"
"""A conversation id no process holds."""

INVALID: list[tuple[str, wire.Frame, str]] = [
    ("RESIZE 0x0", wire.Resize(cols=0, rows=0), "cols"),
    ("RESIZE rows 65536", wire.Resize(cols=80, rows=65536), "rows"),
    ("RESIZE cols as text", wire.Resize(cols="80", rows=24), "cols"),  # type: ignore[arg-type]
    ("STOP grace -1", wire.Stop(grace=-1.0), "grace"),
    ("STOP grace NaN", wire.Stop(grace=float("nan")), "grace"),
    ("SIGNAL as a number", wire.Signal(signal=15), "signal"),  # type: ignore[arg-type]
    ("SPAWN env value not text", wire.Spawn(env={"A": 1}), "env"),  # type: ignore[dict-item]
    ("SPAWN argv as a string", wire.Spawn(argv="sh -c x"), "argv"),  # type: ignore[arg-type]
]


def _still_served(client: Client) -> None:
    pong = client.request(wire.Ping(nonce=7), wire.Pong)
    assert isinstance(pong, wire.Pong) and pong.nonce == 7


def test_the_blocking_client_refuses_an_invalid_request_and_keeps_its_connection(sessions: Sessions) -> None:
    sessions.start("inv", ["cat"])
    with sessions.connect("inv", replay_bytes=0) as tower:
        for what, frame, field in INVALID:
            with pytest.raises(InvalidRequest) as refused:
                tower.send(frame)
            assert refused.value.field == field, what
            assert isinstance(refused.value, ValueError) and isinstance(refused.value, ShellperError)
            assert field in str(refused.value)
            _still_served(tower)  # nothing reached the wire: no fatal ERROR, the same connection answers
        assert tower.fatal_error is None
    sessions.stop("inv")


def test_the_resuming_client_refuses_them_too(sessions: Sessions) -> None:
    sessions.start("rinv", ["cat"])
    with ResumingClient(sessions.dir / "rinv.sock", client_name="test") as resuming:
        resuming.connect(replay_bytes=0)
        first = resuming.client
        for what, frame, _field in INVALID:
            with pytest.raises(InvalidRequest):
                resuming.send(frame)
            with pytest.raises(InvalidRequest):
                resuming.stop(grace=-1.0)
            assert resuming.client is first, what
        assert first is not None
        _still_served(first)
    sessions.stop("rinv")


def test_the_async_client_raises_the_same_error(sessions: Sessions) -> None:
    sessions.start("ainv", ["cat"])

    async def run() -> None:
        client = AsyncClient(sessions.dir / "ainv.sock", client_name="test")
        await client.connect(replay_bytes=0)
        try:
            with pytest.raises(InvalidRequest):
                await client.resize(0, 0)
            with pytest.raises(InvalidRequest):
                await client.send(wire.Resize(cols=0, rows=0))
            with pytest.raises(InvalidRequest):
                await client.signal("SEGV")
            assert await client.ping() >= 0
        finally:
            await client.close()

    asyncio.run(run())
    sessions.stop("ainv")


@pytest.mark.parametrize("call", [
    lambda d: observe(d, "x"),
    lambda d: discover(d),
    lambda d: apply([]),
    lambda d: mint_or_reclaim(CONVERSATION, d),
], ids=["observe", "discover", "apply", "mint_or_reclaim"])
def test_a_blocking_call_inside_a_running_loop_says_so_and_leaves_no_coroutine(sessions: Sessions, call: Any) -> None:
    async def inside() -> None:
        call(sessions.dir)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(InsideEventLoop) as refused:
            asyncio.run(inside())
        gc.collect()
    assert "_async" in str(refused.value) and isinstance(refused.value, RuntimeError)
    assert not [w for w in seen if "never awaited" in str(w.message)], [str(w.message) for w in seen]


def test_the_blocking_calls_asyncio_forms_run_inside_a_loop(sessions: Sessions) -> None:
    async def inside() -> tuple[Report, Verdict]:
        return await apply_async([]), await mint_or_reclaim_async(CONVERSATION, sessions.dir)

    report, verdict = asyncio.run(inside())
    assert report.ok and not report.outcomes
    assert verdict.action == "resume" and verdict.session_id == CONVERSATION


@pytest.mark.parametrize("call", [
    lambda: Client("", "tower"),
    lambda: Client("/x.sock", "king"),
    lambda: Client("/x.sock", "tower", timeout=0),
    lambda: Client(42, "tower"),  # type: ignore[arg-type]
    lambda: discover("/tmp", probe_timeout=0),
    lambda: discover("/tmp", concurrency=0),
], ids=["empty path", "bad role", "zero timeout", "path not text", "probe timeout", "concurrency"])
def test_a_bad_argument_is_a_shellper_error_keeping_its_standard_mixin(call: Any) -> None:
    with pytest.raises(ShellperError) as refused:
        call()
    assert isinstance(refused.value, ValueError | TypeError)
    assert isinstance(refused.value, BadArgument | TypeError)
