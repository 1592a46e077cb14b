"""A real headless Chromium for tests and benchmarks, driven over the W3C WebDriver HTTP protocol, and a TCP proxy
that can cut every connection through it (a network drop the test controls).

WebDriver is spoken directly (urllib and JSON: five endpoints) rather than through selenium: no test dependency,
and nothing that tries to download a driver. Chromium and chromedriver are Debian's (``apt-get install chromium
chromium-driver``; the Makefile does as root); ``missing()`` says what is not there, for a skip.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.paths import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
XTERM = ROOT / "clients" / "web" / "node_modules" / "@xterm" / "xterm" / "lib" / "xterm.js"


def missing() -> str | None:
    """Why a browser test cannot run here, or None."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        return "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
    if not XTERM.is_file():
        return "xterm.js is not installed (make web-client: npm ci in clients/web)"
    try:
        import uvicorn  # noqa: F401
        import websockets  # noqa: F401
    except ImportError:
        return "the web extra is not installed (pip install -e '.[web]')"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on port {port} after {timeout:g} s") from None
            time.sleep(0.05)


class Browser:
    """One chromedriver and the headless Chromium it starts. ``spawn`` starts the driver (the caller's, so that
    its teardown ends it and its tree, Chromium included)."""

    def __init__(self, spawn: Callable[[list[str]], subprocess.Popen[bytes]], profile: Path) -> None:
        assert CHROMEDRIVER is not None and CHROMIUM is not None
        self.port = free_port()
        self.driver = spawn([CHROMEDRIVER, f"--port={self.port}", "--log-level=SEVERE"])
        wait_listening(self.port)
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-extensions", "--no-first-run", "--window-size=1000,700", f"--user-data-dir={profile}"]
        reply = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}})
        self.session = reply["sessionId"]

    def _call(self, method: str, path: str, body: Any = None, timeout: float = 60.0) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())["value"]

    def get(self, url: str) -> None:
        self._call("POST", f"/session/{self.session}/url", {"url": url})

    def refresh(self) -> None:
        self._call("POST", f"/session/{self.session}/refresh", {})

    def js(self, script: str, *args: Any) -> Any:
        """The value of ``script`` (a function body: ``return ...``) run in the page."""
        return self._call("POST", f"/session/{self.session}/execute/sync", {"script": script, "args": list(args)})

    def js_async(self, script: str, *args: Any, timeout: float = 60.0) -> Any:
        """``script`` run in the page with a callback as its last argument; the value it is called with."""
        self._call("POST", f"/session/{self.session}/timeouts", {"script": int(timeout * 1000)})
        return self._call("POST", f"/session/{self.session}/execute/async", {"script": script, "args": list(args)},
                          timeout=timeout + 10)

    def type(self, text: str) -> None:
        """Keystrokes, as a person's, into the focused element (xterm.js's textarea)."""
        element = self._call("POST", f"/session/{self.session}/element",
                             {"using": "css selector", "value": ".xterm-helper-textarea"})
        key = next(iter(element.values()))
        self._call("POST", f"/session/{self.session}/element/{key}/value", {"text": text})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._call("DELETE", f"/session/{self.session}", timeout=20)


class Proxy:
    """127.0.0.1:port -> 127.0.0.1:target, a thread per direction; ``drop()`` cuts every connection at once, as a
    network that goes away does (both sides see their socket end)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.closed = False
        self.downstream = 0
        """Bytes passed on from the target so far."""
        self.cut_at: int | None = None
        self.cuts = 0
        self._start(self._accept)

    def _start(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self.listener.accept()
            except OSError:
                return
            try:
                far = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                near.close()
                continue
            with self.lock:
                if self.closed:
                    near.close()
                    far.close()
                    return
                self.open += [near, far]
            self._start(self._copy, near, far, False)
            self._start(self._copy, far, near, True)

    def _copy(self, source: socket.socket, sink: socket.socket, downstream: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
                if downstream:
                    with self.lock:
                        self.downstream += len(data)
                        cut = self.cut_at is not None and self.downstream >= self.cut_at
                        if cut:
                            self.cut_at = None
                    if cut:
                        self.cuts += self.drop()
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut_after(self, count: int) -> None:
        """Drop every connection once ``count`` more bytes have come from the target (``cuts`` counts them):
        in the middle of a flood, whatever the browser's main thread is busy with."""
        with self.lock:
            self.cut_at = self.downstream + count

    def drop(self) -> int:
        """Cut every connection now open; how many there were."""
        with self.lock:
            cut, self.open = self.open, []
        for s in cut:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return len(cut) // 2

    def close(self) -> None:
        with self.lock:
            self.closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        self.listener.close()
        self.drop()
        for thread in self.threads:
            thread.join(5)
