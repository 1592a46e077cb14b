"""The browser terminal's figures: ``python -m bench.web`` (needs chromium, chromium-driver, the web extra and
``make web-client``; tests/support/browser.py drives the browser).

* keystroke to echo: the page sends a key over its websocket (as xterm.js's onData does) to a session running
  ``cat``; the time until xterm.js has parsed the echo (``onWriteParsed``), p50 and p99;
* flood into the browser: a session writes FLOOD bytes of 76-column lines (base64 text) as fast as the page,
  a terminal that the session waits for, takes them; MiB/s from the key that starts it to the last byte
  parsed, and the server process's CPU per MiB;
* the message format: decoding a 64 KiB output message in the page as this protocol's binary header vs JSON
  with base64 (the other obvious choice), and encoding it in Python.

The server is examples/web.py (uvicorn) or, with ``--server hypercorn`` (pip install hypercorn), the same ASGI
app under hypercorn; ``--server bare`` is the page with no session behind it, ``direct`` a plain client.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.browser import Browser, free_port, missing, wait_listening
from support.sessions import Sessions, private_dir

from shellper.client.blocking import Client

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20
FLOOD = 16 * MiB
KEYS = 300
FLOOD_CHILD = ("import base64, os, sys\n"
               "line = base64.b64encode(os.urandom(57 * 64 * 16))\n"
               "block = b''.join(line[i:i + 76] + b'\\r\\n' for i in range(0, len(line), 76))\n"
               "while sys.stdin.readline():\n"
               "    left = int(sys.argv[1])\n"
               "    while left > 0:\n"
               "        os.write(1, block[:left])\n"
               "        left -= len(block)\n"
               "    os.write(1, b'FLOOD-DONE\\r\\n')\n")

ECHO_JS = """
const n = arguments[0], done = arguments[arguments.length - 1], w = window.shellperWeb;
const times = [];
let t0 = 0, waiting = false, i = 0;
const sub = w.term.onWriteParsed(() => {
  if (!waiting) return;
  waiting = false;
  times.push(performance.now() - t0);
  setTimeout(next, 5);
});
function next() {
  if (i >= n) { sub.dispose(); done(times); return; }
  const key = i % 2 === 0 ? 'a' : '\\x7f';  // a key, then DEL: the line never grows
  i += 1;
  waiting = true;
  t0 = performance.now();
  w.send(key);
}
next();
"""

FLOOD_START_JS = """
const w = window.shellperWeb;
window.__flood = {start: performance.now(), from: w.state.offset, last: null, messages: w.state.messages};
window.__floodSub = w.term.onWriteParsed(() => { window.__flood.last = performance.now(); });
w.send('\\r');
return window.__flood.from;
"""

FORMAT_JS = """
const size = arguments[0], rounds = arguments[1];
const payload = new Uint8Array(size);
for (let i = 0; i < size; i++) payload[i] = 32 + (i * 7) % 90;
const binary = new Uint8Array(size + 9); binary.set(payload, 9);
let text = '';
for (let i = 0; i < size; i += 0x8000) text += String.fromCharCode.apply(null, payload.subarray(i, i + 0x8000));
const json = JSON.stringify({offset: 123456789, data: btoa(text)});
let sink = 0;
let t = performance.now();
for (let r = 0; r < rounds; r++) {
  const view = new DataView(binary.buffer);
  const offset = view.getUint32(1) * 4294967296 + view.getUint32(5);
  const data = new Uint8Array(binary.buffer, 9);
  sink += offset + data[size - 1];
}
const bin = (performance.now() - t) / rounds;
t = performance.now();
for (let r = 0; r < rounds; r++) {
  const m = JSON.parse(json);
  const s = atob(m.data);
  const data = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) data[i] = s.charCodeAt(i);
  sink += m.offset + data[size - 1];
}
const js = (performance.now() - t) / rounds;
return {binary_ms: bin, json_ms: js, sink: sink, json_bytes: json.length};
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ring_end(sessions: Sessions, name: str) -> int:
    with Client(sessions.dir / f"{name}.sock", "viewer", client_name="bench") as client:
        welcome = client.connect(replay_bytes=0)
        return welcome.ring_end


