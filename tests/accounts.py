"""Real Unix accounts in one group, for homes several people share (docs/reference/home-files.md §1).

`Team` creates a group and its accounts with useradd, runs the jobtpu CLI as any of them through
runuser (so every file it writes is that account's, with that account's umask), and removes them
all again. The accounts must be able to reach this Python and this checkout: .ci/run makes the
folders above them traversable."""

from __future__ import annotations

import grp
import os
import pwd
import random
import shutil
import string
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class Team:
    def __init__(self, n_accounts: int = 2) -> None:
        if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
            raise RuntimeError("Team needs root with useradd and runuser (run the tests as root)")
        token = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
        self.group = f"jtg{token}"
        self.token = token
        self.accounts: list[str] = []
        self.outsiders: list[str] = []
        subprocess.run(["groupadd", self.group], check=True)
        try:
            for i in range(n_accounts):
                name = f"jtu{token}{i}"
                subprocess.run(["useradd", "-m", "-s", "/bin/bash", "-G", self.group, name], check=True)
                self.accounts.append(name)
            # Outside pytest's tmp_path, which only root may enter.
            self.base = Path(tempfile.mkdtemp(prefix="jobtpu-team-"))
            self.base.chmod(0o755)
            self._check_reachable()
        except BaseException:
            self.close()
            raise

    def add_outsider(self) -> str:
        """One more account, in none of the team's groups (removed with the team): an attacker."""
        name = f"jtu{self.token}x{len(self.outsiders)}"
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True)
        self.outsiders.append(name)
        return name

    @property
    def gid(self) -> int:
        return grp.getgrnam(self.group).gr_gid

    def uid(self, account: str) -> int:
        return pwd.getpwnam(account).pw_uid

    def shared_folder(self, name: str) -> Path:
        """A folder the group shares, as a team would make one: setgid, group-writable, not world."""
        path = self.base / name
        path.mkdir()
        os.chown(path, 0, self.gid)
        path.chmod(0o2770)
        return path

    def private_folder(self, account: str, name: str) -> Path:
        path = self.base / f"{account}-{name}"
        path.mkdir()
        os.chown(path, self.uid(account), self.uid(account))
        path.chmod(0o700)
        return path

    def one_writer_home(self, machines: dict[str, object] | None = None) -> Path:
        """A home the first account made with `init --shared` (its runner, docs/reference/home-files.md
        §1.3), with `machines` as its machines.json (the runner's file, 0640)."""
        import json

        runner = self.accounts[0]
        home = self.shared_folder("homes") / "home"
        self.run(runner, "init", "--shared", self.group, str(home), umask="0077")
        if machines is not None:
            (home / "machines.json").write_text(json.dumps(machines))
            os.chown(home / "machines.json", self.uid(runner), self.gid)
            (home / "machines.json").chmod(0o640)
        return home

    def team_home(self, slots: int = 4, consent: bool = False) -> Path:
        """A one-writer home (one_writer_home) with a local machine of `slots` slots and every account
        on its user list; with `consent`, the runner's runner.json lets its passes run members' local
        jobs (docs/reference/home-files.md §1.3)."""
        import json

        runner = self.accounts[0]
        home = self.one_writer_home({"machines": {"local": {"kind": "local", "resources": {"slot": slots}}}})
        for account in self.accounts:
            self.run(runner, "--home", str(home), "user", "add", account, umask="0077")
        if consent:
            (home / "runner.json").write_text(json.dumps({"runner": runner}))
            os.chown(home / "runner.json", self.uid(runner), self.gid)
            (home / "runner.json").chmod(0o640)
        return home

    def run(self, account: str, *args: str, check: bool = True, timeout: float = 60,
            cwd: Path | None = None, umask: str = "0022",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`jobtpu ARGS` as `account`, with its own login environment and umask (and `env`: the
        timing overrides a test shortens)."""
        home = pwd.getpwnam(account).pw_dir
        script = f"umask {umask}; exec \"$0\" -m jobtpu.cli \"$@\""
        cmd = ["runuser", "-u", account, "--", "env", "-i", f"HOME={home}", f"USER={account}",
               f"LOGNAME={account}", "PATH=/usr/local/bin:/usr/bin:/bin", f"PYTHONPATH={REPO}",
               *(f"{k}={v}" for k, v in (env or {}).items()),
               "bash", "-c", script, sys.executable, *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or self.base)
        if check and done.returncode != 0:
            raise AssertionError(f"jobtpu {' '.join(args)} as {account} exited {done.returncode}:\n"
                                 f"{done.stdout}\n{done.stderr}")
        return done

    def _check_reachable(self) -> None:
        done = subprocess.run(["runuser", "-u", self.accounts[0], "--", "env", f"PYTHONPATH={REPO}",
                               sys.executable, "-c", "import jobtpu.cli"],
                              capture_output=True, text=True, cwd=self.base)
        if done.returncode != 0:
            raise RuntimeError(f"test accounts cannot run {sys.executable} with {REPO}: {done.stderr.strip()[-300:]} "
                               "(make the folders above both traversable: chmod o+x; .ci/run does)")

    def close(self) -> None:
        for account in [*self.accounts, *getattr(self, "outsiders", [])]:
            subprocess.run(["pkill", "-KILL", "-u", account], capture_output=True)
            subprocess.run(["userdel", "-r", "-f", account], capture_output=True)
        subprocess.run(["groupdel", self.group], capture_output=True)
        if getattr(self, "base", None) is not None:
            shutil.rmtree(self.base, ignore_errors=True)
