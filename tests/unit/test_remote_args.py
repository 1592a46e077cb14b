"""``--host H`` and ``HOST:NAME`` on the command line: which host a line is for, and the line the remote
shellper gets (shellper.cli.onhost), as a table."""

from __future__ import annotations

import pytest

from shellper import __version__
from shellper.cli.argscan import names_a_host, scan
from shellper.cli.onhost import MixedHosts, hosts_of_names, remote_argv, remote_host, with_attach_host
from shellper.host.ssh import SshError, check_host, remote_shellper, remote_tower

CASES = [
    # argv, host, what the remote shellper runs
    (["ls"], None, None),
    (["attach", "work"], None, None),
    (["--host", "alpha", "ls", "--json"], "alpha", ["ls", "--json"]),
    (["ls", "--host=alpha"], "alpha", ["ls"]),
    (["ls", "--host", "u@alpha"], "u@alpha", ["ls"]),
    (["attach", "alpha:work", "-r"], "alpha", ["attach", "work", "-r"]),
    (["send", "alpha:work", "alpha:work"], "alpha", ["send", "work", "alpha:work"]),  # the text is not a name
    (["send", "work", "a:b"], None, None),
    (["run", "alpha:job", "--", "sh", "-c", "echo alpha:job"], "alpha", ["run", "job", "--", "sh", "-c",
                                                                         "echo alpha:job"]),
    (["--dir", "/d", "stop", "alpha:a", "alpha:b"], "alpha", ["--dir", "/d", "stop", "a", "b"]),
    (["--host", "beta", "attach", "work"], "beta", ["attach", "work"]),
    (["legacy-main", '{"command": "sh", "socketPath": "/r/shellper-1.sock", "env": {"A": "b:c"}}'], None, None),
]


@pytest.mark.parametrize(("argv", "host", "remote"), CASES)
def test_host_and_remote_line(argv: list[str], host: str | None, remote: list[str] | None) -> None:
    line = scan(argv)
    assert remote_host(line) == host
    assert names_a_host(line) or host is None
    if host is not None:
        assert remote_argv(argv, line, host) == remote


@pytest.mark.parametrize(("args", "hinted"), [
    (["run", "job", "--", "cat"], ["run", "--attach-host", "h", "job", "--", "cat"]),
    (["--dir", "run", "run", "job"], ["--dir", "run", "run", "--attach-host", "h", "job"]),  # a directory named run
    (["--dir=/d", "run", "job", "git", "log"], ["--dir=/d", "run", "--attach-host", "h", "job", "git", "log"]),
    (["ls", "run"], ["ls", "run"]),
    (["--", "run", "x"], ["--", "run", "x"]),
])
def test_a_remote_run_names_its_session_as_host_colon_name(args: list[str], hinted: list[str]) -> None:
    assert with_attach_host(args, "h") == hinted


@pytest.mark.parametrize(("argv", "groups"), [
    (["stop", "alpha:a", "beta:b"], {"alpha": ["alpha:a"], "beta": ["beta:b"]}),
    (["stop", "box:r2", "l2", "box:r3"], {"box": ["box:r2", "box:r3"], None: ["l2"]}),
    (["stop", "a", "b"], {None: ["a", "b"]}),
    (["stop", "--host", "box", "a", "b"], {}),  # --host: all of them there
    (["ls"], {}),
])
def test_stops_names_are_grouped_by_host(argv: list[str], groups: dict[str | None, list[str]]) -> None:
    assert hosts_of_names(scan(argv)) == groups


def test_ls_takes_one_host() -> None:
    assert remote_host(scan(["ls", "alpha:", "--json"])) == "alpha"
    assert remote_argv(["ls", "alpha:", "--json"], scan(["ls", "alpha:", "--json"]), "alpha") == ["ls", "--json"]
    with pytest.raises(MixedHosts):
        remote_host(scan(["ls", "alpha:", "beta:"]))


@pytest.mark.parametrize("host", ["", "-oProxyCommand=x", "a b", "a\nb"])
def test_what_ssh_would_misread_is_not_a_host(host: str) -> None:
    with pytest.raises(SshError):
        check_host(host)


def test_remote_commands_are_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHELLPER_REMOTE", raising=False)
    monkeypatch.delenv("SHELLPER_REMOTE_TOWER", raising=False)
    # without $SHELLPER_REMOTE: this version's own copy there, by its path (shellper.host.selfinstall)
    copy = f"~/.local/share/shellper/{__version__}/bin"
    assert remote_shellper(["send", "w", "a b; rm -rf /"]) == f"{copy}/shellper send w 'a b; rm -rf /'"
    assert remote_tower(["ls"]) == f"{copy}/tower-client ls"
    monkeypatch.setenv("SHELLPER_REMOTE", "shellper")
    assert remote_tower(["ls"]) == "tower-client ls"
    monkeypatch.setenv("SHELLPER_REMOTE", "/opt/v/bin/shellper")
    assert remote_tower(["ls", "--json"]) == "/opt/v/bin/tower-client ls --json"


@pytest.mark.parametrize(("argv", "remote"), [
    (["--host", "a", "ls", "--json"], ["ls", "--json"]),
    (["--host=a", "--host-timeout", "5", "--owner", "o", "reap", "x"], ["--owner", "o", "reap", "x"]),
    (["--host-timeout=5", "--host", "a", "reconcile", "--registry", "/r.json", "--apply"],
     ["reconcile", "--registry", "-", "--apply"]),
    (["--host", "a", "reconcile", "--registry=/r.json"], ["reconcile", "--registry=-"]),
])
def test_the_remote_tower_client_line(argv: list[str], remote: list[str]) -> None:
    from tower_client.cli import remote_line

    assert remote_line(argv) == remote


def test_a_legacy_config_with_colons_stays_here() -> None:
    """legacy-main's operand is JSON (``"command": ...``): its colons name no host."""
    assert not names_a_host(scan(["legacy-main", '{"command": "sh", "args": []}']))
