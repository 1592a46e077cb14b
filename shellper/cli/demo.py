"""``make demo``: a real session, shown working, then stopped with nothing left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shellper.protocol import wire


def _say(text: str) -> None:
    print(f"\n\033[1m$ {text}\033[0m", flush=True)


def _cli(directory: str, *args: str, check: bool = True) -> str:
    cmd = [sys.executable, "-m", "shellper.cli", "--dir", directory, *args]
    _say("shellper " + " ".join(args))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    out = done.stdout + done.stderr
    print(out.rstrip())
    if check and done.returncode != 0:
        raise SystemExit(f"demo: `{' '.join(args)}` failed with status {done.returncode}")
    return out


def _wait_for(directory: str, name: str, needle: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    cmd = [sys.executable, "-m", "shellper.cli", "--dir", directory, "tail", name, "--plain"]
    while True:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
        if needle in out:
            return out
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: {needle!r} never appeared in the output of {name}")
        time.sleep(0.05)  # polling a person-facing CLI with a deadline


def show_protocol() -> None:
    print("\033[1mThe wire protocol: every frame type, encoded and decoded back\033[0m")
    frames: list[wire.Frame] = [
        wire.Hello(version=wire.PROTOCOL_VERSION, role="tower", resume_from=1024, client="demo"),
        wire.Data(b"ls -l\r"),
        wire.Resize(cols=120, rows=40),
        wire.Signal(signal="INT"),
        wire.Ping(nonce=1), wire.Pong(nonce=1),
        wire.Gap(offset=9000, missed=512),
        wire.Stop(grace=2.0),
    ]
    for frame in frames:
        raw = wire.encode(frame)
        back = wire.decode_all(raw)[0]
        assert back == frame
        hexed = raw.hex(" ")
        print(f"  {frame.TYPE.name:<8} {len(raw):>4} bytes  {hexed[:60]}{'…' if len(hexed) > 60 else ''}")


def main() -> int:
    show_protocol()
    directory = tempfile.mkdtemp(prefix="shellper-demo-", dir="/tmp")
    os.chmod(directory, 0o700)
    name = "demo"
    try:
        _cli(directory, "run", name, "--cols", "100", "--rows", "30", "--", "bash", "--norc", "--noprofile", "-i")
        _cli(directory, "send", name, "echo hello from $SHELLPER_SESSION; tput cols; tput lines", "--enter")
        _wait_for(directory, name, "hello from demo")
        _cli(directory, "tail", name, "--plain")
        _cli(directory, "ls")
        _cli(directory, "send", name, "sh -c 'echo oops >&2; exit 3'", "--enter")
        _cli(directory, "send", name, "exit 0", "--enter")
        _wait_for(directory, name, "clean exit")
        _cli(directory, "status", name)
        _cli(directory, "stop", name)
        # A child that can never succeed: the shellper gives up on its own and says why.
        _cli(directory, "run", "crashy", "--backoff-initial", "0.05", "--min-uptime", "5", "--breaker-count", "3",
             "--", "sh", "-c", "echo 'cannot open config: /etc/agent.toml' >&2; exit 1")
        _wait_for(directory, "crashy", "crash loop")
        _cli(directory, "ls")
        _cli(directory, "tail", "crashy", "--plain")
        _cli(directory, "stop", "crashy")
        left = sorted(p.name for p in Path(directory).iterdir())
        _say(f"ls {directory}")
        print("(empty: nothing left behind)" if not left else "\n".join(left))
        return 0 if not left else 1
    finally:
        if Path(directory).exists() and any(Path(directory).iterdir()):
            subprocess.run([sys.executable, "-m", "shellper.cli", "--dir", directory, "stop", name],
                           capture_output=True, timeout=60)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
