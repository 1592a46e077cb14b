"""Legacy mode against the real thing: `shellper legacy-main` started as the original's Tower starts
shellper-main.js, version-1 clients on its socket. One test per row of the original's process and client
test catalogue that applies (../shared/reference/original.md sections 6.2, 6.3, 6.5), plus version-1 and
version-2 clients on one session and what this project adds underneath (records, `shellper ls`)."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.frames import read_until
from support.legacy import Legacy, V1Client, config, launch
from support.sessions import Sessions
from support.waiting import poll_until, wait_gone

from shellper.client.blocking import Client
from shellper.protocol import legacy, wire
from shellper.protocol.wire import FrameType

LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] \S")


def _sh(script: str) -> tuple[str, ...]:
    return ("/bin/sh", "-c", script)


# ------------------------------------------------------------------------------------------- launch


def test_launch_contract_stdout_line_socket_modes_and_command_line(legacy_env: Legacy) -> None:
    before_ms = time.time() * 1000
    s = legacy_env.start("cat")
    assert s.stdout == json.dumps({"pid": s.pid, "startTime": s.start_ms}, separators=(",", ":")).encode()
    assert s.pid == s.proc.pid  # the pid the Tower holds is the shellper's, across the re-exec
    assert before_ms - 5000 < s.start_ms <= time.time() * 1000
    assert stat.S_IMODE(os.stat(s.sock).st_mode) == 0o600 and stat.S_ISSOCK(os.stat(s.sock).st_mode)
    assert stat.S_IMODE(os.stat(legacy_env.dir).st_mode) == 0o700
    cmdline = Path(f"/proc/{s.pid}/cmdline").read_bytes().split(b"\0")
    assert b"shellper-main.js" in cmdline  # what the Tower's scanners match
    assert any(b'"socketPath":"' + str(s.sock).encode() + b'"' in arg for arg in cmdline)
    assert os.getsid(s.pid) == s.pid  # detached: a session of its own
    with legacy_env.client(s) as c:
        welcome, _ = c.hello()
        assert welcome["startTime"] == s.start_ms
    lines = s.log_text().splitlines()
    assert any(f"WELCOME sent: pid={welcome['pid']}, version=1" in line for line in lines)
    assert any("HELLO: version=1, clientType='tower'" in line for line in lines)
    assert lines and all(LOG_LINE.match(line) or line.startswith("  ") for line in lines), lines
    assert any("Shellper started: pid=" in line for line in lines)
    assert any("Socket listening: " in line for line in lines)


def test_detaches_itself_when_its_caller_did_not(legacy_env: Legacy) -> None:
    sock = legacy_env.dir / "shellper-t4.sock"
    s = launch(sock, config(sock, "cat"), new_session=False)
    legacy_env.started.append(s)
    assert os.getsid(s.pid) == s.pid != os.getsid(0)  # its own session: the caller's hang-ups do not reach it
    with legacy_env.client(s) as c:
        c.hello()


def test_spawns_pty_with_the_given_size_cwd_and_exact_env(legacy_env: Legacy, tmp_path: Path) -> None:
    s = legacy_env.start(*_sh('stty size; pwd; echo "v=$ONLY_THIS home=$HOME"; env | grep -c . ; sleep 60'),
                         cwd="/tmp", cols=123, rows=45, env={"ONLY_THIS": "yes", "PATH": "/usr/bin:/bin"})
    text = legacy_env.replay_with(s, b"v=yes").decode()
    assert "45 123" in text and "/tmp" in text and "v=yes home=\r\n" in text, text


def test_bad_configs_exit_1_with_the_reason_on_stderr(tmp_path: Path) -> None:
    for argv, needle in (([], "usage: shellper legacy-main"), (["{not json"], "Invalid JSON config"),
                         ([json.dumps({"command": "cat", "cwd": "/", "socketPath": str(tmp_path / "x.sok")})],
                          "must end in <name>.sock"),
                         ([json.dumps({"command": "cat", "cwd": "/", "socketPath": str(tmp_path / "-x.sock")})],
                          "invalid session name")):
        done = subprocess.run([sys.executable, "-m", "shellper", "legacy-main", *argv], capture_output=True,
                              timeout=30, stdin=subprocess.DEVNULL)
        assert done.returncode != 0 and done.stdout == b"", (argv, done)
        assert needle in done.stderr.decode(), (argv, done.stderr)


@pytest.mark.parametrize("missing", ["command", "cwd"])
def test_a_launch_that_cannot_start_its_command_runs_and_tells_exit_1(legacy_env: Legacy, tmp_path: Path,
                                                                     missing: str) -> None:
    # As the original: node-pty forks, the exec (or chdir) fails in the child, which exits 1. The Tower gets
    # its launch line and its session, and then an EXIT, never a bare "Invalid shellper info JSON".
    gone = tmp_path / "deleted-worktree"
    s = (legacy_env.start("/nonexistent/program") if missing == "command"
         else legacy_env.start("cat", cwd=gone))
    assert s.log.exists()  # the file the Tower opened as our stderr is still there, and says why
    with legacy_env.client(s) as c:
        welcome, replay = c.hello()
        assert welcome["pid"] == -1 and replay == b""
        assert c.exit_frame() == {"code": 1, "signal": "0"}
    assert s.proc.poll() is None  # a husk, as after any exit: it stays until SIGTERM or SPAWN
    text = s.log_text()
    assert "PTY exited: code=1, signal=0" in text and ("/nonexistent/program" if missing == "command"
                                                       else str(gone)) in text, text


def test_a_stale_socket_file_is_replaced(legacy_env: Legacy) -> None:
    import socket as socketmod

    legacy_env.dir.mkdir(mode=0o700, parents=True)
    stale = socketmod.socket(socketmod.AF_UNIX)
    stale.bind(str(legacy_env.dir / "shellper-t1.sock"))
    stale.close()
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        c.hello()


# ------------------------------------------------------------------------------------------- connection


def test_hello_welcome_replay_with_the_buffer(legacy_env: Legacy) -> None:
    s = legacy_env.start(*_sh("echo first-output; exec cat"), cols=100, rows=30)
    legacy_env.replay_with(s, b"first-output")
    with legacy_env.client(s) as c:
        welcome, replay = c.hello()
        assert set(welcome) == {"version", "pid", "cols", "rows", "startTime", "lastDataAt", "alwaysSendsReplay"}
        assert welcome["version"] == 1 and welcome["alwaysSendsReplay"] is True
        assert (welcome["cols"], welcome["rows"]) == (100, 30)
        assert welcome["pid"] != s.pid and Path(f"/proc/{welcome['pid']}").exists()  # the child's pid
        assert welcome["lastDataAt"] >= welcome["startTime"]
        assert b"first-output" in replay


def test_an_empty_replay_is_sent_when_nothing_was_output(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        welcome, replay = c.hello()
        assert replay == b"" and welcome["lastDataAt"] == welcome["startTime"]


def test_replay_is_capped_to_the_newest_8_mib(legacy_env: Legacy) -> None:
    # 9 MiB without a newline, retention 16 MiB: REPLAY is exactly the newest 8 MiB
    s = legacy_env.start(sys.executable, "-c", "import sys,time; sys.stdout.write('x' * (9 << 20) + 'END'); "
                         "sys.stdout.flush(); time.sleep(60)", replayBufferBytes=16 << 20)
    replay = legacy_env.replay_with(s, b"END")
    assert len(replay) == 8 << 20 and replay.endswith(b"xEND")


def test_new_tower_replaces_old_tower_but_not_terminal(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as t1, legacy_env.client(s) as term, legacy_env.client(s) as t2:
        t1.hello("tower")
        term.hello("terminal")
        t2.hello(None)  # no clientType: a tower
        t1.wait_closed()
        term.ping()
        t2.ping()
    assert "Replacing existing tower connection" in s.log_text()


# ------------------------------------------------------------------------------------------- data, resize, signal


def test_data_both_ways_and_broadcast_to_every_client(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as tower, legacy_env.client(s) as term:
        tower.hello()
        term.hello("terminal")
        tower.send(FrameType.DATA, b"from-tower\n")
        # A PING's PONG: the tower's input was handled before the terminal's (two sockets read in one wakeup
        # come in any order). The echo of it may come before the PONG: kept, not dropped as ping() would.
        tower.send(FrameType.PING)
        early = bytearray()
        while (frame := tower.next_frame()).frame_type != FrameType.PONG:
            if frame.frame_type == FrameType.DATA:
                early += frame.payload
        term.send(FrameType.DATA, b"from-terminal\n")
        for c, before in ((tower, bytes(early)), (term, b"")):
            out = before + c.output_until(b"from-terminal\r\n")
            assert b"from-tower" in out


def test_resize_resizes_the_pty(legacy_env: Legacy) -> None:
    s = legacy_env.start(*_sh("while read line; do stty size; done"))  # not interactive: SIGTERM ends it
    with legacy_env.client(s) as c:
        c.hello("terminal")
        c.send(FrameType.RESIZE, {"cols": 132, "rows": 43})
        c.send(FrameType.DATA, b"size?\n")
        c.output_until(b"43 132")
    with legacy_env.client(s) as c:
        welcome, _ = c.hello()
        assert (welcome["cols"], welcome["rows"]) == (132, 43)


def test_allowed_signal_is_forwarded_and_exit_reports_it(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        c.hello()
        c.send(FrameType.SIGNAL, {"signal": 15})
        assert c.exit_frame() == {"code": 0, "signal": "15"}  # as node-pty reported a signal death


def test_disallowed_signal_is_refused_and_the_connection_stays(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        welcome, _ = c.hello()
        c.send(FrameType.SIGNAL, {"signal": 10})  # SIGUSR1: not in the allowed set
        c.ping()
        assert Path(f"/proc/{welcome['pid']}").exists()
        assert not [f for f in c.quiet_for(0.2) if f.frame_type == FrameType.EXIT]
    assert "Protocol error: signal 10 is not allowed" in s.log_text()


def test_terminal_signal_and_spawn_are_ignored(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as term:
        welcome, _ = term.hello("terminal")
        term.send(FrameType.SIGNAL, {"signal": 9})
        term.send(FrameType.SPAWN, {"command": "/bin/echo", "args": ["spawned"], "cwd": "/", "env": {}})
        term.ping()
        term.send(FrameType.DATA, b"still-cat\n")
        out = term.output_until(b"still-cat\r\n")
        assert b"spawned" not in out
    with legacy_env.client(s) as c:
        assert c.hello()[0]["pid"] == welcome["pid"]


# ------------------------------------------------------------------------------------------- exit


def test_exit_is_sent_and_replayed_to_a_late_connection_and_the_shellper_stays(legacy_env: Legacy) -> None:
    s = legacy_env.start(*_sh("read x; echo bye; exit 3"))
    with legacy_env.client(s) as c:
        welcome, _ = c.hello()
        c.send(FrameType.DATA, b"go\n")
        assert c.exit_frame() == {"code": 3, "signal": "0"}
        # nothing after it: a Tower that saw output after an EXIT would take the child for running again
        assert [f.frame_type for f in c.quiet_for(0.3)] == []
    with legacy_env.client(s) as late:
        late_welcome, replay = late.hello()  # WELCOME, REPLAY, then the retained EXIT (#905)
        # the dead child's pid, as node-pty's outlived its process in the original; not -1
        assert late_welcome["pid"] == welcome["pid"] > 0 and b"bye" in replay
        assert late.next_frame().frame_type == FrameType.EXIT
    assert s.proc.poll() is None  # a husk: it stays until SIGTERM or SPAWN
    text = s.log_text()
    assert "EXIT replayed to late connection" in text and "PTY exited: code=3, signal=0" in text, text


def test_the_retained_exit_waits_until_the_handshake_is_read(legacy_env: Legacy) -> None:
    # The original's Tower subscribes to exits only once connect() resolves on the WELCOME: an EXIT it reads
    # together with the handshake is lost (bench/NOTES.md). So the retained EXIT is sent once the client has
    # read the WELCOME and REPLAY, never into the same read.
    s = legacy_env.start(*_sh("echo bye; exit 3"))
    poll_until(lambda: "PTY exited: code=3" in s.log_text(), what="the child's exit")
    with legacy_env.client(s) as c:
        c.send(FrameType.HELLO, {"version": 1, "clientType": "tower"})

        def handshake_arrived() -> int | None:  # peeked, not read: the shellper must see it unread
            c.sock.settimeout(10)
            data = c.sock.recv(1 << 16, socket.MSG_PEEK)
            types = [f.frame_type for f in legacy.FrameReader().feed(data) if isinstance(f, legacy.RawFrame)]
            assert types in ([FrameType.WELCOME], [FrameType.WELCOME, FrameType.REPLAY]), types  # no EXIT with them
            return len(data) if len(types) == 2 else None

        size = poll_until(handshake_arrived, what="WELCOME and REPLAY")
        deadline = time.monotonic() + 0.3  # unread, nothing follows them: the EXIT waits
        while time.monotonic() < deadline:
            assert len(c.sock.recv(1 << 16, socket.MSG_PEEK)) == size
        welcome, _ = c.hello_frames()
        assert welcome["pid"] > 0 and c.exit_frame() == {"code": 3, "signal": "0"}


def test_exit_broadcast_to_every_client(legacy_env: Legacy) -> None:
    s = legacy_env.start(*_sh("read line; exit 0"))
    with legacy_env.client(s) as tower, legacy_env.client(s) as term:
        tower.hello()
        term.hello("terminal")
        term.send(FrameType.DATA, b"go\n")
        assert tower.exit_frame() == term.exit_frame() == {"code": 0, "signal": "0"}


# ------------------------------------------------------------------------------------------- SPAWN


def test_spawn_replaces_the_child_clears_the_replay_and_hides_the_old_exit(legacy_env: Legacy) -> None:
    s = legacy_env.start(*_sh("echo old-child; exec cat"))
    legacy_env.replay_with(s, b"old-child")
    with legacy_env.client(s) as c:
        welcome, _ = c.hello()
        old_pid = welcome["pid"]
        c.send(FrameType.SPAWN, {"command": "/bin/sh", "args": ["-c", "echo new-child; exec cat"], "cwd": "/tmp",
                                  "env": {"PATH": "/usr/bin:/bin"}})
        out = c.output_until(b"new-child")
        assert b"old-child" not in out
        frames = c.quiet_for(0.2)
        assert not [f for f in frames if f.frame_type == FrameType.EXIT]  # the replaced child's exit is not told
    assert wait_gone(old_pid, 10)
    assert f"SPAWN: command=/bin/sh, killing old PTY pid={old_pid}" in s.log_text()
    with legacy_env.client(s) as c:
        welcome, replay = c.hello()
        assert welcome["pid"] not in (old_pid, -1)
        assert b"new-child" in replay and b"old-child" not in replay  # cleared on SPAWN


def test_spawn_after_exit_revives_a_husk(legacy_env: Legacy) -> None:
    s = legacy_env.start(*_sh("exit 1"))
    with legacy_env.client(s) as c:
        c.hello()
        assert c.exit_frame()["code"] == 1
        c.send(FrameType.SPAWN, {"command": "/bin/echo", "args": ["again"], "cwd": "/", "env": {}})
        c.output_until(b"again")
        assert c.exit_frame() == {"code": 0, "signal": "0"}


@pytest.mark.parametrize("bad", ["command", "deleted cwd", "empty cwd"])
def test_spawn_that_cannot_start_ends_the_old_child_and_tells_exit_1(legacy_env: Legacy, tmp_path: Path,
                                                                    bad: str) -> None:
    # As the original (node-pty 1.1.0): the old child is killed, and the new one's failed exec is its exit,
    # EXIT {code: 1, signal: "0"}; a Tower restarting into a deleted worktree hears of it and can give up.
    gone = tmp_path / "worktree"
    gone.mkdir()
    spawn = {"command": "/nonexistent/program" if bad == "command" else "cat", "args": [],
             "cwd": {"command": "/", "deleted cwd": str(gone), "empty cwd": ""}[bad], "env": {}}
    gone.rmdir()
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        welcome, _ = c.hello()
        c.send(FrameType.SPAWN, spawn)
        assert c.exit_frame() == {"code": 1, "signal": "0"}  # only the new child's: the replaced one's is not told
        assert wait_gone(welcome["pid"], 10)
        c.ping()  # the connection stays
        c.send(FrameType.SPAWN, {"command": "/bin/echo", "args": ["revived"], "cwd": "/", "env": {}})
        c.output_until(b"revived")
    text = s.log_text()
    assert "PTY exited: code=1, signal=0" in text and "Protocol error" not in text, text


# ------------------------------------------------------------------------------------------- PING, errors, gating


def test_ping_pong(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        c.hello()
        c.send(FrameType.PING)
        assert c.until(FrameType.PONG).payload == b""


def test_malformed_json_closes_only_that_connection(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as bad, legacy_env.client(s) as good:
        bad.hello()
        good.hello("terminal")
        bad.send(FrameType.RESIZE, b"{not json")
        bad.wait_closed()
        good.ping()
    assert "Protocol error: Invalid RESIZE payload" in s.log_text()


def test_unknown_and_oversized_frames_are_ignored(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        c.hello()
        c.send(0x42, b"whatever")
        c.send(FrameType.REPLAY, b"not from clients")
        oversized = (16 << 20) + 1
        c.sock.sendall(bytes([0x01]) + oversized.to_bytes(4, "big") + b"y" * oversized)
        c.send(FrameType.DATA, b"after\n")
        c.output_until(b"after\r\n", 30)


def test_frames_before_hello_are_ignored(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        c.send(FrameType.SIGNAL, {"signal": 9})  # before HELLO: a JSON control frame, so version 1, ignored
        c.send(FrameType.DATA, b"pre-hello-input\n")
        c.send(FrameType.PING)
        welcome, replay = c.hello()
        assert replay == b"" and Path(f"/proc/{welcome['pid']}").exists()
        c.send(FrameType.DATA, b"post\n")
        out = c.output_until(b"post\r\n")
        assert b"pre-hello" not in out


def test_socket_closed_before_hello_leaves_the_rest_alone(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        c.send(FrameType.RESIZE, {"cols": 10, "rows": 5})
    with legacy_env.client(s) as c:
        welcome, _ = c.hello()
        assert (welcome["cols"], welcome["rows"]) == (80, 24)


def test_disconnecting_one_client_leaves_the_others(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as a, legacy_env.client(s) as b:
        a.hello("terminal")
        b.hello()
        a.close()
        b.send(FrameType.DATA, b"still\n")
        b.output_until(b"still\r\n")


def test_a_client_that_does_not_read_holds_no_one_up(legacy_env: Legacy) -> None:
    s = legacy_env.start(sys.executable, "-c", "import sys; sys.stdout.write('z' * (3 << 20) + 'DONE\\n'); "
                         "sys.stdout.flush(); sys.stdin.read()")
    with legacy_env.client(s) as stuck, legacy_env.client(s) as live:
        stuck.hello("viewer-ish")  # any clientType but tower: a terminal's rights
        live.hello("terminal")
        live.output_until(b"DONE", 60)  # the stuck one is paused, never destroyed (#313)
        stuck.ping(60)


# ------------------------------------------------------------------------------------------- SIGTERM, parent exit


def test_sigterm_kills_the_child_closes_connections_and_removes_the_socket(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as c:
        welcome, _ = c.hello()
        assert s.stop() == 0
        c.wait_closed()
    assert wait_gone(welcome["pid"], 10)
    assert not s.sock.exists()
    assert "Shellper received SIGTERM, shutting down" in s.log_text()


def test_survives_its_launcher_exiting_and_a_broken_stderr_pipe(legacy_env: Legacy) -> None:
    sock = legacy_env.dir / "shellper-t2.sock"
    r, w = os.pipe()
    stderr = os.fdopen(w, "wb")
    try:
        s = launch(sock, config(sock, "cat"), stderr=stderr)
    finally:
        stderr.close()
    legacy_env.started.append(s)
    os.close(r)  # the reader of its stderr is gone: every log line now meets EPIPE (#324)
    for _ in range(3):
        with legacy_env.client(s) as c:
            c.hello()
            c.send(FrameType.DATA, b"alive\n")
            c.output_until(b"alive\r\n")
    assert s.proc.poll() is None


def test_survives_the_parent_that_launched_it(legacy_env: Legacy) -> None:
    sock = legacy_env.dir / "shellper-t3.sock"
    script = ("import subprocess,sys; p=subprocess.Popen([sys.executable,'-m','shellper','legacy-main',"
              "sys.argv[1]],stdin=subprocess.DEVNULL,stdout=subprocess.PIPE,stderr=open(sys.argv[2],'ab'),"
              "start_new_session=True); print(p.stdout.read().decode())")
    legacy_env.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", script, json.dumps(config(sock, "cat")),
                           str(sock.with_suffix(".log"))], capture_output=True, timeout=60, check=True)
    pid = json.loads(done.stdout)["pid"]
    try:
        with V1Client(sock) as c:
            c.hello()
            c.send(FrameType.DATA, b"orphaned-but-fine\n")
            c.output_until(b"orphaned-but-fine\r\n")
        assert "HELLO: version=1, clientType='tower'" in sock.with_suffix(".log").read_text()
    finally:
        os.kill(pid, 15)
        assert wait_gone(pid, 20)


# ------------------------------------------------------------------------------------------- with version 2, underneath


def test_version_1_and_version_2_clients_share_a_session(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as v1:
        v1.hello()
        with Client(s.sock, "terminal", client_name="v2") as v2:
            v2.connect()
            v1.send(FrameType.DATA, b"typed-by-v1\n")
            read_until(v2, b"typed-by-v1\r\n")
            v2.send(wire.Data(b"typed-by-v2\n"))
            v1.output_until(b"typed-by-v2\r\n")
            status = v2.request(wire.Status(), wire.StatusReply)
            assert isinstance(status, wire.StatusReply)
            kinds = {(c["role"], c.get("protocol_version")) for c in status.info["clients"]}
            assert ("tower", 1) in kinds and ("terminal", None) in kinds
        with Client(s.sock, "tower", client_name="v2-tower") as tower2:  # a version-2 tower replaces it
            tower2.connect()
            v1.wait_closed()


def test_the_session_underneath_is_seen_by_shellper_ls_and_status(legacy_env: Legacy) -> None:
    s = legacy_env.start(*_sh("exit 7"))
    with legacy_env.client(s) as c:
        c.hello()
        assert c.exit_frame() == {"code": 7, "signal": "0"}
    ls = subprocess.run([sys.executable, "-m", "shellper", "--dir", str(legacy_env.dir), "ls", "--json"],
                        capture_output=True, timeout=30, check=True)
    (entry,) = json.loads(ls.stdout)
    assert entry["name"] == "shellper-t1" and entry["state"] == "exited"
    st = subprocess.run([sys.executable, "-m", "shellper", "--dir", str(legacy_env.dir), "status", "shellper-t1",
                         "--json"], capture_output=True, timeout=30, check=True)
    status = json.loads(st.stdout)
    assert status["shellper_pid"] == s.pid and status["last_exit"]["code"] == 7
    assert status["last_exit"]["class"] == "crash"  # exit classification underneath
    record = json.loads((legacy_env.dir / "shellper-t1.json").read_text())
    assert record["shellper_pid"] == s.pid


def test_tower_client_sees_and_verifies_a_legacy_session_without_displacing_its_tower(legacy_env: Legacy) -> None:
    s = legacy_env.start("cat")
    with legacy_env.client(s) as tower:
        welcome, _ = tower.hello()
        done = subprocess.run([sys.executable, "-m", "tower_client.cli", "--dir", str(legacy_env.dir), "ls", "--json"],
                              capture_output=True, timeout=60, check=True)
        (entry,) = json.loads(done.stdout)
        assert (entry["name"], entry["state"], entry["identity"], entry["probe"]) == \
            ("shellper-t1", "running", "verified", "answered")
        assert entry["record"]["pid"] == s.pid and entry["child_pid"] == welcome["pid"]
        tower.ping()  # its probe was a viewer: the version-1 tower is still the tower
        tower.send(FrameType.DATA, b"still-tower\n")
        tower.output_until(b"still-tower\r\n")


def test_a_version_1_client_is_served_by_any_session_not_only_legacy_main(sessions: Sessions) -> None:
    info = sessions.start("plain", ["cat"])
    with V1Client(Path(info.socket)) as c:
        welcome, replay = c.hello("terminal")
        assert welcome["pid"] == info.child_pid and replay == b""
        c.send(FrameType.DATA, b"v1-on-a-run-session\n")
        c.output_until(b"v1-on-a-run-session\r\n")
    sessions.stop("plain")


def test_a_stop_keeps_the_log_without_complaint_and_leaves_another_stderr_alone(legacy_env: Legacy,
                                                                                  tmp_path: Path) -> None:
    """The stderr a Tower gives is NAME.log as a rule: a stop moves it to logs/ and says nothing about it. A
    Tower that gave another file (or none) leaves no NAME.log: nothing is moved, and the log kept by the
    name's previous stop stays where it is, with no "could not keep the log" line anywhere."""
    first = legacy_env.start("cat", name="shellper-k1")
    assert first.stop() == 0 and wait_gone(first.pid, 10)
    kept = legacy_env.dir / "logs" / "shellper-k1.log"
    text = kept.read_text()
    assert text.rstrip().endswith("stopped") and "could not keep" not in text
    sock = legacy_env.dir / "shellper-k1.sock"
    other = tmp_path / "tower-stderr.txt"
    with open(other, "ab") as err:
        second = launch(sock, config(sock, "cat"), stderr=err)
    legacy_env.started.append(second)
    assert second.stop() == 0 and wait_gone(second.pid, 10)
    said = other.read_text()
    assert said.rstrip().endswith("stopped") and "could not keep" not in said
    assert kept.read_text() == text and not (legacy_env.dir / "logs" / "shellper-k1.log.1").exists()
    assert not (legacy_env.dir / "shellper-k1.log").exists()
