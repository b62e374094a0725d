"""The one interface through which a pass calls what it tells besides its decisions: events and
notifications (passes/tell.py), progress (passes/progress.py), the team sheet (passes/sheet_hook.py). Each
hook is an object with its own state for one pass; run_pass builds the list once and calls it at
four points, never a named module. A feature that needs a pass adds a hook, not a call in run_pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobtpu.decide.observation import Observation
    from jobtpu.home.store import Encoded
    from jobtpu.passes.session import Session
    from jobtpu.schema.state import Transition


class PassHook(Protocol):
    def before_decide(self, p: Session, seen: Observation) -> list[str]:
        """What the pass learns besides machines and workers, before it decides (also in a dry run):
        it may add to `seen`. Returns lines for the pass's notes."""
        ...

    def before_intents(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        """Before the pass saves its intents (never in a dry run): what that save calls with the state
        as encoded, under the lock; a pass killed before its result keeps what this added."""
        ...

    def before_result(self, p: Session, seen: Observation, moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
        """Before the pass saves its result (never in a dry run): it may change the state to save,
        and return what that save calls with the state as encoded, under the lock (docs/design.md §3)."""
        ...

    def after_pass(self, p: Session, seen: Observation) -> list[str]:
        """After the result is saved (never in a dry run): lines for the pass's report."""
        ...


def before_decide(hooks: list[PassHook], p: Session, seen: Observation) -> list[str]:
    return [line for hook in hooks for line in hook.before_decide(p, seen)]


def before_intents(hooks: list[PassHook], p: Session, seen: Observation,
                   moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
    """Each hook's changes to the intents' save, as one amend."""
    return _all([amend for hook in hooks if (amend := hook.before_intents(p, seen, moves)) is not None])


def before_result(hooks: list[PassHook], p: Session, seen: Observation,
                  moves: Sequence[Transition]) -> Callable[[Encoded], None] | None:
    """Each hook's changes to the result, and one amend that runs theirs in order."""
    return _all([amend for hook in hooks if (amend := hook.before_result(p, seen, moves)) is not None])


def _all(amends: list[Callable[[Encoded], None]]) -> Callable[[Encoded], None] | None:
    if not amends:
        return None

    def amend_all(encoded: Encoded) -> None:
        for amend in amends:
            amend(encoded)

    return amend_all


def after_pass(hooks: list[PassHook], p: Session, seen: Observation) -> list[str]:
    return [line for hook in hooks for line in hook.after_pass(p, seen)]
