"""`shellper run --owner/--containment/--cgroup-parent`, and what ls and status say of them, through the real CLI.

Sessions that get a cgroup make it under a parent of this test's own (MOUNT/shellper-test-<random>), never
under the machine's default parent; the parent and anything left in it are removed at teardown.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.paths import PY, ROOT, SHELLPER_CLI
from support.processes import UNDER_SUBREAPER, daemons_for
from support.sessions import Sessions, left_in
from support.waiting import wait_gone

from shellper.client.launch import LaunchInfo, launch
from shellper.core.config import ConfigError, SessionConfig
from shellper.core.owner import default_owner
from shellper.host.cgroup import (
    DEFAULT_PARENT_NAME,
    SessionCgroup,
    default_parent,
    dir_key,
    find_mount,
    find_session_cgroups,
    own_cgroup,
)
from shellper.host.record import read_record

_OUR_ENV = ("SHELLPER_OWNER", "SHELLPER_CGROUP_PARENT", "SHELLPER_DIR")


def _env(**extra: str) -> dict[str, str]:
    """The test's environment without the variables that would choose an owner or a parent for the CLI."""
    env = {k: v for k, v in os.environ.items() if k not in _OUR_ENV}
    env.update(extra)
    return env


def _user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


# --------------------------------------------------------------------------------------------- cgroups


def _test_parent_base() -> str:
    """Where a per-test parent may be made, or skip saying why there is none (shellper.host.cgroup.default_parent)."""
    mount = find_mount()
    if mount is None:
        pytest.skip("no cgroup v2 hierarchy is mounted (shellper.host.cgroup.find_mount)")
    base = default_parent()
    if base is None:
        pytest.skip(f"no writable cgroup v2 parent under {mount} for uid {os.geteuid()} "
                    "(shellper.host.cgroup.default_parent: not root, not delegated, or managed by systemd)")
    # beside the machine's default parent, not in it: the test's cgroups never mix with real sessions'
    return mount if base == os.path.join(mount, DEFAULT_PARENT_NAME) else base


def _remove_cgroup_tree(path: str) -> bool:
    """rmdir ``path`` and every cgroup below it, deepest first; anything still running in it is killed first
    (cgroup.kill, then a wait on cgroup.events). True if something was still running."""
    if not os.path.isdir(path):
        return False
    mount = find_mount()
    assert mount is not None
    group = SessionCgroup(path, mount)
    populated = group.populated()
    if populated:
        group.kill()
        assert group.wait_empty(10.0), f"processes survived cgroup.kill of {path}: {group.procs()}"
    for root, _dirs, _files in os.walk(path, topdown=False):
        os.rmdir(root)
    return populated


@dataclass
class Shell:
    """The ``shellper`` CLI against one runtime directory, with the sessions it starts tracked for cleanup."""

    sessions: Sessions
    parent: str = ""
    """This test's cgroup parent (not created until a session needs it); "" for tests that make no cgroup."""

    @property
    def dir(self) -> Path:
        return self.sessions.dir

    def __call__(self, *args: str, env: dict[str, str] | None = None,
                 under_subreaper: bool = False) -> subprocess.CompletedProcess[str]:
        argv = [*SHELLPER_CLI, "--dir", str(self.dir), *args]
        if under_subreaper:  # whatever the CLI leaves running is reported as "orphans: [...]" on stderr
            argv = [PY, "-c", UNDER_SUBREAPER, *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env or _env(),
                              stdin=subprocess.DEVNULL)

    def run(self, name: str, *options: str, env: dict[str, str] | None = None) -> LaunchInfo:
        done = self("run", "--json", name, *options, "--", "cat", env=env)
        assert done.returncode == 0, done.stderr
        info = LaunchInfo(**json.loads(done.stdout))
        self.sessions.started.append(info)
        return info

    def stop(self, info: LaunchInfo) -> None:
        done = self("stop", info.name)
        assert done.returncode == 0, done.stderr
        assert wait_gone(info.pid, 30), f"shellper {info.pid} still running after shellper stop"

    def ls_row(self, name: str) -> dict[str, str]:
        """The table's row for ``name`` as {column: value}, cut at the header's column starts."""
        lines = self("ls", "-l").stdout.splitlines()
        header = lines[0]
        starts = [header.index(column) for column in ("NAME", "STATE", "PID", "CHILD", "UPTIME", "CLIENTS",
                                                      "RING", "OWNER", "CONTAINMENT", "LABELS", "CWD", "COMMAND",
                                                      "LAST EXIT")]
        columns = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        row = next(line for line in lines[1:] if line.split()[0] == name)
        return {c: row[a:b].strip() for c, a, b in zip(columns, starts, [*starts[1:], None], strict=True)}

    def ls_json(self, name: str) -> dict[str, object]:
        listed = json.loads(self("ls", "--json").stdout)
        return next(s for s in listed if s["name"] == name)  # type: ignore[no-any-return]


