"""End to end on the built-in local machine, through the real CLI and real processes."""

from __future__ import annotations

import json
import os
import pty
import pwd
import re
import select
import signal
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests.helpers import (
    JOBTPU,
    jobtpu,
    make_home,
    manage_until,
    pid_alive,
    status,
    submit,
    wait_for,
    write_tree,
)


def _src(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    return write_tree(tmp_path / "src", files)


def test_environment_cwd_and_gitignore(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 2, "gpu": 4}}})
    src = _src(tmp_path, {
        "job.py": "import json, os\njson.dump({'cwd': os.getcwd(), 'files': sorted(os.listdir('.')),"
                  " 'env': {k: v for k, v in os.environ.items() if k.startswith(('JOBTPU_', 'CUDA_', 'MY_'))}},"
                  " open('out.json', 'w'))\n",
        ".gitignore": "big.bin\n",
        "big.bin": os.urandom(5 * 1024 * 1024),
    })
    job_id = submit(home, src, "python3 job.py", "--req", "gpu=2", "--env", "MY_VAR=x y")
    jobs = manage_until(home, [job_id], {"finished"})
    assert jobs[job_id]["reason"] is None and jobs[job_id]["exit_code"] == 0
    folder = home / "run" / "jobs" / str(job_id)
    out = json.loads((folder / "out.json").read_text())
    assert Path(out["cwd"]).resolve() == folder.resolve()
    assert "big.bin" not in out["files"] and "job.py" in out["files"]
    # The marker that finds every process of the job: this home's id, job, attempt, worker.
    assert re.fullmatch(rf"[0-9a-f]{{16}}\.{job_id}\.0\.0", out["env"].pop("JOBTPU_MARK"))
    # Where jobtpu.save_result writes, beside the worker's log (docs/reference/job-environment.md §8.2).
    assert out["env"].pop("JOBTPU_RESULT") == str((home / "run" / "meta" / str(job_id) / "0.0.result").resolve())
    assert out["env"] == {"JOBTPU_JOB_ID": str(job_id), "JOBTPU_ATTEMPT": "0", "JOBTPU_RESUME": "0",
                          "JOBTPU_WORKER": "0", "JOBTPU_NUM_WORKERS": "1", "JOBTPU_MACHINE": "local",
                          "JOBTPU_GPU": "0,1", "CUDA_VISIBLE_DEVICES": "0,1", "MY_VAR": "x y",
                          # Where it runs (§8.2): the local machine has no zone nor accelerator.
                          "JOBTPU_ZONE": "", "JOBTPU_REGION": "", "JOBTPU_NODE": socket.gethostname(),
                          "JOBTPU_ACCELERATOR": ""}
    archive = home / "archives" / jobs[job_id]["archive"]
    with tarfile.open(archive) as tar:
        names = {m.name.removeprefix("./") for m in tar.getmembers()}
    assert "big.bin" not in names and "job.py" in names


PASS_ONLY = {"SSH_AUTH_SOCK": "/x", "AWS_SECRET_ACCESS_KEY": "y", "SOME_RANDOM": "z"}
BASH_OWN = {"PWD", "OLDPWD", "SHLVL", "_"}  # what bash itself sets in every command it starts


def test_a_local_job_gets_a_login_s_environment_and_nothing_else_of_the_pass_s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reference/job-environment.md §8.2: whoever runs manage lends a local job nothing of its own
    environment (its ssh agent, cloud keys, anything else): the job sees what a login of the account
    gets, jobtpu's JOBTPU_* and its --env values."""
    from jobtpu.transport.local import job_environment

    for name, value in PASS_ONLY.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_TIME", "C.UTF-8")  # how the account reads dates: kept
    home = make_home(tmp_path)
    src = _src(tmp_path, {"job.py": "import json, os\njson.dump(dict(os.environ), open('env.json', 'w'))\n"})
    job_id = submit(home, src, "python3 job.py", "--env", "MY_VAR=x y", "--env", "MY_TOKEN=t0k",
                    "--env", "FROM_PATH=$PATH")
    assert manage_until(home, [job_id], {"finished", "failed"})[job_id]["status"] == "finished"
    env = json.loads((home / "run" / "jobs" / str(job_id) / "env.json").read_text())
    assert not set(PASS_ONLY) & set(env), env
    account = pwd.getpwuid(os.geteuid())
    login = job_environment()
    assert (env["HOME"], env["USER"], env["LOGNAME"], env["SHELL"]) == (
        account.pw_dir, account.pw_name, account.pw_name, account.pw_shell)
    assert env["PATH"] == env["FROM_PATH"] == login["PATH"] and "/usr/bin" in env["PATH"].split(":")
    assert (env["MY_VAR"], env["MY_TOKEN"], env["JOBTPU_JOB_ID"], env["LC_TIME"]) == ("x y", "t0k", str(job_id), "C.UTF-8")
    allowed = {"HOME", "USER", "LOGNAME", "SHELL", "PATH", "LANG", "TZ", "TMPDIR", "MY_VAR", "MY_TOKEN", "FROM_PATH"}
    assert {k for k in env if not k.startswith(("JOBTPU_", "LC_"))} - allowed - BASH_OWN == set(), env


