"""``make demo`` as a new user meets it: it shows a session working, then leaves one running, says how
to attach to it and stop it, and that advice works in a real terminal."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pexpect
from support.sessions import files_in

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 20.0


def _env(directory: Path) -> dict[str, str]:
    env = dict(os.environ, SHELLPER_DIR=str(directory), SHELL="/bin/sh", PS1="demo$ ", ENV="")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def test_demo_leaves_one_session_and_says_how_to_attach_and_stop(cli_runtime_dir: Path) -> None:
    env = _env(cli_runtime_dir)
    done = subprocess.run([sys.executable, "-m", "shellper.cli.demo"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "logs/ (the stopped sessions' logs: crashy.log, demo.log); nothing else left behind" in done.stdout
    assert not re.search(r"\b[0-9a-f]{2}( [0-9a-f]{2}){7}", done.stdout), "a wire hex dump in the demo"
    attach = re.search(r"^    (\S.*) attach (demo)$", done.stdout, re.M)
    stop = re.search(r"When you are done:  (.*) stop (demo)$", done.stdout, re.M)
    assert attach and stop, done.stdout
    assert files_in(cli_runtime_dir) == ["demo.json", "demo.lock", "demo.log", "demo.sock"]

    # The advice, followed in a real terminal: attach, type, Ctrl-\ detaches, attach again, stop.
    argv = shlex.split(attach.group(1))
    for _ in range(2):
        term = pexpect.spawn(argv[0], [*argv[1:], "attach", "demo"], cwd=str(REPO), env=env, timeout=TIMEOUT)
        term.sendline("echo $((6*7))")
        term.expect("42")
        term.send("\x1c")
        term.expect(pexpect.EOF)
        term.close()
        assert term.exitstatus == 0
    stopped = subprocess.run([*shlex.split(stop.group(1)), "stop", "demo"], capture_output=True, text=True,
                             timeout=60, env=env, cwd=REPO)
    assert stopped.returncode == 0, stopped.stderr
    assert not list(cli_runtime_dir.glob("demo.sock"))


def test_a_second_demo_takes_the_next_free_name(cli_runtime_dir: Path) -> None:
    env = _env(cli_runtime_dir)
    (cli_runtime_dir / "demo.json").write_text("{}")  # someone's session holds the name
    done = subprocess.run([sys.executable, "-m", "shellper.cli.demo"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"attach demo-2$", done.stdout, re.M), done.stdout
    assert (cli_runtime_dir / "demo-2.sock").exists()


def test_the_protocol_demo_shows_every_frame_encoded_and_decoded() -> None:
    done = subprocess.run([sys.executable, "-m", "shellper.cli.demo", "--protocol"], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    for frame in ("HELLO", "DATA", "RESIZE", "SIGNAL", "GAP", "STOP"):
        assert re.search(rf"^  {frame}\s+\d+ bytes  [0-9a-f]{{2}} ", done.stdout, re.M), (frame, done.stdout)
