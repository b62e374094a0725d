"""Status that answers the questions people ask, through the CLI: each row's run time, overrides,
resources and pending reason; the count per status; the filters; 80 columns; tags and notes set
after submit; and the jobs `clean` moved to history."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobtpu.render.job_columns import DEFAULT_JOB_COLUMNS
from jobtpu.schema.state import Attempt, Job, Status
from jobtpu.views.rows import job_row as row
from tests.accounts import Team
from tests.helpers import jobtpu, make_home, manage, manage_until, status, submit, write_tree

ONE_SLOT = {"local": {"kind": "local", "resources": {"slot": 1}}}
ALIASES = {"lr": "config.training.learning_rate", "bs": "config.training.batch_size"}


def _home(tmp_path: Path, slots: int = 1) -> tuple[Path, Path]:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": slots}}})
    doc = json.loads((home / "machines.json").read_text())
    (home / "machines.json").write_text(json.dumps({**doc, "config_aliases": ALIASES}))
    return home, write_tree(tmp_path / "src", {"train.sh": "echo step 1\nsleep 60\n"})


def _rows(table: str) -> dict[int, str]:
    """The table's job rows by id (a row starts with the id, right-aligned)."""
    return {int(m[1]): line for line in table.splitlines() if (m := re.match(r"^\s*(\d+)  ", line))}


def _kill_all(home: Path, ids: list[int]) -> None:
    jobtpu(home, "kill", "--force", *map(str, ids))  # clean-up: some tests submit as another user
    manage_until(home, ids, {"killed"})


def test_rows_show_run_time_overrides_resources_and_why_a_job_waits(tmp_path: Path) -> None:
    home, src = _home(tmp_path)
    ids = [submit(home, src, "bash train.sh", "--name", f"sweep-{lr}", "--tag", "sweep", f"lr={lr}", "bs=32")
           for lr in ("0.1", "0.01", "0.001")]
    manage(home)
    try:
        table = jobtpu(home, "status", env={"COLUMNS": "200", "NO_COLOR": "1"}).stdout
        rows = _rows(table)
        assert sorted(rows) == ids, table
        # Two sweep jobs are told apart by their overrides, in the short form the aliases give.
        assert "lr=0.1 bs=32" in rows[ids[0]] and "lr=0.01 bs=32" in rows[ids[1]], table
        running = rows[ids[0]].split()
        # (your own view: no user column, so the status is the third cell and the run time the fifth)
        assert running[2] == "running" and re.fullmatch(r"\d+s", running[4]) and "local" in running, table
        # A queued job says why it waits, and where it stands in the queue.
        assert "local fits, busy; next in line" in rows[ids[1]], table
        assert "local fits, busy; 1 job ahead of it" in rows[ids[2]], table
        assert status(home)[ids[2]]["waiting"] == "local fits, busy; 1 job ahead of it"
        assert table.splitlines()[-1].strip() == "2 queued, 1 running", table
    finally:
        _kill_all(home, ids)


def test_a_queued_job_says_when_no_machine_offers_what_it_asks(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"box": {"kind": "local", "resources": {"gpu": 4}}})
    src = write_tree(tmp_path / "src", {"a": "x"})
    job = submit(home, src, "true", "--req", "gpu=4")
    # machines.json changes after the submit: the box now offers fewer GPUs than the job asks.
    (home / "machines.json").write_text(json.dumps({"machines": {"box": {"kind": "local", "resources": {"gpu": 2}}}}))
    assert manage(home)[job]["waiting"] == "no machine offers gpu=4"
    table = jobtpu(home, "status", env={"COLUMNS": "200"}).stdout
    assert "no machine offers gpu=4" in _rows(table)[job] and "gpu=4" in _rows(table)[job].split()


def test_a_job_no_pass_has_tried_says_so(tmp_path: Path) -> None:
    home, src = _home(tmp_path)
    job = submit(home, src, "true")
    assert "no pass has tried it yet" in _rows(jobtpu(home, "status", env={"COLUMNS": "200"}).stdout)[job]


