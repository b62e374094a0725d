"""Retries by exit code and causes counted apart (docs/reference/requests-and-rules.md §7.3,
docs/reference/commands.md §2.2.3): the pure rules as tables, then exit codes through real processes on
the local machine and on an ssh box, and a member's submit the runner must refuse. (Preemptions and the stall default on the fake TPU API are in
tests/test_tpu_rules.py.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from jobtpu import timing
from jobtpu.decide import core, rules
from jobtpu.decide.observation import MachineView, Observation
from jobtpu.decide.workers import WorkerRef, WorkerState
from jobtpu.schema import exit_codes
from jobtpu.schema import state as model
from jobtpu.schema.fleet import DEFAULT_ERROR_PATTERNS, Fleet, Machine
from jobtpu.schema.state import Attempt, Job, Status
from jobtpu.views.listing import attempt_text
from tests.accounts import Team
from tests.helpers import jobtpu, make_home, manage_until, status, submit, write_tree
from tests.sshfleet import SshFleet

NOW = 1_000_000.0

# ---- the exit-code list ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "ranges", "kept"), [
    ("42", ((42, 42),), "42"),
    ("42,127-255", ((42, 42), (127, 255)), "42,127-255"),
    (" 1 , 3-3 ", ((1, 1), (3, 3)), "1,3"),
])
def test_an_exit_code_list_parses_to_its_ranges(text: str, ranges: tuple[tuple[int, int], ...], kept: str) -> None:
    assert exit_codes.parse(text) == ranges and exit_codes.normal(text) == kept


@pytest.mark.parametrize(("text", "says"), [
    ("5-2", "the range 5-2 runs backwards (write it 2-5)"),
    ("abc", "'abc' is not an exit code or a range of them"),
    ("300", "300 is not an exit code a job can fail with (they are 1 to 255)"),
    ("0", "0 is not an exit code a job can fail with"),
    ("42,", "'' is not an exit code"),
    ("-3", "'-3' is not an exit code"),
])
def test_a_bad_exit_code_list_is_one_line(text: str, says: str) -> None:
    with pytest.raises(ValueError) as raised:
        exit_codes.parse(text)
    assert says in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(("codes", "code", "listed"), [
    (None, 1, True), (None, 0, False), (None, None, False), ("42", 42, True), ("42", 1, False),
    ("42,127-255", 130, True), ("42,127-255", 126, False), ("42", -9, False),
])
def test_which_exit_codes_a_list_names(codes: str | None, code: int | None, listed: bool) -> None:
    assert exit_codes.listed(codes, code) is listed


# ---- causes and budgets ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("reason", "cause"), [
    (model.PREEMPTED, rules.PREEMPTION), (model.LOST, rules.INFRASTRUCTURE), (model.GRPC, rules.INFRASTRUCTURE),
    (model.HANG, rules.INFRASTRUCTURE), (model.LAUNCH_FAILED, rules.INFRASTRUCTURE), ("exit 42", rules.OWN),
    (model.OOM, rules.OWN), (model.TIMEOUT, rules.OWN), (model.KILLED, None), (model.DEPENDENCY, None),
    (model.HOME_FILE, None), (model.UNREACHABLE, None), (model.RECOVERING, None),
])
def test_every_reason_word_has_its_cause(reason: str, cause: str | None) -> None:
    assert rules.cause_of(reason) == cause


def test_the_cause_table_names_every_reason_an_attempt_fails_with() -> None:
    # killed, dependency, home_file, recovering and unreachable end no attempt by failing
    assert set(rules.CAUSES) == model.REASONS - {model.KILLED, model.DEPENDENCY, model.HOME_FILE, model.RECOVERING,
                                                 model.UNREACHABLE}


def job(**kw: Any) -> Job:
    return Job(id=1, user="u", cmd="c", archive="a.tar.gz", created=NOW, **kw)


@pytest.mark.parametrize(("fields", "reason", "budget"), [
    ({}, model.PREEMPTED, rules.Budget(0, None, "--max-preemptions", "preemption")),
    ({"preemptions": 4, "max_preemptions": 5}, model.PREEMPTED, rules.Budget(4, 5, "--max-preemptions", "preemption")),
    ({"recoveries": 2}, model.LOST, rules.Budget(2, 20, "--max-recoveries", "infrastructure recovery")),
    ({"recoveries": 2, "max_recoveries": 3}, model.GRPC, rules.Budget(2, 3, "--max-recoveries",
                                                                     "infrastructure recovery")),
    ({}, "exit 1", None),
])
def test_each_cause_spends_its_own_budget(fields: dict[str, Any], reason: str, budget: rules.Budget | None) -> None:
    assert rules.budget(job(**fields), reason) == budget


@pytest.mark.parametrize(("reason", "code", "on_exit", "retried", "retries", "answer"), [
    ("exit 42", 42, "42", 0, 2, rules.RESUME),
    ("exit 1", 1, "42", 0, 2, None),
    ("exit 1", 1, None, 0, 2, rules.RESUME),  # without a list: any non-zero exit, as before
    ("exit 130", 130, "42,127-255", 1, 2, rules.RESUME),
    ("exit 42", 42, "42", 2, 2, None),  # spent
    (model.GRPC, 1, "42", 0, 2, None),  # a grpc classification keeps its code: 1 is not listed
    (model.OOM, 42, "42", 0, 2, None),  # oom is never retried
])
def test_retries_by_exit_code(reason: str, code: int, on_exit: str | None, retried: int, retries: int,
                              answer: rules.Recovery | None) -> None:
    assert rules.retry("pass", reason, retried, retries, code, on_exit) == answer


# ---- the stall default -------------------------------------------------------------------------------------

def tpu(preemptible: bool) -> Machine:
    return Machine(name="m", kind="tpu", node="node-m", zone="europe-west4-a", accelerator="v3-8",
                   preemptible=preemptible)


BOX = Machine(name="m", kind="ssh", hosts=("10.0.0.1",), resources={"gpu": 1})


@pytest.mark.parametrize(("stall", "machine", "kept"), [
    (None, tpu(True), timing.DEFAULTS.stall_default),  # a preemptible TPU watches by default
    (None, tpu(False), None), (None, BOX, None),  # other machines keep no default
    (0, tpu(True), None),  # --stall 0: off
    (120, tpu(False), 120), (120, tpu(True), 120),
])
def test_the_stall_an_attempt_keeps(stall: float | None, machine: Machine, kept: float | None) -> None:
    assert rules.stall_of(job(stall=stall), machine) == kept


def test_a_preemptible_tpu_s_default_stall_ends_a_silent_attempt_as_a_hang() -> None:
    quiet = running(tpu(True), log_grew=NOW - timing.DEFAULTS.stall_default - 1)
    decide([quiet], fleet(tpu(True)), seen(worker(quiet, alive=True)))
    assert (quiet.status, quiet.reason) == (Status.KILLING, model.HANG)
    off = running(tpu(True), log_grew=NOW - timing.DEFAULTS.stall_default - 1, stall=0)
    decide([off], fleet(tpu(True)), seen(worker(off, alive=True)))
    assert off.status is Status.RUNNING


# ---- decisions through decide ------------------------------------------------------------------------------

def decide(jobs: list[Job], fleet: Fleet, seen: Observation) -> Any:
    """A pass's decision, applied to `jobs` as the pass applies it (passes/manage.py)."""
    plan = core.decide(jobs, fleet, seen)
    plan.apply_to(jobs)
    return plan


