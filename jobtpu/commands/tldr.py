"""`jobtpu tldr`: the ten commands a new team member needs, one example each (a test parses each)."""

from __future__ import annotations

TLDR: tuple[tuple[str, str], ...] = (
    ("remember this folder as your working directory 1", "jobtpu dir set 1"),
    ("queue a job: snapshot the folder, pass config overrides", 'jobtpu submit --cmd "python train.py" lr=0.01 bs=256'),
    ("submit and watch it to the end (its exit code is yours)", 'jobtpu run --follow --cmd "python train.py"'),
    ("your jobs (every user's: --all-users)", "jobtpu status"),
    ("a job's log, as it grows", "jobtpu tail -f 12"),
    ("stop a job", "jobtpu kill 12"),
    ("queue an ended job again, from its checkpoints", "jobtpu resume 12"),
    ("the machines: state, running jobs, free resources", "jobtpu machines"),
    ("keep the fleet going: dispatch, recover, pull logs", "jobtpu manage --loop 60"),
    ("a command on every worker of a machine", "jobtpu exec v3-32 -- python -c 'import jax; print(jax.devices())'"),
)


def tldr() -> int:
    width = max(len(example) for _, example in TLDR)
    for what, example in TLDR:
        print(f"{example:<{width}}  # {what}")
    print("\nMore: `jobtpu COMMAND --help`, `jobtpu alias ls`, `jobtpu config get`, `jobtpu ssh MACHINE`.")
    return 0
