"""What starting a session checks before any process is started: the launcher's (shellper.client.launch),
a foreground run's and the legacy entry's alike."""

from __future__ import annotations

from shellper.core.config import ConfigError, SessionConfig
from shellper.core.launchfailure import LaunchError, LaunchFailure
from shellper.core.names import validate_name
from shellper.core.owner import OWNER_ENV, BadOwner, default_owner
from shellper.core.structs import replace
from shellper.host.paths import SessionPaths, ensure_runtime_dir
from shellper.host.record import SessionLock


def prepare(config: SessionConfig) -> tuple[SessionConfig, SessionPaths]:
    """Check everything that can be checked before a process is started; the config to start, which
    always names its owner (:func:`with_owner`)."""
    config.validate()
    config = with_owner(config)
    validate_name(config.name)
    directory = ensure_runtime_dir(config.dir)
    paths = SessionPaths.for_name(directory, config.name)
    if SessionLock.is_locked(paths.lock):
        raise LaunchError(config.name, f"session {config.name!r} is already running in {directory}",
                          reason=LaunchFailure.ALREADY_RUNNING)
    return config, paths


def with_owner(config: SessionConfig) -> SessionConfig:
    """``config`` itself if it names an owner, else a copy naming the default one (``$SHELLPER_OWNER``, else
    the user's name): resolved by the launcher, so a bad ``$SHELLPER_OWNER`` fails before any process starts
    and the record names the owner the caller saw."""
    if config.owner:
        return config
    try:
        owner = default_owner()
    except BadOwner as exc:  # only $SHELLPER_OWNER can be bad: the user's name falls back to uid-N
        raise ConfigError(f"${OWNER_ENV}", f"{exc.owner!r} {exc.reason}") from None
    return replace(config, owner=owner)
