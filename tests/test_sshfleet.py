"""Self-tests of tests/sshfleet.py with the real ssh client, paramiko and rsync."""

import os
import socket
import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from tests import sshfleet
from tests.podfleet import PodFleet
from tests.sshfleet import Host, SshFleet


def _known_hosts(fleet: SshFleet, *hosts: Host) -> Path:
    path = fleet.base / f"known_hosts-{time.monotonic_ns()}"
    path.write_text("".join(h.known_hosts_line() + "\n" for h in hosts))
    return path


def _ssh_opts(fleet: SshFleet, known_hosts: Path) -> list[str]:
    return [
        "-F", "/dev/null", "-i", str(fleet.identity), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
    ]  # fmt: skip


def _ssh(
    fleet: SshFleet, host: Host, cmd: str, known_hosts: Path | None = None
) -> subprocess.CompletedProcess[str]:
    kh = known_hosts or _known_hosts(fleet, host)
    args = ["ssh", *_ssh_opts(fleet, kh), "-p", str(host.port), f"{host.user}@{host.addr}", cmd]
    return subprocess.run(args, capture_output=True, text=True, timeout=15)


def _paramiko(fleet: SshFleet, host: Host) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(_known_hosts(fleet, host)))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        host.addr, host.port, host.user, key_filename=str(fleet.identity),
        look_for_keys=False, allow_agent=False, timeout=5, banner_timeout=5, auth_timeout=5,
    )  # fmt: skip
    return client


def _server_key(host: Host) -> str:
    transport = paramiko.Transport((host.addr, host.port))
    try:
        transport.start_client(timeout=5)
        key = transport.get_remote_server_key()
        return f"{key.get_name()} {key.get_base64()}"
    finally:
        transport.close()


