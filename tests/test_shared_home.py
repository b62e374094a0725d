"""One home shared by two real Unix accounts in a group (docs/reference.md §1): both submit and run
passes, and every file jobtpu writes stays the group's, group-writable, never world-writable."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.accounts import Team
from tests.helpers import wait_for


@pytest.fixture
def team() -> Iterator[Team]:
    made = Team(2)
    try:
        yield made
    finally:
        made.close()


def source_of(team: Team, account: str) -> Path:
    src = team.private_folder(account, "src")
    (src / "train.sh").write_text("echo trained by $USER\n")
    os.chown(src / "train.sh", team.uid(account), team.uid(account))
    return src


def test_two_accounts_share_a_home_and_its_files_stay_the_groups(team: Team) -> None:
    alice, bob = team.accounts
    home = team.shared_folder("home")
    (home / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local",
                                                                           "resources": {"slot": 2}}}}))
    os.chown(home / "machines.json", team.uid(alice), team.gid)
    ids = {}
    for account in (alice, bob):
        src = source_of(team, account)
        done = team.run(account, "--home", str(home), "submit", "--dir", str(src), "--cmd", "bash train.sh",
                        "--env", f"RUN_BY={account}", umask="0077")
        ids[account] = int(done.stdout)

    def both_finished() -> bool:
        team.run(bob if len(ids) % 2 else alice, "--home", str(home), "manage", umask="0077")
        rows = json.loads(team.run(alice, "--home", str(home), "status", "--all-users", "--json").stdout)["jobs"]
        return all(r["status"] == "finished" for r in rows) and len(rows) == 2
    wait_for(both_finished, timeout=60, interval=0.5, what="both accounts' jobs to finish")
    for account in (alice, bob):
        tail = team.run(account, "--home", str(home), "tail", str(ids[account])).stdout
        assert "trained by" in tail
    # Even with a private umask, what jobtpu writes in the shared home stays the group's to use.
    bad = []
    for path in [home, *home.rglob("*")]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        if st.st_gid != team.gid:
            bad.append(f"{path.relative_to(home)}: group {st.st_gid}")
        if st.st_mode & stat.S_IWOTH:
            bad.append(f"{path.relative_to(home)}: world-writable")
    assert not bad, bad
    for name in ("state.json", "last_id"):
        assert (home / name).stat().st_mode & stat.S_IWGRP, name
