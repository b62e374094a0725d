"""Jobs on remote machines, end to end through the CLI, against real sshd servers (tests/sshfleet.py)."""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import signal
import socket
import stat
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from jobtpu.passes import manage as manage_module
from tests import helpers
from tests.helpers import cli, run, wait_for
from tests.sshfleet import FleetMachine, Host, SshFleet

DEADLINE = 30.0


# ---- helpers ---------------------------------------------------------------------------------------

def write_fleet(home: Path, fleet: SshFleet, machines: dict[str, tuple[FleetMachine, dict[str, Any]]],
                **top: Any) -> None:
    home.mkdir(parents=True, exist_ok=True)
    specs = {name: {"kind": "ssh", "hosts": [h.address() for h in fm.hosts], "user": fm.user,
                    "identity_file": str(fleet.identity), "connect_timeout": 3, **extra}
             for name, (fm, extra) in machines.items()}
    (home / "machines.json").write_text(json.dumps({"machines": specs, **top}, indent=1))


def code_dir(tmp_path: Path, name: str = "code") -> Path:
    src = tmp_path / name
    src.mkdir()
    (src / "train.py").write_text("print('hello')\n")
    return src


def machines_json(home: Path) -> list[dict[str, Any]]:
    return list(json.loads(run(home, "machines", "--json", in_process=True)[0])["machines"])


# The shared helpers, in this process (these tests run hundreds of commands), with this file's deadline.
submit = partial(helpers.submit, in_process=True)
manage = partial(helpers.run_pass, in_process=True)  # what the pass said on stderr
jobs = partial(helpers.status, in_process=True)
manage_until = partial(helpers.passes_until, timeout=DEADLINE, in_process=True)


def meta(fm: FleetMachine, job: int, attempt: int = 0, worker: int = 0, ext: str = "pid") -> Path:
    return fm.home / "jobtpu" / "meta" / str(job) / f"{attempt}.{worker}.{ext}"


def group_alive(pgid: int) -> bool:
    """A process group is alive while one of its members is not a zombie (checked as root via ps)."""
    out = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout
    return any(w[0] == str(pgid) and not w[1].startswith("Z") for w in (ln.split() for ln in out.splitlines()))


def live_args(user: str) -> list[str]:
    out = subprocess.run(["ps", "-u", user, "-o", "stat=,args="], capture_output=True, text=True).stdout
    return [ln.split(None, 1)[1] for ln in out.splitlines() if ln.strip() and not ln.lstrip().startswith("Z")]


def log(home: Path, job: int, attempt: int = 0, worker: int = 0) -> str:
    path = home / "logs" / str(job) / f"{attempt}.{worker}.log"
    return path.read_text() if path.exists() else ""


def counts(host: Host) -> tuple[int, int]:
    """(authenticated connections, exec sessions) sshd logged for this host so far."""
    text = host.sshd_log.read_text(errors="replace")
    return text.count("Accepted publickey for "), text.count("Starting session: ")


WAIT_RELEASE = 'while [ ! -e "$HOME/release-$JOBTPU_JOB_ID" ]; do sleep 0.1; done'


# ---- tests -----------------------------------------------------------------------------------------