def test_at_80_columns_the_header_never_wraps_and_every_row_is_one_line(tmp_path: Path) -> None:
    home, src = _home(tmp_path, slots=2)
    long = "a-very-long-experiment-name-that-goes-on-and-on"
    ids = [submit(home, src, "bash train.sh", "--name", f"{long}-{i}", "--tag", "ablation-study-2026",
                  "--tag", "baseline", f"lr={i}e-4", "config.model.depth=48", "--user", "someone-with-a-long-name")
           for i in range(4)]
    manage(home)
    try:
        jobtpu(home, "note", str(ids[0]), "the loss spikes at step 1200; compare with the baseline run",
               env={"JOBTPU_USER": "someone-with-a-long-name"})  # the job's owner notes it
        out = jobtpu(home, "status", "--all-users", env={"COLUMNS": "80", "NO_COLOR": "1"}).stdout
        lines = out.splitlines()
        assert all(len(line) <= 80 for line in lines), out
        assert lines[0].split() == ["id", "name", "user", "status", "att", "run", "age", "where", "config", "tags",
                                    "why", "/", "log"], out
        assert sorted(_rows(out)) == ids and len(lines) == 1 + len(ids) + 1, out
        assert lines[-1].strip() == "2 queued, 2 running", out
    finally:
        _kill_all(home, ids)


def _titles(header: str) -> list[str]:
    """The column titles of a header line, in order ("why / log" is one title)."""
    return header.replace("why / log", "why/log").split()


@pytest.mark.parametrize("width", [80, 60])
def test_status_leaves_out_columns_rather_than_cut_a_title_or_a_number_and_shows_what_differs_first(
        tmp_path: Path, width: int) -> None:
    home, src = _home(tmp_path)
    lrs = ("0.1", "0.01", "0.001")  # typed last, after what the jobs share
    ids = [submit(home, src, "bash train.sh", "--name", "an-experiment-with-a-long-name", "--tag", "ablation-2026",
                  "config.model.depth=48", "config.data.shuffle_buffer=10000", f"lr={lr}")
           for lr in lrs]
    manage(home)
    try:
        out = jobtpu(home, "status", env={"COLUMNS": str(width), "NO_COLOR": "1"}).stdout
        lines = out.splitlines()
        assert all(len(line) <= width for line in lines) and len(lines) == 1 + len(ids) + 1, out
        full = _titles(" ".join(DEFAULT_JOB_COLUMNS))
        titles = _titles(lines[0])
        # Every title shown is whole, in its place; id and status always; no `user` in your own view.
        assert set(titles) <= set(full) and titles == [t for t in full if t in titles], out
        assert {"id", "status"} <= set(titles) and "user" not in titles and "…" not in lines[0], out
        rows = _rows(out)
        assert sorted(rows) == ids, out
        cells = dict(zip(titles, rows[ids[0]].split(), strict=False))  # the first columns hold no spaces
        assert cells["status"] == "running", out
        for number in ("att", "run", "age"):
            assert number not in titles or re.fullmatch(r"\d+[smhd]?", cells[number]), out
        # The overrides that tell the jobs apart come first, so a cut cell still shows them.
        for job, lr in zip(ids, lrs, strict=True):
            assert re.search(rf"lr={re.escape(lr)}[ …]", rows[job]) or width < 80, out
            assert "lr=0" in rows[job], out
    finally:
        _kill_all(home, ids)


