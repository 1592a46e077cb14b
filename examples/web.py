"""Any session in a browser tab: tower_client.web under uvicorn, with the xterm.js page beside it.

    pip install 'shellper-pty[web]'; make web-client      # uvicorn + websockets; xterm.js from clients/web's lock
    python examples/web.py [--dir RUNTIME_DIR] [--port 8022] [--read-only]
    # then open http://127.0.0.1:8022/?session=NAME  (&role=viewer to watch only, &cols=80&rows=24 to fix the size)

It listens on 127.0.0.1 only: whoever reaches it types into your sessions. To serve others, put it behind the
login of your own application (``WebTerminal(authorize=...)`` sees the request) and TLS.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import uvicorn

from tower_client import WebTerminal

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "web"
STATIC = {  # what the page loads, by name: nothing else is served from disk
    "xterm.js": (CLIENT / "node_modules/@xterm/xterm/lib/xterm.js", b"text/javascript"),
    "xterm.css": (CLIENT / "node_modules/@xterm/xterm/css/xterm.css", b"text/css"),
    "addon-fit.js": (CLIENT / "node_modules/@xterm/addon-fit/lib/addon-fit.js", b"text/javascript"),
    "shellper-web.js": (CLIENT / "shellper-web.js", b"text/javascript"),
}
PAGE = Path(__file__).resolve().parent / "web" / "index.html"


def make_app(runtime_dir: str | None, *, read_only: bool = False) -> Any:
    """The page, its scripts and the websockets under /ws/: a router of three routes, in plain ASGI (a
    Starlette or FastAPI application would mount the WebTerminal the same way)."""
    terminal = WebTerminal(runtime_dir, roles=("viewer",) if read_only else ("terminal", "viewer"))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await terminal(scope, receive, send)
            return
        path = scope["path"]
        if path == "/":
            found: tuple[Path, bytes] | None = (PAGE, b"text/html; charset=utf-8")
        else:
            found = STATIC.get(path.removeprefix("/static/")) if path.startswith("/static/") else None
        if found is None or not found[0].is_file():
            await terminal(scope, receive, send)  # its 404
            return
        body = found[0].read_bytes()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", found[1]), (b"cache-control", b"no-cache")]})
        await send({"type": "http.response.body", "body": body})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="the sessions' runtime directory (default: shellper's)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8022)
    parser.add_argument("--read-only", action="store_true", help="viewers only: nobody types")
    args = parser.parse_args()
    if not STATIC["xterm.js"][0].is_file():
        parser.exit(2, f"xterm.js is not installed: make web-client (npm ci in {CLIENT})\n")
    uvicorn.run(make_app(args.dir, read_only=args.read_only), host=args.host, port=args.port,
                log_level="warning", ws="websockets-sansio", lifespan="off")


if __name__ == "__main__":
    main()