def ring_tail(sessions: Sessions, name: str, size: int) -> bytes:
    with Client(sessions.dir / f"{name}.sock", "viewer", client_name="bench") as client:
        client.connect(replay_bytes=size)
        return client.replay.data if client.replay is not None else b""


def bare_app(directory: str) -> Any:
    """The ceiling: examples/web.py's page, and a websocket that speaks protocol/WEB.md with no session behind
    it, sending FLOOD bytes of the same lines, 64 KiB a message, as fast as the browser takes them (after
    the key that starts the flood). What is left is the websocket, the browser and xterm.js."""
    sys.path.insert(0, str(ROOT / "examples"))
    import web  # type: ignore[import-not-found]

    page = web.make_app(directory)
    line = base64.b64encode(os.urandom(57 * 64 * 16))
    block = b"".join(line[i:i + 76] + b"\r\n" for i in range(0, len(line), 76))
    header = struct.Struct(">BQ")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await page(scope, receive, send)
            return
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps({"type": "welcome", "name": "bare", "instance": "x",
                                                                   "role": "terminal", "cols": 80, "rows": 24})})
        await send({"type": "websocket.send", "bytes": header.pack(1, 0)})
        offset = 0
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            end = offset + FLOOD
            while offset < end:
                chunk = block[:min(len(block), end - offset, 65536)]
                await send({"type": "websocket.send", "bytes": header.pack(0, offset) + chunk})
                offset += len(chunk)

    return app


def server_argv(server: str, directory: Path, port: int) -> list[str]:
    if server == "bare":
        code = ("import sys, uvicorn; from bench.web import bare_app;"
                " uvicorn.run(bare_app(sys.argv[1]), host='127.0.0.1', port=int(sys.argv[2]),"
                " log_level='warning', ws='websockets-sansio', lifespan='off')")
        return [sys.executable, "-c", code, str(directory), str(port)]
    if server == "uvicorn":
        return [sys.executable, "examples/web.py", "--dir", str(directory), "--port", str(port)]
    code = ("import asyncio, sys; sys.path.insert(0, 'examples'); import web; from hypercorn.config import Config;"
            " from hypercorn.asyncio import serve; c = Config(); c.bind = [f'127.0.0.1:{sys.argv[2]}'];"
            " asyncio.run(serve(web.make_app(sys.argv[1]), c))")
    return [sys.executable, "-c", code, str(directory), str(port)]


