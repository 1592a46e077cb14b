"""Session record (round trip, validation, atomic no-follow write/read), identity helpers, and the lock."""

from __future__ import annotations

import fcntl
import json
import os
import select
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from shellper.core import structs
from shellper.core.exitrecord import ExitClass, ExitRecord
from shellper.core.states import SessionState
from shellper.host import record as rec
from shellper.host.identity import boot_id, start_time
from shellper.host.record import (
    MAX_EXITS,
    MAX_RECORD_BYTES,
    AlreadyRunning,
    LockError,
    RecordError,
    SessionLock,
    SessionRecord,
    read_record,
    write_record,
)

REPO = Path(__file__).resolve().parent.parent


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill, reap, and close the pipes of a helper process."""
    proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def make_record(**overrides: Any) -> SessionRecord:
    base: dict[str, Any] = dict(
        name="main",
        boot_id=boot_id(),
        shellper_pid=os.getpid(),
        shellper_start_time=start_time(os.getpid()),
        instance_id=rec.new_instance_id(),
        command=["bash", "-l", "arg with spaces", "\u00e9\u2603"],
        cwd="/tmp",
        socket="/tmp/shellper-0/main.sock",
    )
    base.update(overrides)
    return SessionRecord(**base)


def full_record() -> SessionRecord:
    r = make_record(
        shellper_pgid=os.getpgid(0), shellper_sid=os.getsid(0), cmdline_sha256=rec.cmdline_sha256(),
        child_pid=4242, child_pgid=4242, child_start_time=123456, state="backoff", state_reason="crashed",
        last_exit_at=1700000000.5, next_restart_at=1700000002.25, restarts=3,
        breaker={"open": False, "failures": [1.0, 2.0]}, ring_bytes=4 << 20, stderr_mode="pipe",
        exits=[ExitRecord(ExitClass.CRASH, SessionState.BACKOFF, "crash: exit 1 after 3 s", 1700000000.5, code=1,
                          uptime=3.0, child_pid=4242, restart_in=2.0, restarts=3, breaker={"state": "closed"})],
        exit_count=1, labels={"team": "infra", "task/id": "T-42"},
    )
    return r


# --- round trip and validation --------------------------------------------------------------------


def test_round_trip_all_fields() -> None:
    r = full_record()
    back = SessionRecord.from_json(r.to_json())
    assert back == r
    assert back.format == rec.RECORD_FORMAT
    assert isinstance(back.created_at, float)


def test_defaults_round_trip_and_ints_accepted_for_floats() -> None:
    r = make_record(created_at=1700000000)
    back = SessionRecord.from_json(r.to_json())
    assert back == r
    assert isinstance(back.created_at, float)
    assert back.version  # filled from the package metadata (or the fallback)


def test_a_record_from_before_labels_reads_as_one_without() -> None:
    obj = json.loads(full_record().to_json())
    del obj["labels"]
    assert SessionRecord.from_json(json.dumps(obj).encode()).labels == {}


def test_unknown_keys_are_tolerated() -> None:
    obj = json.loads(make_record().to_json())
    obj["added_by_a_newer_shellper"] = {"x": 1}
    back = SessionRecord.from_json(json.dumps(obj).encode())
    assert back.name == "main"


def test_env_values_are_never_stored() -> None:
    fields = {f.name for f in structs.fields(SessionRecord)}
    assert not any("env" in name for name in fields)


def test_the_last_exits_round_trip_with_the_count_of_all() -> None:
    # The daemon keeps the last MAX_EXITS (shellper.daemon.lifecycle) and counts every exit.
    kept = [ExitRecord(ExitClass.CRASH, SessionState.BACKOFF, "crash", float(i), code=i)
            for i in range(25, MAX_EXITS + 25)]
    r = make_record(exits=kept, exit_count=MAX_EXITS + 25, last_exit_at=float(MAX_EXITS + 24))
    back = SessionRecord.from_json(r.to_json())
    assert back == r
    assert len(back.exits) == MAX_EXITS and back.exit_count == MAX_EXITS + 25
    assert back.exits[0].code == 25 and back.exits[-1].code == MAX_EXITS + 24


def test_exits_are_stored_in_their_wire_form() -> None:
    r = full_record()
    stored = json.loads(r.to_json())["exits"]
    assert stored == [json.loads(json.dumps(r.exits[0].to_wire()))]
    assert "class" in stored[0] and "exit_class" not in stored[0]


def _mutated(**changes: Any) -> bytes:
    obj = json.loads(full_record().to_json())
    for key, value in changes.items():
        if value is _DELETE:
            del obj[key]
        else:
            obj[key] = value
    return json.dumps(obj).encode()


_DELETE = object()
_VALID = full_record().to_json()
_VALID_EXIT = json.dumps(json.loads(_VALID)["exits"][0])


def test_group_ids_of_zero_are_valid() -> None:
    """getpgid/getsid return 0 when the leader lives outside our pid namespace (a container's CI)."""
    r = make_record(shellper_pgid=0, shellper_sid=0, child_pid=4242, child_pgid=0)
    assert SessionRecord.from_json(r.to_json(), "/x/main.json") == r


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b"{", "corrupt"),
        (_VALID[: len(_VALID) // 2], "corrupt"),
        (_VALID[:-3], "corrupt"),
        (b"\xff\xfe{}", "corrupt"),
        (b"[]", "top level is list"),
        (b"null", "top level is NoneType"),
        (b'"text"', "top level is str"),
        (b'{"format": NaN}', "corrupt"),
        (_mutated(format=_DELETE), "format"),
        (_mutated(format="1"), "format"),
        (_mutated(format=True), "format"),
        (_mutated(format=2), "unsupported record format 2"),
        (_mutated(format=0), "unsupported record format 0"),
        (_mutated(name=_DELETE), "missing field 'name'"),
        (_mutated(instance_id=_DELETE), "missing field 'instance_id'"),
        (_mutated(name=5), "'name'"),
        (_mutated(name=""), "'name'"),
        (_mutated(shellper_pid="1"), "'shellper_pid'"),
        (_mutated(shellper_pid=True), "'shellper_pid'"),
        (_mutated(shellper_pid=0), "'shellper_pid'"),
        (_mutated(shellper_pid=-5), "'shellper_pid'"),
        (_mutated(shellper_pid=1.5), "'shellper_pid'"),
        (_mutated(shellper_start_time=-1), "'shellper_start_time'"),
        (_mutated(child_pid="x"), "'child_pid'"),
        (_mutated(command="bash"), "'command'"),
        (_mutated(command=["bash", 1]), "'command'"),
        (_mutated(state="zombie"), "'state'"),
        (_mutated(stderr_mode="tty"), "'stderr_mode'"),
        (_mutated(created_at="yesterday"), "'created_at'"),
        (_mutated(created_at=None), "'created_at'"),
        (_mutated(last_exit_at=[1]), "'last_exit_at'"),
        (_mutated(exits=[1, 2]), "'exits'"),
        (_mutated(exits={"code": 1}), "'exits'"),
        (_mutated(exits=[{"code": 1}]), "'exits': exit record: 'signal' is missing"),
        (_mutated(exits=[{**json.loads(_VALID_EXIT), "class": 3}]), "'exits': exit record: 'class' must be a string"),
        (_mutated(breaker=[]), "'breaker'"),
        (_mutated(restarts=-1), "'restarts'"),
        (_mutated(ring_bytes=None), "'ring_bytes'"),
        # fields with a grammar that ls and status print: refused rather than printed (issue 27)
        (_mutated(owner="evil\x1b]52;c;aGk=\x07"), "'owner'"),
        (_mutated(owner="a\u009b2J"), "'owner'"),
        (_mutated(owner="two words"), "'owner'"),
        (_mutated(owner="x" * 65), "'owner'"),
        (_mutated(owner=5), "'owner'"),
        (_mutated(name="main\x1b[2J"), "'name'"),
        (_mutated(name="../main"), "'name'"),
        (_mutated(labels=["a=b"]), "'labels'"),
        (_mutated(labels={"k": "v\x1b[2J"}), "'labels'"),
        (_mutated(labels={"two words": "v"}), "'labels'"),
        (_mutated(labels={"k": ""}), "'labels'"),
        (_mutated(labels={"k": 1}), "'labels'"),
        (_mutated(labels={"k": "v" * 257}), "'labels'"),
        (_mutated(labels={f"k{i}": "v" for i in range(33)}), "'labels'"),
    ],
)
def test_bad_records_raise_record_error(data: bytes, reason: str) -> None:
    with pytest.raises(RecordError) as info:
        SessionRecord.from_json(data, "/x/main.json")
    assert reason in info.value.reason
    assert info.value.path == "/x/main.json"


