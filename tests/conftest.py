"""Pytest's hooks for the whole suite: the leak check on every test, markers by need, and the run's clean-up.

Every test must leave behind what it found: no extra open fds in the test process, no child process
(running or zombie), and no session cgroup; the ``sessions`` fixture (support.sessions) adds no shellper, no
descendant of one and no file in its runtime directory. The helpers and fixtures the tests share live in the
``support`` package (tests/support); the run as a whole (its mark, cgroup tree and guard) in support.run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.launchers import end, left_by_the_test, pids_now
from support.processes import children
from support.run import (
    CGROUP_PARENT,
    RUN_OWNER,
    clean_up_run,
    default_parent_exists,
    default_parent_made,
    launcher_cgroups,
    remove_cgroup_tree,
    restore_ignored_interrupts,
    session_cgroups,
)

# pytest caches each test module with its asserts rewritten (tests/**/__pycache__), unless bytecode writing is off:
# then every process of every run rewrites every module again, ~9 s of CPU per xdist worker. The processes the tests
# start still inherit PYTHONDONTWRITEBYTECODE; only pytest's own caching comes back.
sys.dont_write_bytecode = False

pytest_plugins = ["support.sessions", "support.legacy", "support.remote"]
"""The shared fixtures: sessions, other, runtime_dir, cli_runtime_dir; legacy_env; the ssh world and remote."""

# Launches are cold here unless the run's environment says SHELLPER_LAUNCHER (the product's default is warm): a
# launcher per test directory, which a test's one or two launches never use, cost the suite a quarter more time
# (bench/NOTES.md). tests/test_launcher.py and the tests that take the ``launches`` fixture (support.launchers) run
# warm too, with their directory's launcher started ahead. Each runtime directory's launcher ends with its test, and
# the leak guard fails a test that leaves one, or its cgroup.
os.environ.setdefault("SHELLPER_LAUNCHER", "off")


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Iterator[None]:
    """After everything else (xdist has stopped its workers by then): end what the run left, and fail a run
    that seemed to pass but left something running."""
    try:
        return (yield)
    finally:
        ended = clean_up_run()
        if ended:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            text = "what this run left, ended or removed at its end: " + "; ".join(ended)
            if reporter is not None:
                reporter.ensure_newline()
                reporter.write_line(text, red=True)
            else:
                print(text, file=sys.stderr)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: Any) -> None:
    clean_up_run()  # again, for a run interrupted before its session finished


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM and SIGHUP end a run as Ctrl-C does: fixtures tear down, sessions stop, the sweep runs. xdist's
    controller passes the signal on to its workers (its only children: it runs no test itself)."""
    if _xdist_controller:
        for pid in children(os.getpid()):
            with contextlib.suppress(OSError):
                fd = os.pidfd_open(pid)
                try:
                    signal.pidfd_send_signal(fd, signal.SIGTERM)
                finally:
                    os.close(fd)
    raise KeyboardInterrupt(f"signal {signum}")


_xdist_controller: list[bool] = []


def pytest_configure(config: pytest.Config) -> None:
    if RUN_OWNER and config.getoption("numprocesses", None):
        _xdist_controller.append(True)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _interrupt)
        if RUN_OWNER:  # xdist's workers, and what the tests start, inherit it from here
            restore_ignored_interrupts()


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


