"""What benches that time the real CLI in fresh processes share: the command line, a run that must
succeed, and the wall time of one run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def cli_env(repo: Path, **extra: str) -> dict[str, str]:
    """The environment of the timed processes: jobtpu from `repo`, with its bytecode cached as an
    installed jobtpu has it (a PYTHONDONTWRITEBYTECODE inherited from a test box would make every run
    compile jobtpu from source, a cost no user pays and the json.load floor does not pay either)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(repo), **extra}


def jobtpu(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "jobtpu.cli", "--home", str(home), *args]


def run(cmd: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[3:])} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start
