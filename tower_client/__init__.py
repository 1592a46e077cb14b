"""tower_client: what a supervising server (the Tower) needs to live with shellpers across its restarts.

This package is the one import a user needs: every name below is exported here, and the README, docs/TOWER.md
and examples/ import nothing else. The modules behind it:

* :mod:`~shellper.client.launch` - ``launch(SessionConfig(...))``: start a detached shellper.
* :mod:`~tower_client.client` - blocking, asyncio and resuming clients (no output lost on reconnect);
  :mod:`~tower_client.remote_clients` - the same for a session on another host, over ssh.
* :mod:`~tower_client.discover` - what is really in a runtime directory (never signals).
* :mod:`~tower_client.reconcile` - the registry and the pure adopt / terminate / respawn / clean / leave table.
* :mod:`~tower_client.apply` - carry decisions out: identity-checked terminate, lock-guarded clean.
* :mod:`~tower_client.holders` - who holds a conversation id; mint-or-reclaim, foreign wins.
* :mod:`~tower_client.fleet` - the supervisor layer: registry, launch, one merged stream (:mod:`~tower_client.stream`),
  a journal of what was consumed (:mod:`~tower_client.progress`), adopt after a restart, inotify
  (:mod:`~tower_client.inotify`), an agent's command line from the mint-or-reclaim verdict
  (:mod:`~tower_client.agent`); its options are :mod:`~tower_client.options`; what it delivers is kept
  exactly once by :mod:`~tower_client.sink`; a range of a ring read by its offsets by :mod:`~tower_client.ringread`.
* :mod:`~shellper.client.execute` and :mod:`~tower_client.execasync` - ``execute`` / ``execute_async``: a command
  run in a session's shell and waited for, its output and exit status (docs/EXEC.md).
* :mod:`~tower_client.web` - ``WebTerminal``: any session in a browser, as an ASGI app (protocol/WEB.md).

``Fleet``, and the other names the ``tower-client`` command (which imports this package) does not use, are
imported on first use (``tower_client.Fleet``, a module ``__getattr__``), so the command does not pay for them.
"""

from __future__ import annotations

from shellper.core.errors import BadArgument, BadArgumentType, ClientError, InsideEventLoop, ShellperError
from shellper.core.exitrecord import ExitRecord, ExitRecordError
from shellper.core.names import BadHost, BadName, PathError
from shellper.core.owner import BadOwner
from shellper.core.trust import NotASocket, UntrustedSocket
from shellper.host.identity import IdentityError, ProcessGone
from shellper.host.paths import UnsafeDirError
from shellper.host.ssh import HostUnreachable, RemoteNotInstalled, SshError, VersionMismatch
from shellper.protocol.connection import (
    BadRequest,
    ConnectionRefused,
    Forbidden,
    InstanceMismatch,
    InvalidRequest,
    NotRunning,
    OutputPosition,
    PeerMismatch,
    ProtocolViolation,
    RemoteError,
    RequestFailed,
    SessionGone,
    SessionNotFound,
    SessionStopping,
    ShellperDead,
    SpawnFailed,
    Timeout,
)
from shellper.protocol.wire import (
    Data,
    Error,
    Event,
    Exit,
    Frame,
    FrameType,
    Gap,
    Labels,
    Ping,
    Pong,
    ProtocolError,
    Release,
    Replay,
    Reply,
    Resize,
    ScreenReply,
    ScreenRequest,
    Signal,
    Spawn,
    Status,
    StatusReply,
    Stop,
    Welcome,
)
from tower_client.apply import (
    Outcome,
    OwnerBusy,
    OwnerLockUnavailable,
    Report,
    apply,
    apply_async,
    clean_session,
    terminate_session,
)
from tower_client.client import AsyncClient, AsyncResumingClient, Client, ResumingClient, socket_path
from tower_client.discover import Observed, discover, discover_async, observe, observe_async
from tower_client.errors import FleetClosed, FleetError, FleetNotStarted, UnknownSession
from tower_client.holders import BadSessionId, Holder, Verdict, find_holders, mint_or_reclaim, mint_or_reclaim_async
from tower_client.reconcile import (
    ReconcileAction,
    ReconcileDecision,
    Registry,
    RegistryError,
    RegistryRow,
    load_registry,
    reconcile,
)
from tower_client.resume import Backoff, Reconnected, ResumeItem

TYPE_CHECKING = False  # imported on first use: see _LAZY
if TYPE_CHECKING:
    from shellper.client.execute import execute
    from shellper.client.launch import LaunchError, LaunchFailure, LaunchInfo, launch
    from shellper.core.config import ConfigError, SessionConfig
    from shellper.core.execmark import ExecError, ExecRefusal, ExecResult
    from shellper.core.exits import PolicyError, RestartPolicy
    from tower_client.agent import AgentCommand, AgentCommandError
    from tower_client.atomicfile import AtomicWriteError
    from tower_client.execasync import execute_async
    from tower_client.fleet import Fleet
    from tower_client.fleetsession import SessionHandle
    from tower_client.fleetstream import SessionStream
    from tower_client.inotify import InotifyError
    from tower_client.options import FleetPolicy, OnDeath, SessionOptions, SessionSpec
    from tower_client.progress import JournalPosition, ProgressError
    from tower_client.remote_clients import (
        AsyncRemoteClient,
        AsyncRemoteResumingClient,
        RemoteClient,
        RemoteResumingClient,
    )
    from tower_client.ringread import OutputRange, read_output
    from tower_client.sink import FileSink, Sink
    from tower_client.stream import FleetItem, FleetState, Missed, Notice, OutputChunk, SessionEvent, StateChange
    from tower_client.web import WebTerminal

