"""SessionConfig.validate as a table: every bad option is refused with its name, before any process starts."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

from shellper.client.launch import launch
from shellper.core.config import ConfigError, SessionConfig
from shellper.core.exits import RestartPolicy
from shellper.daemon.prefork import Prefork


def config(**overrides: Any) -> SessionConfig:
    values: dict[str, Any] = {"name": "s", "argv": ["cat"], "dir": "/tmp", "cwd": "/", "env": {"A": "1"}}
    values.update(overrides)
    return SessionConfig(**values)


BAD = [
    # (overrides, option named, words in the message)
    ({"env": None}, "env", "expected a dict"),
    ({"env": {"A": 1}}, "env", "expected strings"),
    ({"env": {1: "a"}}, "env", "expected strings"),
    ({"env": {"": "a"}}, "env", "invalid variable name"),
    ({"env": {"A=B": "a"}}, "env", "invalid variable name"),
    ({"env": {"A\0": "a"}}, "env", "invalid variable name"),
    ({"env": {"A": "a\0b"}}, "env", "NUL"),
    ({"argv": "bash"}, "argv", "list of strings"),
    ({"argv": ["bash", 1]}, "argv", "list of strings"),
    ({"argv": None}, "argv", "list of strings"),
    ({"argv": ["ba\0sh"]}, "argv", "NUL"),
    ({"argv": []}, "argv", "no command"),
    ({"name": None}, "name", "expected a string"),
    ({"dir": 3}, "dir", "expected a string"),
    ({"cwd": None}, "cwd", "expected a string"),
    ({"cwd": "/tm\0p"}, "cwd", "NUL"),
    ({"term": b"xterm"}, "term", "expected a string"),
    ({"cols": "80"}, "cols", "integer"),
    ({"rows": True}, "rows", "integer"),
    ({"rows": 24.0}, "rows", "integer"),
    ({"cols": 0}, "cols", "outside"),
    ({"rows": 70000}, "rows", "outside"),
    ({"ring_bytes": 1.5e6}, "ring_bytes", "integer"),
    ({"ring_bytes": 1024}, "ring_bytes", "outside"),
    ({"containment": "jail"}, "containment", "not one of"),
    ({"cgroup_parent": "rel"}, "cgroup_parent", "absolute"),
    ({"owner": "a b"}, "owner", "white space"),
    ({"stderr_mode": "file"}, "stderr_mode", "not one of"),
    ({"grace": "5"}, "grace", "finite number"),
    ({"grace": math.nan}, "grace", "finite number"),
    ({"grace": -1}, "grace", "negative"),
    ({"husk_ttl": math.inf}, "husk_ttl", "finite number"),
    ({"husk_ttl": -1.0}, "husk_ttl", "negative"),
    ({"handshake_timeout": None}, "handshake_timeout", "finite number"),
    ({"handshake_timeout": 0}, "handshake_timeout", "positive"),
    ({"frame_timeout": float("inf")}, "frame_timeout", "finite number"),
    ({"frame_timeout": -1.0}, "frame_timeout", "positive"),
    ({"max_unread_bytes": 0}, "max_unread_bytes", "positive"),
    ({"max_unread_bytes": 1.5}, "max_unread_bytes", "integer"),
    ({"policy": 3}, "policy", "RestartPolicy"),
]


@pytest.mark.parametrize(("overrides", "option", "words"), BAD,
                         ids=[f"{option}-{i}" for i, (_, option, _) in enumerate(BAD)])
def test_a_bad_option_is_refused_with_its_name_when_built(overrides: dict[str, Any], option: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(**overrides)  # built: not later, inside a launch
    assert caught.value.option == option
    assert str(caught.value).startswith(f"{option}: ")
    assert words in str(caught.value)
    assert caught.value.command_line.startswith(f"{caught.value.flag or option}: ")  # what the CLI says


def test_the_command_line_names_the_option_as_it_is_typed() -> None:
    with pytest.raises(ConfigError) as caught:
        config(ring_bytes=1024)
    assert (caught.value.option, caught.value.flag) == ("ring_bytes", "--ring-bytes")
    assert caught.value.command_line == "--ring-bytes: 1024 is outside 65536..1073741824"


@pytest.mark.parametrize("overrides", [
    {}, {"argv": ("cat",)}, {"env": {}}, {"husk_ttl": None}, {"husk_ttl": 0}, {"grace": 0},
    {"cols": 1, "rows": 65535}, {"handshake_timeout": 0.25}, {"policy": RestartPolicy(mode="always")},
])
def test_good_options_pass_and_survive_the_launch_pipe(overrides: dict[str, Any]) -> None:
    good = config(**overrides)
    good.validate()
    again = SessionConfig.from_json(good.to_json())
    again.validate()
    assert again.to_json() == good.to_json()


def test_a_library_caller_s_bad_config_starts_nothing_and_leaves_nothing(tmp_path: Any) -> None:
    """The case that motivated the type checks: ``env=None`` used to fail inside the daemon, after it had
    created the session's log, with "'NoneType' object is not iterable"."""
    directory = tmp_path / "run"
    good = config(dir=str(directory))
    good.env = None  # type: ignore[assignment] - a record changed after it was built is checked again
    with pytest.raises(ConfigError, match="env"):
        launch(good, start_prefork=Prefork.start)
    assert not directory.exists() or os.listdir(directory) == []
