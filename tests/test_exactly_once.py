"""A command starts exactly once, `kill` stops all of it, and the job's environment cannot break the
wrapper: through the real CLI, on the local machine (the same scripts as on SSH machines) and over a
real sshd."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

from jobtpu.transport.local import job_environment
from tests.helpers import JOBTPU, jobtpu, make_home, manage_until, pid_alive, status, submit, wait_for
from tests.sshfleet import SshFleet

STALE = 10 * 60  # older than any claim a live launch could hold


def _src(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hello')\n")
    return src


def _meta(home: Path, job: int, ext: str, attempt: int = 0, worker: int = 0) -> Path:
    return home / "run" / "meta" / str(job) / f"{attempt}.{worker}.{ext}"


def _pid(path: Path) -> int:
    wait_for(lambda: path.exists() and path.read_text().strip(), what=f"{path.name} to be written")
    return int(path.read_text().split()[0])


def _ran(ledger: Path) -> int:
    return len(ledger.read_text().split()) if ledger.exists() else 0


def _runs(home: Path, job: int) -> bool:
    """Whether a live process carries the job's marker (JOBTPU_MARK=<home id>.<job>.<attempt>.<worker>):
    a copy started at any time, detached or not, is one from its start until it ends."""
    mark = f"JOBTPU_MARK={(home / 'home_id').read_text().strip()}.{job}.".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            words, stat = environ.read_bytes().split(b"\0"), (environ.parent / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z" and any(w.startswith(mark) for w in words):
            return True
    return False


# ---- started exactly once ------------------------------------------------------------------------------

def test_a_job_whose_pid_record_cannot_be_written_is_never_started(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    ledger = tmp_path / "ledger"
    job = submit(home, _src(tmp_path), f"echo ran >> {shlex.quote(str(ledger))}; sleep 30")
    # Where the wrapper writes its pid record first stands something it cannot write (as a full disk would).
    _meta(home, job, "pid.tmp").mkdir(parents=True)
    jobs = manage_until(home, [job], {"failed"}, timeout=60)
    assert jobs[job]["reason"] == "launch_failed", jobs[job]
    assert "cannot write the pid record" in jobs[job]["last_line"], jobs[job]
    assert not list(_meta(home, job, "env").parent.glob("*.env"))  # its secrets file is gone too
    # No copy runs now, nor after more passes (the claim left behind is no excuse to start again).
    for _ in range(3):
        jobtpu(home, "manage")
    # A copy would still run (its command sleeps 30 s): none does now, and none ran.
    assert not _runs(home, job) and _ran(ledger) == 0


def test_a_job_whose_disk_is_full_when_its_pid_is_recorded_is_never_started(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    ledger = tmp_path / "ledger"
    job = submit(home, _src(tmp_path), f"echo ran >> {shlex.quote(str(ledger))}; sleep 30", "--env", "API_KEY=k")
    # The job's meta folder on a real, tiny file system with room for one page: the env file takes it.
    # Private like every folder of a private home's run root (a tmpfs is 1777 unless told): a
    # world-writable meta folder is refused before any write, which is another test's business.
    folder = _meta(home, job, "pid").parent
    folder.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(folder)], check=True)
    try:
        (folder / "filler").write_bytes(b"x" * 60 * 1024)
        jobs = manage_until(home, [job], {"failed"}, timeout=60)
        assert jobs[job]["reason"] == "launch_failed", jobs[job]
        assert "cannot write the pid record" in jobs[job]["last_line"], jobs[job]
        assert not list(folder.glob("*.env"))
        for _ in range(2):
            jobtpu(home, "manage")
        assert not _runs(home, job) and _ran(ledger) == 0  # a copy would still run (it sleeps 30 s)
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_machine_setup_whose_pid_record_cannot_be_written_is_never_started(tmp_path: Path) -> None:
    from jobtpu.remote.scripts import setup_script
    from jobtpu.schema.worker_protocol import setup_said

    ledger = tmp_path / "ledger"
    (tmp_path / "root" / "setup" / "inc.0.pid.tmp").mkdir(parents=True)
    script = setup_script(str(tmp_path / "root"), "inc", 0, [f"echo ran >> {shlex.quote(str(ledger))}"])
    for _ in range(2):  # a pass, then the next one: neither starts it
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, cwd=tmp_path)
        assert setup_said(done.stdout).startswith("SETUP failed 97: cannot write the pid record"), done.stdout
    # No wait: the script says failed 97 only once it has reaped the detached process (setup.sh).
    assert _ran(ledger) == 0


def test_a_stale_claim_whose_job_still_has_a_process_is_not_taken_over(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    jobtpu(home, "doctor", "local")  # gives the home its id
    hid = (home / "home_id").read_text().strip()
    ledger = tmp_path / "ledger"
    job = submit(home, _src(tmp_path), f"echo ran >> {shlex.quote(str(ledger))}; sleep 30")
    # A launch started the job and died before its pid record was seen; its claim is old.
    claim = _meta(home, job, "claim")
    claim.mkdir(parents=True)
    os.utime(claim, (time.time() - STALE, time.time() - STALE))
    survivor = subprocess.Popen(["sleep", "300"], env={**os.environ, "JOBTPU_MARK": f"{hid}.{job}.0.0"})
    try:
        for _ in range(2):
            jobtpu(home, "manage")
        assert status(home)[job]["status"] == "launching"
        assert _ran(ledger) == 0, "a second copy was started beside the live one"
        # kill finds the job's process by its marker, pid record or not.
        jobtpu(home, "kill", str(job))
        assert survivor.wait(timeout=10) is not None
        assert status(home)[job]["status"] == "killed"
    finally:
        if survivor.poll() is None:
            survivor.kill()


# ---- kill stops all of it ------------------------------------------------------------------------------

ESCAPE = ("setsid sleep 300 > /dev/null 2>&1 & echo $! > {d}/setsid.pid; "
          "(setsid sleep 300 > /dev/null 2>&1 & echo $! > {d}/double.pid) ; sleep 300")


def test_kill_stops_children_that_left_the_process_group(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    d = shlex.quote(str(tmp_path))
    job = submit(home, _src(tmp_path), ESCAPE.format(d=d))
    manage_until(home, [job], {"running"})
    escaped = [_pid(tmp_path / "setsid.pid"), _pid(tmp_path / "double.pid")]
    try:
        assert all(pid_alive(p) for p in escaped)
        jobtpu(home, "kill", str(job))
        assert status(home)[job]["status"] == "killed"
        assert not [p for p in escaped if pid_alive(p)], "a child that left the process group survived kill"
    finally:
        for p in escaped:
            if pid_alive(p):
                os.kill(p, 9)


def test_kill_over_ssh_stops_children_that_left_the_process_group(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    fm = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    home.mkdir()
    (home / "machines.json").write_text(json.dumps({"machines": {"box": {
        "kind": "ssh", "hosts": [h.address() for h in fm.hosts], "user": fm.user,
        "identity_file": str(ssh_fleet.identity), "connect_timeout": 3}}}))
    job = submit(home, _src(tmp_path), ESCAPE.format(d="$HOME"))
    manage_until(home, [job], {"running"})
    escaped = [_pid(fm.home / "setsid.pid"), _pid(fm.home / "double.pid")]
    assert all(pid_alive(p) for p in escaped)
    jobtpu(home, "kill", str(job))
    assert status(home)[job]["status"] == "killed"
    assert not [p for p in escaped if pid_alive(p)], "a child that left the process group survived kill"


def test_kill_leaves_no_env_file_behind(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, _src(tmp_path), "sleep 300", "--env", "API_KEY=k")
    manage_until(home, [job], {"running"})
    # As a wrapper stopped before it read the job's environment would leave it.
    _meta(home, job, "env").write_bytes(b"API_KEY\0=\0k\0")
    jobtpu(home, "kill", str(job))
    assert status(home)[job]["status"] == "killed"
    assert not _meta(home, job, "env").exists()


def test_a_lost_attempt_s_surviving_children_are_stopped(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, _src(tmp_path), f"sleep 300 & echo $! > {shlex.quote(str(tmp_path))}/child.pid; wait")
    manage_until(home, [job], {"running"})
    child = _pid(tmp_path / "child.pid")
    try:
        os.kill(_pid(_meta(home, job, "pid")), 9)  # the wrapper dies; the command it started runs on
        jobs = manage_until(home, [job], {"failed", "queued"})
        assert jobs[job]["attempts"][0]["outcome"] == "lost"
        wait_for(lambda: not pid_alive(child), timeout=10, what="the lost attempt's child to be stopped")
    finally:
        if pid_alive(child):
            os.kill(child, 9)
        jobtpu(home, "kill", str(job), check=False)


def test_doctor_lists_a_live_process_of_an_ended_job_and_fix_stops_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, _src(tmp_path), f"setsid sleep 300 > /dev/null 2>&1 & echo $! > {shlex.quote(str(tmp_path))}/left.pid")
    manage_until(home, [job], {"finished"})
    left = _pid(tmp_path / "left.pid")
    try:
        assert pid_alive(left)
        found = jobtpu(home, "doctor", "local", check=False)
        assert found.returncode == 1, found.stderr
        assert (f"problem: job {job} attempt 0 worker 0 (process {left}) still runs here but state.json has "
                f"the job finished" in found.stderr), found.stderr
        fixed = jobtpu(home, "doctor", "local", "--fix")
        assert f"ok: stopped job {job} attempt 0 worker 0" in fixed.stderr, fixed.stderr
        wait_for(lambda: not pid_alive(left), timeout=10, what="the leftover process to end")
    finally:
        if pid_alive(left):
            os.kill(left, 9)


# ---- the job's environment cannot break the wrapper -------------------------------------------------

CHECK_ENV = ('if [ -e "../../meta/$JOBTPU_JOB_ID/$JOBTPU_ATTEMPT.$JOBTPU_WORKER.env" ]; then echo present; '
             'else echo gone; fi > envfile.txt; '
             'printf "%s\\n" "$PATH" "$FROM_HOME" "$CHAINED" "$RUN" "$LITERAL" "$NOT_RUN" "$WANDB_API_KEY" > got.txt; '
             'command -v rm > /dev/null')


def test_an_env_path_that_uses_the_worker_s_path_runs_and_nothing_of_it_runs_a_command(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, _src(tmp_path), CHECK_ENV,
                 "--env", "PATH=/opt/nowhere/bin:$PATH", "--env", "FROM_HOME=${HOME}/data",
                 "--env", "CHAINED=$FROM_HOME/x", "--env", "RUN=r$JOBTPU_WORKER-$NO_SUCH_VAR.",
                 "--env", "LITERAL=\\$HOME", "--env", f"NOT_RUN=$(touch {tmp_path}/pwned) `touch {tmp_path}/pwned`",
                 "--env", "WANDB_API_KEY=k$HOME")
    jobs = manage_until(home, [job], {"finished", "failed"})
    folder = home / "run" / "jobs" / str(job)
    assert (jobs[job]["status"], jobs[job]["exit_code"]) == ("finished", 0), (jobs[job], _log(home, job))
    assert (folder / "envfile.txt").read_text() == "gone\n"  # deleted before the command started
    got = (folder / "got.txt").read_text().split("\n")
    login = job_environment()  # a local job's $PATH and $HOME are a login's, not the pass's (§8.2)
    assert got[:7] == [f"/opt/nowhere/bin:{login['PATH']}", f"{login['HOME']}/data",
                       f"{login['HOME']}/data/x", "r0-.", "$HOME",
                       f"$(touch {tmp_path}/pwned) `touch {tmp_path}/pwned`",
                       "k$HOME"]  # a secret's value is never expanded
    assert not (tmp_path / "pwned").exists()
    assert not list((home / "run" / "meta" / str(job)).glob("*.env"))


def test_an_env_path_without_the_system_folders_still_runs_and_ends(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, _src(tmp_path), 'echo "$PATH" > path.txt; exit 4', "--env", "PATH=/opt/nowhere",
                 "--env", "API_TOKEN=t")
    jobs = manage_until(home, [job], {"finished", "failed"})
    assert (jobs[job]["status"], jobs[job]["exit_code"]) == ("failed", 4), (jobs[job], _log(home, job))
    assert (home / "run" / "jobs" / str(job) / "path.txt").read_text() == "/opt/nowhere\n"
    assert not list((home / "run" / "meta" / str(job)).glob("*.env"))


def test_env_names_the_wrapper_itself_uses_cannot_break_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    names = ["BASH", "IFS", "i", "n", "x", "s", "_p", "_t"]
    job = submit(home, _src(tmp_path), 'printf "%s\\n" "$i" "$n" "$x" "$s" "$_p" "$_t" > got.txt',
                 *[arg for n in names for arg in ("--env", f"{n}={n.lower()}-value")])
    jobs = manage_until(home, [job], {"finished", "failed"})
    assert (jobs[job]["status"], jobs[job]["exit_code"]) == ("finished", 0), (jobs[job], _log(home, job))
    got = (home / "run" / "jobs" / str(job) / "got.txt").read_text().split("\n")
    assert got[:6] == ["i-value", "n-value", "x-value", "s-value", "_p-value", "_t-value"]


def _log(home: Path, job: int) -> str:
    path = home / "logs" / str(job) / "0.0.log"
    return path.read_text() if path.exists() else ""


# ---- tail -f -------------------------------------------------------------------------------------------

def test_tail_follow_ends_with_the_job_s_exit_code_without_a_pass(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, _src(tmp_path), "echo first; sleep 2; echo last; exit 3")
    manage_until(home, [job], {"running"})
    follow = subprocess.Popen([*JOBTPU, "--home", str(home), "tail", "-f", str(job)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "JOBTPU_USER": "tester"})
    try:
        out, err = follow.communicate(timeout=20)  # no pass runs meanwhile
    finally:
        if follow.poll() is None:
            follow.kill()
    assert follow.returncode == 3, err
    assert out.split() == ["first", "last"]
    assert status(home)[job]["status"] == "running"  # only tail saw the end: no pass ran


def test_a_damaged_home_id_is_one_clear_line_and_launches_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, _src(tmp_path), "echo hi")
    (home / "home_id").write_text("not an id\n")
    done = jobtpu(home, "manage", check=False)
    assert done.returncode == 1
    assert "home_id does not hold a home id" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert status(home)[job]["status"] == "queued"
    assert not (home / "run" / "meta").exists()
