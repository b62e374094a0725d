"""Job specs: what a local job runs, in a file its submitter owns (docs/design.md §7).

In a shared home state.json is the group's to write, so a job record's `user`, `cmd`, `env` and
`overrides` may have been written by any member. At submit, in the same transaction and before the
job exists in state.json (as its secrets are saved), `specs/<id>.json` is written, owned by the
submitting account and writable by it alone, holding that account (uid and name) and everything
that decides what runs. A pass launches a job on the local machine, where it runs as the pass's own
account, only when the spec is its own account's (or a trusted runner.json names it the team's
runner) and the record's launch fields equal the spec's. The `specs/` folder of a shared home has
the sticky bit, so no member can rename or delete another's spec."""

from __future__ import annotations

import os
import stat
from pathlib import PurePath
from typing import Any

from jobtpu.home import safefs
from jobtpu.home.layout import Home, is_shared
from jobtpu.home.trust import account_name, folder_is_own, why_untrusted
from jobtpu.schema.job_fields import LAUNCH_FIELDS
from jobtpu.schema.job_spec import JobSpec, read_spec
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Job

SPECS = "specs"
MAX_SPEC_BYTES = 1 << 20


def spec_path(job_id: int) -> PurePath:
    return PurePath(SPECS, f"{job_id}.json")


def spec_of(job: Job, secret_names: list[str] | tuple[str, ...]) -> JobSpec:
    uid = os.geteuid()
    return JobSpec(id=job.id, uid=uid, account=account_name(uid), user=job.user, cmd=job.cmd,
                   overrides=list(job.overrides), log_stage=job.log_stage, on_resume=job.on_resume, saving=job.saving,
                   env=dict(job.env), archive=job.archive, secrets=sorted(secret_names))


def write_spec(home: Home, job: Job, secret_names: list[str] | tuple[str, ...]) -> None:
    """specs/<id>.json for one job (write_specs)."""
    write_specs(home, [job], secret_names)


def write_specs(home: Home, jobs: list[Job], secret_names: list[str] | tuple[str, ...]) -> None:
    """specs/<id>.json for each job, this account's, 0640 in a shared home (0600 in a private one),
    each written whole (temporary file, fsync, rename) so a pass never reads half of one. A one-writer
    shared home keeps none: its records are its runner's, and name their submitter (docs/design.md §7)."""
    from jobtpu.home.roles import Layout, role_of

    if role_of(home.root).layout is Layout.SHARED:
        return
    shared = is_shared(home.root)
    folder = safefs.open_dir(home.root, SPECS, create=True)
    try:
        st = os.fstat(folder)
        if shared and st.st_uid == os.geteuid() and not st.st_mode & stat.S_ISVTX:
            os.fchmod(folder, stat.S_IMODE(st.st_mode) | stat.S_ISVTX)  # nobody removes another's spec
        for job in jobs:
            safefs.write_in(folder, f"{job.id}.json", msgspec.json.encode(spec_of(job, secret_names)),
                            0o640 if shared else 0o600)
    finally:
        os.close(folder)


def has_spec(home: Home, job_id: int) -> bool:
    try:
        fd = safefs.open_file(home.root, spec_path(job_id))
    except (FileNotFoundError, safefs.UnsafePath):
        return False
    os.close(fd)
    return True


def drop_spec(home: Home, job_id: int) -> None:
    try:
        folder = safefs.open_dir(home.root, SPECS)
    except (FileNotFoundError, safefs.UnsafePath):
        return
    try:
        os.unlink(f"{job_id}.json", dir_fd=folder)
    except OSError:
        pass
    finally:
        os.close(folder)


class Verdict(msgspec.Struct, frozen=True):
    """Whether this pass may run a job on the local machine: `ok`, else `foreign` (it waits, with
    `why` as its pending reason) or `tampered` (it fails with `why`). `secrets`: the names it may take."""

    kind: str
    why: str = ""
    secrets: frozenset[str] | None = None  # None: every secret the job has (its record is trusted)


OK = Verdict("ok")


def records_trusted(home: Home) -> bool:
    """Whether state.json itself carries this account's consent (a private home): then its records
    say what runs, as they always have. In a shared home they never do: in the one-writer layout the
    record names the account that submitted (the runner wrote it) and local_verdict asks that
    account's consent; in the old layout its spec must agree. A state.json missing from a shared home
    is no private home's."""
    from jobtpu.home.roles import Layout, role_of

    layout = role_of(home.root).layout
    if layout is not Layout.PRIVATE:
        return False
    try:
        st = os.stat(home.state_file, follow_symlinks=False)
    except FileNotFoundError:
        return True
    euid = os.geteuid()
    # Every save keeps the file it replaces as state.json.bak through a hard link (store.py), so
    # state.json has two links while any save runs, and until the next save after a save killed
    # there. Read without the state lock, that second link is ours whenever nobody else can make a
    # name in the home's folder.
    try:
        own = folder_is_own(os.stat(home.root), euid)
    except OSError:
        own = False
    return why_untrusted(st, euid, links_count=not own) is None


def local_verdict(home: Home, job: Job, runs_for_team: bool, one_writer: bool | None = None) -> Verdict:
    """What the job's spec says about running it locally as this account (docs/design.md §7); in a
    one-writer shared home, what its record says (the runner wrote it, from the submit's owner).
    `one_writer`: the home's layout, when the caller asks for many jobs (None: looked up)."""
    if one_writer is None:
        from jobtpu.home.roles import Layout, role_of

        one_writer = role_of(home.root).layout is Layout.SHARED
    if one_writer:
        return shared_verdict(job, os.geteuid(), runs_for_team)
    where = spec_path(job.id)
    try:
        fd = safefs.open_file(home.root, where)
    except FileNotFoundError:
        return Verdict("foreign", f"local jobs run as their submitter: job {job.id} has no {where} "
                                  f"(its owner's `jobtpu rerun {job.id}` writes one)")
    except safefs.UnsafePath as e:
        return Verdict("tampered", f"{e.message}: not run")
    try:
        st = os.fstat(fd)
        raw = safefs.read_fd(fd, MAX_SPEC_BYTES)
    finally:
        os.close(fd)
    owner = st.st_uid
    spec = read_spec(raw)
    if why_untrusted(st, owner) is not None or spec is None or spec.uid != owner or spec.id != job.id:
        return Verdict("tampered", f"its spec {where} is not one its submitter wrote: not run")
    if owner != os.geteuid() and not runs_for_team:
        return Verdict("foreign", f"local jobs run as their submitter: waits for a pass run by {account_name(owner)}")
    differ = [f for f in LAUNCH_FIELDS if _launch_value(job, f) != getattr(spec, f)]
    if differ:
        return Verdict("tampered", f"its record differs from its spec {where} ({', '.join(differ)}): not run")
    return Verdict("ok", secrets=frozenset(spec.secrets))


def _launch_value(job: Job, name: str) -> Any:
    value = getattr(job, name)
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


def shared_verdict(job: Job, euid: int, runs_for_team: bool) -> Verdict:
    """Pure: may the runner of a one-writer shared home run this job on the local machine, as itself?"""
    if job.uid == euid or (job.uid is not None and runs_for_team):
        return OK
    if job.uid is None:
        return Verdict("foreign", f"job {job.id} names no submitting account: the runner's `jobtpu rerun {job.id}` "
                                  "queues it again as the runner's, anyone's `--force` as theirs")
    me = account_name(euid)
    return Verdict("foreign", f"local jobs run as the runner ({me}) only with its consent: runner.json "
                              f'"runner": "{me}" gives it; {account_name(job.uid)}\'s job waits')
