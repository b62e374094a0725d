"""`jobtpu exec` and `jobtpu ssh` through the CLI, against real sshd hosts: every worker's output with
its prefix, the worst exit code, one worker or all, a worker that cannot be reached, the home's
known_hosts and host key policy, machines named by alias or (TPU) node name, and a running job named
by its id (its workers, in its folder; a Slurm job's: tests/test_slurm_here.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import JOBTPU, jobtpu, manage, passes_until, submit
from tests.sshfleet import FleetMachine, SshFleet
from tests.tpufleet import PROJECT, ZONE, TpuFleet, write_machines

# Each worker says which one it is by the address sshd answered on; worker 1 fails with 3.
REPORT = 'echo "on $(echo "$SSH_CONNECTION" | cut -d" " -f3)"; echo second line'


def _write_fleet(home: Path, fleet: SshFleet, machine: FleetMachine, **extra: Any) -> None:
    home.mkdir(parents=True, exist_ok=True)
    spec = {"kind": "ssh", "hosts": [h.address() for h in machine.hosts], "user": machine.user,
            "identity_file": str(fleet.identity), "connect_timeout": 3, "aliases": ["trio"], **extra}
    (home / "machines.json").write_text(json.dumps({"machines": {"box3": spec}}, indent=1))


def _failing_on(addr: str) -> str:
    return f'{REPORT}; case "$SSH_CONNECTION" in *" {addr} "*) echo failing; exit 3;; esac'


def _prefixed(out: str) -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    for line in out.splitlines():
        match = re.fullmatch(r"\[(\d+)\] (.*)", line)
        assert match, f"a line without its worker's prefix: {line!r}"
        lines.setdefault(int(match[1]), []).append(match[2])
    return lines


def test_exec_prints_every_workers_output_and_exits_with_the_worst_code(tmp_path: Path, ssh_fleet: SshFleet) -> None:
    box = ssh_fleet.add_machine("box3", n_hosts=3)
    home = tmp_path / "home"
    _write_fleet(home, ssh_fleet, box)
    done = jobtpu(home, "exec", "trio", "--", _failing_on(box.hosts[1].addr), check=False)
    assert done.returncode == 3, done.stderr
    lines = _prefixed(done.stdout)
    assert lines == {0: [f"on {box.hosts[0].addr}", "second line"],
                     1: [f"on {box.hosts[1].addr}", "second line", "failing"],
                     2: [f"on {box.hosts[2].addr}", "second line"]}
    # The hosts' keys went to the home's known_hosts (accept-new), as a pass records them.
    known = (home / "known_hosts").read_text()
    assert all(h.public_key_line() in known for h in box.hosts)

    one = jobtpu(home, "exec", "box3", "--worker", "1", "--", _failing_on(box.hosts[1].addr), check=False)
    assert one.returncode == 3 and set(_prefixed(one.stdout)) == {1}
    fine = jobtpu(home, "exec", "box3", "--worker", "2", "--", _failing_on(box.hosts[1].addr))
    assert _prefixed(fine.stdout) == {2: [f"on {box.hosts[2].addr}", "second line"]}

    missing = jobtpu(home, "exec", "box3", "--worker", "3", "--", "true", check=False)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.splitlines() == ["jobtpu: error: box3 has no worker 3", "hint: its workers are 0 to 2"]
    unknown = jobtpu(home, "exec", "nosuch", "--", "true", check=False)
    assert unknown.returncode == 1
    assert unknown.stderr.splitlines() == ["jobtpu: error: unknown machine 'nosuch'",
                                           "hint: machines in machines.json: box3 (trio)"]


def test_exec_reports_an_unreachable_worker_and_still_runs_on_the_others(tmp_path: Path, ssh_fleet: SshFleet) -> None:
    box = ssh_fleet.add_machine("box3", n_hosts=3)
    home = tmp_path / "home"
    _write_fleet(home, ssh_fleet, box)
    ssh_fleet.stop_host(box.hosts[2])
    done = jobtpu(home, "exec", "box3", "--", REPORT, check=False)
    assert done.returncode == 255
    lines = _prefixed(done.stdout)
    assert lines[0] == [f"on {box.hosts[0].addr}", "second line"]
    assert lines[1] == [f"on {box.hosts[1].addr}", "second line"]
    assert len(lines[2]) == 1 and "connection refused" in lines[2][0] and "Traceback" not in done.stderr


def test_ssh_runs_on_the_chosen_worker_with_the_homes_known_hosts(tmp_path: Path, ssh_fleet: SshFleet) -> None:
    box = ssh_fleet.add_machine("box3", n_hosts=3)
    home = tmp_path / "home"
    _write_fleet(home, ssh_fleet, box)
    done = jobtpu(home, "ssh", "trio", "--worker", "1", "--", REPORT)
    assert done.stdout.splitlines() == [f"on {box.hosts[1].addr}", "second line"]
    assert box.hosts[1].public_key_line() in (home / "known_hosts").read_text()
    assert jobtpu(home, "ssh", "box3", "--", "exit 7", check=False).returncode == 7  # the command's exit code
    # Without a command: a login shell (here reading its commands from stdin, as there is no terminal).
    shell = subprocess.run([*JOBTPU, "--home", str(home), "ssh", "box3", "--worker", "2"], input=f"{REPORT}\nexit 5\n",
                           capture_output=True, text=True, timeout=60)
    assert shell.returncode == 5 and f"on {box.hosts[2].addr}\nsecond line\n" in shell.stdout, shell.stderr

    # Under `strict`, a host whose key is not in the home's known_hosts is refused in one line.
    strict = tmp_path / "strict"
    _write_fleet(strict, ssh_fleet, box, host_key_policy="strict")
    refused = jobtpu(strict, "ssh", "box3", "--", "echo reached", check=False)
    assert refused.returncode == 1 and "reached" not in refused.stdout
    assert refused.stderr.startswith("jobtpu: error: box3[0] ") and "unknown host key" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    # Once the key is in the home's known_hosts, the OpenSSH client trusts it (and only it).
    (strict / "known_hosts").write_text(box.hosts[0].known_hosts_line() + "\n")
    assert jobtpu(strict, "ssh", "box3", "--", "echo reached").stdout == "reached\n"


def test_a_tpu_machine_is_found_by_its_node_name_and_full_name(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("node-a", workers=2)
    home = tmp_path / "home"
    write_machines(home, tpus, {"v3-16-a": tpus.machine_spec("node-a", runtime_version="tpu-ubuntu2204-base")})
    before = jobtpu(home, "exec", "node-a", "--", "true", check=False)  # no pass has seen the workers yet
    assert before.returncode == 1
    assert before.stderr.splitlines()[0] == "jobtpu: error: v3-16-a: no worker address is known yet"
    manage(home)
    full = f"projects/{PROJECT}/locations/{ZONE}/nodes/node-a"
    done = jobtpu(home, "exec", full, "--", REPORT)
    assert sorted(_prefixed(done.stdout)) == [0, 1]
    assert jobtpu(home, "ssh", "node-a", "--worker", "1", "--", "echo one").stdout == "one\n"
    wrong_zone = jobtpu(home, "exec", f"projects/{PROJECT}/locations/elsewhere-1a/nodes/node-a", "--", "true",
                        check=False)
    assert wrong_zone.returncode == 1 and "unknown machine" in wrong_zone.stderr


def test_exec_on_the_local_machine_runs_here_and_ssh_refuses_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = jobtpu(home, "exec", "local", "--worker", "all", "--", "echo out; echo err >&2; exit 4", check=False)
    assert (done.returncode, done.stdout) == (4, "[0] out\n[0] err\n")
    refused = jobtpu(home, "ssh", "local", check=False)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == ["jobtpu: error: local is this computer: there is nothing to ssh to",
                                           "hint: run the command here, or `jobtpu exec local -- CMD`"]
    empty = jobtpu(home, "exec", "local", "--", check=False)
    assert empty.returncode == 1 and empty.stderr.startswith("jobtpu: error: no command to run\n")


def test_exec_and_ssh_of_a_job_run_in_its_folder_on_its_worker(tmp_path: Path, ssh_fleet: SshFleet) -> None:
    box = ssh_fleet.add_machine("box3", n_hosts=1)
    home = tmp_path / "home"
    _write_fleet(home, ssh_fleet, box)
    (tmp_path / "code").mkdir()
    job = submit(home, tmp_path / "code", 'echo started; while [ ! -e "$HOME/release" ]; do sleep 0.1; done')
    passes_until(home, lambda s: s[job]["status"] == "running", "the job to run")
    folder = box.home / "jobtpu" / "jobs" / str(job)
    done = jobtpu(home, "exec", str(job), "--", "pwd -P")
    assert done.stdout == f"[0] {folder}\n", done.stderr
    shell = jobtpu(home, "ssh", str(job), "--", "pwd -P; exit 6", check=False)
    assert (shell.returncode, shell.stdout) == (6, f"{folder}\n"), shell.stderr
    missing = jobtpu(home, "exec", str(job), "--worker", "1", "--", "true", check=False)
    assert missing.returncode == 1 and missing.stderr.startswith(f"jobtpu: error: job {job} has no worker 1\n")
    (box.home / "release").touch()
    passes_until(home, lambda s: s[job]["status"] == "finished", "the job to end")
    ended = jobtpu(home, "exec", str(job), "--", "true", check=False)
    assert ended.returncode == 1 and ended.stderr.startswith(f"jobtpu: error: job {job} has ended (finished): ")
