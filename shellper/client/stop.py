"""STOP over a session's socket, as :func:`shellper.host.cleanup.terminate_shellper` asks its callers for.

The host layer verifies the process, pins its tree and, when STOP cannot be delivered, ends it through
signals; speaking the protocol is left to its callers, ``shellper stop`` (a live shellper whose lock file
was removed) and tower_client's terminate. This is what both of them send it with.
"""

from __future__ import annotations

from shellper.client.blocking import Client, ClientError
from shellper.host.cleanup import StopNotDelivered
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from collections.abc import Callable


def send_stop(path: str, grace: float, check: Callable[[Client, wire.Welcome], None], *, client_name: str,
              timeout: float = 5.0) -> Client:
    """Connect to ``path`` as the tower, let ``check`` refuse the shellper that answered (by raising), and
    send STOP with ``grace``. Returns the connection, open: the caller closes it once the shellper is gone.

    StopNotDelivered when nothing answers or the connection fails; what ``check`` raises is passed on.
    Either way nothing is left open.
    """
    try:
        client = Client(path, "tower", client_name=client_name, timeout=timeout)
        welcome = client.connect(replay_bytes=0)  # closes the socket again if it fails
    except ClientError as exc:
        raise StopNotDelivered(str(exc)) from exc
    try:
        check(client, welcome)
        try:
            client.send(wire.Stop(grace=grace))
        except ClientError as exc:
            raise StopNotDelivered(str(exc)) from exc
    except BaseException:
        client.close()
        raise
    return client
