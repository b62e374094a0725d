"""The built-in local machine: scripts run through a local bash, files are copied in place."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .. import safefs
from ..errors import RemoteError
from ..home import create_temp, make_dirs, rename_synced
from ..scripts import RUN_SCRIPT
from .base import Endpoint, Result


class LocalTransport:
    def __init__(self, endpoint: Endpoint, shared: bool = False) -> None:
        self.endpoint = endpoint
        # In a home its group shares, the local machine's folders are the group's too: whoever runs
        # the next pass must be able to unpack, launch and clean there, whatever their own umask.
        self.umask = "umask 0007\n" if shared else ""

    def run(self, script: str, timeout: float | None = None) -> Result:
        # jobtpu's own settings (JOBTPU_HOME, JOBTPU_USER) belong to the manager, not to its jobs.
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTPU_")}
        try:
            done = subprocess.run(RUN_SCRIPT, shell=True, input=(self.umask + script).encode(), capture_output=True, env=env,
                                  timeout=timeout, cwd=os.path.expanduser("~"), start_new_session=True)
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{self.endpoint.machine}: a local script took over {timeout:.0f}s") from None
        return Result(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))

    def push(self, local: Path, remote: str) -> None:
        """Copy to a temporary file of its own next to the target, then rename: atomic, and copies made
        at once (the threads of one pass, or two passes) never write into each other's file."""
        target = Path(remote).expanduser()
        make_dirs(target.parent)
        fd, tmp = create_temp(target)  # never through a symlink planted in the run folder
        try:
            with os.fdopen(fd, "wb") as out, open(local, "rb") as source:
                shutil.copyfileobj(source, out)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        rename_synced(tmp, target)

    def pull(self, remote: str, local: Path, into: int | None = None) -> None:
        """Copy into the folder `into` (a descriptor; `local` names it), never through a link planted
        under it (docs/design.md §2)."""
        source = Path(remote).expanduser()
        if not source.exists():
            raise RemoteError(f"{self.endpoint.machine}: {remote} does not exist")
        if into is None:
            local.mkdir(parents=True, exist_ok=True)
            into = os.open(local, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                safefs.copy_into(source, into)
            finally:
                os.close(into)
            return
        safefs.copy_into(source, into)

    def close(self) -> None:
        pass
