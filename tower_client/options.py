"""What a Tower chooses for its Fleet and for each session it launches: typed options, checked when built.

Every record here is frozen and checks itself in ``__post_init__``: a bad value is refused where the Tower
wrote it, with :class:`~shellper.core.config.ConfigError` naming the field (``options.ring_bytes``), not
later inside a launch. A mapping where a record is expected (``options={"cols": 120}``, a restart policy
as a dict) is converted to that record, each key checked by name.

Apart from :mod:`tower_client.fleet` so that ``tower_client`` exports them without importing the Fleet (the
``tower-client`` command does not pay for it); the Fleet re-exports them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from shellper.core.config import ConfigError, SessionConfig
from shellper.core.defaults import (
    DEFAULT_COLS,
    DEFAULT_GRACE,
    DEFAULT_RING_BYTES,
    DEFAULT_ROWS,
    DEFAULT_TERM,
    FRAME_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    MAX_UNREAD_BYTES,
)
from shellper.core.execve import env_problem, has_nul
from shellper.core.exits import RestartPolicy
from shellper.core.names import BadHost, BadName, validate_host, validate_name
from tower_client.agent import AgentCommand
from tower_client.resume import Backoff

__all__ = ["FleetPolicy", "OnDeath", "RestartPolicy", "SessionOptions", "SessionSpec"]

RESERVED_COLUMNS = frozenset({"name", "instance_id", "launch", "agent", "host"})
"""Registry columns the Fleet writes itself (tower_client.fleet's LAUNCH_COLUMN and AGENT_COLUMN, and
tower_client.fleethosts' HOST_COLUMN)."""


class OnDeath(StrEnum):
    """What the Fleet does when a shellper dies while the Tower runs (not stopped: died)."""

    RESPAWN = "respawn"
    """End what its tree left, remove its files, and start it again from its registry row."""
    REAP = "reap"
    """End what its tree left, remove its files, drop its row."""
    REPORT = "report"
    """Only report it (StateChange gone + Notice died); files and row stay for the Tower to decide."""


def _record_from(kind: type[Any], value: object, where: str) -> Any:
    """``value`` if it is a ``kind``, else the ``kind`` built from a mapping (an unknown key named), else
    ConfigError naming ``where``."""
    if isinstance(value, kind):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(where, f"expected a {kind.__name__} (or a dict of its fields), got {type(value).__name__}")
    known = {f.name for f in fields(kind) if f.init}
    for key in value:
        if key not in known:
            raise ConfigError(f"{where}.{key}",
                              f"not a field of {kind.__name__} (its fields: {', '.join(sorted(known))})")
    return kind(**value)


@dataclass(frozen=True)
class FleetPolicy:
    """How the Fleet treats all its sessions. Checked when built: ConfigError names the field."""

    on_death: OnDeath = OnDeath.RESPAWN
    concurrency: int = 4
    """Sessions started or stopped at once by launch_many / stop_many / the start's respawns."""
    grace: float = DEFAULT_GRACE
    """Seconds a stopping session's tree gets between SIGTERM and SIGKILL."""
    husk_max_age: float | None = None
    """Passed to reconcile: a husk older than this is terminated on start (None: kept)."""
    backoff: Backoff = field(default_factory=Backoff)
    """Delays between a session's reconnect attempts (a dict of Backoff's fields is converted)."""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "on_death", OnDeath(self.on_death))
        except ValueError:
            raise ConfigError("on_death", f"{self.on_death!r} is not one of "
                              f"{', '.join(d.value for d in OnDeath)}") from None
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigError("concurrency", f"must be an integer >= 1, not {self.concurrency!r}")
        if not _number(self.grace) or self.grace < 0:
            raise ConfigError("grace", f"must be a number of seconds >= 0, not {self.grace!r}")
        if self.husk_max_age is not None and (not _number(self.husk_max_age) or self.husk_max_age < 0):
            raise ConfigError("husk_max_age", f"must be a number of seconds >= 0 or None, not {self.husk_max_age!r}")
        object.__setattr__(self, "backoff", _record_from(Backoff, self.backoff, "backoff"))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, kw_only=True)
class SessionOptions:
    """How one session runs, beyond its command, directory and environment: the fields of
    :class:`~shellper.core.config.SessionConfig` a Tower chooses (name, dir and owner are the Fleet's).
    Keyword fields only; checked when built: ConfigError names the field (``options.cols``), PolicyError
    the restart policy's. ``policy`` may be given as a dict of RestartPolicy's fields."""

    cols: int = DEFAULT_COLS
    rows: int = DEFAULT_ROWS
    term: str = DEFAULT_TERM
    """TERM in the child's environment."""
    ring_bytes: int = DEFAULT_RING_BYTES
    """Output the shellper keeps for replay (what a Tower down that long can still read)."""
    stderr_mode: str = "merged"
    """merged (one terminal, the default), pty or pipe: see shellper.core.config.resolve_stderr_mode."""
    grace: float = DEFAULT_GRACE
    """Seconds the child's tree gets between SIGTERM and SIGKILL when the session stops."""
    husk_ttl: float | None = None
    """Seconds a session whose child is fatal lives on before exiting (None: until stopped)."""
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    frame_timeout: float = FRAME_TIMEOUT
    max_unread_bytes: int = MAX_UNREAD_BYTES
    """Bytes of answers a client may leave unread before it is dropped (ERROR too_slow)."""
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    """When the child is restarted, and when the shellper gives up (the breaker)."""
    containment: str = "auto"
    """auto (a cgroup where one can be made), cgroup (or fail), none."""
    cgroup_parent: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.policy, Mapping):
            object.__setattr__(self, "policy", RestartPolicy.from_options(self.policy))  # PolicyError names a key
        try:  # a SessionConfig checks itself when built
            SessionConfig(name="options", argv=["options"], dir="/", cwd="/", env={}, **self.config_fields())
        except ConfigError as exc:
            raise ConfigError(f"options.{exc.option}", str(exc).partition(": ")[2]) from None

    def config_fields(self) -> dict[str, Any]:
        """The fields as SessionConfig's keyword arguments (the policy stays a RestartPolicy)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> SessionOptions:
        """A dict of the fields, each key checked: an unknown one is named (ConfigError), and so are the
        SessionSpec's own fields given here by mistake."""
        for key in options:
            if key in ("name", "argv", "cwd", "env"):
                raise ConfigError(f"options.{key}", "is a field of SessionSpec itself, not of its options")
            if key in ("dir", "owner"):
                raise ConfigError(f"options.{key}", "is the Fleet's (its runtime directory and owner), not a session's")
        record: SessionOptions = _record_from(cls, options, "options")
        return record


