"""The runner takes a shared home's requests in (docs/reference/home-files.md §1.3), before each of
its passes: members' submits become jobs in state.json, members' acts are carried out as their
senders, and every request gets a reply in `replies/` and leaves the spool.

A request is data from the account that owns its file: a submit's records are rebuilt from the
fields a submit may set (the account is the file's owner, the status queued, the time now), and
checked again as `submit` checks them (the user list, the limits, dependencies, the snapshot against
its name). What is wrong costs that request alone, with one line in its reply."""

from __future__ import annotations

import contextlib
import os
import time

from jobtpu.commands import intake_submits, relay
from jobtpu.commands.common import error_text
from jobtpu.commands.intake_common import RequestRefused, read_request, reply
from jobtpu.errors import JobtpuError, message_of
from jobtpu.home import safefs, spool
from jobtpu.home.layout import Home
from jobtpu.home.roles import Layout, role_of
from jobtpu.home.trust import account_name

REPLY_KEPT = 86400.0
INTAKE_LOCK = "intake.lock"
MAX_PER_ACCOUNT = 200  # requests of one account carried out in one intake
SAID_PER_ACCOUNT = 10  # past this many, one account's requests are said in one line


def take_in(home: Home) -> list[str]:
    """Carry out what the spool holds (the runner of a shared home only; nothing elsewhere): one
    line per request for the pass's output."""
    role = role_of(home.root)
    if role.layout is Layout.OLD_SHARED and role.is_runner:
        from jobtpu.home.migrate import migrate

        return migrate(home)
    if role.layout is not Layout.SHARED or not role.is_runner:
        return []
    try:
        spool_fd = spool.open_spool(home)
    except (FileNotFoundError, safefs.UnsafePath) as e:
        return [f"requests not taken in: {message_of(e)}"]
    try:  # members seal their secrets to it: a home made before it had none (docs/reference/home-files.md §1.3)
        from jobtpu.home.sealing import ensure_runner_keys

        made = ensure_runner_keys(home.root)
    except (OSError, safefs.UnsafePath) as e:
        made = [f"runner.key not made: {message_of(e)}"]
    lines: list[str] = []
    lock = safefs.open_file(home.root, INTAKE_LOCK, os.O_RDWR, create=True)
    try:
        if not safefs.lock(lock, 0):  # another command of the runner's takes them in right now
            return []
        from jobtpu.home.places import reclaim_user_folders
        from jobtpu.home.settings import MAX_SETTINGS_READ

        lines = reclaim_user_folders(home.root, MAX_SETTINGS_READ) + _take_all(home, spool_fd)
    finally:
        os.close(lock)
        os.close(spool_fd)
    return [line for line in made + lines if line]


def _take_all(home: Home, spool_fd: int) -> list[str]:
    lines: list[str] = []
    found = spool.entries(spool.names_in(spool_fd))[:spool.MAX_ENTRIES]
    waiting = intake_submits.holding(home, spool_fd)  # the claims that hold their ids, until each is taken in or refused
    taken: dict[int, int] = {}  # requests carried out per sending account in this intake
    said: dict[int, list[str]] = {}  # what each account's requests came to, a line each
    for entry in found:
        try:
            owner = os.stat(entry.name, dir_fd=spool_fd, follow_symlinks=False).st_uid
        except FileNotFoundError:
            continue
        taken[owner] = taken.get(owner, 0) + 1
        if taken[owner] > MAX_PER_ACCOUNT:  # one member's flood waits its turn; nobody else's does
            continue
        try:
            if entry.kind == "submit":
                line = intake_submits.take_submission(home, spool_fd, entry, waiting)
            else:
                line = _take_act(home, spool_fd, entry)
        except OSError as e:  # what a member left there costs that request alone
            line = f"refused {entry.name}: {e.strerror or e}"
            spool.remove(spool_fd, entry.name)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - anything else too: a bug costs its request alone
            line = internal_error(home, spool_fd, entry, owner, e)
        said.setdefault(owner, []).append(line)
    for owner, told in sorted(said.items()):
        if len(told) > SAID_PER_ACCOUNT:  # a flood is one line, not one a request
            refused = sum("refused" in line for line in told)
            lines.append(f"{account_name(owner)}: {len(told)} requests taken in ({refused} refused)")
        else:
            lines.extend(told)
    for owner, n in sorted(taken.items()):
        if n > MAX_PER_ACCOUNT:
            lines.append(f"{account_name(owner)}: {n - MAX_PER_ACCOUNT} more requests wait for the next passes "
                         f"(at most {MAX_PER_ACCOUNT} of one account's a pass)")
    if found:
        spool.prune_replies(home, time.time() - REPLY_KEPT)
        intake_submits.catch_up(home, spool_fd)
    return lines


