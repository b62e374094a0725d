"""A hostile member walks the shared home's file table (docs/reference/home-files.md §1.6) with two
real accounts: alice made the home and runs its passes, bob is a member of its group.

For every path the table says the runner writes, bob tries every way to put something else there (a
link, a FIFO, a folder, a 3 GB sparse file, garbage, a file of his own) and to rename its parent: the
kernel refuses each, and the path is as it was. For every path a member writes, bob's own copy of it
is hostile input to alice's commands: each of them reads it in bounded time, says one line, runs and
reads nothing as alice that bob chose, and goes on with every other job."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from jobtpu.home.sealing import public_of
from tests.accounts import Team
from tests.helpers import wait_for

DOC = Path(__file__).resolve().parent.parent / "docs" / "reference" / "home-files.md"
SECRET = "alice-private-token-0123456789abcdef"
QUICK = timing.env(lock_wait=0.5, state_lock_wait=2)
# A command that hangs fails the test at this bound; nothing a test waits on is a product constant.
HANG = 60


def table_rows() -> list[tuple[list[str], str]]:
    """The file table's rows: (the paths in its first cell, who writes them)."""
    section = DOC.read_text(encoding="utf-8").split("### 1.6 ", 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[2]))
    return rows


def test_the_file_table_names_every_path_a_shared_home_holds(team: Team) -> None:
    """The table is the home: every entry a busy shared home has matches one of its rows."""
    home, _ = busy_home(team)
    patterns = [p.rstrip("/") for paths, _ in table_rows() for p in paths]  # "run/ and below": below, skipped
    regexes = [re.compile("^" + re.sub(r"<[^>]+>", "[^/]+", re.escape(p)) + "$") for p in patterns]
    unlisted = []
    for path in home.rglob("*"):
        rel = str(path.relative_to(home))
        parts = rel.split("/")
        if parts[0] in ("run",) or rel.startswith("spool/.cache-") or parts[0] == "results" and len(parts) > 2:
            continue
        if parts[0] == "events.jsonl" or re.fullmatch(r"events\.jsonl\.\d", rel):
            continue
        if not any(r.match(rel) for r in regexes):
            unlisted.append(rel)
    assert unlisted == [], unlisted


# ---- the home the walk attacks ------------------------------------------------------------------

def as_(team: Team, account: str, script: str, timeout: float = HANG) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", account, "--", "bash", "-c", f"umask 0022; {script}"],
                          capture_output=True, text=True, timeout=timeout, cwd=team.base)


