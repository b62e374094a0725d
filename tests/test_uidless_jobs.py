"""A job record that names no submitting account (an old record, or one written by hand into
state.json) is nobody's to claim by its user name: only the home's owner, a shared home's runner,
acts on it without --force (docs/reference/home-files.md §1.3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobtpu.home.users import owns
from tests.accounts import Team
from tests.test_runner_trust import manage, row, shared_home, submit

RUNNER, MEMBER, OTHER = 1000, 1001, 1002


@pytest.mark.fast
@pytest.mark.parametrize(("job_user", "job_uid", "user", "real", "expected"), [
    ("carol", MEMBER, "carol", MEMBER, True),  # the submitting account, under the job's name
    ("carol", MEMBER, "carol", OTHER, False),  # the name alone: another account
    ("carol", MEMBER, "dave", MEMBER, False),  # the account under another name
    ("carol", None, "carol", RUNNER, True),  # no account recorded: the home's owner
    ("carol", None, "carol", MEMBER, False),  # no account recorded: a name proves nothing
    ("carol", None, "carol", OTHER, False),
    ("carol", None, "dave", RUNNER, False),  # the owner too acts under the job's name, or with --force
])
def test_a_job_is_owned_by_its_account_and_a_recordless_one_by_the_homes_owner(
        job_user: str, job_uid: int | None, user: str, real: int, expected: bool) -> None:
    assert owns(job_user, job_uid, user, real, RUNNER) is expected


def drop_uid(home: Path, job: int) -> None:
    """The job's record without its uid, as an old one has it, rewritten in place (the runner's file)."""
    state = home / "state.json"
    doc = json.loads(state.read_text())
    for each in doc["jobs"]:
        if each["id"] == job:
            each.pop("uid", None)
    state.write_text(json.dumps(doc))


def test_a_member_naming_the_user_of_a_recordless_job_cannot_act_on_it_but_the_runner_can(team: Team) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    victim = "carol"
    job = submit(team, alice, home, "sleep 300", "--user", victim, "--hold")
    drop_uid(home, job)
    assert "uid" not in row(team, home, job) or row(team, home, job)["uid"] is None
    for words in (["kill", str(job)], ["release", str(job)], ["tag", str(job), "+mine"]):  # as the victim's name
        sent = team.run(bob, "--home", str(home), *words, umask="0077", env={"JOBTPU_USER": victim})
        assert "carried out by the next pass of" in sent.stderr, sent.stderr
    manage(team, alice, home)
    answers = team.run(bob, "--home", str(home), "requests").stdout
    for act in ("kill", "release", "tag"):
        said = [line for line in answers.splitlines() if line.lstrip().startswith(f"{act} ")]
        assert len(said) == 1 and said[0].endswith(
            f"refused: jobtpu: error: job {job} is {victim}'s, but its record names no submitting account: only this "
            f"home's owner ({alice}) acts on it without --force: {act} refused"), answers
    got = row(team, home, job)
    assert got["held"] and got["status"] == "queued" and not got["tags"] and not got.get("forced"), got
    killed = team.run(alice, "--home", str(home), "kill", str(job), umask="0077", env={"JOBTPU_USER": victim})
    assert "Traceback" not in killed.stderr, killed.stderr
    got = row(team, home, job)
    assert got["status"] == "killed" and not got.get("forced"), got