def test_your_own_view_has_no_user_column_and_a_view_of_others_does(team: Team) -> None:
    alice, bob = team.accounts
    home = team.one_writer_home({"machines": ONE_SLOT})
    for account in (alice, bob):
        src = team.private_folder(account, "src")
        team.run(account, "--home", str(home), "submit", "--dir", str(src), "--cmd", "true", "--name", account,
                 "--hold")
    team.run(alice, "--home", str(home), "manage")  # takes bob's submit in
    own = team.run(alice, "--home", str(home), "status").stdout.splitlines()  # piped: 80 columns
    assert _titles(own[0])[:3] == ["id", "name", "status"] and "user" not in own[0], own
    assert len(own) == 1 + 1 + 1 and alice in own[1] and bob not in "\n".join(own), own
    for args in (["--all-users"], ["--user", bob]):
        shown = team.run(alice, "--home", str(home), "status", *args).stdout.splitlines()
        assert _titles(shown[0])[:4] == ["id", "name", "user", "status"], shown
        assert all(row.split()[1] == row.split()[2] for row in shown[1:-1]), shown  # named after their user


@pytest.mark.parametrize("width", [80, 60])
def test_machines_rules_and_tldr_fit_the_terminal_one_line_per_row(tmp_path: Path, width: int) -> None:
    home = make_home(tmp_path, {
        "local": {"kind": "local", "resources": {"slot": 2}},
        "box": {"kind": "ssh", "hosts": ["127.0.0.1:1"], "resources": {"slot": 1, "gpu": 8}},
        "v3-32": {"kind": "tpu", "node": "v3-32-p1", "zone": "europe-west4-a", "accelerator": "v3-32",
                  "preemptible": True}}, gcp={"project": "p"})
    jobtpu(home, "note", "--machine", "box", "disk almost full, ask before using")
    env = {"COLUMNS": str(width), "NO_COLOR": "1"}
    machines = jobtpu(home, "machines", env=env).stdout.splitlines()  # (at 80x24 this took 31 lines)
    assert all(len(line) <= width for line in machines) and len(machines) == 1 + 3, machines
    assert [line.split()[0] for line in machines] == ["name", "local", "box", "v3-32"], machines
    titles = machines[0].split()
    assert {"name", "state", "running"} <= set(titles) <= {"name", "kind", "accelerator", "workers", "state",
                                                           "health", "running", "free", "note", "detail"}, machines
    rules = jobtpu(home, "rules", env=env).stdout.splitlines()
    assert all(len(line) <= width for line in rules) and len(rules) == 1 + 5 + 1, rules
    assert [line.split()[0] for line in rules[1:-1]] == ["pre", "pass", "reapply", "rerun", "resume"], rules
    assert rules[0].split()[:2] == ["rule", "preempted"] and "…" not in rules[0], rules
    assert rules[1].split()[1] == "recreate+resume" and rules[-1].strip() == "on exit 0: finished, under every rule"
    tldr = jobtpu(home, "tldr").stdout.splitlines()
    assert all(len(line) <= 80 for line in tldr) and sum(line.startswith("jobtpu ") for line in tldr) == 10, tldr


def test_status_filters_by_status_tag_and_name(tmp_path: Path) -> None:
    home, src = _home(tmp_path, slots=1)
    quick = write_tree(tmp_path / "quick", {"a": "x"})
    done = submit(home, quick, "true", "--name", "prep-data", "--tag", "data")
    manage_until(home, [done], {"finished"})
    a = submit(home, src, "bash train.sh", "--name", "sweep-a", "--tag", "sweep", "--tag", "best")
    b = submit(home, src, "bash train.sh", "--name", "sweep-b", "--tag", "sweep")
    manage(home)
    try:
        def listed(*args: str) -> list[int]:
            return sorted(_rows(jobtpu(home, "status", *args, env={"COLUMNS": "200"}).stdout))

        assert listed("--status", "running,queued") == [a, b]
        assert listed("--status", "finished", "--status", "queued") == [done, b]
        assert listed("--tag", "sweep") == [a, b] and listed("--tag", "sweep", "--tag", "best") == [a]
        assert listed("--name", "sweep-*") == [a, b] and listed("--name", "prep*", "--tag", "sweep") == []
        assert [j["id"] for j in json.loads(jobtpu(home, "status", "--json", "--tag", "best").stdout)["jobs"]] == [a]
        counted = jobtpu(home, "status", "--tag", "sweep", env={"COLUMNS": "200"}).stdout.splitlines()[-1]
        assert counted.strip() == "1 queued, 1 running"
        bad = jobtpu(home, "status", "--status", "done", check=False)
        assert bad.returncode == 2 and bad.stderr.splitlines()[0] == (
            "jobtpu: error: argument --status: 'done' is not a status: use queued, launching, running, killing, "
            "finished, failed, killed")
    finally:
        _kill_all(home, [a, b])