def busy_home(team: Team) -> tuple[Path, dict[str, int]]:
    """A shared home that has every file the table names: jobs of both accounts that ran, a request
    answered, settings, a fetch, a secret of alice's."""
    alice, bob = team.accounts
    parent = team.base / "homes"
    parent.mkdir()
    os.chown(parent, 0, team.gid)
    parent.chmod(0o3770)  # like /tmp: a member may not rename another's home away
    home = parent / "home"
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    (home / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local", "resources": {"slot": 4}}}}))
    (home / "runner.json").write_text(json.dumps({"runner": alice}))
    for name in ("machines.json", "runner.json"):
        os.chown(home / name, team.uid(alice), team.gid)
        (home / name).chmod(0o640)
    for account in (alice, bob):
        team.run(alice, "--home", str(home), "user", "add", account, umask="0077")
        team.run(account, "--home", str(home), "config", "set", "rule", "pass", umask="0077")
    ids = {}
    for account in (alice, bob):
        src = team.private_folder(account, "src")
        (src / "run.sh").write_text("echo ran as $(id -un); echo out > out.txt\n")
        os.chown(src / "run.sh", team.uid(account), team.uid(account))
        ids[account] = int(team.run(account, "--home", str(home), "submit", "--dir", str(src), "--cmd", "bash run.sh",
                                    "--env", f"API_TOKEN={SECRET if account == alice else 'bobs'}",
                                    umask="0077").stdout)

    def ended() -> bool:
        team.run(alice, "--home", str(home), "manage", umask="0077")
        rows = json.loads(team.run(alice, "--home", str(home), "status", "--all-users", "--json").stdout)["jobs"]
        return len(rows) == 2 and all(r["status"] == "finished" for r in rows)
    wait_for(ended, timeout=60, interval=0.3, what="both jobs to finish")
    team.run(bob, "--home", str(home), "tag", str(ids[bob]), "+done", umask="0077")
    team.run(alice, "--home", str(home), "manage", umask="0077")
    team.run(alice, "--home", str(home), "fetch", str(ids[alice]), "out.txt", umask="0077")
    team.run(alice, "--home", str(home), "clean", str(ids[alice]), umask="0077")
    # A runner lease (home-files.md §1.7): a standby's first pass watches, the runner's takes token 1,
    # and a handover is asked.
    team.run(alice, "--home", str(home), "manage", "--standby", umask="0077")
    team.run(alice, "--home", str(home), "manage", umask="0077")
    team.run(alice, "--home", str(home), "runner", "handover", umask="0077")
    assert {p.name.split("@")[0] for p in (home / "lease").iterdir()} == {"1", f"seen.{alice}", "handover"}
    return home, ids


MEMBER_FOLDERS = ("spool", "users", "results")


def snapshot_of(path: Path) -> tuple[Any, ...] | None:
    """What must not change: the entry itself, and for a folder of the runner's, what it holds (a
    member may add entries of their own to the member folders: their contents are not compared)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if path.name in MEMBER_FOLDERS and path.parent.name == "home":
        return st.st_ino, st.st_mode, st.st_uid
    return st.st_ino, st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns


ATTACKS = {
    "link": "ln -sfn {secret} {p} || {{ rm -rf {p} && ln -s {secret} {p}; }}",
    "fifo": "rm -rf {p}; mkfifo -m 666 {p}",
    "folder": "rm -rf {p}; mkdir {p}",
    "sparse 3 GB": "truncate -s 3G {p}",
    "garbage": "printf '\\x00\\xff{{{{not json' > {p}",
    "another owner's file": "mv -f {own} {p}",
    "renamed parent": "mv {parent} {parent}.gone",
}


def concrete(home: Path, ids: dict[str, int], alice: str, pattern: str) -> list[Path]:
    """The paths of the busy home a table cell names."""
    words = {"<id>": str(ids[alice]), "<name>": alice, "<sha256>": "*", "<attempt>": "0", "<worker>": "0",
             "<request>": "*", "<uid>": "*", "<first>": "*", "<count>": "*", "<ns>": "*", "<random>": "*",
             "<token>": "*", "<runner>": "*", "<box>": "*"}
    pattern = pattern.removesuffix(" and below").replace(" (`.1`–`.4`)", "")
    if pattern == ".":
        return [home]
    for word, value in words.items():
        pattern = pattern.replace(word, value)
    found = sorted(home.glob(pattern)) if "*" in pattern else [home / pattern]
    return found or [home / pattern.replace("*", "x")]


def runner_paths(home: Path, ids: dict[str, int], alice: str) -> list[Path]:
    paths = []
    for cells, writer in table_rows():
        if writer.startswith("runner") and not writer.startswith("runner makes it"):
            for cell in cells:
                paths += concrete(home, ids, alice, cell)
    paths += [home / "users" / alice, home / "users" / alice / "settings.json", home / "results" / str(ids[alice]),
              home / "events.jsonl.1", home / "spool", home / "users", home / "results"]
    return sorted(set(paths))


def test_a_member_cannot_replace_or_move_anything_another_account_writes(team: Team) -> None:
    alice, bob = team.accounts
    home, ids = busy_home(team)
    secret = team.private_folder(alice, "secret") / "token"
    secret.write_text(SECRET)
    targets = runner_paths(home, ids, alice)
    assert len(targets) > 30, targets
    held: list[str] = []
    cases = 0
    for path in targets:
        for attack, script in ATTACKS.items():
            before = [snapshot_of(p) for p in (path, path.parent)]
            own = team.base / f"bobs-{cases}"
            as_(team, bob, f"echo bob > {own}")
            done = as_(team, bob, script.format(p=path, secret=secret, own=own, parent=path.parent), timeout=HANG)
            cases += 1
            if [snapshot_of(p) for p in (path, path.parent)] != before:
                held.append(f"{path.relative_to(home.parent)}: {attack} went through ({done.stderr.strip()[:80]})")
    assert held == [], held
    # The runner lease (home-files.md §1.7): bob can neither plant a newer token (which would fence
    # alice's runner) nor ask for a handover or stand by himself; each command of his is one refusal.
    lease_before = {p.name: snapshot_of(p) for p in (home / "lease").iterdir()}
    planted = as_(team, bob, f"echo '{{\"token\": 9}}' > {home}/lease/9; ln -s {secret} {home}/lease/8; "
                             f"mkdir {home}/lease/7")
    assert planted.returncode != 0 and "Permission denied" in planted.stderr, planted
    for args in (("runner", "handover"), ("manage", "--standby")):
        refused = team.run(bob, "--home", str(home), *args, check=False, umask="0077")
        assert refused.returncode != 0 and "is for this shared home's runner" in refused.stderr, (args, refused)
        assert "Traceback" not in refused.stderr and len(refused.stderr.splitlines()) <= 2, refused.stderr
    assert {p.name: snapshot_of(p) for p in (home / "lease").iterdir()} == lease_before
    # …and every command of alice's still works on the home as it is.
    assert team.run(alice, "--home", str(home), "status", "--all-users").returncode == 0
    assert team.run(alice, "--home", str(home), "manage", umask="0077").returncode == 0
    print(f"{cases} cases over {len(targets)} paths")


# ---- what members write: hostile input, read in bounded time, one line, nothing as alice ----------------

def hostile_input_cases() -> list[tuple[str, str]]:
    return [(kind, attack) for kind in ("submit", "act", "archive", "settings")
            for attack in ("link", "fifo", "folder", "sparse 3 GB", "garbage", "hard link")]


@pytest.mark.parametrize("kind,attack", hostile_input_cases())
def test_what_a_member_writes_is_read_as_data_in_bounded_time(team: Team, kind: str, attack: str) -> None:
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    (home / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local", "resources": {"slot": 4}}}}))
    os.chown(home / "machines.json", team.uid(alice), team.gid)
    secret = team.private_folder(alice, "secret") / "token"
    secret.write_text(SECRET + "\n")
    os.chown(secret, team.uid(alice), team.uid(alice))
    secret.chmod(0o644)
    secret.parent.chmod(0o755)  # readable by bob too: what matters is that alice's pass never takes it as bob's
    src = team.private_folder(bob, "src")
    (src / "a.sh").write_text("echo hi\n")
    os.chown(src / "a.sh", team.uid(bob), team.uid(bob))
    fine = int(team.run(bob, "--home", str(home), "submit", "--dir", str(src), "--cmd", "true", umask="0077").stdout)
    team.run(bob, "--home", str(home), "config", "set", "rule", "pass", umask="0077")
    spool = home / "spool"
    target = {"submit": spool / f"submit-{fine + 1}-1.json", "act": spool / f"act-{time.time_ns()}-0123456789ab.json",
              "archive": next(spool.glob(f"archive-{fine}-*.tar.gz"), spool / "none"),
              "settings": home / "users" / bob / "settings.json"}[kind]
    scripts = {"link": f"rm -f {target}; ln -s {secret} {target}", "fifo": f"rm -f {target}; mkfifo -m 644 {target}",
               "folder": f"rm -f {target}; mkdir {target}", "sparse 3 GB": f"truncate -s 3G {target}",
               "garbage": f"printf '\\x00\\xff{{{{not json' > {target}",
               "hard link": f"rm -f {target}; ln {secret} {target} || cp --preserve=mode {secret} {target}"}
    if kind == "archive":  # the submit that brings it is bob's own, well made; only its snapshot is hostile
        assert target.exists()
    as_(team, bob, scripts[attack])
    said = []  # each run's timeout is its hang guard: none waits on what bob planted
    for args in (("manage",), ("status", "--all-users"), ("requests",), ("events",)):
        done = team.run(alice, "--home", str(home), *args, check=False, umask="0077", env=QUICK, timeout=HANG)
        said.append(done.stdout + done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert SECRET not in done.stdout + done.stderr, (args, done.stdout, done.stderr)
        assert done.returncode == 0 or args == ("events",), (args, done.stderr)
    # Nothing of bob's choosing ran or was read as alice: the token went nowhere, no job holds it.
    state = (home / "state.json").read_text()
    assert SECRET not in state and SECRET not in (home / "secrets.json").read_text() if (home / "secrets.json").exists() else True
    mode = stat.S_IMODE(os.stat(secret).st_mode)
    assert mode == 0o644 and secret.read_text() == SECRET + "\n"


def test_a_members_flood_of_requests_waits_its_turn_and_costs_one_line(team: Team) -> None:
    """bob fills the spool (and users/) with requests and folders by the thousand: alice's pass carries
    out at most MAX_PER_ACCOUNT of his a round, says so in one line, and her own job still runs."""
    from jobtpu.commands.intake import MAX_PER_ACCOUNT

    alice, bob = team.accounts
    home = team.one_writer_home({"machines": {"local": {"kind": "local", "resources": {"slot": 2}}}})
    request = json.dumps({"v": 2, "command": "tag", "args": {"words": ["999999", "+x"]}, "user": bob, "at": 0})
    flood = MAX_PER_ACCOUNT + 300
    done = as_(team, bob, f"cd {home}/spool && for i in $(seq {flood}); do printf '%s' '{request}' > "
                          f"act-$i-0123456789ab.json; done; for i in $(seq 2000); do mkdir {home}/users/u$i; done")
    assert done.returncode == 0, done.stderr
    src = team.private_folder(alice, "src")
    mine = int(team.run(alice, "--home", str(home), "submit", "--dir", str(src), "--cmd", "true").stdout)
    said = team.run(alice, "--home", str(home), "manage", umask="0077", timeout=HANG)
    lines = [line for line in said.stderr.splitlines() if "more requests wait" in line]
    assert lines == [f"{bob}: 300 more requests wait for the next passes (at most {MAX_PER_ACCOUNT} of one "
                     "account's a pass)"], said.stderr
    assert f"{bob}: {MAX_PER_ACCOUNT} requests taken in ({MAX_PER_ACCOUNT} refused)" in said.stderr, said.stderr
    assert len(said.stderr.splitlines()) < 10, said.stderr  # a flood is a line or two, not one a request
    wait_for(lambda: team.run(alice, "--home", str(home), "manage", umask="0077") and json.loads(
        team.run(alice, "--home", str(home), "status", "--json", str(mine)).stdout)["jobs"][0]["status"] == "finished",
        timeout=HANG, interval=0.3, what="alice's own job to finish")


def test_a_forged_request_runs_as_its_sender_and_what_submit_refuses_is_refused(team: Team) -> None:
    """A member writes requests by hand rather than through jobtpu: a submit whose records claim
    another account, a status, forced acts and attempts; one with an environment name submit
    refuses; acts only the runner may do. The runner keeps the sender's account and nothing else of
    the record's own, and refuses the rest in their replies (docs/reference/home-files.md §1.3)."""
    alice, bob = team.accounts
    home = team.one_writer_home({"machines": {"local": {"kind": "local", "resources": {"slot": 2}}}})
    team.run(alice, "--home", str(home), "user", "add", bob, umask="0077")
    src = team.private_folder(bob, "src")
    ids = [int(team.run(bob, "--home", str(home), "submit", "--dir", str(src), "--cmd", "true", "--hold",
                        umask="0077").stdout) for _ in range(2)]
    forged, env_named = (next((home / "spool").glob(f"submit-{i}-1-*.json")) for i in ids)
    doc = json.loads(forged.read_text())  # rewritten in place, as bob could: the file stays his
    doc["jobs"][0].update(uid=team.uid(alice), status="running", machine="local", attempt=3,
                          attempts=[{"n": 0, "machine": "local"}], recoveries=7,
                          forced=[{"by": alice, "act": "kill", "at": 1.0, "uid": team.uid(alice), "account": alice}])
    forged.write_text(json.dumps(doc))
    doc = json.loads(env_named.read_text())
    doc["jobs"][0]["env"] = {"JOBTPU_MARK": "someone.else"}
    env_named.write_text(json.dumps(doc))
    # With bob's reply key, as jobtpu sends it: the runner seals its answer to him (a request without
    # one is answered with its exit code alone).
    reply_key = base64.b64encode(public_of((home / "spool" / f".cache-{team.uid(bob)}" / "reply.key").read_bytes()))
    for n, command in enumerate(("user", "manage")):
        request = json.dumps({"v": 2, "command": command, "args": {"words": ["add", "mallory"]}, "user": bob, "at": 0,
                              "reply_key": reply_key.decode()})
        assert as_(team, bob, f"printf '%s' '{request}' > {home}/spool/act-{n + 1}-0123456789ab.json").returncode == 0
    team.run(alice, "--home", str(home), "manage", umask="0077")
    rows = {r["id"]: r for r in json.loads(team.run(alice, "--home", str(home), "status", "--all-users",
                                                     "--json").stdout)["jobs"]}
    assert list(rows) == [ids[0]], rows  # the one with JOBTPU_MARK was refused
    got = rows[ids[0]]
    assert (got["uid"], got["status"], got["attempts"], got.get("forced", []), got.get("recoveries", 0)) == \
        (team.uid(bob), "queued", [], [], 0), got
    answers = team.run(bob, "--home", str(home), "requests").stdout
    assert f"submit of job {ids[1]}: refused: jobtpu: error: job {ids[1]}: --env JOBTPU_MARK: JOBTPU_* variables " \
           "are set by jobtpu itself" in answers, answers
    assert "user: refused: jobtpu: error: 'user' is not an act a member may request" in answers, answers
    assert "manage: refused: jobtpu: error: 'manage' is not an act a member may request" in answers, answers
    assert "mallory" not in (home / "users.json").read_text()


@pytest.mark.parametrize(("slices", "said"), [
    (3, "--slices 3: the fleet could never form that gang (machines of one kind that fit: 2 of v4-16)"),
    (0, "--slices 0: a job runs on at least one slice"),
])
def test_a_forged_slices_is_refused_as_submit_refuses_it(team: Team, slices: int, said: str) -> None:
    """A member's submit rewritten to ask a gang no fleet could form (or none at all): the runner
    checks `slices` again as `submit` does, refuses that submit in one line, and queues nothing."""
    alice, bob = team.accounts
    boxes = {name: {"kind": "ssh", "hosts": [f"{name}.invalid"], "accelerator": "v4-16"} for name in ("a", "b")}
    home = team.one_writer_home({"machines": boxes})
    team.run(alice, "--home", str(home), "user", "add", bob, umask="0077")
    src = team.private_folder(bob, "src")
    job_id = int(team.run(bob, "--home", str(home), "submit", "--dir", str(src), "--cmd", "true", "--hold",
                          "--slices", "2", umask="0077").stdout)
    sent = next((home / "spool").glob(f"submit-{job_id}-1-*.json"))
    doc = json.loads(sent.read_text())
    doc["jobs"][0]["slices"] = slices
    sent.write_text(json.dumps(doc))
    done = team.run(alice, "--home", str(home), "manage", umask="0077")
    assert "Traceback" not in done.stderr, done.stderr
    rows = json.loads(team.run(alice, "--home", str(home), "status", "--all-users", "--json").stdout)["jobs"]
    assert rows == [], rows
    answers = team.run(bob, "--home", str(home), "requests").stdout
    assert f"submit of job {job_id}: refused: jobtpu: error: job {job_id}: {said}" in answers, answers
