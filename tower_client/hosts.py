"""Sessions on many hosts: the registry names each session's host, and reconcile runs on every host at once.

A registry row may carry ``"host": "user@host"`` (an ssh destination; no host: this machine). Each host's
rows go to that host's ``tower-client reconcile`` over its shared ssh connection (shellper.host.ssh), in
parallel, each with a timeout: the host observes its own sessions, decides with the same pure
:func:`tower_client.reconcile.reconcile`, and with ``apply`` acts with its own identity checks, as a local
reconcile does. A host that cannot be reached or does not answer in time gets ``leave`` with reason
``host_unreachable`` for each of its sessions: never terminate (nothing there can be verified) and never
respawn elsewhere (the original may still run).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shellper.core.names import BadHost, validate_host
from shellper.host.ssh import SshError, check_version, remote_tower, run_remote
from tower_client.apply import apply
from tower_client.discover import discover
from tower_client.reconcile import ReconcileAction, RegistryShapeError, parse_registry, reconcile

HOST_TIMEOUT = 30.0
"""Seconds each host has to answer (its observation, decisions and, with apply, its actions)."""
HOST_UNREACHABLE = "host_unreachable"
"""The reason given to the sessions of a host that did not answer: this module's, never reconcile()'s (which
decides only on what it saw), so it is not among tower_client.reconcile.REASONS."""


@dataclass
class HostOutcome:
    """What one host's reconcile found and did. ``host`` None is this machine; ``error`` says why a host
    was not reached (then every decision is leave/host_unreachable)."""

    host: str | None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    applied: bool = False
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    ok: bool = True
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "reachable": self.error is None, "error": self.error, "applied": self.applied,
                "ok": self.ok, "decisions": self.decisions, "outcomes": self.outcomes}


def split_by_host(registry: Mapping[str, Any]) -> dict[str | None, dict[str, Any]]:
    """The registry as one registry per host (rows without a host: None), each row without its host key."""
    sessions = registry.get("sessions")
    if not isinstance(sessions, list):
        raise RegistryShapeError(None, "'sessions' must be an array")
    split: dict[str | None, list[dict[str, Any]]] = {}
    for i, row in enumerate(sessions):
        if not isinstance(row, Mapping):
            raise RegistryShapeError(None, f"sessions[{i}] is {type(row).__name__}, expected an object")
        host = row.get("host")
        if host is not None:
            try:
                validate_host(host)
            except BadHost as exc:
                raise RegistryShapeError(None, f"sessions[{i}].host: {exc}") from None
        split.setdefault(host, []).append({k: v for k, v in row.items() if k != "host"})
    for host, rows in split.items():
        parse_registry({"sessions": rows}, host)  # each host's part is checked before any host is asked
    return {host: {"sessions": rows} for host, rows in split.items()}


def names_host(registry: Mapping[str, Any]) -> bool:
    """Whether any row of the registry names a host."""
    sessions = registry.get("sessions")
    return isinstance(sessions, list) and any(isinstance(r, Mapping) and r.get("host") is not None
                                              for r in sessions)


def reconcile_hosts(registry: Mapping[str, Any], *, hosts: Sequence[str] = (), apply_: bool = False,
                    timeout: float = HOST_TIMEOUT, owner: str | None = None, directory: str | None = None,
                    grace: float | None = None, husk_max_age: float | None = None) -> list[HostOutcome]:
    """Reconcile every host the registry names (and ``hosts``, which may have sessions the registry no longer
    wants), in parallel; one :class:`HostOutcome` per host, this machine's (rows without a host) first."""
    parts = split_by_host(registry)
    for host in hosts:
        parts.setdefault(validate_host(host), {"sessions": []})  # BadHost before any host is asked
    options = [*(["--owner", owner] if owner else [])]
    extra = [*(["--grace", str(grace)] if grace is not None else []),
             *(["--husk-max-age", str(husk_max_age)] if husk_max_age is not None else [])]

    def one(host: str | None) -> HostOutcome:
        if host is None:
            return _local(parts[None], apply_, owner, directory, grace, husk_max_age)
        return _remote(host, parts[host], apply_, timeout, options, extra)

    order = sorted(parts, key=lambda h: (h is not None, h or ""))
    with ThreadPoolExecutor(max_workers=max(1, len(order))) as pool:
        return list(pool.map(one, order))


def _local(part: dict[str, Any], apply_: bool, owner: str | None, directory: str | None, grace: float | None,
           husk_max_age: float | None) -> HostOutcome:
    from pathlib import Path

    from shellper.core.defaults import DEFAULT_GRACE
    from shellper.host.paths import runtime_dir

    where = Path(runtime_dir(directory))
    decisions = reconcile(parse_registry(part), discover(where), now=time.time(), husk_max_age=husk_max_age,
                          owner=owner)
    outcome = HostOutcome(None, [d.to_dict() for d in decisions])
    if apply_:
        report = apply(decisions, grace=DEFAULT_GRACE if grace is None else grace, owner=owner)
        outcome.applied, outcome.ok = True, report.ok
        outcome.outcomes = report.to_dict().get("outcomes", [])
    return outcome


def _remote(host: str, part: dict[str, Any], apply_: bool, timeout: float, options: list[str],
            extra: list[str]) -> HostOutcome:
    args = [*options, "reconcile", "--registry", "-", "--json", *extra, *(["--apply"] if apply_ else [])]
    deadline = time.monotonic() + timeout
    try:
        check_version(host, timeout)
        done = run_remote(host, remote_tower(args), input=json.dumps(part).encode(),
                          timeout=max(1.0, deadline - time.monotonic()), ensure=False)
        data = json.loads(done.stdout) if done.stdout.strip() else None
    except SshError as exc:
        return _unreachable(host, part, str(exc))
    except ValueError as exc:
        return _unreachable(host, part, f"host {host}: its tower-client's answer is not JSON: {exc}")
    if not isinstance(data, dict):
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return _unreachable(host, part, f"host {host}: tower-client failed: {why[0]}")
    outcome = HostOutcome(host, _tagged(data.get("decisions", []), host), applied=bool(data.get("applied")))
    if outcome.applied:
        outcome.outcomes = _tagged(data.get("outcomes", []), host)
        outcome.ok = bool(data.get("ok", done.returncode == 0))
        outcome.decisions = outcome.outcomes or outcome.decisions  # each outcome carries its decision's fields
    return outcome


def _tagged(items: list[Any], host: str) -> list[dict[str, Any]]:
    return [{**item, "host": host} if isinstance(item, dict) else item for item in items]


def _unreachable(host: str, part: dict[str, Any], error: str) -> HostOutcome:
    """Every session the registry has on ``host``: leave, because nothing there can be seen or verified."""
    decisions = [{"action": str(ReconcileAction.LEAVE), "name": row["name"], "reason": HOST_UNREACHABLE,
                  "detail": error, "host": host} for row in part["sessions"]]
    return HostOutcome(host, decisions, ok=False, error=error)
