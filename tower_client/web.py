"""A browser terminal: an ASGI app that serves any session over a websocket (protocol/WEB.md).

``WebTerminal(runtime_dir)`` is a plain ASGI 3 application, so it runs under any ASGI server (uvicorn,
hypercorn, daphne) and mounts inside any ASGI framework (Starlette, FastAPI, Django's ASGI router). It imports
nothing but the standard library and tower_client: the server is the application's choice, installed with the
``shellper-pty[web]`` extra (uvicorn and websockets) or brought by the application itself. The browser's half is
clients/web/shellper-web.js, drawn with xterm.js.

Each websocket is one connection to the session, as ``terminal`` (typing, resizing) or ``viewer`` (read-only).
Output goes to the browser with its absolute offset; the browser keeps the offset it has rendered and
reconnects from it after a network drop, so it gets exactly the bytes it missed. Where exact bytes cannot be
had (a first connection, a page reloaded, a gap, a new shellper instance) the browser is drawn the screen from
the session's screen model instead, and continues from the offset that drawing stands for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from shellper.core import names
from shellper.protocol import wire
from shellper.protocol.connection import ClientError, InstanceMismatch, RemoteError
from tower_client.client import AsyncClient, socket_path

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Authorize = Callable[[Scope, str, str], Awaitable[bool]]

OUTPUT = 0
"""A binary message's kind: stream bytes starting at its offset."""
DRAW = 1
"""A binary message's kind: reset the terminal, write the payload (the screen drawn), continue at its offset."""
HEADER = struct.Struct(">BQ")

SCROLLBACK_LINES = 1000
"""Lines of the main screen's scrollback drawn on a fresh connection, as ``shellper attach`` draws."""
READ_AHEAD = 1 << 20
"""Output the client to the shellper holds for a browser that does not keep up: past it the shellper is
held back (a terminal) rather than this process buffering without bound."""

COALESCE = 64 << 10
"""Output already received is sent to the browser as one message up to this size."""

CLOSE_ENDED = 4000
"""The session ended (or cannot be reached): the browser does not reconnect."""
CLOSE_REFUSED = 4003
"""A bad session name or role, or ``authorize`` said no: the browser does not reconnect."""


@dataclass(frozen=True, slots=True)
class Request:
    """What a browser asked for in the websocket's address: ``.../NAME?role=terminal&from=N&instance=ID``."""

    name: str
    role: str
    resume_from: int | None
    instance_id: str | None
    size: tuple[int, int] | None


def parse_request(scope: Scope, prefix: str) -> Request:
    """The request in a websocket scope; ValueError saying what is wrong with it."""
    path: str = scope.get("path", "")
    if not path.startswith(prefix):
        raise ValueError(f"not under {prefix}")
    name = names.validate_name(unquote(path[len(prefix):]))
    query = {key: values[-1] for key, values in parse_qs(scope.get("query_string", b"").decode("ascii")).items()}
    role = query.get("role", wire.Role.VIEWER)
    if role not in (wire.Role.TERMINAL, wire.Role.VIEWER):
        raise ValueError(f"role must be terminal or viewer, not {role!r}")
    resume_from = int(query["from"]) if "from" in query else None
    if resume_from is not None and resume_from < 0:
        raise ValueError("from must not be negative")
    size = None
    if "cols" in query and "rows" in query:
        size = (int(query["cols"]), int(query["rows"]))
    return Request(name, role, resume_from, query.get("instance") or None, size)


def output_message(kind: int, offset: int, data: bytes) -> bytes:
    """A binary message to the browser: kind, the offset (big-endian uint64), the bytes."""
    return HEADER.pack(kind, offset) + data


async def _allow_all(scope: Scope, name: str, role: str) -> bool:
    return True


async def _refuse(send: Send, reason: str) -> None:
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": CLOSE_REFUSED, "reason": reason[:120]})


class WebTerminal:
    """The ASGI application: a websocket under ``prefix`` (``/ws/NAME``) is session NAME of ``runtime_dir``
    (default: shellper's, as the CLI finds it).

    ``roles``: the roles a browser may ask for (``("viewer",)`` for a read-only deployment). ``authorize``:
    awaited with the scope, the session name and the role before anything is opened; False refuses (the
    application's own login, cookies or headers are in the scope). HTTP requests get 404, so the app can sit
    beside static files in a router; lifespan events are answered.
    """

    def __init__(self, runtime_dir: str | os.PathLike[str] | None = None, *, prefix: str = "/ws/",
                 roles: tuple[str, ...] = (wire.Role.TERMINAL, wire.Role.VIEWER),
                 authorize: Authorize = _allow_all, scrollback: int = SCROLLBACK_LINES) -> None:
        self.runtime_dir = names.runtime_dir_name(runtime_dir)
        self.prefix = prefix
        self.roles = roles
        self.authorize = authorize
        self.scrollback = scrollback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "http":
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"not found\n"})
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        # A refusal is a close after the upgrade: one before it is an HTTP 403, which a browser reports as
        # code 1006, the same as a network drop, and would retry.
        try:
            request = parse_request(scope, self.prefix)
        except (ValueError, names.BadName) as exc:
            await _refuse(send, str(exc))
            return
        if request.role not in self.roles or not await self.authorize(scope, request.name, request.role):
            await _refuse(send, "not allowed")
            return
        await send({"type": "websocket.accept"})
        link = _Link(self, request, send)
        await link.run(receive)