# ---- acts ----------------------------------------------------------------------------------------

def _take_act(home: Home, spool_fd: int, entry: spool.Entry) -> str:
    from jobtpu.commands.act_request import decode, in_words
    from jobtpu.schema.spool import MAX_REQUEST_BYTES, ActRequest

    owner, key = -1, b""
    what = ""
    try:
        try:
            found = read_request(spool_fd, entry, MAX_REQUEST_BYTES, ActRequest)
        except RequestRefused as e:
            _refuse_old(spool_fd, entry, e)
            raise
        if found is None:
            return ""
        req, owner = found
        key = req.reply_key
        what = req.command[:40]
        act = decode(req)
        what = in_words(act)
        code, lines = relay.carry_out(home, act, owner, req.user)
        reply(home, entry.name, owner, key, code, lines, what=what[:200])
        verb = "done" if code == 0 else f"refused (exit {code})"
        return f"{account_name(owner)}'s request `{what[:120]}`: {verb}"
    except (RequestRefused, JobtpuError) as e:
        owner = e.owner if isinstance(e, RequestRefused) and e.owner >= 0 else owner
        key = e.key if isinstance(e, OldRequest) else key
        if owner >= 0:
            reply(home, entry.name, owner, key, e.exit_code, [error_text(e)], what=what[:200])
        return f"refused {entry.name}: {e.message}"
    finally:
        spool.remove(spool_fd, entry.name)


def _refuse_old(spool_fd: int, entry: spool.Entry, refused: RequestRefused) -> None:
    """An act an older jobtpu left (its words, version 1): refused with a line asking for it again,
    never parsed here (docs/reference/home-files.md §1.6)."""
    from jobtpu.schema.spool import MAX_REQUEST_BYTES, OldActRequest

    try:
        old = read_request(spool_fd, entry, MAX_REQUEST_BYTES, OldActRequest)
    except RequestRefused:
        return
    if old is not None:
        words = " ".join(old[0].argv)[:120]
        raise OldRequest(f"`{words}` was sent by an older jobtpu, as words this one no longer parses: "
                         "send it again with this jobtpu", refused.owner, old[0].reply_key)


class OldRequest(RequestRefused):
    """An act of an older jobtpu, refused; its reply still sealed to the key it carried, if any."""

    def __init__(self, message: str, owner: int, key: bytes) -> None:
        super().__init__(message, owner)
        self.key = key


def internal_error(home: Home, spool_fd: int, entry: spool.Entry, owner: int, error: BaseException) -> str:
    """A request whose carrying-out raised what nobody expected (a bug, not the member's mistake):
    its reply says so in one line, and the round goes on with the others."""
    what = f"{type(error).__name__}: {message_of(error)[:200]}"
    with contextlib.suppress(Exception):
        reply(home, entry.name, owner, b"", 1, [f"jobtpu: internal error while carrying out this request ({what}); "
                                                "nothing more was done for it, and the runner's other requests went on"])
    spool.remove(spool_fd, entry.name)
    return f"internal error in {entry.name} of {account_name(owner)} ({what}): the round goes on"
