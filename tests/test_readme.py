"""The README's first lines and its Python example, followed as written: a user's guide that works."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pexpect
from support.sessions import files_in
from support.waiting import poll_until

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
TIMEOUT = 20.0


def _block(heading: str, language: str) -> str:
    section = README.split(f"\n## {heading}\n", 1)[1]
    found = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert found, f"no {language} block under {heading}"
    return found.group(1)


def _env(directory: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # where `pip install .` put the shellper command
    return dict(os.environ, SHELLPER_DIR=str(directory), PATH=f"{bin_dir}:{os.environ['PATH']}",
                PYTHONPATH=str(REPO))


def test_the_quick_start_is_ten_lines_and_works_as_written(cli_runtime_dir: Path) -> None:
    lines = _block("Quick start", "sh").splitlines()
    assert len(lines) <= 10
    commands = [line.split("#", 1)[0].strip() for line in lines]
    assert commands[0].startswith("pip install .")
    env = _env(cli_runtime_dir)
    attached = 0
    for command, line in zip(commands[1:], lines[1:], strict=True):
        if not command:
            assert "Ctrl-\\ detaches" in line
            continue
        argv = shlex.split(command)
        if argv[1] == "attach":  # a person at a terminal: type, see it, Ctrl-\ detaches
            term = pexpect.spawn(argv[0], argv[1:], env=env, timeout=TIMEOUT)
            marker = f"quick-{attached}"
            term.sendline(f"echo {marker}-$((6*7))")
            term.expect(f"{marker}-42")
            if attached:
                assert b"quick-0-42" in term.before  # the first visit, replayed
            term.send("\x1c")
            term.expect(pexpect.EOF)
            term.close()
            assert term.exitstatus == 0
            attached += 1
            continue
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, (command, done.stderr)
        if argv[1] == "ls":
            assert re.search(r"^[ +] *work\s+running", done.stdout, re.M), done.stdout
    assert attached == 2
    assert not list(cli_runtime_dir.glob("work.sock"))  # stopped


def test_the_python_example_runs(cli_runtime_dir: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _block("From Python", "python")], capture_output=True, text=True,
                          env=_env(cli_runtime_dir), timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^hello\r?$", done.stdout, re.M), done.stdout
    # The example sends STOP and goes: the shellper ends its tree and removes its files after that.
    poll_until(lambda: files_in(cli_runtime_dir) == ["logs"], 20,
               what="the stopped session's files to go, but its kept log")


def test_figures_stay_in_bench_notes() -> None:
    """The README is a user's guide: measurements (rates, latencies, loads) are in bench/NOTES.md, and its
    Performance section keeps one table of ratios against dtach, a raw PTY and tmux (issue 28, "Habits")."""
    assert not re.search(r"MiB/s|\bload (average )?\d|, (us|ms) *\|", README, re.I)  # a rate, a load, a bench column
    section = README.split("\n## Performance\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0].split("|")[2:5] == [" against dtach ", " against a raw PTY ", " against tmux "]
    cells = [cell.strip() for row in rows[2:] for cell in row.split("|")[2:-1] if cell.strip()]
    assert cells and all(re.match(r"\d+(\.\d+)?x\b", cell) for cell in cells), cells
    notes = (REPO / "bench" / "NOTES.md").read_text()
    assert "## The README's tables, moved here" in notes


def _package_imports(source: str) -> list[str]:
    """The modules of shellper and tower_client that ``source`` imports from."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [n for n in names if n.split(".")[0] in ("shellper", "tower_client")]
    return found


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_python_example_imports_only_the_facade() -> None:
    """A user needs one import: the README's example takes everything from ``tower_client`` (it once imported
    from shellper.core.config, shellper.daemon.launch and shellper.protocol.wire as well)."""
    import tower_client

    blocks = _python_blocks(README)
    assert blocks
    for block in blocks:
        assert set(_package_imports(block)) <= {"tower_client"}, block
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "tower_client":
                assert {a.name for a in node.names} <= set(tower_client.__all__)


def test_the_guides_and_examples_import_only_the_facade() -> None:
    import tower_client

    sources = [*(block for doc in ("docs/TOWER.md", "docs/REMOTE.md") for block in _python_blocks(
        (REPO / doc).read_text())), *((p.read_text()) for p in sorted((REPO / "examples").glob("*.py")))]
    for source in sources:
        assert set(_package_imports(source)) <= {"tower_client"}, source[:200]
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module == "tower_client":
                assert {a.name for a in node.names} <= set(tower_client.__all__), source[:200]


def test_the_facade_holds_every_frame_and_error_and_imports_the_fleet_on_first_use() -> None:
    """``tower_client`` exports what a user meets; the Fleet (and the rest the ``tower-client`` command does not
    use) is imported only when asked for, so the command, which imports the package, does not pay for it."""
    probe = """
import sys
import tower_client.cli
from shellper.protocol import wire
lazy = set(tower_client._LAZY.values())
assert "tower_client.fleet" in lazy and not lazy & set(sys.modules), lazy & set(sys.modules)
missing = [c.__name__ for c in wire.FRAME_CLASSES.values()
           if c is not wire.Hello and c.__name__ not in tower_client.__all__]
assert not missing, missing
for name in tower_client.__all__:
    getattr(tower_client, name)
from tower_client.fleet import Fleet
assert tower_client.Fleet is Fleet
errors = [n for n in tower_client.__all__ if isinstance(getattr(tower_client, n), type)
          and issubclass(getattr(tower_client, n), BaseException)]
assert all(issubclass(getattr(tower_client, n), tower_client.ShellperError) for n in errors), errors
assert {"FleetError", "ClientError", "LaunchError", "ConfigError", "InvalidRequest"} <= set(errors)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
