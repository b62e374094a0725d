"""A team on one home, through the CLI: the user list, ownership of jobs (--force and its record),
`init`, fair dispatch across users and per-user limits."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import jobtpu, make_home, manage, manage_until, status, write_tree


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "src", {"train.sh": "echo trained\n"})


def as_user(user: str) -> dict[str, str]:
    return {"JOBTPU_USER": user}


def submit_as(home: Path, user: str, src: Path, cmd: str, *extra: str) -> int:
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", cmd, *extra, env=as_user(user))
    return int(done.stdout)


def refused(done: subprocess.CompletedProcess[str], needle: str) -> None:
    """Exit 1, one error line holding `needle` and at most a hint: never a traceback."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr and 1 <= len(lines) <= 2, done.stderr
    assert lines[0].startswith("jobtpu: error: ") and needle in lines[0], lines
    assert len(lines) == 1 or lines[1].startswith("hint: "), lines


# ---- users ----------------------------------------------------------------------------------------------

def test_user_list_add_ls_rm_and_unknown_names_are_refused_with_a_hint(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    assert jobtpu(home, "user", "ls").stdout == ""  # no list: any name goes
    assert submit_as(home, "anyone", src, "true") == 1
    jobtpu(home, "user", "add", "ann")
    jobtpu(home, "user", "add", "bob")
    again = jobtpu(home, "user", "add", "ann")
    assert "already" in again.stderr
    assert jobtpu(home, "user", "ls").stdout.split() == ["ann", "bob"]
    assert json.loads((home / "users.json").read_text()) == {"users": ["ann", "bob"]}  # hand-editable
    before = (home / "state.json").read_bytes()
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", check=False, env=as_user("bo"))
    refused(done, "user 'bo' is not one of this home's users")
    assert "jobtpu user add bo" in done.stderr
    assert (home / "state.json").read_bytes() == before
    refused(jobtpu(home, "status", "--user", "carl", check=False), "user 'carl' is not one of")
    refused(jobtpu(home, "user", "add", "Bad Name", check=False), "user name 'Bad Name' is not valid")
    refused(jobtpu(home, "user", "rm", "zed", check=False), "'zed' is not one of this home's users")
    refused(jobtpu(home, "user", "add", check=False), "needs a user name")
    jobtpu(home, "user", "rm", "bob")
    assert jobtpu(home, "user", "ls").stdout.split() == ["ann"]
    refused(jobtpu(home, "kill", "1", check=False, env=as_user("bob")), "user 'bob' is not one of")
    (home / "users.json").write_text('{"users": "ann"}')
    refused(jobtpu(home, "status", check=False, env=as_user("ann")), "users.json: must be an object")


# ---- ownership --------------------------------------------------------------------------------------------

def test_acts_on_another_users_job_are_refused_unless_forced_and_forced_acts_are_recorded(
        tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    bobs = submit_as(home, "bob", src, "sleep 60")
    anns = submit_as(home, "ann", src, "true")
    manage_until(home, [bobs], {"running"})
    before = (home / "state.json").read_bytes()
    refused(jobtpu(home, "kill", str(bobs), check=False, env=as_user("ann")),
            f"job {bobs} is bob's, not ann's: kill refused")
    # A bulk act is all or nothing: ann's own job is not killed either.
    refused(jobtpu(home, "kill", str(anns), str(bobs), check=False, env=as_user("ann")), "kill refused")
    assert (home / "state.json").read_bytes() == before
    jobtpu(home, "kill", "--force", str(bobs), env=as_user("ann"))
    job = status(home)[bobs]
    assert job["status"] == "killed"
    assert [(f["by"], f["act"]) for f in job["forced"]] == [("ann", "kill")] and job["forced"][0]["at"] > 0
    for act in ("resume", "rerun"):
        refused(jobtpu(home, act, str(bobs), check=False, env=as_user("ann")), f"{act} refused")
    assert status(home)[bobs]["status"] == "killed"
    jobtpu(home, "rerun", "--force", str(bobs), env=as_user("ann"))
    assert status(home)[bobs]["status"] == "queued"
    jobtpu(home, "kill", str(bobs), env=as_user("bob"))  # his own: no --force, nothing recorded
    assert [f["act"] for f in status(home)[bobs]["forced"]] == ["kill", "rerun"]
    manage_until(home, [anns], {"finished"})
    refused(jobtpu(home, "clean", "--all-users", check=False, env=as_user("ann")),
            "clean refused")
    refused(jobtpu(home, "clean", "--user", "bob", check=False, env=as_user("ann")), "clean refused")
    assert set(status(home)) == {bobs, anns}
    jobtpu(home, "clean", "--all-users", "--force", env=as_user("ann"))
    history = [json.loads(line) for line in (home / "history.jsonl").read_text().splitlines()]
    assert {h["id"]: [f["act"] for f in h.get("forced", [])] for h in history} == {
        anns: [], bobs: ["kill", "rerun", "clean"]}


# ---- init -------------------------------------------------------------------------------------------------

def test_init_makes_a_private_home_with_the_local_machine(tmp_path: Path, src: Path) -> None:
    home = tmp_path / "new" / "home"
    done = jobtpu(home, "init")
    assert done.stdout.strip() == str(home)
    assert json.loads((home / "machines.json").read_text()) == {"machines": {"local": {"kind": "local"}}}
    assert stat.S_IMODE(home.stat().st_mode) & 0o077 == 0
    job = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "bash train.sh").stdout)
    manage_until(home, [job], {"finished"})
    (home / "machines.json").write_text('{"machines": {"box": {"kind": "local"}}}')
    jobtpu(tmp_path, "init", str(home))  # an existing home: its machines.json is kept
    assert "box" in (home / "machines.json").read_text()
    (tmp_path / "file").write_text("x")
    refused(jobtpu(tmp_path, "init", str(tmp_path / "file"), check=False), "is not a folder")
    refused(jobtpu(tmp_path, "init", "--shared", "no-such-group-here", str(tmp_path / "h2"), check=False),
            "there is no Unix group 'no-such-group-here'")
    assert not (tmp_path / "h2").exists()