@dataclass(frozen=True)
class SessionSpec:
    """A session to launch. Checked when built: ConfigError names the field.

    ``argv`` is the command as a list of arguments (``["npm", "run", "dev"]``; a single string is refused:
    use ``shlex.split``), or ``agent`` an agent CLI whose conversation id the Fleet resolves (one of the
    two). ``cwd`` and ``env`` default to the Tower's; ``options`` is a :class:`SessionOptions` (a dict of
    its fields is converted); ``columns`` are the Tower's own registry columns (JSON values). ``host``, an
    ssh destination, runs the session there (its ``cwd`` and ``env`` then default to that login's)."""

    name: str
    argv: Sequence[str] = ()
    agent: AgentCommand | None = None
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    options: SessionOptions = field(default_factory=SessionOptions)
    columns: Mapping[str, Any] = field(default_factory=dict)
    host: str | None = None

    def __post_init__(self) -> None:
        try:
            validate_name(self.name)
        except BadName as exc:
            raise ConfigError("name", exc.reason) from None
        self._check_command()
        if self.cwd is not None:
            if not isinstance(self.cwd, str | os.PathLike):
                raise ConfigError("cwd", f"expected a path or None, got {type(self.cwd).__name__}")
            cwd = os.fspath(self.cwd)
            if not isinstance(cwd, str) or has_nul((cwd,)):
                raise ConfigError("cwd", f"expected a path string without NUL, got {cwd!r:.80}")
            object.__setattr__(self, "cwd", cwd)
        if self.env is not None:
            if not isinstance(self.env, Mapping):
                raise ConfigError("env", f"expected a dict of strings or None, got {type(self.env).__name__}")
            for key, value in self.env.items():
                problem = env_problem(key, value)
                if problem is not None:
                    raise ConfigError("env", problem)
            object.__setattr__(self, "env", dict(self.env))
        if not isinstance(self.options, SessionOptions):
            if not isinstance(self.options, Mapping):
                raise ConfigError("options", f"expected SessionOptions (or a dict of its fields), "
                                  f"got {type(self.options).__name__}")
            object.__setattr__(self, "options", SessionOptions.from_mapping(self.options))
        self._check_columns()
        if self.host is not None:
            try:
                validate_host(self.host)
            except BadHost as exc:
                raise ConfigError("host", exc.reason) from None
            if self.agent is not None:  # its holders are looked for in this machine's processes
                raise ConfigError("host", "an agent's session runs on this machine only, for now")

    def _check_command(self) -> None:
        if isinstance(self.argv, str | bytes):
            raise ConfigError("argv", f"a command is a list of arguments, not one string: {self.argv!r:.60} would "
                              "run a program named by its first character; write a list, or shlex.split() it")
        if not isinstance(self.argv, Sequence) or not all(isinstance(a, str) for a in self.argv):
            raise ConfigError("argv", f"expected a list of strings, got {self.argv!r:.80}")
        argv = tuple(self.argv)
        if has_nul(argv):
            raise ConfigError("argv", "an argument contains a NUL byte")
        object.__setattr__(self, "argv", argv)
        if self.agent is not None and not isinstance(self.agent, AgentCommand):
            raise ConfigError("agent", f"expected an AgentCommand, got {type(self.agent).__name__}")
        if self.agent is not None and self.argv:
            raise ConfigError("argv", "give argv or agent, not both (an agent's command line comes from its "
                              "AgentCommand)")
        if self.agent is None and not self.argv:
            raise ConfigError("argv", "no command: give argv (a list of arguments) or agent")

    def _check_columns(self) -> None:
        if not isinstance(self.columns, Mapping) or not all(isinstance(k, str) for k in self.columns):
            raise ConfigError("columns", f"expected a dict with string keys, got {self.columns!r:.80}")
        reserved = sorted(RESERVED_COLUMNS & set(self.columns))
        if reserved:
            raise ConfigError("columns", f"{', '.join(reserved)}: written by the Fleet itself, choose other names")
        try:
            json.dumps(self.columns)
        except (TypeError, ValueError) as exc:
            raise ConfigError("columns", f"not JSON (the registry is a JSON file): {exc}") from None
        object.__setattr__(self, "columns", dict(self.columns))


