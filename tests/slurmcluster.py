"""A real one-node Slurm cluster on loopback, for end-to-end tests: its own munged (a key made here),
slurmctld -D and slurmd -D, every file in a folder of its own, the config from tests/slurm/. Needs
root and Debian's slurm-wlm and munge (.ci/run installs them); anything missing raises (never skips).
Clients find it through SLURM_CONF (`env()`; an sshd of tests/sshfleet.py passes it on with SetEnv).
With `accounting=True` (the slurm_accounting fixture), Slurm's accounting too: a mariadbd of its own
(a data folder made here; Debian's mariadb-server), slurmdbd (Debian's slurmdbd) storing into it, and
the cluster's config with tests/slurm/accounting.conf.in added (a short MinJobAge: squeue forgets an
ended job within a minute or two, as a cluster does after its MinJobAge, and sacct still knows it)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "slurm"
_READY_TIMEOUT = 60.0
_TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")
_ACCOUNTING_TOOLS = ("mariadbd", "mariadb-install-db", "slurmdbd", "sacctmgr", "sacct")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with_variant(base: str, variant: str) -> str:
    """slurm.conf's text with a variant's KEY=VALUE lines in place of the base's lines of those keys."""
    keys = {line.split("=", 1)[0] for line in variant.splitlines() if "=" in line and not line.startswith("#")}
    kept = [line for line in base.splitlines() if line.split("=", 1)[0] not in keys]
    return "\n".join(kept) + "\n" + variant


