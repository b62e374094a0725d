"""The calls of jobtpu's shell functions with many arguments, pinned (docs/design.md §5, "Bash lives only
in remote/sh/*.sh"): each such script, rendered with fixed values, is compared with its recorded copy in
tests/golden/<renderer>.sh, the functions it carries and the named-argument call lines alike. A change of
a name, of a value's form or of the functions shows as a diff of the golden file, to be read in review.

After a deliberate change, rewrite the files and read their diff:

    JOBTPU_UPDATE_GOLDEN=1 python3 -m pytest -q -p no:cacheprovider tests/test_scripts_golden.py

jobtpu/snapshot/unpack.py and jobtpu/remote/peerfile.py, which the scripts carry as values, stand as
placeholders here: their own tests pin them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from jobtpu import timing
from jobtpu.decide.workers import LaunchSpec, WorkerRef
from jobtpu.remote import checkpoints, scripts
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.slurm import scripts as slurm_scripts

pytestmark = pytest.mark.fast

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("JOBTPU_UPDATE_GOLDEN") == "1"

# Values that show each argument's quoting: a root that begins with a dash, a command with quotes and
# a `$`, an environment value mode `x` and a literal one, an empty --signal and a set one.
FULL = LaunchSpec(WorkerRef(7, 2, 1), root="-runs/jobtpu", archive="0123abcd.tar.gz", command="python train.py --lr 'a b' $HOME",
                  env={"WANDB_NAME": "run-$JOBTPU_JOB_ID", "TOKEN": "s3cr=t"}, tpu_cleanup=True, fresh=True,
                  home_id="home-1", literal=frozenset({"TOKEN"}), early_signal=("USR1", 30.5), grace=5.0,
                  stop_requests=True, time_limit=3600.25)
PLAIN = LaunchSpec(WorkerRef(8, 0, 0), root="runs", archive="feed.tar.gz", command="bash run.sh", env={},
                   home_id="home-1", grace=5.0)

RENDERERS: dict[str, Callable[[], str]] = {
    "launch_script": lambda: scripts.launch_script([FULL, PLAIN]),
    "peer_fetch_script": lambda: scripts.peer_fetch_script("http://10.0.0.2:8470/x", "token-1", PLAIN),
    # A Slurm cluster's: the batch script written and handed to sbatch, its probe with one squeue.
    "slurm_launch_script": lambda: scripts.launch_script([msgspec.structs.replace(
        FULL, tpu_cleanup=False, stop_requests=False, batch=("--partition=gpu", "--gres=gpu:2", "--time=62"))]),
    # A sweep's members as one job array: each member's line of the table, then one sbatch --array=0-1%4;
    # member 8's TOKEN is a secret: its environment goes to an env file of its own, not to the table.
    "slurm_array_launch_script": lambda: slurm_scripts.array_launch_script([msgspec.structs.replace(
        FULL, ref=WorkerRef(j, 0, 0), tpu_cleanup=False, stop_requests=False, batch=("--partition=gpu",),
        secret=frozenset({"TOKEN"} if j == 8 else ())) for j in (7, 8)], 4),
    # A member not started yet is probed by the id the home has (its launch's report).
    "slurm_probe_script": lambda: slurm_scripts.probe_script("-runs", [(WorkerRef(7, 2, 0), 4096), (WorkerRef(8, 0, 0), 0)],
                                                             chunk=1024, ids={WorkerRef(8, 0, 0): "41_3"}),
    "probe_script": lambda: scripts.probe_script("-runs", [(WorkerRef(7, 2, 0), 0), (WorkerRef(7, 2, 1), 4096)],
                                                 chunk=1024, home_id="home-1", markers=[(WorkerRef(7, 2, 0), "ckpt/SAVED")]),
    "checkpoint_copy_script": lambda: checkpoints.checkpoint_copy_script("runs", WorkerRef(7, 3, 0), "gs://ckpt-us-east1/run7",
                                                                     "gs://ckpt-europe-west4/run7"),
    "setup_script": lambda: scripts.setup_script("runs", scripts.setup_tag("2026-01-01T00:00:00Z"), 3,
                                                 ["pip install -r requirements.txt", "echo 'done'"], retry=True),
}


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The product's default waits whatever this process's $JOBTPU_TIMING, and the carried sources as
    placeholders."""
    monkeypatch.setattr(timing, "current", lambda: timing.DEFAULTS)
    monkeypatch.setattr(scripts, "unpack_source", lambda: "<jobtpu/snapshot/unpack.py>")
    monkeypatch.setattr(scripts, "peerfile_source", lambda: "<jobtpu/remote/peerfile.py>")


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_a_rendered_script_is_its_golden_copy(renderer: str, fixed: None) -> None:
    text = RENDERERS[renderer]()
    path = GOLDEN / f"{renderer}.sh"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no {path}: record it with JOBTPU_UPDATE_GOLDEN=1 (see this file's docstring)"
    assert text == path.read_text(encoding="utf-8"), \
        f"{renderer} renders differently from {path}: if that is meant, rewrite it with JOBTPU_UPDATE_GOLDEN=1"


NAMED = "f() { local a b; jobtpu_named 'a b' \"$@\" || return 1; shift \"$jobtpu_named_n\"; printf '<%s>' \"$a\" \"$b\" \"$@\"; }"


@pytest.mark.parametrize(("words", "printed", "error"), [
    (["a=1", "b=2"], "<1><2>", ""),
    (["b=2", "a=1", "--", "x", "-y"], "<1><2><x><-y>", ""),  # any order; the rest after `--`
    (["a=x=y", "b=it's\n$(no)"], "<x=y><it's\n$(no)>", ""),  # a value is everything after the first `=`
    (["a=", "b=", "--"], "<><>", ""),
    (["a=1"], "", "f: no b given"),
    (["a=1", "b=2", "c=3"], "", "f: an argument it does not take, or twice: 'c'"),
    (["a=1", "a=2", "b=3"], "", "f: an argument it does not take, or twice: 'a'"),
    (["a=1", "b"], "", "f: an argument it does not take, or twice: 'b'"),
    (["a=1", "PATH=/tmp", "b=2"], "", "f: an argument it does not take, or twice: 'PATH'"),
])
def test_named_arguments_are_taken_each_once_or_refused(words: list[str], printed: str, error: str) -> None:
    script = scripts.render(["common.sh"], [NAMED, scripts.call("f", *words)])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode != 0, done.stdout) == (bool(error), printed), done.stderr
    assert done.stderr == (f"jobtpu: {error}\n" if error else "")