def test_run_time_is_the_time_on_machines_over_every_attempt() -> None:
    job = Job(id=7, user="u", cmd="c", archive="a.tar.gz", created=0.0, status=Status.RUNNING, machine="box",
              attempt=1, alloc={"gpu": [0, 1], "slot": [0]},
              attempts=[Attempt(0, "box", "preempted", None, 100.0, 160.0), Attempt(1, "box", started=200.0)],
              overrides=["--config.training.learning_rate=0.01", "'--config.x=a b'"], tags=["t1", "t2"])
    cells = row(job, 260.0, ALIASES)
    assert (cells.run, cells.age, cells.attempt) == ("2m", "4m", "1")
    assert cells.where == "box gpu=0,1" and cells.overrides == "lr=0.01 config.x=a b" and cells.tags == "t1,t2"
    queued = Job(id=8, user="u", cmd="c", archive="a.tar.gz", created=0.0, req=["v3-32"], pin="v3-p1",
                 waiting="v3-p1 fits, busy; next in line")
    cells = row(queued, 30.0, {})
    assert (cells.run, cells.where, cells.info) == ("", "v3-32 @v3-p1", "v3-p1 fits, busy; next in line")


# ---- tags and notes -----------------------------------------------------------------------------

def test_tag_adds_and_removes_tags_of_several_jobs(tmp_path: Path) -> None:
    home, src = _home(tmp_path)
    a = submit(home, src, "true", "--tag", "draft", "--tag", "sweep")
    b = submit(home, src, "true", "--tag", "sweep")
    out = jobtpu(home, "tag", str(a), str(b), "+best", "-draft").stdout
    assert out.splitlines() == [f"job {a}: tags sweep,best", f"job {b}: tags sweep,best"]
    jobs = status(home)
    assert jobs[a]["tags"] == ["sweep", "best"] and jobs[b]["tags"] == ["sweep", "best"]
    assert sorted(_rows(jobtpu(home, "status", "--tag", "best", env={"COLUMNS": "200"}).stdout)) == [a, b]
    jobtpu(home, "tag", str(a), "+best", "-sweep")  # adding a tag it has changes nothing
    assert status(home)[a]["tags"] == ["best"]


@pytest.mark.parametrize(("words", "needle"), [
    ([], "give one or more job ids and one or more tag changes"),
    (["1"], "give one or more job ids and one or more tag changes"),
    (["1", "best"], "'best' is neither a job id nor a tag change"),
    (["1", "+x", "-x"], "tag 'x' is both added and removed"),
    (["1", "+x", "--force"], "'--force' after the job ids is not a tag change"),
    (["1", "999", "+x"], "no job 999 in state.json"),
])
def test_a_wrong_tag_command_is_one_line_and_changes_nothing(tmp_path: Path, words: list[str], needle: str) -> None:
    home, src = _home(tmp_path)
    submit(home, src, "true", "--tag", "keep")
    before = (home / "state.json").read_bytes()
    done = jobtpu(home, "tag", *words, check=False)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.startswith(f"jobtpu: error: {needle}") and len(done.stderr.splitlines()) == 2, done.stderr
    assert (home / "state.json").read_bytes() == before


