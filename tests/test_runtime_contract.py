"""protocol/RUNTIME.md against real shellpers: the records they write validate against record.schema.json (as
a Tower in another language would check them, with a standard JSON Schema validator), so do the examples, the
launch line names what WELCOME names the same way, and a failed launch says why in a word a program can use."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.paths import PY, ROOT, SHELLPER_CLI
from support.sessions import Sessions
from support.waiting import poll_until

from shellper.client.launch import LaunchError, LaunchFailure, LaunchInfo, launch
from shellper.core.config import SessionConfig
from shellper.core.exits import RestartPolicy
from shellper.core.structs import replace
from shellper.host.record import SessionRecord

SCHEMA = json.loads((ROOT / "protocol" / "record.schema.json").read_text(encoding="utf-8"))
EXAMPLES = sorted((ROOT / "protocol" / "examples").glob("*.json"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _problems(record: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(record)]


def _cli(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SHELLPER_CLI, "--dir", str(directory), *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_record_fits_the_schema_and_reads_back(path: Path) -> None:
    record = json.loads(path.read_text(encoding="utf-8"))
    assert _problems(record) == []
    assert SessionRecord.from_json(path.read_bytes()).name == record["name"]


def test_the_examples_cover_what_a_tower_meets() -> None:
    records = [json.loads(p.read_text(encoding="utf-8")) for p in EXAMPLES]
    assert {r["state"] for r in records} >= {"running", "exited", "fatal"}
    assert {r["containment"] for r in records} >= {"cgroup", "none"}
    assert any(r["exits"] for r in records)


@pytest.mark.parametrize(("change", "where"), [
    ({"instance_id": None}, ""),
    ({"name": "-dash"}, "name"),
    ({"shellper_pid": 0}, "shellper_pid"),
    ({"state": "sleeping"}, "state"),
    ({"owner": "a b"}, "owner"),
    ({"exits": [{"code": 0}]}, "exits/0"),
    ({"cmdline_sha256": "xyz"}, "cmdline_sha256"),
])
def test_the_schema_refuses_what_a_reader_must_not_trust(change: dict[str, Any], where: str) -> None:
    """The schema can fail: each change breaks one rule RUNTIME.md states."""
    record = json.loads(EXAMPLES[0].read_text(encoding="utf-8"))
    record.update(change)
    if change.get("instance_id", "") is None:
        del record["instance_id"]
    problems = _problems(record)
    assert problems and all(p.startswith(where) for p in problems), problems


def test_records_live_shellpers_write_fit_the_schema(sessions: Sessions) -> None:
    quick = RestartPolicy(backoff_initial=0.05, backoff_max=0.05, jitter=0.0, same_error_count=2)
    sessions.start("live", ["cat"], owner="tower-a")
    sessions.start("crashy", [PY, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"], policy=quick)
    sessions.start("clean", ["true"], policy=RestartPolicy(mode="no"))
    wanted = {"live": "running", "crashy": "fatal", "clean": "exited"}

    def read(name: str) -> dict[str, Any]:
        return dict(json.loads((sessions.dir / f"{name}.json").read_text(encoding="utf-8")))

    poll_until(lambda: all(read(n)["state"] == s for n, s in wanted.items()), 30, what=f"states {wanted}")
    for name in wanted:
        record = read(name)
        assert _problems(record) == [], (name, record)
    assert read("crashy")["exits"] and read("live")["owner"] == "tower-a"
    for name in wanted:
        sessions.stop(name)


def test_the_launch_line_uses_welcomes_names_and_keeps_the_old_ones(sessions: Sessions) -> None:
    done = _cli(sessions.dir, "run", "--json", "line", "--", "cat")
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout)
    info = LaunchInfo.from_dict(line)
    sessions.started.append(info)
    with sessions.connect("line", replay_bytes=0) as tower:
        welcome = tower.welcome
        assert welcome is not None
        same = {"name": welcome.name, "shellper_pid": welcome.shellper_pid, "boot_id": welcome.boot_id,
                "shellper_start_time": welcome.shellper_start_time, "instance_id": welcome.instance_id,
                "child_pid": welcome.child_pid}
    assert {k: line[k] for k in same} == same
    assert (line["pid"], line["start_time"]) == (line["shellper_pid"], line["shellper_start_time"])
    assert list(line)[:3] == ["name", "shellper_pid", "shellper_start_time"]
    old = {k: v for k, v in line.items() if k not in ("shellper_pid", "shellper_start_time")}
    assert LaunchInfo.from_dict(old) == info  # a line of an earlier version still reads
    sessions.stop("line")


def test_a_failed_launch_says_why_in_a_word(sessions: Sessions, tmp_path: Path) -> None:
    sessions.start("taken", ["cat"])
    config = SessionConfig(name="x", argv=["cat"], dir=str(sessions.dir), cwd=str(ROOT), env={})
    cases = [
        ({"name": "taken"}, LaunchFailure.ALREADY_RUNNING),
        ({"argv": ["/no/such/program"]}, LaunchFailure.BAD_COMMAND),
        ({"argv": [str(tmp_path)]}, LaunchFailure.BAD_COMMAND),
        ({"cwd": str(tmp_path / "gone")}, LaunchFailure.BAD_DIRECTORY),
    ]
    for change, reason in cases:  # the library (a fresh interpreter); the CLI below forks
        with pytest.raises(LaunchError) as failed:
            launch(replace(config, **change))
        assert failed.value.reason is reason, (change, failed.value)
    for args, reason in ((["taken", "--", "cat"], "already_running"), (["y", "--", "/no/such/program"], "bad_command"),
                         (["y", "--cwd", str(tmp_path / "gone"), "--", "cat"], "bad_directory")):
        done = _cli(sessions.dir, "run", "--json", *args)
        assert done.returncode == 1 and done.stderr
        assert json.loads(done.stdout) == {"name": args[0], "error": json.loads(done.stdout)["error"], "reason": reason}
    sessions.stop("taken")
