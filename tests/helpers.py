"""Shared test helpers: a throwaway home, running the real CLI (in a subprocess, or in this process
where a test runs hundreds of commands), passes until something holds, polling with a deadline.

Every helper that runs the CLI takes `in_process`: False runs `python -m jobtpu.cli` in a subprocess
(exactly what a user runs: `jobtpu` and `run` always, by default), True calls `jobtpu.cli.main`
here. Three run here by default, because tests call them by the thousand to get somewhere, not to test the process: reading
the records (`status`), queueing a job (`submit`, `submit_json`), and the passes of `run_pass`,
`manage` and the loops over them (each paid a Python start-up and, on a TPU home, the Google
client's import: most of the suite's CPU). A test of what a process does (its exit, its signals, a
crash, its output to a terminal) runs `jobtpu(home, "manage")` or its own Popen, as a user does. In
this process a command that hangs is stopped by a watchdog after its timeout, with every thread's
stack, instead of holding the suite."""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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


def make_home(base: Path, machines: dict[str, Any] | None = None, *, slots: int = 4, **top: Any) -> Path:
    """`base/home` with a machines.json: `machines`, else one local machine with `slots` slots; `top`:
    other top-level keys (config_aliases, ...)."""
    home = base / "home"
    home.mkdir(parents=True, exist_ok=True)
    doc = {"machines": machines or {"local": {"kind": "local", "resources": {"slot": slots}}}, **top}
    (home / "machines.json").write_text(json.dumps(doc, indent=1) + "\n")
    return home


def jobtpu(home: Path, *args: str, check: bool = True, timeout: float = 60,
           env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "JOBTPU_USER": "tester", **(env or {})}
    done = subprocess.run([*JOBTPU, "--home", str(home), *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd)
    if check and done.returncode != 0:
        raise AssertionError(f"jobtpu {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


@contextlib.contextmanager
def _user(name: str | None) -> Iterator[None]:
    old = os.environ.get("JOBTPU_USER")
    if name is None:
        os.environ.pop("JOBTPU_USER", None)
    else:
        os.environ["JOBTPU_USER"] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("JOBTPU_USER", None)
        else:
            os.environ["JOBTPU_USER"] = old


def cli(home: Path, *args: str, user: str | None = "tester", timeout: float = 120) -> tuple[int, str, str]:
    """`jobtpu --home HOME ARGS…` in this process as `user` (None: no JOBTPU_USER): exit status,
    stdout, stderr. Past `timeout` the test's process ends with every thread's stack (a subprocess
    would be killed): a hang is a failure that says where, never a suite that waits for ever."""
    from jobtpu.cli import main

    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with _user(user), _watchdog(timeout), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["--home", str(home), *args])
        except SystemExit as e:  # argparse
            rc = int(e.code or 0)
        out.flush()
        err.flush()
    return rc, out.buffer.getvalue().decode(), err.buffer.getvalue().decode()  # type: ignore[attr-defined]


@contextlib.contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def run(home: Path, *args: str, in_process: bool = False, timeout: float = 60) -> tuple[str, str]:
    """A command that must succeed: its stdout and stderr."""
    if in_process:
        code, out, err = cli(home, *args, timeout=timeout)
        assert code == 0, (args, out, err)
        return out, err
    done = jobtpu(home, *args, timeout=timeout)
    return done.stdout, done.stderr


def submit_json(home: Path, src: Path, cmd: str, *extra: str, in_process: bool = True,
                use_home_flag: bool = True, cwd: Path | None = None) -> dict[str, Any]:
    """`submit --json`; `use_home_flag=False` submits as a user does, from `cwd` without --home nor
    $JOBTPU_HOME (the folder's machines.json makes it the home)."""
    args = ["submit", "--json", "--dir", str(src), "--cmd", cmd, *extra]
    if use_home_flag:
        return dict(json.loads(run(home, *args, in_process=in_process)[0]))
    env = {k: v for k, v in os.environ.items() if k != "JOBTPU_HOME"}
    done = subprocess.run([*JOBTPU, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**env, "JOBTPU_USER": "tester"})
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def submit(home: Path, src: Path, cmd: str, *extra: str, in_process: bool = True) -> int:
    return int(run(home, "submit", "--dir", str(src), "--cmd", cmd, *extra, in_process=in_process)[0].strip())


def status(home: Path, in_process: bool = True) -> dict[int, dict[str, Any]]:
    doc = json.loads(run(home, "status", "--all-users", "--json", in_process=in_process)[0])
    return {j["id"]: j for j in doc["jobs"]}


def run_pass(home: Path, in_process: bool = True) -> str:
    """One pass that must succeed; what it said on stderr."""
    return run(home, "manage", in_process=in_process, timeout=90)[1]


def manage(home: Path, in_process: bool = True) -> dict[int, dict[str, Any]]:
    """One pass; then every job's record."""
    run_pass(home, in_process)
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


Jobs = dict[int, dict[str, Any]]


def passes_until(home: Path, done: Callable[[Jobs], Any], what: str, timeout: float = 60, interval: float = 0.2,
                 each: Callable[[Jobs], None] | None = None, in_process: bool = True) -> Jobs:
    """Run passes until done(every job's record) holds (`each` sees every round's records); the records."""
    def one() -> Jobs | None:
        jobs = manage(home, in_process)
        if each is not None:
            each(jobs)
        return jobs if done(jobs) else None
    return wait_for(one, timeout=timeout, interval=interval, what=what)  # type: ignore[no-any-return]


def manage_until(home: Path, job_ids: list[int], statuses: set[str], timeout: float = 60) -> Jobs:
    """Run passes until every job is in one of `statuses`; the final status records."""
    return passes_until(home, lambda jobs: all(jobs[i]["status"] in statuses for i in job_ids),
                        f"jobs {job_ids} to reach {statuses}", timeout=timeout)


def until(home: Path, job_id: int, predicate: Callable[[dict[str, Any]], Any], timeout: float = 90,
          what: str = "") -> dict[str, Any]:
    """Run passes until predicate(the job's record) holds; that record."""
    jobs = passes_until(home, lambda jobs: predicate(jobs[job_id]), what or "the job", timeout=timeout, interval=0.3)
    return jobs[job_id]


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def allow_private_webhooks(home: Path) -> None:
    """The home's runner.json allows webhooks at private addresses (a test's receiver on 127.0.0.1),
    written as the reference says: by the account that runs the passes, nobody else may write it."""
    (home / "runner.json").write_text(json.dumps({"allow_private_webhooks": True}) + "\n")
    (home / "runner.json").chmod(0o644)


def watch_processes(under: Path) -> list[int]:
    """The wrapper's watches (docs/design.md §4) whose arguments name a path under `under`: the bash
    processes called `jobtpu-watch` (not the env or setsid that start them, whose words are the same)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if words[0].endswith(b"bash") and b"jobtpu-watch" in words and any(w.startswith(str(under).encode()) for w in words):
            found.append(int(cmdline.parent.name))
    return found
