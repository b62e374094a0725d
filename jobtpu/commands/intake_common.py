"""What the runner's intake of a shared home's requests shares (docs/reference/home-files.md §1.3):
a request read as data from the account that owns its file, the refusal that costs that request
alone, and the reply its sender reads."""

from __future__ import annotations

import time
from typing import Any

from jobtpu.errors import JobtpuError
from jobtpu.home import spool
from jobtpu.home.layout import Home
from jobtpu.home.trust import account_name
from jobtpu.schema.msgspec_lib import msgspec


class RequestRefused(JobtpuError):
    """A request the runner does not carry out: its reply says why (to `owner`, its sender, when known)."""

    def __init__(self, message: str, owner: int = -1) -> None:
        super().__init__(message)
        self.owner = owner


def read_request(spool_fd: int, entry: spool.Entry, limit: int, kind: Any) -> tuple[Any, int] | None:
    """A request's document as `kind` and its sender; None when it is gone already."""
    try:
        raw, owner = spool.read_request(spool_fd, entry.name, limit)
    except FileNotFoundError:
        return None
    try:
        return msgspec.json.decode(raw, type=kind), owner
    except msgspec.DecodeError as e:
        raise RequestRefused(f"{entry.name} is not a request jobtpu wrote: {str(e)[:200]}", owner) from None


def reply(home: Home, name: str, owner: int, key: bytes, code: int, lines: list[str], ids: list[int] | None = None,
          what: str = "") -> None:
    """The reply, its words sealed to the sender's reply `key` (the group reads replies/)."""
    from jobtpu.home.sealing import sealed_reply
    from jobtpu.schema.spool import Reply

    answer = Reply(request=name, account=account_name(owner), code=code, lines=lines, at=round(time.time(), 3),
                   ids=ids or [], what=what)
    spool.write_reply(home, name, msgspec.json.encode(sealed_reply(answer, key)))
