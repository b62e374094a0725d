"""Shared test helpers: a throwaway home, running the real CLI, polling with a deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

JOBTPU = [sys.executable, "-m", "jobtpu.cli"]


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    """Files (relative path → text or bytes) under root; root."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def make_home(base: Path, machines: dict[str, Any] | None = None) -> Path:
    home = base / "home"
    home.mkdir(parents=True, exist_ok=True)
    doc = {"machines": machines or {"local": {"kind": "local", "resources": {"slot": 4}}}}
    (home / "machines.json").write_text(json.dumps(doc, indent=1))
    return home


def jobtpu(home: Path, *args: str, check: bool = True, timeout: float = 60,
           env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "JOBTPU_USER": "tester", **(env or {})}
    done = subprocess.run([*JOBTPU, "--home", str(home), *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd)
    if check and done.returncode != 0:
        raise AssertionError(f"jobtpu {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def submit(home: Path, src: Path, cmd: str, *extra: str) -> int:
    return int(jobtpu(home, "submit", "--dir", str(src), "--cmd", cmd, *extra).stdout.strip())


def status(home: Path) -> dict[int, dict[str, Any]]:
    doc = json.loads(jobtpu(home, "status", "--all-users", "--json").stdout)
    return {j["id"]: j for j in doc["jobs"]}


def manage(home: Path) -> dict[int, dict[str, Any]]:
    """One pass; then every job's record."""
    jobtpu(home, "manage", timeout=90)
    return status(home)


def wait_for(predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.1, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def manage_until(home: Path, job_ids: list[int], statuses: set[str], timeout: float = 60) -> dict[int, dict[str, Any]]:
    """Run passes until every job is in one of `statuses`; the final status records."""
    def done() -> dict[int, dict[str, Any]] | None:
        jobtpu(home, "manage")
        jobs = status(home)
        return jobs if all(jobs[i]["status"] in statuses for i in job_ids) else None
    return wait_for(done, timeout=timeout, interval=0.2, what=f"jobs {job_ids} to reach {statuses}")


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
