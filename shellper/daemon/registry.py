"""The session's clients: every open connection (what the client limit counts), the attached ones by id,
and the one tower; what goes to all of them at once."""

from __future__ import annotations

from shellper.daemon.clientconn import MAX_CLIENTS, MAX_PARTIAL_BYTES
from shellper.protocol.server import PACED
from shellper.protocol.wire import Role

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any

    from shellper.daemon.clientconn import ClientConn
    from shellper.daemon.inputqueue import InputQueue
    from shellper.daemon.output import Output
    from shellper.daemon.reactor import Future
    from shellper.protocol import wire


class ClientRegistry:
    """Who is connected, and in what role."""

    def __init__(self, clients: dict[int, ClientConn], output: Output, input_queue: InputQueue) -> None:
        self.clients = clients
        """The attached clients (past their handshake) by id; the output hands each its bytes."""
        self.connections: set[ClientConn] = set()
        """Every open connection, attached or still in its handshake: what the client limit counts."""
        self.tower: ClientConn | None = None
        self._output = output
        self._input = input_queue
        self._next_client_id = 1
        self.partial_bytes = 0
        """Bytes of unfinished frames all connections hold together (at most MAX_PARTIAL_BYTES)."""

    def new_client_id(self) -> int:
        cid = self._next_client_id
        self._next_client_id += 1
        return cid

    def admit(self, client: ClientConn) -> bool:
        """Count a new connection; False if the session already has MAX_CLIENTS."""
        if len(self.connections) >= MAX_CLIENTS:
            return False
        self.connections.add(client)
        return True

    def hold_partial(self, delta: int) -> bool:
        """Count ``delta`` more (or, negative, fewer) bytes of unfinished frames; False, and nothing counted, if
        more would pass MAX_PARTIAL_BYTES."""
        if delta > 0 and self.partial_bytes + delta > MAX_PARTIAL_BYTES:
            return False
        self.partial_bytes += delta
        return True

    def register(self, client: ClientConn) -> None:
        """A client finished its handshake: it gets output (and, as the tower or a terminal, is waited for)."""
        if client.role is Role.TOWER:
            old = self.tower
            if old is not None and old is not client:
                old.send_error("replaced", f"a new tower connection (client {client.client_id}) replaced this one",
                               None, fatal=True)
            self.tower = client
        self.clients[client.client_id] = client
        if client.role in PACED:
            self._output.pace(client)

    def remove(self, client: ClientConn) -> bool:
        """A connection closed; True if it had been attached."""
        self.connections.discard(client)
        if self.clients.pop(client.client_id, None) is None:
            return False
        if self.tower is client:
            self.tower = None
        self._output.unpace(client)
        self._input.forget(client)
        return True

    def send_exit(self, frame: bytes, exit_frame: wire.Exit) -> None:
        """An EXIT to every attached client, after the output it has not had yet."""
        for client in list(self.clients.values()):
            client.send_exit_at(self._output.scrollback.end, frame, exit_frame)

    def send_event(self, frame: bytes) -> None:
        """An EVENT to the clients that asked for events, after the output before it."""
        for client in self.clients.values():
            if client.wants_events:
                client.send_control_at(self._output.scrollback.end, frame)

    def close_all(self) -> list[Future[None]]:
        """Close every attached client once what is queued for it is sent; futures done when each has closed."""
        closing = [client.closed for client in self.clients.values()]
        for client in list(self.clients.values()):
            client.close_after_flush()
        return closing

    def describe(self) -> list[dict[str, Any]]:
        return [client.describe() for client in self.clients.values()]
