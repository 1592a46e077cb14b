"""``make demo``: a real session, shown working and stopped, then one left running for you to attach to.

``python -m shellper.cli.demo --protocol`` shows the wire protocol's frames encoded and decoded instead.
"""

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
        wire.Hello(version=wire.PROTOCOL_VERSION, role=wire.Role.TOWER, resume_from=1024, client="demo"),
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


def _shellper_command() -> str:
    """How the person who ran the demo starts ``shellper``: the script beside this interpreter, else ``-m``."""
    script = Path(sys.executable).with_name("shellper")
    if not script.exists():
        return f"{sys.executable} -m shellper"
    relative = os.path.relpath(script)
    return relative if not relative.startswith("..") else str(script)


def _free_name(directory: str) -> str:
    """``demo``, or ``demo-2``, ... when an earlier demo's session (or anyone's) holds the name."""
    for n in range(1, 100):
        name = "demo" if n == 1 else f"demo-{n}"
        if not any(os.path.lexists(os.path.join(directory, f"{name}.{kind}")) for kind in ("sock", "json", "lock")):
            return name
    raise SystemExit(f"demo: demo .. demo-99 are all taken in {directory}")


def leave_one_running() -> str:
    """Start a shell in the user's own runtime directory and say how to attach to it and stop it."""
    from shellper.host.paths import runtime_dir

    directory = runtime_dir()
    name = _free_name(directory)
    shell = os.environ.get("SHELL") or "/bin/sh"
    cmd = [sys.executable, "-m", "shellper", "run", name, "--", shell]
    _say("shellper " + " ".join(cmd[3:]))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    print((done.stdout + done.stderr).rstrip())
    if done.returncode != 0:
        raise SystemExit(f"demo: could not leave a session running (status {done.returncode})")
    shellper = _shellper_command()
    print(f"\n\033[1mA session named {name} is left running for you ({shell}). Attach to it with:\033[0m\n"
          f"\n    {shellper} attach {name}\n\n"
          f"Ctrl-\\ detaches (the shell keeps running; attach again to come back).\n"
          f"When you are done:  {shellper} stop {name}", flush=True)
    return name


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--protocol"]:
        show_protocol()
        return 0
    if args:
        print("usage: python -m shellper.cli.demo [--protocol]", file=sys.stderr)
        return 2
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
        # The warm launcher's files (.launcher.*) go with it: it exits when the directory is removed, below.
        left = sorted(p.name for p in Path(directory).iterdir()
                      if p.name != "logs" and not p.name.startswith(".launcher."))
        _say(f"ls {directory}")
        kept = sorted(p.name for p in Path(directory, "logs").iterdir())
        print(f"logs/ (the stopped sessions' logs: {', '.join(kept)}); nothing else left behind" if not left
              else "\n".join(left))
        if left:
            return 1
    finally:
        if Path(directory).exists() and any(Path(directory).iterdir()):
            subprocess.run([sys.executable, "-m", "shellper.cli", "--dir", directory, "stop", name],
                           capture_output=True, timeout=60)
        shutil.rmtree(directory, ignore_errors=True)
    leave_one_running()
    return 0


if __name__ == "__main__":
    sys.exit(main())
