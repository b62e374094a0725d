"""Where a preempted or lost job resumes, by locality (machines.json's `resume`,
docs/reference/machines-json.md §3.12): the order of the candidates as a table, the policy's checks at
load, and a pass's decision with jobs and observations built by hand. No I/O but machines.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobtpu.decide import core
from jobtpu.decide.locality import may_cross_regions, ranked, where_text
from jobtpu.decide.observation import Launch, MachineView, Observation
from jobtpu.errors import ConfigError
from jobtpu.home.layout import Home
from jobtpu.home.machines import load_fleet
from jobtpu.schema import state as model
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.resume_policy import DEFAULT, ResumePolicy
from jobtpu.schema.saving import Saving
from jobtpu.schema.state import Attempt, Job, Status
from tests.helpers import jobtpu

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast

ZONES = {"eu": "europe-west4-a", "ua": "us-central2-a", "ub": "us-central2-b", "ub2": "us-central2-b",
         "east": "us-east1-d"}


def tpu(name: str) -> Machine:
    return Machine(name=name, kind="tpu", node=f"node-{name}", zone=ZONES[name], accelerator="v4-8", preemptible=True)


# machines.json's order: another region's TPU first, the job's own zone's last.
FLEET = [tpu("eu"), tpu("east"), tpu("ua"), tpu("ub2"), Machine(name="box", kind="ssh", hosts=("10.0.0.5",))]
ANYWHERE = ResumePolicy(order=("zone", "region", "allowed"), regions=("us-east1", "europe-west4"), wait_for_own=False)


@pytest.mark.parametrize("origin, policy, cross, expected", [
    # No policy: its zone, then its region; never another region, nor a machine of no zone.
    ("us-central2-b", DEFAULT, False, ["ub2", "ua"]),
    ("us-central2-b", DEFAULT, True, ["ub2", "ua"]),
    # A region listed: taken only when the job's data may follow it there, in the list's order.
    ("us-central2-b", ANYWHERE, False, ["ub2", "ua"]),
    ("us-central2-b", ANYWHERE, True, ["ub2", "ua", "east", "eu"]),
    ("europe-west4-a", ANYWHERE, True, ["eu", "east"]),  # its own region is no "allowed" one twice
    # The order as given: the region before the zone takes the region's machines in machines.json's order.
    ("us-central2-b", ResumePolicy(order=("region", "zone")), False, ["ua", "ub2"]),
    ("us-central2-b", ResumePolicy(order=("zone",)), False, ["ub2"]),
    ("us-central2-b", ResumePolicy(order=("allowed", "zone"), regions=("us-central2",)), False, ["ua", "ub2"]),
    # A job that ran where no zone is named: every machine, as machines.json lists them (today's order).
    (None, ANYWHERE, False, ["eu", "east", "ua", "ub2", "box"]),
])
def test_candidates_go_nearest_first(origin: str | None, policy: ResumePolicy, cross: bool,
                                     expected: list[str]) -> None:
    assert [m.name for m in ranked(origin, policy, FLEET, cross)] == expected


# ---- the policy in machines.json ------------------------------------------------------------------

def machines(resume: Any) -> dict[str, Any]:
    return {"gcp": {"project": "p"}, "resume": resume,
            "machines": {name: {"kind": "tpu", "node": name, "zone": ZONES[name], "accelerator": "v4-8"}
                         for name in ("eu", "ua")}}


@pytest.mark.parametrize("resume, line", [
    ({"order": ["zone", "planet"]},
     "'resume.order' must be a list of zone, region, allowed (where a resuming job looks, nearest first) "
     "(got ['zone', 'planet'])"),
    ({"order": "zone"}, "'resume.order' must be a list of zone, region, allowed"),
    ({"order": []}, 'resume.order is empty: list where a resuming job looks, like ["zone", "region"]'),
    ({"order": ["zone", "zone"]}, "resume.order names 'zone' twice: name each of zone, region, allowed once"),
    ({"regions": ["asia-east1"]}, "resume.regions names 'asia-east1', the region of no machine's zone "
                                  "(the machines' regions: europe-west4, us-central2)"),
    ({"regions": ["us-central2-a"]}, "resume.regions names 'us-central2-a', the region of no machine's zone"),
    ({"order": ["zone"], "regions": ["europe-west4"]},
     'resume.regions is unused: add "allowed" to resume.order, or drop the regions'),
    ({"regions": ["europe-west4", "europe-west4"]}, "resume.regions names a region twice"),
    ({"wait_for_own": "no"}, "'resume.wait_for_own' must be true or false (got 'no')"),
    ({"waitforown": True}, "unknown key 'waitforown' in resume"),
    ([], "'resume' must be an object"),
])
def test_a_bad_policy_is_one_line_at_load(tmp_path: Path, resume: Any, line: str) -> None:
    home = Home(tmp_path)
    text = json.dumps(machines(resume))
    home.machines_file.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_fleet(home)
    assert info.value.message.startswith(f"machines.json: {line}"), info.value.message
    assert "\n" not in info.value.message and home.machines_file.read_text() == text


def test_the_policy_loads_and_its_absence_is_the_default(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.machines_file.write_text(json.dumps(machines({"regions": ["europe-west4"]})))
    assert load_fleet(home).resume == ResumePolicy(("zone", "region", "allowed"), ("europe-west4",), False)
    doc = machines({})
    del doc["resume"]
    home.machines_file.write_text(json.dumps(doc))
    assert load_fleet(home).resume == DEFAULT == ResumePolicy(("zone", "region"), (), True)


def test_the_cli_says_a_bad_region_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "machines.json").write_text(json.dumps(machines({"regions": ["mars-north1"]})))
    done = jobtpu(tmp_path, "machines", check=False)
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and done.stdout == "" and len(lines) == 2, done.stderr
    assert lines[0].startswith("jobtpu: error: machines.json: resume.regions names 'mars-north1'")


# ---- a pass's decision ------------------------------------------------------------------------------

T0 = 1_000_000.0


def running_on(name: str, rule: str | None = None) -> Job:
    job = Job(id=1, user="u", cmd="python train.py", archive="a.tar.gz", created=T0, req=["v4-8"], rule=rule)
    job.status, job.machine, job.alloc, job.log_grew = Status.RUNNING, name, {"slot": [0]}, T0
    job.attempts = [Attempt(n=0, machine=name, started=T0, workers=1)]
    return job


def decide(job: Job, policy: ResumePolicy, lost: bool = False) -> list[Launch]:
    """One pass in which the job's TPU is preempted (or, `lost`, its worker gone) and every other TPU
    is up and idle: the launches it decides, the job as the pass leaves it."""
    fleet = Fleet(machines={m.name: m for m in [*FLEET[:4], tpu("ub")]}, resume=policy)
    own = MachineView(reachable=True) if lost else MachineView(reachable=True, preempted=True, ready=False)
    seen = Observation(now=T0 + 100, machines={n: own if n == job.machine else MachineView(reachable=True)
                                               for n in fleet.machines})
    plan = core.decide([job], fleet, seen)
    plan.apply_to([job])
    return [a for a in plan.actions if isinstance(a, Launch)]


def test_a_preempted_job_resumes_at_once_in_its_zone_and_lets_its_own_tpu_go_unless_it_waits_for_it() -> None:
    job = running_on("ub")
    launched = decide(job, ResumePolicy(order=("zone", "region"), wait_for_own=False))
    assert [(a.job, a.machine) for a in launched] == [(1, "ub2")]  # not eu nor east, listed first
    assert (job.status, job.reason, job.attempt, job.resume, job.keeps) == (
        Status.LAUNCHING, model.RECOVERING, 1, True, [])
    job = running_on("ub")  # with no policy it waits for its own TPU, as jobtpu always did
    assert decide(job, DEFAULT) == []
    assert (job.status, job.keeps) == (Status.QUEUED, ["ub"])


def test_a_lost_job_stays_in_its_region() -> None:
    job = running_on("ub")  # its worker is gone: rule pre resumes it at once, keeping nothing
    assert [a.machine for a in decide(job, DEFAULT, lost=True)] == ["ub2"]  # its zone's first, not eu listed first
    assert (job.status, job.reason, job.keeps) == (Status.LAUNCHING, model.RECOVERING, [])


def test_a_job_that_may_not_go_elsewhere_says_where_it_resumes() -> None:
    job = running_on("ub")
    job.attempts[0].machine = job.machine = "ua"  # the only TPU of its zone
    assert decide(job, ResumePolicy(order=("zone",), wait_for_own=False)) == []
    assert (job.status, job.keeps) == (Status.QUEUED, ["ua"])
    assert job.waiting == ("it resumes in zone us-central2-a only (machines.json resume): "
                           "no machine can run it now: ua is being recreated; next in line"), job.waiting


@pytest.mark.parametrize("policy, text", [
    (DEFAULT, "it resumes in zone us-central2-b, then region us-central2 only"),
    (ANYWHERE, "it resumes in zone us-central2-b, then region us-central2 only"),  # no region its data cannot follow
    (ResumePolicy(order=("allowed",), regions=("europe-west4", "us-central2")), "it resumes in region us-central2 only"),
    (ResumePolicy(order=("allowed",), regions=("europe-west4",)), "it may resume in no region its data can follow"),
])
def test_the_pending_reason_says_where_a_job_may_resume(policy: ResumePolicy, text: str) -> None:
    fleet = Fleet(machines={m.name: m for m in [*FLEET, tpu("ub")]}, resume=policy)
    assert where_text(running_on("ub"), fleet) == text


@pytest.mark.parametrize(("saving", "crosses"), [
    (None, False),
    (Saving(marker="saved"), False),  # it knows when it saved, not where a new region finds it
    (Saving(marker="saved", checkpoints="gs://ckpt-{region}/run7"), True),
])
def test_only_a_job_whose_checkpoints_follow_it_crosses_regions(saving: Saving | None, crosses: bool) -> None:
    job = Job(id=1, user="a", cmd="true", archive="x.tar.gz", created=0, saving=saving)
    assert may_cross_regions(job) is crosses
