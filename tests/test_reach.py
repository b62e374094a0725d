"""reach.reachability, the one rule for an ssh machine's up/unreachable: a table over the contacts
of one pass (docs/reference/pass.md §5, steps 1 and 5)."""

from __future__ import annotations

import pytest

from jobtpu.decide.reach import Contact, ReachState, reachability, takes_jobs
from jobtpu.schema.records import MachineRecord
from jobtpu.timing import current

RETRY = current().unreachable_retry  # the pause after a failed contact (jobtpu/timing.py)

pytestmark = pytest.mark.fast

T0, NOW = 1000.0, 5000.0
UP = ReachState("up", None, None, None)
NEVER = ReachState(None, None, None, None)
DOWN = ReachState("unreachable", "box[0]: connection refused", T0, T0 + RETRY)
ok = Contact(0)
refused = Contact(0, "box[0]: connection refused")
timed_out = Contact(1, "box[1]: no answer within 3s (connect_timeout)")


@pytest.mark.parametrize(("was", "contacts", "now_is"), [
    (UP, [], UP),  # not asked this pass: as it was
    (DOWN, [], DOWN),  # nor an unreachable one (its pause runs on)
    (NEVER, [], NEVER),
    (UP, [ok], UP),
    (DOWN, [ok], UP),  # one answer and it is up at once, whatever its pause said
    (NEVER, [ok], UP),
    (UP, [refused], ReachState("unreachable", refused.failure, NOW, NOW + RETRY)),  # a failed stop, probe or launch
    (NEVER, [refused], ReachState("unreachable", refused.failure, NOW, NOW + RETRY)),
    (DOWN, [timed_out], ReachState("unreachable", timed_out.failure, T0, NOW + RETRY)),  # since stays, cause is new
    (UP, [ok, Contact(1)], UP),
    (UP, [ok, timed_out], ReachState("unreachable", timed_out.failure, NOW, NOW + RETRY)),  # one worker is enough
    (UP, [timed_out, refused], ReachState("unreachable", refused.failure, NOW, NOW + RETRY)),  # the first worker's cause
    (UP, [refused, ok], UP),  # a kept connection that dropped, then a fresh one that answered
    (DOWN, [ok, refused], ReachState("unreachable", refused.failure, T0, NOW + RETRY)),
])
def test_reachability_from_one_pass_of_contacts(was: ReachState, contacts: list[Contact], now_is: ReachState) -> None:
    assert reachability(was, contacts, NOW) == now_is


@pytest.mark.parametrize(("record", "takes"), [
    (MachineRecord(), True),
    (MachineRecord(state="up"), True),
    (MachineRecord(state="unreachable", since=T0, next_try=NOW + 1), False),
    (MachineRecord(state="unreachable", since=T0, next_try=NOW), True),
    (MachineRecord(state="unreachable", since=T0), True),  # recorded before next_try was kept
])
def test_an_unreachable_machine_takes_jobs_again_after_its_pause(record: MachineRecord, takes: bool) -> None:
    assert takes_jobs(record, NOW) is takes
