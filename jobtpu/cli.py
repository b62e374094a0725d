"""The command line: parse, call one command function through COMMANDS, turn errors into one line.
The only place that prints an error or chooses the exit status."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from jobtpu import timing
from jobtpu.commands import (
    annotate,
    batch,
    fleet,
    importing,
    jobs,
    personal,
    remote,
    rules,
    select,
    sheet,
    team,
    tldr,
    tpu,
    watch,
)
from jobtpu.commands.common import error_text
from jobtpu.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, JobtpuError, Terminated
from jobtpu.home.layout import Home, find_home
from jobtpu.views.text import printable


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # bad usage: exit 2, one line and a pointer to --help
        sys.stderr.write(f"jobtpu: error: {message}\nhint: {_usage_hint(message) or f'see `{self.prog} --help`'}\n")
        raise SystemExit(EXIT_USAGE)

    # Where every word after the first "--" goes, verbatim: `exec` and `ssh` a command's words (argparse
    # would settle an optional positional before it reached them, and call them unrecognized), `submit`
    # and `run` overrides that are not checked for the old tool's habits.
    after_dashes: str | None = None

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        words = _attach_dashed_values(list(sys.argv[1:] if args is None else args))
        at = words.index("--") if self.after_dashes and "--" in words else len(words)
        if not self._subparsers:  # a command's own parser: its mistakes are named with its own --help
            self._check_options(words[:at])
        parsed, extras = super().parse_known_args(words[:at], namespace)
        if self.after_dashes and at < len(words):
            setattr(parsed, self.after_dashes, [*getattr(parsed, self.after_dashes, []), *words[at + 1:]])
        if extras and not self._subparsers:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def _check_options(self, words: list[str]) -> None:
        """`status --stauts running`: name the option nobody knows (and the one meant) before argparse
        tries the next word as something else. An override typed as an option gets its own hint."""
        from jobtpu.suggest import option_for

        if any(a.nargs == argparse.REMAINDER for a in self._actions):
            return  # `tag 3 --x`: the words are the command's
        known = [o for o in self._option_string_actions if o.startswith("--")]
        takes_overrides = any(a.dest == "overrides" for a in self._actions)
        for word in (w for w in words if w.startswith("--") and w != "--"):
            name = word.partition("=")[0]
            if any(o.startswith(name) for o in known) or ("=" in word and takes_overrides):
                continue  # an option or a unique prefix of one, as argparse takes it
            if " " in word:
                continue  # argparse takes a word with a space as a value (`note 3 "-- see above"`)
            meant = option_for(word, known)
            self.error(f"unrecognized option {name}" + (f": did you mean {meant}?" if meant else ""))

    def _check_value(self, action: argparse.Action, value: object) -> None:
        if action.choices is None or value in action.choices:
            return
        from jobtpu.suggest import command_for, nearest

        if isinstance(action, argparse._SubParsersAction) and self.prog == "jobtpu":
            meant = command_for(str(value), action.choices)
            if meant:
                raise argparse.ArgumentError(None, f"{value!r} is not a jobtpu command: did you mean `{meant}`?")
        close = nearest(str(value), map(str, action.choices))
        if close is None:
            return super()._check_value(action, value)
        choices = ", ".join(map(repr, action.choices))
        raise argparse.ArgumentError(action, f"invalid choice: {value!r}: did you mean {close!r}? (choose from {choices})")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> object:
        # Python 3.11's argparse strips a "--" even from an option's attached value, so `--name=--`
        # would arrive as [] (and `--tag=--` as [[]]). An attached "--" is the user's value, verbatim.
        if action.option_strings and action.nargs in (None, argparse.OPTIONAL) and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)


# Options whose value is itself command-line words, so usually starts with dashes: argparse would
# take `--on-resume --config.x=1` for two options and say the first lacks its value.
DASHED_VALUES = frozenset({"--on-resume"})


def _attach_dashed_values(words: list[str]) -> list[str]:
    """`--on-resume VALUE` → `--on-resume=VALUE` (before any "--", after which words are a command's)."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] == "--":
            return out + words[i:]
        if words[i] in DASHED_VALUES and i + 1 < len(words):
            out.append(f"{words[i]}={words[i + 1]}")
            i += 2
            continue
        out.append(words[i])
        i += 1
    return out


def _usage_hint(message: str) -> str | None:
    """For `submit --cmd x --wd=0.1`: a config override typed as an option. argparse can only call it
    an unrecognized argument; say how to pass it."""
    if not message.startswith("unrecognized arguments: "):
        return None
    words = message.removeprefix("unrecognized arguments: ").split()
    override = next((w for w in words if re.fullmatch(r"--?[A-Za-z_][A-Za-z0-9_.\-]*=.*", w)), None)
    if override is None:
        return None
    bare = override.lstrip("-")
    return (f"{override} looks like a config override: write it without dashes ({bare}), or after `--` "
            f"(-- {override}); overrides come after the options")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0, like 60")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 or more")
    return value