# ---- fair dispatch and limits --------------------------------------------------------------------------

def launched_in_order(home: Path) -> list[int]:
    """Job ids in the order their first attempt started (the order dispatch gave them a slot)."""
    jobs = [j for j in status(home).values() if j["attempts"]]
    return [j["id"] for j in sorted(jobs, key=lambda j: (j["attempts"][0]["started"], j["id"]))]


def test_one_users_twenty_queued_jobs_delay_anothers_one_by_at_most_one_launch(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 1}}})
    sweep = [submit_as(home, "ann", src, "true") for _ in range(20)]
    single = submit_as(home, "bob", src, "true")
    for _ in range(4):
        manage(home)
        if len(launched_in_order(home)) >= 2:
            break
    first_two = launched_in_order(home)[:2]
    assert len(first_two) == 2 and single in first_two, first_two
    assert first_two[0] == sweep[0]  # ann queued first: her first job had the first turn


def test_priority_orders_a_users_own_queue(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 1}}})
    plain = submit_as(home, "ann", src, "true")
    urgent = submit_as(home, "ann", src, "true", "--priority", "3")
    jobs = manage(home)
    assert jobs[urgent]["status"] != "queued" and jobs[plain]["status"] == "queued"
    assert jobs[urgent]["priority"] == 3
    bad = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--priority", "high", check=False)
    assert bad.returncode == 2 and "--priority: 'high' is not a whole number" in bad.stderr and "Traceback" not in bad.stderr


