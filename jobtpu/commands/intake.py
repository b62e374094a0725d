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
from typing import TYPE_CHECKING, Any

from jobtpu.commands import relay
from jobtpu.commands.common import error_text
from jobtpu.errors import JobtpuError
from jobtpu.home import safefs, spool
from jobtpu.home.layout import Home
from jobtpu.home.roles import Layout, role_of
from jobtpu.home.trust import account_name
from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from jobtpu.schema.spool import Submission
    from jobtpu.schema.state import Job

# The fields of a job a submit sets; everything else starts at its default in the runner's record.
SUBMIT_FIELDS = ("user", "cmd", "archive", "name", "req", "pin", "tags", "rule", "env", "overrides", "log_stage",
                 "on_resume", "max_recoveries", "timeout", "stall", "dir", "progress", "priority", "sheet_note",
                 "sweep", "sweep_index", "after", "after_any", "retries", "grace", "signal", "signal_before", "held",
                 "sweep_values", "max_running")
REPLY_KEPT = 86400.0
INTAKE_LOCK = "intake.lock"
MAX_PER_ACCOUNT = 200  # requests of one account carried out in one intake
SAID_PER_ACCOUNT = 10  # past this many, one account's requests are said in one line  # one intake at a time: a request is carried out once


class Refused(JobtpuError):
    """A request the runner does not carry out: its reply says why (to `owner`, its sender, when known)."""

    def __init__(self, message: str, owner: int = -1) -> None:
        super().__init__(message)
        self.owner = owner


def _read(spool_fd: int, entry: spool.Entry, limit: int, kind: Any) -> tuple[Any, int] | None:
    """A request's document as `kind` and its sender; None when it is gone already."""
    try:
        raw, owner = spool.read_request(spool_fd, entry.name, limit)
    except FileNotFoundError:
        return None
    try:
        return msgspec.json.decode(raw, type=kind), owner
    except msgspec.DecodeError as e:
        raise Refused(f"{entry.name} is not a request jobtpu wrote: {str(e)[:200]}", owner) from None


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
        return [f"requests not taken in: {e}"]
    lines: list[str] = []
    lock = safefs.open_file(home.root, INTAKE_LOCK, os.O_RDWR, create=True)
    try:
        if not safefs.lock(lock, 0):  # another command of the runner's takes them in right now
            return []
        lines = _take_all(home, spool_fd)
    finally:
        os.close(lock)
        os.close(spool_fd)
    return [line for line in lines if line]


def _take_all(home: Home, spool_fd: int) -> list[str]:
    lines: list[str] = []
    found = spool.entries(spool.names_in(spool_fd))[:spool.MAX_ENTRIES]
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
                line = _take_submission(home, spool_fd, entry)
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
    return lines


def _reply(home: Home, name: str, owner: int, code: int, lines: list[str], ids: list[int] | None = None,
           what: str = "") -> None:
    from jobtpu.schema.spool import Reply

    reply = Reply(request=name, account=account_name(owner), code=code, lines=lines, at=round(time.time(), 3),
                  ids=ids or [], what=what)
    spool.write_reply(home, name, msgspec.json.encode(reply))


# ---- submits -------------------------------------------------------------------------------------

def _take_submission(home: Home, spool_fd: int, entry: spool.Entry) -> str:
    from jobtpu.schema.spool import MAX_SUBMISSION_BYTES, Submission

    owner = -1
    archive_name = f"archive-{entry.first}.tar.gz"
    try:
        found = _read(spool_fd, entry, MAX_SUBMISSION_BYTES, Submission)
        if found is None:
            return ""
        doc, owner = found
        ids = _take_jobs(home, spool_fd, entry, doc, owner, archive_name)
        _reply(home, entry.name, owner, 0, [], ids, what=f"submit of {_ids(ids)}")
        return f"took in {_ids(ids)} from {account_name(owner)}"
    except (Refused, JobtpuError) as e:
        owner = e.owner if isinstance(e, Refused) and e.owner >= 0 else owner
        if owner >= 0:
            _reply(home, entry.name, owner, e.exit_code, [error_text(e)], what=f"submit of {_ids(list(range(entry.first, entry.first + entry.n)))}")
        return f"refused {entry.name} of {account_name(owner) if owner >= 0 else 'an unknown account'}: {e.message}"
    finally:
        spool.remove(spool_fd, archive_name)
        spool.remove(spool_fd, entry.name)


