"""A fleet of real OpenSSH servers on loopback addresses, for end-to-end tests.

Each simulated machine is a light Linux user (its home is the machine's disk); each of its hosts is
one ``/usr/sbin/sshd -D -e`` on its own 127.0.x.y address and free port. Needs root, openssh-server
and rsync; anything missing raises (never skips). See docs/design.md §6.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import pwd
import random
import shutil
import signal
import socket
import string
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SSHD = "/usr/sbin/sshd"
ACCEPTED = "Accepted publickey for "  # what sshd 9.2 logs (LogLevel INFO and up) per authenticated connection
_START_TIMEOUT = 10.0
_KILL_TIMEOUT = 5.0
_PORT_ATTEMPTS = 8

_addr_lock = threading.Lock()
_addr_counter = itertools.count(random.randrange(256 * 253))
_live: set[SshFleet] = set()


def _close_all() -> None:
    for fleet in list(_live):
        try:
            fleet.close()
        except Exception as e:  # at exit: report, keep going
            print(f"sshfleet: cleanup failed: {e}")


atexit.register(_close_all)


@dataclass
class Host:
    addr: str
    port: int
    user: str
    sshd_log: Path
    host_key: Path

    def address(self) -> str:
        return f"{self.addr}:{self.port}"

    def public_key_line(self) -> str:
        """``ssh-ed25519 AAAA...`` of the current host key (no comment)."""
        return " ".join(Path(f"{self.host_key}.pub").read_text().split()[:2])

    def known_hosts_line(self) -> str:
        """A known_hosts entry for this host, e.g. ``[127.0.3.4]:40123 ssh-ed25519 AAAA...``."""
        return f"[{self.addr}]:{self.port} {self.public_key_line()}"


@dataclass
class FleetMachine:
    name: str
    user: str
    home: Path
    hosts: list[Host]


def _next_addr() -> str:
    with _addr_lock:
        n = next(_addr_counter) % (256 * 253)
    return f"127.0.{n // 253}.{2 + n % 253}"


def _write_keypair(path: Path, comment: str) -> None:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    for p in (path, Path(f"{path}.pub")):
        p.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    Path(f"{path}.pub").write_text(f"{public.decode()} {comment}\n")


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every process."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            data = Path(f"/proc/{entry.name}/stat").read_bytes()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), fields[0].decode())
    return table


def _uids(pid: int) -> set[int]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return {int(u) for u in line.split()[1:3]}  # real, effective
    except (OSError, ValueError):
        pass
    return set()


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _kill_tree(root: int) -> None:
    """SIGKILL ``root`` and all its descendants, freezing the tree first so nothing escapes by forking."""
    deadline = time.monotonic() + _KILL_TIMEOUT
    frozen: set[int] = set()
    while time.monotonic() < deadline:
        table = _proc_table()
        tree = {root} if root in table else set()
        grew = True
        while grew:
            kids = {p for p, (pp, _) in table.items() if pp in tree and p not in tree}
            tree |= kids
            grew = bool(kids)
        alive = {p for p in tree if table[p][1] not in "ZX"}
        for pid in alive - frozen:
            _signal(pid, signal.SIGSTOP)
        frozen |= alive
        if all(table[p][1] in "Tt" for p in alive):
            break
        time.sleep(0.005)
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    _wait_gone(frozen, time.monotonic() + _KILL_TIMEOUT)


def _wait_gone(pids: set[int], deadline: float) -> None:
    while time.monotonic() < deadline:
        table = _proc_table()
        if not any(p in table and table[p][1] not in "ZX" for p in pids):
            return
        time.sleep(0.005)
    raise TimeoutError(f"processes {sorted(pids)} survived SIGKILL")


def _run(args: list[str], retries: int = 20) -> None:
    """Run a user-management command, retrying while another process holds the passwd lock."""
    for attempt in range(retries):
        r = subprocess.run(args, capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            return
        if "lock" not in r.stderr.lower() or attempt == retries - 1:
            raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        time.sleep(0.05 + random.random() * 0.1)


def _banner(addr: str, port: int) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=1.0) as s:
            s.settimeout(1.0)
            data = b""
            while b"\n" not in data and len(data) < 512:
                chunk = s.recv(256)
                if not chunk:
                    break
                data += chunk
            return data.startswith(b"SSH-")
    except OSError:
        return False


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


class SshFleet:
    """Real sshd servers, one per host, and one Linux user per machine. Call close() when done."""

    def __init__(self, base: Path) -> None:
        problems: list[str] = []
        if os.geteuid() != 0:
            problems.append("must run as root (it creates Linux users and runs sshd)")
        for tool in (SSHD, "ssh", "rsync", "useradd", "userdel", "usermod"):
            if shutil.which(tool) is None:
                problems.append(f"{tool} not found")
        if problems:
            raise RuntimeError(
                "SshFleet cannot start: " + "; ".join(problems) + ". Run the tests as root after "
                "`apt-get install -y openssh-server rsync`."
            )
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self._token = "".join(random.choices(string.ascii_lowercase + string.digits, k=6))
        self._lock = threading.RLock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # host.addr -> running sshd
        self._frozen: dict[str, set[int]] = {}  # host.addr -> the processes freeze_host stopped
        self._confs: dict[str, Path] = {}
        self._log_offsets: dict[str, int] = {}
        self.machines: list[FleetMachine] = []
        self._closed = False
        # sshd_config lines every host started from now on gets besides its own (a SetEnv a test needs).
        self.extra_conf = ""
        # sshd reads AuthorizedKeysFile as the user, so it must sit where any user can traverse (not tmp_path).
        self._auth_dir = Path(tempfile.mkdtemp(prefix="jobtpu-sshfleet-keys-"))
        self._auth_dir.chmod(0o755)
        _live.add(self)
        (self.base / "client").mkdir(exist_ok=True)
        self.identity = self.base / "client" / "id_ed25519"
        _write_keypair(self.identity, "jobtpu-test-client")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)

    # --- machines ---------------------------------------------------------------------------------

    def add_machine(self, name: str, n_hosts: int = 1, same_port: bool = False) -> FleetMachine:
        """same_port: every host listens on one port (each on its own address), as a TPU's workers do."""
        with self._lock:
            if self._closed:
                raise RuntimeError("SshFleet is closed")
            user = f"jt{self._token}{len(self.machines)}"
            machine = FleetMachine(name=name, user=user, home=Path("/home") / user, hosts=[])
            self.machines.append(machine)  # before useradd, so close() cleans up after a failure
            _run(["useradd", "-m", "-s", "/bin/bash", user])
            _run(["usermod", "-p", "*", user])  # unlocked, but no password: key login only
            machine.home = Path(pwd.getpwnam(user).pw_dir)
            keys = self._auth_dir / user
            keys.write_text(Path(f"{self.identity}.pub").read_text())
            keys.chmod(0o644)
            for i in range(n_hosts):
                hdir = self.base / "hosts" / f"{user}-{i}"
                hdir.mkdir(parents=True)
                host = Host(_next_addr(), 0, user, hdir / "sshd.log", hdir / "ssh_host_ed25519_key")
                _write_keypair(host.host_key, f"{name}-{i}")
                self._confs[host.addr] = hdir / "sshd_config"
                host.port = machine.hosts[0].port if same_port and machine.hosts else _free_port(host.addr)
                machine.hosts.append(host)
                self._spawn(host)
            for host in machine.hosts:
                self._await(host, first=True)
            return machine

    def kill_user_processes(self, machine: FleetMachine) -> None:
        """SIGKILL every process of the machine's user, like ``pkill -KILL -u user`` (a preemption)."""
        uid = pwd.getpwnam(machine.user).pw_uid
        deadline = time.monotonic() + _KILL_TIMEOUT
        while True:
            victims = [p for p, (_, st) in _proc_table().items() if st not in "ZX" and uid in _uids(p)]
            if not victims:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes {victims} of {machine.user} survived SIGKILL")
            for pid in victims:
                _signal(pid, signal.SIGKILL)
            time.sleep(0.005)

    def wipe_disk(self, machine: FleetMachine) -> None:
        """Kill the user's processes and replace the home with a fresh one from /etc/skel."""
        with self._lock:
            self.kill_user_processes(machine)
            pw = pwd.getpwnam(machine.user)
            for entry in machine.home.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            shutil.copytree("/etc/skel", machine.home, symlinks=True, dirs_exist_ok=True)
            for root, dirs, files in os.walk(machine.home):
                for n in [*dirs, *files]:
                    os.lchown(os.path.join(root, n), pw.pw_uid, pw.pw_gid)

    # --- hosts ------------------------------------------------------------------------------------

    def stop_host(self, host: Host) -> None:
        """Kill that sshd and every process it started (its connections and their commands)."""
        with self._lock:
            proc = self._procs.pop(host.addr, None)
            if proc is None:
                return
            _kill_tree(proc.pid)
            proc.wait(timeout=_KILL_TIMEOUT)

    def start_host(self, host: Host) -> None:
        """Start the host's sshd again on the same addr:port with its current host key."""
        with self._lock:
            if host.addr in self._procs:
                return
            self._spawn(host)
            self._await(host, first=False)

    def freeze_host(self, host: Host) -> None:
        """SIGSTOP that sshd and every process it started: a host that hangs or vanished without a
        word. Connections stay open and take bytes, nothing answers; a new TCP connect is accepted
        by the kernel and never greeted. thaw_host undoes it (stop_host works on a frozen host too)."""
        with self._lock:
            proc = self._procs.get(host.addr)
            if proc is None:
                return
            table = _proc_table()
            tree, grew = {proc.pid}, True
            while grew:
                kids = {p for p, (pp, _) in table.items() if pp in tree and p not in tree}
                tree |= kids
                grew = bool(kids)
            for pid in tree:
                _signal(pid, signal.SIGSTOP)
            self._frozen[host.addr] = tree

    def thaw_host(self, host: Host) -> None:
        with self._lock:
            for pid in self._frozen.pop(host.addr, set()):
                _signal(pid, signal.SIGCONT)

    def new_host_key(self, host: Host) -> None:
        """Rotate the host key; a running sshd is restarted (existing connections drop)."""
        with self._lock:
            running = host.addr in self._procs
            self.stop_host(host)
            _write_keypair(host.host_key, f"{host.user}-rotated")
            if running:
                self.start_host(host)

    def session_count(self, host: Host) -> int:
        """Connections authenticated on this host so far (``Accepted publickey`` lines in sshd_log).

        sshd's monitor writes it while its child tells the client "auth OK", so right after a bare
        paramiko connect() poll briefly; once a command has run on the connection it is always there."""
        try:
            text = host.sshd_log.read_text(errors="replace")
        except FileNotFoundError:
            return 0
        return text.count(ACCEPTED + host.user + " ")

    def close(self) -> None:
        """Stop every sshd, delete the users and their homes, remove configs and keys (logs stay)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            errors: list[str] = []
            for machine in self.machines:
                for host in machine.hosts:
                    try:
                        self.stop_host(host)
                    except Exception as e:  # keep cleaning up
                        errors.append(f"stop {host.address()}: {e}")
                try:
                    self.kill_user_processes(machine)
                    _run(["userdel", "-r", machine.user])
                except KeyError:
                    pass  # useradd never succeeded
                except Exception as e:
                    errors.append(f"remove user {machine.user}: {e}")
            shutil.rmtree(self._auth_dir, ignore_errors=True)
            shutil.rmtree(self.base / "client", ignore_errors=True)
            for conf in self._confs.values():
                for p in conf.parent.iterdir():
                    if p.name != "sshd.log":
                        p.unlink(missing_ok=True)
            _live.discard(self)
            if errors:
                raise RuntimeError("SshFleet.close left things behind: " + "; ".join(errors))

    # --- private ----------------------------------------------------------------------------------

    def _write_conf(self, host: Host) -> Path:
        conf = self._confs[host.addr]
        conf.write_text(
            f"Port {host.port}\nListenAddress {host.addr}\nHostKey {host.host_key}\n"
            f"PidFile {conf.parent / 'sshd.pid'}\nAuthorizedKeysFile {self._auth_dir}/%u\n"
            f"AllowUsers {host.user}\nStrictModes no\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nUsePAM no\nPermitRootLogin no\n"
            "MaxStartups 200\nMaxSessions 100\nSubsystem sftp internal-sftp\nLogLevel VERBOSE\n"
            "PrintMotd no\nPrintLastLog no\nUseDNS no\nX11Forwarding no\n" + self.extra_conf
        )
        return conf

    def _spawn(self, host: Host) -> None:
        conf = self._write_conf(host)
        with open(host.sshd_log, "ab") as log:
            self._log_offsets[host.addr] = log.tell()
            self._procs[host.addr] = subprocess.Popen(
                self._sshd_argv(host, conf),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )

    def _sshd_argv(self, host: Host, conf: Path) -> list[str]:
        """How a host's sshd is started (tests/podfleet.py starts it in a mount namespace of its own)."""
        return [SSHD, "-D", "-e", "-f", str(conf)]

    def _await(self, host: Host, first: bool) -> None:
        """Wait until the host's sshd sends its banner; on a first start, move to another port if taken."""
        deadline = time.monotonic() + _START_TIMEOUT
        attempts = 1
        while True:
            proc = self._procs[host.addr]
            rc = proc.poll()
            if rc is None and _banner(host.addr, host.port):
                return
            if rc is not None:
                del self._procs[host.addr]
                with open(host.sshd_log, "rb") as f:
                    f.seek(self._log_offsets[host.addr])
                    out = f.read().decode(errors="replace").strip()
                taken = rc == 255 and "Address already in use" in out
                if not (first and taken and attempts < _PORT_ATTEMPTS):
                    raise RuntimeError(f"sshd for {host.address()} exited with {rc}: {out}")
                attempts += 1
                host.port = _free_port(host.addr)
                self._spawn(host)
            elif time.monotonic() > deadline:
                self.stop_host(host)
                raise TimeoutError(f"sshd for {host.address()} sent no SSH banner within {_START_TIMEOUT}s")
            else:
                time.sleep(0.01)
