"""Shell completion and man pages, generated from the argparse parsers by ``make completions`` (shellper's
shipped in the package, printed by ``shellper completions SHELL`` and ``shellper man``), used as a person
would: Tab in a real bash and zsh, fish's completer, ``man -l``."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from support.terminals import Terminals, shell_terminals

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 20.0

pytestmark = pytest.mark.skipif(importlib.util.find_spec("shtab") is None, reason="the build extra is not installed")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("completions")
    bin_dir = Path(sys.executable).parent
    # A stamp made now is newer than every file the bootstrap rule depends on, so make never runs that rule
    # (which reinstalls the package under the running suite) and uses this interpreter's venv as it is.
    stamp = tmp_path_factory.mktemp("stamp") / "installed"
    stamp.touch()
    done = subprocess.run(["make", "-s", "completions", f"COMPLETIONS={out}", f"SHARE={out}", f"BIN={bin_dir}",
                           f"STAMP={stamp}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    yield out
    shutil.rmtree(out)
    shutil.rmtree(stamp.parent)


@pytest.fixture
def terminals() -> Iterator[Terminals]:
    yield from shell_terminals("shcomp-")


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", PYTHONPATH=str(REPO))


def _shellper(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shellper", *args], capture_output=True, text=True, timeout=60,
                          env=env or _env(), stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("shell", "name"),
                         [("bash", "shellper.bash"), ("zsh", "_shellper"), ("fish", "shellper.fish")])
def test_the_shipped_scripts_are_what_the_generator_makes_and_what_completions_prints(
        generated: Path, shell: str, name: str) -> None:
    shipped = (REPO / "shellper" / "share" / name).read_text()
    assert shipped == (generated / name).read_text(), f"shellper/share/{name} is stale: run make completions"
    assert _shellper("completions", shell).stdout == shipped


def test_the_shipped_man_page_is_the_generators_and_man_prints_it(generated: Path) -> None:
    shipped = (REPO / "shellper" / "share" / "shellper.1").read_text()
    assert shipped == (generated / "shellper.1").read_text(), "shellper/share/shellper.1 is stale: make completions"
    assert _shellper("man").stdout == shipped  # not a terminal: the roff source, to install or pipe


@pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")
def test_man_on_a_terminal_shows_the_manual() -> None:
    term = pexpect.spawn(sys.executable, ["-m", "shellper", "man"], env=dict(_env(), MANPAGER="cat", PAGER="cat"),
                         timeout=TIMEOUT, dimensions=(40, 100))
    try:
        term.expect(r"SHELLPER\(1\) +shellper manual")
        term.expect("keep a terminal session alive")
        term.expect(pexpect.EOF)
    finally:
        term.close(force=True)
    assert term.exitstatus == 0


def test_completions_refuses_another_shell() -> None:
    done = _shellper("completions", "tcsh")
    assert done.returncode == 2 and "'tcsh': one of bash, zsh, fish" in done.stderr


def test_bash_completes_a_live_sessions_name_on_tab(terminals: Terminals) -> None:
    terminals.run("zebra-one", "sleep", "60")
    env = dict(_env(), PS1="b$ ", SHELLPER_DIR=terminals.dir)
    term = pexpect.spawn("bash", ["--norc", "--noprofile"], env=env, timeout=TIMEOUT)
    try:
        term.sendline('eval "$(shellper completions bash)"; echo ready-$((1+1))')
        term.expect("ready-2")
        term.send("shellper attach zeb\t")
        term.expect("zebra-one ")
        term.send("\x15shellper tail --plain zebra\t")  # after an option too
        term.expect("zebra-one ")
        term.send("\x15shellper run zeb\t")  # a new session's name: nothing to offer
        assert term.expect(["zebra-one", pexpect.TIMEOUT], timeout=1.0) == 1
    finally:
        term.close(force=True)


def test_bash_completes_a_hosts_names_after_host_colon(terminals: Terminals) -> None:
    """HOST:NAME: the names come from ``shellper --host HOST ls --names`` (a stand-in here, as no sshd runs;
    tests/test_remote.py drives the real one), and bash keeps HOST: on the line although it splits at colons."""
    env = dict(_env(), PS1="b$ ", SHELLPER_DIR=terminals.dir)
    term = pexpect.spawn("bash", ["--norc", "--noprofile"], env=env, timeout=TIMEOUT)
    try:
        term.sendline('eval "$(shellper completions bash)"; shellper() { [ "$1 $2 $4" = "--host box --names" ] '
                      '&& printf "far-away\\nfar-off\\n"; }; echo ready-$((1+1))')
        term.expect("ready-2")
        term.send("shellper stop box:far-a\t")
        term.expect("box:far-away ")
        term.send("\x15echo done-$((2+1))\r")
        term.expect("done-3")
    finally:
        term.close(force=True)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_a_live_sessions_name_on_tab(terminals: Terminals, tmp_path: Path) -> None:
    terminals.run("zebra-two", "sleep", "60")
    (tmp_path / "_shellper").write_text(_shellper("completions", "zsh").stdout)
    env = dict(_env(), PS1="z$ ", SHELLPER_DIR=terminals.dir)
    term = pexpect.spawn("zsh", ["-f"], env=env, timeout=TIMEOUT)
    try:
        term.sendline(f"fpath=({tmp_path} $fpath); autoload -U compinit; compinit -u -D; echo ready-$((1+1))")
        term.expect("ready-2")
        term.send("shellper attach zeb\t")
        term.expect("zebra-two")
        term.send("\x15shellper() { [ \"$1 $2 $4\" = '--host box --names' ] && print far-away }\r")
        term.send("shellper stop box:far-a\t")
        term.expect("box:far-away")
    finally:
        term.close(force=True)


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_session_names_here_and_on_a_host(terminals: Terminals) -> None:
    terminals.run("zebra-three", "sleep", "60")
    stand_in = ('function shellper; if test "$argv[1]" = --host; printf "far-away\\n"; else; command shellper $argv;'
                ' end; end')
    script = (f"shellper completions fish | source; complete -C 'shellper tail zeb'; {stand_in};"
              " complete -C 'shellper stop box:f'")
    done = subprocess.run(["fish", "--no-config", "-c", script],
                          capture_output=True, text=True, timeout=60, env=dict(_env(), SHELLPER_DIR=terminals.dir))
    assert done.returncode == 0, done.stderr
    assert [line.split("\t")[0] for line in done.stdout.splitlines()] == ["zebra-three", "box:far-away"]


def test_the_names_listing_is_hidden_and_asks_no_session(terminals: Terminals) -> None:
    terminals.run("n1", "sleep", "60")
    terminals.run("n2", "sleep", "60")
    assert terminals.cli("ls", "--names").stdout == "n1\nn2\n"
    assert "--names" not in terminals.cli("ls", "--help").stdout


def test_every_file_is_made(generated: Path) -> None:
    assert sorted(p.name for p in generated.iterdir()) == sorted([
        "shellper.bash", "_shellper", "shellper.fish", "shellper.1",
        "tower-client.bash", "_tower-client", "tower-client.fish", "tower-client.1"])


def test_bash_completes_commands_and_options_on_tab(generated: Path) -> None:
    term = pexpect.spawn("bash", ["--norc", "--noprofile"], env=dict(_env(), PS1="b$ "), timeout=TIMEOUT)
    try:
        term.sendline(f"source {generated}/shellper.bash; source {generated}/tower-client.bash; echo ready-$((1+1))")
        term.expect("ready-2")
        term.send("shellper att\t")
        term.expect("attach ")
        term.send("\x15shellper stop --gr\t")
        term.expect("--grace ")
        term.send("\x15tower-client reco\t")
        term.expect("reconcile ")
    finally:
        term.close(force=True)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_commands_on_tab(generated: Path) -> None:
    term = pexpect.spawn("zsh", ["-f"], env=dict(_env(), PS1="z$ "), timeout=TIMEOUT)
    try:
        term.sendline(f"fpath=({generated} $fpath); autoload -U compinit; compinit -u -D; echo ready-$((1+1))")
        term.expect("ready-2")
        term.send("shellper att\t")
        term.expect("attach")  # typed "att": the rest is the completion's (zsh draws the space in bold)
    finally:
        term.close(force=True)


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_commands_and_options(generated: Path) -> None:
    done = subprocess.run(["fish", "--no-config", "-c", f"source {generated}/shellper.fish; complete -C 'shellper att';"
                           " complete -C 'shellper stop --gr'"], capture_output=True, text=True, timeout=60, env=_env())
    assert done.returncode == 0, done.stderr
    assert [line.split("\t")[0] for line in done.stdout.splitlines()] == ["attach", "--grace"]


def test_the_man_pages_render_with_every_command(generated: Path) -> None:
    env = dict(_env(), MANWIDTH="100")
    page = subprocess.run(["man", "-l", str(generated / "shellper.1")], capture_output=True, text=True, env=env,
                          timeout=60).stdout
    for command in ("run", "ls", "attach", "send", "tail", "signal", "resize", "stop", "status"):
        assert f"shellper {command}" in page, command
    assert "--detach-key" in page
    page = subprocess.run(["man", "-l", str(generated / "tower-client.1")], capture_output=True, text=True, env=env,
                          timeout=60).stdout
    assert "tower-client reconcile" in page and "--apply" in page


def test_the_generators_are_build_time_only() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(dep.startswith(("shtab", "argparse-manpage")) for dep in project["dependencies"])
    assert {dep.split(">")[0] for dep in project["optional-dependencies"]["build"]} == {"shtab", "argparse-manpage"}
    sources = [*REPO.joinpath("shellper").rglob("*.py"), *REPO.joinpath("tower_client").rglob("*.py")]
    assert not [p for p in sources if "shtab" in p.read_text() or "argparse_manpage" in p.read_text()]
