"""SshTransport against real sshd servers: scripts, errors, host key policies, rsync push/pull."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jobtpu.errors import RemoteError
from jobtpu.home.layout import Home
from jobtpu.schema.fleet import Machine
from jobtpu.transport.base import Endpoint
from jobtpu.transport.hostkeys import forget_command
from jobtpu.transport.ssh import SshTransport
from tests.sshfleet import FleetMachine, Host, SshFleet, _write_keypair


def machine_of(fleet: SshFleet, fm: FleetMachine, **over: object) -> Machine:
    spec: dict[str, object] = {"name": fm.name, "kind": "ssh", "hosts": tuple(h.address() for h in fm.hosts),
                               "user": fm.user, "identity_file": str(fleet.identity), "connect_timeout": 3.0}
    spec.update(over)
    return Machine(**spec)  # type: ignore[arg-type]


def transport(machine: Machine, home: Home, host: Host, index: int = 0) -> SshTransport:
    return SshTransport(Endpoint(machine.name, index, host.addr, host.port), machine, home)


def sessions(host: Host) -> int:
    """Exec sessions sshd started on this host so far (LogLevel VERBOSE logs one line per session)."""
    try:
        return host.sshd_log.read_text(errors="replace").count("Starting session: ")
    except FileNotFoundError:
        return 0


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.ensure()
    return h


def test_run_returns_results_and_costs_one_connection_and_one_session(ssh_fleet: SshFleet, home: Home) -> None:
    fm = ssh_fleet.add_machine("a")
    h = fm.hosts[0]
    t = transport(machine_of(ssh_fleet, fm), home, h)
    try:
        r = t.run("echo out; echo err >&2; read -r x || echo no-stdin; exit 3")
        assert (r.exit_code, r.stdout, r.stderr) == (3, "out\nno-stdin\n", "err\n") and not r.ok
        # Big interleaved output on both streams arrives whole (no deadlock on a full window).
        r = t.run("head -c 3000000 /dev/zero | tr '\\0' a; head -c 1000000 /dev/zero | tr '\\0' b >&2; echo $HOME")
        assert r.ok and r.stdout == "a" * 3_000_000 + f"{fm.home}\n" and r.stderr == "b" * 1_000_000
    finally:
        t.close()
    assert ssh_fleet.session_count(h) == 1 and sessions(h) == 2  # one connection, one session per run


def test_a_script_over_its_timeout_is_a_remote_error(ssh_fleet: SshFleet, home: Home) -> None:
    fm = ssh_fleet.add_machine("a")
    t = transport(machine_of(ssh_fleet, fm), home, fm.hosts[0])
    # A script that cannot end while the test runs: its error is the timeout's, whatever the machine's load.
    with pytest.raises(RemoteError, match=r"^a\[0\] .*: the script did not finish within 0.5s"):
        t.run("sleep 600", timeout=0.5)
    t.close()


def test_connection_errors_name_machine_worker_and_host(ssh_fleet: SshFleet, home: Home, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("a100", n_hosts=2)
    h0, h1 = fm.hosts
    m = machine_of(ssh_fleet, fm)
    ssh_fleet.stop_host(h1)
    with pytest.raises(RemoteError) as refused:
        transport(m, home, h1, 1).run("true")
    assert refused.value.message == f"a100[1] {h1.addr}:{h1.port}: connection refused"
    other = tmp_path / "other_key"
    _write_keypair(other, "stranger")
    with pytest.raises(RemoteError, match=rf"^a100\[0\] {h0.addr}:{h0.port}: authentication failed as {fm.user}"):
        transport(machine_of(ssh_fleet, fm, identity_file=str(other)), home, h0).run("true")
    with pytest.raises(RemoteError, match="cannot use identity_file"):
        transport(machine_of(ssh_fleet, fm, identity_file=str(tmp_path / "missing")), home, h0).run("true")


def test_a_host_that_accepts_tcp_but_never_answers_costs_connect_timeout(ssh_fleet: SshFleet, home: Home) -> None:
    fm = ssh_fleet.add_machine("a")
    h = fm.hosts[0]
    ssh_fleet.stop_host(h)
    with socket.socket() as silent:  # the kernel completes the TCP handshake; nobody ever speaks
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind((h.addr, h.port))
        silent.listen(16)
        m = machine_of(ssh_fleet, fm, connect_timeout=1.5)
        start = time.monotonic()
        with pytest.raises(RemoteError, match=r"did not finish within 1.5s \(connect_timeout\)"):
            transport(m, home, h).run("true")
        assert time.monotonic() - start > 1.4  # it waited; that it ended at all is the timeout's (nobody answers)


def test_accept_new_records_keys_of_many_hosts_at_once(ssh_fleet: SshFleet, home: Home) -> None:
    fm = ssh_fleet.add_machine("pod", n_hosts=6)
    m = machine_of(ssh_fleet, fm, host_key_policy="accept-new")
    errors: list[Exception] = []

    def one(i: int) -> None:
        try:
            for _ in range(2):  # the second time the key is known
                t = transport(m, home, fm.hosts[i], i)
                assert t.run("true").ok
                t.close()
        except Exception as e:  # collected and re-raised below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert sorted(home.known_hosts.read_text().splitlines()) == sorted(h.known_hosts_line() for h in fm.hosts)
    assert not list(home.root.glob(".known_hosts.*"))  # no temporary file left behind


def test_host_key_policies(ssh_fleet: SshFleet, home: Home) -> None:
    fm = ssh_fleet.add_machine("box")
    h = fm.hosts[0]
    strict = machine_of(ssh_fleet, fm, host_key_policy="strict")
    accept = machine_of(ssh_fleet, fm, host_key_policy="accept-new")
    off = machine_of(ssh_fleet, fm, host_key_policy="off")
    with pytest.raises(RemoteError, match=r"unknown host key and host_key_policy is strict.*ssh-keyscan"):
        transport(strict, home, h).run("true")
    assert not home.known_hosts.exists()
    assert transport(off, home, h).run("true").ok
    assert not home.known_hosts.exists()  # `off` records nothing
    assert transport(accept, home, h).run("true").ok
    assert home.known_hosts.read_text() == h.known_hosts_line() + "\n"
    assert transport(strict, home, h).run("true").ok

    ssh_fleet.new_host_key(h)
    forget = forget_command(home, h.addr, h.port)
    assert forget == f"ssh-keygen -R '[{h.addr}]:{h.port}' -f {shlex.quote(str(home.known_hosts))}"
    for policy in (strict, accept):
        with pytest.raises(RemoteError) as changed:
            transport(policy, home, h).run("true")
        msg = changed.value.message
        assert msg.startswith(f"box[0] {h.addr}:{h.port}: host key changed") and msg.endswith(forget)
        assert "\n" not in msg
    assert transport(off, home, h).run("true").ok
    # The printed command really forgets the key; then accept-new trusts the new one.
    subprocess.run(shlex.split(forget), check=True, capture_output=True)
    assert transport(accept, home, h).run("true").ok
    assert home.known_hosts.read_text() == h.known_hosts_line() + "\n"


def test_strict_trusts_keys_published_through_the_hook(ssh_fleet: SshFleet, home: Home) -> None:
    fm = ssh_fleet.add_machine("tpu")
    h = fm.hosts[0]
    t = transport(machine_of(ssh_fleet, fm, host_key_policy="strict"), home, h)
    t.trusted_keys.add(h.public_key_line())
    assert t.run("true").ok
    assert home.known_hosts.read_text() == h.known_hosts_line() + "\n"  # rsync's ssh can use it too


def test_push_is_atomic_creates_parents_and_survives_hostile_paths(ssh_fleet: SshFleet, home: Home,
                                                                   tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("a")
    h = fm.hosts[0]
    m = machine_of(ssh_fleet, fm, host_key_policy="strict")
    src = tmp_path / "my dir 'q' \"d\"" / "arch $x `y`.tar.gz"
    src.parent.mkdir()
    src.write_bytes(os.urandom(200_000))
    t = transport(m, home, h)
    with pytest.raises(RemoteError, match="unknown host key"):  # rsync obeys the policy too
        t.push(src, "never")
    home.known_hosts.write_text(h.known_hosts_line() + "\n")
    remote = "jobtpu/new dir/it's $HOME `id`/a*b?.tar.gz"
    t.push(src, remote)
    target = fm.home / remote
    assert target.read_bytes() == src.read_bytes()
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary file left
    assert target.stat().st_uid == fm.home.stat().st_uid
    t.push(src, "~/in home.bin")
    assert (fm.home / "in home.bin").read_bytes() == src.read_bytes()
    assert ssh_fleet.session_count(h) == 2  # rsync's own ssh connections; no paramiko needed


def test_pull_folder_contents_or_one_file_and_errors_carry_rsyncs_line(ssh_fleet: SshFleet, home: Home,
                                                                      tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("a")
    h = fm.hosts[0]
    t = transport(machine_of(ssh_fleet, fm), home, h)
    assert t.run("mkdir -p 'jobs/7/sub dir' && echo one > 'jobs/7/sub dir/r $1.txt' && echo two > jobs/7/top.txt").ok
    t.pull("jobs/7", tmp_path / "all")
    assert (tmp_path / "all" / "sub dir" / "r $1.txt").read_text() == "one\n"
    assert (tmp_path / "all" / "top.txt").read_text() == "two\n"
    t.pull("jobs/7/top.txt", tmp_path / "one")
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["top.txt"]
    assert t.run("echo glob > 'jobs/7/r[1] *.txt' && echo plain > 'jobs/7/r1 x.txt'").ok
    t.pull("jobs/7/r[1] *.txt", tmp_path / "glob")  # a name with wildcards is that name, not a pattern
    assert [(p.name, p.read_text()) for p in (tmp_path / "glob").iterdir()] == [("r[1] *.txt", "glob\n")]
    assert (tmp_path / "one" / "top.txt").stat().st_uid == os.getuid()
    with pytest.raises(RemoteError, match=r"rsync pull of jobs/7/nope failed \(23\): .*No such file or directory"):
        t.pull("jobs/7/nope", tmp_path / "none")
    ssh_fleet.stop_host(h)
    with pytest.raises(RemoteError, match=r"rsync pull of jobs/7 failed \(\d+\): ssh: .*Connection refused$"):
        t.pull("jobs/7", tmp_path / "all")
    t.close()


def test_status_tail_and_help_never_import_paramiko(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    code = f"""
import sys, contextlib, io
from jobtpu.cli import main
with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())), contextlib.redirect_stderr(io.StringIO()):
    main(["--home", {str(home)!r}, "status", "--all-users"])
    main(["--home", {str(home)!r}, "status", "--json"])
    main(["--home", {str(home)!r}, "tail", "1"])
    try:
        main(["--help"])
    except SystemExit:
        pass