def test_gpu_box_runs_four_jobs_at_once_on_distinct_devices(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("gpu")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"gpu": (fm, {"resources": {"gpu": 4}})})
    src = code_dir(tmp_path)
    cmd = f'echo "dev=$CUDA_VISIBLE_DEVICES gpu=$JOBTPU_GPU"; {WAIT_RELEASE}; echo bye'
    ids = [submit(home, src, cmd, "--req", "gpu=1") for _ in range(5)]
    before = machines_json(home)[0]
    assert (before["state"], before["free"]) == ("unknown", {"gpu": 4, "slot": 1})
    assert "not contacted yet" in before["detail"] and "jobtpu doctor gpu" in before["detail"]

    def at_most_four(state: dict[int, dict[str, Any]]) -> None:
        assert sum(state[i]["status"] in ("launching", "running", "killing") for i in ids) <= 4
        started = [i for i in ids if meta(fm, i).exists()]
        assert sum(group_alive(int(meta(fm, i).read_text().split()[0])) for i in started) <= 4

    state = manage_until(home, lambda s: all("dev=" in log(home, i) for i in ids[:4]), "four logs",
                         each=at_most_four)
    assert [state[i]["status"] for i in ids] == ["running"] * 4 + ["queued"]
    devices = {i: log(home, i).split()[0] for i in ids[:4]}
    assert sorted(devices.values()) == ["dev=0", "dev=1", "dev=2", "dev=3"]
    assert all(f"gpu={d[4:]}" in log(home, i) for i, d in devices.items())

    freed = ids[2]
    (fm.home / f"release-{freed}").touch()
    state = manage_until(home, lambda s: s[freed]["status"] == "finished" and "dev=" in log(home, ids[4]),
                         "the fifth job to start", each=at_most_four)
    assert state[ids[4]]["status"] == "running"
    assert log(home, ids[4]).split()[0] == devices[freed]
    assert log(home, freed).endswith("bye\n")
    after = machines_json(home)[0]
    assert (after["state"], after["detail"], after["running"], after["free"]["gpu"]) == ("up", None, 4, 0)


def test_multi_host_job_fails_as_one_and_its_logs_survive_the_hosts(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("pod", n_hosts=3)
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"pod": (fm, {})})
    cmd = ('set -- $SSH_CONNECTION; echo "w=$JOBTPU_WORKER n=$JOBTPU_NUM_WORKERS host=$3"\n'
           'if [ "$JOBTPU_WORKER" = 1 ]; then sleep 1; exit 7; fi; sleep 600 & sleep 600; wait')
    job = submit(home, code_dir(tmp_path), cmd)
    manage(home)
    assert jobs(home)[job]["status"] == "running"
    assert all(meta(fm, job, 0, w).exists() for w in range(3))  # per-worker files on the shared home
    wait_for(lambda: meta(fm, job, 0, 1, "exit").exists(), timeout=DEADLINE, interval=0.05, what="worker 1 to exit")
    for _ in range(2):
        manage(home)
        if jobs(home)[job]["status"] == "failed":
            break
    j = jobs(home)[job]
    assert (j["status"], j["reason"], j["exit_code"]) == ("failed", "exit 7", 7), j
    assert j["attempts"][-1]["outcome"] == "exit 7"
    assert not [a for a in live_args(fm.user) if "sleep 600" in a or f"jobtpu-{job}" in a]
    assert meta(fm, job, 0, 0, "exit").exists() is False  # stopped by jobtpu, not ended on their own

    for w, host in enumerate(fm.hosts):
        assert log(home, job, 0, w).startswith(f"w={w} n=3 host={host.addr}\n")
        ssh_fleet.stop_host(host)
    code, out, err = cli(home, "tail", str(job), "--worker", "2", "--attempt", "0")
    assert code == 0, err
    assert out == f"w=2 n=3 host={fm.hosts[2].addr}\n"


# Worker 0 serves the coordinator's address; the others reach it there, as torchrun's and
# jax.distributed's workers do (docs/reference/job-environment.md §8.2).
RENDEZVOUS = """import os, socket, time
env = {k: os.environ.get(k, '-') for k in ('JOBTPU_ZONE', 'JOBTPU_REGION', 'JOBTPU_NODE', 'JOBTPU_ACCELERATOR',
                                          'JOBTPU_HOSTS', 'JOBTPU_COORDINATOR')}
print(' '.join(f'{k}={v}' for k, v in env.items()), flush=True)
addr, port = env['JOBTPU_COORDINATOR'].rsplit(':', 1)
if os.environ['JOBTPU_WORKER'] == '0':
    with socket.create_server((addr, int(port))) as server:
        server.settimeout(20)
        print('met', sorted(server.accept()[0].recv(8).decode() for _ in range(2)))
else:
    for _ in range(200):
        try:
            with socket.create_connection((addr, int(port)), timeout=2) as s:
                s.sendall(os.environ['JOBTPU_WORKER'].encode())
                break
        except OSError:
            time.sleep(0.1)
"""


