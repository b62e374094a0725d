"""A member's act as values (docs/reference/home-files.md §1.3): one struct per relayed command,
holding what that command's function reads, with its names, types and bounds. The member's side
fills it from the command line's one parse (commands/act_request.py); the runner decodes it from
the request's `args` and never parses words. Every field is untrusted data to the runner: decoded
strictly, bounded, and only ever passed to the command's own function."""

from typing import Annotated

from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.names import MAX_PRIORITY, MAX_TRIES
from jobtpu.schema.state import Status

MAX_VALUES = 256  # values of one list (ids, tags, note words…): what the old request's words allowed
MAX_TEXT = 100_000  # characters of one value (the request's size bounds them all together first)

JobId = Annotated[int, msgspec.Meta(ge=1, le=10**12)]
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
Ids = Annotated[list[JobId], msgspec.Meta(max_length=MAX_VALUES)]
Texts = Annotated[list[Text], msgspec.Meta(max_length=MAX_VALUES)]
Priority = Annotated[int, msgspec.Meta(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]
Tries = Annotated[int, msgspec.Meta(ge=0, le=MAX_TRIES)]


class Selected(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The selection every bulk act takes (commands/select.py), and its --dry-run and --force."""

    ids: Ids = []
    tags: Texts = []
    names: Texts = []
    statuses: Annotated[list[Status], msgspec.Meta(max_length=MAX_VALUES)] = []
    sweeps: Ids = []
    user: Text | None = None
    all_users: bool = False
    dry_run: bool = False
    force: bool = False

    def __post_init__(self) -> None:  # what the parser's mutually exclusive group refuses
        if self.user is not None and self.all_users:
            raise ValueError("user and all_users are exclusive")


class KillArgs(Selected, forbid_unknown_fields=True, kw_only=True):
    """`kill`."""


class HoldArgs(Selected, forbid_unknown_fields=True, kw_only=True):
    """`hold` and `release`."""


class RequeueArgs(Selected, forbid_unknown_fields=True, kw_only=True):
    """`resume` and `rerun`."""

    machine: Text | None = None


class CleanArgs(Selected, forbid_unknown_fields=True, kw_only=True):
    """`clean`."""

    remote: bool = False


class UpdateArgs(Selected, forbid_unknown_fields=True, kw_only=True):
    """`update`."""

    req: Texts | None = None
    priority: Priority | None = None
    set: Texts = []
    unset: Texts = []
    machine: Text | None = None
    no_machine: bool = False
    max_running: Tries | None = None
    priority_class: Text | None = None  # `--class`: checked by update as submit checks it

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.machine is not None and self.no_machine:
            raise ValueError("machine and no_machine are exclusive")


class TagArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`tag`: its words are the command's own values (ids, +TAG, -TAG), read by its function."""

    force: bool = False
    words: Texts = []


class NoteArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`note`: its words are the job's id and the note's text, read by its function."""

    machine: Text | None = None
    force: bool = False
    words: Annotated[list[Text], msgspec.Meta(min_length=1, max_length=MAX_VALUES)]


ActArgs = KillArgs | HoldArgs | RequeueArgs | CleanArgs | UpdateArgs | TagArgs | NoteArgs

# Every relayed command and the struct of its values.
ARGS: dict[str, type[ActArgs]] = {"kill": KillArgs, "hold": HoldArgs, "release": HoldArgs, "resume": RequeueArgs, "rerun": RequeueArgs,
                                  "clean": CleanArgs, "update": UpdateArgs, "tag": TagArgs, "note": NoteArgs}
