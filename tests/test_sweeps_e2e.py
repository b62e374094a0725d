"""Sweeps, dependencies, retries, hold/release, grace and --signal, end to end through the CLI on the
local machine: real processes, real files."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from tests.helpers import jobtpu, make_home, manage, manage_until, status, submit, wait_for, write_tree
from tests.sshfleet import SshFleet

SHOW = "import json, os, sys\n" \
       "json.dump({'argv': sys.argv[1:], 'sweep': os.environ.get('JOBTPU_SWEEP'),\n" \
       "           'index': os.environ.get('JOBTPU_SWEEP_INDEX')}, open('out.json', 'w'))\n"


def _home(tmp_path: Path, slots: int = 8) -> Path:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": slots}}})
    doc = json.loads((home / "machines.json").read_text())
    doc["config_aliases"] = {"lr": "config.training.learning_rate"}
    (home / "machines.json").write_text(json.dumps(doc))
    return home


def _ids(text: str) -> list[int]:
    first, _, last = text.strip().partition("-")
    return list(range(int(first), int(last or first) + 1))


def _listed(out: str) -> list[int]:
    """The job ids a bulk command said it acts on (`kill job 12 (...)`, `would kill job 12 (...)`)."""
    return [int(re.search(r"\bjob (\d+) ", line)[1]) for line in out.splitlines()]  # type: ignore[index]


def test_sweep_runs_every_combination_from_one_archive(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"show.py": SHOW})
    out = jobtpu(home, "submit", "--dir", str(src), "--cmd", "python3 show.py", "--sweep", "lr=0.1,0.01",
                 "--sweep", "bs=32,64,128", "--tag", "grid").stdout
    ids = _ids(out)
    assert out.strip() == f"{ids[0]}-{ids[0] + 5}" and len(ids) == 6
    jobs = status(home)
    assert len({jobs[i]["archive"] for i in ids}) == 1, "one snapshot for the whole sweep"
    assert len(list((home / "archives").glob("*.tar.gz"))) == 1
    assert all(jobs[i]["tags"] == ["grid", f"sweep:{ids[0]}"] for i in ids)
    jobs = manage_until(home, ids, {"finished"})
    seen = []
    for i in ids:
        got = json.loads((home / "run" / "jobs" / str(i) / "out.json").read_text())
        assert got["sweep"] == str(ids[0])
        seen.append((got["index"], got["argv"]))
    assert seen == [(str(n), [f"--config.training.learning_rate={lr}", f"--config.training.batch_size={bs}"])
                    for n, (lr, bs) in enumerate((lr, bs) for lr in ("0.1", "0.01") for bs in ("32", "64", "128"))]
    table = jobtpu(home, "status", "--sweep", str(ids[0])).stdout
    assert f"sweep {ids[0]}: 6 finished" in table


def test_status_and_kill_of_a_sweep(tmp_path: Path) -> None:
    home = _home(tmp_path, slots=2)
    src = write_tree(tmp_path / "src", {"run.sh": 'case "$1" in *=0) exit 0;; *=1) exit 3;; esac; sleep 60\n'})
    ids = _ids(jobtpu(home, "submit", "--dir", str(src), "--cmd", "bash run.sh", "--sweep", "k=0,1,2,3,4,5").stdout)
    other = submit(home, src, "sleep 60")
    jobs = manage_until(home, ids[:2], {"finished", "failed"})
    assert jobs[ids[0]]["status"] == "finished" and jobs[ids[1]]["reason"] == "exit 3"
    wait_for(lambda: {manage(home)[i]["status"] for i in ids[2:4]} == {"running"}, what="two more to run")
    line = jobtpu(home, "status", "--sweep", str(ids[0])).stdout
    assert f"sweep {ids[0]}: 1 finished, 2 running, 2 queued, 1 failed" in line, line
    dry = jobtpu(home, "kill", "--sweep", str(ids[0]), "--dry-run").stdout
    assert _listed(dry) == ids[2:]
    assert all(ln.startswith("would kill job") for ln in dry.splitlines())
    assert status(home)[ids[2]]["status"] == "running", "--dry-run changes nothing"
    done = jobtpu(home, "kill", "--sweep", str(ids[0])).stdout
    assert _listed(done) == ids[2:] and all(ln.startswith("kill job") for ln in done.splitlines())
    jobs = status(home)
    assert [jobs[i]["status"] for i in ids] == ["finished", "failed", "killed", "killed", "killed", "killed"]
    assert jobs[other]["status"] == "queued", "a job outside the sweep is left alone"
    summary = jobtpu(home, "status", "--sweep", str(ids[0])).stdout
    assert f"sweep {ids[0]}: 1 finished, 1 failed, 4 killed" in summary


def test_sweep_file_and_bad_sweeps_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"show.py": SHOW})
    (tmp_path / "grid.csv").write_text("lr,seed\n0.1,1\n0.2,2\n")
    ids = _ids(jobtpu(home, "submit", "--dir", str(src), "--cmd", "python3 show.py",
                      "--sweep-file", str(tmp_path / "grid.csv")).stdout)
    assert [status(home)[i]["overrides"] for i in ids] == [
        ["--config.training.learning_rate=0.1", "--seed=1"], ["--config.training.learning_rate=0.2", "--seed=2"]]
    before = (home / "state.json").read_bytes()
    for bad in (["--sweep", "lr"], ["--sweep", "lr=1,1"], ["--sweep-file", str(tmp_path / "none.csv")],
                ["--sweep", "lr=1", "--sweep-file", str(tmp_path / "grid.csv")]):
        done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", *bad, check=False)
        assert done.returncode == 1 and done.stderr.startswith("jobtpu: error: ") and "--sweep" in done.stderr
        assert "Traceback" not in done.stderr
    done = jobtpu(home, "run", "--follow", "--dir", str(src), "--cmd", "true", "--sweep", "k=1,2", check=False)
    assert done.returncode == 1 and "run --follow follows one job" in done.stderr
    assert (home / "state.json").read_bytes() == before


def test_after_waits_for_the_training_job(tmp_path: Path) -> None:
    home = _home(tmp_path)
    # The training job runs until the test opens its gate (not for a guessed 4 s, which a loaded
    # machine outlasts before the test has looked); it gives up after a minute so nothing hangs.
    train_sh = "for _ in $(seq 600); do [ -e ../go ] && break; sleep 0.1; done; date +%s.%N > ../train.done\n"
    src = write_tree(tmp_path / "src", {"train.sh": train_sh,
                                        "eval.sh": "test -e ../train.done && date +%s.%N > ../eval.started\n"})
    train = submit(home, src, "bash train.sh")
    evaluate = submit(home, src, "bash eval.sh", "--after", str(train))
    jobs = manage(home)  # the eval is offered a machine after the training job took one: it waits
    assert jobs[evaluate]["waiting"] == f"waits for job {train} (launching)"
    jobs = manage(home)
    assert jobs[train]["status"] == "running" and jobs[evaluate]["status"] == "queued"
    assert jobs[evaluate]["waiting"] == f"waits for job {train} (running)"
    # (wide enough for the whole reason: at 80 columns the last column is cut short)
    assert f"waits for job {train} (running)" in jobtpu(home, "status", "--all", env={"COLUMNS": "200"}).stdout
    (home / "run" / "jobs" / "go").touch()
    jobs = manage_until(home, [evaluate], {"finished", "failed"})
    assert jobs[evaluate]["status"] == "finished", jobs[evaluate]
    assert float((home / "run" / "jobs" / "eval.started").read_text()) > \
        float((home / "run" / "jobs" / "train.done").read_text())


def test_a_failed_dependency_fails_the_job_waiting_for_it(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    train = submit(home, src, "exit 4")
    evaluate = submit(home, src, "touch ../eval.ran", "--after", str(train))
    anyway = submit(home, src, "true", "--after-any", str(train))
    jobs = manage_until(home, [evaluate, anyway], {"finished", "failed"})
    assert jobs[train]["reason"] == "exit 4"
    assert (jobs[evaluate]["status"], jobs[evaluate]["reason"]) == ("failed", "dependency")
    assert f"job {train}" in jobs[evaluate]["last_line"] and not jobs[evaluate]["attempts"]
    assert not (home / "run" / "jobs" / "eval.ran").exists()
    assert jobs[anyway]["status"] == "finished", "--after-any waits for the end, whatever it was"
    # An --after on a job that already failed could never start: refused at submit.
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--after", str(train), check=False)
    assert done.returncode == 1 and f"job {train} already ended failed" in done.stderr


def test_unknown_ids_and_cycles_are_refused_at_submit(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    first = submit(home, src, "true")
    before = (home / "state.json").read_bytes()
    for after, words in ((["--after", "999"], "there is no job 999"),
                         (["--after", str(first + 1)], f"job {first + 1} cannot wait for itself"),
                         (["--after-any", "x"], "job ids are positive numbers")):
        done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", *after, check=False)
        assert done.returncode == 1 and words in done.stderr, done.stderr
    assert (home / "state.json").read_bytes() == before
    # A cycle through a hand edit: job 1 is made to wait for the next id; that job may not wait for job 1.
    state = json.loads((home / "state.json").read_text())
    state["jobs"][0]["after"] = [first + 1]
    (home / "state.json").write_text(json.dumps(state))
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--after", str(first), check=False)
    assert done.returncode == 1 and "dependency cycle" in done.stderr, done.stderr
    assert len(status(home)) == 1


def test_retries_finish_on_a_later_attempt_counted_apart_from_recoveries(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {
        "flaky.sh": "n=$(cat ../../count 2>/dev/null || echo 0); echo $((n + 1)) > ../../count\n"
                    "[ \"$n\" -ge 2 ] || exit 7\n"})
    job = submit(home, src, "bash flaky.sh", "--retries", "2")
    jobs = manage_until(home, [job], {"finished", "failed"})
    assert jobs[job]["status"] == "finished" and jobs[job]["attempt"] == 2
    assert [a["outcome"] for a in jobs[job]["attempts"]] == ["exit 7", "exit 7", "finished"]
    assert jobs[job]["retried"] == 2 and jobs[job].get("recoveries", 0) == 0
    assert "2 (2/2 retry)" in jobtpu(home, "status", str(job)).stdout


def test_retries_end_failed_once_spent(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    job = submit(home, src, "exit 5", "--retries", "1")
    jobs = manage_until(home, [job], {"failed"})
    assert [a["outcome"] for a in jobs[job]["attempts"]] == ["exit 5", "exit 5"]
    assert jobs[job]["reason"] == "exit 5" and jobs[job]["retried"] == 1
    # A timeout is never retried.
    slow = submit(home, src, "sleep 30", "--retries", "3", "--timeout", "1")
    jobs = manage_until(home, [slow], {"failed"})
    assert jobs[slow]["reason"] == "timeout" and len(jobs[slow]["attempts"]) == 1


def test_hold_then_release(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    held = submit(home, src, "true", "--name", "held-a")
    other = submit(home, src, "true", "--name", "held-b")
    free = submit(home, src, "true", "--name", "free")
    out = jobtpu(home, "hold", "--name", "held-*").stdout
    assert out.splitlines() == [f"hold job {held} (queued, held-a)", f"hold job {other} (queued, held-b)"]
    jobs = manage_until(home, [free], {"finished"})
    assert jobs[held]["status"] == "queued" and jobs[held]["waiting"] == "held by hold"
    jobs = manage(home)
    assert jobs[other]["status"] == "queued"
    done = jobtpu(home, "hold", str(free))
    assert f"job {free} is finished; only a queued job is held" in done.stderr and not status(home)[free].get("held")
    assert jobtpu(home, "release", "--name", "held-*", "--dry-run").stdout.splitlines() == [
        f"would release job {held} (queued, held-a)", f"would release job {other} (queued, held-b)"]
    assert status(home)[held]["held"], "--dry-run changes nothing"
    jobtpu(home, "release", str(held), str(other))
    jobs = manage_until(home, [held, other], {"finished"})
    assert not jobs[held].get("held")


def test_selectors_need_a_choice_and_say_what_is_wrong(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    job = submit(home, src, "true", "--tag", "a")
    for command in ("kill", "hold", "release", "resume", "rerun"):
        done = jobtpu(home, command, check=False)
        assert done.returncode == 2 and "name the jobs" in done.stderr and "Traceback" not in done.stderr
    done = jobtpu(home, "kill", "--status", "bogus", check=False)
    assert done.returncode == 2
    # A selector that matches nothing says so and changes nothing.
    done = jobtpu(home, "kill", "--tag", "b")
    assert "no job to kill matches" in done.stderr and status(home)[job]["status"] == "queued"
    # Another user's jobs are chosen only when asked for.
    assert jobtpu(home, "kill", "--tag", "a", "--dry-run", env={"JOBTPU_USER": "someone"}).stdout == ""
    assert jobtpu(home, "kill", "--tag", "a", "--all-users", "--dry-run").stdout.startswith(f"would kill job {job}")


def test_resume_rerun_and_clean_take_selectors(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    ids = _ids(jobtpu(home, "submit", "--dir", str(src), "--cmd", "exit 1", "--sweep", "k=1,2").stdout)
    keep = submit(home, src, "true")
    manage_until(home, [*ids, keep], {"failed", "finished"})
    out = jobtpu(home, "rerun", "--sweep", str(ids[0]), "--status", "failed").stdout
    assert _listed(out) == ids and all(ln.startswith("rerun job") for ln in out.splitlines())
    assert {status(home)[i]["status"] for i in ids} == {"queued"}
    manage_until(home, ids, {"failed"})
    out = jobtpu(home, "clean", "--sweep", str(ids[0])).stdout
    assert _listed(out) == ids
    assert set(status(home)) == {keep}


def test_a_cleaned_dependency_is_settled_for_the_jobs_waiting_for_it(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    train = submit(home, src, "sleep 30")
    evaluate = submit(home, src, "true", "--after", str(train))
    manage(home)
    jobtpu(home, "kill", str(train))
    jobtpu(home, "clean")  # before any pass saw the kill
    jobs = status(home)
    assert (jobs[evaluate]["status"], jobs[evaluate]["reason"]) == ("failed", "dependency")
    # A finished dependency cleaned away is one less to wait for.
    quick = submit(home, src, "true")
    after_quick = submit(home, src, "true", "--after", str(quick))
    jobtpu(home, "hold", str(after_quick))
    manage_until(home, [quick], {"finished"})
    jobtpu(home, "clean")
    assert quick not in status(home) and not status(home)[after_quick].get("after")
    jobtpu(home, "release", str(after_quick))
    assert manage_until(home, [after_quick], {"finished", "failed"})[after_quick]["status"] == "finished"


def test_signal_reaches_the_job_before_its_timeout(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {
        "job.sh": "trap 'date +%s.%N > ../got.usr1' USR1\n"
                  "for _ in $(seq 200); do sleep 0.1; done\n"})
    job = submit(home, src, "bash job.sh", "--timeout", "8", "--signal", "USR1@3")
    manage(home)
    got, meta = home / "run" / "jobs" / "got.usr1", home / "run" / "meta" / str(job)
    # Events, not the wall clock (a busy machine runs all of it late): the signal or the timeout.
    wait_for(lambda: got.exists() or (meta / "0.0.timedout").exists(), timeout=60, what="the USR1 handler")
    assert got.exists(), "the timeout came and the USR1 handler never ran"
    assert status(home)[job]["status"] == "running", "the job lives on after the early signal"
    jobs = manage_until(home, [job], {"failed"})
    assert jobs[job]["reason"] == "timeout"
    # Not before its delay, counted from the wrapper's pid record, written before its timer starts (a
    # file's time lags the clock by at most a tick: the gap only looks longer), and before the
    # timeout stopped the job.
    handled = float(got.read_text())
    assert handled - (meta / "0.0.pid").stat().st_mtime >= 3.0, handled
    assert handled < (meta / "0.0.timedout").stat().st_mtime, handled
    # A job that ends before its signal is due leaves no timer behind: nothing of it runs on.
    quick = submit(home, src, "true", "--timeout", "60", "--signal", "USR1@10")
    manage_until(home, [quick], {"finished"})
    assert not _marked_processes(f"{(home / 'home_id').read_text().strip()}.{quick}.0.0")
    for bad, words in ((["--signal", "USR1@3"], "--signal needs a --timeout"),
                       (["--signal", "KILL@3", "--timeout", "9"], "is not SIG@SECONDS"),
                       (["--signal", "USR1@9", "--timeout", "9"], "not within the --timeout")):
        done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", *bad, check=False)
        assert done.returncode == 1 and words in done.stderr, done.stderr


def _marked_processes(mark: str) -> list[int]:
    """Live processes whose JOBTPU_MARK is `mark` (`<home id>.<job>.<attempt>.<worker>`)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            words = environ.read_bytes().split(b"\0")
            stat = (environ.parent / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z" and any(
                w == f"JOBTPU_MARK={mark}".encode() for w in words):
            found.append(int(environ.parent.name))
    return found


