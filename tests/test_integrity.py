"""Records that cannot lose, leak or reuse: a failed submit leaves no secret behind, ids are never
given out twice whatever happens to state.json, every file jobtpu reads is validated with one line
naming the field, and a shared home cannot redirect jobtpu's writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import jobtpu, make_home, manage_until, status, submit


def one_line_error(done: object, needle: str) -> str:
    """The command failed with exit 1 and one error line (plus an optional hint) holding `needle`."""
    assert done.returncode == 1, (done.stdout, done.stderr)  # type: ignore[attr-defined]
    lines = done.stderr.splitlines()  # type: ignore[attr-defined]
    assert "Traceback" not in done.stderr and 1 <= len(lines) <= 2, done.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith("jobtpu: error: ") and needle in lines[0], lines
    assert len(lines) == 1 or lines[1].startswith("hint: "), lines
    return done.stderr  # type: ignore[attr-defined]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    return folder


# ---- secrets and ids ------------------------------------------------------------------------------

def test_a_submit_that_fails_while_saving_leaves_no_secret_for_the_next_job(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    (home / "cache").write_text("not a folder")  # the save fails after the secret was filed
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--env", "WANDB_API_KEY=ann-secret",
                  check=False, env={"JOBTPU_USER": "ann"})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert not (home / "state.json").exists()
    assert "ann-secret" not in (home / "secrets.json").read_text() if (home / "secrets.json").exists() else True
    (home / "cache").unlink()
    job = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "env > env.txt",
                     env={"JOBTPU_USER": "bob"}).stdout)
    assert job == 2  # the failed submit spent id 1: nothing filed under it is ever adopted
    manage_until(home, [job], {"finished"})
    env = (home / "run" / "jobs" / str(job) / "env.txt").read_text()
    assert "ann-secret" not in env and "WANDB_API_KEY" not in env


def test_clean_drops_secrets_no_job_holds(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    kept = submit(home, src, "true", "--env", "HF_TOKEN=kept")
    done = submit(home, src, "true", "--env", "HF_TOKEN=done")
    secrets = json.loads((home / "secrets.json").read_text())
    secrets["7"] = {"HF_TOKEN": "left by a submit that failed"}
    (home / "secrets.json").write_text(json.dumps(secrets))
    jobtpu(home, "kill", str(done))
    jobtpu(home, "clean")
    assert set(json.loads((home / "secrets.json").read_text())) == {str(kept)}


def test_ids_are_never_reused_when_state_json_is_deleted_before_any_run(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    first = submit(home, src, "true")
    (home / "state.json").unlink()  # one save so far: no .bak, no logs — a fresh queue, but not fresh ids
    assert submit(home, src, "true") == first + 1


@pytest.mark.parametrize("how", ["empty", "deleted"])
def test_a_lost_state_json_in_a_home_with_history_is_refused(tmp_path: Path, src: Path, how: str) -> None:
    home = make_home(tmp_path)
    first = submit(home, src, "echo one > out.txt")
    second = submit(home, src, "sleep 30")
    manage_until(home, [first], {"finished"})
    assert status(home)[second]["status"] == "running"
    backup = (home / "state.json.bak").read_bytes()
    if how == "empty":
        (home / "state.json").write_bytes(b"")
    else:
        (home / "state.json").unlink()
    for args in (["submit", "--dir", str(src), "--cmd", "echo two > out.txt"], ["manage"], ["status"],
                 ["status", "--json"], ["status", "--all-users"], ["kill", str(second)], ["clean"], ["machines"],
                 ["tail", str(first)], ["resume", str(first)]):
        err = one_line_error(jobtpu(home, *args, check=False), f"state.json is {'empty' if how == 'empty' else 'missing'}")
        assert f"cp {home / 'state.json.bak'} {home / 'state.json'}" in err, err
    assert (home / "state.json.bak").read_bytes() == backup  # never overwritten with a degenerate copy
    assert (home / "state.json").exists() == (how == "empty")
    # Restored as the hint says: the running job is still known, and the next id is new.
    (home / "state.json").write_bytes(backup)
    assert status(home)[second]["status"] == "running"
    third = submit(home, src, "true")
    assert third > second
    jobtpu(home, "kill", str(second))


def test_an_empty_queue_written_on_purpose_is_accepted_and_ids_stay_new(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    first = submit(home, src, "true")
    manage_until(home, [first], {"finished"})
    (home / "state.json").write_text('{"jobs": []}')
    assert status(home) == {}
    assert submit(home, src, "true") == first + 1
