"""Priority classes across users (docs/reference/requests-and-rules.md §8, machines-json.md §3.13):
the classes machines.json declares, the pure choice of which running jobs a higher class evicts, and
what a pass decides with it (jobs built by hand), then end to end on two local slots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobtpu.decide import core
from jobtpu.decide.evict import Evictable, choose
from jobtpu.decide.observation import Kill, Launch, MachineView, Observation
from jobtpu.decide.outcomes import killed
from jobtpu.decide.workers import WorkerRef, WorkerState
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.priority import ClassesRefused, parse_classes
from jobtpu.schema.state import Attempt, Job, Status
from tests.accounts import Team
from tests.helpers import jobtpu, make_home, manage, passes_until, status, submit, write_tree
from tests.tpufleet import TpuFleet, write_machines

T0 = 1_000_000.0
NOW = T0 + 1000.0


# ---- the choice: a table ------------------------------------------------------------------------

def h(job: int, rank: int, *machines: str, slots: tuple[int, ...] = (0,), settled: bool = True,
      started: float = 0.0) -> Evictable:
    return Evictable(job, rank, machines or ("a",), {"slot": list(slots)}, settled, started)


def slots(n: int) -> dict[str, int]:
    return {"slot": n}


def full(*names: str, n: int = 2) -> dict[str, dict[str, set[int]]]:
    return {name: {"slot": set(range(n))} for name in names}


CHOICES: list[tuple[str, dict[str, int], int, list[tuple[str, dict[str, int]]], dict[str, dict[str, set[int]]],
                    list[Evictable], tuple[str, tuple[int, ...]] | None]] = [
    ("one slot needed: one job, not two", slots(1), 3, [("a", slots(2))], full("a"),
     [h(1, 0, slots=(0,)), h(2, 0, slots=(1,))], ("a", (1,))),
    ("the lowest class goes first", slots(1), 3, [("a", slots(2))], full("a"),
     [h(1, 1, slots=(0,)), h(2, 0, slots=(1,))], ("a", (2,))),
    ("never a class as high as the evictor's", slots(1), 1, [("a", slots(2))], full("a"),
     [h(1, 1, slots=(0,)), h(2, 2, slots=(1,))], None),
    ("a job in its first min_runtime is never evicted", slots(1), 3, [("a", slots(2))], full("a"),
     [h(1, 0, slots=(0,), settled=False), h(2, 1, slots=(1,))], ("a", (2,))),
    ("nothing evictable: no choice", slots(1), 3, [("a", slots(1))], full("a", n=1),
     [h(1, 0, settled=False)], None),
    ("two slots: the fewest jobs that free them", slots(2), 3, [("a", slots(3))], full("a", n=3),
     [h(1, 0, slots=(0,)), h(2, 0, slots=(1, 2))], ("a", (2,))),
    ("two slots, held one each: both go", slots(2), 3, [("a", slots(2))], full("a"),
     [h(1, 0, slots=(0,)), h(2, 0, slots=(1,))], ("a", (1, 2))),
    ("fewer jobs on another machine beat more lowly ones here", slots(2), 3,
     [("a", slots(2)), ("b", slots(2))], full("a", "b"),
     [h(1, 0, "a", slots=(0,)), h(2, 0, "a", slots=(1,)), h(3, 1, "b", slots=(0, 1))], ("b", (3,))),
    ("as many jobs: the lower class's machine", slots(2), 3, [("a", slots(2)), ("b", slots(2))], full("a", "b"),
     [h(1, 1, "a", slots=(0, 1)), h(2, 0, "b", slots=(0, 1))], ("b", (2,))),
    ("a tie goes to the machine first in machines.json", slots(1), 3, [("b", slots(1)), ("a", slots(1))],
     full("a", "b", n=1), [h(1, 0, "a"), h(2, 0, "b")], ("b", (2,))),
    ("on one machine, the job started last loses least", slots(1), 3, [("a", slots(2))], full("a"),
     [h(1, 0, slots=(0,), started=10.0), h(2, 0, slots=(1,), started=20.0)], ("a", (2,))),
    ("alike in all: the lower id", slots(1), 3, [("a", slots(2))], full("a"),
     [h(2, 0, slots=(1,)), h(1, 0, slots=(0,))], ("a", (1,))),
    ("a gang frees its room on each of its machines", slots(1), 3, [("b", slots(1))], full("a", "b", n=1),
     [h(1, 0, "a", "b")], ("b", (1,))),
    ("only machines offered count (one that does not fit is never freed)", slots(1), 3, [("b", slots(1))],
     full("a", "b", n=1), [h(1, 0, "a")], None),
]


@pytest.mark.parametrize(("needs", "rank", "machines", "used", "holders", "want"),
                         [c[1:] for c in CHOICES], ids=[c[0] for c in CHOICES])
def test_choose_evicts_the_fewest_lowest_class_jobs(needs: dict[str, int], rank: int,
                                                     machines: list[tuple[str, dict[str, int]]],
                                                     used: dict[str, dict[str, set[int]]], holders: list[Evictable],
                                                     want: tuple[str, tuple[int, ...]] | None) -> None:
    got = choose(needs, rank, machines, used, holders)
    assert (None if got is None else (got.machine, got.victims)) == want


# ---- machines.json's classes ----------------------------------------------------------------------

TEAM = {"low": {"min_runtime": 0}, "normal": {"default": True}, "high": {}, "urgent": {"users": ["alice"]}}


def test_classes_are_ranked_lowest_first_with_a_default_and_who_may_use_each() -> None:
    classes = parse_classes(TEAM)
    assert classes is not None
    assert classes.names == ("low", "normal", "high", "urgent")
    assert classes.of(None).name == "normal" and classes.of("urgent").rank == 3
    assert classes.of("low").min_runtime == 0 and classes.of("high").min_runtime == 600
    assert classes.refusal("urgent", "alice") is None
    assert classes.refusal("urgent", "bob") == "--class urgent: bob may not use it (machines.json allows alice)"
    assert classes.refusal("top", "bob") == "--class top: no such priority class (machines.json has low, normal, high, urgent)"
    lowest = parse_classes({"a": {}, "b": {"users": ["x"]}})
    assert lowest is not None and lowest.default == "a"


BAD: list[tuple[Any, str]] = [
    ([], "'priority_classes' must be a non-empty object"),
    ({}, "'priority_classes' must be a non-empty object"),
    ({"Low": {}}, "priority_classes.Low: a class name must be lowercase"),
    ({"low": 3}, "priority_classes.low must be an object"),
    ({"low": {"user": ["a"]}}, "priority_classes.low: unknown key 'user'"),
    ({"low": {"users": "alice"}}, "priority_classes.low.users must be a list of user names"),
    ({"low": {"min_runtime": -1}}, "priority_classes.low.min_runtime must be a number of seconds ≥ 0"),
    ({"low": {"min_runtime": "1h"}}, "priority_classes.low.min_runtime must be a number of seconds ≥ 0"),
    ({"low": {"default": "yes"}}, "priority_classes.low.default must be true or false"),
    ({"low": {"default": True, "users": ["a"]}}, "priority_classes.low: the default class must be open to everyone"),
    ({"a": {"default": True}, "b": {"default": True}}, "priority_classes: one default class, not 2 (a, b)"),
    ({"a": {"users": ["x"]}, "b": {}}, "priority_classes.a: the lowest class is the default"),
]


@pytest.mark.parametrize(("doc", "said"), BAD, ids=[b[1][:40] for b in BAD])
def test_a_wrong_priority_classes_is_one_line(doc: Any, said: str) -> None:
    with pytest.raises(ClassesRefused) as e:
        parse_classes(doc)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)


# ---- a pass's decision ----------------------------------------------------------------------------

def team(slots: int = 2) -> Fleet:
    classes = parse_classes(TEAM)
    return Fleet(machines={"m": Machine(name="m", kind="local", resources={"slot": slots})}, classes=classes)


def job(job_id: int, user: str = "bob", cls: str | None = None, **kw: Any) -> Job:
    return Job(id=job_id, user=user, cmd="python train.py", archive="a.tar.gz", created=T0 + job_id,
               priority_class=cls, **kw)


def running(job_id: int, slot: int, cls: str | None = "low", started: float = T0, user: str = "bob") -> Job:
    j = job(job_id, user, cls)
    j.status, j.machine, j.alloc = Status.RUNNING, "m", {"slot": [slot]}
    j.attempts = [Attempt(n=0, machine="m", started=started)]
    j.log_grew = NOW
    return j


def alive(*jobs: Job, now: float = NOW) -> Observation:
    states = {WorkerRef(j.id, j.attempt, 0): WorkerState(WorkerRef(j.id, j.attempt, 0), pid=100 + j.id, alive=True,
                                                         exit_code=None, log_size=0, claimed=True) for j in jobs}
    return Observation(now=now, machines={"m": MachineView(reachable=True, workers=states)})


def test_an_urgent_job_evicts_one_low_job_which_resumes_after_it() -> None:
    low1, low2 = running(1, 0, started=T0 - 10), running(2, 1, started=T0)
    urgent = job(3, "alice", "urgent")
    jobs = [low1, low2, urgent]
    plan = core.decide(jobs, team(), alive(low1, low2))
    plan.apply_to(jobs)
    by = {j.id: j for j in jobs}
    assert by[2].status is Status.KILLING and by[2].evicted_by == 3 and by[2].reason == model.PREEMPTED
    assert by[1].status is Status.RUNNING  # exactly one: the one started last
    assert [(k.job, k.machine) for k in plan.actions if isinstance(k, Kill)] == [(2, "m")]
    assert by[3].waiting == "evicting job 2 (low) on m"
    # Its workers gone, the evicted job is queued to resume: a preemption, never a failure or a retry.
    settled = core.Plan()
    killed(by[2], "m", True, NOW + 1, settled)
    settled.apply_to(jobs)
    by = {j.id: j for j in jobs}
    assert (by[2].status, by[2].reason, by[2].resume) == (Status.QUEUED, model.RECOVERING, True)
    assert (by[2].preemptions, by[2].recoveries, by[2].retried, by[2].attempts[0].outcome) == (1, 0, 0, model.PREEMPTED)
    # The next pass starts the urgent job in the freed slot; the evicted one says who evicted it.
    plan = core.decide(jobs, team(), alive(by[1], now=NOW + 2))
    plan.apply_to(jobs)
    assert [a.job for a in plan.actions if isinstance(a, Launch)] == [3]
    by = {j.id: j for j in jobs}
    assert by[2].waiting is not None and by[2].waiting.startswith("evicted by job 3 (urgent); ")


def test_no_eviction_in_a_jobs_first_min_runtime_nor_by_a_class_no_higher() -> None:
    fleet = team(1)
    fresh = running(1, 0, cls="high", started=NOW - 10)  # high's min_runtime: 600 s
    urgent = job(2, "alice", "urgent")
    plan = core.decide([fresh, urgent], fleet, alive(fresh))
    assert not [a for a in plan.actions if isinstance(a, Kill)]
    low = running(1, 0, cls="low")
    same = job(2, "bob", "low")
    plan = core.decide([low, same], fleet, alive(low))
    assert not [a for a in plan.actions if isinstance(a, Kill)]


def test_a_higher_class_goes_first_whatever_the_fair_share_turn() -> None:
    jobs = [job(1, "bob", "low"), job(2, "carol"), job(3, "alice", "urgent")]
    plan = core.decide(jobs, team(1), alive())
    assert [a.job for a in plan.actions if isinstance(a, Launch)] == [3]


# ---- end to end: two local slots ------------------------------------------------------------------

def _home(tmp_path: Path) -> Path:
    return make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 2}}}, priority_classes=TEAM)


# A low job runs until its resumed attempt (JOBTPU_RESUME=1), which says so and finishes.
LOW = ('echo "${{JOBTPU_RESUME:-0}}" >> {marks}/resumed-$JOBTPU_JOB_ID\n'
       '[ "${{JOBTPU_RESUME:-0}}" = 1 ] && exit 0\n'
       'while :; do sleep 0.2; done\n')


def test_a_class_the_user_may_not_use_queues_nothing(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    for user, cls, said in (("bob", "urgent", "--class urgent: bob may not use it (machines.json allows alice)"),
                            ("bob", "top", "--class top: no such priority class")):
        done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--user", user, "--class", cls, check=False)
        assert done.returncode != 0 and done.stderr.splitlines()[0].startswith(f"jobtpu: error: {said}"), done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 2
    assert status(home) == {} and not list((home / "archives").glob("*.tar.gz"))


def test_an_urgent_submit_evicts_exactly_one_low_job_which_resumes_after(tmp_path: Path) -> None:
    home = _home(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    src = write_tree(tmp_path / "src", {"low.sh": LOW.format(marks=marks)})
    lows = [submit(home, src, "bash low.sh", "--user", "bob", "--class", "low") for _ in range(2)]
    passes_until(home, lambda jobs: all(jobs[i]["status"] == "running" for i in lows), "both low jobs to run")
    urgent = submit(home, src, "true", "--user", "alice", "--class", "urgent")
    jobs = manage(home)
    assert jobs[urgent]["status"] == "queued" and jobs[urgent]["waiting"].startswith("evicting job ")
    evicted = [i for i in lows if jobs[i]["status"] != "running"]
    assert len(evicted) == 1 and jobs[urgent]["waiting"] == f"evicting job {evicted[0]} (low) on local"
    jobs = passes_until(home, lambda js: js[urgent]["status"] == "finished" and js[evicted[0]]["status"] == "finished",
                        "the urgent job, then the evicted one's resume, to finish")
    gone = jobs[evicted[0]]
    assert [a["outcome"] for a in gone["attempts"]] == ["preempted", "finished"] and gone["attempts"][1]["resume"]
    assert (gone.get("preemptions"), gone.get("recoveries", 0), gone.get("retried", 0)) == (1, 0, 0)
    assert (marks / f"resumed-{evicted[0]}").read_text().split() == ["0", "1"]  # JOBTPU_RESUME=1 the second time
    assert jobs[urgent]["attempts"][0]["started"] <= gone["attempts"][1]["started"]
    kept = next(i for i in lows if i not in evicted)
    assert jobs[kept]["status"] == "running" and len(jobs[kept]["attempts"]) == 1
    events = [json.loads(line) for line in (home / "events.jsonl").read_text().splitlines()] \
        if (home / "events.jsonl").exists() else []
    assert any(e["kind"] == "preempted" and e.get("job") == evicted[0] and e.get("detail", {}).get("evicted_by") == urgent
               for e in events), events
    jobtpu(home, "kill", str(kept), env={"JOBTPU_USER": "bob"})


# ---- end to end: the fake TPU API -----------------------------------------------------------------

def test_an_evicted_tpu_job_resumes_and_its_goodput_counts_the_eviction(tmp_path: Path, tpus: TpuFleet) -> None:
    tpus.add_node("tpu-a", workers=1, accelerator="v3-8", preemptible=False)
    home = tmp_path / "home"
    write_machines(home, tpus, {"tpu-a": tpus.machine_spec("tpu-a", runtime_version="tpu-ubuntu2204-base")})
    doc = json.loads((home / "machines.json").read_text())
    (home / "machines.json").write_text(json.dumps({**doc, "priority_classes": TEAM}))
    src = write_tree(tmp_path / "src", {"x": ""})
    cmd = 'echo "resume=$JOBTPU_RESUME"; [ "$JOBTPU_RESUME" = 1 ] && exit 0; while :; do sleep 0.2; done'
    low = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", cmd, "--class", "low",
                     env={"JOBTPU_USER": "bob"}).stdout)
    passes_until(home, lambda jobs: jobs[low]["status"] == "running", "the low job to run on tpu-a", timeout=120)
    urgent = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--class", "urgent",
                        env={"JOBTPU_USER": "alice"}).stdout)
    jobs = passes_until(home, lambda js: js[urgent]["status"] != "queued" or js[urgent].get("waiting", "").startswith(
        "evicting"), "the urgent job to evict", timeout=120)
    assert jobs[urgent].get("waiting") == f"evicting job {low} (low) on tpu-a", jobs[urgent]
    jobs = passes_until(home, lambda js: js[urgent]["status"] == "finished" and js[low]["status"] == "finished",
                        "the urgent job, then the low one's resume, to finish", timeout=180)
    assert [a["outcome"] for a in jobs[low]["attempts"]] == ["preempted", "finished"]
    assert jobs[low].get("preemptions") == 1 and jobs[urgent]["attempts"][0]["machine"] == "tpu-a"
    out = jobtpu(home, "tail", str(low), "--attempt", "1", "-n", "10").stdout
    assert "resume=1" in out
    [report] = json.loads(jobtpu(home, "report", str(low), "--json").stdout)["reports"]
    assert [(i["after"], i["before"], i["by_hand"]) for i in report["interruptions"]] == [(0, 1, False)]
    assert report["productive"] < report["total"]  # the evicted attempt's lost time counts against its goodput


# ---- a shared home: the runner checks a member's class again ---------------------------------------

def test_a_members_forged_class_is_refused_by_the_runner_and_queues_nothing(team: Team) -> None:
    """bob may not use `urgent`: his submit says so in one line; a request he rewrote to claim it is
    refused by alice's pass (docs/design.md §7), his other submit taken in."""
    from tests.test_sealed_requests import _rewrite
    from tests.test_shared_home import rows, source_of, write_as_runner

    alice, bob = team.accounts
    home = team.team_home(slots=2)
    classes = {"low": {"min_runtime": 0}, "normal": {"default": True}, "urgent": {"users": [alice]}}
    write_as_runner(team, home / "machines.json", {"machines": {"local": {"kind": "local", "resources": {"slot": 2}}},
                                                   "priority_classes": classes})
    src = source_of(team, bob)

    def submit_as_bob(*extra: str, check: bool = True) -> Any:
        return team.run(bob, "--home", str(home), "submit", "--dir", str(src), "--cmd", "bash train.sh", "--hold",
                        *extra, check=check, umask="0077")

    said = submit_as_bob("--class", "urgent", check=False)
    assert said.returncode != 0 and said.stderr.splitlines()[0] == (
        f"jobtpu: error: --class urgent: {bob} may not use it (machines.json allows {alice})"), said.stderr
    forged, fine = (int(submit_as_bob("--class", "low").stdout) for _ in range(2))
    request = next((home / "spool").glob(f"submit-{forged}-1-*.json"))
    doc = json.loads(request.read_text())
    doc["jobs"][0]["priority_class"] = "urgent"
    _rewrite(request, jobs=doc["jobs"])
    out = team.run(alice, "--home", str(home), "manage", umask="0077").stderr
    assert "Traceback" not in out, out
    assert list(rows(team, home)) == [fine] and rows(team, home)[fine]["priority_class"] == "low"
    answers = team.run(bob, "--home", str(home), "requests").stdout
    assert (f"submit of job {forged}: refused: jobtpu: error: job {forged}: --class urgent: {bob} may not use it "
            f"(machines.json allows {alice})") in answers, answers


def test_update_class_of_a_queued_job_with_submits_checks(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    mine = submit(home, src, "true", "--user", "alice", "--hold")
    bobs = submit(home, src, "true", "--user", "bob", "--hold")
    for who, job_id, cls, said in (("bob", bobs, "urgent", "--class urgent: bob may not use it (machines.json allows alice)"),
                                   ("alice", mine, "top", "--class top: no such priority class")):
        done = jobtpu(home, "update", str(job_id), "--class", cls, check=False, env={"JOBTPU_USER": who})
        assert done.returncode != 0 and done.stderr.splitlines()[0].startswith(f"jobtpu: error: {said}"), done.stderr
        assert "Traceback" not in done.stderr
    assert status(home)[bobs].get("priority_class") is None
    done = jobtpu(home, "update", str(mine), "--class", "urgent", env={"JOBTPU_USER": "alice"})
    assert "priority_class" in done.stdout, done.stdout
    assert status(home)[mine]["priority_class"] == "urgent"
