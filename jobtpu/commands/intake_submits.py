"""The runner takes a member's submit in (docs/reference/home-files.md §1.3): the claim's ids, when
it holds them (home/claims.py), become jobs in state.json, rebuilt from the fields a submit may set
(the account is the file's owner, the status queued, the time now) and checked again as `submit`
checks them (the user list, the limits, dependencies, the snapshot against its name); the secret
values opened with the runner's key. What is wrong costs that submit alone, with one line in its
reply, and its ids stay spent."""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING

from jobtpu.commands.common import error_text
from jobtpu.commands.intake_common import RequestRefused, read_request, reply
from jobtpu.errors import JobtpuError
from jobtpu.home import safefs, spool
from jobtpu.home.layout import Home
from jobtpu.home.trust import account_name
from jobtpu.schema.job_fields import SUBMIT_FIELDS
from jobtpu.schema.msgspec_lib import msgspec

if TYPE_CHECKING:
    from collections.abc import Callable

    from jobtpu.home.claims import Claim
    from jobtpu.schema.fleet import Fleet
    from jobtpu.schema.spool import Submission
    from jobtpu.schema.state import Job


def holding(home: Home, spool_fd: int) -> dict[str, Claim]:
    """The spool's claims that hold their ids now, by name (home/claims.py), read under the claims
    lock: a member's claim is there whole and checked, or not yet."""
    from jobtpu.home import claims
    from jobtpu.home.store import Store, read_id_mark

    with spool.claims_locked(spool_fd):
        state = Store(home).load()
        held = claims.holding(claims.read_claims(spool_fd, spool.names_in(spool_fd)), read_id_mark(home),
                              {job.id for job in state.jobs})
    return {c.name: c for c in held}


def catch_up(home: Home, spool_fd: int) -> None:
    """last_id up to the ids the runner's own submits gave while claims waited below them, now that
    none (or fewer) wait: ids are never given twice even if state.json is lost."""
    from jobtpu.home import claims
    from jobtpu.home.store import Store, read_id_mark, write_id_mark

    with spool.claims_locked(spool_fd):
        state, mark = Store(home).load(), read_id_mark(home)
        held = claims.holding(claims.read_claims(spool_fd, spool.names_in(spool_fd)), mark,
                              {job.id for job in state.jobs})
        top = claims.mark_below(state.next_id - 1, held)
        if top > mark:
            write_id_mark(home, top)


def take_submission(home: Home, spool_fd: int, entry: spool.Entry, waiting: dict[str, Claim]) -> str:
    from jobtpu.schema.spool import MAX_SUBMISSION_BYTES, Submission

    owner, key = -1, b""
    claim = waiting.pop(entry.name, None)
    archive_name = spool.archive_name(entry.name)
    taken = False
    try:
        found = read_request(spool_fd, entry, MAX_SUBMISSION_BYTES, Submission)
        if found is None:
            return ""
        doc, owner = found
        key = doc.reply_key
        if claim is None:
            ids = _taken_already(home, entry, owner)
        else:
            ids = _take_jobs(home, spool_fd, entry, doc, owner, archive_name, waiting)
        taken = True
        reply(home, entry.name, owner, key, 0, [], ids, what=f"submit of {_ids(ids)}")
        return f"took in {_ids(ids)} from {account_name(owner)}"
    except (RequestRefused, JobtpuError) as e:
        owner = e.owner if isinstance(e, RequestRefused) and e.owner >= 0 else owner
        if owner >= 0:
            reply(home, entry.name, owner, key, e.exit_code, [error_text(e)], what=f"submit of {_ids(list(range(entry.first, entry.first + entry.n)))}")
        return f"refused {entry.name} of {account_name(owner) if owner >= 0 else 'an unknown account'}: {e.message}"
    finally:
        if claim is not None and not taken:  # refused, or anything else went wrong: before the claim leaves
            _spend(home, claim, waiting)
        spool.remove(spool_fd, archive_name)
        spool.remove(spool_fd, entry.name)