def test_notes_on_a_job_and_on_a_machine(tmp_path: Path) -> None:
    home, src = _home(tmp_path)
    job = submit(home, src, "true")
    assert jobtpu(home, "note", str(job), "lr", "too", "high").stdout == f"job {job}: note 'lr too high'\n"
    assert status(home)[job]["note"] == "lr too high"
    assert "note: lr too high" in _rows(jobtpu(home, "status", env={"COLUMNS": "200"}).stdout)[job]
    jobtpu(home, "note", str(job), "")
    assert "note" not in status(home)[job]
    jobtpu(home, "note", "--machine", "local", "disk almost full, ask before using")
    rows = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]
    assert rows[0]["note"] == "disk almost full, ask before using"
    table = jobtpu(home, "machines", env={"COLUMNS": "200"}).stdout
    assert "note" in table.splitlines()[0] and "disk almost full, ask before using" in table
    manage_until(home, [job], {"finished"})  # a pass keeps the machine's note
    assert json.loads(jobtpu(home, "machines", "--json").stdout)["machines"][0]["note"].startswith("disk almost")
    for args, needle in [(["note", "999", "x"], "no job 999 in state.json"),
                         (["note", "--machine", "nope", "x"], "unknown machine 'nope'"),
                         (["note", "abc"], "give the job's id, then the note"),
                         (["note", str(job)], "give the note's text after the job id"),
                         (["note", str(job), "a\nb"], "a note is one line")]:
        done = jobtpu(home, *args, check=False)
        assert done.returncode == 1 and done.stderr.startswith(f"jobtpu: error: {needle}"), (args, done.stderr)


# ---- history --------------------------------------------------------------------------------------

def test_cleaned_jobs_are_listed_by_status_history_and_found_by_id(tmp_path: Path) -> None:
    home, _ = _home(tmp_path, slots=2)
    src = write_tree(tmp_path / "quick", {"job.sh": "echo result > out.txt; echo finished-line\n"})
    first = submit(home, src, "bash job.sh", "--name", "first", "--tag", "keep")
    second = submit(home, src, "bash job.sh; exit 3", "--name", "second")
    manage_until(home, [first, second], {"finished", "failed"})
    stays = submit(home, src, "true", "--name", "stays")
    jobtpu(home, "clean")
    assert sorted(status(home)) == [stays]

    wide = {"COLUMNS": "200", "NO_COLOR": "1"}
    table = jobtpu(home, "status", "--history", env=wide).stdout
    assert list(_rows(table)) == [second, first], table  # newest first
    assert "exit 3" in _rows(table)[second] and table.splitlines()[-1].strip() == "in history: 1 finished, 1 failed"
    assert list(_rows(jobtpu(home, "status", "--history", "--tag", "keep", env=wide).stdout)) == [first]
    assert list(_rows(jobtpu(home, "status", "--history", "--status", "failed", env=wide).stdout)) == [second]
    listed = json.loads(jobtpu(home, "status", "--history", "--json").stdout)["jobs"]
    assert [j["id"] for j in listed] == [second, first]
    # A cleaned job is found by its id: status, status --json, tail, fetch.
    assert list(_rows(jobtpu(home, "status", str(first), env=wide).stdout)) == [first]
    assert json.loads(jobtpu(home, "status", "--json", str(first)).stdout)["jobs"][0]["status"] == "finished"
    assert jobtpu(home, "tail", str(first)).stdout == "finished-line\n"
    jobtpu(home, "fetch", str(first), "out.txt", "--to", str(tmp_path / "got"))
    assert (tmp_path / "got" / "out.txt").read_text() == "result\n"


def test_an_unknown_id_points_to_listings_that_show_it(tmp_path: Path) -> None:
    home, src = _home(tmp_path)
    job = submit(home, src, "true")
    manage_until(home, [job], {"finished"})
    jobtpu(home, "clean")
    for args in (["status", "999"], ["tail", "999"], ["fetch", "999"]):
        done = jobtpu(home, *args, check=False)
        assert done.returncode == 1 and done.stderr.splitlines() == [
            "jobtpu: error: no job 999 in state.json nor in history.jsonl",
            "hint: `jobtpu status --all-users --all` lists every job; add --history for those `clean` moved out"]
    # Commands that change a job say where a cleaned one went, and change nothing.
    before = (home / "state.json").read_bytes()
    for act, args in (("kill", []), ("resume", []), ("rerun", []), ("tag", ["+x"]), ("note", ["x"])):
        done = jobtpu(home, act, str(job), *args, check=False)
        assert done.returncode == 1 and done.stderr.splitlines() == [
            f"jobtpu: error: job {job} was moved to history.jsonl by `clean`; {act} changes only the jobs in "
            "state.json", f"hint: `jobtpu status {job}` shows it; submit it again to run it again"], done.stderr
    assert (home / "state.json").read_bytes() == before
    # ... and the listing the hint names does show the cleaned job.
    assert list(_rows(jobtpu(home, "status", "--history", "--all-users", "--all", env={"COLUMNS": "200"}).stdout)) == [job]


