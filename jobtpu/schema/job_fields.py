"""The one table of what a user may set on a job (docs/reference/commands.md §2.2): a row per option
of `submit` and `run`, saying which fields of the job's record (schema/state.py) it sets, what kind
of value it takes and its default, whether a job file's [job] table takes it (jobfile.py), under
which keyword the Python API takes it (api.py), and whether it decides what runs (the job's spec,
schema/job_spec.py).

What follows from a row is derived here: the fields a member's submit carries to the runner
(SUBMIT_FIELDS, every field a row sets, so a new field cannot be left behind), the launch fields
a job's spec holds (LAUNCH_FIELDS) and the job file's keys by kind. What users and mypy read stays
written out where it is used (SubmitOptions, the parser's options with their help, the API's
keyword signature): tests/test_job_fields.py holds each of those to this table."""

from enum import StrEnum
from typing import NamedTuple


class Kind(StrEnum):
    """What an option's value is, as the command line, a job file and SubmitOptions hold it."""

    TEXT = "text"  # a string, or None when not given
    LIST = "list"  # a repeatable option: a list of strings
    INT = "int"  # a whole number
    BOOL = "bool"  # a flag


class Row(NamedTuple):
    option: str | None  # SubmitOptions' field, the parser's dest (--max-recoveries: max_recoveries); None: no option
    sets: tuple[str, ...]  # the job's fields it sets; (): it shapes the submit alone (the snapshot, a dry run)
    kind: Kind | None = None
    default: object = None
    job_file: bool = False  # a key of jobtpu.toml's [job] table (the option's name, dashes as underscores)
    api: str | None = None  # the keyword of api.Home.submit that takes it
    launch: bool = False  # its fields decide what runs: a record that differs from its spec is not run


# A launch row's fields are listed in the order a spec's differences are named ("its record differs
# from its spec (cmd, env)"), which is JobSpec's order.
ROWS: tuple[Row, ...] = (
    Row("user", ("user",), Kind.TEXT, None, api="user", launch=True),
    Row("cmd", ("cmd",), Kind.TEXT, None, job_file=True, api="cmd", launch=True),
    Row("overrides", ("overrides",), Kind.LIST, [], job_file=True, api="overrides", launch=True),
    Row("verbatim", ("overrides",), Kind.LIST, [], launch=True),  # the overrides after `--`
    Row("log_stage", ("log_stage",), Kind.BOOL, False, job_file=True, api="log_stage", launch=True),
    Row("on_resume", ("on_resume",), Kind.TEXT, None, job_file=True, api="on_resume", launch=True),
    # How a save shows and where checkpoints live (decide/saving.py): they decide what a resume runs
    # with and where the worker copies a checkpoint, so a record that differs from its spec is not run.
    Row("saved_when", ("saving",), Kind.TEXT, None, job_file=True, api="saved_when", launch=True),
    Row("saved_marker", ("saving",), Kind.TEXT, None, job_file=True, api="saved_marker", launch=True),
    Row("checkpoints", ("saving",), Kind.TEXT, None, job_file=True, api="checkpoints", launch=True),
    Row("env", ("env",), Kind.LIST, [], job_file=True, api="env", launch=True),
    Row(None, ("archive",), launch=True),  # the snapshot's name, made by submit from --dir and its filters
    Row("dir", ("dir",), Kind.TEXT, None, api="dir"),
    Row("include", (), Kind.LIST, [], job_file=True, api="include"),
    Row("exclude", (), Kind.LIST, [], job_file=True, api="exclude"),
    Row("allow_secrets", (), Kind.BOOL, False, api="allow_secrets"),
    Row("req", ("req",), Kind.LIST, [], job_file=True, api="req"),
    Row("machine", ("pin",), Kind.TEXT, None, job_file=True, api="machine"),
    Row("name", ("name",), Kind.TEXT, "", job_file=True, api="name"),
    Row("tag", ("tags",), Kind.LIST, [], job_file=True, api="tags"),
    Row("rule", ("rule",), Kind.TEXT, None, job_file=True, api="rule"),
    Row("max_recoveries", ("max_recoveries",), Kind.INT, 20, job_file=True, api="max_recoveries"),
    Row("timeout", ("timeout",), Kind.TEXT, None, job_file=True, api="timeout"),
    Row("stall", ("stall",), Kind.TEXT, None, job_file=True, api="stall"),
    Row("progress", ("progress",), Kind.TEXT, None, job_file=True, api="progress"),
    Row("priority", ("priority",), Kind.INT, 0, job_file=True, api="priority"),
    Row("priority_class", ("priority_class",), Kind.TEXT, None, job_file=True, api="priority_class"),
    Row("sheet_note", ("sheet_note",), Kind.TEXT, None, job_file=True, api="sheet_note"),
    Row("sweep", ("sweep", "sweep_index", "sweep_values"), Kind.LIST, [], api="sweep"),
    Row("sweep_file", ("sweep", "sweep_index", "sweep_values"), Kind.TEXT, None, api="sweep_file"),
    Row("max_running", ("max_running",), Kind.INT, 0),
    Row("after", ("after",), Kind.LIST, [], api="after"),
    Row("after_any", ("after_any",), Kind.LIST, [], api="after_any"),
    Row("retries", ("retries",), Kind.INT, 0, job_file=True, api="retries"),
    Row("retry_on_exit", ("retry_on_exit",), Kind.TEXT, None, job_file=True, api="retry_on_exit"),
    Row("max_preemptions", ("max_preemptions",), Kind.INT, 0, job_file=True, api="max_preemptions"),
    Row("grace", ("grace",), Kind.TEXT, None, job_file=True, api="grace"),
    Row("signal", ("signal", "signal_before"), Kind.TEXT, None, job_file=True, api="signal"),
    Row("hold", ("held",), Kind.BOOL, False, api="hold"),
    Row("slices", ("slices",), Kind.INT, 1, job_file=True, api="slices"),
    Row("dry_run", (), Kind.BOOL, False),
)


def _fields(rows: tuple[Row, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for row in rows for name in row.sets))


# The fields of a job a submit sets: a member's submit carries exactly these to the runner, which
# starts every other field at its default (commands/intake_submits.py).
SUBMIT_FIELDS = _fields(ROWS)
# The fields that decide what a job runs, in JobSpec's order: a record whose values differ from its
# spec's is not run (home/specs.py).
LAUNCH_FIELDS = _fields(tuple(row for row in ROWS if row.launch))


def job_file_keys(kind: Kind) -> tuple[str, ...]:
    """The keys of a job file's [job] table whose values are of this kind."""
    return tuple(row.option for row in ROWS if row.job_file and row.kind is kind and row.option is not None)