def _since(text: str) -> float:
    from jobtpu.tell.events import since_arg  # here: `--help` loads no more than it needs

    return since_arg(text)
# The status words as `status --status` accepts them; the same as model.Status (a test holds them equal).
STATUS_NAMES = ("queued", "launching", "running", "killing", "finished", "failed", "killed")


def _status_words(text: str) -> list[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    wrong = [w for w in words if w not in STATUS_NAMES]
    if wrong or not words:
        from jobtpu.suggest import nearest

        close = nearest((wrong or [text])[0], STATUS_NAMES)
        meant = f"did you mean {close!r}? " if close else ""
        raise argparse.ArgumentTypeError(f"{(wrong or [text])[0]!r} is not a status: {meant}use {', '.join(STATUS_NAMES)}")
    return words


# The rule names as `--rule` accepts them; the same as rules.RULES (a test holds them equal): cli.py
# does not import the model, so that `--help` and a cached `status` load as little as they can.
RULE_NAMES = ("pre", "pass", "reapply", "rerun", "resume")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jobtpu", description="Run training jobs on TPU VMs, GPU boxes and this machine, "
                     "over SSH, through preemptions.")
    parser.add_argument("--home", help="the folder holding machines.json and state.json")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, description=help_text)

    for name, text in (("submit", "snapshot the working folder and queue a job; prints its id"),
                       ("run", "submit, then run a manage pass (with --follow: until the job ends)")):
        p = add(name, text)
        p.add_argument("--cmd", required=True, help="the command to run, by bash, in the snapshot")
        p.add_argument("--dir", help="the folder to snapshot, or N for your working directory N (`jobtpu dir`); "
                       "default: here, or your working directory 1 when here is not a project (docs/reference/commands.md §2.2.1)")
        p.add_argument("--req", action="append", default=[],
                       help="resource or accelerator request, repeatable (default: your `config` req)")
        p.add_argument("--machine", help="run only on this machine (its name, an alias, or a TPU's node name)")
        p.add_argument("--name", default="", help="a free-form name shown by status (at most 200 characters)")
        p.add_argument("--tag", action="append", default=[], help="a label shown by status, repeatable")
        p.add_argument("--env", action="append", default=[], metavar="K=V",
                       help="set K for the job, repeatable; $NAME and ${NAME} in V take the worker's value at "
                            "job start (PATH=/opt/conda/bin:$PATH), nothing else is interpreted; \\$ is a "
                            "literal $; secret-looking values are taken as they are")
        p.add_argument("--rule", choices=RULE_NAMES, help="what to do when an attempt fails or is preempted "
                       "(`jobtpu rules` shows each; default: your `config` rule, else the machine's)")
        p.add_argument("--max-recoveries", type=_count, default=20, metavar="N",
                       help="automatic recoveries the rule may make (default 20)")
        p.add_argument("--timeout", help="wall-time limit per attempt (90s, 30m, 12h, 2d)")
        p.add_argument("--stall", help="stop when the log has not grown for this long")
        p.add_argument("--include", action="append", default=[], metavar="GLOB",
                       help="snapshot files matching GLOB even if ignored, repeatable")
        p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                       help="leave files matching GLOB out of the snapshot, repeatable")
        p.add_argument("--allow-secrets", action="store_true", help="snapshot even a login home folder, or "
                       "one whose files include .ssh, .gnupg, .aws, .config/gcloud or a private key (refused otherwise)")
        p.add_argument("--user", help="submit as this user (default: $JOBTPU_USER, else your login)")
        p.add_argument("--log-stage", action="store_true", help="append --config.stage=N on attempt N")
        p.add_argument("--on-resume", metavar="ARGS", help="arguments added on resumed attempts only; {attempt}, "
                       "{zone}, {region} and {job} are filled in (--on-resume '--config.load_from=gs://ckpt-{region}/run{job}')")
        p.add_argument("--json", action="store_true", help="print {id, archive} as JSON")
        p.add_argument("--progress", metavar="REGEX", help="a regex (RE2 syntax: no backreferences or lookarounds) "
                       "whose group is the step number in the job's log, like 'step (\\d+)' (JOBTPU_PROGRESS step=N checkpoint=N lines always count); "
                       "`jobtpu report` uses it")
        p.add_argument("--priority", type=int, default=0, metavar="N",
                       help="order among your own queued jobs: higher first (default 0); users take turns")
        p.add_argument("--sheet-note", metavar="TEXT", help="the note on the machine's row in the team sheet while "
                       "the job runs (default: wandb_notes in the job's utils/remote_run_config.yml)")
        _add_batch_options(p)
        p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides (lr=0.01); after `--`, "
                       "passed as they are (no check for the old tool's tag=, rule=, dir=, ssn=, w= or empty values)")
        p.set_defaults(verbatim=[])
        p.after_dashes = "verbatim"  # type: ignore[attr-defined]
        if name == "run":
            p.add_argument("--follow", action="store_true", help="stream the log; exit with the job's exit code")

    p = add("manage", "one pass over the fleet: reap, recover, dispatch, pull logs")
    p.add_argument("--loop", type=_positive_seconds, metavar="SECONDS", help="repeat every SECONDS until interrupted")
    p.add_argument("--dry-run", action="store_true", help="print what the pass would do; change nothing")

    p = add("status", "the jobs, as a table")
    add_selection_args(p, "only these jobs, whoever submitted them (default: your jobs)", history=True)
    p.add_argument("--all", action="store_true", dest="show_all",
                   help=f"every job in the table (default: jobs on a machine, the next {jobs.QUEUED_SHOWN} "
                        f"queued and the {jobs.ENDED_SHOWN} that ended last)")
    p.add_argument("--json", action="store_true", help="every selected job as JSON (the stored records)")
    p.add_argument("--watch", nargs="?", type=_positive_seconds, const=5.0, metavar="SECONDS",
                   help="redraw every SECONDS (default 5) until interrupted")

    p = add("tail", "a job's log (worker 0, latest attempt, last 50 lines)")
    p.add_argument("id", type=int, help="the job")
    p.add_argument("-n", type=_count, default=50, dest="lines", help="how many last lines (default 50)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing as the log grows; exit with the attempt's exit code")
    p.add_argument("--worker", type=_count, default=0, help="this worker's log (default 0)")
    p.add_argument("--attempt", type=_count, help="this attempt's log (default: the latest)")

    p = add("fetch", "pull the job's remote folder (or PATH in it) into results/ID/ or --to DIR")
    p.add_argument("id", type=int, help="the job")
    p.add_argument("path", nargs="?", default="", help="a file or folder inside the job's folder (default: all)")
    p.add_argument("--to", metavar="DIR", help="fetch into DIR instead of results/ID/")

    p = add("kill", "stop jobs on every worker and mark them killed")
    add_selection_args(p, "the jobs to stop", dry_run=True)

    for name, text in (("resume", "queue ended jobs again, continuing from their checkpoints"),
                       ("rerun", "queue ended jobs again, from the start")):
        p = add(name, text)
        add_selection_args(p, "the ended jobs", dry_run=True)
        p.add_argument("--machine", help="run only on this machine from now on (a name or an alias)")

    p = add("clean", "move ended jobs from state.json into history.jsonl (default: your ended jobs)")
    p.add_argument("--remote", action="store_true", help="also delete their remote folders and unused archives")
    add_selection_args(p, "only these ended jobs", dry_run=True)

    for name, text in (("hold", "keep queued jobs from starting until `jobtpu release`"),
                       ("release", "let held jobs start again")):
        p = add(name, text)
        add_selection_args(p, "the queued jobs", dry_run=True)

    p = add("tag", "add (+TAG) and remove (-TAG) tags of jobs")
    p.add_argument("--force", action="store_true", help="also another user's jobs (recorded in each); before the ids")
    p.add_argument("words", nargs=argparse.REMAINDER, metavar="ID... +TAG -TAG",
                   help="the jobs, then the changes: +best adds the tag best, -draft removes draft")

    p = add("note", "set a job's note (or with --machine a machine's), shown by status and machines")
    p.add_argument("--machine", metavar="NAME", help="the machine whose note to set, instead of a job's")
    p.add_argument("--force", action="store_true", help="also another user's job (recorded in the job)")
    p.add_argument("words", nargs="+", metavar="[ID] TEXT",
                   help='the job\'s id (without --machine), then the note; "" clears it')

    p = add("machines", "the fleet: kind, accelerator, state, running jobs, free resources")
    p.add_argument("--json", action="store_true", help="the same as JSON")

    p = add("tpu", "TPU node operations through the TPU API")
    p.add_argument("op", choices=("describe", "status", "apply", "reapply", "delete", "setup", "restart"),
                   help="describe or status (read), apply (create), reapply (recreate) or delete the node; "
                        "setup: run the machine's setup commands again on every worker now; restart: stop "
                        "and start the node (single-host v4 and newer)")
    p.add_argument("name", help="the TPU machine, as machines.json names it")
    p.add_argument("--json", action="store_true", help="what describe shows, as JSON")
    p.add_argument("--force", action="store_true", help="setup: run even while a job runs there")

    p = add("doctor", "check a machine: reachable, disk, python, TPU device, stale lock file")
    p.add_argument("name", help="the machine, as machines.json names it")
    p.add_argument("--fix", action="store_true",
                   help="repair what is safe: create the remote root, stop unmanaged job processes, stale TPU locks")
    p.add_argument("--accelerator", action="store_true",
                   help="also check the TPU answers on every worker (JAX's devices, else the device files)")

    p = add("events", "what happened to jobs and machines (the home's events.jsonl), oldest first")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events until interrupted")
    p.add_argument("--job", type=int, metavar="ID", help="only this job's events")
    p.add_argument("--machine", metavar="M", help="only this machine's events")
    p.add_argument("--since", type=_since, metavar="T", help="only events since T: a duration ago (10m, 2h, 1d) "
                   "or an ISO time (2026-01-31T12:00)")
    p.add_argument("--json", action="store_true", help="one JSON object per event")

    p = add("report", "what preemptions and failures cost each job: time per attempt, each interruption "
            "split into detection, delete+create, setup and launch, work redone, goodput")
    add_selection_args(p, "these jobs, whoever submitted them (default: your jobs that ran)")
    p.add_argument("--html", metavar="FILE", help="write one self-contained HTML page with a timeline instead")

    p = add("watch", "a live full-screen view of jobs, machines and events; runs a manage pass every round")
    p.add_argument("--interval", type=_positive_seconds, default=5.0, metavar="SECONDS",
                   help="seconds between rounds (default 5)")
    p.add_argument("--no-manage", action="store_true",
                   help="only display (another manage loop or cron runs the passes); warns when they are late")
    p = add("init", "make a home: the folder and a machines.json with the local machine")
    p.add_argument("dir", nargs="?", metavar="DIR", help="the home to make (default: --home, $JOBTPU_HOME or ~/.jobtpu)")
    p.add_argument("--shared", metavar="GROUP", help="share it with this Unix group: setgid, group-writable, "
                   "never world-writable")

    p = add("user", "the team's user list (users.json): add, ls, rm")
    p.add_argument("op", choices=("add", "ls", "rm"), help="add NAME, ls, or rm NAME")
    p.add_argument("name", nargs="?", help="the user name (add, rm)")

    p = add("import", "take a team over from another tool: users, working directories, aliases, TPU machines")
    p.add_argument("source", choices=("tpu-manager",), help="the tool: tpu-manager (its data.json)")
    p.add_argument("data_json", metavar="DATA_JSON", help="the TPU manager's data.json")
    p.add_argument("--dry-run", action="store_true", help="print what it would import; change nothing")
    p.add_argument("--force", action="store_true", help="replace entries this home has with other values")
    p.add_argument("--project", help="the Google Cloud project of its TPUs (machines.json's gcp.project), "
                   "when machines.json does not name one")

    p = add("rules", "what each rule does when an attempt ends, and which machines default to it")
    p.add_argument("--json", action="store_true", help="the same as JSON")
    _add_personal_and_remote_commands(add)
    _add_sheet(add("sheet", "the team's TPU spreadsheet (machines.json's sheet): sync, show, find, claims, notes"))
    return parser


