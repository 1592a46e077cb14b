"""What a session is started with: one dataclass shared by the CLI, `launch()` and the server."""

from __future__ import annotations

import json
import math
import os

from shellper.core import structs
from shellper.core.containment import CONTAINMENT_REQUESTS
from shellper.core.defaults import (
    DEFAULT_COLS,
    DEFAULT_GRACE,
    DEFAULT_RING_BYTES,
    DEFAULT_ROWS,
    DEFAULT_TERM,
    FRAME_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    MAX_RING_BYTES,
    MAX_UNREAD_BYTES,
    MIN_RING_BYTES,
    STDERR_REQUESTS,
    TERMINAL_SIZE_RANGE,
    terminal_size_in_range,
)
from shellper.core.errors import ShellperError
from shellper.core.execve import env_problem, has_nul
from shellper.core.exits import RestartPolicy
from shellper.core.owner import BadOwner, validate_owner
from shellper.core.structs import field, record, signed

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: see CONTRIBUTING.md, "Start-up cost"
if TYPE_CHECKING:
    from typing import Any



def resolve_stderr_mode(mode: str) -> str:
    """``auto`` is ``merged``: one terminal for stdout and stderr, as every terminal has.

    A separate stderr (``pty``, ``pipe``) is captured on its own for exit reasons and merged into the
    output at boundaries (shellper.core.merge); a shell on it loses job control, because only one
    terminal can be a process's controlling terminal.
    """
    return "merged" if mode == "auto" else mode


class ConfigError(ShellperError, ValueError):
    """A session option that cannot work; ``option`` names it as SessionConfig's field (``ring_bytes``), and
    ``flag`` as the command line spells it where that differs (``--ring-bytes``): the CLI says
    :attr:`command_line`."""

    def __init__(self, option: str, message: str, *, flag: str | None = None) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.flag = flag
        self.message = message

    @property
    def command_line(self) -> str:
        """The error as a command's user reads it: the option as they typed it."""
        return f"{self.flag or self.option}: {self.message}"


