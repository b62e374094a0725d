"""The options of `jobtpu submit` (and `run`, which takes them too): the parser's words, their help and
defaults, apart from what a submit does with them (commands/submit.py)."""

import argparse

from jobtpu.commands import args
from jobtpu.commands.submit_options import SubmitOptions

# The rule names as `--rule` accepts them; the same as rules.RULES (a test holds them equal): the
# parser does not import the model, so that `--help` and a cached `status` load as little as they can.
RULE_NAMES = ("pre", "pass", "reapply", "rerun", "resume")


def add_job_options(p: argparse.ArgumentParser) -> None:
    """The options `submit` and `run` share: what to run, where, and how to recover it."""
    p.add_argument("--cmd", help="the command to run, by bash, in the snapshot (default: `cmd` in the folder's "
                   "jobtpu.toml)")
    p.add_argument("--dir", help="the folder to snapshot, or N for your working directory N (`jobtpu dir`); "
                   "default: here, or your working directory 1 when here is not a project (docs/reference/commands.md §2.2.1)")
    p.add_argument("--req", action="append",
                   help="resource or accelerator request, repeatable (default: your `config` req)")
    p.add_argument("--machine", help="run only on this machine (its name, an alias, or a TPU's node name)")
    p.add_argument("--name", help="a free-form name shown by status (at most 200 characters)")
    p.add_argument("--tag", action="append", help="a label shown by status, repeatable")
    p.add_argument("--env", action="append", metavar="K=V",
                   help="set K for the job, repeatable; $NAME and ${NAME} in V take the worker's value at "
                        "job start (PATH=/opt/conda/bin:$PATH), nothing else is interpreted; \\$ is a "
                        "literal $; secret-looking values are taken as they are")
    p.add_argument("--rule", choices=RULE_NAMES, help="what to do when an attempt fails or is preempted "
                   "(`jobtpu rules` shows each; default: your `config` rule, else the machine's)")
    p.add_argument("--max-recoveries", type=args.tries, metavar="N",
                   help="recoveries the rule may make from infrastructure failures: a lost worker, gRPC, a hang "
                        "(default %(default)s)")
    p.add_argument("--max-preemptions", type=args.tries, metavar="N",
                   help="preemptions the rule may recover from (default 0: no limit)")
    p.add_argument("--timeout", help="wall-time limit per attempt (90s, 30m, 12h, 2d)")
    p.add_argument("--stall", help="stop when the log has not grown for this long (default: 30m on a "
                   "preemptible TPU, none elsewhere; 0: never)")
    p.add_argument("--include", action="append", metavar="GLOB",
                   help="snapshot files matching GLOB even if ignored, repeatable")
    p.add_argument("--exclude", action="append", metavar="GLOB",
                   help="leave files matching GLOB out of the snapshot, repeatable")
    p.add_argument("--allow-secrets", action="store_true", help="snapshot even a login home folder, or "
                   "one whose files include .ssh, .gnupg, .aws, .config/gcloud or a private key (refused otherwise)")
    p.add_argument("--user", help="submit as this user (default: $JOBTPU_USER, else your login)")
    p.add_argument("--log-stage", action="store_true", help="append --config.stage=N on attempt N")
    p.add_argument("--on-resume", metavar="ARGS", help="arguments added on resumed attempts only; {attempt}, "
                   "{zone}, {region} and {job} are filled in (--on-resume '--config.load_from=gs://ckpt-{region}/run{job}')")
    p.add_argument("--saved-when", metavar="REGEX", help="an RE2 regex a line of the job's log (worker 0) matches "
                   "when it saved a checkpoint: a resume then resumes from the attempt that last saved, and one "
                   "that finds none reruns from scratch (default: none)")
    p.add_argument("--saved-marker", metavar="PATH", help="a file, relative to the job's folder, the job writes "
                   "anew on each save (worker 0), as --saved-when (default: none)")
    p.add_argument("--checkpoints", metavar="TEMPLATE", help="where checkpoints live, a gs:// place with {region} "
                   "(gs://ckpt-{region}/run7): a resume in another region first copies the newest there "
                   "(gcloud storage rsync, worker 0); needs --saved-when or --saved-marker (default: none)")
    p.add_argument("--json", action="store_true", help="print {id, archive} as JSON")
    p.add_argument("--dry-run", action="store_true", help="print the job's options as they would be submitted "
                   "(jobtpu.toml's and the command line's together); snapshot and queue nothing")
    p.add_argument("--progress", metavar="REGEX", help="a regex (RE2 syntax: no backreferences or lookarounds) "
                   "whose group is the step number in the job's log, like 'step (\\d+)' (JOBTPU_PROGRESS step=N checkpoint=N lines always count); "
                   "`jobtpu report` uses it")
    p.add_argument("--priority", type=args.priority, metavar="N",
                   help="order among your own queued jobs: higher first (default 0); users take turns")
    p.add_argument("--class", dest="priority_class", metavar="NAME", help="its priority class across users "
                   "(machines.json's priority_classes; default: the default class): a higher class goes first "
                   "and may evict lower ones")
    p.add_argument("--hold", action="store_true", help="queue it held: it starts only after `jobtpu release ID` "
                   "(as sbatch --hold)")
    p.add_argument("--sheet-note", metavar="TEXT", help="the note on the machine's row in the team sheet while "
                   "the job runs (default: wandb_notes in the job's utils/remote_run_config.yml)")
    _add_batch_options(p)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides (lr=0.01); after `--`, "
                   "passed as they are (no check for the old tool's tag=, rule=, dir=, ssn=, w= or empty values); "
                   "before it, a word without = names the machine or the user, as the old tool's `run v3-32-p1 xibo`")
    # Every default comes from SubmitOptions, the one place it is written; a positional's would be
    # handed out as the very list, so `overrides` keeps argparse's fresh [].
    p.set_defaults(**{k: v for k, v in SubmitOptions._field_defaults.items() if k != "overrides"})
    p.after_dashes = "verbatim"  # type: ignore[attr-defined]