def _worker_choice(text: str) -> int | None:
    """--worker K, or `all` (None)."""
    return None if text == "all" else _count(text)


def _add_personal_and_remote_commands(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """config, dir, alias (a user's own settings), exec and ssh (a machine's workers), tldr."""
    as_user = "act on this user's settings (default: $JOBTPU_USER, else your login)"
    p = add("config", "your defaults: rule, req (submit), columns (status), time_zone (times shown)")
    p.add_argument("action", choices=("get", "set", "reset"), help="show, set or reset (to the default) a setting")
    p.add_argument("key", nargs="?", metavar="KEY", help="rule, req, columns or time_zone (get/reset: all when absent)")
    p.add_argument("values", nargs="*", metavar="VALUE", help="the value (req and columns take several)")
    p.add_argument("--user", help=as_user)

    p = add("dir", "your numbered working directories; `submit --dir N` snapshots number N")
    p.add_argument("action", choices=("set", "ls", "rm", "swap"),
                   help="set N [PATH] (default: here), ls, rm N, swap N M")
    p.add_argument("args", nargs="*", metavar="N|PATH", help="the number(s), and for set an optional folder")
    p.add_argument("--user", help=as_user)

    p = add("alias", "config aliases: built-in, the team's (machines.json) and your own")
    p.add_argument("action", choices=("add", "ls", "rm"), help="add NAME FULL, ls (with where each comes from), rm NAME")
    p.add_argument("args", nargs="*", metavar="NAME|FULL", help="the alias's name, and for add its full config key")
    p.add_argument("--user", help=as_user)

    p = add("exec", "run a command on a machine's workers at once; lines prefixed [worker]; exit: the worst")
    p.add_argument("name", metavar="MACHINE", help="the machine: its name, an alias, or a TPU's node name")
    p.add_argument("--worker", type=_worker_choice, default=None, metavar="K|all",
                   help="only worker K (default: all)")
    p.add_argument("words", nargs="*", metavar="CMD", help="the command, after `--` (run by the login shell)")
    p.after_dashes = "words"  # type: ignore[attr-defined]

    p = add("ssh", "log in to a machine's worker with its key, port and the home's known_hosts")
    p.add_argument("name", metavar="MACHINE", help="the machine: its name, an alias, or a TPU's node name")
    p.add_argument("--worker", type=_count, default=0, metavar="K", help="this worker (default 0)")
    p.add_argument("words", nargs="*", metavar="CMD", help="a command to run instead of a shell, after `--`")
    p.after_dashes = "words"  # type: ignore[attr-defined]

    add("tldr", "the ten commands a new team member needs, one example each")


def _dir_args(home: Home, a: argparse.Namespace) -> int:
    low, high = {"set": (1, 2), "ls": (0, 0), "rm": (1, 1), "swap": (2, 2)}[a.action]
    if not low <= len(a.args) <= high:
        counts = f"{low}" if low == high else f"{low} or {high}"
        raise JobtpuError(f"`dir {a.action}` takes {counts} argument(s), got {len(a.args)}",
                          hint="dir set N [PATH], dir ls, dir rm N, dir swap N M")
    if a.action == "set":
        return personal.dir_command(home, "set", a.args[:1], (a.args[1:] or [None])[0], a.user)
    return personal.dir_command(home, a.action, a.args, None, a.user)


def _alias_args(home: Home, a: argparse.Namespace) -> int:
    needs = {"add": 2, "ls": 0, "rm": 1}[a.action]
    if len(a.args) != needs:
        raise JobtpuError(f"`alias {a.action}` takes {needs} argument(s), got {len(a.args)}",
                          hint="alias add NAME FULL, alias ls, alias rm NAME")
    name, full = (list(a.args) + [None, None])[:2]
    return personal.alias(home, a.action, name, full, a.user)


def _add_sheet(parser: argparse.ArgumentParser) -> None:
    ops = parser.add_subparsers(dest="sheet_op", metavar="OP", parser_class=_Parser)
    ops.required = True

    def op(name: str, help_text: str) -> argparse.ArgumentParser:
        return ops.add_parser(name, help=help_text, description=help_text)

    op("sync", "write the machines' rows now (a pass does it on its own)")
    op("show", "print the sheet as jobtpu reads it")
    p = op("find", "the sheet's rows whose accelerator matches, like --req (v3, v2,v3, v3+, v3-32)")
    p.add_argument("types", nargs="*", metavar="TYPE", help="accelerator patterns, all of which must match")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("-p", "--preemptible", action="store_const", const=True, dest="preemptible",
                      help="only preemptible or spot machines")
    kind.add_argument("-n", "--on-demand", action="store_const", const=False, dest="preemptible",
                      help="only on-demand machines")
    p = op("release", "clear a claim made by hand in the sheet's user cell")
    p.add_argument("name", help="the machine's name in the sheet")
    p.add_argument("--user", help="only if this user holds it")
    p = op("note", "set a machine's note in the sheet")
    p.add_argument("name", help="the machine's name in the sheet")
    p.add_argument("text", help="the note (\"\" clears it)")
    p.add_argument("--append", action="store_true", help="add TEXT after the note instead of replacing it")
    p = op("register", "add a machine's row (passes write it again)")
    p.add_argument("name", help="a machine of machines.json, or any name (a TPU another home runs)")
    p = op("unregister", "remove a machine's row (passes leave it off until register)")
    p.add_argument("name", help="the machine's name in the sheet")


def _job_id(text: str) -> int:
    if "=" in text:  # `rerun 12 lr=0.1`: overrides are the job's own, as it was submitted
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id: a job keeps the overrides it was submitted "
                                         "with; submit it again to change them")
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (a positive number)")
    return int(text)



