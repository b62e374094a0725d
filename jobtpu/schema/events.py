"""An event of the home's event log (events.jsonl, docs/reference/commands.md §2.25), as its type: what
decide/events.py writes and reads, one per line."""

from typing import Annotated, Any

from jobtpu.schema.msgspec_lib import Meta, msgspec
from jobtpu.schema.names import MAX_TIME

# What a notification destination may ask for (machines.json "notify" … "events"; decide/events.py
# says which event is which of them).
FAILED = "failed"
RECOVERED = "recovered"
FINISHED = "finished"
MACHINE_DOWN = "machine_down"
MACHINE_UP = "machine_up"
RECREATE_FAILED = "recreate_failed"
RUNNER_CHANGED = "runner_changed"  # a standby took over the runner lease (docs/reference/home-files.md §1.7)
NOTIFICATIONS = (FAILED, RECOVERED, FINISHED, MACHINE_DOWN, MACHINE_UP, RECREATE_FAILED, RUNNER_CHANGED)


class Event(msgspec.Struct, omit_defaults=True):
    """Encoded, as in state.json's `untold`, with the keys of to_json() in its order: a key holding its
    default (None, no detail) is left out."""

    time: Annotated[float, Meta(ge=0, le=MAX_TIME)]  # epoch seconds (an integer reads as one; true or false does not)
    kind: str
    id: str | None = None  # given when the event is decided, so a pass telling it again is recognised
    job: int | None = None
    machine: str | None = None
    user: str | None = None
    attempt: int | None = None
    detail: dict[str, Any] = {}  # an object, or the line is not an event

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"time": self.time, "kind": self.kind}
        for key in ("id", "job", "machine", "user", "attempt"):
            value = getattr(self, key)
            if value is not None:
                doc[key] = value
        if self.detail:
            doc["detail"] = self.detail
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> "Event | None":
        """The event a plain value holds (state.json's `untold`, an outbox item), or None for anything
        that is not one: a damaged one costs that event, never the others."""
        try:
            return msgspec.convert(doc, cls)
        except msgspec.ValidationError:
            return None

    @classmethod
    def from_line(cls, line: bytes) -> "Event | None":
        """The event a line of events.jsonl holds, or None for anything that is not one (a line torn
        by a crash, a hand edit): a damaged line costs that line, never the whole log. The keys an
        event does not have (the `uid` and `account` each line carries) are left out."""
        try:
            return _LINE.decode(line)
        except (msgspec.DecodeError, RecursionError):
            return None


_LINE = msgspec.json.Decoder(Event)