def _ids(ids: list[int]) -> str:
    return f"job {ids[0]}" if len(ids) == 1 else f"jobs {ids[0]}-{ids[-1]}"


def _take_jobs(home: Home, spool_fd: int, entry: spool.Entry, doc: Submission, owner: int,
               archive_name: str) -> list[int]:
    from jobtpu.commands.batch import check_dependencies
    from jobtpu.home.secrets import SecretStore
    from jobtpu.home.store import Store, read_id_mark, write_id_mark

    if doc.first != entry.first or len(doc.jobs) != entry.n:
        raise Refused(f"{entry.name} claims ids its content does not hold")
    mark = read_id_mark(home)
    if entry.first > mark + spool.MAX_ID_JUMP:
        raise Refused(f"{entry.name} claims ids far above the last one given ({mark})")
    jobs = [_rebuilt(home, job, doc.first + i, doc.first, owner) for i, job in enumerate(doc.jobs)]
    names = {job.archive for job in jobs}
    if len(names) != 1:
        raise Refused(f"{entry.name}: the jobs of one submit share one snapshot")
    _bring_archive(home, spool_fd, archive_name, names.pop(), owner, doc.archive_included)
    with Store(home).transaction() as state:
        had = [state.job(job.id) for job in jobs]
        if all(j is not None and j.uid == owner for j in had):  # taken in already (a crash before removing it)
            return [job.id for job in jobs]
        if any(j is not None for j in had) or entry.first <= mark:
            raise Refused(f"ids {entry.first}-{entry.first + entry.n - 1} are taken already")
        check_dependencies(home, state, entry.first, jobs[0].after, jobs[0].after_any)
        last = entry.first + entry.n - 1
        write_id_mark(home, last)  # before the claim leaves the spool: no member claims these ids again
        state.next_id = max(state.next_id, last + 1)
        if doc.secrets:
            secrets = SecretStore(home)
            for job in jobs:
                secrets.put(job.id, dict(doc.secrets))
        state.jobs.extend(jobs)
    return [job.id for job in jobs]


def _rebuilt(home: Home, sent: Job, job_id: int, first: int, owner: int) -> Job:
    """The runner's record of a submitted job: the submit's fields, checked again as `submit` checks
    what a user types (a member's process could have written anything there); the rest its own."""
    from jobtpu.home.actor import Actor, acting_for
    from jobtpu.home.users import known_user
    from jobtpu.schema.state import Job

    fields = {name: getattr(sent, name) for name in SUBMIT_FIELDS}
    job = Job(id=job_id, created=round(time.time(), 3), uid=owner, waiting="held by hold" if sent.held else None,
              **fields)
    with acting_for(Actor(owner, account_name(owner), job.user)):
        known_user(home, job.user)  # a home that keeps a user list takes no other name
    try:
        _check_fields(job, first)
    except JobtpuError as e:
        raise Refused(f"job {job_id}: {e.message}") from None
    return job


def _check_fields(job: Job, first: int) -> None:
    """What `submit` refuses in what a user types, refused in a submitted record: the snapshot's
    name, the sweep, the command, requests, rule, environment names, --on-resume, --progress, tags
    and every length (numbers are bounded by the record's type)."""
    from jobtpu.commands.submit import RULE_NAMES, check_resume_and_progress
    from jobtpu.decide.fit import parse_request
    from jobtpu.inputs import parse_env
    from jobtpu.limits import check_submit
    from jobtpu.snapshot.unpack import check_name

    try:
        check_name(job.archive)
    except Exception:  # noqa: BLE001 - any malformed name is the same refusal
        raise JobtpuError(f"{job.archive[:80]!r} is not a snapshot's name") from None
    if job.sweep not in (None, first):
        raise JobtpuError("its sweep id is not its submit's first id")
    if job.max_running is not None and (job.sweep is None or job.max_running < 1):
        raise JobtpuError("--max-running is 1 or more, and only in a sweep")
    if not job.cmd.strip():
        raise JobtpuError("its command is empty")
    if job.rule is not None and job.rule not in RULE_NAMES:
        raise JobtpuError(f"{job.rule[:40]!r} is not a rule")
    if any(not tag.strip() for tag in job.tags):
        raise JobtpuError("a tag is empty")
    parse_request(job.req)
    parse_env([f"{name}={value}" for name, value in job.env.items()])  # names only: JOBTPU_* refused
    check_submit(job.cmd, job.name, job.tags, job.overrides, job.sheet_note)
    check_resume_and_progress(job.on_resume, job.progress)


