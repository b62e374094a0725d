"""The shell jobtpu runs on machines (jobtpu/remote/sh/*.sh, and every script rendered from it) passes
`bash -n` and `shellcheck`, whatever values a user or a hand-edited file puts into it: every value
reaches bash as a quoted argument, never as code."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from jobtpu.decide.workers import LaunchSpec, WorkerRef
from jobtpu.remote import checkpoints, scripts
from jobtpu.slurm import scripts as slurm_scripts

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


SH = Path(scripts.__file__).parent / "sh"

HOSTILE = [
    "'", '"', "it's \"quoted\"", "$(touch pwned)", "`touch pwned`", "${HOME:-x}", "$HOME", "a\nb", "line\n",
    "; rm -rf x;", "a b  c", "-rf", "--", "-", "ünïcødé ☃ 日本", "", " ", "\\", "\\'", "*", "!", "#", "&&", "|",
    "<x>", "\t", "~", "%s\\0",
]

# The values in rendered text are quoted on purpose, so a `$` or a backtick inside single quotes is the
# point, not a mistake (SC2016); so is a backslash at the end of a quoted value (SC1003).
RENDERED_EXCLUDES = "SC2016,SC1003"

ALL_REFS = [WorkerRef(1, 0, 0), WorkerRef(2, 3, 1)]


def _launch(v: str) -> str:
    return scripts.launch_script([
        LaunchSpec(WorkerRef(1, 0, 0), root=v, archive=v, command=v, env={v: v, "NAME": v}, home_id=v),
        LaunchSpec(WorkerRef(2, 1, 3), root=v, archive=v, command=v, env={"SECRET": v}, tpu_cleanup=True,
                   fresh=True, home_id=v, literal=frozenset({"SECRET"})),
    ])


# Named by the function in jobtpu/remote/scripts.py that renders the script, then the variant.
RENDERERS: dict[str, Callable[[str], str]] = {
    "launch_script": _launch,
    "launch_script:slurm": lambda v: scripts.launch_script([LaunchSpec(
        WorkerRef(1, 0, 0), root=v, archive=v, command=v, env={v: v}, home_id=v, early_signal=(v, 3.0),
        time_limit=60.0, batch=(f"--partition={v}", v))]),
    "array_launch_script": lambda v: slurm_scripts.array_launch_script([LaunchSpec(
        WorkerRef(j, 0, 0), root=v, archive=v, command=v, env={v: v}, home_id=v, early_signal=(v, 3.0),
        time_limit=60.0, batch=(f"--partition={v}", v)) for j in (1, 2)], 4),
    "probe_script:slurm": lambda v: slurm_scripts.probe_script(v, [(r, 5) for r in ALL_REFS]),
    "kill_script:slurm": lambda v: slurm_scripts.kill_script(v, ALL_REFS, grace=0.3),
    "doctor_script:slurm": lambda v: slurm_scripts.doctor_script(),
    "peer_serve_script": lambda v: scripts.peer_serve_script(v, v, v, v, v, 7),
    "peer_stop_script": lambda v: scripts.peer_stop_script(v, v),
    "peer_fetch_script": lambda v: scripts.peer_fetch_script(v, v, LaunchSpec(WorkerRef(1, 0, 2), root=v, archive=v,
                                                                           command=v, env={v: v}, home_id=v)),
    "probe_script": lambda v: scripts.probe_script(v, [(r, 5) for r in ALL_REFS], home_id=v),
    "probe_script:markers": lambda v: scripts.probe_script(v, [(r, 5) for r in ALL_REFS], home_id=v,
                                                           markers=[(ALL_REFS[0], v)]),
    "checkpoint_copy_script": lambda v: checkpoints.checkpoint_copy_script(v, WorkerRef(1, 2, 0), v, v),
    "kill_script": lambda v: scripts.kill_script(v, ALL_REFS, grace=0.3, home_id=v),
    "remove_job_script": lambda v: scripts.remove_job_script(v, [1, 2], keep_archives=[v, "x.tar.gz"]),
    "remove_job_script:no-archives": lambda v: scripts.remove_job_script(v, [1]),
    "make_dirs_script": lambda v: scripts.make_dirs_script([v, "x"]),
    "doctor_script": lambda v: scripts.doctor_script(v, [v, "python3"], home_id=v),
    "tpu_doctor_script": lambda v: scripts.tpu_doctor_script(v, fix=False),
    "tpu_doctor_script:fix": lambda v: scripts.tpu_doctor_script(v, fix=True),
    "tpu_accelerator_script": lambda v: scripts.tpu_accelerator_script(v, v),
    "setup_script": lambda v: scripts.setup_script(v, v, 0, [v, "echo hi"]),
    "setup_script:retry": lambda v: scripts.setup_script(v, scripts.setup_tag(v), 3, [], retry=True),
    "setup_now_script": lambda v: scripts.setup_now_script(v, v, 1, [v, "echo hi"]),
    "serve_script": lambda v: scripts.serve_script(),
}


def _shellcheck() -> str:
    found = shutil.which("shellcheck")
    assert found, "shellcheck is not installed; install it (`apt-get install -y shellcheck`) to run these tests"
    return found


def _lint(files: list[Path], excludes: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([_shellcheck(), "-s", "bash", *(["-e", excludes] if excludes else []), *map(str, files)],
                          capture_output=True, text=True, timeout=300)


def _syntax(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=60)


def test_every_sh_file_passes_bash_n_and_shellcheck() -> None:
    files = sorted(SH.glob("*.sh"))
    assert {f.name for f in files} == set(scripts.SCRIPT_FILES), "a .sh file is missing or not listed"
    for f in files:
        checked = _syntax(f)
        assert checked.returncode == 0, f"{f.name}: {checked.stderr}"
    linted = _lint(files)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_every_script_jobtpu_renders_is_linted() -> None:
    rendered = {name for module in (scripts, checkpoints, slurm_scripts) for name in dir(module)
                if name.endswith("_script") and callable(getattr(module, name)) and getattr(module, name).__module__ == module.__name__}
    assert {kind.split(":")[0] for kind in RENDERERS} == rendered


def _shared_head(texts: list[str]) -> str:
    """The lines every text starts with: the library a renderer puts before its calls."""
    head = os.path.commonprefix(texts)
    return head[:head.rfind("\n") + 1]


@pytest.mark.starts_first
@pytest.mark.parametrize("kind", sorted(RENDERERS))
def test_every_rendered_script_passes_bash_n_and_shellcheck_with_hostile_values(kind: str, tmp_path: Path) -> None:
    """Each hostile value's whole script passes `bash -n`. shellcheck reads them as one file: the
    functions all of them share, once, then each value's own lines (the calls, where the values
    are). Linting the shared functions once per value cost most of a minute for nothing."""
    texts = []
    for i, value in enumerate(HOSTILE):
        text = RENDERERS[kind](value)
        path = tmp_path / f"{kind.replace(':', '-')}-{i}.sh"
        path.write_text(text, encoding="utf-8")
        checked = _syntax(path)
        assert checked.returncode == 0, f"{kind} with {value!r}: {checked.stderr}"
        texts.append(text)
    head = _shared_head(texts)
    together = tmp_path / f"{kind.replace(':', '-')}-all.sh"
    together.write_text(head + "".join(f"# {kind} with value {i}\n{text[len(head):]}" for i, text in enumerate(texts)),
                        encoding="utf-8")
    linted = _lint([together], RENDERED_EXCLUDES)
    assert linted.returncode == 0, linted.stdout[:5000]


def test_the_checks_see_a_broken_script(tmp_path: Path) -> None:
    """Neither check is blind: a function with a syntax error fails both, and so does a value spliced
    into code unquoted."""
    broken = tmp_path / "broken.sh"
    broken.write_text(scripts.script_file("clean.sh").replace("done\n}", "done\n", 1), encoding="utf-8")
    assert _syntax(broken).returncode != 0
    assert _lint([broken]).returncode != 0
    spliced = tmp_path / "spliced.sh"
    spliced.write_text(scripts.render(["clean.sh"], ["jobtpu_remove_jobs $root 1"]), encoding="utf-8")
    assert _syntax(spliced).returncode == 0
    linted = _lint([spliced], RENDERED_EXCLUDES)
    assert linted.returncode != 0 and "SC2086" in linted.stdout, linted.stdout


def test_hostile_names_reach_the_machine_as_they_are(tmp_path: Path) -> None:
    """Quoting holds when the script runs: folders with hostile names are made and removed by exactly
    those names, and nothing in them runs."""
    names = [v for v in HOSTILE if v not in ("", "-", "--", "~") and "/" not in v and v.strip()]
    made = subprocess.run(["bash", "-c", scripts.RUN_SCRIPT.split(" ", 2)[2][1:-1]],
                          input=scripts.make_dirs_script([f"d{i}/{v}" for i, v in enumerate(names)]),
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert made.returncode == 0, made.stderr
    for i, v in enumerate(names):
        assert [p.name for p in (tmp_path / f"d{i}").iterdir()] == [v]
    root = tmp_path / "root"
    for job in (1, 2):
        (root / "jobs" / str(job)).mkdir(parents=True)
    (root / "archives").mkdir()
    for archive in ("keep me's.tar.gz", "$(touch pwned).tar.gz", "gone.tar.gz"):
        (root / "archives" / archive).write_text("x")
    removed = subprocess.run(["bash"], input=scripts.remove_job_script(str(root), [1], ["keep me's.tar.gz"]),
                             capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert removed.returncode == 0, removed.stderr
    assert sorted(p.name for p in (root / "jobs").iterdir()) == ["2"]
    assert sorted(p.name for p in (root / "archives").iterdir()) == ["keep me's.tar.gz"]
    assert not list(tmp_path.rglob("pwned"))
