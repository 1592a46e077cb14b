"""An interrupted test run leaves nothing running: a session a test started dies with the run, whether the run
is interrupted (SIGINT: the fixtures tear down, then the run's sweep) or killed outright (SIGKILL of pytest, or
of xdist's controller: the run's guard, support/run_guard.py; such a run's runtime directories, files only, stay
in /tmp). Each case starts a run of its own on support/interrupted_run.py, waits for its session, interrupts
the run and waits for the session to die."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from support.containment import needs_cgroup
from support.paths import PY, ROOT
from support.processes import identity, is_dead, kill_verified
from support.run import TEST_PARENT_PREFIX, restore_ignored_interrupts
from support.waiting import poll_until

from shellper.host import cgroup
from shellper.host.identity import ProcessIdentity

TARGET = Path(__file__).with_name("support") / "interrupted_run.py"


def _own_run_env(report: Path, containment: str) -> dict[str, str]:
    """This environment without this run's marks (PYTEST_*, the cgroup parent): the inner pytest starts a run of
    its own, with its own mark, cgroup tree and guard."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_") and k not in (cgroup.PARENT_ENV, "SHELLPER_SSH_CONTROL_DIR")}
    env.update(INTERRUPTED_REPORT=str(report), INTERRUPTED_CONTAINMENT=containment)
    return env


def _sigint_as_at_a_terminal() -> None:
    """In the inner run's child before exec: SIGINT back to its default. A test run before this one in the same
    process may have left it ignored, which the inner run would inherit, and Python then raises no
    KeyboardInterrupt: the interrupt would be lost, not the run's clean-up tested."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("signum", "workers", "containment"), [
    pytest.param(signal.SIGINT, 0, "none", id="SIGINT"),
    pytest.param(signal.SIGKILL, 0, "none", id="SIGKILL"),
    pytest.param(signal.SIGKILL, 1, "cgroup", id="SIGKILL-xdist-cgroup", marks=needs_cgroup),
])
def test_a_session_a_test_started_dies_with_the_run(tmp_path: Path, signum: int, workers: int,
                                                     containment: str) -> None:
    report = tmp_path / "started.json"
    argv = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(["-n", str(workers)] if workers else []),
            str(TARGET)]
    run = subprocess.Popen(argv, cwd=ROOT, env=_own_run_env(report, containment), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                           preexec_fn=_sigint_as_at_a_terminal)
    held: list[ProcessIdentity] = []
    try:
        def started() -> dict[str, int] | None:
            if run.poll() is not None:
                pytest.fail(f"the inner run ended early: {run.stdout.read().decode()[-3000:] if run.stdout else ''}")
            return json.loads(report.read_text()) if report.exists() else None
        info = poll_until(started, 60, what="the inner run's session")
        held += [ProcessIdentity(info["boot_id"], info["pid"], info["start_time"]), identity(info["child_pid"])]
        os.kill(run.pid, signum)  # the run this test started, still our child (not reaped)
        out, _ = run.communicate(timeout=60)
        poll_until(lambda: all(is_dead(p) for p in held), 30,
                   what=f"the session to die with the run; the run said: {out.decode()[-2000:]}")
        if containment == "cgroup":
            mount = cgroup.find_mount()
            assert mount is not None
            tree = Path(mount) / f"{TEST_PARENT_PREFIX}{run.pid}"
            poll_until(lambda: not tree.exists(), 30, what=f"the run's cgroup tree {tree} to go")
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        for ident in held:
            kill_verified(ident)
        if report.exists():  # the inner run's runtime directory: a run killed outright leaves its files
            shutil.rmtree(json.loads(report.read_text())["dir"], ignore_errors=True)


def test_a_run_started_with_interrupts_ignored_gives_its_programs_the_terminals_dispositions() -> None:
    """Started in the background of a script (SIGINT and SIGQUIT ignored, inherited by every program a test
    starts), test_cli_tail_ls's ^C to `tail -f` was lost and test_launcher saw SIGQUIT ignored in a session:
    the run's first process puts both back (support.run.restore_ignored_interrupts, from conftest)."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGQUIT)}
    try:
        for signum in saved:
            signal.signal(signum, signal.SIG_IGN)
        assert _ignored_in_a_child() & {signal.SIGINT, signal.SIGQUIT} == {signal.SIGINT, signal.SIGQUIT}
        assert restore_ignored_interrupts() == ["SIGINT", "SIGQUIT"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert _ignored_in_a_child() & {signal.SIGINT, signal.SIGQUIT} == set()
        assert restore_ignored_interrupts() == []
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _ignored_in_a_child() -> set[int]:
    """The signals a program started from here ignores (its SigIgn mask)."""
    done = subprocess.run(["grep", "^SigIgn:", "/proc/self/status"], capture_output=True, text=True, check=True,
                          timeout=30)
    mask = int(done.stdout.split()[1], 16)
    return {signum for signum in range(1, 65) if mask >> (signum - 1) & 1}