def test_the_status_words_status_accepts_are_the_model_s() -> None:
    from jobtpu.commands.select import STATUS_NAMES

    assert tuple(s.value for s in Status) == STATUS_NAMES


# ---- machine names, sweeps and reasons at 80 columns ---------------------------------------------

IMPORTED_TPUS = [*(f"kmh-tpuvm-v3-32-preemptible-{n}" for n in (1, 2, 3)), "kmh-tpuvm-v4-64-preemptible-1",
                 "kmh-tpuvm-v3-32-preemptible-11", "kmh-tpuvm-v3-32-preemptible-12"]  # the last two: no alias
STARTED = time.time() - 600
WAITING = "3 machines fit: 2 busy, kmh-tpuvm-v3-32-preemptible-3 is being recreated; 1 job ahead of it"


def imported_tpu_home(tmp_path: Path) -> tuple[Path, list[int]]:
    """A home whose TPUs `jobtpu import` took from the TPU manager (named as their nodes, aliased
    `v3-32-p1`...), a job running on each of four of them, and a queued one the last pass kept
    waiting (written as a pass writes them: no TPU API here). Its jobs' ids, the queued one last."""
    home = make_home(tmp_path, gcp={"project": "p"})
    aliases = {"v3-32-p1": IMPORTED_TPUS[0], "v3-32-p2": IMPORTED_TPUS[1], "v3-32-p3": IMPORTED_TPUS[2],
               "v4-64-p1": IMPORTED_TPUS[3]}
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"users": {}, "tpu_aliases": aliases,
                                "all_tpus": {"europe-west4-a": IMPORTED_TPUS, "preemptible": IMPORTED_TPUS}}))
    jobtpu(home, "import", "tpu-manager", str(data))
    from jobtpu.home.layout import Home
    from jobtpu.home.store import Store

    on = [IMPORTED_TPUS[0], IMPORTED_TPUS[3], IMPORTED_TPUS[4], IMPORTED_TPUS[5]]
    with Store(Home(home)).transaction() as state:
        state.jobs += [Job(id=i, user="tester", cmd="python train.py", archive="a.tar.gz", created=STARTED - 60,
                           req=["v3-32"], name="resnet-imagenet", status=Status.RUNNING, machine=m, alloc={"slot": [0]},
                           attempts=[Attempt(0, m, started=STARTED)]) for i, m in enumerate(on, 1)]
        state.jobs.append(Job(id=5, user="tester", cmd="python train.py", archive="a.tar.gz", created=STARTED,
                              req=["v3-32"], name="resnet-imagenet", waiting=WAITING))
        state.next_id = 6
    return home, [1, 2, 3, 4, 5]


def _cells_after(row: str, word: str) -> str:
    """What a row shows after its first `word` cell."""
    return row.split(f" {word} ", 1)[1].strip()