def running(machine: Machine, **kw: Any) -> Job:
    j = job(**kw)
    j.status, j.machine, j.alloc = Status.RUNNING, machine.name, {"slot": [0]}
    j.attempts = [Attempt(n=0, machine=machine.name, started=NOW - 60)]
    j.log_grew = j.log_grew if j.log_grew is not None else NOW
    return j


def worker(j: Job, alive: bool = False, code: int | None = None) -> WorkerState:
    return WorkerState(WorkerRef(j.id, j.attempt, 0), pid=100, alive=alive, exit_code=code, log_size=0,
                       claimed=True)


def fleet(machine: Machine) -> Fleet:
    return Fleet(machines={machine.name: machine}, error_patterns=dict(DEFAULT_ERROR_PATTERNS))


def seen(*states: WorkerState, **view: Any) -> Observation:
    return Observation(now=NOW, machines={"m": MachineView(reachable=True, workers={s.ref: s for s in states},
                                                            **view)})


def test_an_exit_42_is_retried_under_its_list_and_an_exit_1_is_not() -> None:
    listed = running(BOX, retries=2, retry_on_exit="42,127-255")
    decide([listed], fleet(BOX), seen(worker(listed, code=42)))
    assert (listed.attempt, listed.retried, listed.attempts[0].outcome) == (1, 1, "exit 42")
    other = running(BOX, retries=2, retry_on_exit="42,127-255")
    plan = decide([other], fleet(BOX), seen(worker(other, code=1)))
    assert (other.status, other.reason, other.retried) == (Status.FAILED, "exit 1", 0)
    assert [m.spent for m in plan.moves] == [None]  # no budget ran out: the code is not one to retry