def test_every_worker_of_a_box_knows_its_peers_and_meets_them_at_the_coordinator(ssh_fleet: SshFleet,
                                                                                  tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("pod", n_hosts=3)
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"pod": (fm, {"accelerator": "a100", "zone": "us-east1-c"})})
    src = code_dir(tmp_path)
    (src / "meet.py").write_text(RENDEZVOUS)
    job = submit(home, src, "python3 meet.py")
    state = manage_until(home, lambda s: s[job]["status"] in ("finished", "failed"), "the job to end")
    assert state[job]["status"] == "finished", state[job]
    addrs = [h.addr for h in fm.hosts]
    lines = [log(home, job, 0, w).splitlines()[0] for w in range(3)]
    coordinator = lines[0].split("JOBTPU_COORDINATOR=")[1]
    assert coordinator.startswith(f"{addrs[0]}:") and 20000 <= int(coordinator.split(":")[1]) < 32000
    assert lines == [f"JOBTPU_ZONE=us-east1-c JOBTPU_REGION=us-east1 JOBTPU_NODE={addr} JOBTPU_ACCELERATOR=a100 "
                     f"JOBTPU_HOSTS={','.join(addrs)} JOBTPU_COORDINATOR={coordinator}" for addr in addrs]
    assert "met ['1', '2']" in log(home, job, 0, 0)


def test_quiet_pass_is_one_session_per_host_and_kill_stops_every_worker(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("pod", n_hosts=3)
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"pod": (fm, {})})
    job = submit(home, code_dir(tmp_path), "sleep 600 & sleep 600 & wait")
    manage(home)
    assert jobs(home)[job]["status"] == "running"
    before = [counts(h) for h in fm.hosts]
    manage(home)
    wait_for(lambda: all(counts(h)[1] == b[1] + 1 for h, b in zip(fm.hosts, before, strict=True)), timeout=DEADLINE, interval=0.05, what="sessions")
    time.sleep(0.2)  # anything extra would show up now
    assert [counts(h) for h in fm.hosts] == [(c + 1, s + 1) for c, s in before]
    groups = [int(meta(fm, job, 0, w).read_text().split()[0]) for w in range(3)]
    assert all(group_alive(g) for g in groups)
    assert sum(a.startswith("sleep 600") for a in live_args(fm.user)) == 6

    code, _, err = cli(home, "kill", str(job))
    assert code == 0, err
    j = jobs(home)[job]
    assert (j["status"], j["reason"]) == ("killed", "killed")
    assert not any(group_alive(g) for g in groups)
    assert not [a for a in live_args(fm.user) if "sleep 600" in a]


def test_report_counts_gpu_hours_on_a_box_and_no_time_a_person_kept_the_job_killed(
        ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("gpu")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"gpu": (fm, {"resources": {"gpu": 4}})})
    job = submit(home, code_dir(tmp_path), 'if [ "$JOBTPU_ATTEMPT" = 0 ]; then sleep 600; fi', "--req", "gpu=2")
    manage_until(home, lambda s: s[job]["status"] == "running", "the job to run")
    assert cli(home, "kill", str(job))[0] == 0
    assert cli(home, "resume", str(job))[0] == 0
    manage_until(home, lambda s: s[job]["status"] == "finished", "the resumed job to finish")
    text = run(home, "report", str(job), in_process=True)[0]
    attempts = re.findall(r"^  attempt (\d) on gpu: wall \S+, accelerator (\S+) (\S+),", text, re.MULTILINE)
    assert [(n, unit) for n, _, unit in attempts] == [("0", "GPU-h"), ("1", "GPU-h")], text
    assert all(amount != "0.00" for _, amount, _ in attempts), text  # 2 GPUs for seconds: "<0.01", never 0
    assert re.search(r"^  after attempt 0 \(killed\): \S+ until it ran again, waiting on a person \(not counted\)$",
                     text, re.MULTILINE), text
    assert "interruption after attempt 0" not in text, text


