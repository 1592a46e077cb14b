"""tower_client: what a supervising server (the Tower) needs to live with shellpers across its restarts.

* :mod:`~tower_client.client` - blocking, asyncio and resuming clients (no output lost on reconnect).
* :mod:`~tower_client.discover` - what is really in a runtime directory (never signals).
* :mod:`~tower_client.reconcile` - the registry and the pure adopt / terminate / respawn / clean / leave table.
* :mod:`~tower_client.apply` - carry decisions out: identity-checked terminate, lock-guarded clean.
* :mod:`~tower_client.holders` - who holds a conversation id; mint-or-reclaim, foreign wins.
* :mod:`~tower_client.identity` - process identity (boot id, pid, kernel start ticks) and pidfds.
* :mod:`~tower_client.survivors` - what a killed shellper left running, found by its marks and ended.
* :mod:`~tower_client.fleet` - the supervisor layer: registry, launch, one merged stream (:mod:`~tower_client.stream`),
  a journal of what was consumed (:mod:`~tower_client.progress`), adopt after a restart, inotify
  (:mod:`~tower_client.inotify`), an agent's command line from the mint-or-reclaim verdict
  (:mod:`~tower_client.agent`). Imported on its own (``from tower_client.fleet import Fleet``), so the CLI does
  not pay for it.
"""

from shellper.core.exitrecord import ExitRecord, ExitRecordError
from tower_client.apply import Outcome, Report, apply, clean_session, terminate_session
from tower_client.client import AsyncClient, AsyncResumingClient, Client, ResumingClient
from tower_client.discover import Observed, discover, discover_async, observe
from tower_client.errors import FleetClosed, FleetError, FleetNotStarted, UnknownSession
from tower_client.holders import Holder, Verdict, find_holders, mint_or_reclaim
from tower_client.reconcile import ReconcileAction, ReconcileDecision, Registry, RegistryError, load_registry, reconcile

__all__ = [
    "AsyncClient",
    "AsyncResumingClient",
    "Client",
    "ExitRecord",
    "ExitRecordError",
    "FleetClosed",
    "FleetError",
    "FleetNotStarted",
    "Holder",
    "Observed",
    "Outcome",
    "ReconcileAction",
    "ReconcileDecision",
    "Registry",
    "RegistryError",
    "Report",
    "ResumingClient",
    "UnknownSession",
    "Verdict",
    "apply",
    "clean_session",
    "discover",
    "discover_async",
    "find_holders",
    "load_registry",
    "mint_or_reclaim",
    "observe",
    "reconcile",
    "terminate_session",
]
