"""How often a pass touches state.json, counted from the system calls of the real CLI (strace): one
read, and at most two writes (its intents, then its result); a quiet pass writes nothing."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.helpers import JOBTPU, make_home, status, submit


def state_io(home: Path, *args: str) -> tuple[int, int]:
    """Run one command under strace: (reads, writes) of the home's state.json."""
    trace = home.parent / "trace.txt"
    subprocess.run(["strace", "-f", "--detach-on=execve", "-qq", "-e", "trace=openat,rename,renameat,renameat2", "-o", str(trace),
                    *JOBTPU, "--home", str(home), *args], check=True, capture_output=True, timeout=120,
                   env={**os.environ, "JOBTPU_USER": "tester"})
    text = trace.read_text()
    path = re.escape(str(home / "state.json"))
    reads = len(re.findall(rf'openat\(AT_FDCWD, "{path}", O_RDONLY', text))
    writes = len(re.findall(rf'rename(?:at2?)?\([^\n]*, "{path}"', text))
    return reads, writes


def test_a_pass_reads_state_once_and_writes_it_at_most_twice(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "job.sh").write_text("sleep 600\n")
    ids = [submit(home, src, "bash job.sh") for _ in range(2)]
    assert state_io(home, "manage") == (1, 2)  # intents (launching), then the result (running)
    assert {status(home)[i]["status"] for i in ids} == {"running"}
    reads, writes = state_io(home, "manage")  # the jobs' first probe records their log size
    assert reads == 1 and writes <= 1
    assert state_io(home, "manage") == (1, 0)  # nothing changed: nothing written
    assert state_io(home, "kill", *map(str, ids))[1] <= 2
    assert {status(home)[i]["status"] for i in ids} == {"killed"}
