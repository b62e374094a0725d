"""On whose behalf this process acts (docs/reference/home-files.md §1.3).

A command acts for the account that runs it, except when a shared home's runner carries out a
member's request from the spool: then, while it does, the request's sender (the kernel-reported
owner of the request file) is the account that the ownership rule and every record name, and the
user name is the one the request carries. Nothing else changes whom a command acts for."""

import contextlib
import contextvars
import os
from collections.abc import Iterator
from typing import NamedTuple


class Actor(NamedTuple):
    uid: int
    account: str
    user: str


_ACTING: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("jobtpu_actor", default=None)


@contextlib.contextmanager
def acting_for(actor: Actor) -> Iterator[None]:
    token = _ACTING.set(actor)
    try:
        yield
    finally:
        _ACTING.reset(token)


def current() -> Actor | None:
    """The member a request is being carried out for, or None (this process's own account)."""
    return _ACTING.get()


def real_uid() -> int:
    """The account an act is recorded under and checked against a job's owner."""
    actor = _ACTING.get()
    return os.getuid() if actor is None else actor.uid


def user_label() -> str | None:
    """The user name a request carries, which wins over --user and $JOBTPU_USER while it is carried out."""
    actor = _ACTING.get()
    return None if actor is None else actor.user