@signed
@record
class SessionConfig:
    """Everything a session is started with; JSON on the launch pipe, so argv and env never show in ps."""

    name: str
    argv: list[str]
    dir: str
    cwd: str
    env: dict[str, str]
    cols: int = DEFAULT_COLS
    rows: int = DEFAULT_ROWS
    term: str = DEFAULT_TERM
    ring_bytes: int = DEFAULT_RING_BYTES
    stderr_mode: str = "merged"
    grace: float = DEFAULT_GRACE
    husk_ttl: float | None = None
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    frame_timeout: float = FRAME_TIMEOUT
    max_unread_bytes: int = MAX_UNREAD_BYTES
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    owner: str = ""
    """Who the session belongs to (shellper.core.owner); "" means the default owner, resolved at launch."""
    containment: str = "auto"
    """auto (a cgroup where one can be made, else none), cgroup (or fail), none (shellper.host.cgroup)."""
    cgroup_parent: str | None = None
    """Where the session's cgroup is made; None: shellper.host.cgroup.default_parent()."""

    def __post_init__(self) -> None:
        # A policy given as a mapping (JSON, a Tower's settings) is converted here, each key checked by name
        # (PolicyError names an unknown or bad one), instead of being refused later as "got dict".
        if isinstance(self.policy, dict):
            self.policy = RestartPolicy.from_options(self.policy)
        # Checked when built, where the caller wrote the bad value, not later inside a launch or the daemon.
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError for the first option that cannot work, before any process is started.

        Types are checked too: a library caller's ``env=None`` or ``argv="bash"`` must fail here with the
        field's name, not in the daemon as "'NoneType' object is not iterable" (or run ``b``).
        """
        self._validate_types()
        if not self.argv:
            raise ConfigError("argv", "no command given (put it after --)", flag="command")
        if not terminal_size_in_range(self.cols, self.rows):
            raise ConfigError("cols" if terminal_size_in_range(1, self.rows) else "rows",
                              f"size {self.cols}x{self.rows} is outside {TERMINAL_SIZE_RANGE}", flag="--cols/--rows")
        if not MIN_RING_BYTES <= self.ring_bytes <= MAX_RING_BYTES:
            raise ConfigError("ring_bytes", f"{self.ring_bytes} is outside {MIN_RING_BYTES}..{MAX_RING_BYTES}",
                              flag="--ring-bytes")
        if self.stderr_mode not in STDERR_REQUESTS:
            raise ConfigError("stderr_mode", f"{self.stderr_mode!r} is not one of {', '.join(STDERR_REQUESTS)}",
                              flag="--stderr")
        if self.grace < 0:
            raise ConfigError("grace", "must not be negative", flag="--grace")
        if self.husk_ttl is not None and self.husk_ttl < 0:
            raise ConfigError("husk_ttl", "must not be negative", flag="--husk-ttl")
        if self.handshake_timeout <= 0:
            raise ConfigError("handshake_timeout", "must be positive")
        if self.frame_timeout <= 0:
            raise ConfigError("frame_timeout", "must be positive")
        if self.max_unread_bytes <= 0:
            raise ConfigError("max_unread_bytes", "must be positive")
        if self.owner:
            try:
                validate_owner(self.owner)
            except BadOwner as e:
                raise ConfigError("owner", e.reason, flag="--owner") from None
        if self.containment not in CONTAINMENT_REQUESTS:
            raise ConfigError("containment", f"{self.containment!r} is not one of {', '.join(CONTAINMENT_REQUESTS)}",
                              flag="--containment")
        if self.cgroup_parent is not None and not os.path.isabs(self.cgroup_parent):
            raise ConfigError("cgroup_parent", f"{self.cgroup_parent!r} is not an absolute path",
                              flag="--cgroup-parent")

    def _validate_types(self) -> None:
        for option in ("name", "dir", "cwd", "term", "stderr_mode", "owner", "containment"):
            value = getattr(self, option)
            if not isinstance(value, str):
                raise ConfigError(option, f"expected a string, got {type(value).__name__}")
            if has_nul((value,)):
                raise ConfigError(option, "contains a NUL byte")
        if not isinstance(self.argv, list | tuple) or not all(isinstance(arg, str) for arg in self.argv):
            raise ConfigError("argv", f"expected a list of strings, got {self.argv!r:.80}")
        if has_nul(self.argv):
            raise ConfigError("argv", "an argument contains a NUL byte")
        if not isinstance(self.env, dict):
            raise ConfigError("env", f"expected a dict of strings, got {type(self.env).__name__}")
        for key, value in self.env.items():
            problem = env_problem(key, value)
            if problem is not None:
                raise ConfigError("env", problem)
        for option in ("cols", "rows", "ring_bytes", "max_unread_bytes"):
            value = getattr(self, option)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(option, f"expected an integer, got {value!r:.40}")
        for option in ("grace", "husk_ttl", "handshake_timeout", "frame_timeout"):
            value = getattr(self, option)
            if value is None and option == "husk_ttl":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ConfigError(option, f"expected a finite number, got {value!r:.40}")
        if self.cgroup_parent is not None and (not isinstance(self.cgroup_parent, str)
                                               or has_nul((self.cgroup_parent,))):
            raise ConfigError("cgroup_parent", f"expected a path string, got {self.cgroup_parent!r:.80}")
        if not isinstance(self.policy, RestartPolicy):
            raise ConfigError("policy", f"expected a RestartPolicy, got {type(self.policy).__name__}")

    def to_json(self) -> str:
        data = structs.asdict(self)
        data["policy"] = self.policy.to_options()
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SessionConfig:
        data: dict[str, Any] = json.loads(text)
        data["policy"] = RestartPolicy.from_options(data.get("policy") or {})
        return cls(**data)
