"""The fast tier (`python3 -m pytest -m fast`) is what a contributor runs as any user: conftest refuses
a test marked fast that asks for a fixture needing root, sshd or real accounts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("fixture", ["ssh_fleet", "tpus", "team"])
def test_a_fast_test_that_needs_root_is_refused(tmp_path: Path, fixture: str) -> None:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n\n\n"
        f"@pytest.fixture\ndef team():\n    yield None\n\n\n"
        f"@pytest.mark.fast\ndef test_probe({fixture}):\n    pass\n\n\n"
        "@pytest.mark.fast\ndef test_plain():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "fast", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    refused = next(line for line in done.stderr.splitlines() if "test_probe.py::test_probe uses" in line)
    assert fixture in refused.split(" uses ", 1)[1] and "test_plain" not in refused, done.stderr
    assert "need no root, sshd nor accounts" in done.stderr


def test_a_fast_test_without_such_fixtures_runs(tmp_path: Path) -> None:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text("import pytest\n\n\n@pytest.mark.fast\ndef test_plain(tmp_path):\n"
                                            "    assert tmp_path.is_dir()\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "fast", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