def _add_batch_options(p: argparse.ArgumentParser) -> None:
    """submit/run: sweeps, dependencies, retries, grace and an early signal."""
    p.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2",
                   help="submit one job per combination of every --sweep's values (one snapshot), repeatable")
    p.add_argument("--sweep-file", metavar="FILE",
                   help="submit one job per combination in FILE: a JSON object per line, or a CSV with a header")
    p.add_argument("--after", action="append", default=[], metavar="ID[,ID]",
                   help="start only after these jobs finished; fail (reason dependency) if one does not")
    p.add_argument("--after-any", action="append", default=[], metavar="ID[,ID]",
                   help="start only after these jobs ended, however they ended")
    p.add_argument("--retries", type=_count, default=0, metavar="N",
                   help="retry an attempt that exited non-zero up to N times (not oom, timeout or kill)")
    p.add_argument("--grace", metavar="DURATION",
                   help="wait this long between TERM and KILL when the job is stopped (default 5s)")
    p.add_argument("--signal", metavar="SIG@DURATION",
                   help="send SIG (USR1, USR2, TERM, INT, HUP, QUIT, ALRM) this long before --timeout ends")


def add_selection_args(p: argparse.ArgumentParser, ids_help: str, history: bool = False,
                       dry_run: bool = False) -> None:
    """The one set of selectors (commands/select.py) of status, report and the bulk commands, so the
    same options pick the same jobs everywhere; `history`: status's --history, `dry_run`: a bulk
    command's --dry-run and --force."""
    p.add_argument("ids", nargs="*", type=_job_id, metavar="ID", help=ids_help)
    p.add_argument("--tag", action="append", default=[], dest="tags", metavar="TAG",
                   help="jobs carrying this tag, repeatable (a job must carry every one given)")
    p.add_argument("--name", action="append", default=[], dest="names", metavar="GLOB",
                   help="jobs whose whole name matches GLOB (like 'sweep-*'), repeatable (any of them)")
    p.add_argument("--status", action="append", default=[], dest="statuses", type=_status_words,
                   metavar="S[,S]", help=f"jobs in one of these statuses ({', '.join(STATUS_NAMES)}), repeatable")
    p.add_argument("--sweep", action="append", default=[], dest="sweeps", type=_job_id, metavar="ID",
                   help="the jobs of sweep ID, whoever submitted them, repeatable (any of them)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--user", help="this user's jobs (default: yours, unless ids or a sweep are given)")
    who.add_argument("--all-users", action="store_true", help="every user's jobs")
    if history:
        p.add_argument("--history", action="store_true",
                       help="the jobs `clean` moved to history.jsonl, newest first, instead of state.json's")
    if dry_run:
        p.add_argument("--dry-run", action="store_true", help="print the jobs it would act on; change nothing")
        p.add_argument("--force", action="store_true", help="also another user's jobs (recorded in each job)")


