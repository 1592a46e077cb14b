"""tower_client pure parts as tables: reconcile decisions, registry loading, id matching, backoff."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from shellper.core.owner import default_owner
from shellper.host.cgroup import LeafName, OrphanCgroup
from shellper.host.record import SessionRecord
from tower_client.client import Backoff
from tower_client.discover import Observed
from tower_client.holders import BadSessionId, argv_carries
from tower_client.reconcile import (
    MAX_REGISTRY_BYTES,
    REASONS,
    ReconcileAction,
    Registry,
    RegistryBadName,
    RegistryDuplicate,
    RegistryError,
    RegistryNotJSON,
    RegistryRow,
    RegistryShapeError,
    RegistryTooLarge,
    RegistryUnreadable,
    load_registry,
    name_mismatch,
    parse_registry,
    reconcile,
)

NOW = 1_000_000.0
INST = "a" * 32


def rec(**kw: Any) -> SessionRecord:
    base: dict[str, Any] = dict(name="s", boot_id="boot", shellper_pid=100, shellper_start_time=5,
                                instance_id=INST, command=["sh"], cwd="/", socket="/r/s.sock",
                                state="running", created_at=NOW - 10_000, owner=default_owner())
    base.update(kw)
    return SessionRecord(**base)


LIVE = Observed(
    name="s", dir="/r", files=frozenset({"sock", "json", "lock", "log"}), record=rec(), boot="current",
    identity="verified", locked=True, lock_owners=(100,), probe="answered", welcome_instance_id=INST,
    welcome_pid=100, peer_pid=100, state="running", child="alive", child_pid=101, welcome_name="s",
    record_socket_ok=True, observed_at=NOW)
"""A verified, serving shellper: every case below is this with something changed."""

HUSK = replace(LIVE, state="exited", child="none", child_pid=None,
               record=rec(state="exited", last_exit_at=NOW - 100))
STALE: dict[str, Any] = {"files": frozenset({"sock", "json", "lock"}), "locked": False, "lock_owners": None,
         "probe": "refused", "welcome_instance_id": None, "peer_pid": None, "welcome_pid": None}

STRAY = OrphanCgroup("/sys/fs/cgroup/x/leaf", LeafName.of("/r", default_owner(), "s", "d" * 32), True, False)
STRAY_LIVE = OrphanCgroup(STRAY.path, STRAY.leaf, True, True)

ROW = RegistryRow("s")
PINNED = RegistryRow("s", INST)
OTHER = RegistryRow("s", "b" * 32)

A, T, R = ReconcileAction.ADOPT, ReconcileAction.TERMINATE, ReconcileAction.RESPAWN
C, L = ReconcileAction.CLEAN, ReconcileAction.LEAVE

CASES: list[tuple[str, RegistryRow | None, Observed | None, float | None, list[tuple[ReconcileAction, str]]]] = [
    # id, registry row, observation, husk_max_age, expected [(action, reason)]
    ("registered-live", ROW, LIVE, None, [(A, "running")]),
    ("pinned-live", PINNED, LIVE, None, [(A, "running")]),
    ("backoff-live", ROW, replace(LIVE, state="backoff", child="none"), None, [(A, "running")]),
    ("unregistered-live", None, LIVE, None, [(T, "unregistered")]),
    ("superseded", OTHER, LIVE, None, [(T, "superseded"), (R, "superseded")]),
    ("husk-wanted", ROW, HUSK, None, [(A, "husk")]),
    ("husk-fatal-wanted", ROW, replace(HUSK, state="fatal"), None, [(A, "husk")]),
    ("husk-young", ROW, HUSK, 3600.0, [(A, "husk")]),
    ("husk-expired", ROW, HUSK, 60.0, [(T, "husk_expired")]),
    ("husk-unregistered", None, HUSK, None, [(T, "unregistered")]),
    ("stopping", ROW, replace(LIVE, state="stopping"), None, [(L, "stopping")]),
    ("unreachable-registered", ROW, replace(LIVE, probe="timeout"), None, [(L, "unreachable")]),
    ("unreachable-unregistered", None, replace(LIVE, probe="refused"), None, [(T, "unregistered")]),
    ("rejected-registered", ROW, replace(LIVE, probe="rejected"), None, [(L, "unreachable")]),
    ("instance-mismatch", ROW, replace(LIVE, welcome_instance_id="c" * 32), None, [(L, "instance_mismatch")]),
    ("instance-mismatch-unreg", None, replace(LIVE, welcome_instance_id="c" * 32), None,
     [(L, "instance_mismatch")]),
    ("peer-mismatch", None, replace(LIVE, peer_pid=999), None, [(L, "peer_mismatch")]),
    ("welcome-pid-mismatch", None, replace(LIVE, welcome_pid=999), None, [(L, "peer_mismatch")]),
    ("lock-held-by-other", None, replace(LIVE, lock_owners=(555,)), None, [(L, "lock_held_by_other")]),
    ("lock-owner-invisible", ROW, replace(LIVE, lock_owners=(0,)), None, [(A, "running")]),
    ("lock-unknown", ROW, replace(LIVE, locked=None), None, [(L, "lock_unknown")]),
    # pid reused / gone / unreadable while somebody holds the lock: never touched
    ("reused-locked", None, replace(LIVE, identity="mismatch"), None, [(L, "pid_reused")]),
    ("reused-locked-registered", ROW, replace(LIVE, identity="mismatch"), None, [(L, "pid_reused")]),
    ("gone-locked", ROW, replace(LIVE, identity="gone"), None, [(L, "lock_held_by_other")]),
    ("unreadable-locked", None, replace(LIVE, identity="unreadable"), None, [(L, "identity_unreadable")]),
    # nobody holds the lock: files are stale, the process at the pid (if any) is never signalled
    ("dead-registered", ROW, replace(LIVE, identity="gone", **STALE), None, [(C, "dead"), (R, "dead")]),
    ("dead-unregistered", None, replace(LIVE, identity="gone", **STALE), None, [(C, "dead")]),
    ("reused-unlocked", None, replace(LIVE, identity="mismatch", **STALE), None, [(C, "pid_reused")]),
    ("reused-unlocked-registered", ROW, replace(LIVE, identity="mismatch", **STALE), None,
     [(C, "pid_reused"), (R, "pid_reused")]),
    ("unreadable-unlocked", None, replace(LIVE, identity="unreadable", **STALE), None,
     [(C, "identity_unreadable")]),
    ("verified-not-owner", None, replace(LIVE, **STALE), None, [(C, "not_lock_owner")]),
    ("unlocked-but-answers", ROW, replace(LIVE, locked=False), None, [(L, "unowned_socket_answers")]),
    # another boot: recognised from the boot id alone
    ("previous-boot", None, replace(LIVE, boot="previous", identity="unchecked", **STALE), None,
     [(C, "previous_boot")]),
    ("previous-boot-registered", ROW, replace(LIVE, boot="previous", identity="unchecked", **STALE), None,
     [(C, "previous_boot"), (R, "previous_boot")]),
    ("previous-boot-locked", ROW, replace(LIVE, boot="previous", identity="unchecked"), None,
     [(L, "previous_boot_locked")]),
    ("boot-unknown", ROW, replace(LIVE, boot="unknown", identity="unchecked"), None, [(L, "boot_unknown")]),
    # records that cannot be used
    ("record-unreadable", ROW,
     replace(LIVE, record=None, record_error="symlink", record_corrupt=False, **STALE),
     None, [(L, "record_unreadable")]),
    ("record-corrupt-unlocked", ROW, replace(LIVE, record=None, record_error="bad json", record_corrupt=True,
                                            **STALE), None, [(C, "corrupt_record"), (R, "corrupt_record")]),
    ("record-corrupt-locked", None, replace(LIVE, record=None, record_error="bad json", record_corrupt=True),
     None, [(L, "record_unreadable")]),
    ("no-record-locked", ROW, replace(LIVE, record=None), None, [(L, "no_record")]),
    ("no-record-stale", None, replace(LIVE, record=None, **STALE), None, [(C, "stale_files")]),
    ("no-record-answers", None, replace(LIVE, record=None, locked=False), None,
     [(L, "unowned_socket_answers")]),
    # owners: another owner's session (or one recorded before owners) is never touched
    ("other-owner-unregistered", None, replace(LIVE, record=rec(owner="someone-else")), None, [(L, "other_owner")]),
    ("other-owner-registered", ROW, replace(LIVE, record=rec(owner="someone-else")), None, [(L, "other_owner")]),
    ("other-owner-dead", None, replace(LIVE, record=rec(owner="someone-else"), identity="gone", **STALE), None,
     [(L, "other_owner")]),
    ("no-owner-recorded", None, replace(LIVE, record=rec(owner="")), None, [(L, "other_owner")]),
    # the lock file was removed under a live shellper that still serves its socket (or sits in its cgroup)
    ("lock-missing", None, replace(LIVE, serving=True, **STALE), None, [(L, "lock_missing")]),
    ("lock-missing-registered", ROW, replace(LIVE, serving=True, **STALE), None, [(L, "lock_missing")]),
    # session cgroups no record names: one decision each, before the name's own
    ("stray-cgroup", None, replace(LIVE, files=frozenset(), record=None, stray_cgroups=(STRAY,)), None,
     [(C, "stray_cgroup")]),
    ("stray-cgroup-live", None, replace(LIVE, files=frozenset(), record=None,
                                         stray_cgroups=(OrphanCgroup(STRAY.path, STRAY.leaf, True, True),)), None,
     [(L, "stray_cgroup_live")]),
    ("stray-cgroup-unproven", None, replace(LIVE, files=frozenset(), record=None, stray_cgroups=(
        OrphanCgroup(STRAY.path, STRAY.leaf, True, False, "carries no shellper proof"),)), None,
     [(L, "stray_cgroup_unproven")]),
    ("stray-cgroup-bare", ROW, replace(LIVE, files=frozenset(), record=None, stray_cgroups=(
        OrphanCgroup(STRAY.path, STRAY.leaf, False, False, "carries no shellper proof", True),)), None,
     [(C, "stray_cgroup_bare"), (R, "not_running")]),
    ("stray-cgroup-bare-other-owner", None, replace(LIVE, files=frozenset(), record=None, stray_cgroups=(
        OrphanCgroup(STRAY.path, LeafName.of("/r", "someone-else", "s", "d" * 32), False, False, "no proof",
                     True),)), None, [(L, "other_owner")]),
    ("stray-cgroup-other-owner", None, replace(LIVE, files=frozenset(), record=None, stray_cgroups=(
        OrphanCgroup(STRAY.path, LeafName.of("/r", "someone-else", "s", "d" * 32), True, False),)), None,
     [(L, "other_owner")]),
    ("stray-cgroup-beside-live", ROW, replace(LIVE, stray_cgroups=(STRAY,)), None,
     [(C, "stray_cgroup"), (A, "running")]),
    # never a respawn while a shellper of the name lives in a stray cgroup (of any owner): it would run beside it
    ("stray-cgroup-live-registered", ROW, replace(LIVE, files=frozenset(), record=None, stray_cgroups=(STRAY_LIVE,)),
     None, [(L, "stray_cgroup_live")]),
    ("stray-cgroup-live-beside-dead", ROW, replace(LIVE, identity="gone", stray_cgroups=(STRAY_LIVE,), **STALE), None,
     [(L, "stray_cgroup_live"), (C, "dead")]),
    ("stray-cgroup-live-other-owner-registered", ROW, replace(LIVE, files=frozenset(), record=None, stray_cgroups=(
        OrphanCgroup(STRAY.path, LeafName.of("/r", "someone-else", "s", "d" * 32), True, True),)), None,
     [(L, "other_owner")]),
    ("stray-cgroup-dead-registered", ROW, replace(LIVE, files=frozenset(), record=None, stray_cgroups=(STRAY,)),
     None, [(C, "stray_cgroup"), (R, "not_running")]),
    # files that are not this name's own: a hard link of a live session's lock and socket plus a copied
    # record (name edited or not) verify as that session; they are never adopted nor terminated
    ("hard-linked-lock", None, replace(LIVE, hard_linked=frozenset({"lock"})), None, [(L, "name_mismatch")]),
    ("hard-linked-lock-silent", None, replace(LIVE, hard_linked=frozenset({"lock"}), probe="absent",
                                              welcome_instance_id=None, welcome_pid=None, peer_pid=None,
                                              welcome_name=None), None, [(L, "name_mismatch")]),
    ("hard-linked-sock-registered", ROW, replace(LIVE, hard_linked=frozenset({"sock"})), None,
     [(L, "name_mismatch")]),
    ("hard-linked-record", None, replace(LIVE, hard_linked=frozenset({"json"})), None, [(L, "name_mismatch")]),
    ("welcome-names-another", None, replace(LIVE, welcome_name="real"), None, [(L, "name_mismatch")]),
    ("welcome-names-another-registered", ROW, replace(LIVE, welcome_name="real"), None, [(L, "name_mismatch")]),
    ("record-socket-elsewhere", None, replace(LIVE, record_socket_ok=False), None, [(L, "name_mismatch")]),
    ("record-names-another", None, replace(LIVE, record=rec(name="real")), None, [(L, "name_mismatch")]),
    ("hard-linked-but-dead", ROW, replace(LIVE, identity="gone", hard_linked=frozenset({"lock"}), **STALE), None,
     [(C, "dead"), (R, "dead")]),  # nobody holds the lock: stale names go, nothing is signalled
    # nothing on disk
    ("registered-nothing", ROW, None, None, [(R, "not_running")]),
    ("registered-no-files", ROW, replace(LIVE, files=frozenset()), None, [(R, "not_running")]),
]


@pytest.mark.parametrize(("row", "obs", "husk_max_age", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_reconcile_table(row: RegistryRow | None, obs: Observed | None, husk_max_age: float | None,
                         expected: list[tuple[ReconcileAction, str]]) -> None:
    registry = Registry((row,) if row else ())
    decisions = reconcile(registry, [obs] if obs else [], now=NOW, husk_max_age=husk_max_age)
    assert [(d.action, d.reason) for d in decisions] == expected
    assert all(d.reason in REASONS and d.name == "s" and d.detail for d in decisions)


def test_every_reason_is_reachable() -> None:
    """The table covers every documented reason (a reason nobody can reach is dead documentation)."""
    seen = set()
    for _, row, obs, age, _expected in CASES:
        seen |= {d.reason for d in reconcile(Registry((row,) if row else ()), [obs] if obs else [], now=NOW,
                                             husk_max_age=age)}
    assert seen == REASONS


def test_reconcile_only_terminates_verified_lock_owners() -> None:
    """Invariant over the table: terminate rests on identity + lock owner + (answers => same instance)."""
    for _, row, obs, age, _expected in CASES:
        for d in reconcile(Registry((row,) if row else ()), [obs] if obs else [], now=NOW, husk_max_age=age):
            if d.action is ReconcileAction.TERMINATE:
                o = d.observed
                assert o is not None and o.boot == "current" and o.identity == "verified" and o.locked
                assert o.lock_owner_ok
                assert o.probe != "answered" or o.welcome_instance_id == INST
                assert name_mismatch(o) is None and not o.hard_linked and o.record_socket_ok


def test_reconcile_many_names_sorted_and_grouped() -> None:
    registry = Registry((RegistryRow("b"), RegistryRow("a"), RegistryRow("c")))
    def named(name: str, **changes: Any) -> Observed:
        return replace(LIVE, name=name, record=rec(name=name), welcome_name=name, **changes)

    decisions = reconcile(registry, [named("z"), named("b", identity="gone", **STALE), named("a")], now=NOW)
    assert [(d.name, d.action) for d in decisions] == [
        ("a", A), ("b", C), ("b", R), ("c", R), ("z", T)]


def test_reconcile_rejects_duplicate_observations() -> None:
    with pytest.raises(ValueError, match="twice"):
        reconcile(Registry(), [LIVE, LIVE], now=NOW)


def test_husk_age_falls_back_to_creation_time() -> None:
    husk = replace(HUSK, record=rec(state="exited", last_exit_at=None, created_at=NOW - 50))
    assert [d.action for d in reconcile(Registry((ROW,)), [husk], now=NOW, husk_max_age=60)] == [A]
    assert [d.action for d in reconcile(Registry((ROW,)), [husk], now=NOW, husk_max_age=40)] == [T]


# --------------------------------------------------------------------------------------------- registry


def _write(path: Path, content: bytes | str) -> Path:
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


@pytest.mark.parametrize(("content", "error", "fragment"), [
    ("", RegistryNotJSON, "not valid JSON"),
    ("{", RegistryNotJSON, "not valid JSON"),
    (b"\xff\xfe", RegistryNotJSON, "not valid JSON"),
    ('{"sessions": [{"name": "a", "x": NaN}]}', RegistryNotJSON, "NaN"),
    ("[]", RegistryShapeError, "top level is list"),
    ("{}", RegistryShapeError, "'sessions' must be an array"),
    ('{"sessions": {}}', RegistryShapeError, "'sessions' must be an array"),
    ('{"sessions": ["a"]}', RegistryShapeError, "sessions[0] is str"),
    ('{"sessions": [{}]}', RegistryShapeError, "sessions[0].name must be a string"),
    ('{"sessions": [{"name": 3}]}', RegistryShapeError, "sessions[0].name must be a string"),
    ('{"sessions": [{"name": "a", "instance_id": 7}]}', RegistryShapeError, "instance_id"),
    ('{"sessions": [{"name": "a", "instance_id": ""}]}', RegistryShapeError, "instance_id"),
    ('{"sessions": [{"name": "a", "instance_id": " x"}]}', RegistryShapeError, "instance_id"),
    ('{"sessions": [{"name": "../etc"}]}', RegistryBadName, "sessions[0].name"),
    ('{"sessions": [{"name": ""}]}', RegistryBadName, "is empty"),
    ('{"sessions": [{"name": "-x"}]}', RegistryBadName, "must not start"),
    ('{"sessions": [{"name": "' + "n" * 65 + '"}]}', RegistryBadName, "at most 64"),
    ('{"sessions": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}', RegistryDuplicate, "sessions[2]"),
    ('{"sessions": [' + ",".join(['{"name": "a"}'] * 10_001) + "]}", RegistryTooLarge, "max 10000"),
])
def test_load_registry_errors(tmp_path: Path, content: str | bytes, error: type[RegistryError],
                              fragment: str) -> None:
    path = _write(tmp_path / "reg.json", content)
    with pytest.raises(error) as info:
        load_registry(path)
    assert fragment in str(info.value)
    assert info.value.path == str(path) and str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_load_registry_too_large(tmp_path: Path) -> None:
    path = _write(tmp_path / "reg.json", b" " * (MAX_REGISTRY_BYTES + 1))
    with pytest.raises(RegistryTooLarge):
        load_registry(path)


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_load_registry_unreadable(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "reg.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # must not hang
    with pytest.raises(RegistryUnreadable):
        load_registry(path)


def test_load_registry_ok(tmp_path: Path) -> None:
    data = {"version": 3, "sessions": [{"name": "arch-main", "instance_id": None, "label": "x"},
                                       {"name": "b.2", "instance_id": INST}]}
    reg = load_registry(_write(tmp_path / "reg.json", json.dumps(data)))
    assert reg.rows == (RegistryRow("arch-main", None), RegistryRow("b.2", INST))
    assert reg.get("b.2") == RegistryRow("b.2", INST) and reg.get("zz") is None
    assert parse_registry({"sessions": []}).rows == ()


# --------------------------------------------------------------------------------------------- id matching

SID = "89f3b4c0-1111-2222-3333-444455556666"


@pytest.mark.parametrize(("argv", "form"), [
    (["claude", "--session-id", SID], "argv"),
    (["claude", "--resume", SID, "--verbose"], "argv"),
    (["claude", f"--session-id={SID}"], "argv="),
    (["claude", f"--resume={SID}"], "argv="),
    (["sh", "-c", f"exec claude --resume {SID}"], "shell"),
    (["sh", "-c", f"claude --resume '{SID}'; echo done"], "shell"),
    (["sh", "-c", f'claude --session-id="{SID}" && x'], "shell"),
    (["node", "main.js", json.dumps({"args": ["--session-id", SID]}, separators=(",", ":"))], "json"),
    (["node", "x.js", json.dumps({"args": ["--resume", SID]})], "json"),
    # the short form of --resume, redirections right after the id, command substitution in backticks
    (["claude", "-r", SID], "argv"),
    (["claude", f"-r{SID}"], "argv="),
    (["node", "x.js", json.dumps({"args": ["-r", SID]})], "json"),
    (["sh", "-c", f"claude -r {SID}"], "shell"),
    (["sh", "-c", f"claude -r '{SID}' 2>&1"], "shell"),
    (["sh", "-c", f"claude --resume {SID}>log"], "shell"),
    (["sh", "-c", f"claude --resume {SID}>>log 2>&1"], "shell"),
    (["sh", "-c", f"claude --session-id={SID}<in"], "shell"),
    (["sh", "-c", f"claude -r \"{SID}\">log"], "shell"),
    (["sh", "-c", f"x=`claude --resume {SID}`"], "shell"),
    (["sh", "-c", f"echo `claude -r {SID}`; done"], "shell"),
    (["sh", "-c", f"echo `--resume {SID}`"], "shell"),
    # near misses: never a bare substring
    (["claude", SID], None),
    (["claude", "--session-id", SID + "0"], None),
    (["claude", "--session-id", "0" + SID], None),
    (["claude", f"--session-id={SID}x"], None),
    (["claude", f"--xsession-id={SID}"], None),
    (["claude", "--session", SID], None),
    (["claude", "--session-id"], None),
    ([f"--session-id {SID}"], "shell"),
    (["sh", "-c", f"claude --resume {SID}x"], None),
    (["sh", "-c", f"claude x--resume {SID}"], None),
    (["sh", "-c", f"echo {SID} --resume other"], None),
    (["x", json.dumps({"args": ["--session-id", SID + "-2"]})], None),
    (["x", json.dumps({"other": SID})], None),
    (["claude", "-r", SID + "0"], None),
    (["claude", "-r", "x" + SID], None),
    (["claude", f"-r={SID}"], None),
    (["claude", f"-r{SID}x"], None),
    (["claude", "-R", SID], None),
    (["claude", "-rr", SID], None),
    (["claude", "-r"], None),
    (["sh", "-c", f"claude x-r {SID}"], None),
    (["sh", "-c", f"claude -R {SID}"], None),
    (["sh", "-c", f"grep -e {SID} -r ."], None),
    (["sh", "-c", f"claude --resume {SID}x>log"], None),
    (["sh", "-c", f"claude --resume x{SID}>log"], None),
    (["sh", "-c", f"echo {SID}>log --resume x"], None),
    (["sh", "-c", f"x=`echo {SID}` --resume y"], None),
    (["sh", "-c", f"x=`claude --resume {SID}0`"], None),
    (["sh", "-c", f"claude a>--resume {SID}"], None),
    (["x", json.dumps({"args": ["-r", SID + "0"]})], None),
    (["x", json.dumps({"args": ["-rx", SID]})], None),
    ([], None),
])
def test_argv_carries(argv: list[str], form: str | None) -> None:
    assert argv_carries(argv, SID) == form


@pytest.mark.parametrize("bad", ["", " ", "a b", "-x", "a'b", 'a"b', "a\\b", "a\nb", "x" * 257])
def test_bad_session_id(bad: str) -> None:
    with pytest.raises(BadSessionId):
        argv_carries(["--resume", bad], bad)


def test_session_id_with_regex_characters_is_literal() -> None:
    assert argv_carries(["--resume", "a.b"], "a.b") == "argv"
    assert argv_carries(["sh", "-c", "x --resume axb"], "a.b") is None


# --------------------------------------------------------------------------------------------- backoff


@pytest.mark.parametrize(("backoff", "delays"), [
    (Backoff(), [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]),
    (Backoff(initial=1.0, factor=3.0, max_delay=5.0), [1.0, 3.0, 5.0]),
    (Backoff(initial=0.0), [0.0, 0.0]),
])
def test_backoff_is_bounded(backoff: Backoff, delays: list[float]) -> None:
    assert [round(backoff.delay(i), 6) for i in range(1, len(delays) + 1)] == delays
