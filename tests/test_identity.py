"""shellper.host.identity against real processes and /proc (Linux).

Every process signalled here was started by the test, and is signalled through a pidfd opened
while the test still held it as an unreaped child.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from shellper.core import structs
from shellper.host.identity import (
    BOOT_ID_PATH,
    IdentityError,
    IdentityMismatch,
    IdentityUnreadable,
    InvalidIdentityRecord,
    PidFd,
    ProcessGone,
    ProcessIdentity,
    ProcStat,
    boot_id,
    cmdline,
    open_verified,
    parent_pid,
    parse_stat,
    process_group,
    process_state,
    read_stat,
    session_id,
    start_time,
)

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_line(comm: str, state: str = "S", ppid: int = 1, pgrp: int = 42, sid: int = 42,
               starttime: int = 123456) -> str:
    # fields 3..52 of a real stat line; field 22 (starttime) is index 19 after the comm.
    after = [state, str(ppid), str(pgrp), str(sid)] + ["0"] * 15 + [str(starttime)] + ["0"] * 30
    return f"4242 ({comm}) " + " ".join(after) + "\n"


# ------------------------------------------------------------------------- pure parsing


@pytest.mark.parametrize(
    ("comm", "state", "ppid", "starttime"),
    [
        ("sleep", "S", 1, 1),
        ("a) (b", "R", 77, 987654321),
        ("x) Z 1 1 1 1", "S", 5, 42),  # a first-')' parser would read state Z and ppid 1
        ("with space", "D", 2, 0),
        ("))((", "T", 3, 10),
        ("", "S", 1, 7),
        ("tab\there", "I", 2, 8),
    ],
)
def test_parse_stat_splits_at_last_paren(comm: str, state: str, ppid: int, starttime: int) -> None:
    st = parse_stat(_stat_line(comm, state, ppid, starttime=starttime))
    assert st == ProcStat(comm=comm, state=state, ppid=ppid, pgrp=42, session=42, start_time=starttime)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "4242 sleep S 1 2 3",  # no parens
        "4242 (sleep) S 1 2 3",  # truncated
        "4242 (sleep) S x 2 3" + " 0" * 30,  # non-numeric ppid
        _stat_line("ok").replace("123456", "12x456"),  # non-numeric starttime
    ],
)
def test_parse_stat_rejects_malformed(text: str) -> None:
    with pytest.raises(IdentityUnreadable):
        parse_stat(text)


# ------------------------------------------------------------------------- identity records


def test_boot_id_matches_kernel_and_is_cached() -> None:
    with open(BOOT_ID_PATH) as f:
        expected = f.read().strip()
    assert boot_id() == expected
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", expected)
    assert boot_id() is boot_id()


def test_current_identity_round_trips_through_json() -> None:
    me = ProcessIdentity.current()
    assert me == ProcessIdentity.of(os.getpid())
    assert me.pid == os.getpid() and me.boot_id == boot_id()
    assert me.is_alive()
    assert ProcessIdentity.from_dict(json.loads(json.dumps(me.to_dict()))) == me


_GOOD = {"boot_id": "0e4c3b8a-1111-2222-3333-444455556666", "pid": 10, "start_time": 5}


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (None, "<record>"),
        ([1, 2, 3], "<record>"),
        ({k: v for k, v in _GOOD.items() if k != "boot_id"}, "boot_id"),
        ({**_GOOD, "boot_id": ""}, "boot_id"),
        ({**_GOOD, "boot_id": " padded "}, "boot_id"),
        ({**_GOOD, "boot_id": 7}, "boot_id"),
        ({k: v for k, v in _GOOD.items() if k != "pid"}, "pid"),
        ({**_GOOD, "pid": 0}, "pid"),
        ({**_GOOD, "pid": -5}, "pid"),
        ({**_GOOD, "pid": True}, "pid"),
        ({**_GOOD, "pid": "10"}, "pid"),
        ({**_GOOD, "pid": 10.0}, "pid"),
        ({k: v for k, v in _GOOD.items() if k != "start_time"}, "start_time"),
        ({**_GOOD, "start_time": -1}, "start_time"),
        ({**_GOOD, "start_time": "5"}, "start_time"),
        ({**_GOOD, "start_time": None}, "start_time"),
    ],
)
def test_from_dict_rejects_bad_records(record: object, field: str) -> None:
    with pytest.raises(InvalidIdentityRecord) as info:
        ProcessIdentity.from_dict(record)
    assert info.value.field == field
    assert isinstance(info.value, IdentityError)


def test_from_dict_accepts_good_record() -> None:
    assert ProcessIdentity.from_dict(_GOOD) == ProcessIdentity(_GOOD["boot_id"], 10, 5)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- real processes


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start processes for a test; kill (by our own child pid) and reap them afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.returncode is None:
            p.kill()
        p.wait(timeout=10)


def _sleeper(spawn: list[subprocess.Popen[bytes]], argv: list[str] | None = None) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(argv or ["sleep", "30"], start_new_session=True)
    spawn.append(p)
    return p


def test_proc_readers_with_hostile_comm(spawn: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    """comm with ') (' and a fake 'Z 1 1 1 1' must not fool state, ppid or start time."""
    for name in ("a) (b", "x) Z 1 1 1 1"):
        exe = tmp_path / name
        shutil.copy("/bin/sleep", exe)
        p = _sleeper(spawn, [str(exe), "30"])  # Popen returns once exec has succeeded
        st = read_stat(p.pid)
        assert st is not None and st.comm == name
        assert st.state in ("S", "R")
        assert process_state(p.pid) in ("S", "R")
        assert parent_pid(p.pid) == os.getpid()
        assert process_group(p.pid) == p.pid == os.getpgid(p.pid)
        assert session_id(p.pid) == p.pid == os.getsid(p.pid)
        # exec reports success (comm is set) a moment before the kernel fills argv: poll
        deadline = time.monotonic() + 5
        while not (argv := cmdline(p.pid)) and time.monotonic() < deadline:
            pass
        assert argv == [str(exe), "30"]
        ticks = start_time(p.pid)
        assert ticks is not None
        # independent source: psutil's create_time is btime + starttime / CLK_TCK
        via_psutil = (psutil.Process(p.pid).create_time() - psutil.boot_time()) * CLK_TCK
        assert abs(ticks - via_psutil) < 1.0
        assert ProcessIdentity.current().start_time <= ticks


def test_readers_return_none_for_missing_pid(spawn: list[subprocess.Popen[bytes]]) -> None:
    p = _sleeper(spawn, ["true"])
    p.wait()
    for reader in (start_time, process_state, parent_pid, process_group, session_id, cmdline,
                   read_stat, ProcessIdentity.of):
        assert reader(p.pid) is None
        assert reader(0) is None


def test_identity_mismatch_is_refused_and_leaves_process_alone(
    spawn: list[subprocess.Popen[bytes]],
) -> None:
    p = _sleeper(spawn)
    real = ProcessIdentity.of(p.pid)
    assert real is not None and real.is_alive()
    for delta in (1, -1):
        forged = structs.replace(real, start_time=real.start_time + delta)
        assert not forged.is_alive()
        with pytest.raises(IdentityMismatch) as info:
            open_verified(forged)
        assert info.value.pid == p.pid
        assert info.value.expected == forged
        assert info.value.found == real
    assert real.is_alive() and p.poll() is None


def test_other_boot_is_gone_without_touching_the_pid(spawn: list[subprocess.Popen[bytes]]) -> None:
    p = _sleeper(spawn)
    real = ProcessIdentity.of(p.pid)
    assert real is not None
    other_boot = structs.replace(real, boot_id="00000000-0000-0000-0000-000000000000")
    assert not other_boot.is_alive()
    with pytest.raises(ProcessGone) as info:
        open_verified(other_boot)
    assert info.value.pid == p.pid and "boot" in info.value.reason
    assert real.is_alive()


def test_open_verified_refuses_a_dead_pid(spawn: list[subprocess.Popen[bytes]]) -> None:
    p = _sleeper(spawn, ["true"])
    ident = ProcessIdentity.of(p.pid)
    assert ident is not None
    p.wait()
    assert not ident.is_alive()
    with pytest.raises(ProcessGone) as info:
        open_verified(ident)
    assert info.value.pid == p.pid
    with pytest.raises(ProcessGone):
        PidFd.open(p.pid)
    with pytest.raises(ProcessGone):
        PidFd.open(0)


def test_zombie_counts_as_dead(spawn: list[subprocess.Popen[bytes]]) -> None:
    p = _sleeper(spawn)
    ident = ProcessIdentity.of(p.pid)
    assert ident is not None
    with open_verified(ident) as fd:
        fd.send_signal(signal.SIGKILL)
        assert fd.wait_dead(5)
        assert fd.is_unreaped()  # not reaped yet: a zombie still holds its pid
    assert process_state(p.pid) == "Z"
    assert ProcessIdentity.of(p.pid) == ident  # a zombie still has an identity...
    assert not ident.is_alive()  # ...but is not alive
    with pytest.raises(ProcessGone) as info:
        open_verified(ident)
    assert info.value.reason == "zombie"
    zfd = open_verified(ident, allow_zombie=True)  # a reaper may still reach its group
    try:
        p.wait()
        assert not zfd.is_unreaped()
        with pytest.raises(ProcessGone):
            zfd.send_signal(signal.SIGKILL)  # never reaches whatever reuses the pid
    finally:
        zfd.close()


def test_pidfd_wait_dead_blocks_until_timeout_then_sees_exit(
    spawn: list[subprocess.Popen[bytes]],
) -> None:
    p = _sleeper(spawn)
    fd = PidFd.open(p.pid)
    with fd:
        assert not fd.wait_dead(0)
        t0 = time.monotonic()
        assert not fd.wait_dead(0.1)
        assert time.monotonic() - t0 >= 0.09
        fd.send_signal(signal.SIGTERM)
        assert fd.wait_dead(5)
    assert fd.closed
    with pytest.raises(ValueError):
        fd.fileno()
    fd.close()  # idempotent
    assert p.wait() == -signal.SIGTERM


def test_group_signal_reaches_whole_group_only(spawn: list[subprocess.Popen[bytes]]) -> None:
    leader = subprocess.Popen(["sleep", "30"], process_group=0)  # leads a group in our session
    spawn.append(leader)
    member = subprocess.Popen(["sleep", "30"], process_group=leader.pid)  # our child: we reap it
    spawn.append(member)
    outsider = _sleeper(spawn)  # own session and group: must survive
    with PidFd.open(leader.pid) as lfd, PidFd.open(member.pid) as mfd, PidFd.open(outsider.pid) as ofd:
        assert process_group(member.pid) == leader.pid
        lfd.send_group_signal(signal.SIGKILL)
        assert lfd.wait_dead(5) and mfd.wait_dead(5)
        assert not ofd.wait_dead(0)
        with pytest.raises(ProcessGone):
            mfd.send_group_signal(signal.SIGKILL)  # member leads no group
    assert leader.wait() == member.wait() == -signal.SIGKILL


# ------------------------------------------------------------------------- real pid reuse


def _force_next_pid(pid: int) -> bool:
    try:
        fd = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, str(pid - 1).encode())  # unbuffered: an EPERM must not be hidden
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.mark.skipif(os.geteuid() != 0, reason="forcing pid reuse via ns_last_pid needs root")
def test_pidfd_never_signals_a_recycled_pid(spawn: list[subprocess.Popen[bytes]]) -> None:
    """Kill + reap A, force the kernel to hand A's pid to B: A's pidfd must not reach B."""
    for _ in range(5):
        a = _sleeper(spawn)
        a_ident = ProcessIdentity.of(a.pid)
        assert a_ident is not None
        a_fd = PidFd.open(a.pid)
        a.kill()
        a.wait()
        if not _force_next_pid(a.pid):
            a_fd.close()
            pytest.skip("ns_last_pid is not writable here")
        b = _sleeper(spawn)
        if b.pid == a.pid:
            break
        a_fd.close()  # another process took the pid first: retry
    else:
        pytest.skip("could not force pid reuse")
    with a_fd:
        with pytest.raises(ProcessGone):
            a_fd.send_signal(signal.SIGKILL)
        assert not a_fd.is_unreaped()
    b_ident = ProcessIdentity.of(b.pid)
    assert b_ident is not None and b.poll() is None
    if b_ident.start_time != a_ident.start_time:
        with pytest.raises(IdentityMismatch):
            open_verified(a_ident)
    # else: same pid and same tick -- the documented limit of (boot, pid, start_time) alone.
    assert b.poll() is None
