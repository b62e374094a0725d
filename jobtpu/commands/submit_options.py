"""What `submit` and `run` take, as the user typed it: a module of its own, so what reads the options
(bare_words.py, the API) needs none of submit's code."""

from typing import NamedTuple


class SubmitOptions(NamedTuple):
    """What `submit` and `run` take, as the user typed it (checked by build_job). The one place each
    default is written: the parser takes them from here (add_job_options), and tests/test_commands.py
    holds the fields to its options."""

    cmd: str | None = None  # --cmd, else the job file's (jobfile.py)
    dir: str | None = None  # a folder, a working directory's number, or None (see settings.source_folder)
    req: list[str] = []
    machine: str | None = None
    name: str = ""
    tag: list[str] = []
    env: list[str] = []
    rule: str | None = None
    max_recoveries: int = 20
    timeout: str | None = None
    stall: str | None = None
    include: list[str] = []
    exclude: list[str] = []
    allow_secrets: bool = False  # snapshot a login home, or credentials, all the same
    user: str | None = None
    log_stage: bool = False
    on_resume: str | None = None
    overrides: list[str] = []
    verbatim: list[str] = []  # overrides after `--`: not checked for the old tool's habits
    progress: str | None = None
    saved_when: str | None = None  # how a save shows and where checkpoints live (decide/saving.py)
    saved_marker: str | None = None
    checkpoints: str | None = None
    priority: int = 0
    priority_class: str | None = None  # --class: machines.json's priority_classes (None: the default class)
    sheet_note: str | None = None
    # sweeps, dependencies, retries, grace and signal (batch.py)
    sweep: list[str] = []
    sweep_file: str | None = None
    after: list[str] = []
    after_any: list[str] = []
    retries: int = 0
    retry_on_exit: str | None = None  # the exit codes --retries retries (schema/exit_codes.py); None: any
    max_preemptions: int = 0  # preemptions the rule may recover from (0: no limit)
    grace: str | None = None
    signal: str | None = None
    max_running: int = 0  # a sweep's cap on its jobs active at once (0: none)
    hold: bool = False  # queued held: it starts only after `jobtpu release`
    slices: int = 1  # one job on this many machines of one kind, started together (a multislice gang)
    dry_run: bool = False  # print the job as it would be submitted; snapshot and write nothing
