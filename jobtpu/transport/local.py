"""The built-in local machine: scripts run through a local bash, files are copied in place."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

from jobtpu.errors import RemoteError
from jobtpu.home import safefs
from jobtpu.home.layout import create_temp, make_dirs, regular_fd, rename_synced
from jobtpu.remote.scripts import RUN_SCRIPT
from jobtpu.transport.base import Endpoint, Result, whole

# The run root's containers (docs/design.md §4): in a shared home of the old layout setgid and sticky,
# so every member may add a job's folder (or a stop request, in stop/: §7) and nobody may rename or
# delete another's; in the one-writer layout the runner's, the group reads them; the owner's alone
# otherwise.
CONTAINERS = ("meta", "jobs", "archives", "stop")
SHARED_CONTAINER = 0o3770
RUNNER_CONTAINER = 0o2750
PRIVATE_FOLDER = 0o700
# What a login's PATH is when neither /etc/environment nor /etc/login.defs names one (login's own defaults).
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_SUPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KEPT = ("LANG", "TZ", "TMPDIR")  # and every LC_*: how the account's own sessions read text and time


def _setting(text: str, name: str, words: bool) -> str:
    """The last setting of `name` in a system file's text: `NAME=value` lines (/etc/environment,
    quotes dropped) or, with `words`, `NAME value` lines (/etc/login.defs). Empty when unset."""
    found = ""
    for line in text.splitlines():
        key, _, value = line.strip().replace("\t", " ").partition(" " if words else "=")
        if key.strip() == name and value.strip():
            found = value.strip().strip("\"'")
    return found


def login_path(uid: int, environment: str, login_defs: str) -> str:
    """The PATH a login of that account starts with: /etc/environment's (pam_env sets it last), else
    /etc/login.defs' ENV_SUPATH (root) or ENV_PATH, else login's defaults."""
    defs = _setting(login_defs, "ENV_SUPATH" if uid == 0 else "ENV_PATH", words=True).removeprefix("PATH=")
    return (_setting(environment, "PATH", words=False) or defs
            or (DEFAULT_SUPATH if uid == 0 else DEFAULT_PATH))


def login_environment(passing: Mapping[str, str], account: pwd.struct_passwd | None, path: str) -> dict[str, str]:
    """What a local job's launch (and so the job) runs with: what the machine gives a login of the
    account (HOME, USER, LOGNAME, SHELL, PATH) and the pass's LANG, LC_*, TZ and TMPDIR; nothing else
    of the pass's (its ssh agent, cloud keys, anything of whoever runs manage: docs/design.md §8).
    jobtpu's own JOBTPU_* reach the job through its environment file, as on every machine."""
    env = {k: v for k, v in passing.items() if k in KEPT or k.startswith("LC_")}
    if account is None:  # an account the passwd database does not know: its own HOME and names, if set
        env.update({k: passing[k] for k in ("HOME", "USER", "LOGNAME", "SHELL") if k in passing})
    else:
        env.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name,
                   SHELL=account.pw_shell or "/bin/sh")
    env["PATH"] = path
    return env


def _system_file(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""  # no such file: the defaults


def job_environment(passed: tuple[str, ...] = ()) -> dict[str, str]:
    """login_environment for the account this process runs as, and the pass's own `passed` variables
    that it has (a Slurm cluster's SLURM_CONF: where its clients find the cluster)."""
    uid = os.geteuid()
    try:
        account: pwd.struct_passwd | None = pwd.getpwuid(uid)
    except KeyError:
        account = None
    path = login_path(uid, _system_file("/etc/environment"), _system_file("/etc/login.defs"))
    return {**login_environment(os.environ, account, path), **{k: os.environ[k] for k in passed if k in os.environ}}


class LocalTransport:
    def __init__(self, endpoint: Endpoint, shared: bool = False, root: Path | None = None,
                 members_write: bool = False, passed: tuple[str, ...] = ()) -> None:
        self.endpoint = endpoint
        self.passed = passed  # the pass's variables its scripts keep (job_environment)
        self.shared, self.root = shared, root
        self.container_mode = (SHARED_CONTAINER if members_write else RUNNER_CONTAINER) if shared else PRIVATE_FOLDER
        # In a home its group shares, what a pass makes in the run root is the group's to read but
        # only its maker's to write (a teammate cannot plant a link in a job's folder); in a private
        # home, the owner's alone whatever the umask and the home folder's own mode (docs/design.md §4).
        self.umask = "umask 0027\n" if shared else "umask 0077\n"
        self._prepared = False

    def _prepare(self) -> None:
        """The run root and its containers, real folders with the modes above (ours: set again)."""
        if self._prepared or self.root is None:
            return
        mode = self.container_mode
        make_dirs(self.root.parent)
        try:
            for rel in ("", *CONTAINERS):
                fd = safefs.open_dir(self.root.parent, Path(self.root.name, rel), create=True, mode=mode)
                try:
                    st = os.fstat(fd)
                    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
                        os.fchmod(fd, mode)
                finally:
                    os.close(fd)
        except (OSError, safefs.UnsafePath) as e:
            why = e.message if isinstance(e, safefs.UnsafePath) else (e.strerror or str(e))
            raise RemoteError(f"{self.endpoint.machine}: its run folder {self.root}: {why}",
                              hint="it must be a folder (no link) this account can write") from None
        self._prepared = True

    def run(self, script: str, timeout: float | None = None) -> Result:
        self._prepare()
        # A login's environment, not the pass's: whoever runs manage lends its jobs nothing of its own
        # (an ssh agent, cloud keys, JOBTPU_HOME), even when the job is another member's.
        try:
            done = subprocess.run(RUN_SCRIPT, shell=True, input=whole(self.umask + script).encode(), capture_output=True,
                                  env=job_environment(self.passed),
                                  timeout=timeout, cwd=os.path.expanduser("~"), start_new_session=True)
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{self.endpoint.machine}: a local script took over {timeout:.0f}s") from None
        return Result(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))

    def push(self, local: Path, remote: str) -> None:
        """Copy to a temporary file of its own next to the target, then rename: atomic, and copies made
        at once (the threads of one pass, or two passes) never write into each other's file."""
        self._prepare()
        target = Path(remote).expanduser()
        make_dirs(target.parent)
        with os.fdopen(self._open_source(local), "rb") as source:
            fd, tmp = create_temp(target)  # never through a symlink planted in the run folder
            try:
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(source, out)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        rename_synced(tmp, target)

    def _open_source(self, local: Path) -> int:
        """The home's file to copy, never through a link at its name nor blocking on a FIFO a member
        swapped in after the pass checked it (docs/design.md §2)."""
        try:
            return regular_fd(os.open(local, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), local)
        except safefs.UnsafePath as e:
            raise RemoteError(f"{self.endpoint.machine}: {e.message}") from None

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
                self._copy(source, into, local)
            finally:
                os.close(into)
            return
        self._copy(source, into, local)

    def _copy(self, source: Path, into: int, local: Path) -> None:
        """copy_into, a failure said in one line: which file, why, and that what came before it stays."""
        try:
            safefs.copy_into(source, into)
        except OSError as e:
            where = e.filename or source
            raise RemoteError(f"{self.endpoint.machine}: copying {where} into {local} stopped: "
                              f"{e.strerror or e}; the files copied before it stay",
                              hint="a file the job's account keeps to itself can only be fetched by that "
                                   "account (or make it group-readable)") from None

    def close(self) -> None:
        pass
