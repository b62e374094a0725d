"""Who acts: the team's user list (users.json), the name a command acts as, and the ownership rule
for acts on a job (kill, resume, rerun, clean, tag, note).

users.json is hand-editable: {"users": ["alice", "bob"]}. Without it any valid name is accepted, as
in a one-person home; with it, a name not on the list is refused, so a typo never files jobs under a
user nobody is. Ownership is a guard against mistakes between colleagues, not a security boundary:
anyone may act as anyone with --user or JOBTPU_USER, and Unix permissions on the home are the limit."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from jobtpu.errors import JobtpuError, NotFoundError
from jobtpu.home.actor import resolve_user
from jobtpu.home.layout import Home, write_atomic
from jobtpu.home.safefs import CAP_SMALL, read_regular

if TYPE_CHECKING:
    from jobtpu.schema.state import Job


def load_users(home: Home) -> list[str] | None:
    """The team's user names in the order they were added; None when the home keeps no list."""
    from jobtpu.schema.decode import read_file
    from jobtpu.schema.users import UsersFile

    path = home.root / "users.json"
    try:
        raw = read_regular(home.root, path, CAP_SMALL)
    except FileNotFoundError:
        return None
    hint = f'fix {path} by hand: {{"users": ["alice", "bob"]}} (or delete it: any user name is then accepted)'
    names: list[str] = read_file(raw, UsersFile, path, path.name, hint).users
    return names


def _save(home: Home, names: list[str]) -> None:
    from jobtpu.schema.msgspec_lib import msgspec

    home.ensure()
    text = msgspec.json.format(msgspec.json.encode({"users": names}), indent=2) + b"\n"
    write_atomic(home.root / "users.json", text)


def known_user(home: Home, explicit: str | None) -> str:
    """The user a command acts as (--user, else $JOBTPU_USER, else the login), refused when the home
    keeps a list that does not name it."""
    user = resolve_user(explicit)
    team = load_users(home)
    if team is not None and user not in team:
        some = ", ".join(team[:10]) + (", …" if len(team) > 10 else "")
        raise JobtpuError(f"user {user!r} is not one of this home's users ({some or 'none yet'})",
                          hint=f"`jobtpu user add {user}` adds it; or pass --user NAME / set JOBTPU_USER")
    return user


def add_user(home: Home, name: str) -> bool:
    """Add a name to the list (making the list if there is none); False when it was there already."""
    from jobtpu.home.store import hold_lock
    from jobtpu.schema.names import USER_NAME

    if not USER_NAME.match(name):
        raise JobtpuError(f"user name {name!r} is not valid: use 1–32 of a-z, 0-9, '_' or '-', starting with "
                          "a letter or '_'", hint="a Unix login usually is one: `jobtpu user add $USER`")
    home.ensure()
    with hold_lock(home.root / "users.json.lock", 30.0, "users.json"):
        names = load_users(home) or []
        if name in names:
            return False
        _save(home, [*names, name])
    return True


def remove_user(home: Home, name: str) -> None:
    from jobtpu.home.store import hold_lock

    with hold_lock(home.root / "users.json.lock", 30.0, "users.json"):
        names = load_users(home)
        if names is None or name not in names:
            raise NotFoundError(f"{name!r} is not one of this home's users",
                                hint="`jobtpu user ls` lists them")
        _save(home, [n for n in names if n != name])


def home_owner(home: Home) -> int:
    """The account that owns the home's top folder: a shared home's runner, a private home's owner."""
    import os

    return os.stat(home.root).st_uid


def owns(job_user: str, job_uid: int | None, user: str, real: int, owner: int) -> bool:
    """Pure: the ownership rule (docs/reference/home-files.md §1.3). The account `real`, acting as
    `user`, owns a job that carries that user name and was submitted by that account. A record with no
    submitting account (an old one, or one written by hand) proves nobody's claim: only the home's
    owner `owner` (a shared home's runner) owns it under its user name; anyone else needs --force."""
    if job_user != user:
        return False
    return job_uid == real if job_uid is not None else real == owner


def check_owner(home: Home, job: Job, user: str, force: bool, act: str, record: bool = True) -> None:
    """The one ownership rule (`owns`): `user` may `act` on their own jobs; on another user's only
    with `force`, and then the act is recorded in the job (job.forced), which the caller saves; not by
    a `--dry-run` (`record` false), which changes nothing."""
    from jobtpu.home.actor import real_uid
    from jobtpu.home.trust import account_name

    real, owner = real_uid(), home_owner(home)
    if owns(job.user, job.uid, user, real, owner):
        return
    if not force:
        hint = f"pass --force to {act} it anyway (the job's record keeps who did)"
        if job.user == user and job.uid is None:  # a user name alone claims nothing: anyone may give it
            raise JobtpuError(f"job {job.id} is {job.user}'s, but its record names no submitting account: only "
                              f"this home's owner ({account_name(owner)}) acts on it without --force: {act} refused",
                              hint=f"{hint}; or ask {account_name(owner)}")
        if job.user == user:  # the label is the job's, the account is not (JOBTPU_USER names anyone)
            raise JobtpuError(f"job {job.id} is {job.user}'s, submitted by account {account_name(job.uid or 0)}, "
                              f"not by {account_name(real)}: {act} refused", hint=hint)
        raise JobtpuError(f"job {job.id} is {job.user}'s, not {user}'s: {act} refused", hint=hint)
    if not record:
        return
    from jobtpu.schema.state import ForcedAct

    job.forced.append(ForcedAct(by=user, act=act, at=round(time.time(), 3), uid=real, account=account_name(real)))


def check_owners(home: Home, jobs: list[Job], user: str, force: bool, act: str, record: bool = True) -> None:
    """check_owner for every job an act would touch, all or nothing: without `force`, one line
    refuses the whole act when any of them is another user's (a bulk act never half happens)."""
    from jobtpu.home.actor import real_uid

    real, owner = real_uid(), home_owner(home)
    others = [j for j in jobs if not owns(j.user, j.uid, user, real, owner)]
    if len(others) == 1 or force:
        for job in others:
            check_owner(home, job, user, force, act, record)
        return
    if others:
        owners = sorted({j.user for j in others})
        raise JobtpuError(f"{len(others)} of these jobs are other users' ({', '.join(owners)}), not {user}'s: "
                          f"{act} refused", hint=f"pass --force to {act} them anyway (each job's record keeps who did)")