class SlurmCluster:
    """munged, slurmctld and slurmd for one node; `close()` cancels every job and stops them."""

    def __init__(self, accounting: bool = False) -> None:
        tools = _TOOLS + (_ACCOUNTING_TOOLS if accounting else ())
        missing = [tool for tool in tools if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]
        if missing or os.geteuid() != 0:
            raise RuntimeError(f"SlurmCluster cannot start: {', '.join(missing) or 'not root'}; run the tests as "
                               "root after `apt-get install -y slurm-wlm munge slurmdbd mariadb-server`")
        # Where every account can reach the munge socket and the config (0755), outside pytest's tmp folders.
        self.dir = Path(tempfile.mkdtemp(prefix="jobtpu-slurm-"))
        self.dir.chmod(0o755)
        for sub in ("munge", "state", "spool", "dev", "keys", "db"):
            (self.dir / sub).mkdir(mode=0o755)
        (self.dir / "keys").chmod(0o700)
        for i in range(2):
            (self.dir / "dev" / f"nvidia{i}").touch()
        self.conf = self.dir / "slurm.conf"
        values = {"@DIR@": str(self.dir), "@CTLD_PORT@": str(_free_port()), "@SLURMD_PORT@": str(_free_port()),
                  "@DBD_PORT@": str(_free_port()), "@DB_PORT@": str(_free_port())}
        names = ("slurm.conf", "gres.conf", "slurmdbd.conf") if accounting else ("slurm.conf", "gres.conf")
        for name in names:
            text = (HERE / f"{name}.in").read_text()
            if name == "slurm.conf" and accounting:
                text = _with_variant(text, (HERE / "accounting.conf.in").read_text())
            for name_in_file, value in values.items():
                text = text.replace(name_in_file, value)
            (self.dir / name).write_text(text)
        if accounting:
            (self.dir / "slurmdbd.conf").chmod(0o600)  # slurmdbd refuses a config others can read
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        key = self.dir / "keys" / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}", "--bits=1024"], check=True, capture_output=True)
        key.chmod(0o400)
        self._start("munged", ["munged", "--foreground", "--force", f"--socket={self.dir}/munge/socket",
                               f"--key-file={key}", f"--pid-file={self.dir}/munge/pid",
                               f"--log-file={self.dir}/munge/log", f"--seed-file={self.dir}/munge/seed"])
        try:
            self._wait(lambda: (self.dir / "munge" / "socket").exists(), "munged's socket")
            if accounting:
                self._start_accounting(values["@DB_PORT@"])
            self.start_controller()
            self._start("slurmd", ["slurmd", "-D", "-N", "localhost"])
            self._wait(lambda: self.run("sinfo", "--noheader", "--format=%t").stdout.strip() == "idle", "an idle node")
        except BaseException:
            self.close()  # no daemon outlives a cluster that did not start
            raise

    def _start_accounting(self, db_port: str) -> None:
        """mariadbd in a data folder of its own (no grant tables: only loopback reaches it), then slurmdbd,
        then the cluster's name in the accounts (slurmctld stores its jobs' records under it)."""
        db = self.dir / "db"
        subprocess.run(["mariadb-install-db", "--user=root", f"--datadir={db}/data", "--skip-test-db",
                        "--auth-root-authentication-method=normal"], check=True, capture_output=True)
        self._start("mariadbd", ["mariadbd", "--no-defaults", "--user=root", f"--datadir={db}/data",
                                 f"--socket={db}/socket", f"--port={db_port}", "--bind-address=127.0.0.1",
                                 f"--pid-file={db}/pid", f"--log-error={db}/error.log", "--skip-grant-tables",
                                 "--innodb-buffer-pool-size=8M", "--skip-log-bin"])
        self._wait(lambda: (db / "socket").exists(), "mariadbd's socket")
        self.start_accounting()
        said = self.run("sacctmgr", "--immediate", "add", "cluster", "jobtpu")
        if said.returncode != 0 and "already exists" not in said.stdout + said.stderr:
            raise RuntimeError(f"sacctmgr add cluster: {said.stdout}{said.stderr}")

    def start_accounting(self) -> None:
        """(Re)start slurmdbd (its config beside SLURM_CONF) and wait until it answers."""
        self._start("slurmdbd", ["slurmdbd", "-D"])
        self._wait(lambda: self.run("sacctmgr", "--noheader", "list", "cluster").returncode == 0, "slurmdbd to answer")

    def stop_accounting(self) -> None:
        """Stop slurmdbd: sacct cannot answer until start_accounting."""
        self._stop("slurmdbd")

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A Slurm client command as root."""
        return subprocess.run(list(args), env=self.env(), capture_output=True, text=True, timeout=60)

    def start_controller(self) -> None:
        self._start("slurmctld", ["slurmctld", "-D", "-i"])
        self._wait(lambda: self.run("scontrol", "ping").returncode == 0, "slurmctld to answer")

    def stop_controller(self) -> None:
        """Stop slurmctld (its state is saved in the cluster's folder: start_controller takes it up)."""
        self._stop("slurmctld")

    def kill_controller(self) -> None:
        """SIGKILL slurmctld, as a crash: what it had not saved yet is lost (start_controller takes up the rest)."""
        proc = self._procs.pop("slurmctld", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job` as a dict of its KEY=VALUE words."""
        out = self.run("scontrol", "show", "job", str(job_id), "--oneliner").stdout
        return dict(w.split("=", 1) for w in out.split() if "=" in w)

    def wait_state(self, job_id: int, *states: str, timeout: float = 60.0) -> str:
        found = ""

        def there() -> bool:
            nonlocal found
            found = self.job(job_id).get("JobState", "")
            return found in states

        self._wait(there, f"job {job_id} in {states} (is {found or '?'})", timeout)
        return found

    def wait_forgotten(self, job_id: int | str, timeout: float = 150.0) -> None:
        """Until squeue no longer lists the job: it ended MinJobAge ago and slurmctld purged it (every
        minute or so), as after jobtpu's passes were off longer than a cluster's MinJobAge."""
        def gone() -> bool:
            said = self.run("squeue", "--noheader", "--states=all", f"--jobs={job_id}", "--format=%i")
            return (said.returncode == 0 and not said.stdout.strip()) or "Invalid job id" in said.stderr

        self._wait(gone, f"squeue to forget job {job_id}", timeout)

    def cancel_all(self, user: str | None = None) -> None:
        """Cancel every job (of `user`) and wait until Slurm lists none: an account whose jobs still
        run cannot be removed."""
        who = [f"--user={user}"] if user else []

        def ids() -> list[str]:
            return self.run("squeue", "--noheader", "--format=%i", *who).stdout.split()

        if ids():
            self.run("scancel", *ids())
            self._wait(lambda: not ids(), "every job to end", 60.0, fail=False)

    def close(self) -> None:
        if "slurmctld" in self._procs:
            self.cancel_all()
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
            self._stop(name)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.out", "ab")  # noqa: SIM115  # kept open by the daemon
        self._procs[name] = subprocess.Popen(argv, env=self.env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             start_new_session=True)
        log.close()

    def _stop(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def _wait(self, ready: object, what: str, timeout: float = _READY_TIMEOUT, fail: bool = True) -> None:
        assert callable(ready)
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}): {self._tail(name)}")
            if time.monotonic() > deadline:
                if not fail:
                    return
                raise RuntimeError(f"Slurm: no {what} after {timeout:g} s; slurmctld.log: {self._tail('slurmctld')}")
            time.sleep(0.1)

    def _tail(self, name: str) -> str:
        for path in (self.dir / f"{name}.log", self.dir / f"{name}.out"):
            if path.exists():
                return path.read_text(errors="replace")[-1500:]
        return ""


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    cluster = SlurmCluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def slurm_accounting() -> Iterator[SlurmCluster]:
    """A cluster whose jobs Slurm's accounting (sacct) keeps after squeue forgets them."""
    cluster = SlurmCluster(accounting=True)
    try:
        yield cluster
    finally:
        cluster.close()
