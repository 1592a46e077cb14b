"""A version-1 client in plain JavaScript (clients/legacy-v1/, written from original.md's description) drives
`shellper legacy-main` from launch to SIGTERM on Node's own test runner."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed: the version-1 JavaScript client cannot run")
def test_version_1_javascript_client_end_to_end() -> None:
    assert NODE is not None
    base = Path(tempfile.mkdtemp(prefix="lgn-", dir="/tmp"))
    try:
        env = {**os.environ, "SHELLPER_CMD": json.dumps([sys.executable, "-m", "shellper"]),
               "LEGACY_DIR": str(base / "run")}
        done = subprocess.run([NODE, "--test", "--test-reporter=tap", str(ROOT / "clients/legacy-v1/e2e.mjs")],
                              capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
        report = done.stdout + done.stderr
        assert done.returncode == 0, report
        assert "# pass 3" in report and "# fail 0" in report, report
        assert not [p for p in (base / "run").iterdir() if p.name != "logs"], "files left behind"
    finally:
        shutil.rmtree(base)