@pytest.mark.parametrize(("uid", "environment", "login_defs", "path"), [
    (1000, "", "", "/usr/local/bin:/usr/bin:/bin"),
    (0, "", "", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    (1000, "", "ENV_SUPATH\tPATH=/s:/sbin\nENV_PATH\tPATH=/u:/bin\n", "/u:/bin"),
    (0, "", "ENV_SUPATH\tPATH=/s:/sbin\nENV_PATH\tPATH=/u:/bin\n", "/s:/sbin"),
    (1000, "", "# ENV_PATH PATH=/commented\nENV_PATH /no/prefix\n", "/no/prefix"),
    (1000, 'LANG=C\nPATH="/etc/env:/bin"\n', "ENV_PATH PATH=/u:/bin\n", "/etc/env:/bin"),  # pam_env sets it last
    (1000, "#PATH=/commented\n", "ENV_PATH PATH=/u:/bin\n", "/u:/bin"),
])
def test_a_local_job_s_path_is_the_one_a_login_starts_with(uid: int, environment: str, login_defs: str,
                                                           path: str) -> None:
    from jobtpu.transport.local import login_path

    assert login_path(uid, environment, login_defs) == path


def test_the_login_environment_keeps_only_the_account_s_own_and_its_locale() -> None:
    from jobtpu.transport.local import login_environment

    account = pwd.struct_passwd(("ann", "x", 1000, 1000, "", "/home/ann", "/bin/zsh"))
    passing = {**PASS_ONLY, "HOME": "/elsewhere", "USER": "bob", "PATH": "/venv/bin", "JOBTPU_HOME": "/h",
               "LANG": "de_DE.UTF-8", "LC_ALL": "C", "TZ": "UTC", "TMPDIR": "/scratch", "PYTHONPATH": "/p"}
    assert login_environment(passing, account, "/usr/bin:/bin") == {
        "HOME": "/home/ann", "USER": "ann", "LOGNAME": "ann", "SHELL": "/bin/zsh", "PATH": "/usr/bin:/bin",
        "LANG": "de_DE.UTF-8", "LC_ALL": "C", "TZ": "UTC", "TMPDIR": "/scratch"}
    # An account the passwd database does not know keeps the HOME and names it has, and nothing more.
    assert login_environment(passing, None, "/bin") == {"HOME": "/elsewhere", "USER": "bob", "PATH": "/bin",
                                                        "LANG": "de_DE.UTF-8", "LC_ALL": "C", "TZ": "UTC",
                                                        "TMPDIR": "/scratch"}


def test_failing_job_reports_its_exit_code(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"fail.sh": "echo about to fail\nexit 3\n"})
    job_id = submit(home, src, "bash fail.sh")
    job = manage_until(home, [job_id], {"failed"})[job_id]
    assert (job["status"], job["reason"], job["exit_code"]) == ("failed", "exit 3", 3)
    assert job["attempts"][0]["outcome"] == "exit 3"
    assert job["last_line"] == "about to fail"
    assert jobtpu(home, "tail", str(job_id)).stdout == "about to fail\n"


def test_a_progress_marker_is_never_the_line_status_shows(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"fail.sh": "echo epoch 1 done\necho JOBTPU_PROGRESS step=5 checkpoint=0\nexit 3\n"})
    job_id = submit(home, src, "bash fail.sh")
    job = manage_until(home, [job_id], {"failed"})[job_id]
    assert job["last_line"] == "epoch 1 done"  # the marker is for `report`, not for people
    assert "JOBTPU_PROGRESS" not in jobtpu(home, "status", "--all").stdout


