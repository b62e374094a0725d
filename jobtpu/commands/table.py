"""The command table: one row per command word, in the order `jobtpu --help` lists them, with the
module that adds its parser, its summary (its line in `jobtpu --help` and the top of its own
--help) and what a member of a shared home may do with it (docs/reference/home-files.md §1.3).
The parser build, `--help`, completion's commands and the member/runner rule (commands/front.as_member) all
read it; tests/test_command_table.py holds it equal to what the modules add and to the relayed
acts' structs (schema/acts.py). Pure data: importing it imports no command module, so `jobtpu
--help` lists every command without loading one."""

from collections.abc import Sequence
from enum import Enum


class SharedRole(Enum):
    """What a member of a shared home may do with a command (the runner may do everything). Every
    row names one: a command nobody classified would otherwise be a member's by default."""

    READS_ONLY = "reads only"  # runs as the member and writes nothing of the home's: allowed in the old layout too
    ACTS_ITSELF = "acts itself"  # runs as the member, writing only its own (its folder, its spooled submits)
    RELAYED = "relayed"  # a member's act travels to the runner as a request (commands/relay.py)
    RUNNER_ONLY = "runner only"  # writes the fleet's files or acts with the runner's keys: refused to a member


class Command:
    """One row: a word, its module (whose add_parser adds the word: `module_name` says where), its
    role and its summary; RUNNER_ONLY's exceptions in `member_uses`: the subcommand words a member
    may still use, as they only read. A plain class: every command line imports the table, and a
    NamedTuple's class costs ten times as much to make."""

    __slots__ = ("word", "module", "role", "summary", "member_uses")

    def __init__(self, word: str, module: str, role: SharedRole, summary: str,
                 member_uses: frozenset[str] = frozenset()) -> None:
        self.word, self.module, self.role, self.summary, self.member_uses = word, module, role, summary, member_uses

    def __repr__(self) -> str:
        return f"Command({self.word!r}, {self.module!r}, {self.role})"


_R, _A, _M, _X = SharedRole.READS_ONLY, SharedRole.ACTS_ITSELF, SharedRole.RELAYED, SharedRole.RUNNER_ONLY