def _add_batch_options(p: argparse.ArgumentParser) -> None:
    """submit/run: sweeps, dependencies, retries, grace and an early signal."""
    p.add_argument("--sweep", action="append", metavar="KEY=V1,V2",
                   help="submit one job per combination of every --sweep's values (one snapshot), repeatable; "
                        "\\, is a comma inside a value")
    p.add_argument("--sweep-file", metavar="FILE",
                   help="submit one job per combination in FILE: a JSON object per line, or a CSV with a header")
    p.add_argument("--max-running", type=args.tries, metavar="N",
                   help="with a sweep: at most N of its jobs launching or running at once, as sbatch --array=…%%N "
                        "(default 0: no cap; `jobtpu update` changes it)")
    p.add_argument("--after", action="append", metavar="ID[,ID]",
                   help="start only after these jobs finished; fail (reason dependency) if one does not")
    p.add_argument("--after-any", action="append", metavar="ID[,ID]",
                   help="start only after these jobs ended, however they ended")
    p.add_argument("--retries", type=args.tries, metavar="N",
                   help="retry an attempt that exited non-zero up to N times (not oom, timeout or kill)")
    p.add_argument("--retry-on-exit", metavar="CODES",
                   help="with --retries: retry only these exit codes, like 42,127-255 (default: any non-zero)")
    p.add_argument("--grace", metavar="DURATION",
                   help="wait this long between TERM and KILL when the job is stopped (default 5s)")
    p.add_argument("--slices", type=args.tries, metavar="N",
                   help="run the job on N machines of one kind at once, started and recovered together "
                        "(a multislice gang; default 1)")
    p.add_argument("--signal", metavar="SIG@DURATION",
                   help="send SIG (USR1, USR2, TERM, INT, HUP, QUIT, ALRM) this long before --timeout ends")
