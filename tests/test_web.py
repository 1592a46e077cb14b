"""tower_client.web in a real headless Chromium: xterm.js on the page, examples/web.py serving it under uvicorn.

A person types and sees the echo; a reload is drawn the screen; a network drop mid-flood (a proxy the test
cuts) is resumed from the offset the browser had rendered, with no byte lost or twice: what the browser got is
compared byte for byte with the session's ring, and what xterm.js shows with ``shellper screen``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.browser import Browser, Proxy, free_port, missing, wait_listening
from support.paths import ROOT, SHELLPER_CLI
from support.sessions import Sessions, private_dir
from support.waiting import poll_until

from shellper.core.exits import RestartPolicy
from shellper.protocol import wire

WHY = missing()
pytestmark = [pytest.mark.browser, pytest.mark.pty, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

SHELL_ENV = {**os.environ, "PS1": "psh> ", "HISTFILE": "", "TERM": "xterm-256color"}
FLOOD = ("import os, sys, time\n"
         "sys.stdin.readline()\n"
         "n = 0\n"
         "end = time.monotonic() + 2.5\n"
         "while time.monotonic() < end:\n"
         "    os.write(1, b''.join(b'line %07d \\x1b[1;3%dmcolour\\x1b[0m ......................\\r\\n'\n"
         "                         % (n + i, (n + i) % 8) for i in range(64)))\n"
         "    n += 64\n"
         "    time.sleep(0.005)\n"
         "os.write(1, b'END %d\\r\\n' % n)\n"
         "time.sleep(3600)\n")
"""From an Enter on: about 2.5 s of numbered, coloured lines (a few hundred KiB/s), then quiet: long enough to cut
the network in the middle of it and for output to go on while the browser is away."""


@dataclass
class Web:
    sessions: Sessions
    browser: Browser
    proxy: Proxy

    def open(self, name: str, role: str = "terminal", **query: str) -> None:
        params = "&".join(f"{k}={v}" for k, v in {"session": name, "role": role, "cols": "80", "rows": "24",
                                                    **query}.items())
        self.browser.get(f"http://127.0.0.1:{self.proxy.port}/?{params}")
        self.wait_connected()

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.browser.js(
            "const s = window.shellperWeb && window.shellperWeb.state;"
            "return s ? {offset: s.offset, connected: s.connected, reconnects: s.reconnects, draws: s.draws,"
            " holes: s.holes, dups: s.dups, ended: s.ended, code: s.closeCode, bytes: s.bytes} : null;") or {}
        return state

    def wait_connected(self) -> dict[str, Any]:
        return poll_until(lambda: (s := self.state()).get("connected") and s.get("offset") is not None and s,
                          timeout=30, what="the page connected and drawn")

    def screen(self) -> list[str]:
        rows: list[str] = self.browser.js("return window.shellperWeb.screen();")
        return [row.rstrip() for row in rows]

    def shellper_screen(self, name: str) -> list[str]:
        proc = subprocess.run([*SHELLPER_CLI, "--dir", str(self.sessions.dir), "screen", name, "--json"],
                              capture_output=True, text=True, timeout=20, check=True, cwd=ROOT)
        return [line.rstrip() for line in json.loads(proc.stdout)["lines"]]

    def same_screen(self, name: str) -> None:
        """xterm.js shows what the session's screen model has (polled: output may still be on its way)."""
        last: list[Any] = []

        def same() -> bool:
            last[:] = [self.screen(), self.shellper_screen(name)]
            return bool(last[0] == last[1])

        poll_until(same, timeout=20, interval=0.2, what="the browser's screen to be shellper's",
                   fail=lambda why: pytest.fail(f"{why}:\nbrowser: {last[0]}\nshellper: {last[1]}"))

    def session_size(self, name: str) -> tuple[int, int]:
        with self.sessions.connect(name, role=wire.Role.VIEWER, replay_bytes=0) as client:
            assert client.welcome is not None
            return client.welcome.cols, client.welcome.rows

    def page_size(self) -> tuple[int, int]:
        cols, rows = self.browser.js("const t = window.shellperWeb.term; return [t.cols, t.rows];")
        return cols, rows

    def ring_end(self, name: str) -> int:
        with self.sessions.connect(name, role=wire.Role.VIEWER, replay_bytes=0) as client:
            assert client.welcome is not None
            return client.welcome.ring_end

    def ring(self, name: str, start: int, end: int) -> bytes:
        """The session's output bytes [start, end), from its ring."""
        with self.sessions.connect(name, role=wire.Role.VIEWER, resume_from=start) as client:
            replay = client.replay
            assert replay is not None and replay.gap == 0 and replay.offset == start
            data = bytearray(replay.data)
            while start + len(data) < end:
                frame = client.recv(timeout=10)
                assert isinstance(frame, wire.Data | wire.Event | None), frame
                if isinstance(frame, wire.Data):
                    data += frame.data
            return bytes(data[:end - start])


