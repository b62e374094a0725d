"""Which folder is the home (SPEC §1), and every local path inside it, in one place."""

from __future__ import annotations

import os
from pathlib import Path

# What jobtpu itself writes at the top of a home (with their .bak/.lock/.tmp companions): never part
# of a snapshot, even when the folder snapshotted is the home or holds it. machines.json is the user's.
_OWN_FOLDERS = frozenset({"archives", "cache", "logs", "results", "run"})
_OWN_FILES = frozenset({"state.json", "secrets.json", ".secrets.json", "history.jsonl", "known_hosts", "manage.lock"})
_OWN_COMPANIONS = tuple(f"{name}." for name in sorted(_OWN_FILES))


def is_own_entry(name: str) -> bool:
    """Whether `name`, directly in a home, is one of jobtpu's own files or folders (checked for every
    file of a snapshot of the home, so one set lookup or one startswith)."""
    return name in _OWN_FOLDERS or name in _OWN_FILES or name.startswith(_OWN_COMPANIONS)


class Home:
    """A home folder. A plain class, not a dataclass: `jobtpu status` must not pay for importing
    dataclasses (and inspect) on every call."""

    __slots__ = ("root",)

    def __init__(self, root: Path) -> None:
        self.root = root

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Home) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"Home({str(self.root)!r})"

    @property
    def machines_file(self) -> Path:
        return self.root / "machines.json"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def state_backup(self) -> Path:
        return self.root / "state.json.bak"

    @property
    def state_lock(self) -> Path:
        """Held briefly by every reader-modifier-writer of state.json."""
        return self.root / "state.json.lock"

    @property
    def pass_lock(self) -> Path:
        """Held for a whole pass by whatever acts on the fleet, so two passes never both act."""
        return self.root / "manage.lock"

    @property
    def history_file(self) -> Path:
        return self.root / "history.jsonl"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    def archive(self, name: str) -> Path:
        return self.archives / name

    def job_logs(self, job_id: int) -> Path:
        return self.root / "logs" / str(job_id)

    def log_file(self, job_id: int, attempt: int, worker: int) -> Path:
        return self.job_logs(job_id) / f"{attempt}.{worker}.log"

    def results(self, job_id: int) -> Path:
        return self.root / "results" / str(job_id)

    @property
    def local_run_root(self) -> Path:
        """Where the built-in local machine keeps job folders when machines.json names no root."""
        return self.root / "run"

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)


def find_home(explicit: str | None = None, cwd: Path | None = None) -> Home:
    """--home, else $JOBTPU_HOME, else the nearest folder up from cwd with a machines.json, else ~/.jobtpu."""
    if explicit:
        return Home(Path(explicit).expanduser().resolve())
    env = os.environ.get("JOBTPU_HOME")
    if env:
        return Home(Path(env).expanduser().resolve())
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "machines.json").is_file():
            return Home(folder)
    return Home(Path("~/.jobtpu").expanduser())