def test_a_failure_is_classified_from_the_log_s_end_even_when_the_pull_is_behind(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    # 8 MiB of output, then the real cause; a pass pulls at most 1 MiB of a worker's log.
    src = _src(tmp_path, {"big.sh": "head -c 8388608 /dev/zero | tr '\\0' x; echo\n"
                                    "echo 'RESOURCE_EXHAUSTED: Out of memory while trying to allocate'; exit 1\n"})
    job_id = submit(home, src, "bash big.sh")
    job = manage_until(home, [job_id], {"failed"})[job_id]
    assert (job["reason"], job["exit_code"]) == ("oom", 1)


def test_status_table_is_one_row_per_job_however_long_the_last_log_line(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"talk.sh": "echo " + "loss=0.123 " * 30 + "\n"})
    job_id = submit(home, src, "bash talk.sh", "--name", "chatty")
    manage_until(home, [job_id], {"finished"})
    lines = jobtpu(home, "status", env={"COLUMNS": "100"}).stdout.splitlines()
    # the header, the job (its log line cut short, not wrapped) and the count per status
    assert len(lines) == 3 and lines[2].strip() == "1 finished", lines
    assert all(len(line) <= 100 for line in lines), lines
    assert "chatty" in lines[1] and "finished" in lines[1] and lines[1].rstrip().endswith("…")


def test_doctor_finds_and_stops_a_job_that_state_json_no_longer_manages(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"long.sh": "sleep 300 & echo $! > child.pid\nwait\n"})
    dropped, kept = submit(home, src, "bash long.sh"), submit(home, src, "bash long.sh")
    manage_until(home, [dropped, kept], {"running"})
    assert "2 job worker(s) running, all managed" in jobtpu(home, "doctor", "local").stderr
    child = {i: int(wait_for(lambda i=i: (home / "run" / "jobs" / str(i) / "child.pid").read_text().strip()
                             if (home / "run" / "jobs" / str(i) / "child.pid").exists() else None))
             for i in (dropped, kept)}
    doc = json.loads((home / "state.json").read_text())
    doc["jobs"] = [j for j in doc["jobs"] if j["id"] != dropped]  # a running job deleted by hand
    (home / "state.json").write_text(json.dumps(doc))

    found = jobtpu(home, "doctor", "local", check=False)
    assert found.returncode == 1
    assert (f"problem: job {dropped} attempt 0 worker 0 (process" in found.stderr
            and f"still runs here but state.json no longer has job {dropped}; `jobtpu doctor local --fix` stops it"
            in found.stderr), found.stderr
    assert pid_alive(child[dropped])  # only reported
    fixed = jobtpu(home, "doctor", "local", "--fix")
    assert f"ok: stopped job {dropped} attempt 0 worker 0" in fixed.stderr
    wait_for(lambda: not pid_alive(child[dropped]), what="the unmanaged job's whole group to end")
    assert pid_alive(child[kept]) and status(home)[kept]["status"] == "running"
    assert jobtpu(home, "doctor", "local").returncode == 0
    jobtpu(home, "kill", str(kept))


def test_kill_ends_the_whole_process_group(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    # The job starts a child that ignores nothing and a grandchild in the background.
    src = _src(tmp_path, {"tree.sh": "sleep 300 & echo $! > child.pid\nbash -c 'sleep 300' &\n"
                                     "echo $! > grandchild.pid\nwait\n"})
    job_id = submit(home, src, "bash tree.sh")
    manage_until(home, [job_id], {"running"})
    folder = home / "run" / "jobs" / str(job_id)
    wait_for(lambda: (folder / "grandchild.pid").exists(), what="the job's children")
    pids = [int((folder / f).read_text()) for f in ("child.pid", "grandchild.pid")]
    leader = int((home / "run" / "meta" / str(job_id) / "0.0.pid").read_text().split()[0])
    assert all(pid_alive(p) for p in [leader, *pids])
    jobtpu(home, "kill", str(job_id))
    assert status(home)[job_id]["status"] == "killed" and status(home)[job_id]["reason"] == "killed"
    wait_for(lambda: not any(pid_alive(p) for p in [leader, *pids]), timeout=10, what="the group to die")
    # A later pass does not bring it back or change it.
    jobtpu(home, "manage")
    assert status(home)[job_id]["status"] == "killed"


def test_run_follow_exits_with_the_job_exit_code(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"go.sh": "for i in 1 2 3; do echo line $i; sleep 0.2; done\nexit 7\n"})
    done = jobtpu(home, "run", "--follow", "--dir", str(src), "--cmd", "bash go.sh", check=False)
    assert done.returncode == 7, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].isdigit() and lines[1:] == ["line 1", "line 2", "line 3"]
    ok = jobtpu(home, "run", "--follow", "--dir", str(src), "--cmd", "echo fine", check=False)
    assert ok.returncode == 0 and ok.stdout.splitlines()[1:] == ["fine"]
    # Ended without an exit code of its own (stopped at its --timeout): 1.
    cut = jobtpu(home, "run", "--follow", "--timeout", "1s", "--dir", str(src), "--cmd", "sleep 30", check=False)
    assert cut.returncode == 1, cut.stderr
    assert status(home)[int(cut.stdout.split()[0])]["reason"] == "timeout"