def test_unreachable_host_then_back_finishes_or_is_lost(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    h = fm.hosts[0]
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {"resources": {"slot": 2}, "connect_timeout": 2})})
    src = code_dir(tmp_path)
    a = submit(home, src, f"{WAIT_RELEASE}; echo done")
    b = submit(home, src, f"{WAIT_RELEASE}; echo done")
    manage(home)
    assert [jobs(home)[i]["status"] for i in (a, b)] == ["running", "running"]

    ssh_fleet.stop_host(h)
    os.killpg(int(meta(fm, b).read_text().split()[0]), signal.SIGKILL)  # b dies with no exit record
    err = manage(home)
    assert "does not answer" in err and "connection refused" in err
    assert "box: up -> unreachable (" in err  # the machine's change is said once, when it happens
    with socket.socket() as silent:  # now a host that accepts TCP and never answers
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind((h.addr, h.port))
        silent.listen(8)
        start = time.monotonic()
        assert "box: up -> unreachable" not in manage(home)
        assert time.monotonic() - start > 1.9  # its connect_timeout: the silent host never answers
        state = jobs(home)
    assert [(state[i]["status"], state[i]["reason"]) for i in (a, b)] == [("running", "unreachable")] * 2

    ssh_fleet.start_host(h)
    assert "box: unreachable -> up" in manage(home)
    (fm.home / f"release-{a}").touch()
    state = manage_until(home, lambda s: s[a]["status"] == "finished" and s[b]["status"] == "failed", "the end")
    assert state[a]["reason"] is None and log(home, a).endswith("done\n")
    assert state[b]["reason"] == "lost" and state[b]["attempts"][-1]["outcome"] == "lost"


def test_a_kill_on_a_machine_that_is_down_is_said_once_and_ends_when_it_answers(ssh_fleet: SshFleet,
                                                                                 tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {"connect_timeout": 2})})
    job = submit(home, code_dir(tmp_path), "sleep 600")
    manage_until(home, lambda s: s[job]["status"] == "running", "the job to run")
    group = int(meta(fm, job).read_text().split()[0])
    ssh_fleet.stop_host(fm.hosts[0])  # the job runs on; nobody can reach it

    code, _, err = cli(home, "kill", str(job))
    assert code == 0, err
    assert jobs(home)[job]["status"] == "killing"
    said = [line for line in manage(home).splitlines() if "box" in line]
    assert len(said) == 1 and said[0].startswith("box: up -> unreachable (box[0]") and "connection refused" in said[0]
    assert machines_json(home)[0]["state"] == "unreachable"
    assert "unreachable" not in manage(home)  # said once, not on every pass while it stays so
    assert jobs(home)[job]["status"] == "killing" and group_alive(group)

    ssh_fleet.start_host(fm.hosts[0])
    assert "box: unreachable -> up" in manage(home)  # the stop answered: up at once, no pause
    assert (jobs(home)[job]["status"], machines_json(home)[0]["state"]) == ("killed", "up")
    assert not group_alive(group)


def test_a_killed_or_lost_attempt_s_log_comes_home_whole(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {"resources": {"slot": 2}})})
    talk = "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo the last words; sleep 600"  # 3 pulls' worth
    killed, lost = (submit(home, code_dir(tmp_path, name), talk) for name in ("a", "b"))
    manage_until(home, lambda s: s[killed]["status"] == s[lost]["status"] == "running", "both to run")
    for job in (killed, lost):
        wait_for(lambda job=job: meta(fm, job, ext="log").read_bytes().endswith(b"the last words\n"),
                 timeout=DEADLINE, what="the job to have talked")
    manage(home)  # one chunk of each log comes home, the rest is still on the box
    assert len(log(home, killed)) < 3000000

    code, _, err = cli(home, "kill", str(killed))
    assert code == 0, err
    assert jobs(home)[killed]["status"] == "killed"
    assert log(home, killed) == meta(fm, killed, ext="log").read_text()  # pulled to its end

    os.killpg(int(meta(fm, lost).read_text().split()[0]), signal.SIGKILL)  # gone, no exit record
    manage_until(home, lambda s: s[lost]["status"] == "failed", "the job to be lost")
    assert jobs(home)[lost]["reason"] == "lost"
    assert log(home, lost) == meta(fm, lost, ext="log").read_text()


