"""One exception family: every exception class the packages define derives from ShellperError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import shellper
import tower_client
from shellper.core.errors import ShellperError

EXEMPT = {
    "shellper.core.structs.FrozenInstanceError",  # mirrors dataclasses.FrozenInstanceError, which such code catches
    "shellper.cli.attach._Signalled",  # a BaseException on purpose: a signal unwinds attach as ^C would
    "shellper.daemon.launcher._Ended",  # the same for the warm launcher: SIGTERM unwinds it to its clean-up
}


def _classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (shellper, tower_client):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith(".__main__"):
                continue  # importing it would run the command
            module = importlib.import_module(info.name)
            for _, obj in inspect.getmembers(module, inspect.isclass):
                if issubclass(obj, BaseException) and obj.__module__ == info.name:
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found) if k not in EXEMPT]


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_error_the_packages_define_is_a_shellper_error(cls: type[BaseException]) -> None:
    assert issubclass(cls, ShellperError)


def test_the_family_is_not_empty_and_keeps_its_mixins() -> None:
    from shellper.client.launch import LaunchError
    from shellper.core.config import ConfigError

    assert len(_classes()) > 40
    assert issubclass(ConfigError, ValueError) and issubclass(LaunchError, RuntimeError)


def test_every_user_error_the_cli_names_is_an_error_class_defined_where_it_says() -> None:
    """shellper.cli.connect.user_errors finds them by module and name, only in loaded modules: a class renamed or
    moved would drop out of it silently, and the user would get a traceback instead of one line."""
    import shellper.cli.connect as connect

    for module, name in connect._USER_ERRORS:
        error = getattr(importlib.import_module(module), name, None)
        assert isinstance(error, type) and issubclass(error, ShellperError), f"{module}.{name}"
        assert error.__module__ == module, f"{module}.{name} is defined in {error.__module__}"
        assert error in connect.user_errors()