@pytest.mark.parametrize("alive", [False, True])
def test_a_worker_stopped_at_its_timeout_fails_with_reason_timeout_whether_or_not_its_wrapper_is_gone(
        alive: bool) -> None:
    """The wrapper writes its exit record before it exits: a probe between the two sees it alive with
    the TERM's exit code, and that is the --timeout's end all the same, never an `exit 143` retried."""
    timed = running(BOX, retries=2, retry_on_exit="143")
    stopped = msgspec.structs.replace(worker(timed, alive=alive, code=143), timed_out=True)
    decide([timed], fleet(BOX), seen(stopped))
    # A wrapper not yet gone is stopped first (killing), the ending kept: failed with reason timeout.
    assert (timed.status, timed.reason, timed.retried) == (Status.KILLING if alive else Status.FAILED, model.TIMEOUT, 0)


def test_spent_retries_end_the_job_with_their_line() -> None:
    spent = running(BOX, retries=2, retried=2)
    plan = decide([spent], fleet(BOX), seen(worker(spent, code=3)))
    assert (spent.status, spent.reason) == (Status.FAILED, "exit 3")
    assert plan.notes == ["job 1: exit 3 (2 retries used, the most --retries allows)"]
    assert [m.spent for m in plan.moves] == ["2 retries used, the most --retries allows"]


def test_a_preemption_spends_no_retry_and_no_infrastructure_recovery() -> None:
    preempted = running(tpu(True), retries=1, retried=1, max_recoveries=0)
    decide([preempted], fleet(tpu(True)), seen(preempted=True, ready=False))
    assert (preempted.status, preempted.reason) == (Status.QUEUED, model.RECOVERING)
    assert (preempted.preemptions, preempted.recoveries, preempted.retried) == (1, 0, 1)
    assert attempt_text(preempted) == "1 (1 pre, 1/1 retry)"


def test_a_record_from_before_reads_its_recoveries_as_infrastructure_ones() -> None:
    """A record written when every recovery counted as one: it loads; its count stays against
    --max-recoveries (its preemptions among them) until a person's resume or rerun starts afresh."""
    old = {"id": 1, "user": "u", "cmd": "c", "archive": "a.tar.gz", "created": NOW, "recoveries": 20,
           "max_recoveries": 20, "status": "failed", "reason": "preempted"}
    record = msgspec.json.decode(json.dumps(old), type=Job)
    assert (record.recoveries, record.preemptions, record.max_preemptions) == (20, 0, None)
    assert rules.budget(record, model.LOST) == rules.Budget(20, 20, "--max-recoveries", "infrastructure recovery")
    assert attempt_text(record) == "0 (20 infra)"
    record.queued_by_hand()
    assert (record.recoveries, record.preemptions, record.retried) == (0, 0, 0)


@pytest.mark.parametrize(("fields", "shown"), [
    ({}, "5"), ({"preemptions": 3, "recoveries": 1, "retries": 2, "retried": 1}, "5 (3 pre, 1 infra, 1/2 retry)"),
    ({"preemptions": 2}, "5 (2 pre)"),
])
def test_status_counts_each_cause_apart(fields: dict[str, Any], shown: str) -> None:
    assert attempt_text(job(attempt=5, **fields)) == shown


# ---- through real processes ----------------------------------------------------------------------------

def _home(tmp_path: Path) -> Path:
    return make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 4}}})


# An exit code from the job's own file, so each attempt can exit differently: 42 on the first, then 0.
FLAKY = ('n=$(cat ../../count-{tag} 2>/dev/null || echo 0); echo $((n + 1)) > ../../count-{tag}\n'
         '[ "$n" -ge 1 ] || exit {code}\n')


@pytest.mark.parametrize("bad", ["5-2", "abc", "300"])
def test_a_bad_exit_code_list_queues_nothing(tmp_path: Path, bad: str) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--retries", "2", "--retry-on-exit", bad,
                  check=False)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) <= 2, done.stderr  # the line and its hint
    assert f"--retry-on-exit '{bad}'" in done.stderr.splitlines()[0] and "Traceback" not in done.stderr
    assert status(home) == {} and not list((home / "archives").glob("*.tar.gz"))
    alone = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--retry-on-exit", "42", check=False)
    assert alone.returncode != 0 and "there is no --retries" in alone.stderr and status(home) == {}


