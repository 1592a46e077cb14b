"""The test run as a whole: its mark, its cgroup tree, what it left, and its guard.

Imported by conftest.py when pytest starts (and so in every xdist worker): the run's first process marks the run
in the environment (RUN_ENV), makes the run's cgroup parent, and starts the guard (support/run_guard.py) that ends
what the run left should the run be killed. How a run ends, and what ends its sessions:

- normally, or interrupted (Ctrl-C, SIGTERM, SIGHUP: conftest turns the last two into a KeyboardInterrupt): the
  fixtures tear down (each test's sessions stopped), then :func:`clean_up_run` ends whatever still carries the
  run's mark and removes the cgroup tree; a run that seemed to pass but left something fails;
- SIGKILL of pytest (or of xdist's controller): nothing in pytest runs; the guard, waiting on a pidfd of the run's
  first process, ends every process carrying the mark (the workers, the sessions, their children) and removes the
  cgroup tree with everything in it (the tests' runtime directories, files only, stay in /tmp);
- a run whose guard was killed too: the next run removes its empty cgroups (:func:`sweep_dead_runs`); processes
  that dropped the mark from their environment and escaped the cgroup tree are beyond either.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

from shellper.host import cgroup
from support.run_guard import RUN_ENV, remove_tree, sweep

TEST_PARENT_PREFIX = "shellper-test-"
_RUN_CGROUP_ENV = "PYTEST_SHELLPER_CGROUP"
"""The run's own cgroup (MOUNT/shellper-test-<pid>), made by the run's first process, for its workers."""
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""This process's pytest-xdist worker id (gw0, gw1, ...), or None in the run's first process."""
RUN_OWNER = RUN_ENV not in os.environ
"""Whether this process started the run (a plain pytest, or xdist's controller): it cleans up after it."""
if RUN_OWNER:
    os.environ[RUN_ENV] = f"{os.getpid()}-{secrets.token_hex(8)}"
RUN = os.environ[RUN_ENV]
"""Set once per run by the process that starts it (its pid and a random token) and inherited by pytest-xdist's
workers and by everything a test starts: what still carries it when the run ends was started by the run and left
behind, and is ended. Not ``SHELLPER_``: tests that give a program a clean environment drop those."""
_SSH_CONTROL_ENV = "SHELLPER_SSH_CONTROL_DIR"
if RUN_OWNER and not os.environ.get(_SSH_CONTROL_ENV):
    # The remote tests' shared ssh connections keep their sockets in a directory of the run's own (short: a
    # socket path is at most 107 bytes), removed at its end, not in the user's /tmp/shellper-ssh-UID.
    os.environ[_SSH_CONTROL_ENV] = f"/tmp/sshc-{os.getpid()}"


