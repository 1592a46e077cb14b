"""tower_client.web's pure parts: what a websocket's address asks for, the output message, and the refusals an
ASGI server sees (no session, no browser: the app is called with a scope and two queues)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tower_client.web import CLOSE_REFUSED, DRAW, HEADER, OUTPUT, Request, WebTerminal, output_message, parse_request


def scope(path: str, query: str = "") -> dict[str, Any]:
    return {"type": "websocket", "path": path, "query_string": query.encode()}


def test_the_address_names_the_session_role_offset_instance_and_size() -> None:
    assert parse_request(scope("/ws/work", "role=terminal&from=123&instance=abc&cols=100&rows=30"), "/ws/") == \
        Request("work", "terminal", 123, "abc", (100, 30))
    assert parse_request(scope("/ws/a%2Eb"), "/ws/") == Request("a.b", "viewer", None, None, None)


@pytest.mark.parametrize(("path", "query"), [
    ("/ws/..", ""), ("/ws/a/b", ""), ("/other/x", ""), ("/ws/x", "role=tower"), ("/ws/x", "from=-1"),
    ("/ws/x", "from=ten"),
])
def test_a_bad_address_is_refused(path: str, query: str) -> None:
    with pytest.raises(ValueError):
        parse_request(scope(path, query), "/ws/")


def test_an_output_message_is_kind_offset_then_bytes() -> None:
    message = output_message(OUTPUT, (1 << 40) + 5, b"hi")
    assert HEADER.unpack(message[:HEADER.size]) == (OUTPUT, (1 << 40) + 5) and message[HEADER.size:] == b"hi"
    assert output_message(DRAW, 0, b"")[0] == DRAW and HEADER.size == 9


def run_app(app: WebTerminal, the_scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(the_scope, receive, send))
    return sent


async def _no(scope: Any, name: str, role: str) -> bool:
    return False


@pytest.mark.parametrize(("app", "path", "query"), [
    (WebTerminal("/nonexistent"), "/ws/..", ""),
    (WebTerminal("/nonexistent", roles=("viewer",)), "/ws/x", "role=terminal"),
    (WebTerminal("/nonexistent", authorize=_no), "/ws/x", "role=viewer"),
])
def test_a_refusal_is_a_close_after_the_upgrade_so_the_browser_does_not_retry(app: WebTerminal, path: str,
                                                                             query: str) -> None:
    sent = run_app(app, scope(path, query))
    assert [m["type"] for m in sent] == ["websocket.accept", "websocket.close"]
    assert sent[1]["code"] == CLOSE_REFUSED
