"""One manage pass: observe the fleet (parallel I/O), decide (pure), save the intents, act, settle
(pure), save the results, tell. `run_pass` reads as those steps, each a function over the pass
context (context.py) and the values the steps before it returned.

Observing gathers (observe.py); deciding moves the jobs (decide/) and plans what TPU machines need
(tpu/flow.py). The intents (jobs launching or stopping, TPU steps) are saved before anything is
started, stopped, deleted or created. Acting only carries them out (act.py) and returns what the
workers reported; settling (decide/settle.py) says what it means for each job, as new records the
pass applies, and the started workers of a launch that half failed are stopped and settled in the
same pass. What the pass tells (events, notifications, progress, the team sheet) is its hooks'
(hooks.py). The pass reads state.json once and writes it at most twice.

The pass holds the pass lock throughout, so two passes never both act; it holds the state lock only
to read and to merge its result, so `submit` never waits for its network work."""

from __future__ import annotations

from collections.abc import Callable

from jobtpu import timing
from jobtpu.decide.core import decide
from jobtpu.decide.observation import Launch, Observation, Plan, Recreate
from jobtpu.decide.settle import settle
from jobtpu.fleet import pulls
from jobtpu.fleet.drivers import driver_for
from jobtpu.home import fence
from jobtpu.home.layout import Home
from jobtpu.home.machines import load_fleet
from jobtpu.home.store import Store
from jobtpu.passes import hooks
from jobtpu.passes.act import act, catch_up_logs, stop_all
from jobtpu.passes.context import Pass, PassReport
from jobtpu.passes.hooks import PassHook
from jobtpu.passes.observe import bring_logs_home, observe
from jobtpu.passes.progress import ProgressHook
from jobtpu.passes.saving import SavingHook
from jobtpu.passes.session import KeptConnections, Session, home_id, pass_lock
from jobtpu.passes.sheet_hook import SheetHook
from jobtpu.passes.tell import EventsHook
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import MachineRecord, Status


class Before(msgspec.Struct, frozen=True):
    """What the pass compares its result with: each machine's state, and the attempts still open."""

    machines: dict[str, str | None]
    open_attempts: set[tuple[int, int]]


def run_pass(home: Home, dry_run: bool = False, wait: float | None = None,
             on_note: Callable[[str], None] | None = None, every: float | None = None,
             kept: KeptConnections | None = None) -> PassReport:
    """One pass. `every`: the interval of the loop running this pass (manage --loop, watch), recorded
    with the pass so that `status` knows when passes are late; None for a single pass. `kept`: that
    loop's connections and threads, kept between its rounds."""
    report = PassReport(on_note=on_note)
    with pass_lock(home, timing.current().manage_lock_wait if wait is None else wait) as got:
        overdue, say = fence.pass_lock_overdue(home, got)
        if say:
            report.say("the pass lock has been held for a whole lease, by a runner that lost the lease or a stuck "
                       "command; this runner, which holds the lease, goes on without it")
        got = got or overdue
        if not got:
            report.skipped = True
            report.notes.append("another pass is running; this one did nothing")
            return report
        if not dry_run and not _may_run(home, report, every):
            return report
        p = open_pass(home, report, dry_run, kept)
        pass_hooks = hooks_of(p, every)
        before = Before({name: record.state for name, record in p.state.machines.items()},
                        pulls.open_attempts(p.state.jobs))
        seen = observe(p)
        bring_logs_home(p, seen)
        note_reachability(p, seen)
        p.notes.extend(hooks.before_decide(pass_hooks, p, seen))
        plan = decide(p.state.jobs, p.fleet, seen)  # what changes, as values: the jobs are as read still
        if dry_run:  # what it would do, never the lines of a real pass (docs/reference/commands.md §2.3)
            report.notes.extend(p.notes + plan.would)
            return report
        plan.apply_to(p.state.jobs)
        for line in p.notes + plan.notes:
            report.say(line)
        plan_recreates(p, plan, seen.now)
        # Intents (launching, killing, TPU steps) are on disk before anything is carried out, with
        # the events they mean: a pass killed while it acts has saved what it must tell (design §3).
        # A pass with nothing to carry out and no ended attempt's log to fetch goes straight to its
        # result: killed before it, it saved nothing, and the next pass sees and decides the same.
        if plan.actions or p.machine_work or pulls.ended_since(p.state.jobs, before.open_attempts):
            p.commit(hooks.before_intents(pass_hooks, p, seen, plan.moves))
        reports = act(p, plan, seen)
        moves = list(plan.moves)  # every status change of the pass, in order: its events are made from them
        settled = settle(p.state, reports, seen.now)  # what they mean; a half-failed launch's workers to stop
        settled.apply_to(p.state)
        stopped = settle(p.state, stop_all(p, settled.kills), seen.now)
        stopped.apply_to(p.state)
        moves += settled.moves + stopped.moves
        for *_, line in sorted(p.copy_notes):
            report.say(line)
        told = len(p.notes)  # the notes above were said; the catch-up's (a log not written, a result not
        catch_up_logs(p, seen, before.open_attempts)  # brought home) come after, and are said here
        for line in p.notes[told:]:
            report.say(line)
        note_reachability(p, seen)  # what the launches, copies, stops and pulls found
        for line in machine_changes(before.machines, p.state.machines):
            report.say(line)
        p.commit(hooks.before_result(pass_hooks, p, seen, moves))  # the result, with what the pass is to tell
        for line in hooks.after_pass(pass_hooks, p, seen):
            report.say(line)
        # What a loop compares state.json with until its next round: any other write (a submit) wakes
        # it. A commit that merged another's write leaves no stamp: that write is not decided yet.
        report.state_left = p.snapshot.stamp or b""
    return report


