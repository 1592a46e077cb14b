"""Which host names shellper passes to ssh (shellper.core.names.validate_host), as a table, and that every
place a host comes in goes through it: the scan, the parser, ``HOST:NAME``, ssh, a registry row."""

from __future__ import annotations

import pytest

from shellper.cli.argscan import names_a_host, scan
from shellper.cli.onhost import remote_host
from shellper.core.names import BadHost, BadName, validate_host
from shellper.host.ssh import SshError, check_host, ssh_argv
from tower_client.hosts import split_by_host
from tower_client.reconcile import RegistryShapeError

ACCEPTED = [
    "gpu1", "gpu-1.example.com", "host_2", "10.0.0.7", "u@gpu1", "deploy.bot@gpu1", "ssh://gpu1",
    "ssh://u@gpu1:2222", "ssh://[::1]", "ssh://u@[fe80::1]:22", "a" * 255,
]
REFUSED = [
    ("", "has no host name"),
    ("-F /dev/null gpu1", "must not start with '-'"),
    ("-oProxyCommand=x", "must not start with '-'"),
    ("box:", "contains ':'"),  # HOST:NAME's HOST, or scp's form: never an ssh destination here
    ("gpu1:22", "contains ':'"),
    ("a$(touch x)", "contains '$'"),
    ("a`id`", "contains '`'"),
    ("a;b", "contains ';'"),
    ("a b", "contains ' '"),
    ("a\nb", "contains '\\n'"),
    ("a\x1b[2Jb", "contains '\\x1b'"),
    ("gpü", "contains 'ü'"),
    (".hidden", "must not start with '.'"),
    ("u@", "has no host name"),
    ("@gpu1", "has no user"),
    ("-u@gpu1", "user must not start with '-'"),
    ("u@-gpu1", "host name must not start with '-'"),
    ("a@b@c", "contains '@'"),
    ("ssh://", "has no host name"),
    ("ssh://gpu1:", "a ':' but no port"),
    ("ssh://gpu1:0", "not a number in 1..65535"),
    ("ssh://gpu1:65536", "not a number in 1..65535"),
    ("ssh://gpu1:22x", "not a number in 1..65535"),
    ("ssh://[gpu1]", "not an IPv6 address"),
    ("ssh://[::1]x", "not :PORT"),
    ("[::1]", "contains '['"),
    ("a" * 256, "at most 255"),
]


@pytest.mark.parametrize("host", ACCEPTED)
def test_accepted_hosts(host: str) -> None:
    assert validate_host(host) == host
    assert check_host(host) == host
    assert ssh_argv(host, "true")[-2:] == [host, "true"]


@pytest.mark.parametrize(("host", "why"), REFUSED, ids=[repr(h)[:30] for h, _ in REFUSED])
def test_refused_hosts(host: str, why: str) -> None:
    with pytest.raises(BadHost, match=None) as err:
        validate_host(host)
    assert why in err.value.reason
    with pytest.raises(SshError):
        check_host(host)
    with pytest.raises(SshError):
        ssh_argv(host, "true")


@pytest.mark.parametrize(("argv", "error"), [
    (["--host", "-F /dev/null gpu1", "stop", "--all"], BadHost),  # argparse takes it as the value
    (["--host=-F /dev/null gpu1", "stop", "--all"], BadHost),
    (["--host", "-F", "/dev/null", "stop", "--all"], BadHost),  # no value at all: not "here"
    (["stop", "--all", "--host"], BadHost),
    (["--host", "box:", "ls"], BadHost),
    (["--host", "a$(touch x)", "ls"], BadHost),
    (["stop", "box:"], BadName),  # HOST: with no session name
    (["attach", "a$(id):work"], BadHost),
    (["stop", "gpu1:ok", "gpu1:-bad"], BadName),
])
def test_the_command_line_refuses_a_bad_host(argv: list[str], error: type[Exception]) -> None:
    line = scan(argv)
    assert names_a_host(line)  # so the console script takes no quick path here
    with pytest.raises(error):
        remote_host(line)


@pytest.mark.parametrize("host", ["box:", "-F x", "a$(id)", ""])
def test_a_registry_row_with_a_bad_host_is_refused(host: str) -> None:
    with pytest.raises(RegistryShapeError, match="host"):
        split_by_host({"sessions": [{"name": "a", "instance_id": None, "host": host}]})
