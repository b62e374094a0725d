"""`jobtpu tldr`: the ten commands a new team member needs, one example each (a test parses each)."""

from __future__ import annotations

from jobtpu.commands import args

# Each line fits 80 columns (the example, aligned, then `# what`): tests/test_status_rows.py checks it.
TLDR: tuple[tuple[str, str], ...] = (
    ("this folder is working dir 1", "jobtpu dir set 1"),
    ("queue a job, config overrides", 'jobtpu submit --cmd "python train.py" lr=0.01'),
    ("submit, then its log to the end", 'jobtpu run --follow --cmd "python train.py"'),
    ("your jobs (all: --all-users)", "jobtpu status"),
    ("a job's log, as it grows", "jobtpu tail -f 12"),
    ("stop a job", "jobtpu kill 12"),
    ("requeue it from its checkpoints", "jobtpu resume 12"),
    ("state, jobs and free resources", "jobtpu machines"),
    ("dispatch, recover, pull logs", "jobtpu manage --loop 60"),
    ("a command on every worker", "jobtpu exec v3-32 -- python3 -c 'import jax'"),
)


def tldr() -> int:
    width = max(len(example) for _, example in TLDR)
    for what, example in TLDR:
        print(f"{example:<{width}}  # {what}")
    print("\nMore: `jobtpu COMMAND --help`, `jobtpu alias ls`, `jobtpu config get`,\n`jobtpu ssh MACHINE`.")
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "tldr")
    p.set_defaults(func=lambda home, a: tldr())