class _Link:
    """One browser's websocket and its connection to the session, which is replaced where the bytes cannot
    continue (a gap): the browser is then drawn the screen."""

    def __init__(self, app: WebTerminal, request: Request, send: Send) -> None:
        self.app = app
        self.request = request
        self.send = send
        self.path = socket_path(app.runtime_dir, request.name)
        self.client: AsyncClient | None = None
        self.closed = False

    async def run(self, receive: Receive) -> None:
        pump = asyncio.get_running_loop().create_task(self._pump(), name=f"web {self.request.name}")
        try:
            await self._input(receive, pump)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            if self.client is not None:
                await self.client.close()

    async def _input(self, receive: Receive, pump: asyncio.Task[None]) -> None:
        """The browser's messages until it goes (or the pump ends): keys as binary, resizes as JSON text."""
        receiving: asyncio.Task[Message] | None = None
        try:
            while True:
                receiving = asyncio.ensure_future(receive())
                await asyncio.wait((receiving, pump), return_when=asyncio.FIRST_COMPLETED)
                if not receiving.done():
                    return
                message = receiving.result()
                if message["type"] == "websocket.disconnect":
                    return
                client = self.client
                if client is None or self.request.role != wire.Role.TERMINAL:
                    continue  # a viewer's keys go nowhere; before the session is open, neither do a terminal's
                if message.get("bytes"):
                    await client.write(message["bytes"])
                elif message.get("text"):
                    control = json.loads(message["text"])
                    if control.get("type") == "resize":
                        await client.resize(int(control["cols"]), int(control["rows"]))
        except (ClientError, ValueError, KeyError, TypeError):
            return  # the pump says why the session went; a malformed message ends this link
        finally:
            if receiving is not None and not receiving.done():
                receiving.cancel()

    async def _open(self, resume_from: int | None) -> tuple[AsyncClient, wire.Welcome, int]:
        """A connection from ``resume_from`` (exact bytes) or, without it, drawn: (client, WELCOME, the offset the
        browser is at once it has what was sent)."""
        request = self.request
        client = AsyncClient(self.path, request.role, client_name="shellper-web", max_buffered=READ_AHEAD)
        size = request.size if request.role == wire.Role.TERMINAL else None
        if resume_from is None:
            welcome = await client.connect(rendered=self.app.scrollback, size=size, events_after=0)
        else:
            welcome = await client.connect(resume_from=resume_from, events_after=0,
                                           expect_instance_id=request.instance_id)
        self.client = client
        await self._control({"type": "welcome", "name": welcome.name, "instance": welcome.instance_id,
                             "role": request.role, "cols": welcome.cols, "rows": welcome.rows,
                             "state": welcome.state})
        replay = client.replay
        assert replay is not None
        position = replay.offset + len(replay.data)
        if resume_from is None:
            await self._bytes(output_message(DRAW, position, replay.preamble + replay.data))
        elif replay.data:
            await self._bytes(output_message(OUTPUT, replay.offset, replay.data))
        return client, welcome, position

    async def _reopen(self, resume_from: int | None) -> tuple[AsyncClient, wire.Welcome, int]:
        """``_open``, drawn instead where the exact bytes are not to be had."""
        if self.client is not None:
            await self.client.close()
            self.client = None
        if resume_from is not None:
            try:
                client, welcome, position = await self._open(resume_from)
            except InstanceMismatch:
                pass  # another shellper under the name: its offsets are not the browser's
            except RemoteError as exc:
                if exc.error.code != "bad_offset":  # past this shellper's end: not the browser's stream either
                    raise
            else:
                replay = client.replay
                if replay is not None and replay.gap == 0:
                    return client, welcome, position
                await client.close()  # the ring no longer holds all the browser missed: draw instead
                self.client = None
        return await self._open(None)

    async def _pump(self) -> None:
        """The session's output, exits and resizes to the browser, until the session or the browser goes."""
        try:
            client, welcome, position = await self._reopen(self.request.resume_from)
            frame: wire.Frame | None = await client.recv()
            while True:
                if type(frame) is wire.Data:  # the hot path first
                    # What has already arrived goes as one message: a PTY is read a few KiB at a time, and
                    # the browser's cost is per message (bench/NOTES.md, "The browser terminal").
                    chunks, size = [frame.data], len(frame.data)
                    frame = None
                    while size < COALESCE:
                        frame = await client.recv(timeout=0)
                        if type(frame) is not wire.Data:
                            break
                        chunks.append(frame.data)
                        size += len(frame.data)
                        frame = None
                    if size:
                        await self._bytes(output_message(OUTPUT, position, b"".join(chunks)))
                        position += size
                    if frame is None:
                        frame = await client.recv()
                    continue
                elif isinstance(frame, wire.Gap):  # lost bytes are replaced by the screen of the moment
                    client, welcome, position = await self._reopen(None)
                elif isinstance(frame, wire.Exit):
                    await self._control({"type": "exit", "state": frame.state, "reason": frame.reason})
                elif isinstance(frame, wire.Event) and frame.seq > welcome.event_seq:
                    if frame.kind == "resized":
                        await self._control({"type": "resize", "cols": frame.data["cols"],
                                             "rows": frame.data["rows"]})
                    elif frame.kind == "state":
                        await self._control({"type": "state", "state": frame.data.get("state"),
                                             "reason": frame.data.get("reason", "")})
                frame = await client.recv()
        except ClientError as exc:
            await self._end(str(exc))
        except OSError as exc:  # the browser's side went; nothing to tell it
            await self._end(f"{exc}")

    async def _end(self, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self._control({"type": "ended", "reason": reason})
            await self.send({"type": "websocket.close", "code": CLOSE_ENDED, "reason": reason[:120]})

    async def _bytes(self, data: bytes) -> None:
        await self.send({"type": "websocket.send", "bytes": data})

    async def _control(self, message: dict[str, Any]) -> None:
        await self.send({"type": "websocket.send", "text": json.dumps(message)})
