"""One selection vocabulary (docs/reference/commands.md §2.7): `status`, `report` and the bulk commands take
the same selectors, and the same selectors pick the same jobs. The pure `select` by a table; the
commands through the CLI, as two real accounts sharing a home."""

from __future__ import annotations

import json
import re

import pytest

from jobtpu.commands.select import Selection, select
from jobtpu.schema.state import Job, Status
from tests.accounts import Team

ANN, BOB = "ann", "bob"

# id: (user, name, tags, status, sweep)
JOBS = {
    1: (ANN, "train-a", ["base"], Status.RUNNING, None),
    2: (ANN, "train-b", ["base", "best"], Status.FAILED, None),
    3: (ANN, "eval-a", [], Status.QUEUED, None),
    4: (BOB, "train-a", ["base"], Status.RUNNING, None),
    5: (BOB, "sweep", ["grid"], Status.QUEUED, 5),
    6: (BOB, "sweep", ["grid"], Status.FINISHED, 5),
    7: (ANN, "sweep", ["grid"], Status.QUEUED, 7),
}


def _jobs() -> list[Job]:
    return [Job(id=i, user=user, cmd="true", archive="a.tar.gz", created=float(i), name=name, tags=tags,
                status=status, sweep=sweep, sweep_index=None if sweep is None else i - sweep)
            for i, (user, name, tags, status, sweep) in JOBS.items()]


@pytest.mark.fast
@pytest.mark.parametrize(("selection", "expected"), [
    (Selection(), [1, 2, 3, 7]),  # nothing given: your jobs
    (Selection(ids=(4, 2)), [2, 4]),  # ids alone: whoever submitted them
    (Selection(ids=(4, 2), user=BOB), [4]),  # ids narrowed by --user
    (Selection(names=("train-a", "eval-*")), [1, 3]),  # repeated --name: any of them
    (Selection(tags=("base",)), [1, 2]),
    (Selection(tags=("base", "best")), [2]),  # repeated --tag: all of them
    (Selection(statuses=("running", "queued")), [1, 3, 7]),  # a --status list: any of them
    (Selection(statuses=("failed",)), [2]),
    (Selection(sweeps=(5,)), [5, 6]),  # a sweep, like an id, whoever submitted it
    (Selection(sweeps=(5, 7)), [5, 6, 7]),
    (Selection(sweeps=(5,), user=ANN), []),
    (Selection(user=BOB), [4, 5, 6]),
    (Selection(all_users=True), [1, 2, 3, 4, 5, 6, 7]),
    (Selection(all_users=True, names=("train-a",)), [1, 4]),
    (Selection(all_users=True, tags=("grid",), statuses=("queued",)), [5, 7]),
    (Selection(names=("train-*",), tags=("base",), statuses=("failed",)), [2]),  # every selector must match
    (Selection(ids=(1, 2, 4), names=("train-a",)), [1, 4]),
])
def test_select_picks_by_every_selector_given(selection: Selection, expected: list[int]) -> None:
    assert [j.id for j in select(_jobs(), selection, ANN)] == expected


def _ids(text: str, pattern: str) -> list[int]:
    return sorted(int(m) for m in re.findall(pattern, text, re.M))


def test_status_kill_and_report_pick_the_same_jobs_for_the_same_selectors(team: Team) -> None:
    alice, bob = team.accounts
    home = team.one_writer_home({"machines": {"local": {"kind": "local", "resources": {"slot": 1}}}})
    ids: dict[tuple[str, str], int] = {}
    for account in (alice, bob):
        src = team.private_folder(account, "src")
        for name in ("a", "b", "c"):
            out = team.run(account, "--home", str(home), "submit", "--dir", str(src), "--cmd", "true",
                           "--name", name, "--tag", "t", "--json", "--hold").stdout
            ids[account, name] = json.loads(out)["id"]
    team.run(alice, "--home", str(home), "manage")  # the runner takes bob's submits in (held: none starts)

    def picked(*selectors: str) -> list[list[int]]:
        def run(*args: str) -> str:
            return team.run(alice, "--home", str(home), *args, env={"COLUMNS": "200"}).stdout

        listed = json.loads(run("status", "--json", *selectors))["jobs"]
        return [sorted(j["id"] for j in listed),
                _ids(run("status", *selectors), r"^ *(\d+) +[abc] "),
                # --force: another's job is listed, not refused (a dry run changes nothing)
                _ids(run("kill", "--dry-run", "--force", *selectors), r"^would kill job (\d+) "),
                _ids(run("report", *selectors), r"^job (\d+) ")]

    mine = sorted([ids[alice, "a"], ids[alice, "b"]])
    assert picked("--name", "a", "--name", "b") == [mine] * 4  # any of the names, yours
    everyone = sorted([*mine, ids[bob, "a"], ids[bob, "b"]])
    assert picked("--name", "a", "--name", "b", "--all-users") == [everyone] * 4
    assert picked("--name", "a", "--user", bob, "--tag", "t") == [[ids[bob, "a"]]] * 4
    assert picked(str(ids[bob, "c"]), "--name", "c") == [[ids[bob, "c"]]] * 4  # ids: whoever submitted them
    for command in ("status", "kill", "report"):  # one line saying what is wrong, for each
        done = team.run(alice, "--home", str(home), command, "--user", bob, "--all-users", check=False)
        assert done.returncode == 2 and done.stderr.splitlines()[0] == (
            "jobtpu: error: argument --all-users: not allowed with argument --user"), done.stderr
    assert {j["status"] for j in json.loads(team.run(alice, "--home", str(home), "status", "--all-users",
                                                     "--json").stdout)["jobs"]} == {"queued"}
    # --dry-run --force on bob's jobs recorded no forced act either
    assert [j["forced"] for j in json.loads(team.run(alice, "--home", str(home), "status", "--all-users",
                                                     "--json").stdout)["jobs"] if j.get("forced")] == []
