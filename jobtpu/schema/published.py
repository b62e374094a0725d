"""The JSON jobtpu prints or sends, as msgspec types, and the JSON Schema files made from them
(docs/reference/python.md §11.3): `status --json`, `machines --json`, `report --json`, a line of
events.jsonl and each notification body. `python -m jobtpu.schema.published` writes the files into
jobtpu/schemas/; a test holds the files equal to what the types make, and real outputs valid."""

import json
import sys
from pathlib import Path
from typing import Any

from jobtpu.schema.events import Event
from jobtpu.schema.job_report import JobReport
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Job

# A document's version: raised when a field changes meaning or goes away (a new field keeps it).
VERSION = 1
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


class StatusDocument(msgspec.Struct, forbid_unknown_fields=True):
    """`status --json`: every selected job, as state.json stores it."""

    jobs: list[Job]


class DrainedJson(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A drained machine's drain: why, who drained it (a user label) and when (Unix seconds)."""

    reason: str
    by: str
    at: float


class MachineRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One machine of `machines --json` (and of the Python API's `Home.machines()`): the fleet as
    the last pass saw it. The TPU fields are there for a TPU machine only, `claimed_by` only when
    the home has a team sheet."""

    name: str
    kind: str
    accelerator: str | None
    preemptible: bool
    workers: int | None
    state: str
    health: str | None
    health_description: str | None
    detail: str | None
    running: int
    unreachable_since: float | None
    next_try: float | None
    note: str | None
    free: dict[str, int]
    aliases: list[str] = msgspec.field(default_factory=list)  # machines.json's, first the tables' short name
    drained: DrainedJson | None = None  # `machines drain`: no new job starts there
    provisioning: str | None = None
    zone: str | None = None
    moved: str | None = None
    queued_resource: str | None = None
    refused: str | None = None
    claimed_by: str | None = None


class LastPassJson(msgspec.Struct, forbid_unknown_fields=True):
    ended: float | None
    took: float | None
    every: float | None
    age: float | None
    stale: bool


class MachinesDocument(msgspec.Struct, forbid_unknown_fields=True):
    """`machines --json`."""

    machines: list[MachineRow]
    last_pass: LastPassJson


class EventLine(Event, forbid_unknown_fields=True):
    """A line of events.jsonl: an event, and the real account that recorded it (docs/design.md §7)."""

    uid: int | None = None
    account: str | None = None


class NotifiedEvent(Event, forbid_unknown_fields=True):
    """An event as a notification carries it (a command reads it on its stdin)."""


class WebhookBody(msgspec.Struct, forbid_unknown_fields=True):
    """What a `webhook` destination is POSTed: the line a person reads (Slack's `text`) and the event."""

    text: str
    event: NotifiedEvent


class ReportDocument(msgspec.Struct, forbid_unknown_fields=True):
    """`report --json`: what each selected job's attempts and interruptions cost."""

    reports: list[JobReport]


def documents() -> dict[str, Any]:
    """Each published document's file stem and its type."""
    return {"status": StatusDocument, "machines": MachinesDocument, "report": ReportDocument,
            "event": EventLine, "webhook": WebhookBody, "command-notification": NotifiedEvent}


def schema_of(stem: str, kind: Any) -> dict[str, Any]:
    """The JSON Schema msgspec makes of `kind`, with what it is and its version."""
    made: dict[str, Any] = msgspec.json.schema(kind)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": f"jobtpu {stem}",
            "x-jobtpu-version": VERSION, **made}


def file_of(stem: str) -> Path:
    return SCHEMAS / f"{stem}.v{VERSION}.schema.json"


def rendered(stem: str, kind: Any) -> str:
    return json.dumps(schema_of(stem, kind), indent=1, sort_keys=True) + "\n"


def load(stem: str) -> dict[str, Any]:
    """A published schema, as the package holds it."""
    loaded: dict[str, Any] = json.loads(file_of(stem).read_text(encoding="utf-8"))
    return loaded


def write_all() -> list[Path]:
    SCHEMAS.mkdir(exist_ok=True)
    written = []
    for stem, kind in documents().items():
        file_of(stem).write_text(rendered(stem, kind), encoding="utf-8")
        written.append(file_of(stem))
    return written


if __name__ == "__main__":
    for path in write_all():
        sys.stdout.write(f"{path}\n")