print([m for m in sys.modules if m.split(".")[0] in ("paramiko", "fabric", "invoke", "google")])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.replace("'", '"')) == []


def test_no_agent_reaches_the_worker_while_one_runs_at_home(ssh_fleet: SshFleet, home: Home,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/design.md §7: a pass lends its identity to authenticate, never its agent to the worker."""
    agent = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True).stdout
    env = dict(part.split("=", 1) for part in agent.replace(";", "\n").split() if "=" in part)
    monkeypatch.setenv("SSH_AUTH_SOCK", env["SSH_AUTH_SOCK"])
    try:
        subprocess.run(["ssh-add", str(ssh_fleet.identity)], capture_output=True, check=True)
        fm = ssh_fleet.add_machine("agent")
        t = transport(machine_of(ssh_fleet, fm), home, fm.hosts[0])
        try:
            assert t.run("echo ${SSH_AUTH_SOCK:-unset}").stdout == "unset\n"
            done = subprocess.run(t.login_command(["echo ${SSH_AUTH_SOCK:-unset}"]), capture_output=True,
                                  text=True, timeout=30)
            assert done.stdout == "unset\n", done.stderr
        finally:
            t.close()
    finally:
        subprocess.run(["kill", env["SSH_AGENT_PID"]], capture_output=True)


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_a_fifo_or_a_link_at_known_hosts_is_the_machines_one_line(ssh_fleet: SshFleet, home: Home, tmp_path: Path,
                                                                  policy: str) -> None:
    """docs/design.md §2: known_hosts is read through safefs, so a FIFO a member put there costs the
    connection one line, never a hang, and a link there is never read."""
    fm = ssh_fleet.add_machine("box")
    h = fm.hosts[0]
    secret = tmp_path / "token"
    secret.write_text("ya29.secret-token\n")
    for plant, kind in ((os.mkfifo, "a FIFO"), (lambda p: p.symlink_to(secret), "a symbolic link")):
        home.known_hosts.unlink(missing_ok=True)
        plant(home.known_hosts)
        outcome: list[BaseException] = []

        def connect(outcome: list[BaseException] = outcome) -> None:
            try:
                transport(machine_of(ssh_fleet, fm, host_key_policy=policy), home, h).run("true")
            except BaseException as e:  # handed to the test's thread
                outcome.append(e)
        worker = threading.Thread(target=connect, daemon=True)
        worker.start()
        worker.join(60)  # a read blocked on the FIFO would never end: the test fails instead of hanging
        assert not worker.is_alive(), f"connecting hung on {kind} at known_hosts"
        assert len(outcome) == 1 and isinstance(outcome[0], RemoteError), outcome
        assert f"known_hosts: is {kind}, not a regular file" in str(outcome[0]) and "secret" not in str(outcome[0])
    assert secret.read_text() == "ya29.secret-token\n"
