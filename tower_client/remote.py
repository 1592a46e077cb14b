"""A resuming client for a session on another host: :class:`~tower_client.client.ResumingClient` whose
connections are :class:`shellper.client.remote.RemoteClient` s (``shellper bridge`` over the host's shared ssh
connection). A dropped ssh connection is one more lost connection: it reconnects with backoff (starting
the host's shared connection again) and resumes at the next byte it has not had, so nothing the ring
still holds is lost."""

from __future__ import annotations

from shellper.client.remote import RemoteClient, remote_address
from tower_client.client import CLIENT_NAME, CONNECT_TIMEOUT, ResumingClient
from tower_client.resume import Backoff

__all__ = ["RemoteClient", "RemoteResumingClient", "remote_address"]


class RemoteResumingClient(ResumingClient):
    """Session ``name`` on ``host`` (``directory``: its runtime directory there, default the remote user's)."""

    def __init__(self, host: str, name: str, role: str = "tower", *, directory: str | None = None,
                 client_name: str = CLIENT_NAME, backoff: Backoff | None = None,
                 expect_instance_id: str | None = None, timeout: float = CONNECT_TIMEOUT) -> None:
        super().__init__(remote_address(host, name), role, client_name=client_name, backoff=backoff,
                         expect_instance_id=expect_instance_id, timeout=timeout)
        self.host, self.name, self.directory = host, name, directory

    def _open(self, resume_from: int | None, replay_bytes: int | None, events_after: int | None) -> None:
        client = RemoteClient(self.host, self.name, self.role, directory=self.directory,
                              client_name=self.client_name, timeout=self.timeout)
        try:
            welcome = client.connect(resume_from=resume_from, replay_bytes=replay_bytes, events_after=events_after,
                                     expect_instance_id=self.state.instance_id)
            assert client.replay is not None
            self.state.connected(welcome, client.replay, client.conn.last_event_seq)
        except BaseException:
            client.close()
            raise
        self.client = client