@pytest.fixture
def web(sessions: Sessions) -> Iterator[Web]:
    port = free_port()
    sessions.spawn([sys.executable, "examples/web.py", "--dir", str(sessions.dir), "--port", str(port)],
                   cwd=ROOT, stdout=subprocess.DEVNULL)
    wait_listening(port)
    proxy = Proxy(port)
    profile = private_dir("web-chromium-")
    browser = Browser(lambda argv: sessions.spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                      profile)
    try:
        yield Web(sessions, browser, proxy)
    finally:
        browser.close()
        proxy.close()
        shutil.rmtree(profile, ignore_errors=True)


def test_type_see_the_echo_reload_and_watch(web: Web, sessions: Sessions) -> None:
    sessions.start("sh", ["bash", "--norc", "--noprofile", "-i"], env=SHELL_ENV, cols=80, rows=24)
    web.open("sh")
    web.browser.type("echo web-$((6 * 7))\ue007")
    poll_until(lambda: "web-42" in web.screen(), timeout=20, what="the echo of a command typed in the browser")
    web.same_screen("sh")

    web.browser.js("window.shellperWeb.resize(100, 30)")  # a terminal resizes the session
    poll_until(lambda: web.session_size("sh") == (100, 30), timeout=20, what="the session to take the page's size")
    web.same_screen("sh")

    web.browser.refresh()  # a new page: drawn the screen as it is, from the session's model
    state = web.wait_connected()
    assert state["draws"] == 1 and state["reconnects"] == 0
    web.same_screen("sh")

    web.open("sh", role="viewer")  # read-only: sees the same at the session's size, its keys go nowhere
    web.same_screen("sh")
    subprocess.run([*SHELLPER_CLI, "--dir", str(sessions.dir), "resize", "sh", "90", "20"], check=True, timeout=20,
                   cwd=ROOT, capture_output=True)
    poll_until(lambda: web.page_size() == (90, 20), timeout=20, what="the viewer to follow the session's size")
    web.same_screen("sh")
    before = web.ring_end("sh")
    web.browser.type("echo not-typed\ue007")
    web.open("sh")  # a terminal again: what it types still arrives, after what the viewer typed would have
    web.browser.type("echo typed\ue007")
    poll_until(lambda: "typed" in web.screen(), timeout=20, what="the terminal's command after the viewer's")
    assert "not-typed" not in web.ring("sh", before, web.ring_end("sh")).decode()
    sessions.stop("sh")

    for name, code in (("sh", 4000), ("no-such", 4000), ("..", 4003)):  # ended, missing, refused
        web.browser.get(f"http://127.0.0.1:{web.proxy.port}/?session={name}")
        state = poll_until(lambda: (s := web.state()).get("ended") is not None and s.get("code") is not None and s,
                           timeout=20, what=f"the page of {name!r} to give up")  # the reason comes before the close
        assert (state["code"], state["reconnects"], state["connected"]) == (code, 0, False), state


def test_a_drop_mid_flood_resumes_exactly(web: Web, sessions: Sessions) -> None:
    sessions.start("flood", [sys.executable, "-c", FLOOD], cols=80, rows=24, ring_bytes=16 << 20,
                   policy=RestartPolicy(mode="no"))
    web.open("flood", keep="1")
    first = web.wait_connected()["offset"]
    web.proxy.cut_after(16 * 1024)  # mid-flood (compressed: permessage-deflate)
    web.browser.type("\ue007")  # the flood starts: the page is drawn by now
    poll_until(lambda: web.proxy.cuts >= 1, timeout=20, what="the network cut")
    end_at_cut = web.ring_end("flood")
    poll_until(lambda: web.state()["reconnects"] >= 1, timeout=20, what="the page to reconnect")

    def finished() -> int:
        end = web.ring_end("flood")
        return end if b"END " in web.ring("flood", max(first, end - 64), end) and web.state()["offset"] == end else 0

    end = poll_until(finished, timeout=60, interval=0.2, what="the whole flood in the browser")
    state = web.state()
    assert end_at_cut < end, "the network was not cut in the middle of the flood"
    assert (state["holes"], state["dups"], state["draws"]) == (0, 0, 1), state
    kept = web.browser.js("return window.shellperWeb.kept();")
    got = base64.b64decode(kept["data"])
    assert kept["from"] == first and len(got) == end - first
    assert got == web.ring("flood", first, end), "the browser's bytes differ from the session's"
    web.same_screen("flood")
    sessions.stop("flood")