@pytest.fixture
def shell(sessions: Sessions) -> Shell:
    return Shell(sessions)


@pytest.fixture
def contained(runtime_dir: Path) -> Iterator[Shell]:
    """A Shell with a cgroup parent of its own; skipped where no writable cgroup v2 hierarchy exists.

    Its own Sessions (not the shared fixture) so that the order is certain: the sessions are stopped and
    checked first, then the parent and whatever a killed session left in it are removed."""
    parent = os.path.join(_test_parent_base(), f"shellper-test-{secrets.token_hex(6)}")
    sessions = Sessions(runtime_dir)
    try:
        yield Shell(sessions, parent)
    finally:
        problems = sessions.cleanup()
        if _remove_cgroup_tree(parent):
            problems.append(f"processes were still running in {parent}")
    if problems:
        pytest.fail("; ".join(problems))


def _leaf_of(record_cgroup: str | None, parent: str, name: str) -> str:
    assert record_cgroup is not None and os.path.dirname(record_cgroup) == parent, record_cgroup
    assert os.path.basename(record_cgroup).split(".")[2] == name
    return record_cgroup


# --------------------------------------------------------------------------------------------- run


@pytest.mark.parametrize(("request_", "expected"), [("auto", "cgroup"), ("cgroup", "cgroup"), ("none", "none")])
def test_run_records_the_containment_and_ls_and_status_show_it(contained: Shell, request_: str,
                                                               expected: str) -> None:
    """auto takes its parent from $SHELLPER_CGROUP_PARENT, cgroup from --cgroup-parent; none makes nothing,
    even with a parent given. `shellper stop` removes the session's cgroup."""
    parent = contained.parent
    if request_ == "auto":
        info = contained.run("c", env=_env(SHELLPER_CGROUP_PARENT=parent))
    else:
        info = contained.run("c", "--containment", request_, "--cgroup-parent", parent)
    assert (info.containment, info.owner) == (expected, _user())
    record = read_record(info.record)
    assert (record.containment, record.owner) == (expected, _user())
    assert info.child_pid is not None
    if expected == "cgroup":
        leaf = _leaf_of(record.cgroup, parent, "c")
        assert record.cgroup_id == os.stat(leaf).st_ino
        mount = find_mount()
        assert mount is not None
        assert own_cgroup(info.child_pid) == "/" + os.path.relpath(os.path.join(leaf, "child"), mount)
    else:
        assert (record.cgroup, record.cgroup_id) == (None, None)
        assert not os.path.exists(parent)  # containment none touches no cgroup at all

    row = contained.ls_row("c")
    assert (row["STATE"], row["OWNER"], row["CONTAINMENT"], row["LAST EXIT"]) == ("running", _user(), expected, "-")
    listed = contained.ls_json("c")
    assert (listed["owner"], listed["containment"], listed["cgroup"]) == (_user(), expected, record.cgroup)

    shown = contained("status", "c")
    assert shown.returncode == 0, shown.stderr
    assert f"\n  owner {_user()}, containment {expected}\n" in shown.stdout, shown.stdout
    assert (f"\n  cgroup {record.cgroup}\n" in shown.stdout) == (expected == "cgroup"), shown.stdout
    status = json.loads(contained("status", "c", "--json").stdout)
    assert (status["owner"], status["containment"], status["cgroup"]) == (_user(), expected, record.cgroup)

    contained.stop(info)
    if record.cgroup is not None:
        assert not os.path.exists(record.cgroup), "shellper stop left the session's cgroup"
        assert [e for e in os.listdir(parent) if os.path.isdir(os.path.join(parent, e))] == []


