"""The tower-client command line, in-process, against real shellpers."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from support.paths import REPO
from support.processes import alive, identity, is_dead, sleeper_argv
from support.sessions import Sessions
from support.waiting import poll_until

from shellper.core.structs import replace
from shellper.host.record import read_record, write_record
from tower_client.cli import main
from tower_client.holders import find_holders


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("content", ["not json", '{"sessions": [{"name": "a"}, {"name": "a"}]}',
                                     '{"sessions": [{"name": "../x"}]}', "[]"])
def test_bad_registry_is_one_line_and_exit_2(sessions: Sessions, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str], content: str) -> None:
    info = sessions.start("keep", ["sleep", "300"])
    reg = tmp_path / "reg.json"
    reg.write_text(content)
    code, out, err = run(capsys, "--dir", str(sessions.dir), "reconcile", "--registry", str(reg), "--apply")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tower-client: registry ") and str(reg) in err
    assert alive(identity(info.pid))  # nothing was applied


def test_missing_registry_exit_2(sessions: Sessions, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--dir", str(sessions.dir), "reconcile", "--registry", "/nonexistent/r.json")
    assert code == 2 and "no such file" in err


def test_ls_reconcile_apply(sessions: Sessions, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keep = sessions.start("keep", ["sleep", "300"])
    drop = sessions.start("drop", ["sleep", "300"])
    drop_id = identity(drop.pid)
    code, out, _ = run(capsys, "--dir", str(sessions.dir), "ls", "--json")
    listed = {o["name"]: o for o in json.loads(out)}
    assert code == 0 and set(listed) == {"keep", "drop"}
    assert listed["keep"]["identity"] == "verified" and listed["keep"]["probe"] == "answered"
    reg = tmp_path / "reg.json"
    reg.write_text(json.dumps({"sessions": [{"name": "keep", "instance_id": keep.instance_id}]}))
    code, out, _ = run(capsys, "--dir", str(sessions.dir), "reconcile", "--registry", str(reg), "--json")
    dry = json.loads(out)
    assert code == 0 and not dry["applied"]
    assert [(d["name"], d["action"]) for d in dry["decisions"]] == [("drop", "terminate"), ("keep", "adopt")]
    assert alive(drop_id)  # a dry run changes nothing
    code, out, _ = run(capsys, "--dir", str(sessions.dir), "reconcile", "--registry", str(reg))
    assert code == 0 and out.splitlines()[-1].startswith("dry run: nothing was done")
    assert "terminate" in out and alive(drop_id)
    code, out, _ = run(capsys, "--dir", str(sessions.dir), "reconcile", "--registry", str(reg), "--apply",
                       "--grace", "0.5")
    assert code == 0 and "terminated" in out and "adopted" in out
    assert is_dead(drop_id) and alive(identity(keep.pid))


def test_reap_is_identity_checked(sessions: Sessions, capsys: pytest.CaptureFixture[str]) -> None:
    info = sessions.start("victim", ["sh", "-c", "sleep 300 & wait"])
    tampered = sessions.start("tampered", ["sleep", "300"])
    path = sessions.dir / "tampered.json"
    rec = read_record(path)
    write_record(path, replace(rec, shellper_start_time=rec.shellper_start_time + 1))
    code, out, _ = run(capsys, "--dir", str(sessions.dir), "reap", "tampered")
    assert code == 1 and "refused" in out and "mismatch" in out
    assert alive(identity(tampered.pid))
    shellper = identity(info.pid)
    code, out, _ = run(capsys, "--dir", str(sessions.dir), "reap", "victim", "--grace", "0.5", "--json")
    data = json.loads(out)
    assert code == 0 and data["reaped"] and data["method"] == "stop" and len(data["tree"]) >= 2
    assert is_dead(shellper)
    code, out, _ = run(capsys, "--dir", str(sessions.dir), "reap", "victim")
    assert code == 1 and "no session record" in out


def test_holders_command(sessions: Sessions, capsys: pytest.CaptureFixture[str]) -> None:
    sid = str(uuid.uuid4())
    person = sessions.spawn(sleeper_argv("--session-id", sid))
    code, out, _ = run(capsys, "--dir", str(sessions.dir), "holders", sid, "--json")
    data = json.loads(out)
    assert code == 0 and data["would"] == "mint"
    assert [(h["pid"], h["kind"]) for h in data["holders"]] == [(person.pid, "foreign")]
    code, _, err = run(capsys, "--dir", str(sessions.dir), "holders", "not an id")
    assert code == 2 and "invalid session id" in err


def test_holders_command_reclaimable(sessions: Sessions, capsys: pytest.CaptureFixture[str]) -> None:
    """Only sessions named with --reclaimable are the Tower's to end; a holder in any other is foreign."""
    sid = str(uuid.uuid4())
    info = sessions.start("agent", sleeper_argv("-r", sid))
    poll_until(lambda: [h for h in find_holders(sid, sessions.dir) if h.pid == info.child_pid],
               what="the child to exec")
    base = ("--dir", str(sessions.dir), "holders", sid, "--json")
    for named, would, kind in [((), "mint", "foreign"), (("--reclaimable", "x"), "mint", "foreign"),
                               (("--reclaimable", "x", "--reclaimable", "agent"), "reclaim", "own")]:
        code, out, _ = run(capsys, *base, *named)
        data = json.loads(out)
        assert code == 0 and data["would"] == would, named
        [h] = data["holders"]
        assert (h["pid"], h["kind"], h["within"], h["left_behind"]) == (info.child_pid, kind, "agent", False)
        assert h["session"] == ("agent" if kind == "own" else None)
    assert alive(identity(info.pid))  # looking ends nothing


def test_console_script_entry(sessions: Sessions) -> None:
    proc = subprocess.run([sys.executable, "-m", "tower_client.cli", "--dir", str(sessions.dir), "ls"],
                          capture_output=True, text=True, timeout=30, cwd=REPO)
    assert proc.returncode == 0 and "no sessions" in proc.stdout

pytestmark = pytest.mark.kills_sessions