def test_grace_is_the_time_between_term_and_kill(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {
        "stubborn.sh": "trap 'date +%s.%N > ../term.$JOBTPU_JOB_ID' TERM\n"
                       "echo up > ../up.$JOBTPU_JOB_ID\nwhile :; do sleep 0.1; done\n"})
    job = submit(home, src, "bash stubborn.sh", "--grace", "8")
    manage(home)
    wait_for(lambda: (home / "run" / "jobs" / f"up.{job}").exists(), what="the job to start")
    began = time.monotonic()
    jobtpu(home, "kill", str(job))
    took = time.monotonic() - began
    assert status(home)[job]["status"] == "killed"
    # The TERM was trapped: KILL came after the grace, not after the default 5 s. (No upper bound: a
    # busy machine makes every step late, and the grace is what this shows.)
    assert took >= 8.0, took
    assert (home / "run" / "jobs" / f"term.{job}").exists()
    # A timeout stops the job with the same grace, on its worker, with no pass meanwhile
    # (docs/reference/commands.md §2.2.6); the next pass records it.
    late = submit(home, src, "bash stubborn.sh", "--timeout", "1", "--grace", "6")
    manage(home)
    meta = home / "run" / "meta" / str(late)
    wait_for(lambda: (meta / "0.0.exit").exists(), timeout=60, what="its worker to stop it at its --timeout")
    termed = float((home / "run" / "jobs" / f"term.{late}").read_text())
    assert (meta / "0.0.exit").stat().st_mtime - termed >= 6.0 - 0.2  # KILL after the grace, not before
    assert (meta / "0.0.timedout").exists()
    jobs = manage(home)
    assert (jobs[late]["status"], jobs[late]["reason"]) == ("failed", "timeout")
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--grace", "2h", check=False)
    assert done.returncode == 1 and "--grace" in done.stderr