def test_huge_record_is_refused_before_parsing() -> None:
    data = b'{"format": 1, "pad": "' + b"x" * MAX_RECORD_BYTES + b'"}'
    with pytest.raises(RecordError, match="too large"):
        SessionRecord.from_json(data)


def test_to_json_refuses_unreadable_output() -> None:
    with pytest.raises(RecordError, match="serialise"):
        make_record(breaker={"x": float("nan")}).to_json()
    with pytest.raises(RecordError, match="bytes"):
        make_record(command=["x" * MAX_RECORD_BYTES]).to_json()


# --- write / read on disk -------------------------------------------------------------------------


def test_write_read_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "main.json"
    r = full_record()
    write_record(path, r)
    assert read_record(path) == r
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    r.state = "running"
    write_record(path, r)  # replaces
    assert read_record(path).state == "running"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["main.json"]  # no temp files left


def test_write_replaces_planted_symlink_without_following_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = tmp_path / "main.json"
    path.symlink_to(victim)
    with pytest.raises(RecordError, match="symlink"):
        read_record(path)
    write_record(path, make_record())
    assert victim.read_text() == "precious"
    assert not path.is_symlink()
    assert read_record(path).name == "main"


def test_write_refuses_directory_at_path(tmp_path: Path) -> None:
    path = tmp_path / "main.json"
    path.mkdir()
    with pytest.raises(RecordError, match="directory"):
        write_record(path, make_record())
    assert path.is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["main.json"]


