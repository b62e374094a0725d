"""An event of the home's event log (events.jsonl, docs/reference/commands.md §2.25), as its type: what
tell/events.py writes and reads, one per line."""

from __future__ import annotations

from typing import Any

import msgspec


class Event(msgspec.Struct):
    time: float
    kind: str
    job: int | None = None
    machine: str | None = None
    user: str | None = None
    attempt: int | None = None
    detail: dict[str, Any] = {}
    id: str | None = None  # given when the event is decided, so a pass telling it again is recognised

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
    def from_json(cls, doc: Any) -> Event | None:
        """The event a line holds, or None for anything that is not one (a line torn by a crash, a
        hand edit): a damaged line costs that line, never the whole log."""
        if not isinstance(doc, dict):
            return None
        when, kind = doc.get("time"), doc.get("kind")
        if isinstance(when, bool) or not isinstance(when, int | float) or not isinstance(kind, str):
            return None
        job, attempt = doc.get("job"), doc.get("attempt")
        machine, user, detail = doc.get("machine"), doc.get("user"), doc.get("detail") or {}
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (job, attempt)):
            return None
        if not all(v is None or isinstance(v, str) for v in (machine, user)) or not isinstance(detail, dict):
            return None
        ident = doc.get("id")
        return cls(float(when), kind, job, machine, user, attempt, detail, ident if isinstance(ident, str) else None)
