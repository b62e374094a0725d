"""Machines whose hosts each have a disk of their own, as a TPU pod slice's workers or a rack of boxes do.

An SshFleet simulates a machine as one Linux user whose home, the machine's disk, all its hosts share.
A pod's hosts do not: each host's sshd runs in a mount namespace of its own (`unshare --mount`) with a
per-host folder bind-mounted over the user's home, so what a script writes on one host (a snapshot, a
job's folder) is on that host's disk only. The network is shared: the hosts reach each other on their
127.0.x.y addresses, as the workers of a machine do on its internal network."""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

from tests.sshfleet import FleetMachine, Host, SshFleet


class PodFleet(SshFleet):
    """An SshFleet whose add_pod machines have one disk per host (`disk(host)`, readable by the test)."""

    def __init__(self, base: Path) -> None:
        missing = [tool for tool in ("unshare", "mount") if shutil.which(tool) is None]
        if missing:
            raise RuntimeError(f"PodFleet needs {', '.join(missing)} (util-linux) and root")
        super().__init__(base)
        self._separate = False  # set while add_pod adds its hosts
        self._disks: dict[str, Path] = {}  # host addr -> its disk

    def add_pod(self, name: str, n_hosts: int, same_port: bool = False) -> FleetMachine:
        with self._lock:
            self._separate = True
            try:
                return self.add_machine(name, n_hosts, same_port=same_port)
            finally:
                self._separate = False

    def disk(self, host: Host) -> Path:
        """The folder that is the host's home folder (its whole disk, as jobtpu sees it)."""
        return self._disks[host.addr]

    def _sshd_argv(self, host: Host, conf: Path) -> list[str]:
        if not self._separate and host.addr not in self._disks:
            return super()._sshd_argv(host, conf)
        disk = self._disks.get(host.addr) or self._new_disk(host, conf.parent.name)
        home = pwd.getpwnam(host.user).pw_dir
        # `exec`: the sshd is the process the fleet stops (its pid), as for a host without a disk of its own.
        script = 'mount --bind "$1" "$2" && exec "$3" -D -e -f "$4"'
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                str(disk), home, super()._sshd_argv(host, conf)[0], str(conf)]

    def wipe_disk(self, machine: FleetMachine) -> None:
        """As SshFleet's, and each host's own disk too (a recreated TPU's workers each get a new one)."""
        super().wipe_disk(machine)
        with self._lock:
            for host in machine.hosts:
                if host.addr in self._disks:  # emptied, not replaced: a running sshd has it mounted
                    self._fresh_disk(self._disks[host.addr], host.user)

    def _new_disk(self, host: Host, name: str) -> Path:
        disk = self.base / "disks" / name
        self._fresh_disk(disk, host.user)
        self._disks[host.addr] = disk
        return disk

    @staticmethod
    def _fresh_disk(disk: Path, user: str) -> None:
        """The disk as a new VM's: /etc/skel's files only, the user's."""
        disk.mkdir(parents=True, exist_ok=True)
        for old in disk.iterdir():
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
        shutil.copytree("/etc/skel", disk, symlinks=True, dirs_exist_ok=True)
        pw = pwd.getpwnam(user)
        for root, dirs, files in os.walk(disk):
            for entry in [root, *(os.path.join(root, n) for n in [*dirs, *files])]:
                os.lchown(entry, pw.pw_uid, pw.pw_gid)
        disk.chmod(0o750)


class RsyncCounter:
    """An rsync first on the PATH (`path`) that notes each call and runs the real one: what a pod's
    launch pushed from the home is counted, not guessed (the home's bytes per launch, issue of scale)."""

    def __init__(self, folder: Path) -> None:
        hook = folder / "bin"
        hook.mkdir(parents=True)
        self.calls = folder / "rsync.calls"
        (hook / "rsync").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{self.calls}"\nexec {shutil.which("rsync")} "$@"\n')
        (hook / "rsync").chmod(0o755)
        self.path = f"{hook}:{os.environ['PATH']}"

    def pushes(self) -> list[str]:
        """The archives pushed to workers so far (rsync's push is the call with --ignore-times)."""
        calls = self.calls.read_text().splitlines() if self.calls.exists() else []
        return [Path(c.split()[-2]).name for c in calls if "--ignore-times" in c]