def test_timeout_and_stall(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"chatty.sh": "while true; do echo tick; sleep 0.2; done\n",
                          "quiet.sh": "echo once; sleep 300\n"})
    slow = submit(home, src, "bash chatty.sh", "--timeout", "2s")
    stuck = submit(home, src, "bash quiet.sh", "--stall", "2s")
    steady = submit(home, src, "bash chatty.sh", "--stall", "2s")
    jobs = manage_until(home, [slow, stuck], {"failed"}, timeout=40)
    assert (jobs[slow]["status"], jobs[slow]["reason"]) == ("failed", "timeout")
    assert (jobs[stuck]["status"], jobs[stuck]["reason"]) == ("failed", "hang")
    # A job whose log keeps growing is not a stall.
    assert jobs[steady]["status"] == "running"
    jobtpu(home, "kill", str(steady))
    for job_id in (slow, stuck, steady):
        leader = int((home / "run" / "meta" / str(job_id) / "0.0.pid").read_text().split()[0])
        assert not pid_alive(leader)


def test_a_time_limit_holds_on_the_worker_with_no_pass_running(tmp_path: Path) -> None:
    """docs/reference/commands.md §2.2: --timeout is kept by the job's wrapper, as slurmd keeps
    --time: one pass launches the job, none runs after, and the job is stopped at its limit all the
    same; the next pass records it as a timeout."""
    home = make_home(tmp_path)
    src = _src(tmp_path, {"long.sh": "echo started; sleep 300\n"})
    job = submit(home, src, "bash long.sh", "--timeout", "2s", "--grace", "1")
    manage_until(home, [job], {"running"})
    meta = home / "run" / "meta" / str(job)
    leader = int((meta / "0.0.pid").read_text().split()[0])
    wait_for(lambda: not pid_alive(leader), timeout=60, what="the wrapper to stop the job at its limit, no pass running")
    assert (meta / "0.0.timedout").exists() and status(home)[job]["status"] == "running"  # no pass saw it yet
    jobs = manage_until(home, [job], {"failed"})
    assert jobs[job]["reason"] == "timeout"


def test_resume_and_rerun_queue_a_new_attempt(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    script = 'echo "attempt $JOBTPU_ATTEMPT"; echo "$JOBTPU_ATTEMPT $JOBTPU_RESUME" >> seen.txt\nexit 1\n'
    src = _src(tmp_path, {"env.sh": script})
    job_id = submit(home, src, "bash env.sh")
    (src / "env.sh").write_text("echo changed >> seen.txt\n")  # docs/reference/job-environment.md §8.1: every attempt runs the snapshot
    manage_until(home, [job_id], {"failed"})
    (src / "env.sh").write_text("echo changed again >> seen.txt\n")
    jobtpu(home, "resume", str(job_id))
    assert status(home)[job_id]["status"] == "queued"
    manage_until(home, [job_id], {"failed"})
    seen_file = home / "run" / "jobs" / str(job_id) / "seen.txt"
    assert seen_file.read_text().split("\n")[:2] == ["0 0", "1 1"]  # resume keeps the folder
    jobtpu(home, "rerun", str(job_id))
    job = manage_until(home, [job_id], {"failed"})[job_id]
    assert [a["n"] for a in job["attempts"]] == [0, 1, 2] and job["attempt"] == 2
    seen = seen_file.read_text().split("\n")
    assert seen[:1] == ["2 0"]  # rerun starts from a fresh unpack of the snapshot
    assert "changed" not in "\n".join(seen)
    assert jobtpu(home, "tail", str(job_id), "--attempt", "1").stdout == "attempt 1\n"


def test_resources_are_counted(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 8, "gpu": 2}}})
    src = _src(tmp_path, {"hold.sh": 'echo "$CUDA_VISIBLE_DEVICES" > "gpus.$JOBTPU_JOB_ID"; sleep 300\n'})
    ids = [submit(home, src, "bash hold.sh", "--req", "gpu=1") for _ in range(3)]
    jobtpu(home, "manage")
    jobs = status(home)
    # Two start (a slow machine may still report one as launching), the third waits for a device.
    assert {jobs[i]["status"] for i in ids[:2]} <= {"launching", "running"} and jobs[ids[2]]["status"] == "queued"
    assert sorted(tuple(jobs[i]["alloc"]["gpu"]) for i in ids[:2]) == [(0,), (1,)]
    freed = jobs[ids[0]]["alloc"]["gpu"]
    jobtpu(home, "kill", str(ids[0]))
    jobs = manage_until(home, [ids[2]], {"running"})
    assert jobs[ids[2]]["alloc"]["gpu"] == freed  # the third job gets the device the killed one held
    folder = home / "run" / "jobs"
    written = [folder / str(i) / f"gpus.{i}" for i in ids[1:]]
    # `running` is recorded once the wrapper started the command, maybe before its first line ran
    wait_for(lambda: all(p.exists() and p.read_text().endswith("\n") for p in written), what="the jobs' device files")
    devices = {p.read_text().strip() for p in written}
    assert devices == {"0", "1"}
    jobtpu(home, "kill", *map(str, ids[1:]))