@pytest.mark.parametrize("containment", ["cgroup", "none"])
def test_a_dead_session_shows_its_owner_and_containment_from_its_record(contained: Shell,
                                                                        containment: str) -> None:
    info = contained.run("d", "--containment", containment, "--cgroup-parent", contained.parent,
                         "--owner", "tower-a")
    record = read_record(info.record)
    assert info.child_pid is not None
    os.kill(info.pid, signal.SIGKILL)
    assert wait_gone(info.pid, 10) and wait_gone(info.child_pid, 10)  # the child goes with it (pdeathsig)

    row = contained.ls_row("d")
    assert (row["STATE"], row["OWNER"], row["CONTAINMENT"]) == ("stale", "tower-a", containment), row
    listed = contained.ls_json("d")
    assert (listed["state"], listed["owner"], listed["containment"], listed["cgroup"]) == (
        "stale", "tower-a", containment, record.cgroup)

    shown = contained("status", "d")
    assert shown.returncode == 1  # not running: shown, but not a success
    assert shown.stdout.startswith("d: stale (no live shellper holds this session's lock; its record said running)")
    assert "\n  owner tower-a, containment " + containment + "\n" in shown.stdout, shown.stdout
    assert (f"\n  cgroup {record.cgroup}\n" in shown.stdout) == (containment == "cgroup"), shown.stdout
    assert shown.stderr == "shellper: session 'd' is not running (shown from its record)\n"
    status = json.loads(contained("status", "d", "--json").stdout)
    assert (status["state"], status["owner"], status["containment"], status["cgroup"]) == (
        "stale", "tower-a", containment, record.cgroup)
    assert status["record"]["instance_id"] == info.instance_id

    done = contained("stop", "d")  # a dead shellper's files go; its cgroup (if any) goes at teardown
    assert done.returncode == 0, done.stderr
    contained.sessions.started.remove(info)


@pytest.mark.parametrize("where", ["a plain directory", "a missing directory", "a file in the hierarchy"])
@pytest.mark.parametrize("foreground", [False, True], ids=["detached", "foreground"])
def test_containment_cgroup_with_an_unusable_parent_does_not_start(shell: Shell, tmp_path: Path, where: str,
                                                                   foreground: bool) -> None:
    """--containment cgroup does not fall back: the launch fails with one line naming the option and the
    parent, no process is left behind (the CLI runs under a subreaper), and no file or cgroup is made."""
    if where == "a plain directory":
        parent = str(tmp_path)
    elif where == "a missing directory":
        parent = str(tmp_path / "missing")
    else:
        mount = find_mount()
        if mount is None:
            pytest.skip("no cgroup v2 hierarchy is mounted (shellper.host.cgroup.find_mount)")
        parent = os.path.join(mount, "cgroup.procs")
    done = shell("run", "u", "--containment", "cgroup", "--cgroup-parent", parent,
                 *(["--foreground"] if foreground else []), "--", "cat", under_subreaper=True)
    assert done.returncode == 1 and done.stdout == "", done
    error, orphans = done.stderr.splitlines()
    assert error.startswith(f"shellper: --containment cgroup: cgroup {parent}: "), error
    # The subreaper waited for every process the CLI left: the run returned, so none is left running. Detached,
    # the daemon that reported the failure is one of them (it exits after its report, after the CLI may have).
    assert orphans.startswith("orphans: [") and (orphans == "orphans: []" or not foreground), orphans
    assert daemons_for(shell.dir) == []
    assert not shell.dir.exists() or left_in(shell.dir) == []
    assert list(tmp_path.iterdir()) == []
    mount = find_mount()
    if mount is not None:  # no cgroup of this runtime directory anywhere a shellper could have made one
        for place in (mount, os.path.join(mount, DEFAULT_PARENT_NAME)):
            assert find_session_cgroups(place, str(shell.dir)) == [], place
        assert not any(entry.startswith(dir_key(str(shell.dir))) for entry in os.listdir(mount))


@pytest.mark.parametrize(("options", "env", "says"), [
    (["--containment", "bogus"], {}, "shellper: --containment: 'bogus' is not one of auto, cgroup, none"),
    (["--containment", ""], {}, "shellper: --containment: '' is not one of auto, cgroup, none"),
    (["--cgroup-parent", ""], {}, "shellper: run: --cgroup-parent: must not be empty"),
    (["--owner", "a b"], {}, "shellper: run: --owner 'a b': contains white space, '/' or a control character"),
    (["--owner", "x/y"], {}, "shellper: run: --owner 'x/y': contains white space, '/' or a control character"),
    (["--owner", ""], {}, "shellper: run: --owner '': is empty"),
    (["--owner", "o" * 65], {}, "shellper: run: --owner '" + "o" * 65 + "': is 65 characters; at most 64 allowed"),
    ([], {"SHELLPER_OWNER": "a b"},
     "shellper: $SHELLPER_OWNER: 'a b' contains white space, '/' or a control character"),
], ids=["containment", "containment-empty", "parent-empty", "owner-space", "owner-slash", "owner-empty",
        "owner-long", "owner-env"])