def _bring_archive(home: Home, spool_fd: int, archive_name: str, name: str, owner: int, included: bool) -> None:
    """The submit's snapshot into the home's archives/, checked against its name, unless it is there
    (the runner's copy, checked when it was taken in)."""
    if home.archive(name).is_file():
        return
    if not included:
        raise Refused(f"its snapshot {name[:16]}… is not in the home and the submit did not bring it")
    try:
        src = spool.open_archive(spool_fd, archive_name, owner)
    except FileNotFoundError:
        raise Refused(f"its snapshot {archive_name} is missing from the spool") from None
    archives = safefs.open_dir(home.root, "archives", create=True)
    try:
        tmp, out = safefs.new_temp(archives, name, 0o640)
        try:
            try:
                while chunk := os.read(src, 1 << 20):
                    safefs.write_all(out, chunk)
                os.fsync(out)
            finally:
                os.close(out)
            why = _check_copy(home, tmp, name)
            if why is not None:
                raise Refused(f"its snapshot {why}")
            os.rename(tmp, name, src_dir_fd=archives, dst_dir_fd=archives)
        except BaseException:  # refused, a full disk, a member's file that fails mid-read: no copy left
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=archives)
            raise
    finally:
        os.close(src)
        os.close(archives)


def _check_copy(home: Home, tmp: str, name: str) -> str | None:
    """The copied snapshot against its name (the name is the digest of what it holds)."""
    import shutil
    import tempfile

    from jobtpu.snapshot.unpack import problem

    with tempfile.TemporaryDirectory(dir=home.archives, prefix=".check-") as folder:
        target = os.path.join(folder, name)
        os.link(home.archives / tmp, target)
        why = problem(target)
        shutil.rmtree(folder, ignore_errors=True)
    return why


# ---- acts ----------------------------------------------------------------------------------------

def _take_act(home: Home, spool_fd: int, entry: spool.Entry) -> str:
    from jobtpu.commands.act_request import decode, in_words
    from jobtpu.schema.spool import MAX_REQUEST_BYTES, ActRequest

    owner = -1
    what = ""
    try:
        try:
            found = _read(spool_fd, entry, MAX_REQUEST_BYTES, ActRequest)
        except Refused as e:
            _refuse_old(spool_fd, entry, e)
            raise
        if found is None:
            return ""
        req, owner = found
        what = req.command[:40]
        act = decode(req)
        what = in_words(act)
        code, lines = relay.carry_out(home, act, owner, req.user)
        _reply(home, entry.name, owner, code, lines, what=what[:200])
        verb = "done" if code == 0 else f"refused (exit {code})"
        return f"{account_name(owner)}'s request `{what[:120]}`: {verb}"
    except (Refused, JobtpuError) as e:
        owner = e.owner if isinstance(e, Refused) and e.owner >= 0 else owner
        if owner >= 0:
            _reply(home, entry.name, owner, e.exit_code, [error_text(e)], what=what[:200])
        return f"refused {entry.name}: {e.message}"
    finally:
        spool.remove(spool_fd, entry.name)


def _refuse_old(spool_fd: int, entry: spool.Entry, refused: Refused) -> None:
    """An act an older jobtpu left (its words, version 1): refused with a line asking for it again,
    never parsed here (docs/reference/home-files.md §1.6)."""
    from jobtpu.schema.spool import MAX_REQUEST_BYTES, OldActRequest

    try:
        old = _read(spool_fd, entry, MAX_REQUEST_BYTES, OldActRequest)
    except Refused:
        return
    if old is not None:
        words = " ".join(old[0].argv)[:120]
        raise Refused(f"`{words}` was sent by an older jobtpu, as words this one no longer parses: "
                      "send it again with this jobtpu", refused.owner)


def internal_error(home: Home, spool_fd: int, entry: spool.Entry, owner: int, error: BaseException) -> str:
    """A request whose carrying-out raised what nobody expected (a bug, not the member's mistake):
    its reply says so in one line, and the round goes on with the others."""
    what = f"{type(error).__name__}: {str(error)[:200]}"
    with contextlib.suppress(Exception):
        _reply(home, entry.name, owner, 1, [f"jobtpu: internal error while carrying out this request ({what}); "
                                            "nothing more was done for it, and the runner's other requests went on"])
    spool.remove(spool_fd, entry.name)
    return f"internal error in {entry.name} of {account_name(owner)} ({what}): the round goes on"
