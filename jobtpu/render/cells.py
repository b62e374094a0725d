"""The cells of the tables' rows, as text: what a table of jobs or of machines may show (views/rows.py
makes them from the records; render/display.py fits and draws them)."""

from jobtpu.schema.msgspec_lib import msgspec


class JobRow(msgspec.Struct, frozen=True):
    """A job's row: every cell a table of jobs may show, as text (a layout escapes and fits them)."""

    id: int | str  # a job's id; a sweep's queued members collapsed: their first and last id (`12-10011`)
    name: str
    user: str
    status: str
    attempt: str  # its number, and the recoveries and retries that led to it: `5 (3 pre, 1 infra, 1/2 retry)`
    run: str  # how long it ran, over all its attempts
    age: str  # since it was submitted
    where: str  # the machine and what it holds there; queued: what it asks for and where it is pinned
    overrides: str
    tags: str
    info: str  # why it stopped or waits, its note, its last log line
    submitted: str = ""  # a clock time in the viewer's time zone (an opt-in column)
    apart: int = 0  # how many leading characters of `overrides` tell the job from its sweep's others
    tries: int = 0  # the attempt number alone
    reason: str = ""  # why its last attempt ended
    machine: str = ""  # the machine it was given, by its short name
    waiting: str = ""  # queued: why it waits (machines by their short names)
    last_line: str = ""  # its log's last line
    collapsed: int | None = None  # a sweep's queued members in one row: that sweep (the web links to it)


class MachineCells(msgspec.Struct, frozen=True):
    """A machine's row: every cell a table of machines may show, as text. Made from the record
    `machines --json` gives (schema/published.py) and what the last pass saw of the machine."""

    name: str  # machines.json's
    short: str  # what tables call it: its first alias, else its name
    other_names: str  # its name and its other aliases, when it has an alias
    kind: str
    accelerator: str  # a TPU's with its provisioning and zone; a queued resource's state
    workers: str
    state: str  # as `machines` says it: unknown while the TPU API cannot be asked
    health: str
    running: str  # how many jobs are on it
    free: str  # `slot=1 gpu=6`
    note: str
    detail: str  # the pass's detail, its drain or claim, when it became unreachable or will be asked again
    seen: str  # the state the last pass recorded (the live view's word)
    doing: str  # the jobs it holds (`jobs 3,4`, else `idle`), its node, queued resource, back-off, detail