@pytest.mark.parametrize("width", [80, 60])
def test_imported_tpus_read_by_their_short_names_and_rows_stay_apart(tmp_path: Path, width: int) -> None:
    """docs/reference/commands.md §2.4, §2.10: a machine is its first alias in a table; names cut
    to fit are cut where they differ; a pending reason keeps a readable head, in short names."""
    home, ids = imported_tpu_home(tmp_path)
    env = {"COLUMNS": str(width), "NO_COLOR": "1"}
    out = jobtpu(home, "status", env=env).stdout
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines) and "where" in lines[0], out
    rows = _rows(out)
    assert sorted(rows) == ids, out
    wheres = {job: _cells_after(rows[job], "running").split()[-1] for job in ids[:4]}  # the where cell ends it
    assert wheres[1] == "v3-32-p1" and wheres[2] == "v4-64-p1", out
    assert len(set(wheres.values())) == 4 and "kmh-tpuvm…" not in out, out  # the alias-less two differ too
    assert "3 machines fit: " in rows[ids[4]], out  # other columns gave way to the reason's head
    wide = _rows(jobtpu(home, "status", env={"COLUMNS": "200"}).stdout)
    assert "v3-32-p3 is being recreated" in wide[ids[4]], wide
    machines = jobtpu(home, "machines", env=env).stdout.splitlines()
    assert all(len(line) <= width for line in machines) and len(machines) == 1 + 1 + len(IMPORTED_TPUS), machines
    names = [line.split()[0] for line in machines[1:]]
    assert names[:5] == ["local", "v3-32-p1", "v3-32-p2", "v3-32-p3", "v4-64-p1"], machines
    assert len(set(names)) == len(names) and all(name.endswith(("-11", "-12")) for name in names[5:]), machines


def test_machines_lists_aliases_and_shows_one_machine_by_name_or_alias(tmp_path: Path) -> None:
    home, _ = imported_tpu_home(tmp_path)
    listed = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]
    assert [(m["name"], m["aliases"]) for m in listed[:2]] == [("local", []), (IMPORTED_TPUS[0], ["v3-32-p1"])]
    wide = jobtpu(home, "machines", env={"COLUMNS": "200", "NO_COLOR": "1"}).stdout.splitlines()
    assert "other names" in wide[0] and wide[2].split()[:2] == ["v3-32-p1", IMPORTED_TPUS[0]], wide
    for name in ("v3-32-p1", IMPORTED_TPUS[0]):
        shown = jobtpu(home, "machines", name, env={"TZ": "UTC"}).stdout.splitlines()
        fields = dict(re.match(r"(\w[\w ]*): +(.*)", line).groups() for line in shown)  # type: ignore[union-attr]
        assert fields["name"] == IMPORTED_TPUS[0] and fields["aliases"] == "v3-32-p1" and fields["kind"] == "tpu"
        assert fields["accelerator"] == "v3-32 (preemptible)", shown
        assert fields["node"] == f"{IMPORTED_TPUS[0]} in europe-west4-a", shown
        assert fields["free"] == "slot 0 of 1 free (1 used)", shown
        since = datetime.fromtimestamp(STARTED, UTC).strftime("%m-%d %H:%M")
        assert fields["jobs"] == f"1 tester resnet-imagenet (running since {since})", shown
        assert fields["state"].startswith("unknown — not asked yet") and "last seen" in fields, shown
    one = json.loads(jobtpu(home, "machines", "v4-64-p1", "--json").stdout)["machines"]
    assert [m["name"] for m in one] == [IMPORTED_TPUS[3]]
    before = (home / "machines.json").read_bytes(), (home / "state.json").read_bytes()
    unknown = jobtpu(home, "machines", "v3-32-p4", check=False)
    assert unknown.returncode == 1 and unknown.stdout == "", unknown
    assert unknown.stderr.splitlines()[0] == "jobtpu: error: unknown machine 'v3-32-p4'", unknown.stderr
    assert unknown.stderr.splitlines()[1].startswith("hint: did you mean v3-32-p"), unknown.stderr
    assert len(unknown.stderr.splitlines()) == 2 and "Traceback" not in unknown.stderr
    assert ((home / "machines.json").read_bytes(), (home / "state.json").read_bytes()) == before