def test_an_ended_log_past_the_pass_s_budget_is_pulled_by_the_next_passes(ssh_fleet: SshFleet, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass's catch-up of ended logs stops at its budget (timing's log_catch_up): a worker that
    printed a lot cannot make the pass that ends its job slow. The attempt says its log is behind,
    and the next pass pulls the rest (docs/reference/pass.md §5)."""
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {})})
    talk = f"head -c 3000000 /dev/zero | tr '\\0' x; echo; echo the last words; {WAIT_RELEASE}"  # 3 pulls' worth
    job = submit(home, code_dir(tmp_path), talk)
    manage_until(home, lambda s: s[job]["status"] == "running", "the job to run")
    wait_for(lambda: meta(fm, job, ext="log").read_bytes().endswith(b"the last words\n"),
             timeout=DEADLINE, what="the job to have talked")
    monkeypatch.setenv("JOBTPU_TIMING", json.dumps({"log_catch_up": 0}))  # the budget, spent at once
    (fm.home / f"release-{job}").touch()
    manage_until(home, lambda s: s[job]["status"] == "finished", "the job to finish")
    attempt = json.loads((home / "state.json").read_text())["jobs"][0]["attempts"][0]
    assert attempt["logs_behind"] is True and len(log(home, job)) < 3000000

    monkeypatch.delenv("JOBTPU_TIMING")
    manage(home)
    assert log(home, job) == meta(fm, job, ext="log").read_text()  # the rest, pulled by the next pass
    assert "logs_behind" not in json.loads((home / "state.json").read_text())["jobs"][0]["attempts"][0]


def test_tail_f_on_a_machine_that_is_down_says_so_and_shows_the_log_as_pulled(ssh_fleet: SshFleet,
                                                                               tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {})})
    job = submit(home, code_dir(tmp_path), f"echo before the fall; {WAIT_RELEASE}")
    manage_until(home, lambda s: s[job]["status"] == "running" and log(home, job), "the first words home")
    ssh_fleet.stop_host(fm.hosts[0])
    out, err = tmp_path / "tail.out", tmp_path / "tail.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        follow = subprocess.Popen([*helpers.JOBTPU, "--home", str(home), "tail", "-f", str(job)], stdout=o, stderr=e,
                                  env={**os.environ, "JOBTPU_USER": "tester"})
    try:
        said = wait_for(lambda: "showing the log as last pulled" in (text := err.read_text()) and text,
                        timeout=DEADLINE, what="tail -f to say the box is down")
        assert said.startswith("jobtpu: box is unreachable (box[0] ") and "connection refused" in said, said
        assert out.read_text() == "before the fall\n" and follow.poll() is None
        ssh_fleet.start_host(fm.hosts[0])  # it follows on, and ends with the job
        (fm.home / f"release-{job}").touch()
        assert follow.wait(timeout=DEADLINE) == 0
    finally:
        follow.terminate()
        follow.wait(timeout=30)
        ssh_fleet.start_host(fm.hosts[0])
        (fm.home / f"release-{job}").touch()
    assert err.read_text().count("is unreachable") == 1  # said once, however many times it asked


def test_fetch_brings_back_what_the_job_wrote(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {"root": "~/my runs"})})  # "~/" is the login folder
    job = submit(home, code_dir(tmp_path), 'echo "result of $JOBTPU_JOB_ID" > result.txt; '
                                           'mkdir -p "out dir"; echo deep > "out dir/deep.txt"')
    manage_until(home, lambda s: s[job]["status"] == "finished", "the job to finish")
    code, _, err = cli(home, "fetch", str(job), "result.txt")
    assert code == 0, err
    assert (home / "results" / str(job) / "result.txt").read_text() == f"result of {job}\n"
    assert (fm.home / "my runs" / "jobs" / str(job) / "result.txt").exists()
    to = tmp_path / "all of it"
    code, _, err = cli(home, "fetch", str(job), "--to", str(to))
    assert code == 0, err
    assert sorted(str(p.relative_to(to)) for p in to.rglob("*")) == [
        "out dir", "out dir/deep.txt", "result.txt", "train.py"]
    ssh_fleet.stop_host(fm.hosts[0])
    code, _, err = cli(home, "fetch", str(job), "result.txt")
    assert code == 1 and err.startswith(f"jobtpu: error: box[0] {fm.hosts[0].address()}: rsync pull")
    assert "Traceback" not in err and "Connection refused" in err


def test_hostile_strings_arrive_byte_exact_over_ssh(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {})}, config_aliases={"lr": "config.training.learning_rate"})
    src = tmp_path / "my code 'dir' \"x\" $HOME `id`"
    src.mkdir()
    (src / "show.py").write_text(
        "import json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'env': os.environ['HOSTILE'], 'cwd': os.getcwd()},"
        " open('received.json', 'w'))\n")
    hostile = "$(touch pwned1) `touch pwned2` 'single' \"double\" back\\slash; * ?\nsecond line $HOME"
    arg = "a \"b\" $c `d` \\e 'f' ${HOME}"
    cmd = f"echo 'first line $HOME `x` \"q\"' > line1.txt\npython3 show.py {shlex.quote(arg)} \"$HOSTILE\""
    override = "x y $(touch pwned3) `touch pwned4` 'q' \"dq\"\nnl"
    # `$NAME` in an --env value is expanded on the worker; `\\$` keeps a `$` as it is.
    job = submit(home, src, cmd, "--env", f"HOSTILE={hostile.replace('$', chr(92) + '$')}", "lr=0.1",
                 f"name={override}")
    state = manage_until(home, lambda s: s[job]["status"] in ("finished", "failed"), "the job to end")
    assert state[job]["status"] == "finished", log(home, job)
    code, _, err = cli(home, "fetch", str(job), "received.json")
    assert code == 0, err
    got = json.loads((home / "results" / str(job) / "received.json").read_text())
    assert got["argv"] == [arg, hostile, "--config.training.learning_rate=0.1", f"--name={override}"]
    assert got["env"] == hostile
    folder = fm.home / "jobtpu" / "jobs" / str(job)
    assert got["cwd"] == str(folder)
    assert (folder / "line1.txt").read_text() == "first line $HOME `x` \"q\"\n"
    assert not list(fm.home.rglob("pwned*"))


def test_a_crash_between_launch_and_save_never_launches_twice(ssh_fleet: SshFleet, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {})})
    job = submit(home, code_dir(tmp_path), 'echo started >> "$HOME/side-$JOBTPU_JOB_ID.txt"; exec sleep 600')
    saved: list[bytes] = []
    real_act = manage_module.act

    def act_after_snapshot(*args: Any) -> Any:
        saved.append((home / "state.json").read_bytes())  # the intent is on disk; nothing launched yet
        return real_act(*args)  # its reports, for the pass to settle

    monkeypatch.setattr(manage_module, "act", act_after_snapshot)
    manage(home)
    monkeypatch.setattr(manage_module, "act", real_act)
    assert jobs(home)[job]["status"] == "running"
    side = fm.home / f"side-{job}.txt"
    wait_for(side.exists, timeout=DEADLINE, interval=0.05, what="the job to start")
    pid = meta(fm, job).read_text()

    (home / "state.json").write_bytes(saved[0])  # as if killed -9 after the launch, before the save
    assert jobs(home)[job]["status"] == "launching"
    manage(home)
    assert jobs(home)[job]["status"] == "running"
    manage(home)
    time.sleep(0.3)
    assert side.read_text() == "started\n" and meta(fm, job).read_text() == pid
    assert sum(a.startswith("sleep 600") for a in live_args(fm.user)) == 1


def test_changed_host_key_is_refused_with_the_command_that_forgets_it(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    h = fm.hosts[0]
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"strict": (fm, {"host_key_policy": "strict"}),
                                  "acc": (fm, {"host_key_policy": "accept-new"}),
                                  "off": (fm, {"host_key_policy": "off"})})
    code, _, err = cli(home, "doctor", "strict")
    assert code == 1 and "unknown host key and host_key_policy is strict" in err
    job = submit(home, code_dir(tmp_path), WAIT_RELEASE, "--machine", "acc")
    manage(home)
    assert jobs(home)[job]["status"] == "running"
    assert (home / "known_hosts").read_text() == h.known_hosts_line() + "\n"
    code, _, err = cli(home, "doctor", "strict")  # another entry for the same host and root: acc's job
    assert code == 0 and "1 job worker(s) running, all managed by state.json" in err, err  # is no stray

    ssh_fleet.new_host_key(h)
    forget = f"ssh-keygen -R '[{h.addr}]:{h.port}' -f {shlex.quote(str(home / 'known_hosts'))}"
    for name in ("strict", "acc"):
        code, _, err = cli(home, "doctor", name)
        assert code == 1, err
        assert f"{name}[0] {h.addr}:{h.port}: problem: host key changed" in err and forget in err
    err = manage(home)
    assert "host key changed" in err and forget in err
    assert jobs(home)[job]["reason"] == "unreachable"
    assert cli(home, "doctor", "off")[0] == 0

    subprocess.run(shlex.split(forget), check=True, capture_output=True)
    (fm.home / f"release-{job}").touch()
    manage_until(home, lambda s: s[job]["status"] == "finished", "the job to finish")
    assert (home / "known_hosts").read_text() == h.known_hosts_line() + "\n"


def test_doctor_checks_each_worker_and_fixes_the_root(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("pod", n_hosts=2)
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"pod": (fm, {"root": "runs/jobtpu"})})
    code, _, err = cli(home, "doctor", "pod")
    assert code == 0, err
    for w, h in enumerate(fm.hosts):
        label = f"pod[{w}] {h.address()}: ok:"
        assert f"{label} reachable, logged in as {fm.user}" in err
        assert f"{label} root runs/jobtpu does not exist yet" in err
        assert f"{label} python3: " in err and f"{label} rsync: " in err and f"{label} tar: " in err
        assert re.search(rf"{re.escape(label)} [\d.]+ GB free in runs/jobtpu", err), err  # each worker's disk
    assert cli(home, "doctor", "pod", "--fix")[0] == 0
    assert (fm.home / "runs" / "jobtpu").is_dir()
    ssh_fleet.stop_host(fm.hosts[1])
    code, _, err = cli(home, "doctor", "pod")
    assert code == 1
    assert f"pod[1] {fm.hosts[1].address()}: problem: not reachable: connection refused; check" in err
    assert f"pod[0] {fm.hosts[0].address()}: ok: root runs/jobtpu exists" in err
    code, _, err = cli(tmp_path / "plain home", "doctor", "local")  # the built-in local machine
    assert code == 0 and "local[0] (this machine): ok: python3: " in err, err


def test_a_launch_on_a_dead_host_goes_to_another_machine(tmp_path: Path, ssh_fleet: SshFleet) -> None:
    dead, alive = ssh_fleet.add_machine("dead"), ssh_fleet.add_machine("alive")
    ssh_fleet.stop_host(dead.hosts[0])
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"dead": (dead, {}), "alive": (alive, {})})
    job_id = submit(home, code_dir(tmp_path), "echo ran here")
    manage(home)  # the first fitting machine is the dead one: nothing can have started there
    job = jobs(home)[job_id]
    assert (job["status"], job["machine"], job["attempts"]) == ("queued", None, [])
    final = manage_until(home, lambda s: s[job_id]["status"] == "finished", "the job to finish elsewhere")
    assert [a["machine"] for a in final[job_id]["attempts"]] == ["alive"]
    machines = {m["name"]: m for m in machines_json(home)}
    assert machines["dead"]["state"] == "unreachable" and machines["alive"]["state"] == "up"


def test_everything_jobtpu_makes_on_a_box_is_the_remote_users_alone(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    root = fm.home / "jobtpu"
    root.mkdir(mode=0o755)  # as an older jobtpu left it, with the login umask (022)
    owner = pwd.getpwnam(fm.user)
    os.chown(root, owner.pw_uid, owner.pw_gid)
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"box": (fm, {})})
    job = submit(home, code_dir(tmp_path), "mkdir -p out && touch out/made-by-job && echo done")
    manage_until(home, lambda s: s[job]["status"] == "finished", "the job to finish")
    assert log(home, job) == "done\n"
    outputs = root / "jobs" / str(job) / "out"
    # The job's own outputs keep the login umask: they are the user's business.
    assert [stat.S_IMODE(p.stat().st_mode) for p in (outputs, outputs / "made-by-job")] == [0o755, 0o644]
    exposed = [f"{p.relative_to(root)} {stat.S_IMODE(p.lstat().st_mode):o}" for p in [root, *root.rglob("*")]
               if not p.is_symlink() and outputs not in (p, *p.parents) and p.lstat().st_mode & 0o077]
    assert not exposed, exposed
    kinds = {p.suffix for p in root.rglob("*")}
    assert {".gz", ".log", ".pid", ".exit", ".py"} <= kinds, kinds  # archives, meta files and the job tree


def test_a_fetch_into_a_shared_home_lands_group_shared(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    run(home, "init", "--shared", "root", str(home), in_process=True)  # its group reads it (home-files.md §1.3)
    write_fleet(home, ssh_fleet, {"box": (fm, {})})
    (home / "machines.json").chmod(0o640)
    job = submit(home, code_dir(tmp_path), "mkdir -p out && echo r > out/r.txt && cp train.py tool && chmod 755 tool")
    manage_until(home, lambda s: s[job]["status"] == "finished", "the job to finish")
    code, _, err = cli(home, "fetch", str(job))
    assert code == 0, err
    results = home / "results" / str(job)
    modes = {str(p.relative_to(results)): stat.S_IMODE(p.stat().st_mode) for p in [results, *results.rglob("*")]}
    # The worker's 0600 snapshot files and the job's 0644/0755 outputs alike: the group's to read, its
    # fetcher's alone to write, never the world's.
    assert modes == {".": 0o2750, "out": 0o2750, "out/r.txt": 0o640, "train.py": 0o640, "tool": 0o750}, modes


def test_a_loop_brings_a_running_jobs_log_home_between_its_passes(tmp_path: Path, ssh_fleet: SshFleet) -> None:
    """docs/reference/guarantees-and-numbers.md: under `manage --loop` the running jobs' new lines come
    home every log_stream seconds, whatever the loop's interval, so a VM that vanishes between two
    passes takes none of them with it."""
    from jobtpu import timing
    from tests.helpers import JOBTPU

    fm = ssh_fleet.add_machine("gpu")
    home = tmp_path / "home"
    write_fleet(home, ssh_fleet, {"gpu": (fm, {})})
    src = code_dir(tmp_path)
    job = submit(home, src, "echo first; while [ ! -e go ]; do sleep 0.1; done; echo second; sleep 300")
    env = {**os.environ, "JOBTPU_USER": "tester", **timing.env(log_stream=0.3, spool_poll=0.1)}
    loop = subprocess.Popen([*JOBTPU, "--home", str(home), "manage", "--loop", "600"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    log = home / "logs" / str(job) / "0.0.log"
    try:
        wait_for(lambda: log.exists() and "first" in log.read_text(), timeout=DEADLINE, what="the first line home")
        passes = json.loads(run(home, "status", "--json", in_process=True)[0])
        last_pass = (home / "state.json").stat().st_mtime_ns
        remote_folder = fm.home / "jobtpu" / "jobs" / str(job)
        (remote_folder / "go").touch()
        wait_for(lambda: "second" in log.read_text(), timeout=DEADLINE, what="the second line, with no pass")
        assert (home / "state.json").stat().st_mtime_ns == last_pass, "brought home between passes, not by one"
        assert passes["jobs"][0]["status"] == "running"
    finally:
        os.killpg(loop.pid, signal.SIGINT)
        loop.wait(timeout=60)
    assert "Traceback" not in (loop.stderr.read() if loop.stderr else "")
