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

from jobtpu.errors import JobtpuError
from jobtpu.schema.names import USER_NAME


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


def resolve_user(explicit: str | None) -> str:
    user = user_label() or explicit or os.environ.get("JOBTPU_USER") or _login_name()
    if not USER_NAME.match(user):
        raise JobtpuError(f"user name {user!r} is not valid: use 1–32 of a-z, 0-9, '_' or '-', starting "
                          "with a letter or '_'", hint="pass --user NAME or set JOBTPU_USER")
    return user


def _login_name() -> str:
    """The login name as getpass.getuser() finds it (the environment's names, then the password
    database), without importing getpass: it brings termios, which no command here needs."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if os.environ.get(name):
            return os.environ[name]
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return "unknown"