COMMANDS: tuple[Command, ...] = (
    Command("submit", "submit", _A, "snapshot the working folder and queue a job; prints its id"),
    Command("run", "run", _A, "submit, then run a manage pass (with --follow: until the job ends)"),
    Command("manage", "manage", _X, "one pass over the fleet: reap, recover, dispatch, pull logs"),
    Command("cron", "cron", _A, "run this home's passes unattended: install, show or remove its crontab line "
            "(or systemd timer)"),
    Command("status", "status", _R, "the jobs, as a table"),
    Command("tail", "tail", _R, "a job's log (worker 0, latest attempt, last 50 lines)"),
    Command("fetch", "fetch", _A, "pull the job's remote folder (or PATH in it) into results/ID/ or --to DIR"),
    Command("kill", "kill", _M, "stop jobs on every worker and mark them killed"),
    Command("resume", "requeue", _M, "queue ended jobs again, continuing from their checkpoints"),
    Command("rerun", "requeue", _M, "queue ended jobs again, from the start"),
    Command("clean", "clean", _M, "move ended jobs from state.json into history.jsonl (default: your ended jobs)"),
    Command("hold", "hold", _M, "keep queued jobs from starting until `jobtpu release`"),
    Command("release", "hold", _M, "let held jobs start again"),
    Command("update", "update", _M, "change queued jobs' request, priority or class, overrides, machine or a "
            "sweep's --max-running"),
    Command("tag", "annotate", _M, "add (+TAG) and remove (-TAG) tags of jobs"),
    Command("note", "annotate", _M, "set a job's note (or with --machine a machine's), shown by status and machines"),
    Command("requests", "requests", _A, "in a shared home: your submits and acts waiting for the runner's next "
            "pass, and its answers"),
    Command("machines", "machines", _R, "the fleet: kind, accelerator, state, running jobs, free resources"),
    Command("tpu", "tpu", _X, "TPU node operations through the TPU API"),
    Command("runner", "runner", _X, "the home's runner lease: who runs its passes, who stands by; `handover` moves it "
            "on purpose", member_uses=frozenset({"show"})),
    Command("doctor", "doctor", _R, "check that passes run, and a machine: reachable, disk, python, TPU device, "
            "stale lock file"),
    Command("events", "events", _R, "what happened to jobs and machines (the home's events.jsonl), oldest first"),
    Command("report", "report", _R, "what preemptions and failures cost each job: time per attempt, each "
            "interruption split into detection, delete+create, setup and launch, work redone, goodput"),
    Command("watch", "watch", _A, "a live full-screen view of jobs, machines and events; runs a manage pass every "
            "round"),
    Command("init", "team", _X, "make a home: the folder and a machines.json with the local machine"),
    Command("user", "team", _X, "the team's user list (users.json): add, ls, rm", member_uses=frozenset({"ls"})),
    Command("adopt", "adopt", _X, "what a move from the old shared layout set aside: list it, or put it back as "
            "yours (the runner's)"),
    Command("import", "importing", _X, "take a team over from another tool: users, working directories, aliases, "
            "TPU machines"),
    Command("rules", "rules", _R, "what each rule does when an attempt ends, and which machines default to it"),
    Command("config", "personal", _A, "your defaults: rule, req (submit), columns (status), time_zone (times "
            "shown), sheet_name (the team sheet)"),
    Command("dir", "personal", _A, "your numbered working directories; `submit --dir N` snapshots number N"),
    Command("alias", "personal", _A, "config aliases: built-in, the team's (machines.json) and your own"),
    Command("exec", "remote", _R, "run a command on a machine's workers (or where a job runs) at once; lines "
            "prefixed [worker]; exit: the worst"),
    Command("ssh", "remote", _R, "log in to a machine's worker (or a job's: on Slurm, its node) with its key, port "
            "and the home's known_hosts"),
    Command("tldr", "tldr", _R, "the ten commands a new team member needs, one example each"),
    Command("sheet", "sheet", _X, "the team's TPU spreadsheet (machines.json's sheet): sync, show, find, claims, "
            "notes", member_uses=frozenset({"show"})),
    Command("completion", "completion", _R, "print the script that makes Tab complete jobtpu in SHELL "
            "(eval \"$(jobtpu completion bash)\" in ~/.bashrc)"),
    Command("serve", "web.serve", _A, "the home's jobs, machines and events in a browser, with your acts (a private "
            "socket to reach over ssh -L)"),
    Command("metrics", "metrics", _A, "the home's figures in the Prometheus text format (jobs, queue wait, "
            "machines, the last pass, accelerator hours)"),
)

ROWS: dict[str, Command] = {c.word: c for c in COMMANDS}
MODULES: tuple[str, ...] = tuple(dict.fromkeys(c.module for c in COMMANDS))  # each once, in the table's order


def words_with(role: SharedRole) -> frozenset[str]:
    return frozenset(c.word for c in COMMANDS if c.role is role)


# The relayed acts: the same words as schema/acts.py's ARGS, the structs of their values (a test holds them equal).
RELAYED = words_with(SharedRole.RELAYED)


def module_name(module: str) -> str:
    """A row's module as Python names it: a plain name is jobtpu/commands/<module>.py; a dotted one is
    under jobtpu/ (`web.serve`: a command module that sits with the front end it starts, above the
    commands that front end calls, docs/design.md §5.1)."""
    return f"jobtpu.{module}" if "." in module else f"jobtpu.commands.{module}"


def words_of(module: str) -> list[str]:
    """The command words a module adds, in the table's order."""
    return [c.word for c in COMMANDS if c.module == module]


def member_may(command: str, words: Sequence[str]) -> bool:
    """Pure: whether a member of a shared home may run this command itself (`words`: the command's
    words, the command first); False for what only the runner does, save its read-only uses."""
    row = ROWS[command]
    if row.role is not SharedRole.RUNNER_ONLY:
        return True
    return len(words) > 1 and words[1] in row.member_uses


def old_layout_may(command: str) -> bool:
    """Pure: whether a member may run this command in a shared home of the old layout, where every
    member writes every file: only what writes nothing, until the runner moves the home."""
    return ROWS[command].role is SharedRole.READS_ONLY