def test_a_job_held_by_a_per_user_limit_says_so_and_starts_when_the_user_is_under_it(
        tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 4}}})
    doc: dict[str, Any] = json.loads((home / "machines.json").read_text())
    doc["limits"] = {"per_user": {"jobs": 1}, "users": {"lead": {"jobs": 2}}}
    (home / "machines.json").write_text(json.dumps(doc))
    first = submit_as(home, "ann", src, "sleep 60")
    second = submit_as(home, "ann", src, "true")
    leads = [submit_as(home, "lead", src, "sleep 60") for _ in range(2)]
    jobs = manage(home)
    assert jobs[first]["status"] in ("launching", "running")
    assert jobs[second]["status"] == "queued"
    assert jobs[second]["waiting"] == "held by the per-user limit (1 running job)"
    assert all(jobs[j]["status"] in ("launching", "running") for j in leads)  # lead may hold 2
    jobtpu(home, "kill", str(first), env=as_user("ann"))
    manage_until(home, [second], {"finished"})
    jobtpu(home, "kill", *map(str, leads), env=as_user("lead"))
    doc["limits"] = {"per_user": {"tpu_machines": -1}}
    (home / "machines.json").write_text(json.dumps(doc))
    refused(jobtpu(home, "machines", check=False),
            "'limits.per_user.tpu_machines' must be a whole number ≥ 0, or null (no limit) (got -1)")


def test_files_of_an_initialised_home_are_not_world_readable(tmp_path: Path) -> None:
    home = tmp_path / "h"
    jobtpu(home, "init")
    for path in [home, *home.rglob("*")]:
        assert not path.stat().st_mode & 0o007, path
    assert os.stat(home).st_uid == os.geteuid()


def test_a_per_user_machine_limit_keeps_a_user_to_one_machine_while_others_use_the_rest(
        tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path, {"a": {"kind": "local", "root": "ra"}, "b": {"kind": "local", "root": "rb"}})
    doc: dict[str, Any] = json.loads((home / "machines.json").read_text())
    doc["limits"] = {"per_user": {"machines": 1}}
    (home / "machines.json").write_text(json.dumps(doc))
    first, second = (submit_as(home, "ann", src, "sleep 60") for _ in range(2))
    bobs = submit_as(home, "bob", src, "sleep 60")
    jobs = manage(home)
    assert jobs[first]["machine"] == "a" and jobs[bobs]["machine"] == "b"
    assert jobs[second]["status"] == "queued"
    assert jobs[second]["waiting"] == "held by the per-user limit (1 machine)"
    jobtpu(home, "kill", str(first), str(second), env=as_user("ann"))
    jobtpu(home, "kill", str(bobs), env=as_user("bob"))


def test_tags_and_notes_of_another_users_job_need_force_and_are_recorded(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    bobs = submit_as(home, "bob", src, "true")
    anns = submit_as(home, "ann", src, "true")
    before = (home / "state.json").read_bytes()
    refused(jobtpu(home, "tag", str(anns), str(bobs), "+best", check=False, env=as_user("ann")),
            f"job {bobs} is bob's, not ann's: tag refused")
    refused(jobtpu(home, "note", str(bobs), "lr too high", check=False, env=as_user("ann")), "note refused")
    assert (home / "state.json").read_bytes() == before  # not even ann's own job got the tag
    jobtpu(home, "tag", "--force", str(anns), str(bobs), "+best", env=as_user("ann"))
    jobtpu(home, "note", "--force", str(bobs), "lr too high", env=as_user("ann"))
    jobs = status(home)
    assert jobs[bobs]["tags"] == jobs[anns]["tags"] == ["best"] and jobs[bobs]["note"] == "lr too high"
    assert [(f["by"], f["act"]) for f in jobs[bobs]["forced"]] == [("ann", "tag"), ("ann", "note")]
    assert jobs[anns].get("forced", []) == []
    jobtpu(home, "note", str(bobs), "", env=as_user("bob"))  # his own: nothing recorded
    assert len(status(home)[bobs]["forced"]) == 2