@pytest.mark.parametrize("width", [80, 60])
def test_a_sweeps_members_are_told_apart_by_what_differs(tmp_path: Path, width: int) -> None:
    home, src = _home(tmp_path)
    printed = jobtpu(home, "submit", "--dir", str(src), "--cmd", "bash train.sh", "--name", "resnet50-imagenet-baseline",
                     "--tag", "ablation-2026", "--hold", "config.model.depth=50", "--sweep", "lr=0.1,0.01,0.001",
                     "--sweep", "config.model.dropout=0.1,0.2").stdout
    first, last = map(int, printed.strip().split("-"))
    ids = list(range(first, last + 1))
    out = jobtpu(home, "status", env={"COLUMNS": str(width), "NO_COLOR": "1"}).stdout
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines) and "config" in lines[0], out
    rows = _rows(out)
    assert sorted(rows) == ids, out
    for job, (lr, dropout) in zip(ids, [(lr, d) for lr in ("0.1", "0.01", "0.001") for d in ("0.1", "0.2")],
                                  strict=True):
        assert re.search(rf"\blr={re.escape(lr)} dropout={re.escape(dropout)}\b", rows[job]), out
    assert "held by" in rows[ids[0]], out


@pytest.mark.parametrize("width", [80, 60])
def test_a_pending_reason_keeps_a_readable_head_and_other_columns_give_way(tmp_path: Path, width: int) -> None:
    from jobtpu.home.layout import Home
    from jobtpu.home.store import Store

    home = make_home(tmp_path)
    with Store(Home(home)).transaction() as state:
        state.jobs += [Job(id=i, user="someone-with-a-long-name", cmd="true", archive="a.tar.gz", created=time.time(),
                           name=f"a-very-long-experiment-name-{i}", tags=["ablation-study-2026", "baseline"],
                           overrides=["--config.model.depth=48", f"--config.training.learning_rate={i}e-4"],
                           req=["v3-32"], waiting=f"v3-32-p1 fits, busy; {i} jobs ahead of it") for i in (1, 2)]
        state.next_id = 3
    out = jobtpu(home, "status", "--all-users", env={"COLUMNS": str(width), "NO_COLOR": "1"}).stdout
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines) and lines[0].rstrip().endswith("why / log"), out
    rows = _rows(out)
    assert sorted(rows) == [1, 2] and all("v3-32-p1 fits, b" in rows[i] for i in (1, 2)), out


def test_a_big_sweeps_queued_members_read_as_one_row_and_each_is_still_its_own_job(tmp_path: Path) -> None:
    """docs/reference/commands.md §2.4: past 8 queued members a sweep is one row at 80 columns (its ids'
    span, how many, each axis's first…last value), beside the jobs of no sweep; `--all` and ids show
    every member on its own row, and a member killed leaves the rest one row."""
    home, src = _home(tmp_path)
    printed = jobtpu(home, "submit", "--dir", str(src), "--cmd", "bash train.sh", "--hold", "--sweep",
                     "lr=" + ",".join(f"0.{i}" for i in range(1, 7)), "--sweep", "bs=16,32,64,128,256").stdout
    first, last = map(int, printed.strip().split("-"))
    assert last - first + 1 == 30
    plain = submit(home, src, "bash train.sh", "--hold")
    env = {"COLUMNS": "80", "NO_COLOR": "1"}
    out = jobtpu(home, "status", env=env).stdout
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    [swept] = [line for line in lines if line.lstrip().startswith(f"{first}-{last}")]
    assert re.search(r"\bbs=16…256 lr=0\.1…0\.6\b", swept) and "30 queued:" in swept, out
    assert list(_rows(out)) == [plain] and "31 queued" in lines[-1], out
    every = jobtpu(home, "status", "--all", env=env).stdout
    assert sorted(_rows(every)) == [*range(first, last + 1), plain], every
    assert list(_rows(jobtpu(home, "status", str(first + 3), env=env).stdout)) == [first + 3]
    jobtpu(home, "kill", str(first + 3))
    after = jobtpu(home, "status", env=env).stdout
    assert any(line.lstrip().startswith(f"{first}-{last}") and "29 queued:" in line for line in after.splitlines()), after
    assert re.search(rf"^\s*{first + 3}  .*killed", after, re.M), after