def test_clean_moves_ended_jobs_to_history(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"a.sh": "true\n"})
    done_id, other_id = submit(home, src, "bash a.sh"), submit(home, src, "bash a.sh", "--env", "API_KEY=k")
    theirs = submit(home, src, "bash a.sh", "--user", "someone")
    manage_until(home, [done_id, other_id, theirs], {"finished"})
    queued_id = submit(home, src, "bash a.sh", "--machine", "local")
    mine = json.loads(jobtpu(home, "status", "--json").stdout)["jobs"]  # docs/reference/commands.md §2.4: the current user's
    assert [j["id"] for j in mine] == [done_id, other_id, queued_id]
    jobtpu(home, "clean", "--remote")
    assert list(status(home)) == [theirs, queued_id]  # another user's ended job stays without --all-users
    assert (home / "run" / "jobs" / str(theirs)).exists()
    refused = jobtpu(home, "clean", "--all-users", check=False)  # someone's job is not tester's to clean
    assert refused.returncode == 1 and "job 3 is someone's, not tester's: clean refused" in refused.stderr
    assert list(status(home)) == [theirs, queued_id]
    jobtpu(home, "clean", "--all-users", "--force")
    assert list(status(home)) == [queued_id]
    history = [json.loads(line) for line in (home / "history.jsonl").read_text().splitlines()]
    assert [h["id"] for h in history] == [done_id, other_id, theirs]  # one line per job
    assert not (home / "run" / "jobs" / str(done_id)).exists()
    assert json.loads((home / "secrets.json").read_text()) == {}  # the cleaned job's secret went too
    manage_until(home, [queued_id], {"finished"})  # its archive, shared with the cleaned jobs, was kept


def test_second_pass_does_not_act_while_one_runs(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    import fcntl

    with open(home / "manage.lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        src = _src(tmp_path, {"a.sh": "true\n"})
        job_id = submit(home, src, "bash a.sh")  # submit does not wait for the pass
        done = jobtpu(home, "manage")
        assert "another manage pass is running" in done.stderr
        assert status(home)[job_id]["status"] == "queued"


def test_submit_returns_within_a_second_while_a_pass_waits_on_the_network(tmp_path: Path) -> None:
    import socket

    with socket.socket() as silent:  # a host that accepts TCP and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        home = make_home(tmp_path, {"local": {"kind": "local"},
                                    "mute": {"kind": "ssh", "hosts": [f"127.0.0.1:{port}"], "connect_timeout": 5}})
        src = _src(tmp_path, {"a.sh": "true\n"})
        stuck = submit(home, src, "bash a.sh", "--machine", "mute")
        manage = subprocess.Popen([*JOBTPU, "--home", str(home), "manage"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, env={**os.environ, "JOBTPU_USER": "tester"})
        try:
            wait_for(lambda: status(home)[stuck]["status"] == "launching", timeout=10,
                     what="the pass to reach the network")
            # A submit does not wait for a pass (docs/reference/commands.md §2.1): it is done while the
            # pass is still stuck on the mute host (connect_timeout, 5 s).
            late = submit(home, src, "bash a.sh")
            assert manage.poll() is None, "submit waited for the pass"
        finally:
            _, err = manage.communicate(timeout=30)
    jobs = status(home)
    assert jobs[late]["status"] == "queued" and jobs[stuck]["status"] == "queued"  # both kept by the pass
    assert "mute" in err


def test_ids_are_never_reused_even_when_state_json_forgets_them(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"a.sh": "echo hi\n"})
    first = submit(home, src, "bash a.sh")
    manage_until(home, [first], {"finished"})
    second = submit(home, src, "bash a.sh")
    manage_until(home, [second], {"finished"})
    jobtpu(home, "clean")  # both move to history.jsonl
    (home / "state.json").unlink()  # and state.json, with its next_id, is gone: refused, not a fresh start
    refused = jobtpu(home, "submit", "--dir", str(src), "--cmd", "bash a.sh", check=False)
    assert refused.returncode == 1 and "state.json is missing" in refused.stderr
    (home / "state.json").write_text('{"jobs": []}')  # an empty queue, on purpose
    third = submit(home, src, "bash a.sh")
    assert third == second + 1
    manage_until(home, [third], {"finished"})
    (home / "history.jsonl").unlink()
    (home / "last_id").unlink()
    (home / "state.json").write_text('{"jobs": []}')
    assert submit(home, src, "bash a.sh") == third + 1  # the logs still name the ids used