def _a_test_run(pid: int) -> bool:
    """``pid`` is a live test run (pytest) that may own ``shellper-test-<pid>``; unreadable counts as yes, and
    so does a number no pid can be (test_cli_containment names its parents with random hex)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/sys/kernel/pid_max", "rb") as f:
        if pid > int(f.read()):
            return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"pytest" in f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True


def sweep_dead_runs(mount: str) -> list[str]:
    """Remove what test runs that were killed (no pytest_unconfigure) left: their ``shellper-test-<pid>``
    parents, deepest cgroup first, rmdir only: a cgroup that still holds a process stays (it is not this
    run's to kill). Returns the cgroups removed."""
    removed: list[str] = []
    with contextlib.suppress(OSError):
        for entry in os.listdir(mount):
            pid = entry[len(TEST_PARENT_PREFIX):]
            if not entry.startswith(TEST_PARENT_PREFIX) or not pid.isdigit() or _a_test_run(int(pid)):
                continue
            for root, _dirs, _files in os.walk(os.path.join(mount, entry), topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(root)
                    removed.append(root)
    return removed


def _test_cgroup_parent() -> str | None:
    """Sessions started by the tests make their cgroups in a parent of this run's own (removed at exit), so
    the leak check sees exactly what the tests leave and a run never touches the machine's other sessions.
    Each xdist worker has a parent of its own inside the run's, so one worker's check never sees another's
    sessions, and the run's first process removes the whole tree at the end, even after a killed worker; what
    killed runs left is removed first (:func:`sweep_dead_runs`)."""
    mount = cgroup.find_mount()
    if mount is None or not os.access(mount, os.W_OK) or cgroup.systemd_manages_cgroups():
        return None
    if RUN_OWNER:
        sweep_dead_runs(mount)
        parent = os.path.join(mount, f"{TEST_PARENT_PREFIX}{os.getpid()}")
    elif WORKER is not None and os.environ.get(_RUN_CGROUP_ENV):
        parent = os.path.join(os.environ[_RUN_CGROUP_ENV], WORKER)
    else:  # a process a test started that imports this module: it makes no cgroup of its own
        return os.environ.get(cgroup.PARENT_ENV) or None
    try:
        os.mkdir(parent)
    except OSError:
        return None
    if RUN_OWNER:
        os.environ[_RUN_CGROUP_ENV] = parent
    os.environ[cgroup.PARENT_ENV] = parent
    return parent


_CLEANER = os.getpid()
"""The process that made CGROUP_PARENT and removes it (not a fork of it)."""
CGROUP_PARENT = _test_cgroup_parent()
"""Where this process's sessions make their cgroups; None where the machine gives none (containment none)."""


def _start_guard() -> subprocess.Popen[bytes] | None:
    if not RUN_OWNER:
        return None
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    argv = [sys.executable, "-I", "-S", str(Path(__file__).with_name("run_guard.py")), RUN, str(os.getpid())]
    if CGROUP_PARENT is not None:
        argv.append(CGROUP_PARENT)
    return subprocess.Popen(argv, env=env, start_new_session=True, stdin=subprocess.DEVNULL, close_fds=True)


GUARD = _start_guard()
"""The run's guard (support/run_guard.py), in the run's first process: a child that outlives it by design."""


_MOUNT = cgroup.find_mount()
DEFAULT_PARENT = (os.path.join(_MOUNT, cgroup.DEFAULT_PARENT_NAME)
                  if CGROUP_PARENT is not None and _MOUNT is not None else None)
"""The machine's default cgroup parent (shellper.host.cgroup.default_parent), where the cgroups of the run's
sessions never belong: a shellper started without the run's $SHELLPER_CGROUP_PARENT (a test that scrubbed the
SHELLPER_ variables from its environment) makes its session's cgroup there, and the parent with it, which then
stays, empty, after the session. None where the run has no cgroups of its own."""


def default_parent_exists() -> bool:
    return DEFAULT_PARENT is not None and os.path.isdir(DEFAULT_PARENT)


_DEFAULT_PARENT_EXISTED = default_parent_exists()
"""Whether the machine's default parent was there when this process imported this module (the run's start)."""


def default_parent_made(existed: bool, parent: str | None = None) -> str | None:
    """What to report if the machine's default parent (``parent``: a stand-in for it) is there now but was not
    (``existed``); None if not. Removed when empty (shellper makes it again when a session needs it), else left to
    whoever is in it."""
    parent = parent or DEFAULT_PARENT
    if existed or parent is None or not os.path.isdir(parent):
        return None
    try:
        os.rmdir(parent)
    except OSError as e:
        return f"the machine's default cgroup parent {parent} was made, and is left ({e.strerror})"
    return (f"the machine's default cgroup parent {parent} was made (a shellper started without "
            f"${cgroup.PARENT_ENV}), and is removed")


def session_cgroups() -> set[str]:
    """The session cgroups now in this process's parent."""
    if CGROUP_PARENT is None:
        return set()
    with contextlib.suppress(FileNotFoundError):
        return {e for e in os.listdir(CGROUP_PARENT) if cgroup.LeafName.parse(e) is not None}
    return set()


def launcher_cgroups() -> set[str]:
    """The warm launchers' cgroups now in this process's parent (shellper.host.launchercgroup): one outlives its
    launcher only after a kill -9, until the next launcher of its directory reuses it."""
    from shellper.host.launchercgroup import is_launcher_leaf

    if CGROUP_PARENT is None:
        return set()
    with contextlib.suppress(FileNotFoundError):
        return {e for e in os.listdir(CGROUP_PARENT) if is_launcher_leaf(e)}
    return set()


def remove_cgroup_tree(path: str) -> None:
    """Kill what is in a cgroup and remove it with everything below it (test clean-up only)."""
    remove_tree(path)


def restore_ignored_interrupts() -> list[str]:
    """SIGINT and SIGQUIT as a terminal gives them, where the run was started with them ignored (in the background
    of a script without job control, as ``cmd &`` there starts it): an ignored signal is inherited by every
    program a test starts, and a test that interrupts one (``tail -f`` ended by ^C) would fail. Which were."""
    import signal

    restored = []
    for signum, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGQUIT, signal.SIG_DFL)):
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, handler)
            restored.append(signal.Signals(signum).name)
    return restored


_cleaned: list[bool] = []


def clean_up_run() -> list[str]:
    """This process's cgroup tree, and for the run's first process every process the run left and the machine's
    default cgroup parent if the run made it; what was ended or removed."""
    if os.getpid() != _CLEANER or _cleaned:
        return []
    _cleaned.append(True)
    if CGROUP_PARENT is not None and (RUN_OWNER or WORKER is not None):
        remove_cgroup_tree(CGROUP_PARENT)
    ended = sweep(RUN) if RUN_OWNER else []
    made = default_parent_made(_DEFAULT_PARENT_EXISTED) if RUN_OWNER else None
    if made is not None:
        ended.append(made)
    if RUN_OWNER and os.environ[_SSH_CONTROL_ENV] == f"/tmp/sshc-{os.getpid()}":
        shutil.rmtree(os.environ[_SSH_CONTROL_ENV], ignore_errors=True)  # after the sweep: no master is left
    return ended