def run(server: str, runs: int) -> dict[str, Any]:
    directory = private_dir("bw-")
    profile = private_dir("bw-chromium-")
    sessions = Sessions(directory, strict=False)
    try:
        sessions.start("echo", ["cat"], cols=80, rows=24)
        sessions.start("flood", [sys.executable, "-c", FLOOD_CHILD, str(FLOOD)], cols=80, rows=24)
        port = free_port()
        proc = sessions.spawn(server_argv(server, directory, port), cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        wait_listening(port)
        browser = Browser(lambda argv: sessions.spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                          profile)
        try:
            page = f"http://127.0.0.1:{port}/?role=terminal&cols=80&rows=24&session="
            browser.get(page + "echo")
            wait(lambda: browser.js("return window.shellperWeb.state.connected"))
            if server != "bare":
                browser.js_async(ECHO_JS, 40)  # warm up
            echo: list[float] = []
            for _ in range(runs if server != "bare" else 0):
                echo += browser.js_async(ECHO_JS, KEYS)
            floods = []
            for _ in range(runs):
                browser.get(page + "flood")
                wait(lambda: browser.js("return window.shellperWeb.state.connected"))
                floods.append(flood_once(browser, sessions, proc.pid, server == "bare"))
            formats = browser.js(FORMAT_JS, 64 * 1024, 200)
        finally:
            browser.close()
        return {"server": server, "echo_ms_p50": percentile(echo, 0.5) if echo else None,
                "echo_ms_p99": percentile(echo, 0.99) if echo else None,
                "keys": len(echo), "floods": floods, "format_64k": formats}
    finally:
        sessions.cleanup()
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(profile, ignore_errors=True)


def flood_once(browser: Browser, sessions: Sessions, server_pid: int, bare: bool) -> dict[str, float]:
    """One FLOOD into the page (a terminal, so the session waits for it): MiB/s, server CPU per MiB."""
    cpu = cpu_seconds(server_pid)
    start: int = browser.js(FLOOD_START_JS)
    end: int = start + FLOOD if bare else wait(
        lambda: (e := ring_end(sessions, "flood")) > start + FLOOD
        and b"FLOOD-DONE" in ring_tail(sessions, "flood", 64) and e, timeout=600)
    wait(lambda: browser.js("return window.shellperWeb.state.offset") >= end, timeout=600)
    flood = browser.js("window.__floodSub.dispose(); window.__flood.messages ="
                       " window.shellperWeb.state.messages - window.__flood.messages; return window.__flood;")
    cpu = cpu_seconds(server_pid) - cpu
    mib = (end - start) / MiB
    return {"mib_s": mib / ((flood["last"] - flood["start"]) / 1000), "server_cpu_s_per_mib": cpu / mib,
            "gaps_redrawn": browser.js("return window.shellperWeb.state.draws") - 1,
            "kib_per_message": (end - start) / 1024 / max(1, flood["messages"])}


def direct(runs: int) -> dict[str, Any]:
    """The same flood read by a plain terminal client (no server, no browser): what the session alone delivers
    in the same minutes, the bound on what any browser path can get."""
    directory = private_dir("bw-")
    sessions = Sessions(directory, strict=False)
    rates = []
    try:
        sessions.start("flood", [sys.executable, "-c", FLOOD_CHILD, str(FLOOD)], cols=80, rows=24)
        for _ in range(runs):
            with Client(directory / "flood.sock", "terminal", client_name="bench") as client:
                client.connect(replay_bytes=0)
                began, got, tail = time.monotonic(), 0, b""
                client.write(b"\r")
                while b"FLOOD-DONE" not in tail:
                    frame = client.recv(timeout=60)
                    if frame is not None and type(frame).__name__ == "Data":
                        data = frame.data  # type: ignore[attr-defined]
                        got += len(data)
                        tail = (tail + data)[-64:]
                rates.append(got / MiB / (time.monotonic() - began))
        return {"server": "direct terminal client", "mib_s": rates}
    finally:
        sessions.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def wait(predicate: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError("bench.web: timed out")
        time.sleep(0.05)
    return value


def python_formats() -> dict[str, float]:
    """Encoding one 64 KiB output message in the server, microseconds: the binary header vs JSON + base64."""
    data = bytes(range(256)) * 256
    header = struct.Struct(">BQ")
    binary = timeit.timeit(lambda: header.pack(0, 123456789) + data, number=2000) / 2000 * 1e6
    js = timeit.timeit(lambda: json.dumps({"offset": 123456789, "data": base64.b64encode(data).decode()}),
                       number=2000) / 2000 * 1e6
    return {"binary_us": binary, "json_base64_us": js}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=("uvicorn", "hypercorn", "bare", "direct"), action="append")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    why = missing()
    if why:
        sys.exit(f"bench.web: {why}")
    print(json.dumps({"python_encode_64k": python_formats()}))
    for server in args.server or ["uvicorn"]:
        print(json.dumps(direct(args.runs) if server == "direct" else run(server, args.runs)), flush=True)


if __name__ == "__main__":
    main()
