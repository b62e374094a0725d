"""A team's job defaults in its repository: jobtpu.toml (docs/reference/commands.md §2.2.9), read by
`submit` and `run` with the command line winning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobtpu.errors import ConfigError
from jobtpu.jobfile import merged, parse_job_file
from tests.helpers import jobtpu, make_home, write_tree

pytestmark = pytest.mark.fast

JOB_FILE = """
[job]
cmd = "bash run_remote.sh"
req = ["slot=1"]
rule = "rerun"
env = ["WANDB_PROJECT=mae", "STEPS=10"]
tags = ["mae"]
max_recoveries = 3
on_resume = "--config.resume=1"
overrides = ["--config.model=vit"]
"""


@pytest.mark.parametrize(("text", "error"), [
    ("[job]\ncmd = 3\n", "[job] cmd must be a string"),
    ("[job]\nreq = 'v3-8'\n", "[job] req must be a list of strings"),
    ("[job]\nmax_recoveries = true\n", "[job] max_recoveries must be a whole number"),
    ("[job]\nlog_stage = 'yes'\n", "[job] log_stage must be true or false"),
    ("[job]\ncommand = 'x'\n", "[job] has no key 'command' (it takes: checkpoints, cmd, env, exclude, grace, include, "
     "log_stage, machine, max_preemptions, max_recoveries, name, on_resume, overrides, priority, priority_class, progress, req, retries, "
     "retry_on_exit, rule, saved_marker, saved_when, sheet_note, signal, "
     "slices, stall, tag, timeout)"),
    ("[jobs]\ncmd = 'x'\n", "unknown table or key 'jobs': everything goes under [job]"),
    ("job = 3\n", "job must be a table, [job]"),
    ("[job\n", "is not TOML: "),
])
def test_a_wrong_job_file_is_one_line_naming_the_key(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as got:
        parse_job_file(text.encode(), Path("jobtpu.toml"))
    assert error in got.value.message and "\n" not in got.value.message


def test_the_command_line_wins_and_overrides_and_env_add_up() -> None:
    defaults = {"cmd": None, "rule": None, "req": [], "env": [], "overrides": []}
    given = {"cmd": None, "rule": "pass", "req": [], "env": ["STEPS=20"], "overrides": ["lr=0.01"]}
    got = merged(given, defaults, {"cmd": "x", "rule": "rerun", "req": ["v3-8"], "env": ["STEPS=10"],
                                   "overrides": ["--config.model=vit"]})
    assert got == {"cmd": "x", "rule": "pass", "req": ["v3-8"], "env": ["STEPS=10", "STEPS=20"],
                   "overrides": ["--config.model=vit", "lr=0.01"]}


def test_submit_and_run_take_the_job_file_of_the_folder_they_snapshot(tmp_path: Path) -> None:
    home = make_home(tmp_path, slots=2)
    src = write_tree(tmp_path / "mae", {"jobtpu.toml": JOB_FILE, "run_remote.sh": "echo steps=$STEPS\n"})
    shown = jobtpu(home, "run", "--dir", str(src), "--rule", "pass", "lr=0.01", "--dry-run").stdout.splitlines()
    assert shown == ["cmd: bash run_remote.sh", "dir: " + str(src), "req: slot=1", "tag: mae",
                     "env: WANDB_PROJECT=mae STEPS=10", "rule: pass", "max-recoveries: 3",
                     "on-resume: --config.resume=1", "overrides: --config.model=vit lr=0.01"], shown
    assert not (home / "state.json").exists(), "a dry run queues nothing"
    job = int(jobtpu(home, "submit", "--dir", str(src), "lr=0.01").stdout)
    record = json.loads(jobtpu(home, "status", "--json", str(job)).stdout)["jobs"][0]
    assert (record["cmd"], record["req"], record["tags"], record["rule"]) == ("bash run_remote.sh", ["slot=1"],
                                                                              ["mae"], "rerun")
    assert record["overrides"] == ["--config.model=vit", "--config.training.learning_rate=0.01"]
    assert record["env"] == {"WANDB_PROJECT": "mae", "STEPS": "10"} and record["max_recoveries"] == 3
    # Without --cmd nor a job file: one line saying where a command comes from.
    bare = write_tree(tmp_path / "bare", {"a.sh": "true\n"})
    done = jobtpu(home, "submit", "--dir", str(bare), check=False)
    assert done.returncode == 2 and done.stderr.splitlines()[0] == (
        "jobtpu: error: no command to run: give --cmd, or `cmd` in the [job] table of the folder's jobtpu.toml")
    (bare / "jobtpu.toml").write_text("[job]\ncmd = 'true'\nrules = 'pre'\n")
    done = jobtpu(home, "submit", "--dir", str(bare), check=False)
    assert done.returncode == 1 and "[job] has no key 'rules'" in done.stderr.splitlines()[0], done.stderr