def test_write_failure_is_typed_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "main.json"
    with pytest.raises(RecordError) as info:
        write_record(path, make_record())
    assert info.value.errno == 2  # ENOENT
    assert list(tmp_path.iterdir()) == []


def test_read_missing_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_record(tmp_path / "nope.json")


def test_read_refuses_fifo_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "main.json"
    os.mkfifo(path)
    with pytest.raises(RecordError, match="not a regular file"):
        read_record(path)


def test_read_refuses_huge_and_truncated_files(tmp_path: Path) -> None:
    path = tmp_path / "main.json"
    with open(path, "wb") as f:
        f.truncate(MAX_RECORD_BYTES + 1)
    with pytest.raises(RecordError, match="too large"):
        read_record(path)
    path.write_bytes(full_record().to_json()[:100])
    with pytest.raises(RecordError, match="corrupt"):
        read_record(path)


# --- identity helpers -----------------------------------------------------------------------------


def test_read_start_time_matches_psutil_for_odd_comm() -> None:
    """comm with spaces and parentheses must not shift the fields (parse after the last ')')."""
    code = (
        "open('/proc/self/comm', 'w').write('a) b (c'); print('ok', flush=True); "
        "import sys; sys.stdin.read()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ok\n"
        with open(f"/proc/{proc.pid}/stat", "rb") as f:
            assert b"(a) b (c)" in f.read()
        ticks = start_time(proc.pid)
        boot = psutil.boot_time()
        hz = os.sysconf("SC_CLK_TCK")
        assert abs(boot + ticks / hz - psutil.Process(proc.pid).create_time()) < 0.05
        assert start_time(proc.pid) == ticks  # stable
        assert start_time(os.getpid()) != ticks  # and distinct from ours
    finally:
        stop(proc)


def test_boot_id_and_cmdline_hash() -> None:
    boot = boot_id()
    assert len(boot) == 36 and boot.count("-") == 4
    assert boot_id() == boot
    assert len(rec.cmdline_sha256()) == 64
    assert rec.cmdline_sha256(os.getpid()) == rec.cmdline_sha256("self")
    assert rec.new_instance_id() != rec.new_instance_id()


# --- the lock -------------------------------------------------------------------------------------


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A separate process holding the lock until killed."""
    path = tmp_path / "main.lock"
    code = (
        "import sys\n"
        "from shellper.host.record import SessionLock\n"
        f"lock = SessionLock.acquire({str(path)!r}, 'main')\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready, "lock holder did not start"
        assert proc.stdout.readline() == b"held\n"
        yield proc, path
    finally:
        stop(proc)


def test_lock_is_exclusive_across_processes(holder: tuple[subprocess.Popen[bytes], Path]) -> None:
    proc, path = holder
    assert SessionLock.is_locked(path)
    with pytest.raises(AlreadyRunning) as info:
        SessionLock.acquire(path, "main")
    assert (info.value.name, info.value.path) == ("main", str(path))
    assert path.read_text() == f"{proc.pid}\n"  # diagnostic only; the flock is what counts
    proc.kill()  # kill -9: the kernel drops the flock, the stale file stays
    proc.wait()
    assert path.exists()
    assert not SessionLock.is_locked(path)
    lock = SessionLock.acquire(path, "main")
    try:
        assert lock.held
        assert path.read_text() == f"{os.getpid()}\n"
    finally:
        lock.release()


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_is_locked_refuses_what_is_not_a_lock_file(tmp_path: Path, kind: str) -> None:
    """A directory at NAME.lock opened and flocked fine, so it always read "free": reconcile called the
    session dead and planned to clean it (apply then failed on the lock)."""
    path = tmp_path / "odd.lock"
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    with pytest.raises(LockError, match="is not a regular file"):
        SessionLock.is_locked(path)


def test_lock_in_process_and_release(tmp_path: Path) -> None:
    path = tmp_path / "main.lock"
    assert not SessionLock.is_locked(path)  # missing file: not locked, and not created by probing
    assert not path.exists()
    lock = SessionLock.acquire(path)
    assert lock.name == "main"
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert not os.get_inheritable(lock.fileno())  # CLOEXEC: the PTY child never holds it
    assert SessionLock.is_locked(path)
    with pytest.raises(AlreadyRunning):
        SessionLock.acquire(path)  # flock is per open file: a second open conflicts even in-process
    lock.release()
    assert not path.exists()
    assert not lock.held
    lock.release()  # idempotent
    with SessionLock.acquire(path) as again:
        assert again.held
    assert not path.exists()


def test_lock_probe_does_not_block_acquire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """is_locked holds LOCK_SH for an instant; acquire retries briefly instead of reporting a live owner."""
    path = tmp_path / "main.lock"
    path.write_text("")
    probe = os.open(path, os.O_RDONLY)
    fcntl.flock(probe, fcntl.LOCK_SH)  # a probe caught mid-check
    waits: list[float] = []

    class ProbeFinishes:
        @staticmethod
        def sleep(seconds: float) -> None:  # the probe lets go while acquire waits to retry
            waits.append(seconds)
            os.close(probe)

    monkeypatch.setattr(rec, "time", ProbeFinishes)
    lock = SessionLock.acquire(path)
    assert lock.held and len(waits) == 1
    lock.release()


def test_lock_shared_holder_that_never_lets_go_is_an_owner(tmp_path: Path) -> None:
    path = tmp_path / "main.lock"
    path.write_text("")
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        with pytest.raises(AlreadyRunning):
            SessionLock.acquire(path)
    finally:
        os.close(fd)


def test_lock_refuses_symlink_and_dir(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "main.lock"
    link.symlink_to(victim)
    with pytest.raises(LockError):
        SessionLock.acquire(link)
    with pytest.raises(LockError):
        SessionLock.is_locked(link)
    assert victim.read_text() == "precious"
    d = tmp_path / "d.lock"
    d.mkdir()
    with pytest.raises(LockError):
        SessionLock.acquire(d)


def test_lock_verify_detects_unlinked_or_replaced_file(tmp_path: Path) -> None:
    """The acquire race: we opened the old file, its owner unlinked it and released; our flock then
    succeeds on an orphaned inode and must not count."""
    path = tmp_path / "main.lock"
    path.write_text("")
    fd = os.open(path, os.O_RDWR)
    try:
        path.unlink()
        assert rec._lock_and_verify(path, fd) == "stale"
    finally:
        os.close(fd)
    path.write_text("")
    fd = os.open(path, os.O_RDWR)
    try:
        path.unlink()
        path.write_text("")  # a newer owner's file
        assert rec._lock_and_verify(path, fd) == "stale"
    finally:
        os.close(fd)
    fd = os.open(path, os.O_RDWR)
    try:
        assert rec._lock_and_verify(path, fd) == "locked"
    finally:
        os.close(fd)


def test_release_does_not_unlink_someone_elses_file(tmp_path: Path) -> None:
    path = tmp_path / "main.lock"
    lock = SessionLock.acquire(path)
    path.unlink()  # someone removed it (a cleanup script) ...
    other = SessionLock.acquire(path)  # ... and another owner took the name
    lock.release()
    assert path.exists()
    assert SessionLock.is_locked(path)
    other.release()