def _may_run(home: Home, report: PassReport, every: float | None) -> bool:
    """In a home with a runner lease, a pass that holds none (`run`, `watch`) takes it as a runner
    would, or does nothing while another runner holds it (home-files.md §1.7)."""
    from jobtpu.home import fence, lease

    if fence.holding(home) is not None or not lease.in_use(home):
        return True
    go, lines = fence.round_(home, False, every)
    for line in lines:
        report.say(line)
    report.skipped = not go
    return go


def open_pass(home: Home, report: PassReport, dry_run: bool, kept: KeptConnections | None) -> Pass:
    """The pass's context over machines.json and state.json as they are now."""
    fleet = load_fleet(home)
    for line in fleet.refused:  # privileged keys an untrusted machines.json held (docs/design.md §7)
        report.say(line)
    state, snapshot = Store(home).read()
    p = Pass(home, fleet, state, snapshot, kept)
    p.dry_run = dry_run
    if not dry_run:  # a damaged home id stops the pass before it launches what it could not find again
        home_id(home)
    return p


def hooks_of(p: Pass, every: float | None) -> list[PassHook]:
    """The pass's hooks, in the order they are called: events (and their notifications), progress,
    the attempts' saves (before the pass decides), the team sheet (docs/design.md §3)."""
    return [EventsHook(every), ProgressHook(), SavingHook(), SheetHook(lambda seen: would_start_a_job(p, seen))]


def would_start_a_job(p: Pass, seen: Observation) -> bool:
    """Whether deciding now starts a queued job: decide changes nothing it is given, so asking it tells."""
    if not any(job.status is Status.QUEUED for job in p.state.jobs):
        return False
    queued = {job.id for job in p.state.jobs if job.status is Status.QUEUED}
    plan = decide(p.state.jobs, p.fleet, seen)
    return any(isinstance(action, Launch) and action.job in queued for action in plan.actions)


def note_reachability(p: Session, seen: Observation) -> None:
    """Each machine's record as its driver judges this pass's contacts (an ssh machine's by
    reach.reachability); one that failed recently and was not asked again takes no new jobs. Applied
    after observing and after acting."""
    for machine in p.fleet.machines.values():
        if not driver_for(machine).judge_reach(p.state, machine, p.contacts.of(machine.name), seen.now):
            seen.view(machine.name).ready = False


def plan_recreates(p: Pass, plan: Plan, now: float) -> None:
    """The machines the decisions want back (TPUs) get their first step planned by their driver and
    recorded as an intent, so it is saved with the rest before it is carried out."""
    for name in sorted({a.machine for a in plan.actions if isinstance(a, Recreate)}):
        machine = p.fleet.get(name)
        work = driver_for(machine).bring_back(p, machine, now) if machine is not None else None
        if work is not None:
            p.machine_work[name] = work


def machine_changes(was: dict[str, str | None], now: dict[str, MachineRecord]) -> list[str]:
    """A line per machine whose state changed in this pass, so a pass run from cron says when a
    machine went away or came back (once, not on every pass while it stays so)."""
    lines = []
    for name, record in sorted(now.items()):
        state = record.state
        if state != was.get(name) and state is not None:
            detail = record.detail
            change = f"{was[name]} -> {state}" if was.get(name) else state
            lines.append(f"{name}: {change}" + (f" ({detail})" if detail else ""))
    return lines