@pytest.fixture(autouse=True)
def no_leaks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail a test that leaves an fd open, a child process (or zombie), a session cgroup, a warm launcher
    (support.launchers) or a launcher's cgroup behind, or that made the machine's default cgroup parent
    (support.run.DEFAULT_PARENT: seen where it was not there before the test)."""
    fds_before = _open_fds()
    kids_before = children(os.getpid())
    cgroups_before = session_cgroups() | launcher_cgroups()
    pids_before = pids_now()
    default_parent_before = default_parent_exists()
    yield
    made = default_parent_made(default_parent_before)
    kept_root = str(tmp_path_factory.getbasetemp())
    deadline = time.monotonic() + 5.0
    while True:
        extra_kids = children(os.getpid()) - kids_before
        extra_fds = _open_fds() - fds_before
        extra_cgroups = (session_cgroups() | launcher_cgroups()) - cgroups_before
        extra_launchers = left_by_the_test(pids_before, kept_root)
        if not extra_kids and not extra_fds and not extra_cgroups and not extra_launchers and made is None:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    for ident in extra_launchers:
        end(ident)
    for pid in extra_kids:  # clean up so the next test starts clean, then fail this one
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    details = [] if made is None else [made]
    for name in sorted(extra_cgroups):
        assert CGROUP_PARENT is not None
        remove_cgroup_tree(os.path.join(CGROUP_PARENT, name))
        details.append(f"{'launcher' if name.startswith('launcher.') else 'session'} cgroup left: {name}")
    if extra_kids:
        details.append(f"child processes left: {sorted(extra_kids)}")
    if extra_launchers:
        details.append("warm launchers left: " + ", ".join(f"{i.pid} in {d}" for i, d in extra_launchers.items()))
    if extra_fds:
        details.append(f"fds left open: {sorted(extra_fds)} -> "
                       + ", ".join(_fd_target(fd) for fd in sorted(extra_fds)))
    pytest.fail("leak: " + "; ".join(details))


def _fd_target(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


# ------------------------------------------------------------------ what a test needs, as markers

_FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "sessions": ("pty",), "runtime_dir": ("pty",), "cli_runtime_dir": ("pty",), "runs": ("pty",),
    "shared": ("pty",), "shell": ("pty",),
    "contained": ("cgroup", "pty"),
    "world": ("ssh", "pty"), "remote": ("ssh", "pty"),
    "full_fs": ("root",), "tiny_fs": ("root",),
}
"""A test that uses the fixture needs what it names."""
_MODULE_MARKS: dict[str, tuple[str, ...]] = {
    "test_screens": ("pty",), "test_screen_replay": ("pty",), "test_attach": ("pty",), "test_habits": ("pty",),
    "test_terminal_handoff": ("pty",), "test_cli_term": ("pty",), "test_demo": ("pty",), "test_readme": ("pty",),
    "test_interrupted_run": ("pty",), "test_remote": ("ssh",), "test_remote_async": ("ssh",),
    "test_legacy_node": ("node",),
    "test_containment": ("cgroup",), "test_cli_containment": ("cgroup",), "test_killsoak": ("cgroup", "root"),
}
"""Every test of the module needs what it names (terminals driven through pexpect, a private sshd...)."""
_TEST_MARKS: dict[str, tuple[str, ...]] = {
    "test_cli_files.py::test_stop_fails_when_its_connection_ends_while_the_shellper_is_stopped": ("root",),
    "test_server_lifecycle.py::test_an_unsafe_runtime_dir_is_refused": ("root",),
    "test_server_lifecycle.py::test_a_stop_that_fails_still_ends_the_session_and_says_why": ("root",),
    "test_hostile.py::test_client_of_another_uid_is_refused": ("root",),
    "test_tower_apply.py::test_real_pid_reuse_is_never_signalled": ("root",),
}
"""Needs a test finds out only in its body (a pytest.skip there); a name here that matches no test of a
collected module fails the collection, so a renamed test cannot silently lose its marker."""
_REASON_MARKS = {"cgroup": "cgroup", "root": "needs root", "node": "node is not installed"}
"""A skipif whose reason says this: the test needs that."""


RECORDS_RERUN_EXAMPLES = 10
"""Examples per property test when the unit tests run again on the standard dataclasses (SHELLPER_RECORDS,
tests/test_records.py): the rerun shows the records work there; the examples' paths were explored in the
first run, on the same code."""


def _fewer_examples_on_standard_dataclasses(items: list[pytest.Item]) -> None:
    if os.environ.get("SHELLPER_RECORDS") != "dataclasses":
        return
    from hypothesis import settings

    for item in items:
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        current = getattr(test, "_hypothesis_internal_use_settings", None)  # where @given keeps its settings
        if current is not None and current.max_examples > RECORDS_RERUN_EXAMPLES:
            test._hypothesis_internal_use_settings = settings(current, max_examples=RECORDS_RERUN_EXAMPLES)


LONGEST_FIRST = ("tests/test_records.py::test_the_pure_cores_pass_with_the_standard_dataclasses_too",)
"""Tests run first: each takes far longer than the rest (tests/unit again, in one process), so started last on
a worker it would finish alone after everything else."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _fewer_examples_on_standard_dataclasses(items)
    items.sort(key=lambda item: item.nodeid not in LONGEST_FIRST)  # stable: the rest keep their order
    matched: set[str] = set()
    modules: set[str] = set()
    for item in items:
        module = Path(str(item.fspath)).name
        modules.add(module)
        needs: set[str] = set(_MODULE_MARKS.get(module.removesuffix(".py"), ()))
        for name in getattr(item, "fixturenames", ()):
            needs.update(_FIXTURE_MARKS.get(name, ()))
        key = f"{module}::{item.name.split('[')[0]}"
        if key in _TEST_MARKS:
            matched.add(key)
            needs.update(_TEST_MARKS[key])
        for mark in item.iter_markers("skipif"):
            reason = str(mark.kwargs.get("reason", ""))
            needs.update(need for need, says in _REASON_MARKS.items() if says in reason)
        if "[cgroup" in item.name or "-cgroup" in item.name:  # parametrized over containment modes
            needs.add("cgroup")
        for need in sorted(needs):
            item.add_marker(need)
    picked = any("::" in str(arg) for arg in config.args)  # tests picked by id: a module is not collected whole
    stale = [key for key in _TEST_MARKS if key.split("::")[0] in modules and key not in matched]
    if stale and not picked:
        raise pytest.UsageError(f"conftest._TEST_MARKS names tests that do not exist: {stale}")
