"""A :class:`~shellper.client.blocking.Client` to a session on another host, through ``shellper bridge``
run over that host's shared ssh connection (shellper.host.ssh). The protocol is the same; only the socket
is the near end of an ssh process's stdin and stdout."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
from typing import IO

from shellper.client.blocking import Client
from shellper.core.names import validate_name
from shellper.core.trust import UntrustedSocket, untrusted_reason
from shellper.host.ssh import (
    SSH_UNREACHABLE,
    HostUnreachable,
    check_host,
    check_version,
    ensure_master,
    remote_shellper,
    ssh_argv,
)
from shellper.protocol import wire
from shellper.protocol.connection import ClientError, SessionGone, SessionNotFound

CLOSE_WAIT = 2.0
"""Seconds close() waits for the ssh process to end on its own (its channel closed) before killing it."""


def remote_address(host: str, name: str) -> str:
    """How a remote session is named to people and in errors: ``HOST:NAME``."""
    return f"{host}:{name}"


class RemoteClient(Client):
    """A connection to session ``name`` on ``host`` (``directory``: its runtime directory there, default the
    remote user's). The remote shellper's version is checked once per host and process (VersionMismatch)."""

    def __init__(self, host: str, name: str, role: str = wire.Role.TOWER, *, directory: str | None = None,
                 client_name: str = "", timeout: float = 10.0) -> None:
        validate_name(name)
        check_host(host)  # before anything starts; ssh_argv checks it again
        super().__init__(remote_address(host, name), role, client_name=client_name, timeout=timeout)
        self.host, self.name, self.directory = host, name, directory
        self.proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self.ended: tuple[int, str] | None = None
        """How the last ssh process ended: its exit status and the last line it wrote to stderr."""

    def _open_socket(self) -> socket.socket:
        try:
            check_version(self.host, self.timeout)  # once per process and host
            ensure_master(self.host, self.timeout)  # a reconnection after the shared connection died starts it again
        except HostUnreachable as exc:  # worth retrying: a resuming client backs off and tries again
            raise SessionGone(self.path, str(exc)) from exc
        self._reap()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        args = [*(["--dir", self.directory] if self.directory else []), "bridge", self.name]
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - a file, read after ssh ends; closed by _reap
        try:
            self.proc = subprocess.Popen(ssh_argv(self.host, remote_shellper(args)), stdin=theirs.fileno(),
                                         stdout=theirs.fileno(), stderr=self._stderr)
        except OSError as exc:
            ours.close()
            raise SessionGone(self.path, f"cannot run ssh: {exc}") from None
        finally:
            theirs.close()
        ours.settimeout(self.timeout)
        return ours

    def connect(self, *, resume_from: int | None = None, replay_bytes: int | None = None,
                events_after: int | None = None, terminal_fd: int | None = None,
                detach_byte: int | None = None, expect_instance_id: str | None = None,
                rendered: int | None = None, size: tuple[int, int] | None = None) -> wire.Welcome:
        """As Client.connect; a bridge or ssh that ended before WELCOME is reported in its own words:
        SessionNotFound when the remote has no such session, SessionGone (worth retrying) otherwise."""
        self.ended = None
        try:
            return super().connect(resume_from=resume_from, replay_bytes=replay_bytes, events_after=events_after,
                                   terminal_fd=terminal_fd, detach_byte=detach_byte,
                                   expect_instance_id=expect_instance_id, rendered=rendered, size=size)
        except ClientError as exc:
            why = self._reap() or self.ended  # a failed handshake has closed (and reaped) already
            if why is None:
                raise
            bridge_refusal(self.path, why[1], exc)
            what = "ssh could not connect" if why[0] == SSH_UNREACHABLE else f"the bridge exited {why[0]}"
            raise SessionGone(self.path, f"{what}: {why[1]}") from exc

    def peer_pid(self) -> None:
        """None: the socket's peer is this process's own ssh child, not the shellper."""
        return None

    def _reap(self) -> tuple[int, str] | None:
        """End and wait for the ssh process (ours, by its Popen); its status and last stderr line, if any."""
        proc, err = self.proc, self._stderr
        self.proc, self._stderr = None, None
        if proc is None:
            return None
        try:
            code = proc.wait(CLOSE_WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        return code, last_line(err)

    def close(self) -> None:
        super().close()  # the socket's end-of-file ends the bridge, then ssh
        with contextlib.suppress(OSError):
            self.ended = self._reap() or self.ended


def bridge_refusal(path: str, line: str, exc: ClientError) -> None:
    """Raise what the remote bridge's last line says, when it says the session is not there
    (SessionNotFound) or that its socket was refused as not the remote user's (UntrustedSocket: never
    retried, as a local one is not)."""
    if "no such session" in line or "no socket" in line:
        raise SessionNotFound(path, line) from exc
    reason = untrusted_reason(line)
    if reason is not None:
        raise UntrustedSocket(path, None, f"on the remote host, {reason}") from exc


def last_line(err: IO[bytes] | None) -> str:
    """The last non-empty line ssh (or the remote bridge) wrote to ``err``, which is closed: the reason
    a connection ended, in their words."""
    if err is None:
        return ""
    with err:
        err.seek(0)
        lines = [line.strip() for line in err.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""
