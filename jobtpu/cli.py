"""The command line: parse, call one command function through COMMANDS, turn errors into one line.
The only place that prints an error or chooses the exit status."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from .commands import fleet, jobs, rules, tpu, watch
from .commands.common import error_text
from .errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, JobtpuError, Terminated
from .home import Home, find_home
from .text import printable


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # bad usage: exit 2, one line and a pointer to --help
        sys.stderr.write(f"jobtpu: error: {message}\nhint: see `{self.prog} --help`\n")
        raise SystemExit(EXIT_USAGE)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> object:
        # Python 3.11's argparse strips a "--" even from an option's attached value, so `--name=--`
        # would arrive as [] (and `--tag=--` as [[]]). An attached "--" is the user's value, verbatim.
        if action.option_strings and action.nargs in (None, argparse.OPTIONAL) and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)


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
    from .events import since_arg  # here: `--help` loads no more than it needs

    return since_arg(text)


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
        p.add_argument("--dir", default=".", help="the folder to snapshot (default: here)")
        p.add_argument("--req", action="append", default=[], help="resource or accelerator request, repeatable")
        p.add_argument("--machine", help="run only on this machine")
        p.add_argument("--name", default="", help="a free-form name shown by status")
        p.add_argument("--tag", action="append", default=[], help="a label shown by status, repeatable")
        p.add_argument("--env", action="append", default=[], metavar="K=V",
                       help="set K for the job, repeatable; $NAME and ${NAME} in V take the worker's value at "
                            "job start (PATH=/opt/conda/bin:$PATH), nothing else is interpreted; \\$ is a "
                            "literal $; secret-looking values are taken as they are")
        p.add_argument("--rule", choices=RULE_NAMES, help="what to do when an attempt fails or is preempted "
                       "(`jobtpu rules` shows each; default: the machine's)")
        p.add_argument("--max-recoveries", type=_count, default=20, metavar="N",
                       help="automatic recoveries the rule may make (default 20)")
        p.add_argument("--timeout", help="wall-time limit per attempt (90s, 30m, 12h, 2d)")
        p.add_argument("--stall", help="stop when the log has not grown for this long")
        p.add_argument("--include", action="append", default=[], metavar="GLOB",
                       help="snapshot files matching GLOB even if ignored, repeatable")
        p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                       help="leave files matching GLOB out of the snapshot, repeatable")
        p.add_argument("--user", help="submit as this user (default: $JOBTPU_USER, else your login)")
        p.add_argument("--log-stage", action="store_true", help="append --config.stage=N on attempt N")
        p.add_argument("--json", action="store_true", help="print {id, archive} as JSON")
        p.add_argument("--progress", metavar="REGEX", help="a regex whose group is the step number in the job's "
                       "log, like 'step (\\d+)' (JOBTPU_PROGRESS step=N checkpoint=N lines always count); "
                       "`jobtpu report` uses it")
        p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides (lr=0.01)")
        if name == "run":
            p.add_argument("--follow", action="store_true", help="stream the log; exit with the job's exit code")

    p = add("manage", "one pass over the fleet: reap, recover, dispatch, pull logs")
    p.add_argument("--loop", type=_positive_seconds, metavar="SECONDS", help="repeat every SECONDS until interrupted")
    p.add_argument("--dry-run", action="store_true", help="print what the pass would do; change nothing")

    p = add("status", "the jobs, as a table")
    p.add_argument("ids", nargs="*", type=int, metavar="ID", help="only these jobs (default: your jobs)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--user", help="this user's jobs instead of yours")
    who.add_argument("--all-users", action="store_true", help="every user's jobs")
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
    p.add_argument("ids", nargs="+", type=int, metavar="ID", help="the jobs to stop")

    for name, text in (("resume", "queue an ended job again, continuing from its checkpoints"),
                       ("rerun", "queue an ended job again, from the start")):
        p = add(name, text)
        p.add_argument("id", type=int, help="the ended job")
        p.add_argument("--machine", help="run only on this machine from now on")

    p = add("clean", "move ended jobs from state.json into history.jsonl")
    p.add_argument("--remote", action="store_true", help="also delete their remote folders and unused archives")
    p.add_argument("--all-users", action="store_true", help="every user's ended jobs")
    p.add_argument("--user", help="this user's ended jobs instead of yours")

    p = add("machines", "the fleet: kind, accelerator, state, running jobs, free resources")
    p.add_argument("--json", action="store_true", help="the same as JSON")

    p = add("tpu", "TPU node operations through the TPU API")
    p.add_argument("op", choices=("describe", "status", "apply", "reapply", "delete"),
                   help="describe or status (read), apply (create), reapply (recreate) or delete the node")
    p.add_argument("name", help="the TPU machine, as machines.json names it")
    p.add_argument("--json", action="store_true", help="what describe shows, as JSON")

    p = add("doctor", "check a machine: reachable, disk, python, TPU device, stale lock file")
    p.add_argument("name", help="the machine, as machines.json names it")
    p.add_argument("--fix", action="store_true",
                   help="repair what is safe: create the remote root, stop unmanaged job processes, stale TPU locks")

    p = add("events", "what happened to jobs and machines (the home's events.jsonl), oldest first")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new events until interrupted")
    p.add_argument("--job", type=int, metavar="ID", help="only this job's events")
    p.add_argument("--machine", metavar="M", help="only this machine's events")
    p.add_argument("--since", type=_since, metavar="T", help="only events since T: a duration ago (10m, 2h, 1d) "
                   "or an ISO time (2026-01-31T12:00)")
    p.add_argument("--json", action="store_true", help="one JSON object per event")

    p = add("report", "what preemptions and failures cost each job: time per attempt, each interruption "
            "split into detection, delete+create, setup and launch, work redone, goodput")
    p.add_argument("ids", nargs="*", type=int, metavar="ID", help="these jobs (default: your jobs that ran)")
    p.add_argument("--tag", help="the jobs with this tag")
    p.add_argument("--html", metavar="FILE", help="write one self-contained HTML page with a timeline instead")

    p = add("watch", "a live full-screen view of jobs, machines and events; runs a manage pass every round")
    p.add_argument("--interval", type=_positive_seconds, default=5.0, metavar="SECONDS",
                   help="seconds between rounds (default 5)")
    p.add_argument("--no-manage", action="store_true",
                   help="only display (another manage loop or cron runs the passes); warns when they are late")

    p = add("rules", "what each rule does when an attempt ends, and which machines default to it")
    p.add_argument("--json", action="store_true", help="the same as JSON")
    return parser


def _submit_options(args: argparse.Namespace) -> jobs.SubmitOptions:
    return jobs.SubmitOptions(**{name: getattr(args, name) for name in jobs.SubmitOptions._fields})


# Each command's function, called with the home and the parsed arguments (thin adapters to typed calls).
COMMANDS: dict[str, Callable[[Home, argparse.Namespace], int]] = {
    "submit": lambda home, a: jobs.submit_command(home, _submit_options(a), a.json),
    "run": lambda home, a: jobs.run_command(home, _submit_options(a), a.json, a.follow),
    "status": lambda home, a: jobs.status(home, a.ids, a.user, a.all_users, a.json, a.watch, a.show_all),
    "tail": lambda home, a: jobs.tail(home, a.id, a.lines, a.follow, a.worker, a.attempt),
    "fetch": lambda home, a: jobs.fetch(home, a.id, a.path, a.to),
    "kill": lambda home, a: jobs.kill(home, a.ids),
    "resume": lambda home, a: jobs.requeue(home, a.id, a.machine, resume=True),
    "rerun": lambda home, a: jobs.requeue(home, a.id, a.machine, resume=False),
    "clean": lambda home, a: jobs.clean(home, a.user, a.all_users, a.remote),
    "manage": lambda home, a: fleet.manage(home, a.loop, a.dry_run),
    "machines": lambda home, a: fleet.machines(home, a.json),
    "doctor": lambda home, a: fleet.doctor(home, a.name, a.fix),
    "tpu": lambda home, a: tpu.tpu(home, a.op, a.name, a.json),
    "rules": lambda home, a: rules.show_rules(home, a.json),
    "events": lambda home, a: watch.events(home, a.follow, a.job, a.machine, a.since, a.json),
    "report": lambda home, a: watch.report(home, a.ids, a.tag, a.html),
    "watch": lambda home, a: watch.watch(home, a.interval, not a.no_manage),
}


def run_command(args: argparse.Namespace) -> int:
    home = find_home(args.home)
    if home.root.exists() and not home.root.is_dir():
        raise JobtpuError(f"the home {home.root} is not a folder",
                          hint="pass --home DIR (or set $JOBTPU_HOME) naming a folder, new or existing")
    return int(COMMANDS[args.command](home, args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
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