def _ids(ids: list[int]) -> str:
    return f"job {ids[0]}" if len(ids) == 1 else f"jobs {ids[0]}-{ids[-1]}"


def _taken_already(home: Home, entry: spool.Entry, owner: int) -> list[int]:
    """A submit that holds no ids: taken in already (a crash before its file left the spool), or
    refused: what it names is no claim, or an earlier claim holds its ids (home/claims.py)."""
    from jobtpu.home.store import Store

    state = Store(home).load()
    ids = list(range(entry.first, entry.first + entry.n))
    if all((j := state.job(i)) is not None and j.uid == owner for i in ids):
        return ids
    raise RequestRefused(f"{entry.name} holds no ids: it is not a claim a submit makes, or an earlier submit holds "
                  f"ids {entry.first}-{entry.first + entry.n - 1}; submit again")


def _spend(home: Home, claim: Claim, waiting: dict[str, Claim]) -> None:
    """A refused claim's ids stay spent: its sender was shown them, and nobody else ever gets them."""
    from jobtpu.home.claims import mark_below
    from jobtpu.home.store import Store, read_id_mark, write_id_mark

    with Store(home).transaction() as state:
        state.next_id = max(state.next_id, claim.last + 1)
        top = mark_below(claim.last, waiting.values())
        if top > read_id_mark(home):
            write_id_mark(home, top)


def _take_jobs(home: Home, spool_fd: int, entry: spool.Entry, doc: Submission, owner: int,
               archive_name: str, waiting: dict[str, Claim]) -> list[int]:
    from jobtpu.commands.batch import check_dependencies
    from jobtpu.home.claims import mark_below
    from jobtpu.home.secrets import SecretStore
    from jobtpu.home.store import Store, read_id_mark, write_id_mark

    mark = read_id_mark(home)
    fleet: list[Fleet] = []  # machines.json, read once for a submit's gangs (a sweep's thousands share it)

    def fleet_once() -> Fleet:
        if not fleet:
            from jobtpu.home.machines import load_fleet
            fleet.append(load_fleet(home))
        return fleet[0]

    jobs = [_rebuilt(home, job, doc.first + i, doc.first, owner, fleet_once) for i, job in enumerate(doc.jobs)]
    secret = _opened_secrets(home, doc)
    from jobtpu.home.secrets import MASK

    for job in jobs:  # exactly the names the job shows as <secret>: those passed every check of an --env name
        if set(secret) != {name for name, value in job.env.items() if value == MASK}:
            raise RequestRefused(f"job {job.id}: its secret values are not for the --env names it shows as {MASK}")
    names = {job.archive for job in jobs}
    if len(names) != 1:
        raise RequestRefused(f"{entry.name}: the jobs of one submit share one snapshot")
    _bring_archive(home, spool_fd, archive_name, names.pop(), owner, doc.archive_included)
    with Store(home).transaction() as state:
        had = [state.job(job.id) for job in jobs]  # a claim that holds its ids has none in state.json (_taken_already)
        if any(j is not None for j in had) or entry.first <= mark:
            raise RequestRefused(f"ids {entry.first}-{entry.first + entry.n - 1} are taken already")
        check_dependencies(home, state, entry.first, jobs[0].after, jobs[0].after_any)
        last = entry.first + entry.n - 1
        if mark_below(last, waiting.values()) > mark:  # before the claim leaves the spool; never up to a waiting claim
            write_id_mark(home, mark_below(last, waiting.values()))
        state.next_id = max(state.next_id, last + 1)
        if secret:
            SecretStore(home).put_many([job.id for job in jobs], secret)
        state.jobs.extend(jobs)
    return [job.id for job in jobs]