def test_a_bad_option_is_refused_in_one_line_before_anything_starts(shell: Shell, options: list[str],
                                                                   env: dict[str, str], says: str) -> None:
    done = shell("run", "bad", *options, "--", "cat", env=_env(**env), under_subreaper=True)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.splitlines() == [says, "orphans: []"]
    assert daemons_for(shell.dir) == []
    assert not shell.dir.exists() or left_in(shell.dir) == []


# --------------------------------------------------------------------------------------------- owner


@pytest.mark.parametrize("how", ["--owner", "SHELLPER_OWNER", "both", "default"])
def test_the_owner_is_recorded_and_shown(shell: Shell, how: str) -> None:
    """--owner, else $SHELLPER_OWNER, else the user's name: in the info line, the record, ls and status."""
    options = ["--containment", "none"]  # no cgroup: the owner is the point here
    if how in ("--owner", "both"):
        options += ["--owner", "tower-a"]
    env = _env(SHELLPER_OWNER="tower-b") if how in ("SHELLPER_OWNER", "both") else _env()
    expected = {"--owner": "tower-a", "both": "tower-a", "SHELLPER_OWNER": "tower-b", "default": _user()}[how]
    info = shell.run("o", *options, env=env)
    assert info.owner == expected and read_record(info.record).owner == expected
    assert shell.ls_row("o")["OWNER"] == expected and shell.ls_json("o")["owner"] == expected
    assert f"\n  owner {expected}, containment none\n" in shell("status", "o").stdout
    assert json.loads(shell("status", "o", "--json").stdout)["owner"] == expected
    shell.stop(info)


# --------------------------------------------------------------------------------------------- launch()


def test_launch_names_the_default_owner_and_leaves_the_config_alone(sessions: Sessions,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHELLPER_OWNER", raising=False)
    config = SessionConfig(name="api", argv=["cat"], dir=str(sessions.dir), cwd=str(ROOT), env=_env(),
                           containment="none")
    info = launch(config)
    sessions.started.append(info)
    assert (info.owner, info.containment) == (default_owner(), "none") == (_user(), "none")
    assert read_record(info.record).owner == _user()
    assert config.owner == ""  # resolved on a copy: the caller's config is not changed
    assert info.to_dict()["owner"] == _user() and info.to_dict()["containment"] == "none"
    sessions.stop("api")

    monkeypatch.setenv("SHELLPER_OWNER", "no good")
    with pytest.raises(ConfigError, match=r"^\$SHELLPER_OWNER: 'no good' contains white space"):
        launch(config)
    with pytest.raises(ConfigError, match=r"^owner: contains white space"):
        launch(SessionConfig(name="api", argv=["cat"], dir=str(sessions.dir), cwd=str(ROOT), env={}, owner="a b"))
    assert left_in(sessions.dir) == []


def test_launch_with_containment_cgroup_reports_it(contained: Shell) -> None:
    config = SessionConfig(name="apic", argv=["cat"], dir=str(contained.dir), cwd=str(ROOT), env=_env(),
                           containment="cgroup", cgroup_parent=contained.parent, owner="tower-c")
    info = launch(config)
    contained.sessions.started.append(info)
    assert (info.owner, info.containment) == ("tower-c", "cgroup")
    leaf = _leaf_of(read_record(info.record).cgroup, contained.parent, "apic")
    contained.sessions.stop("apic")
    assert not os.path.exists(leaf)


def test_launch_info_still_takes_an_info_line_without_owner_or_containment() -> None:
    """Callers that build a LaunchInfo from an older info line (or positionally) keep working."""
    old = {"name": "x", "pid": 1, "start_time": 2, "boot_id": "b", "instance_id": "i", "child_pid": None,
           "socket": "/s", "record": "/r", "log": "/l"}
    info = LaunchInfo(**old)
    assert (info.owner, info.containment) == ("", "none")
    assert LaunchInfo(*old.values()) == info
    assert info.to_dict() == {**old, "owner": "", "containment": "none", "shellper_pid": 1, "shellper_start_time": 2}

