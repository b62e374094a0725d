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


def installed_jobtpu(tmp: Path, repo: Path) -> tuple[list[str], list[str]]:
    """What a user runs and its floor: this checkout pip-installed (not editable) into a fresh venv,
    started by its console script; and a venv of the same interpreter with nothing installed, whose
    bare `python` is the floor. The venv finds jobtpu's dependencies in this interpreter's site
    packages through a plain path line (no `--system-site-packages`: that would also run whatever
    start-up hooks this machine's site packages hold, an editable jobtpu's among them, which no
    user's venv runs)."""
    import shutil
    import sysconfig

    source = tmp / "checkout"
    shutil.copytree(repo / "jobtpu", source / "jobtpu", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(repo / name, source / name)
    venv, bare = tmp / "venv", tmp / "bare"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--disable-pip-version-check",
                    str(source)], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    return [str(venv / "bin" / "jobtpu")], [str(bare / "bin" / "python")]


def user_env(**extra: str) -> dict[str, str]:
    """The environment of an installed jobtpu's runs: no PYTHONPATH, bytecode written as usual."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    return {**env, **extra}