def test_the_status_words_a_selector_takes_are_the_models() -> None:
    from jobtpu.commands.select import STATUS_NAMES
    from jobtpu.schema.state import Status

    assert tuple(s.value for s in Status) == STATUS_NAMES


def test_which_failures_a_retry_takes() -> None:
    from jobtpu.decide import rules

    assert rules.retry("pass", "exit 1", 0, 2) == rules.RESUME
    assert rules.retry("rerun", "grpc", 1, 2) == rules.RERUN
    assert rules.retry("pass", "exit 1", 2, 2) is None  # spent
    for reason in ("oom", "timeout", "killed", "hang", "lost", "launch_failed", "preempted"):
        assert rules.retry("pre", reason, 0, 5) is None, reason


def test_signal_reaches_every_worker_over_ssh_and_its_timer_leaves_nothing_behind(ssh_fleet: SshFleet,
                                                                                   tmp_path: Path) -> None:
    from tests import test_ssh_jobs as ssh

    fm = ssh_fleet.add_machine("pod", n_hosts=2)
    home = tmp_path / "home"
    ssh.write_fleet(home, ssh_fleet, {"pod": (fm, {})})
    cmd = ("trap 'echo usr1 > \"$HOME/usr1.$JOBTPU_WORKER\"' USR1\n"
           "for _ in $(seq 300); do sleep 0.1; done")
    job = ssh.submit(home, ssh.code_dir(tmp_path), cmd, "--timeout", "6", "--signal", "USR1@4")
    ssh.manage(home)
    ssh.wait_for(lambda: all((fm.home / f"usr1.{w}").exists() for w in range(2)), what="USR1 on both workers")
    assert ssh.jobs(home)[job]["status"] == "running"
    done = ssh.manage_until(home, lambda s: s[job]["status"] == "failed", "the timeout")
    assert done[job]["reason"] == "timeout"
    assert not [a for a in ssh.live_args(fm.user) if "sleep" in a or f"jobtpu-{job}" in a]
