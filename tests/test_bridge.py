"""``shellper bridge NAME`` without ssh: the protocol spoken through a bridge process on a socket pair, by the
console script's quick path and by the full CLI alike, and its refusals in the words remote clients read."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from support.frames import read_until
from support.paths import SHELLPER_CLI
from support.sessions import Sessions

from shellper.client.blocking import Client
from shellper.protocol import wire

CLIS = {"console-script": SHELLPER_CLI, "full-cli": [sys.executable, "-m", "shellper"]}


class BridgedClient(Client):
    """A Client whose socket is the near end of a bridge process's stdin and stdout."""

    def __init__(self, argv: list[str]) -> None:
        super().__init__("bridge", "tower", timeout=10)
        self.argv = argv
        self.proc: subprocess.Popen[bytes] | None = None

    def _open_socket(self) -> socket.socket:
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(self.argv, stdin=theirs.fileno(), stdout=theirs.fileno())
        theirs.close()
        ours.settimeout(self.timeout)
        return ours


@pytest.mark.parametrize("cli", CLIS.values(), ids=list(CLIS))
def test_the_protocol_goes_through_a_bridge_byte_for_byte(sessions: Sessions, cli: list[str]) -> None:
    sessions.start("br", ["cat"])
    client = BridgedClient([*cli, "--dir", str(sessions.dir), "bridge", "br"])
    try:
        welcome = client.connect(replay_bytes=0)
        assert welcome.shellper_pid == sessions.started[0].pid
        payload = bytes(range(32, 127)) * 100  # more than one read's worth through cat's echo
        client.write(payload + b"\n")
        read_until(client, payload[-200:])
        reply = client.request(wire.Status(), wire.StatusReply)
        assert isinstance(reply, wire.StatusReply) and reply.info["name"] == "br"
    finally:
        client.close()
        assert client.proc is not None and client.proc.wait(10) == 0  # our end-of-file ends it
        sessions.stop("br")


@pytest.mark.parametrize("cli", CLIS.values(), ids=list(CLIS))
def test_a_missing_session_is_named(sessions: Sessions, cli: list[str]) -> None:
    done = subprocess.run([*cli, "--dir", str(sessions.dir), "bridge", "nothing"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)
    assert done.returncode == 1 and done.stdout == ""
    assert "session 'nothing'" in done.stderr and "no such session socket" in done.stderr