def test_config_aliases_and_log_stage_reach_the_command(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    doc = json.loads((home / "machines.json").read_text())
    doc["config_aliases"] = {"lr": "config.training.learning_rate"}
    (home / "machines.json").write_text(json.dumps(doc))
    src = _src(tmp_path, {"args.py": "import json, os, sys\n"
                                     "open(f\"argv.{os.environ['JOBTPU_ATTEMPT']}\", 'w').write(json.dumps(sys.argv[1:]))\n"
                                     "sys.exit(1 if os.environ['JOBTPU_ATTEMPT'] == '0' else 0)\n"})
    job_id = submit(home, src, "python3 args.py --fixed", "--log-stage", "lr=0.01", "model.depth=4")
    manage_until(home, [job_id], {"failed"})
    jobtpu(home, "resume", str(job_id))
    manage_until(home, [job_id], {"finished"})
    folder = home / "run" / "jobs" / str(job_id)
    expected = ["--fixed", "--config.training.learning_rate=0.01", "--model.depth=4"]
    assert json.loads((folder / "argv.0").read_text()) == [*expected, "--config.stage=0"]
    assert json.loads((folder / "argv.1").read_text()) == [*expected, "--config.stage=1"]


def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"a.sh": "true\n"})
    job_id = submit(home, src, "bash a.sh")
    before = (home / "state.json").read_bytes()
    out = jobtpu(home, "manage", "--dry-run").stdout
    assert f"would launch job {job_id} attempt 0 on local" in out
    assert (home / "state.json").read_bytes() == before
    assert not (home / "run").exists()


def test_dry_run_says_only_what_it_would_do_never_a_real_pass_line(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"a.sh": "true\n"})
    job_id = submit(home, src, "bash a.sh")
    out = jobtpu(home, "manage", "--dry-run").stdout
    assert out.splitlines() == [f"would launch job {job_id} attempt 0 on local (1 worker(s))"], out
    jobtpu(home, "manage")  # launched; its worker exits 0 at once
    wait_for(lambda: "would end" in (out := jobtpu(home, "manage", "--dry-run").stdout) and out, what="the end")
    out = jobtpu(home, "manage", "--dry-run").stdout
    assert out.splitlines() == [f"would end job {job_id}: every worker exited 0"], out


def test_status_watch_redraws_a_live_table(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"a.sh": "true\n"})
    submit(home, src, "bash a.sh", "--name", "first-job")
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen([*JOBTPU, "--home", str(home), "status", "--watch", "0.3"], stdout=child_fd,
                            stderr=child_fd, env={**os.environ, "JOBTPU_USER": "tester", "COLUMNS": "160"})
    os.close(child_fd)
    seen = b""
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and seen.count(b"first-job") < 2:
            if select.select([main_fd], [], [], 0.5)[0]:
                seen += os.read(main_fd, 65536)
        submit(home, src, "bash a.sh", "--name", "second-job")  # a change shows on the next redraw
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and b"second-job" not in seen:
            if select.select([main_fd], [], [], 0.5)[0]:
                seen += os.read(main_fd, 65536)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        os.close(main_fd)
    assert seen.count(b"first-job") >= 2 and b"second-job" in seen
    assert b"Traceback" not in seen


