"""``shellper screen NAME``: the session's screen as it is now, from its screen model (as ``tmux capture-pane
-p``); and the text ``shellper tail --plain`` prints, as a person sees it."""

from __future__ import annotations

import json
import sys

from shellper.core.defaults import SCREEN_SCROLLBACK_LINES
from shellper.core.errors import ShellperError
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from shellper.client.blocking import Client


class NoScreenModel(ShellperError):
    """The shellper speaks protocol version 2: it keeps no screen model."""


def request_screen(client: Client, *, ansi: bool = False, scrollback: int = 0) -> wire.ScreenReply:
    """Ask a connected shellper for its screen (protocol version 3)."""
    assert client.welcome is not None
    if not wire.supports(client.welcome.version, wire.Feature.SCREEN):
        raise NoScreenModel(f"the shellper speaks protocol version {client.welcome.version}: it keeps no screen "
                            "(restart the session with this shellper's version)")
    reply = client.request(wire.ScreenRequest(format="ansi" if ansi else "text", scrollback=scrollback),
                           wire.ScreenReply)
    assert isinstance(reply, wire.ScreenReply)
    return reply


def screen_output(reply: wire.ScreenReply, *, as_json: bool = False) -> str:
    """What ``shellper screen`` prints: the scrollback asked for, then every row; or all of it as JSON."""
    if as_json:
        return json.dumps(reply.to_map(), ensure_ascii=False) + "\n"
    return "".join(line + "\n" for line in [*reply.scrollback, *reply.lines])


def plain_text(reply: wire.ScreenReply) -> list[str]:
    """The text a person sees: what lies above the screen, then the screen without its empty rows at the
    top and bottom (a full-screen program's single line drawn at the bottom is not 23 empty lines)."""
    lines = list(reply.lines)
    while lines and not lines[-1]:
        lines.pop()
    start = 0
    while start < len(lines) and not lines[start]:
        start += 1
    return [*reply.scrollback, *lines[start:]]


def cmd_screen(client: Client, *, ansi: bool, as_json: bool, scrollback: int) -> int:
    reply = request_screen(client, ansi=ansi, scrollback=scrollback)
    sys.stdout.write(screen_output(reply, as_json=as_json))
    sys.stdout.flush()
    return 0


__all__ = ["SCREEN_SCROLLBACK_LINES", "NoScreenModel", "cmd_screen", "plain_text", "request_screen",
           "screen_output"]
