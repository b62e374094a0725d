"""A job's spec (`specs/<id>.json`, docs/design.md §7) as its type: the account that submitted the
job and everything that decides what it runs, written at submit by that account. home/specs.py
writes it and compares a job's record with it before a pass runs the job as its own account."""

from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.saving import Saving


class JobSpec(msgspec.Struct, kw_only=True):
    id: int
    uid: int  # the submitting account, which must own the file too
    account: str  # its login name when it submitted, for people reading the file
    # The launch fields (job_fields.LAUNCH_FIELDS, in this order): a record whose values differ from these is not run.
    user: str
    cmd: str
    overrides: list[str]
    log_stage: bool
    on_resume: str | None = None  # absent from the specs written before `submit --on-resume`
    saving: Saving | None = None  # absent from the specs written before `submit --saved-when`
    env: dict[str, str]  # a secret's value is masked, as in the record
    archive: str
    secrets: list[str]  # the names of the secret --env values the job may take from secrets.json


_DECODER = msgspec.json.Decoder(JobSpec)


def read_spec(data: bytes) -> JobSpec | None:
    """The spec `data` holds, or None when it is not one (a damaged or hand-made file)."""
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
