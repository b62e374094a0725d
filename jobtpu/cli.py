"""The command line: parse → call one function → render. The only place that prints or exits."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from . import commands
from .errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, JobtpuError, Terminated
from .home import find_home
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
        p.add_argument("--name", default="")
        p.add_argument("--tag", action="append", default=[])
        p.add_argument("--env", action="append", default=[], metavar="K=V",
                       help="set K for the job, repeatable; $NAME and ${NAME} in V take the worker's value at "
                            "job start (PATH=/opt/conda/bin:$PATH), nothing else is interpreted; \\$ is a "
                            "literal $; secret-looking values are taken as they are")
        p.add_argument("--rule", choices=("pre", "pass", "reapply", "rerun", "resume"))
        p.add_argument("--max-recoveries", type=_count, default=20)
        p.add_argument("--timeout", help="wall-time limit per attempt (90s, 30m, 12h, 2d)")
        p.add_argument("--stall", help="stop when the log has not grown for this long")
        p.add_argument("--include", action="append", default=[], metavar="GLOB")
        p.add_argument("--exclude", action="append", default=[], metavar="GLOB")
        p.add_argument("--user")
        p.add_argument("--log-stage", action="store_true", help="append --config.stage=N on attempt N")
        p.add_argument("--json", action="store_true")
        p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides (lr=0.01)")
        if name == "run":
            p.add_argument("--follow", action="store_true", help="stream the log; exit with the job's exit code")

    p = add("manage", "one pass over the fleet: reap, recover, dispatch, pull logs")
    p.add_argument("--loop", type=_positive_seconds, metavar="SECONDS", help="repeat every SECONDS until interrupted")
    p.add_argument("--dry-run", action="store_true", help="print what the pass would do; change nothing")

    p = add("status", "the jobs, as a table")
    p.add_argument("ids", nargs="*", type=int, metavar="ID")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--user")
    who.add_argument("--all-users", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--watch", nargs="?", type=_positive_seconds, const=5.0, metavar="SECONDS")

    p = add("tail", "a job's log (worker 0, latest attempt, last 50 lines)")
    p.add_argument("id", type=int)
    p.add_argument("-n", type=_count, default=50, dest="lines")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--worker", type=_count, default=0)
    p.add_argument("--attempt", type=_count)

    p = add("fetch", "pull the job's remote folder (or PATH in it) into results/ID/ or --to DIR")
    p.add_argument("id", type=int)
    p.add_argument("path", nargs="?", default="")
    p.add_argument("--to")

    p = add("kill", "stop jobs on every worker and mark them killed")
    p.add_argument("ids", nargs="+", type=int, metavar="ID")

    for name, text in (("resume", "queue an ended job again, continuing from its checkpoints"),
                       ("rerun", "queue an ended job again, from the start")):
        p = add(name, text)
        p.add_argument("id", type=int)
        p.add_argument("--machine")

    p = add("clean", "move ended jobs from state.json into history.jsonl")
    p.add_argument("--remote", action="store_true", help="also delete their remote folders and unused archives")
    p.add_argument("--all-users", action="store_true")
    p.add_argument("--user")

    p = add("machines", "the fleet: kind, accelerator, state, running jobs, free resources")
    p.add_argument("--json", action="store_true")

    p = add("tpu", "TPU node operations through the TPU API")
    p.add_argument("op", choices=("describe", "status", "apply", "reapply", "delete"))
    p.add_argument("name")
    p.add_argument("--json", action="store_true")

    p = add("doctor", "check a machine: reachable, disk, python, TPU device, stale lock file")
    p.add_argument("name")
    p.add_argument("--fix", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return commands.dispatch(args)
    except JobtpuError as e:
        sys.stdout.flush()
        sys.stderr.write(f"jobtpu: error: {printable(e.message)}\n")
        if e.hint:
            sys.stderr.write(f"hint: {printable(e.hint)}\n")
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