def _selection(args: argparse.Namespace) -> select.Selection:
    return select.Selection(ids=tuple(args.ids), tags=tuple(args.tags), names=tuple(args.names),
                            statuses=tuple(w for words in args.statuses for w in words), sweeps=tuple(args.sweeps),
                            user=args.user, all_users=args.all_users, history=getattr(args, "history", False))


def _submit_options(args: argparse.Namespace) -> jobs.SubmitOptions:
    return jobs.SubmitOptions(**{name: getattr(args, name) for name in jobs.SubmitOptions._fields})


# Each command's function, called with the home and the parsed arguments (thin adapters to typed calls).
COMMANDS: dict[str, Callable[[Home, argparse.Namespace], int]] = {
    "submit": lambda home, a: jobs.submit_command(home, _submit_options(a), a.json),
    "run": lambda home, a: jobs.run_command(home, _submit_options(a), a.json, a.follow),
    "status": lambda home, a: jobs.status(home, _selection(a), a.json, a.watch, a.show_all),
    "tag": lambda home, a: annotate.tag(home, a.words, a.force),
    "note": lambda home, a: annotate.note(home, a.machine, a.words, a.force),
    "tail": lambda home, a: jobs.tail(home, a.id, a.lines, a.follow, a.worker, a.attempt),
    "fetch": lambda home, a: jobs.fetch(home, a.id, a.path, a.to),
    "kill": lambda home, a: jobs.kill(home, _selection(a), a.force, a.dry_run),
    "resume": lambda home, a: jobs.requeue(home, _selection(a), a.machine, True, a.force, a.dry_run),
    "rerun": lambda home, a: jobs.requeue(home, _selection(a), a.machine, False, a.force, a.dry_run),
    "clean": lambda home, a: jobs.clean(home, _selection(a), a.remote, a.force, a.dry_run),
    "hold": lambda home, a: batch.hold(home, _selection(a), False, a.force, a.dry_run),
    "release": lambda home, a: batch.hold(home, _selection(a), True, a.force, a.dry_run),
    "manage": lambda home, a: fleet.manage(home, a.loop, a.dry_run),
    "machines": lambda home, a: fleet.machines(home, a.json),
    "doctor": lambda home, a: fleet.doctor(home, a.name, a.fix, a.accelerator),
    "tpu": lambda home, a: tpu.tpu(home, a.op, a.name, a.json, a.force),
    "rules": lambda home, a: rules.show_rules(home, a.json),
    "events": lambda home, a: watch.events(home, a.follow, a.job, a.machine, a.since, a.json),
    "report": lambda home, a: watch.report(home, _selection(a), a.html),
    "watch": lambda home, a: watch.watch(home, a.interval, not a.no_manage),
    "init": lambda home, a: team.init(home if a.dir is None else Home(Path(a.dir).expanduser().resolve()), a.shared),
    "user": lambda home, a: team.user(home, a.op, a.name),
    "import": lambda home, a: importing.tpu_manager(home, a.data_json, a.dry_run, a.force, a.project),
    "config": lambda home, a: personal.config(home, a.action, a.key, a.values, a.user),
    "dir": _dir_args,
    "alias": _alias_args,
    "exec": lambda home, a: remote.exec_command(home, a.name, a.worker, a.words),
    "ssh": lambda home, a: remote.ssh(home, a.name, a.worker, a.words),
    "tldr": lambda home, a: tldr.tldr(),
    "sheet": lambda home, a: _sheet_command(home, a),
}


