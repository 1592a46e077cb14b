"""What a launch waits for: the session reports ready before its first record's fsyncs (bench/NOTES.md, "A warm
run's time, end to end"), which come right after, from the session's loop; a warm uncontained session's move back
to its caller's cgroup runs in a thread while it sets up, and is waited for before its child is forked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.sessions import Sessions

from shellper.host import cgroup, warmstart
from shellper.host import record as rec
from shellper.host.record import SessionRecord, read_record, sync_record, write_record

_FSYNC_PROBE = """
import os
OUT = os.environ.get("FSYNC_PROBE")
if OUT:
    real = os.fsync

    def fsync(fd):
        real(fd)
        target = os.readlink(f"/proc/self/fd/{fd}")
        with open(OUT, "a") as f:
            f.write(json.dumps([target, os.path.exists(os.environ["FSYNC_PROBE_SOCKET"])]) + "\\n")

    import json
    os.fsync = fsync
"""
"""A sitecustomize: a process with FSYNC_PROBE set notes each fsync's file and whether the session's socket
(FSYNC_PROBE_SOCKET) was there at that moment, a line each."""


def test_a_session_reports_ready_before_its_first_record_is_fsynced(sessions: Sessions, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsyncs of the record (the file, then its directory) come once the socket accepts, so the caller does
    not wait for the disk; the record is all there when launch() returns, and durable soon after."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_FSYNC_PROBE)
    notes = tmp_path / "fsyncs"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("FSYNC_PROBE", str(notes))
    monkeypatch.setenv("FSYNC_PROBE_SOCKET", str(sessions.dir / "synced.sock"))
    monkeypatch.setenv(warmstart.LAUNCHER_ENV, "off")  # the daemon of a fresh interpreter loads the probe
    info = sessions.start("synced", ["cat"], containment="none")
    record = read_record(info.record)  # complete before any fsync: written and renamed before the report
    assert (record.shellper_pid, record.child_pid) == (info.pid, info.child_pid)
    sessions.stop("synced")
    lines = [json.loads(line) for line in notes.read_text().splitlines()]
    first = lines[:2]
    assert [target for target, _ in first] == [str(sessions.dir / "synced.json"), str(sessions.dir)], lines
    assert all(listening for _, listening in first), f"an fsync before the socket listened: {lines}"


def record_of(name: str) -> SessionRecord:
    return SessionRecord(name=name, boot_id="b", shellper_pid=os.getpid(), shellper_start_time=1, instance_id="i",
                         command=["cat"], cwd="/", socket="")


def test_a_record_written_without_sync_reads_the_same_and_sync_record_fsyncs_file_then_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def counted(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(rec.os, "fsync", counted)
    path = tmp_path / "r.json"
    write_record(path, record_of("r"), sync=False)
    got = read_record(path)
    assert synced == [] and (got.name, got.shellper_pid, got.command) == ("r", os.getpid(), ["cat"])
    assert not [p for p in tmp_path.iterdir() if p.name != "r.json"], "a temp file left"
    sync_record(path)
    assert synced == [str(path), str(tmp_path)]
    synced.clear()
    write_record(path, record_of("r"))  # the default keeps both
    assert len(synced) == 2 and synced[1] == str(tmp_path)


def test_sync_record_never_follows_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    (tmp_path / "r.json").symlink_to(target)
    with pytest.raises(OSError):
        sync_record(tmp_path / "r.json")


def test_the_move_back_to_the_launchers_origin_runs_in_a_thread_and_is_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cgroup.start_back_to_launcher_origin: the write to the origin's cgroup.procs is made by another thread; the
    next back_to_launcher_origin() waits for it and returns its outcome, and moves nothing twice."""
    import _thread

    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "cgroup.procs").write_text("")
    writers: list[int] = []
    real = os.write

    def noted(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") == str(origin / "cgroup.procs"):
            writers.append(_thread.get_ident())
        return real(fd, data)

    monkeypatch.setattr(cgroup.os, "write", noted)
    monkeypatch.setattr(cgroup, "LAUNCHER_ORIGIN", [str(origin)])
    cgroup.start_back_to_launcher_origin()
    assert cgroup.LAUNCHER_ORIGIN == []
    assert cgroup.back_to_launcher_origin() is None
    assert len(writers) == 1 and writers[0] != _thread.get_ident()
    assert (origin / "cgroup.procs").read_text() == "0"
    assert cgroup.back_to_launcher_origin() is None and len(writers) == 1, "moved once"

    monkeypatch.setattr(cgroup, "LAUNCHER_ORIGIN", [str(tmp_path / "gone")])
    cgroup.start_back_to_launcher_origin()
    why = cgroup.back_to_launcher_origin()
    assert why is not None and why.startswith("could not move into its caller's cgroup")


def test_without_an_origin_nothing_moves_and_no_thread_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "LAUNCHER_ORIGIN", [])
    cgroup.start_back_to_launcher_origin()
    assert cgroup._MOVING == [] and cgroup.back_to_launcher_origin() is None
