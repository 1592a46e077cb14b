"""The Tower's options as tables: each record refuses a bad value when built, naming the field, converts a
dict where a record is expected, and shows its fields in its signature."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

import tower_client
from shellper.core.config import ConfigError, SessionConfig
from shellper.core.errors import ShellperError
from shellper.core.exits import PolicyError, RestartPolicy
from shellper.core.structs import MISSING
from shellper.core.structs import fields as record_fields
from tower_client.agent import AgentCommand, AgentCommandError
from tower_client.options import FleetPolicy, OnDeath, SessionOptions, SessionSpec
from tower_client.resume import Backoff

AGENT = AgentCommand(("claude",))

BAD_SPECS: list[tuple[dict[str, Any], str, str]] = [
    # (SessionSpec's arguments after the name, the field named, words in the message)
    ({"argv": "sleep 100"}, "argv", "not one string"),
    ({"argv": b"sleep"}, "argv", "not one string"),
    ({}, "argv", "no command"),
    ({"argv": ["a"], "agent": AGENT}, "argv", "not both"),
    ({"argv": ["a", 1]}, "argv", "list of strings"),
    ({"argv": None}, "argv", "list of strings"),
    ({"argv": ["a\0b"]}, "argv", "NUL"),
    ({"agent": {"argv": ["claude"]}}, "agent", "AgentCommand"),
    ({"argv": ["a"], "cwd": 3}, "cwd", "path"),
    ({"argv": ["a"], "env": ["A=1"]}, "env", "dict"),
    ({"argv": ["a"], "env": {"A": 1}}, "env", "strings"),
    ({"argv": ["a"], "options": 3}, "options", "SessionOptions"),
    ({"argv": ["a"], "options": {"colz": 120}}, "options.colz", "not a field of SessionOptions"),
    ({"argv": ["a"], "options": {"cwd": "/"}}, "options.cwd", "field of SessionSpec"),
    ({"argv": ["a"], "options": {"owner": "me"}}, "options.owner", "the Fleet's"),
    ({"argv": ["a"], "options": {"cols": 0}}, "options.cols", "outside"),
    ({"argv": ["a"], "options": {"cols": "80"}}, "options.cols", "integer"),
    ({"argv": ["a"], "options": {"ring_bytes": 1024}}, "options.ring_bytes", "outside"),
    ({"argv": ["a"], "options": {"stderr_mode": "file"}}, "options.stderr_mode", "not one of"),
    ({"argv": ["a"], "options": {"grace": -1}}, "options.grace", "negative"),
    ({"argv": ["a"], "options": {"policy": 3}}, "options.policy", "RestartPolicy"),
    ({"argv": ["a"], "columns": {"launch": {}}}, "columns", "written by the Fleet"),
    ({"argv": ["a"], "columns": {1: "x"}}, "columns", "string keys"),
    ({"argv": ["a"], "columns": {"x": object()}}, "columns", "not JSON"),
    ({"argv": ["a"], "columns": {"host": "gpu1"}}, "columns", "written by the Fleet"),
    ({"argv": ["a"], "host": "-oProxyCommand=x"}, "host", ""),
    ({"argv": ["a"], "host": "a b"}, "host", ""),
    ({"agent": AgentCommand(("claude",)), "host": "gpu1"}, "host", "this machine only"),
]


@pytest.mark.parametrize(("kwargs", "option", "words"), BAD_SPECS)
def test_a_bad_spec_is_refused_when_built_naming_the_field(kwargs: dict[str, Any], option: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SessionSpec("s", **kwargs)
    assert caught.value.option == option
    assert words in str(caught.value)
    assert isinstance(caught.value, ShellperError)


def test_a_bad_name_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as caught:
        SessionSpec("../x", ["a"])
    assert caught.value.option == "name"


@pytest.mark.parametrize(("policy", "field"), [({"mode": "sometimes"}, "mode"), ({"moed": "always"}, "moed"),
                                               ({"backoff_initial": -1}, "backoff_initial")])
def test_a_policy_given_as_a_dict_is_checked_key_by_key(policy: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError) as caught:
        SessionSpec("s", ["a"], options={"policy": policy})
    assert caught.value.field == field


def test_dicts_where_records_are_expected_are_converted() -> None:
    spec = SessionSpec("s", ["a", "b"], cwd=Path("/tmp"), env={"A": "1"},
                       options={"ring_bytes": 8 << 20, "policy": {"mode": "always", "max_restarts": 3}})
    assert spec.argv == ("a", "b")
    assert spec.cwd == "/tmp"
    assert spec.options == SessionOptions(ring_bytes=8 << 20, policy=RestartPolicy(mode="always", max_restarts=3))
    assert SessionSpec("s", agent=AGENT).agent == AGENT


def test_session_options_are_keyword_fields_that_launch_as_session_config_fields() -> None:
    with pytest.raises(TypeError):
        SessionOptions(120)  # type: ignore[misc]
    params = inspect.signature(SessionOptions).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    config_defaults = {f.name: f.default if f.default is not MISSING else f.default_factory()
                       for f in record_fields(SessionConfig) if f.name not in ("name", "argv", "dir", "cwd", "env",
                                                                                "owner")}
    assert SessionOptions().config_fields() == config_defaults  # same fields, same defaults


def test_session_config_and_restart_policy_show_their_fields() -> None:
    assert list(inspect.signature(SessionConfig).parameters)[:5] == ["name", "argv", "dir", "cwd", "env"]
    assert "ring_bytes" in inspect.signature(SessionConfig).parameters
    assert "max_restarts" in inspect.signature(RestartPolicy).parameters


def test_session_config_converts_a_policy_dict() -> None:
    config = SessionConfig("s", ["a"], "/tmp", "/", {}, policy={"mode": "no"})  # type: ignore[arg-type]
    assert config.policy == RestartPolicy(mode="no")
    with pytest.raises(PolicyError):
        SessionConfig("s", ["a"], "/tmp", "/", {}, policy={"mood": "never"})  # type: ignore[arg-type]


BAD_FLEET_POLICIES: list[tuple[dict[str, Any], str]] = [
    ({"on_death": "ignore"}, "on_death"),
    ({"concurrency": 0}, "concurrency"),
    ({"concurrency": True}, "concurrency"),
    ({"grace": -1}, "grace"),
    ({"grace": "5"}, "grace"),
    ({"husk_max_age": -1}, "husk_max_age"),
    ({"backoff": 3}, "backoff"),
    ({"backoff": {"inital": 1.0}}, "backoff.inital"),
]


@pytest.mark.parametrize(("kwargs", "option"), BAD_FLEET_POLICIES)
def test_a_bad_fleet_policy_names_the_field(kwargs: dict[str, Any], option: str) -> None:
    with pytest.raises(ConfigError) as caught:
        FleetPolicy(**kwargs)
    assert caught.value.option == option


def test_an_agent_command_refuses_one_string_and_keeps_a_list_as_a_tuple() -> None:
    with pytest.raises(AgentCommandError, match="not one string"):
        AgentCommand("claude")  # type: ignore[arg-type]
    assert AgentCommand(["claude", "--model", "x"]).argv == ("claude", "--model", "x")  # type: ignore[arg-type]


def test_a_fleet_policy_converts_strings_and_dicts() -> None:
    policy = FleetPolicy(on_death="reap", backoff={"initial": 0.5})  # type: ignore[arg-type]
    assert policy.on_death is OnDeath.REAP
    assert policy.backoff == Backoff(initial=0.5)


def test_the_options_are_exported_from_the_package() -> None:
    for name in ("SessionOptions", "SessionSpec", "FleetPolicy", "RestartPolicy", "OnDeath", "Backoff",
                 "ConfigError", "PolicyError"):
        assert name in tower_client.__all__
        assert getattr(tower_client, name) is not None
