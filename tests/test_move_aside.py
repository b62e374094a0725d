"""A move from the old shared layout trusts nothing it did not write (docs/reference/home-files.md
§1.3): in a home where every member could write every file, bob (a member) plants every attack at
once; one routine pass of alice (the runner) moves the home; then, for every path the old layout let
the group write × every key there that carries trust, the table below checks that it was not used,
that the pass said it set it aside (and it is in aside/), and that after `jobtpu adopt` of it, it is."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.accounts import Team
from tests.helpers import wait_for
from tests.test_shared_home import old_layout, rows, source_of, write_as_runner

FORGED_ID = "0123456789abcdef"
FORGED_KEY = "[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFORGEDFORGEDFORGEDFORGEDFORGEDFORGEDFORGED"


@dataclass
class Moved:
    team: Team
    home: Path
    marks: Path  # where a command run as alice leaves its trace
    bobs_root: Path  # the local job root bob named
    mine: int  # alice's job
    carols: int  # carol's local job, which runs as alice only with alice's consent
    out: str  # what alice's routine pass said
    seen: dict[str, Any] = field(default_factory=dict)  # the home once the move's passes ran, before any adopt
    adopted: dict[str, str] = field(default_factory=dict)  # item → what `jobtpu adopt ITEM` said

    def run(self, account: str, *words: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.team.run(account, "--home", str(self.home), *words, umask="0077", check=check)

    def manage(self) -> str:
        done = self.run(self.team.accounts[0], "manage")
        assert "Traceback" not in done.stderr, done.stderr
        return done.stderr

    def ends(self, job: int) -> dict[str, Any]:
        def ended() -> dict[str, Any] | None:
            self.manage()
            got = rows(self.team, self.home)[job]
            return got if got["status"] in ("finished", "failed", "killed") else None
        found: dict[str, Any] = wait_for(ended, timeout=60, interval=0.3, what=f"job {job} to end")
        return found

    def adopt(self, item: str) -> str:
        if item not in self.adopted:
            done = self.run(self.team.accounts[0], "adopt", item)
            self.adopted[item] = done.stderr
        return self.adopted[item]

    def machines(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((self.home / "machines.json").read_text())
        return doc

    def carols_dirs(self) -> str:
        return self.run(self.team.accounts[2], "dir", "ls").stdout


def plant(path: Path, text: str, owner: int, gid: int) -> None:
    """A file as a member left it in the old layout (the group's, 0660)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chown(path, owner, gid)
    path.chmod(0o660)


@pytest.fixture(scope="module")
def old_home_moved() -> Iterator[Moved]:
    team = Team(3)
    try:
        yield attack_and_move(team)
    finally:
        team.close()


def attack_and_move(team: Team) -> Moved:
    alice, bob, carol = team.accounts
    home = team.shared_folder("homes") / "home"
    marks, bobs_root = team.shared_folder("marks"), team.shared_folder("bobs-root")
    team.run(alice, "init", str(home), umask="0077")
    write_as_runner(team, home / "machines.json", {"machines": {"local": {"kind": "local", "resources": {"slot": 4}}}})
    src = source_of(team, alice)
    mine = int(team.run(alice, "--home", str(home), "submit", "--dir", str(src), "--cmd", "echo mine",
                        umask="0077").stdout)
    carols = int(team.run(alice, "--home", str(home), "submit", "--dir", str(src), "--cmd",
                          f"id -un > {marks}/carols-job", umask="0077").stdout)
    state = json.loads((home / "state.json").read_text())  # carol's job, as her submit in the old layout made it
    for job in state["jobs"]:
        if job["id"] == carols:
            job["user"], job["uid"] = carol, team.uid(carol)
    (home / "state.json").write_text(json.dumps(state))
    (home / "users" / ".offered").mkdir(parents=True)
    (home / "users" / carol).mkdir()
    for folder in (home / "users", home / "users" / ".offered"):
        os.chown(folder, team.uid(alice), -1)
    os.chown(home / "users" / carol, team.uid(carol), -1)
    old_layout(team, home)
    # bob plants every attack at once: files of his, and alice's and carol's rewritten in place.
    gid = team.gid
    plant(home / "runner.json", json.dumps({"runner": alice, "notify": [
        {"command": f"touch {marks}/runner-json-notify", "events": ["finished", "failed"]}]}), team.uid(bob), gid)
    plant(home / "machines.json", json.dumps({
        "machines": {"local": {"kind": "local", "resources": {"slot": 4}, "root": str(bobs_root)}},
        "defaults": {"identity_file": f"/home/{bob}/.ssh/id_bob"},
        "gcp": {"credentials": f"/home/{bob}/creds.json", "api_endpoint": "https://127.0.0.1:9/"},
        "notify": [{"command": f"touch {marks}/machines-json-notify", "events": ["finished", "failed"]}]}),
        team.uid(alice), gid)
    plant(home / "known_hosts", FORGED_KEY + "\n", team.uid(alice), gid)
    plant(home / "home_id", FORGED_ID + "\n", team.uid(bob), gid)
    plant(home / "users" / ".offered" / f"{carol}.json", json.dumps({"dirs": {"1": "/bobs/offer"}}),
          team.uid(alice), gid)
    plant(home / "users" / carol / "settings.json", json.dumps({"dirs": {"1": "/bobs/settings"}}),
          team.uid(carol), gid)
    planted = home / "aside"  # and a folder where the move would keep what it sets aside, with an item of his
    planted.mkdir()
    os.chown(planted, team.uid(bob), gid)
    plant(planted / f"offered-{alice}.json", json.dumps({"dirs": {"1": "/bobs/planted"}}), team.uid(bob), gid)
    # ONE routine pass of alice's: it moves the home, then runs her job.
    done = team.run(alice, "--home", str(home), "manage", umask="0077")
    assert "Traceback" not in done.stderr and "moved this shared home" in done.stderr, done.stderr
    moved = Moved(team, home, marks, bobs_root, mine, carols, done.stderr)
    assert moved.ends(mine)["status"] == "finished"
    moved.manage()  # one more: a notification of the end goes out by now
    moved.seen = {"machines": moved.machines(), "marks": sorted(p.name for p in marks.iterdir()),
                  "bobs_root": list(bobs_root.iterdir()), "carols": rows(team, home)[carols]["status"],
                  "known_hosts": (home / "known_hosts").read_text() if (home / "known_hosts").exists() else "",
                  "home_id": (home / "home_id").read_text().strip(), "carols_dirs": moved.carols_dirs(),
                  "aside": {p.name: (p.stat().st_uid, oct(p.stat().st_mode & 0o7777), p.stat().st_gid)
                            for p in (home / "aside").iterdir()} if (home / "aside").is_dir() else {}}
    return moved


def _job_ran_as_alice(m: Moved) -> bool:
    m.ends(m.carols)
    return (m.marks / "carols-job").read_text().split() == [m.team.accounts[0]]


def _notify_ran(m: Moved, mark: str) -> bool:
    m.ends(m.carols)
    job = int(m.run(m.team.accounts[0], "submit", "--dir", str(source_of(m.team, m.team.accounts[0])), "--cmd",
                    "true").stdout)
    m.ends(job)

    def ran() -> bool:
        if (m.marks / mark).exists():
            return True
        m.manage()
        return False
    return bool(wait_for(ran, timeout=30, interval=0.3, what=f"{mark} to appear"))


def test_the_reviewers_reproduction_runs_no_notify_command_as_the_runner(old_home_moved: Moved) -> None:
    """bob's notify commands, in alice's group-writable machines.json and in a runner.json of his: the
    routine pass that moves the home, and the passes after it, run neither (both ran as alice before)."""
    assert not {"runner-json-notify", "machines-json-notify"} & set(old_home_moved.seen["marks"]), \
        old_home_moved.seen["marks"]
    assert old_home_moved.seen["carols"] == "queued"  # and his runner.json gives no consent


def test_an_aside_folder_a_member_planted_brings_nothing_back(old_home_moved: Moved) -> None:
    moved = old_home_moved
    said = [line for line in moved.out.splitlines() if line.startswith("aside: ")]
    assert said and said[0].startswith("aside: not the runner's own folder as a move leaves it; renamed to aside."), \
        moved.out
    assert f"offered-{moved.team.accounts[0]}.json" not in moved.seen["aside"]
    listed = moved.run(moved.team.accounts[0], "adopt").stdout
    assert "/bobs/planted" not in listed and f"offered-{moved.team.accounts[0]}" not in listed, listed


def test_a_member_cannot_adopt_and_changes_nothing(old_home_moved: Moved) -> None:
    moved = old_home_moved
    alice, _, carol = moved.team.accounts
    aside = moved.home / "aside"
    before = {p.name: p.read_bytes() for p in aside.iterdir()} if aside.is_dir() else {}
    for words in (("adopt", "--all"), ("adopt", "runner.json"), ("adopt",)):
        done = moved.run(carol, *words, check=False)
        assert done.returncode == 1 and done.stderr.startswith(
            f"jobtpu: error: `jobtpu adopt` is for this shared home's runner ({alice})"), done.stderr
    assert ({p.name: p.read_bytes() for p in aside.iterdir()} if aside.is_dir() else {}) == before
    assert not (moved.home / "runner.json").exists()


def test_adopt_says_one_line_for_what_it_cannot_take(old_home_moved: Moved) -> None:
    moved = old_home_moved
    alice = moved.team.accounts[0]
    unknown = moved.run(alice, "adopt", "nosuch.json", check=False)
    assert unknown.returncode == 1 and unknown.stderr.startswith(
        "jobtpu: error: 'nosuch.json' is not set aside in this home; nothing adopted"), unknown.stderr
    damaged = moved.home / "aside" / "settings-zed.json"
    damaged.write_text("{not json")
    os.chown(damaged, moved.team.uid(alice), -1)
    damaged.chmod(0o600)
    listed = moved.run(alice, "adopt")
    assert "settings-zed.json (was users/zed/settings.json)" in listed.stdout, listed.stdout
    took = moved.run(alice, "adopt", "settings-zed.json", check=False)
    said = took.stderr.strip().splitlines()
    assert took.returncode == 1 and len(said) == 1 and said[0].startswith("aside/settings-zed.json: ") \
        and said[0].endswith("; left there"), took.stderr
    assert damaged.read_text() == "{not json"
    damaged.unlink()
    solo = moved.team.private_folder(alice, "solo")
    alone = moved.team.run(alice, "--home", str(solo), "adopt", umask="0077")
    assert alone.stderr.strip().splitlines() == [
        "nothing is set aside: this home is not shared (only a move from the old shared layout sets files aside)"]


# (path, key, the item aside/ holds, not used, used after adopting the item)
Check = Callable[[Moved], bool]
TABLE: list[tuple[str, str, str, Check, Check]] = [
    ("runner.json", "runner", "runner.json",
     lambda m: m.seen["carols"] == "queued" and "carols-job" not in m.seen["marks"],
     _job_ran_as_alice),
    ("runner.json", "notify command", "runner.json",
     lambda m: "runner-json-notify" not in m.seen["marks"],
     lambda m: _notify_ran(m, "runner-json-notify")),
    ("machines.json", "notify command", "machines.json",
     lambda m: "machines-json-notify" not in m.seen["marks"] and not m.seen["machines"].get("notify"),
     lambda m: _notify_ran(m, "machines-json-notify")),
    ("machines.json", "machines.local.root", "machines.json",
     lambda m: "root" not in m.seen["machines"]["machines"]["local"] and not m.seen["bobs_root"],
     lambda m: m.machines()["machines"]["local"]["root"] == str(m.bobs_root)),
    ("machines.json", "defaults.identity_file", "machines.json",
     lambda m: "identity_file" not in m.seen["machines"].get("defaults", {}),
     lambda m: m.machines()["defaults"]["identity_file"].endswith("id_bob")),
    ("machines.json", "gcp.credentials", "machines.json",
     lambda m: "credentials" not in m.seen["machines"].get("gcp", {}),
     lambda m: m.machines()["gcp"]["credentials"].endswith("creds.json")),
    ("machines.json", "gcp.api_endpoint", "machines.json",
     lambda m: "api_endpoint" not in m.seen["machines"].get("gcp", {}),
     lambda m: m.machines()["gcp"]["api_endpoint"] == "https://127.0.0.1:9/"),
    ("known_hosts", "a host key", "known_hosts",
     lambda m: FORGED_KEY not in m.seen["known_hosts"],
     lambda m: FORGED_KEY in (m.home / "known_hosts").read_text()),
    ("home_id", "the jobs' mark", "home_id",
     lambda m: m.seen["home_id"] != FORGED_ID,
     lambda m: (m.home / "home_id").read_text().strip() == FORGED_ID),
    ("users/.offered/{carol}.json", "dirs", "offered-{carol}.json",
     lambda m: "/bobs/" not in m.seen["carols_dirs"],
     lambda m: "/bobs/offer" in m.carols_dirs()),
    ("users/{carol}/settings.json", "dirs", "settings-{carol}.json",
     lambda m: "/bobs/" not in m.seen["carols_dirs"],
     lambda m: "/bobs/settings" in m.carols_dirs()),
]


@pytest.mark.parametrize(("path", "key", "item", "unused", "used"), TABLE, ids=[f"{p}:{k}" for p, k, *_ in TABLE])
def test_what_the_group_could_write_is_set_aside_until_the_runner_adopts_it(
        old_home_moved: Moved, path: str, key: str, item: str, unused: Check, used: Check) -> None:
    moved = old_home_moved
    carol = moved.team.accounts[2]
    path, item = path.format(carol=carol), item.format(carol=carol)
    assert unused(moved), f"{path}'s {key} was used after the move:\n{moved.out}"
    said = [line for line in moved.out.splitlines() if line.startswith(f"{path}: ")]
    assert said and f"aside/{item}" in said[0] and f"`jobtpu adopt {item}`" in said[0], moved.out
    if path == "machines.json":
        assert key in said[0] or key == "notify command" and "notify command" in said[0], said
    assert moved.seen["aside"].get(item) == (moved.team.uid(moved.team.accounts[0]), "0o600", moved.team.gid)
    assert oct((moved.home / "aside").stat().st_mode & 0o7777) == "0o700"
    adopted = moved.adopt(item)
    assert adopted.startswith(f"{item}: adopted"), adopted
    assert used(moved), f"{path}'s {key} is not used after `jobtpu adopt {item}`"


def test_a_home_id_its_running_jobs_carry_is_kept_and_said(team: Team) -> None:
    """docs/reference/home-files.md §1.3: a new home id would lose the processes of a job running now,
    so the move keeps it, says so, and the job is still found (and stopped) by the runner's passes."""
    alice = team.accounts[0]
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", str(home), umask="0077")
    write_as_runner(team, home / "machines.json", {"machines": {"local": {"kind": "local", "resources": {"slot": 4}}}})
    job = int(team.run(alice, "--home", str(home), "submit", "--dir", str(source_of(team, alice)), "--cmd",
                       "sleep 300", umask="0077").stdout)

    def running() -> bool:
        team.run(alice, "--home", str(home), "manage", umask="0077")
        return bool(rows(team, home)[job]["status"] == "running")
    wait_for(running, timeout=60, interval=0.3, what=f"job {job} to run")
    mark = (home / "home_id").read_text()
    old_layout(team, home)
    moved = team.run(alice, "--home", str(home), "manage", umask="0077").stderr
    kept = [line for line in moved.splitlines() if line.startswith("home_id: ")]
    assert kept and kept[0].startswith(f"home_id: kept although the group could write it: jobs {job} run with it"), \
        moved
    assert (home / "home_id").read_text() == mark and not (home / "aside" / "home_id").exists()
    team.run(alice, "--home", str(home), "kill", str(job), umask="0077")

    def killed() -> bool:
        team.run(alice, "--home", str(home), "manage", umask="0077")
        return bool(rows(team, home)[job]["status"] == "killed")
    wait_for(killed, timeout=60, interval=0.3, what=f"job {job} to be killed")


# ---- the pure parts ---------------------------------------------------------------------------------

def _st(uid: int, mode: int, nlink: int = 1) -> os.stat_result:
    return os.stat_result((mode, 0, 0, nlink, uid, 0, 0, 0, 0, 0))


ME, OTHER = os.geteuid(), os.geteuid() + 4242


@pytest.mark.fast
@pytest.mark.parametrize(("file", "folder", "why"), [
    (_st(ME, 0o100640), _st(ME, 0o42750), None),  # the runner's file in its own folder
    (_st(ME, 0o100600), _st(ME, 0o43750), None),  # a sticky folder: no member swaps the file
    (_st(OTHER, 0o100640), _st(ME, 0o42750), "it was uid"),
    (_st(ME, 0o100660), _st(ME, 0o42750), "the group could write it"),
    (_st(ME, 0o100602), _st(ME, 0o42750), "the group could write it"),
    (_st(ME, 0o100640, nlink=2), _st(ME, 0o42750), "it had other hard links"),
    (_st(ME, 0o100640), _st(ME, 0o42770), "the group could write its folder"),  # the old layout's top folder
    (_st(ME, 0o100640), _st(OTHER, 0o42750), "its folder was uid"),
])
def test_why_a_file_is_exposed(file: os.stat_result, folder: os.stat_result, why: str | None) -> None:
    from jobtpu.home.aside import why_exposed

    got = why_exposed(file, folder, ME)
    assert (got is None) if why is None else (got is not None and got.startswith(why)), got


PRIVILEGED_DOCS: list[dict[str, Any]] = [
    {"machines": {"local": {"kind": "local"}}},
    {"defaults": {"identity_file": "~/.ssh/k", "user": "u"}, "machines": {"g": {"host": "h"}}},
    {"machines": {"g": {"host": "h", "identity_file": "/k", "root": "/r"}, "l": {"kind": "local", "root": "/x",
                                                                                   "setup": ["touch /x"]}}},
    {"gcp": {"project": "p", "credentials": "/c", "api_endpoint": "https://e"},
     "sheet": {"id": "s", "credentials": "/c"}},
    {"notify": [{"webhook": "https://w", "events": ["failed"]}, {"command": "touch /x", "events": ["failed"]}]},
    {"machines": "not an object", "notify": "nor a list"},
]


@pytest.mark.fast
@pytest.mark.parametrize("doc", PRIVILEGED_DOCS)
def test_the_move_takes_the_keys_a_pass_refuses_and_adopt_puts_them_back(doc: dict[str, Any], tmp_path: Path) -> None:
    """split_privileged takes exactly what privileged.gate refuses from an untrusted machines.json (one
    list of privileged keys), and put_back restores each of them."""
    from jobtpu.home.aside import put_back, split_privileged
    from jobtpu.home.privileged import gate

    kept, taken, names = split_privileged(doc)
    gated = gate((json.dumps(doc).encode(), _st(OTHER, 0o100660)), tmp_path)
    assert json.loads(gated.data or b"{}") == kept
    assert len(names) == len(gated.refused), (names, gated.refused)
    assert split_privileged(kept)[2] == []
    back = put_back(kept, taken)
    assert split_privileged(back)[1] == taken and split_privileged(back)[0] == kept


@pytest.mark.fast
@pytest.mark.parametrize(("item", "origin"), [
    ("runner.json", "runner.json"), ("machines.json", "machines.json"), ("known_hosts", "known_hosts"),
    ("home_id", "home_id"), ("offered-ann.json", "users/.offered/ann.json"),
    ("settings-ann.json", "users/ann/settings.json"), ("settings-../x.json", None), ("offered-.json", None),
    ("state.json", None), ("settings-ann.json.tmp", None),
])
def test_each_aside_item_names_where_it_was(item: str, origin: str | None) -> None:
    from jobtpu.home.aside import origin_of

    assert origin_of(item) == origin