__all__ = [  # noqa: RUF022 - grouped by what a user looks for
    # launching
    "LaunchError", "LaunchFailure", "LaunchInfo", "SessionConfig", "launch",
    # clients
    "AsyncClient", "AsyncRemoteClient", "AsyncRemoteResumingClient", "AsyncResumingClient", "Client",
    "RemoteClient", "RemoteResumingClient", "ResumingClient", "OutputPosition", "Reconnected", "ResumeItem",
    "socket_path",
    # a command run in a session's shell, waited for (docs/EXEC.md)
    "ExecRefusal", "ExecResult", "execute", "execute_async",
    # the Fleet and its stream
    "Fleet", "FleetItem", "FleetState", "JournalPosition", "Missed", "Notice", "OutputChunk", "SessionEvent",
    "SessionHandle", "SessionStream", "StateChange",
    # keeping the output exactly once: a file per session instance, or a store of the Tower's own
    "FileSink", "Sink",
    # a range of a session's output read by its offsets, while its ring holds it
    "OutputRange", "read_output",
    # a browser terminal (an ASGI app; a server from the shellper-pty[web] extra or the application's own)
    "WebTerminal",
    # options
    "AgentCommand", "Backoff", "FleetPolicy", "OnDeath", "RestartPolicy", "SessionOptions", "SessionSpec",
    # after a restart: look, decide, act
    "ExitRecord", "Holder", "Observed", "Outcome", "ReconcileAction", "ReconcileDecision", "Registry",
    "RegistryRow", "Report", "Verdict", "apply", "apply_async", "clean_session", "discover", "discover_async",
    "find_holders", "load_registry", "mint_or_reclaim", "mint_or_reclaim_async", "observe", "observe_async",
    "reconcile", "terminate_session",
    # frames
    "Data", "Error", "Event", "Exit", "Frame", "FrameType", "Gap", "Ping", "Pong", "Release", "Replay", "Reply",
    "Resize", "ScreenReply", "ScreenRequest", "Signal", "Spawn", "Status", "StatusReply", "Stop", "Welcome",
    "Labels",
    # errors: every one is a ShellperError
    "AgentCommandError", "AtomicWriteError", "BadArgument", "BadArgumentType", "BadHost", "BadName", "BadOwner",
    "BadRequest", "BadSessionId", "ClientError", "ConfigError", "ConnectionRefused", "ExecError", "ExitRecordError",
    "FleetClosed", "FleetError", "FleetNotStarted", "Forbidden", "HostUnreachable", "IdentityError",
    "InotifyError", "InsideEventLoop", "InstanceMismatch", "InvalidRequest", "NotASocket", "NotRunning",
    "OwnerBusy", "OwnerLockUnavailable", "PathError", "PeerMismatch", "PolicyError", "ProcessGone",
    "ProgressError", "ProtocolError", "ProtocolViolation", "RegistryError", "RemoteError", "RemoteNotInstalled",
    "RequestFailed", "SessionGone", "SessionNotFound", "SessionStopping", "ShellperDead", "ShellperError",
    "SpawnFailed", "SshError", "Timeout", "UnknownSession", "UnsafeDirError", "UntrustedSocket",
    "VersionMismatch",
]

_LAZY = {
    "LaunchError": "shellper.client.launch",
    "LaunchFailure": "shellper.client.launch",
    "LaunchInfo": "shellper.client.launch",
    "launch": "shellper.client.launch",
    "execute": "shellper.client.execute",
    "ConfigError": "shellper.core.config",
    "SessionConfig": "shellper.core.config",
    "ExecError": "shellper.core.execmark",
    "ExecRefusal": "shellper.core.execmark",
    "ExecResult": "shellper.core.execmark",
    "PolicyError": "shellper.core.exits",
    "RestartPolicy": "shellper.core.exits",
    "AgentCommand": "tower_client.agent",
    "AgentCommandError": "tower_client.agent",
    "AtomicWriteError": "tower_client.atomicfile",
    "execute_async": "tower_client.execasync",
    "OutputRange": "tower_client.ringread",
    "read_output": "tower_client.ringread",
    "Fleet": "tower_client.fleet",
    "SessionHandle": "tower_client.fleetsession",
    "SessionStream": "tower_client.fleetstream",
    "InotifyError": "tower_client.inotify",
    "FleetPolicy": "tower_client.options",
    "OnDeath": "tower_client.options",
    "SessionOptions": "tower_client.options",
    "SessionSpec": "tower_client.options",
    "JournalPosition": "tower_client.progress",
    "ProgressError": "tower_client.progress",
    "AsyncRemoteClient": "tower_client.remote_clients",
    "AsyncRemoteResumingClient": "tower_client.remote_clients",
    "RemoteClient": "tower_client.remote_clients",
    "RemoteResumingClient": "tower_client.remote_clients",
    "FleetItem": "tower_client.stream",
    "FleetState": "tower_client.stream",
    "Missed": "tower_client.stream",
    "Notice": "tower_client.stream",
    "OutputChunk": "tower_client.stream",
    "SessionEvent": "tower_client.stream",
    "StateChange": "tower_client.stream",
    "WebTerminal": "tower_client.web",
    "FileSink": "tower_client.sink",
    "Sink": "tower_client.sink",
}
"""Names imported on first use, and the module that holds each: what the ``tower-client`` command, which imports
this package, does not use (the Fleet above all, the launch, the remote and agent support), so it loads no
more than before the package exported them."""


def __getattr__(name: str) -> object:
    """``tower_client.Fleet`` and the other names of _LAZY: imported the first time one is asked for (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tower_client' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