def _wait_for(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _user_pids(user: str) -> list[str]:
    """Live processes of user (zombies excluded: PID 1 here reaps orphans only every few seconds)."""
    out = subprocess.run(["ps", "-u", user, "-o", "stat=,pid="], capture_output=True, text=True).stdout
    return [line.split()[1] for line in out.splitlines() if not line.startswith("Z")]


def test_command_runs_as_machine_user_in_its_home(ssh_fleet: SshFleet) -> None:
    a, b = ssh_fleet.add_machine("a"), ssh_fleet.add_machine("b")
    assert a.user != b.user and a.hosts[0].addr != b.hosts[0].addr
    for m in (a, b):
        r = _ssh(ssh_fleet, m.hosts[0], "id -un; echo $HOME; pwd")
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [m.user, str(m.home), str(m.home)]
    assert oct(ssh_fleet.identity.stat().st_mode & 0o777) == "0o600"


def test_hosts_of_one_machine_share_the_home(ssh_fleet: SshFleet) -> None:
    m = ssh_fleet.add_machine("pod", n_hosts=2)
    h0, h1 = m.hosts
    assert h0.addr != h1.addr and h0.public_key_line() != h1.public_key_line()
    assert _ssh(ssh_fleet, h0, "echo from-host-0 > shared.txt").returncode == 0
    assert _ssh(ssh_fleet, h1, "cat shared.txt").stdout == "from-host-0\n"


def test_stop_host_kills_its_sessions_and_refuses_then_start_host_restores(ssh_fleet: SshFleet) -> None:
    m = ssh_fleet.add_machine("a", n_hosts=2)
    h0, h1 = m.hosts
    client = _paramiko(ssh_fleet, h0)
    client.exec_command("sleep 60")
    other = _paramiko(ssh_fleet, h1)
    other.exec_command("exec -a jtsurvivor sleep 60")
    _wait_for(lambda: len(_user_pids(m.user)) >= 4)
    transport = client.get_transport()
    assert transport is not None
    ssh_fleet.stop_host(h0)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((h0.addr, h0.port), timeout=2).close()
    r = _ssh(ssh_fleet, h0, "true")
    assert r.returncode == 255  # refused (above), not a wait: no clock needed to tell
    _wait_for(lambda: not transport.is_active())
    ps = subprocess.run(["ps", "-u", m.user, "-o", "args="], capture_output=True, text=True).stdout
    assert "sleep 60" not in ps and "jtsurvivor" in ps  # only h0's processes died
    client.close()
    other.close()
    port = h0.port
    ssh_fleet.start_host(h0)
    assert h0.port == port
    assert _ssh(ssh_fleet, h0, "echo back").stdout == "back\n"


def test_new_host_key_changes_the_key_clients_see(ssh_fleet: SshFleet) -> None:
    h = ssh_fleet.add_machine("a").hosts[0]
    old_line = h.public_key_line()
    old_known_hosts = _known_hosts(ssh_fleet, h)
    assert _server_key(h) == old_line
    ssh_fleet.new_host_key(h)
    assert h.public_key_line() != old_line and _server_key(h) == h.public_key_line()
    r = _ssh(ssh_fleet, h, "true", known_hosts=old_known_hosts)
    assert r.returncode == 255 and "IDENTIFICATION HAS CHANGED" in r.stderr
    assert _ssh(ssh_fleet, h, "true").returncode == 0
    ssh_fleet.stop_host(h)  # rotating a stopped host keeps it stopped until start_host
    ssh_fleet.new_host_key(h)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((h.addr, h.port), timeout=2).close()
    ssh_fleet.start_host(h)
    assert _server_key(h) == h.public_key_line()


def test_wipe_disk_empties_home_and_kills_processes(ssh_fleet: SshFleet) -> None:
    m = ssh_fleet.add_machine("a")
    h = m.hosts[0]
    r = _ssh(ssh_fleet, h, "mkdir -p .cache/x d && touch .hidden d/f && echo hi > .bashrc && "
                           "(setsid sleep 60 </dev/null >/dev/null 2>&1 &)")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert _user_pids(m.user)  # the daemonized sleep outlives its session
    ssh_fleet.wipe_disk(m)
    assert not _user_pids(m.user)
    assert sorted(p.name for p in m.home.iterdir()) == sorted(os.listdir("/etc/skel"))
    assert all(p.stat().st_uid == m.home.stat().st_uid for p in m.home.iterdir())
    assert (m.home / ".bashrc").read_bytes() == Path("/etc/skel/.bashrc").read_bytes()
    assert _ssh(ssh_fleet, h, "ls -A").stdout.split() == sorted(os.listdir("/etc/skel"))


def test_wipe_disk_of_a_pod_empties_every_host_disk_its_running_sshd_serves(tmp_path: Path) -> None:
    pods = PodFleet(tmp_path / "pods")
    try:
        m = pods.add_pod("pod", 2)
        for h in m.hosts:
            assert _ssh(pods, h, f"mkdir d && echo {h.addr} > d/f").returncode == 0
        pods.wipe_disk(m)
        for h in m.hosts:
            assert sorted(p.name for p in pods.disk(h).iterdir()) == sorted(os.listdir("/etc/skel"))
            assert _ssh(pods, h, "ls -A").stdout.split() == sorted(os.listdir("/etc/skel"))
    finally:
        pods.close()


def test_kill_user_processes_kills_every_process_of_the_machine(ssh_fleet: SshFleet) -> None:
    m = ssh_fleet.add_machine("a")
    client = _paramiko(ssh_fleet, m.hosts[0])
    client.exec_command("sleep 60")
    _wait_for(lambda: len(_user_pids(m.user)) >= 2)
    ssh_fleet.kill_user_processes(m)
    assert not _user_pids(m.user)
    transport = client.get_transport()
    assert transport is not None
    _wait_for(lambda: not transport.is_active())  # the session process died: the connection drops
    client.close()
    assert _ssh(ssh_fleet, m.hosts[0], "true").returncode == 0  # sshd itself is still up


def test_session_count_counts_each_authenticated_connection_once(ssh_fleet: SshFleet) -> None:
    h0, h1 = ssh_fleet.add_machine("a", n_hosts=2).hosts
    assert ssh_fleet.session_count(h0) == 0
    for i in range(1, 4):
        assert _ssh(ssh_fleet, h0, "true").returncode == 0
        assert ssh_fleet.session_count(h0) == i
    scan = subprocess.run(["ssh-keyscan", "-p", str(h0.port), h0.addr], capture_output=True, timeout=10)
    assert scan.returncode == 0 and ssh_fleet.session_count(h0) == 3  # no auth, no count
    client = _paramiko(ssh_fleet, h0)
    for _ in range(2):  # two sessions on one connection
        _, out, _ = client.exec_command("echo x")
        assert out.read() == b"x\n"
    client.close()
    assert ssh_fleet.session_count(h0) == 4 and ssh_fleet.session_count(h1) == 0
    ssh_fleet.stop_host(h0)
    ssh_fleet.start_host(h0)
    assert ssh_fleet.session_count(h0) == 4  # the log survives restarts


def test_rsync_over_ssh_copies_a_file_in(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    m = ssh_fleet.add_machine("a")
    h = m.hosts[0]
    src = tmp_path / "payload.txt"
    src.write_text("payload\n")
    shell = " ".join(["ssh", *_ssh_opts(ssh_fleet, _known_hosts(ssh_fleet, h)), "-p", str(h.port)])
    r = subprocess.run(
        ["rsync", "-a", "-e", shell, str(src), f"{h.user}@{h.addr}:in/"],
        capture_output=True,
        text=True,
        timeout=15,
    )
    assert r.returncode == 0, r.stderr
    assert (m.home / "in" / "payload.txt").read_text() == "payload\n"
    assert _ssh(ssh_fleet, h, "stat -c %U in/payload.txt").stdout.strip() == m.user


def test_concurrent_fleets_get_distinct_addresses_and_users(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    other = SshFleet(tmp_path / "other")
    try:
        a = ssh_fleet.add_machine("a", n_hosts=2)
        b = other.add_machine("a", n_hosts=2)
        assert a.user != b.user
        assert len({h.addr for h in a.hosts + b.hosts}) == 4
        assert _ssh(other, b.hosts[1], "id -un").stdout.strip() == b.user
    finally:
        other.close()
    assert subprocess.run(["getent", "passwd", b.user], capture_output=True).returncode == 2
    assert not b.home.exists()


def test_fleet_fails_loudly_without_root_or_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as mp:
        mp.setattr(sshfleet.os, "geteuid", lambda: 1000)
        with pytest.raises(RuntimeError, match="must run as root"):
            SshFleet(tmp_path / "f")
    real_which = sshfleet.shutil.which
    monkeypatch.setattr(sshfleet.shutil, "which", lambda t: None if t == "rsync" else real_which(t))
    with pytest.raises(RuntimeError, match="rsync not found.*apt-get install -y openssh-server rsync"):
        SshFleet(tmp_path / "g")
