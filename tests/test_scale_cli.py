"""What Slurm and jittens users asked of a scheduler at scale, end to end through the CLI on the local
machine (real processes, real files): a sweep's --max-running and its values in the environment,
`update`, a drained machine, and every job of a sweep selected alone by the commands that select jobs
(docs/reference/commands.md §2.2.3, §2.9.2, §2.10; job-environment.md §8.2)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import (
    cli,
    jobtpu,
    make_home,
    manage,
    manage_until,
    passes_until,
    status,
    submit,
    write_tree,
)

SHOW = ("import json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'env': {k: v for k, v in os.environ.items()\n"
        "                                         if k.startswith('JOBTPU_SWEEP')}}, open('out.json', 'w'))\n")


def _wait_for_file(go: Path) -> str:
    """A job that runs until the test lets it end (by making `go`): its status is the test's to read.
    (Its overrides come after the command: the script hands them to show.py.)"""
    return f"GO={go} bash wait.sh"


WAIT = 'python3 show.py "$@" && while [ ! -e "$GO" ]; do sleep 0.05; done\n'


def _active(jobs: dict[int, dict[str, object]], ids: list[int]) -> list[int]:
    return [i for i in ids if jobs[i]["status"] in ("launching", "running")]


def test_a_sweep_runs_at_most_max_running_at_once_and_update_changes_the_cap(tmp_path: Path) -> None:
    home = make_home(tmp_path, slots=8)
    src = write_tree(tmp_path / "src", {"show.py": SHOW, "wait.sh": WAIT})
    go = tmp_path / "go"
    out = jobtpu(home, "submit", "--dir", str(src), "--cmd", _wait_for_file(go), "--sweep", "lr=0.1,0.2,0.3",
                 "--sweep", "model.depth=4", "--max-running", "1").stdout
    first = int(out.split("-")[0])
    ids = [first, first + 1, first + 2]
    jobs = manage(home)
    assert _active(jobs, ids) == [first]
    assert [jobs[i]["waiting"] for i in ids[1:]] == [f"sweep {first}: 1 of 1 running (--max-running)"] * 2
    table = jobtpu(home, "status", "--sweep", str(first), env={"COLUMNS": "200"}).stdout
    assert "1 of 1 running (--max-running)" in table

    code, said, err = cli(home, "update", "--sweep", str(first), "--max-running", "2")
    assert code == 0, err
    assert said.splitlines() == [f"update job {i} (queued, sweep {first} #{n}, "
                                 f"--config.training.learning_rate={lr} --model.depth=4): max_running 1 -> 2"
                                 for i, n, lr in ((first + 1, 1, "0.2"), (first + 2, 2, "0.3"))]
    jobs = manage(home)
    assert _active(jobs, ids) == [first, first + 1]
    assert jobs[first + 2]["waiting"] == f"sweep {first}: 2 of 2 running (--max-running)"
    events = jobtpu(home, "events", "--job", str(first + 1)).stdout
    assert "updated by tester: max_running 1 -> 2" in events

    go.touch()
    manage_until(home, ids, {"finished"})
    for i, lr in zip(ids, ("0.1", "0.2", "0.3"), strict=True):
        got = json.loads((home / "run" / "jobs" / str(i) / "out.json").read_text())
        assert got["env"] == {"JOBTPU_SWEEP": str(first), "JOBTPU_SWEEP_INDEX": str(i - first),
                              "JOBTPU_SWEEP_LR": lr, "JOBTPU_SWEEP_MODEL_DEPTH": "4"}
        assert got["argv"] == [f"--config.training.learning_rate={lr}", "--model.depth=4"]


def test_max_running_and_sweep_keys_that_collide_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"show.py": SHOW, "wait.sh": WAIT})
    for extra, words in ((["--max-running", "2"], "--max-running caps how many jobs of a sweep"),
                         (["--sweep", "lr-x=1,2", "--sweep", "lr_x=3"], "would both be $JOBTPU_SWEEP_LR_X")):
        done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", *extra, check=False)
        assert done.returncode == 1 and done.stderr.startswith("jobtpu: error: "), done.stderr
        assert words in done.stderr and "Traceback" not in done.stderr
    assert not (home / "state.json").exists() or status(home) == {}


def test_update_of_queued_jobs_by_their_owner_or_with_force(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 1}},
                                "other": {"kind": "local", "root": "other", "resources": {"slot": 1}}})
    src = write_tree(tmp_path / "src", {"show.py": SHOW, "wait.sh": WAIT})
    queued = submit(home, src, "true", "--hold", "depth=4")
    done = submit(home, src, "true")
    manage_until(home, [done], {"finished"})

    code, out, err = cli(home, "update", str(queued), "--priority", "3", "--set", "lr=0.5", "--unset", "depth",
                         "--machine", "other", "--dry-run")
    assert code == 0, err
    assert out.strip() == (f"would update job {queued} (queued, --depth=4): pin (none) -> other; priority 0 -> 3; "
                           f"overrides --depth=4 -> --config.training.learning_rate=0.5")
    assert status(home)[queued]["overrides"] == ["--depth=4"], "a dry run changes nothing"

    code, out, err = cli(home, "update", str(done), "--priority", "3")
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == f"jobtpu: error: job {done} is finished; only a queued (or held) job can be updated"
    code, out, err = cli(home, "update", str(queued), "--priority", "3", user="ann")
    assert code == 1 and f"job {queued} is tester's, not ann's: update refused" in err
    code, out, err = cli(home, "update", str(queued), "--req", "gpu=1")
    assert code == 1 and "no machine could ever run gpu=1" in err
    assert status(home)[queued].get("priority", 0) == 0, "a refused update changes nothing"

    code, out, err = cli(home, "update", str(queued), "--priority", "3", "--machine", "other", "--force", user="ann")
    assert code == 0, err
    job = status(home)[queued]
    assert (job["priority"], job["pin"], job["held"]) == (3, "other", True), "still held: update is no release"
    assert [(f["by"], f["act"]) for f in job["forced"]] == [("ann", "update")]
    code, out, err = cli(home, "update", str(queued), "--no-machine")
    assert code == 0 and "pin other -> (none)" in out
    jobtpu(home, "release", str(queued))
    assert manage_until(home, [queued], {"finished"})[queued]["machine"] == "local"
    events = jobtpu(home, "events", "--job", str(queued)).stdout
    assert "updated by ann: pin (none) -> other; priority 0 -> 3" in events


def test_a_drained_machine_starts_nothing_new_and_what_runs_there_goes_on(tmp_path: Path) -> None:
    home = make_home(tmp_path, slots=4)
    src = write_tree(tmp_path / "src", {"show.py": SHOW, "wait.sh": WAIT})
    go = tmp_path / "go"
    running = submit(home, src, _wait_for_file(go))
    passes_until(home, lambda jobs: jobs[running]["status"] == "running", "the job to run")

    out = jobtpu(home, "machines", "drain", "local", "--reason", "maintenance").stdout
    assert out.strip() == "local: drained (maintenance); no new job starts there, 1 running job go on"
    waiting = submit(home, src, "true")
    jobs = manage(home)
    assert jobs[running]["status"] == "running"
    assert jobs[waiting]["status"] == "queued"
    assert jobs[waiting]["waiting"] == "no machine can run it now: local drained: maintenance; next in line"
    row = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"][0]
    assert row["drained"]["reason"] == "maintenance" and row["drained"]["by"] == "tester"
    assert row["detail"].startswith("drained: maintenance")
    assert "drained: maintenance" in jobtpu(home, "machines", env={"COLUMNS": "200"}).stdout

    missing = jobtpu(home, "machines", "drain", "nowhere", check=False)
    assert missing.returncode == 1 and missing.stderr.startswith("jobtpu: error: ") and "Traceback" not in missing.stderr

    assert jobtpu(home, "machines", "undrain", "local").stdout.strip() == (
        "local: undrained; queued jobs may start there again")
    go.touch()
    manage_until(home, [running, waiting], {"finished"})
    events = jobtpu(home, "events", "--machine", "local").stdout
    assert "local: drained by tester: maintenance" in events and "local: undrained by tester" in events


def test_each_job_of_a_sweep_is_selected_alone_by_id(tmp_path: Path) -> None:
    home = make_home(tmp_path, slots=4)
    src = write_tree(tmp_path / "src", {"show.py": SHOW, "wait.sh": WAIT})
    go = tmp_path / "go"
    first = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", _wait_for_file(go),
                       "--sweep", "lr=0.1,0.2,0.3").stdout.split("-")[0])
    ids = [first, first + 1, first + 2]
    member = first + 1
    passes_until(home, lambda jobs: all(jobs[i]["status"] == "running" for i in ids), "the sweep to run")

    listed = json.loads(jobtpu(home, "status", str(member), "--json").stdout)["jobs"]
    assert [j["id"] for j in listed] == [member]
    assert jobtpu(home, "kill", str(member)).stdout.strip() == (
        f"kill job {member} (running, sweep {first} #1, --config.training.learning_rate=0.2)")
    jobs = status(home)
    assert [jobs[i]["status"] for i in ids] == ["running", "killed", "running"]
    assert jobtpu(home, "rerun", str(member)).stdout.strip() == str(member)
    jobs = status(home)
    assert [jobs[i]["status"] for i in ids] == ["running", "queued", "running"]
    go.touch()
    manage_until(home, ids, {"finished"})
    events = [json.loads(line) for line in jobtpu(home, "events", "--job", str(member), "--json").stdout.splitlines()]
    assert events and {e["job"] for e in events} == {member}


JOB = ('echo "starting $JOBTPU_SWEEP_LR"\n'
       'echo "lr $JOBTPU_SWEEP_LR"\n'
       'if [ "$JOBTPU_SWEEP_LR" != 0.3 ]; then echo "{\\"lr\\": $JOBTPU_SWEEP_LR}" > result.json; fi\n')


def test_tail_and_fetch_across_a_sweep(tmp_path: Path) -> None:
    home = make_home(tmp_path, slots=4)
    src = write_tree(tmp_path / "src", {"job.sh": JOB})
    first = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "bash job.sh", "--sweep", "lr=0.1,0.2,0.3",
                       "--tag", "grid").stdout.split("-")[0])
    ids = [first, first + 1, first + 2]
    held = submit(home, src, "bash job.sh", "--hold", "--tag", "grid")
    manage_until(home, ids, {"finished"})

    done = jobtpu(home, "tail", "--sweep", str(first), "-n", "1")
    assert done.stdout.splitlines() == [f"{first}: lr 0.1", f"{first + 1}: lr 0.2", f"{first + 2}: lr 0.3"]
    done = jobtpu(home, "tail", "--tag", "grid", "-n", "2", check=False)
    assert done.returncode == 1
    assert done.stdout.splitlines()[:2] == [f"{first}: starting 0.1", f"{first}: lr 0.1"]
    assert done.stderr.splitlines() == [f"jobtpu: job {held}: has not started yet"]

    done = jobtpu(home, "fetch", "--sweep", str(first), "result.json", check=False)
    assert done.returncode == 1
    for i, lr in ((first, 0.1), (first + 1, 0.2)):
        assert json.loads((home / "results" / str(i) / "result.json").read_text()) == {"lr": lr}
    assert not (home / "results" / str(first + 2) / "result.json").exists()
    lines = done.stderr.splitlines()
    assert lines[:2] == [f"job {first}: fetched into {home / 'results' / str(first)}",
                         f"job {first + 1}: fetched into {home / 'results' / str(first + 1)}"]
    assert len(lines) == 3 and lines[2].startswith(f"jobtpu: job {first + 2}: ") and "result.json" in lines[2]

    for words in (["tail", "--sweep", str(first), "-f"], ["tail", str(first), "--sweep", str(first)],
                  ["fetch", "--sweep", str(first), "a", "b"], ["fetch"]):
        done = jobtpu(home, *words, check=False)
        assert done.returncode == 2 and done.stderr.startswith("jobtpu: error: ") and "Traceback" not in done.stderr
    assert jobtpu(home, "tail", str(first), "-n", "1").stdout == "lr 0.1\n", "one job's tail is as it was"


def test_machines_words_beside_drain_are_one_line_each_and_change_nothing(tmp_path: Path) -> None:
    """`machines NAME`, `machines drain NAME` and `machines undrain NAME` share one positional: a
    wrong shape is one usage line with its hint, exit 2, nothing changed."""
    home = make_home(tmp_path)
    before = (home / "state.json").read_bytes() if (home / "state.json").exists() else b""
    for words, said in ((["drain"], "`machines drain` takes one machine's name"),
                        (["drain", "local", "extra"], "`machines drain` takes one machine's name"),
                        (["undrain", "local", "--reason", "x"], "--reason goes with `machines drain`"),
                        (["local", "--reason", "x"], "--reason goes with `machines drain NAME`"),
                        (["a", "b"], "`machines` takes one machine's name, not 2 words"),
                        (["drain", "local", "--json"], "and no --json")):
        code, out, err = cli(home, "machines", *words)
        lines = err.splitlines()
        assert code == 2 and out == "" and said in lines[0] and lines[1].startswith("hint: "), (words, err)
    assert ((home / "state.json").read_bytes() if (home / "state.json").exists() else b"") == before
    assert "drained: fixing" in jobtpu(home, "machines", "drain", "local", "--reason", "fixing").stdout + \
        jobtpu(home, "machines").stdout
    jobtpu(home, "machines", "undrain", "local")
    assert "drained" not in jobtpu(home, "machines", "local").stdout