def test_an_exit_42_is_retried_under_retry_on_exit_and_an_exit_1_is_not_locally(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"a.sh": FLAKY.format(tag="a", code=42), "b.sh": FLAKY.format(tag="b", code=1)})
    retried = submit(home, src, "bash a.sh", "--retries", "2", "--retry-on-exit", "42,127-255")
    failed = submit(home, src, "bash b.sh", "--retries", "2", "--retry-on-exit", "42,127-255")
    jobs = manage_until(home, [retried, failed], {"finished", "failed"})
    assert [a["outcome"] for a in jobs[retried]["attempts"]] == ["exit 42", "finished"]
    assert (jobs[retried]["status"], jobs[retried]["retried"], jobs[retried]["retry_on_exit"]) == (
        "finished", 1, "42,127-255")
    assert (jobs[failed]["status"], jobs[failed]["reason"], len(jobs[failed]["attempts"])) == ("failed", "exit 1", 1)
    assert "1 (1/2 retry)" in jobtpu(home, "status", str(retried)).stdout


def test_an_exit_42_is_retried_on_an_ssh_box_and_an_exit_1_is_not(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    from tests import test_ssh_jobs as ssh

    fm = ssh_fleet.add_machine("box", n_hosts=1)
    home = tmp_path / "home"
    ssh.write_fleet(home, ssh_fleet, {"box": (fm, {})})
    src = write_tree(tmp_path / "src", {"a.sh": FLAKY.format(tag="a", code=42), "b.sh": FLAKY.format(tag="b", code=1)})
    retried = ssh.submit(home, src, "bash a.sh", "--retries", "1", "--retry-on-exit", "42")
    failed = ssh.submit(home, src, "bash b.sh", "--retries", "1", "--retry-on-exit", "42")
    done = ssh.manage_until(home, lambda s: {s[retried]["status"], s[failed]["status"]} <= {"finished", "failed"},
                            "both jobs to end")
    assert [a["outcome"] for a in done[retried]["attempts"]] == ["exit 42", "finished"]
    assert (done[failed]["status"], done[failed]["reason"], done[failed].get("retried", 0)) == ("failed", "exit 1", 0)


def test_a_member_s_submit_with_a_bad_exit_code_list_is_refused_and_the_home_still_reads(trio: Team) -> None:
    """bob rewrites his submit's list before the runner takes it in: the runner refuses that submit in
    one line (as submit would), and state.json, which could not be read with it, stays readable."""
    from tests.test_shared_ids import HANG, owners, shared_home
    from tests.test_shared_ids import submit as member_submit

    alice, bob, _ = trio.accounts
    home = shared_home(trio)
    refused = member_submit(trio, bob, home, "--retries", "2", "--retry-on-exit", "42")[0]
    claim = next((home / "spool").glob(f"submit-{refused}-1-*.json"))
    doc = json.loads(claim.read_text())
    doc["jobs"][0]["retry_on_exit"] = "5-2"
    done = subprocess.run(["runuser", "-u", bob, "--", "bash", "-c", f"cat > {claim}"], input=json.dumps(doc),
                          capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0, done.stderr
    said = trio.run(alice, "--home", str(home), "manage", umask="0077")
    assert refused not in owners(trio, home) and "the range 5-2 runs backwards" in said.stderr, said.stderr
    assert trio.run(alice, "--home", str(home), "status", "--all-users").returncode == 0


def test_stall_0_is_kept_as_no_watch_and_a_negative_one_is_refused(tmp_path: Path) -> None:
    home = _home(tmp_path)
    src = write_tree(tmp_path / "src", {"x": ""})
    off = submit(home, src, "true", "--stall", "0", "--hold")
    assert status(home)[off]["stall"] == 0
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--stall=-5m", check=False)
    assert done.returncode != 0 and "--stall '-5m' is not a duration" in done.stderr and len(status(home)) == 1


@pytest.mark.parametrize(("n", "one", "option", "line"), [
    (1, "preemption", "--max-preemptions", "1 preemption used, the most --max-preemptions allows"),
    (3, "preemption", "--max-preemptions", "3 preemptions used, the most --max-preemptions allows"),
    (1, "infrastructure recovery", "--max-recoveries", "1 infrastructure recovery used, the most --max-recoveries allows"),
    (1, "retry", "--retries", "1 retry used, the most --retries allows"),
    (2, "retry", "--retries", "2 retries used, the most --retries allows"),
])
def test_a_spent_budget_is_said_in_its_number(n: int, one: str, option: str, line: str) -> None:
    assert rules.spent_line(n, one, option) == line