def _sheet_command(home: Home, a: argparse.Namespace) -> int:
    calls: dict[str, Callable[[], int]] = {
        "sync": lambda: sheet.sync(home), "show": lambda: sheet.show(home),
        "find": lambda: sheet.find(home, a.types, a.preemptible),
        "release": lambda: sheet.release(home, a.name, a.user),
        "note": lambda: sheet.note(home, a.name, a.text, a.append),
        "register": lambda: sheet.register(home, a.name), "unregister": lambda: sheet.unregister(home, a.name),
    }
    return calls[a.sheet_op]()


def run_command(args: argparse.Namespace) -> int:
    home = find_home(args.home)
    if home.root.exists() and not home.root.is_dir():
        raise JobtpuError(f"the home {home.root} is not a folder",
                          hint="pass --home DIR (or set $JOBTPU_HOME) naming a folder, new or existing")
    return int(COMMANDS[args.command](home, args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        timing.current()  # a bad $JOBTPU_TIMING is said before anything is done, not midway through a pass
        return run_command(args)
    except JobtpuError as e:
        sys.stdout.flush()
        sys.stderr.write(error_text(e) + "\n")
        return e.exit_code
    except Terminated:
        sys.stderr.write("jobtpu: terminated\n")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        sys.stderr.write("jobtpu: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `jobtpu status | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return EXIT_ERROR
    except OSError as e:  # a full disk, a read-only or foreign home, a --to folder we cannot write
        where = f": {e.filename}" if e.filename else ""
        sys.stderr.write(printable(f"jobtpu: error: {e.strerror or e}{where}") + "\n")
        if e.filename is None or _in_home(args, str(e.filename)):
            sys.stderr.write("hint: check that the home (--home, $JOBTPU_HOME) is writable and has free space\n")
        return EXIT_ERROR


def _in_home(args: argparse.Namespace, path: str) -> bool:
    home = find_home(args.home).root
    return Path(path).resolve().is_relative_to(home) or home.is_relative_to(Path(path).resolve())


if __name__ == "__main__":
    raise SystemExit(main())
