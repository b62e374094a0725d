"""`jobtpu machines drain NAME` and `jobtpu machines undrain NAME`: keep new jobs off a machine while
what runs there goes on (Slurm's drain, jittens' forbid), and let them back. The drain is kept in
the machine's record in state.json (docs/reference/state-json.md §4.5) and obeyed by dispatch
(decide/dispatch.py); changed under the pass lock, as `note --machine` is, so no pass writes over it."""

from __future__ import annotations

import time

from jobtpu.commands.annotate import note_text
from jobtpu.commands.common import note
from jobtpu.home.layout import Home
from jobtpu.home.users import known_user
from jobtpu.render.text import printable


def drain(home: Home, name: str, reason: str = "", undrain: bool = False) -> int:
    """Drain the machine (or undrain it with `undrain`); one line says what changed, and an event
    records it."""
    from jobtpu.decide import events as ev
    from jobtpu.decide.events import Event
    from jobtpu.passes.session import locked_session
    from jobtpu.passes.tell import told_by_hand
    from jobtpu.schema.records import Drained

    _runner_only(home, "undrain" if undrain else "drain")
    text = note_text([reason])  # one line, at most a note's length
    me = known_user(home, None)
    with locked_session(home) as session:
        machine = session.fleet.require(name).name
        record = session.state.machine(machine)
        running = sum(1 for j in session.state.jobs if machine in j.holds and j.active)
        if undrain:
            if record.drained is None:
                note(f"jobtpu: {machine} is not drained; nothing changed")
                return 0
            record.drained = None
            found = [Event(time.time(), ev.MACHINE_UNDRAINED, machine=machine, detail={"by": me})]
            said = f"{machine}: undrained; queued jobs may start there again"
        else:
            if record.drained is not None and record.drained.reason == text:
                note(f"jobtpu: {machine} is drained already; nothing changed")
                return 0
            record.drained = Drained(reason=text, by=me, at=round(time.time(), 3))
            found = [Event(time.time(), ev.MACHINE_DRAINED, machine=machine, detail={"reason": text, "by": me})]
            said = (f"{machine}: drained" + (f" ({text})" if text else "") + "; no new job starts there, "
                    f"{running} running job{'' if running == 1 else 's'} go on")
        lines = told_by_hand(session, found)
    print(printable(said))
    for line in lines:
        note(line)
    return 0


def _runner_only(home: Home, act: str) -> None:
    """In a shared home only the runner drains (docs/reference/home-files.md §1.3): a drain changes
    where the passes start everyone's jobs, as `tpu` does, and the runner's record keeps it."""
    from jobtpu.commands.relay import refuse_runner_only
    from jobtpu.home.roles import role_of

    role = role_of(home.root)
    if role.is_member:
        raise refuse_runner_only(role, f"machines {act}")
