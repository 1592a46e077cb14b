"""tower_client.web's app called as an ASGI server calls it (no server, no browser), against a real session: a
connection dropped mid-flood and opened again from the offset it had reaches the end with every byte of the
ring exactly once. Runs where tests/test_web.py's Chromium is missing."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from support.sessions import Sessions

from shellper.core.exits import RestartPolicy
from shellper.protocol import wire
from tower_client.web import DRAW, HEADER, OUTPUT, WebTerminal

pytestmark = pytest.mark.pty

FLOOD = ("import os, sys\n"
         "sys.stdin.readline()\n"
         "for n in range(0, 40000, 100):\n"
         "    os.write(1, b''.join(b'line %06d\\n' % i for i in range(n, n + 100)))\n"
         "os.write(1, b'END\\n')\n"
         "sys.stdin.readline()\n")


class Tab:
    """One websocket as the app sees it: what it sent, and a queue of what the browser says."""

    def __init__(self, app: WebTerminal, query: str, room: int = 0) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(room)  # room: a browser that stops reading
        self.inbox.put_nowait({"type": "websocket.connect"})
        scope = {"type": "websocket", "path": "/ws/flood", "query_string": query.encode()}
        self.task = asyncio.ensure_future(app(scope, self.inbox.get, self.outbox.put))

    async def next(self) -> tuple[str, Any]:
        message = await asyncio.wait_for(self.outbox.get(), 20)
        if message["type"] != "websocket.send":
            return message["type"], message
        if message.get("text") is not None:
            return "text", json.loads(message["text"])
        kind, offset = HEADER.unpack(message["bytes"][:HEADER.size])
        return ("draw" if kind == DRAW else "output" if kind == OUTPUT else "?"), (offset, message["bytes"][9:])

    async def leave(self) -> None:
        self.inbox.put_nowait({"type": "websocket.disconnect", "code": 1006})
        await asyncio.wait_for(self.task, 20)


def test_a_connection_dropped_mid_flood_resumes_with_every_byte_once(sessions: Sessions) -> None:
    sessions.start("flood", [sys.executable, "-c", FLOOD], cols=80, rows=24, policy=RestartPolicy(mode="no"))
    app = WebTerminal(sessions.dir)

    async def scenario() -> tuple[int, bytes]:
        tab = Tab(app, "role=terminal&cols=80&rows=24")
        assert (await tab.next())[0] == "websocket.accept"
        kind, welcome = await tab.next()
        assert kind == "text" and welcome["type"] == "welcome" and welcome["role"] == "terminal"
        kind, (start, _) = await tab.next()
        assert kind == "draw"
        tab.inbox.put_nowait({"type": "websocket.receive", "bytes": b"\r"})  # the flood starts
        got = bytearray()
        while len(got) < 100_000:
            kind, value = await tab.next()
            if kind == "output":
                assert value[0] == start + len(got)
                got += value[1]
        await tab.leave()  # mid-flood: 40,000 lines are 520 kB

        tab = Tab(app, f"role=terminal&from={start + len(got)}&instance={welcome['instance']}")
        assert (await tab.next())[0] == "websocket.accept"
        assert (await tab.next())[1]["type"] == "welcome"
        while not got.endswith(b"END\r\n"):
            kind, value = await tab.next()
            assert kind in ("output", "text"), kind
            if kind == "output":
                assert value[0] == start + len(got), "a hole or a byte twice"
                got += value[1]
        await tab.leave()
        return start, bytes(got)

    start, got = asyncio.run(scenario())
    with sessions.connect("flood", role=wire.Role.VIEWER, resume_from=start) as client:
        ring = bytearray(client.replay.data if client.replay else b"")
        while len(ring) < len(got):
            frame = client.recv(timeout=10)
            if isinstance(frame, wire.Data):
                ring += frame.data
    assert bytes(ring[:len(got)]) == got
    assert got.count(b"line ") == 40000
    sessions.stop("flood")


@pytest.mark.parametrize("query", ["from=0&instance=another", "from=999999999"])
def test_offsets_of_another_instance_or_past_the_end_are_drawn_afresh(sessions: Sessions, query: str) -> None:
    """A browser whose offset is not this shellper's stream (the session was replaced under the same name, or
    the offset is past its end) is drawn the screen, not resumed at an offset that means something else."""
    sessions.start("flood", ["cat"], cols=80, rows=24)

    async def scenario() -> list[str]:
        tab = Tab(WebTerminal(sessions.dir), f"role=viewer&{query}")
        kinds = [(await tab.next())[0] for _ in range(3)]
        await tab.leave()
        return kinds

    assert asyncio.run(scenario()) == ["websocket.accept", "text", "draw"]
    sessions.stop("flood")


def reached(kind: str, value: Any) -> int | None:
    """Where the browser is after a message: a drawing's offset, the end of an output's bytes."""
    return value[0] if kind == "draw" else value[0] + len(value[1]) if kind == "output" else None


def test_a_viewer_that_fell_behind_is_drawn_the_screen_not_a_broken_stream(sessions: Sessions) -> None:
    """A viewer is never waited for: one that stops reading through a flood loses output (a GAP), and is sent the
    screen of the moment in its place, then the stream from there: never bytes with a hole in them."""
    sessions.start("flood", [sys.executable, "-c", FLOOD.replace("40000", "400000")], cols=80, rows=24,
                   ring_bytes=64 * 1024, policy=RestartPolicy(mode="no"))

    async def scenario() -> list[tuple[str, Any]]:
        tab = Tab(WebTerminal(sessions.dir), "role=viewer", room=4)
        seen = [await tab.next() for _ in range(3)]  # accept, welcome, the first drawing
        with sessions.connect("flood", role=wire.Role.TERMINAL, replay_bytes=0) as typist:
            typist.send(wire.Data(data=b"\r"))  # the flood starts; the viewer reads nothing meanwhile
            tail = b""
            while b"END" not in tail:
                frame = await asyncio.to_thread(typist.recv, 10)
                if isinstance(frame, wire.Data):
                    tail = (tail + frame.data)[-16:]
        with sessions.connect("flood", role=wire.Role.VIEWER, replay_bytes=0) as probe:
            assert probe.welcome is not None
            end = probe.welcome.ring_end
        while reached(*seen[-1]) != end:
            seen.append(await tab.next())
        await tab.leave()
        return seen

    seen = asyncio.run(scenario())
    kinds = [kind for kind, _ in seen]
    assert kinds.count("draw") >= 2, kinds[:20]
    position = None
    for kind, value in seen:
        if kind == "draw":
            position = value[0]
        elif kind == "output":
            assert value[0] == position, "output that does not continue the drawing or the output before it"
            position += len(value[1])
    sessions.stop("flood")
