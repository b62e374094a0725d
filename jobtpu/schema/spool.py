"""The files members write into a shared home's spool, and the runner's replies (docs/reference/home-files.md §1.3).

Every one of them is untrusted data to the runner that reads it: decoded strictly, bounded, and taken
as coming from the account that owns the file, whatever it says inside."""

from typing import Annotated, Literal

from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.state import Job

MAX_SUBMISSION_BYTES = 64 << 20  # a 10,000-job sweep's records and more
MAX_REQUEST_BYTES = 64 << 10
MAX_REPLY_BYTES = 256 << 10
MAX_JOBS = 100_000  # jobs of one submission (a sweep's)

JobId = Annotated[int, msgspec.Meta(ge=1, le=10**12)]
# A member's reply key (Curve25519, raw; base64 in JSON): the runner seals its reply to it.
ReplyKey = Annotated[bytes, msgspec.Meta(max_length=32)]
MAX_SEALED_SECRETS = 1 << 20


class Submission(msgspec.Struct, forbid_unknown_fields=True):
    """`submit` by a member: the jobs as it checked them, under the ids it claimed (`first` on), and
    the values of their secret --env variables (the same for every job of a sweep), sealed to the
    runner's key: a JSON object of names and values that only `runner.key` opens."""

    first: JobId
    jobs: Annotated[list[Job], msgspec.Meta(min_length=1, max_length=MAX_JOBS)]
    # Plain secret values, as an older jobtpu sent them: refused (the group could read them).
    secrets: dict[str, str] = msgspec.field(default_factory=dict)
    archive_included: bool = False  # spool/archive-<first>-<random>.tar.gz holds the snapshot (else the home has it)
    sealed: Annotated[bytes, msgspec.Meta(max_length=MAX_SEALED_SECRETS)] = b""
    reply_key: ReplyKey = b""
    # Its shape's version: one a later jobtpu writes differently is refused in one line, never misread
    # (an older jobtpu's submit, without it, is version 1).
    v: Literal[1] = 1


class ActRequest(msgspec.Struct, forbid_unknown_fields=True):
    """An act by a member (kill, hold, rerun, tag, note…), version 2: the command and its values as
    the command line parsed them (`args`: the command's struct of schema/acts.py, decoded once the
    command is known), and the user name it acts as. No words: the runner parses none."""

    v: Literal[2]
    command: Annotated[str, msgspec.Meta(max_length=40)]
    args: msgspec.Raw
    user: Annotated[str, msgspec.Meta(max_length=1000)]
    at: float = 0.0
    reply_key: ReplyKey = b""  # the sender's: the runner seals its reply to it


class OldActRequest(msgspec.Struct, forbid_unknown_fields=True):
    """An act as jobtpu wrote it before version 2 (the command's words): recognised, to ask for it
    again, and never carried out."""

    argv: list[str]
    user: str
    at: float = 0.0
    reply_key: ReplyKey = b""


class Reply(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """What the runner did with a request: exit code 0 or not, and the lines the command said. On
    disk `what`, `lines` and `ids` are sealed to the sender's reply key (`sealed`, a ReplyContent),
    or left out when the request carried no key: the group reads replies/."""

    request: str
    account: str
    code: int
    what: str = ""  # the request in words: "kill 5", "submit of job 12"
    lines: list[str] = msgspec.field(default_factory=list)
    at: float = 0.0
    ids: list[int] = msgspec.field(default_factory=list)  # a submission's job ids, when taken in
    sealed: bytes = b""


class ReplyContent(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A reply's own words, sealed to its sender."""

    what: str = ""
    lines: list[str] = msgspec.field(default_factory=list)
    ids: list[int] = msgspec.field(default_factory=list)