def _opened_secrets(home: Home, doc: Submission) -> dict[str, str]:
    """The submit's secret --env values, opened with the runner's key. Plain values (an older jobtpu's
    submit) are refused: the whole group could read them in the spool."""
    from jobtpu.home.sealing import runner_private_key, unseal

    if doc.secrets:
        raise RequestRefused("its secret --env values came unsealed, readable by the whole group: the member's jobtpu "
                      "is older than this home's (update jobtpu, then submit again)")
    if not doc.sealed:
        return {}
    raw = unseal(runner_private_key(home.root), doc.sealed)
    if raw is None:  # forged, damaged, or sealed to a runner.key since replaced
        raise RequestRefused("its sealed secret --env values do not open with this home's runner.key: submit again")
    try:
        return msgspec.json.decode(raw, type=dict[str, str])
    except msgspec.DecodeError as e:
        raise RequestRefused(f"its sealed secret --env values are not names and values: {str(e)[:120]}") from None


def _rebuilt(home: Home, sent: Job, job_id: int, first: int, owner: int, fleet: Callable[[], Fleet]) -> Job:
    """The runner's record of a submitted job: the submit's fields, checked again as `submit` checks
    what a user types (a member's process could have written anything there); the rest its own."""
    from jobtpu.home.actor import Actor, acting_for
    from jobtpu.home.users import known_user
    from jobtpu.schema.state import Job

    fields = {name: getattr(sent, name) for name in SUBMIT_FIELDS}  # every field a submit sets (schema/job_fields.py)
    job = Job(id=job_id, created=round(time.time(), 3), uid=owner, waiting="held by hold" if sent.held else None,
              **fields)
    with acting_for(Actor(owner, account_name(owner), job.user)):
        known_user(home, job.user)  # a home that keeps a user list takes no other name
    try:
        _check_fields(job, first)
        if job.priority_class is not None:  # a class its user may not use is refused here too (design §7)
            from jobtpu.commands.submit import check_class

            check_class(fleet(), job.priority_class, job.user)
        if job.slices != 1:
            _check_slices(job, fleet())
    except JobtpuError as e:
        raise RequestRefused(f"job {job_id}: {e.message}") from None
    return job


def _check_fields(job: Job, first: int) -> None:
    """What `submit` refuses in what a user types, refused in a submitted record: the snapshot's
    name, the sweep, the command, requests, rule, environment names, --on-resume, --progress, tags,
    --retry-on-exit, the way it saves and every length (numbers are bounded by the record's type)."""
    from jobtpu.commands.submit import RULE_NAMES, check_resume_and_progress
    from jobtpu.decide.fit import parse_request
    from jobtpu.decide.saving import check_saving
    from jobtpu.inputs import parse_env, parse_exit_codes
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
    check_saving(job.saving)
    if job.retry_on_exit is not None:  # one state.json could not read would stop every command of the home
        parse_exit_codes(job.retry_on_exit, job.retries)


def _check_slices(job: Job, fleet: Fleet) -> None:
    """--slices as `submit` checks it: at least one, no pin beside more, and no more than the machines
    of one kind that fit the request could ever form (a hand-written 10**6 waits for nothing)."""
    from jobtpu.commands.submit import check_slices
    from jobtpu.decide.fit import parse_request, why_not

    request = parse_request(job.req)
    check_slices(job.slices, job.pin, [m for m in fleet.machines.values() if why_not(m, request, job.pin) is None])


def _bring_archive(home: Home, spool_fd: int, archive_name: str, name: str, owner: int, included: bool) -> None:
    """The submit's snapshot into the home's archives/, checked against its name, unless it is there
    (the runner's copy, checked when it was taken in)."""
    if home.archive(name).is_file():
        return
    if not included:
        raise RequestRefused(f"its snapshot {name[:16]}… is not in the home and the submit did not bring it")
    try:
        src = spool.open_archive(spool_fd, archive_name, owner)
    except FileNotFoundError:
        raise RequestRefused(f"its snapshot {archive_name} is missing from the spool") from None
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
                raise RequestRefused(f"its snapshot {why}")
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
