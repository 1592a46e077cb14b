"""What is in a runtime directory: each session's record, whether its owner is alive, what it says.

The lock answers "is somebody alive" without signalling anyone; the socket answers "is it serving";
the record says what it is. A record without a live lock is stale; a socket without a record is too.
"""

from __future__ import annotations

import os
import time

from shellper.client.blocking import Client, ClientError
from shellper.core.exitrecord import ExitRecord, ExitRecordError, exit_line
from shellper.core.names import LOCK_SUFFIX, RECORD_SUFFIX, SOCKET_SUFFIX
from shellper.core.structs import asdict, field, record
from shellper.host.paths import session_names
from shellper.host.record import LockError, RecordError, SessionLock, SessionRecord, read_record
from shellper.protocol import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any

PROBE_TIMEOUT = 2.0


@record
class SessionInfo:
    name: str
    state: str  # the record's state, or "stale" (no live owner) / "unreachable" (owner alive, socket silent)
    reason: str = ""
    pid: int | None = None
    child_pid: int | None = None
    uptime: float | None = None
    clients: int | None = None
    ring_bytes: int | None = None
    last_exit: str | None = None
    """The last exit in one line, its restart countdown as of the listing (shellper.core.exitrecord.exit_line)."""
    command: str | None = None
    """The child's command line, its arguments joined by spaces."""
    next_restart_at: float | None = None
    """Wall-clock time of the pending restart, in backoff."""
    owner: str | None = None
    """Who the session belongs to; None where neither the shellper nor the record names one."""
    containment: str | None = None
    """cgroup, systemd-scope or none (shellper.host.cgroup): live from the shellper, else from the record."""
    cgroup: str | None = None
    working_dir: str | None = None
    """Where the running program is now (its shell's OSC 7, else /proc): from a live shellper only."""
    labels: dict[str, str] = field(default_factory=dict)
    """shellper set's labels: live from the shellper, else from the record."""
    locked: bool = False
    answers: bool = False
    record: SessionRecord | None = None
    status: dict[str, Any] | None = None
    exit: ExitRecord | None = None
    """The last exit whole, for what is shown of it (not in to_dict: ``last_exit`` is its line there)."""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("record")
        out.pop("exit")
        return out


def probe_status(socket_path: str | os.PathLike[str], timeout: float = PROBE_TIMEOUT) -> wire.StatusReply | None:
    """Ask a session for its STATUS as a viewer that wants no replay; None if it does not answer."""
    client = Client(socket_path, wire.Role.VIEWER, client_name="shellper-ls", timeout=timeout)
    try:
        client.connect(replay_bytes=0)
        reply = client.request(wire.Status(), wire.StatusReply)
        return reply if isinstance(reply, wire.StatusReply) else None
    except ClientError:
        return None
    finally:
        client.close()


def inspect_session(directory: str | os.PathLike[str], name: str, probe: bool = True) -> SessionInfo:
    base = os.path.join(directory, name)
    info = SessionInfo(name=name, state="stale")
    try:
        info.record = read_record(base + RECORD_SUFFIX)
    except (RecordError, OSError) as exc:
        info.reason = f"no readable record: {exc}"
    try:
        info.locked = SessionLock.is_locked(base + LOCK_SUFFIX)
    except LockError as exc:  # a directory or a fifo where the lock should be: say so, list the rest
        info.state, info.reason = "unknown", str(exc)
        return info
    record = info.record
    if record is not None:
        info.pid, info.child_pid, info.state = record.shellper_pid, record.child_pid, record.state
        info.reason = record.state_reason
        info.owner = record.owner or None  # "" in a record written before owners existed
        info.containment, info.cgroup = record.containment, record.cgroup
        info.labels = dict(record.labels)
        info.uptime = time.time() - record.created_at
        info.command = " ".join(record.command)
        info.next_restart_at = record.next_restart_at
    if not info.locked:
        info.state = "stale"
        info.uptime = None  # it ended at some unknown time: counting on would say it still runs
        info.reason = "no live shellper holds this session's lock"
        info.next_restart_at = None  # nobody is left to restart it
        _set_last_exit(info, record.exits[-1] if record is not None and record.exits else None)
        return info
    if probe:
        reply = probe_status(base + SOCKET_SUFFIX)
        if reply is None:
            info.state = "unreachable"
            info.reason = "the shellper is alive but its socket does not answer"
        else:
            info.answers = True
            info.status = reply.info
            info.state = reply.state
            info.reason = str(reply.info.get("state_reason") or "")
            info.child_pid = reply.info.get("child_pid")
            info.owner = reply.info.get("owner") or info.owner
            info.containment = reply.info.get("containment") or info.containment
            info.cgroup = reply.info.get("cgroup", info.cgroup)
            working_dir = reply.info.get("working_dir")
            info.working_dir = working_dir if isinstance(working_dir, str) else None
            labels = reply.info.get("labels")
            if isinstance(labels, dict):  # a shellper from before labels has none to say
                info.labels = {str(k): str(v) for k, v in labels.items()}
            info.clients = max(0, len(reply.info.get("clients") or []) - 1)  # not counting this probe
            end, start = reply.info.get("ring_end", 0), reply.info.get("ring_start", 0)
            info.ring_bytes = end - start
            info.command = " ".join(reply.info.get("argv") or []) or info.command
            info.next_restart_at = reply.info.get("next_restart_at")
            try:
                last = reply.last_exit()
            except ExitRecordError:  # a shellper of another version: the record's
                last = None
            if last is not None:
                _set_last_exit(info, last)
                return info
    _set_last_exit(info, record.exits[-1] if record is not None and record.exits else None)
    return info


def _set_last_exit(info: SessionInfo, last: ExitRecord | None) -> None:
    info.exit = last
    info.last_exit = exit_line(last, info.state, info.next_restart_at, time.time()) if last is not None else None


def list_sessions(directory: str | os.PathLike[str], probe: bool = True) -> list[SessionInfo]:
    return [inspect_session(directory, name, probe) for name in session_names(directory)]