def test_manage_loop_outlives_a_broken_machines_json(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    good = (home / "machines.json").read_text()
    src = _src(tmp_path, {"a.sh": "echo looped\n"})
    said = tmp_path / "loop.err"  # a file, so the test can look while the loop runs
    with said.open("w") as err_file:
        loop = subprocess.Popen([*JOBTPU, "--home", str(home), "manage", "--loop", "0.2"], stdout=subprocess.DEVNULL,
                                stderr=err_file, text=True, env={**os.environ, "JOBTPU_USER": "tester"})
    try:
        (home / "machines.json").write_text(good.replace("{", "{,", 1))
        # Until a pass has met the broken file (not a guessed second, which a loaded machine outlasts).
        wait_for(lambda: "machines.json:1:2:" in said.read_text(), timeout=30, what="a pass to meet the broken file")
        assert loop.poll() is None, "the loop stopped at a broken machines.json"
        (home / "machines.json").write_text(good)
        job_id = submit(home, src, "bash a.sh")
        wait_for(lambda: status(home)[job_id]["status"] == "finished", timeout=30, what="the loop to run the job")
    finally:
        loop.send_signal(signal.SIGINT)
        loop.wait(timeout=10)
    err = said.read_text()
    assert "machines.json:1:2:" in err and "Traceback" not in err


def test_manage_loop_outlives_a_pass_that_fails_unexpectedly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from jobtpu.cli import main
    from jobtpu.passes import manage

    home = make_home(tmp_path)
    real, calls = manage.run_pass, []

    def flaky(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        if len(calls) == 3:
            raise KeyboardInterrupt  # the user stops the loop
        return real(*args, **kwargs)

    monkeypatch.setattr(manage, "run_pass", flaky)
    assert main(["--home", str(home), "manage", "--loop", "0.01"]) == 130
    assert len(calls) == 3  # the failed pass did not end the loop
    err = capsys.readouterr().err
    assert "jobtpu: the pass failed; trying again next round" in err and "No space left on device" in err
    monkeypatch.setattr(manage, "run_pass", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space")))
    assert main(["--home", str(home), "manage"]) == 1  # a single pass still fails, with one line
    assert capsys.readouterr().err.startswith("jobtpu: error: No space")


def test_tail_follow_streams_between_passes_and_stops_when_the_job_ends(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"slow.sh": "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.3; done\n"})
    job_id = submit(home, src, "bash slow.sh")
    manage_until(home, [job_id], {"running"})
    follow = subprocess.Popen([*JOBTPU, "--home", str(home), "tail", "-f", str(job_id)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "JOBTPU_USER": "tester"})
    try:
        assert follow.stdout is not None
        # No pass runs meanwhile: tail -f pulls the new lines itself.
        seen = [follow.stdout.readline().strip() for _ in range(6)]
        assert seen == [f"line {i}" for i in range(1, 7)]
        manage_until(home, [job_id], {"finished"})
        assert follow.wait(timeout=15) == 0
    finally:
        if follow.poll() is None:
            follow.kill()


def test_secret_env_values_stay_out_of_state_listings_and_command_lines(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    secret = "s3cr3t-v@lue-$(whoami)"
    src = _src(tmp_path, {"job.sh": 'printf %s "$WANDB_API_KEY" > got.txt; echo "$PLAIN" > plain.txt\n'
                                    # every command line in the job's process group, the wrapper's too
                                    "g=$(ps -o pgid= -p $$ | tr -d ' ')\n"
                                    "ps -eo pgid=,args= | awk -v g=\"$g\" '$1 == g' > cmdline.txt\n"})
    job_id = submit(home, src, "bash job.sh", "--env", f"WANDB_API_KEY={secret}", "--env", "PLAIN=visible")
    jobs = manage_until(home, [job_id], {"finished"})
    folder = home / "run" / "jobs" / str(job_id)
    assert (folder / "got.txt").read_text() == secret  # the job gets the real value
    assert "bash -c" in (folder / "cmdline.txt").read_text()  # the wrapper was seen
    assert jobs[job_id]["env"]["WANDB_API_KEY"] == "<secret>"  # and no listing, state file or command line shows it:
    for text in (jobtpu(home, "status", "--json").stdout, (home / "state.json").read_text(),
                 (home / "state.json.bak").read_text(), (folder / "cmdline.txt").read_text()):
        assert "s3cr3t" not in text
    assert "visible" in (home / "state.json").read_text()  # other --env values are ordinary
    assert (home / "secrets.json").stat().st_mode & 0o077 == 0
    assert not list((home / "run" / "meta" / str(job_id)).glob("*.env"))  # read, then deleted
    # A resumed attempt gets the real value again; what a pass prints never shows it.
    (folder / "got.txt").unlink()
    jobtpu(home, "resume", str(job_id))
    printed = [jobtpu(home, "manage", "--dry-run").stdout]
    printed.append(jobtpu(home, "manage").stderr)
    manage_until(home, [job_id], {"finished"})
    assert (folder / "got.txt").read_text() == secret
    assert printed[1] and all("s3cr3t" not in text for text in printed), printed
    jobtpu(home, "clean")
    assert "s3cr3t" not in (home / "secrets.json").read_text()


def test_every_act_says_what_it_changed_and_a_new_home_says_where(tmp_path: Path) -> None:
    home = tmp_path / "new-home"
    src = _src(tmp_path, {"a.sh": "sleep 300\n"})
    made = jobtpu(home, "submit", "--dir", str(src), "--cmd", "bash a.sh")
    assert made.stderr.splitlines() == [f"new home {home}"], made.stderr  # once, with the real path
    second = jobtpu(home, "submit", "--dir", str(src), "--cmd", "bash a.sh", "--name", "two")
    assert "new home" not in second.stderr, second.stderr
    first, other = int(made.stdout), int(second.stdout)
    assert jobtpu(home, "user", "add", "tester").stderr == "added tester to this home's users\n"
    assert jobtpu(home, "hold", str(other)).stdout == f"hold job {other} (queued, two)\n"
    assert jobtpu(home, "release", str(other)).stdout == f"release job {other} (queued, two)\n"
    assert jobtpu(home, "kill", str(first), str(other)).stdout.splitlines() == [
        f"kill job {first} (queued)", f"kill job {other} (queued, two)"]
    assert jobtpu(home, "clean", str(first)).stdout == f"clean job {first} (killed)\n"
    assert jobtpu(home, "resume", str(other)).stdout == f"{other}\n"  # its id, as ever


def test_ctrl_c_in_run_follow_leaves_the_job_running_and_says_how_to_follow_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = _src(tmp_path, {"a.sh": "echo started; sleep 300\n"})
    proc = subprocess.Popen([*JOBTPU, "--home", str(home), "run", "--follow", "--dir", str(src), "--cmd", "bash a.sh"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "JOBTPU_USER": "tester"})
    assert proc.stdout is not None
    job_id = int(proc.stdout.readline())
    assert proc.stdout.readline() == "started\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.splitlines()[-1] == (f"jobtpu: stopped following job {job_id}; the job goes on "
                                    f"(`jobtpu tail -f {job_id}` follows it again)"), err
    assert status(home)[job_id]["status"] == "running"
    jobtpu(home, "kill", str(job_id))


@pytest.mark.fast
def test_a_run_root_half_made_by_another_launch_does_not_make_a_shared_homes_jobs_private(tmp_path: Path) -> None:
    """Two launches of one pass in two threads: one has just made `run` under the pass's umask (0700,
    its shared modes a moment later) when the other asks whether its run root is shared."""
    from jobtpu.fleet.drivers import driver_for
    from jobtpu.fleet.reach import Reach
    from jobtpu.home.layout import Home
    from jobtpu.home.machines import load_fleet
    from jobtpu.schema.state import State

    home = make_home(tmp_path)
    home.chmod(0o2770)
    (home / "run").mkdir(mode=0o700)
    fleet = load_fleet(Home(home))
    machine = fleet.machines["local"]
    reach = Reach(Home(home), fleet, State())
    made = driver_for(machine).transport(machine, reach.endpoints(machine)[0], Home(home))
    assert made.shared and made.umask == "umask 0027\n"  # type: ignore[attr-defined]


def test_a_pass_that_sees_a_local_job_end_asks_its_worker_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reference/pass.md §1: the probe that found a worker exited, its whole log brought home and
    nothing of its job left, is all the catch-up would find: the pass between a job's end and the
    next start makes one round trip to the worker, not two, and the log and the job's saved value
    still come home."""
    from jobtpu.remote import scripts  # the local machine's driver renders its probes from here

    home = make_home(tmp_path)
    job_id = submit(home, _src(tmp_path, {"a.txt": "x"}), "echo hello; printf '[1, 2]\\n' > \"$JOBTPU_RESULT\"")
    manage_until(home, [job_id], {"running", "finished"})
    wait_for(lambda: (home / "run" / "meta" / str(job_id) / "0.0.exit").exists(), what="the job's exit record")
    real, probes = scripts.probe_script, []
    monkeypatch.setattr(scripts, "probe_script", lambda *a, **k: probes.append(a) or real(*a, **k))
    manage_until(home, [job_id], {"finished"})
    assert len(probes) == 1
    assert (home / "logs" / str(job_id) / "0.0.log").read_text() == "hello\n"
    assert json.loads((home / "logs" / str(job_id) / "0.result.json").read_text()) == {"value": [1, 2]}


@pytest.mark.parametrize(("exit_code", "marked", "at_home", "whole"), [
    (0, 0, 10, True),     # exited, nothing left, every byte home: a probe now brings nothing
    (1, 0, 12, True),     # a failure too (home holds more than the report said: another pass pulled)
    (None, 0, 10, False),  # still running: its log may grow
    (0, 1, 10, False),    # an escapee carries its marker and may write on
    (0, 0, 9, False),     # a byte still to pull
])
def test_a_probe_s_report_is_the_catch_up_only_when_it_brought_the_whole_log(
        exit_code: int | None, marked: int, at_home: int, whole: bool) -> None:
    from jobtpu.decide.workers import WorkerRef, WorkerState
    from jobtpu.fleet.pulls import brought_whole

    ws = WorkerState(WorkerRef(1, 0, 0), pid=5, alive=False, exit_code=exit_code, log_size=10, claimed=True, marked=marked)
    assert brought_whole(ws, at_home) is whole
