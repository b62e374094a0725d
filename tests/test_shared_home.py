"""One home shared by two real Unix accounts in a group, in the one-writer layout
(docs/reference/home-files.md §1.3): alice made it with `init --shared` and runs its passes; bob's
submits and acts are requests in the spool that her passes carry out as him; every file but the
members' own is written by alice alone, readable by the group, never by the world."""

from __future__ import annotations

import json
import os
import pwd
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from jobtpu import timing
from tests.accounts import REPO, Team
from tests.helpers import wait_for

MEMBER_FOLDERS = ("spool", "users", "results")


def source_of(team: Team, account: str, text: str = "echo trained by $USER\n") -> Path:
    src = team.private_folder(account, f"src{len(list(team.base.iterdir()))}")
    (src / "train.sh").write_text(text)
    os.chown(src / "train.sh", team.uid(account), team.uid(account))
    return src


def init_shared(team: Team, runner_consents: bool = True) -> Path:
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    made = team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    assert made.stdout.strip().startswith(f"{home}, shared with group {team.group}")
    team.run(alice, "--home", str(home), "user", "add", alice, umask="0077")
    team.run(alice, "--home", str(home), "user", "add", bob, umask="0077")
    write_as_runner(team, home / "machines.json", {"machines": {"local": {"kind": "local", "resources": {"slot": 4}}}})
    if runner_consents:  # alice's passes run her teammates' local jobs too (as her)
        write_as_runner(team, home / "runner.json", {"runner": alice})
    return home


def write_as_runner(team: Team, path: Path, doc: dict[str, Any]) -> None:
    """A file of the runner's (alice's), 0640, as she would write it with an editor."""
    path.write_text(json.dumps(doc))
    os.chown(path, team.uid(team.accounts[0]), team.gid)
    path.chmod(0o640)


def rows(team: Team, home: Path, account: str | None = None) -> dict[int, dict[str, Any]]:
    done = team.run(account or team.accounts[0], "--home", str(home), "status", "--all-users", "--json")
    return {r["id"]: r for r in json.loads(done.stdout)["jobs"]}


def file_table_breaches(home: Path, runner_uid: int, gid: int) -> list[str]:
    """What in the home breaks its file table (docs/reference/home-files.md §1.2): every path the
    runner's and not group-writable, except the member folders (3770) whose entries are their makers'
    and not group-writable; everything the group's; nothing the world's. A path gone between the
    listing and its look (a running job's wrapper renames its temporary exit record) has the walk
    made again, until one sees every path it lists."""
    while (bad := _breaches(home, runner_uid, gid)) is None:
        pass
    return bad


def _breaches(home: Path, runner_uid: int, gid: int) -> list[str] | None:
    bad = []
    try:
        paths = [home, *home.rglob("*")]
    except FileNotFoundError:
        return None
    for path in paths:
        try:
            st = path.lstat()
        except FileNotFoundError:
            return None
        rel = str(path.relative_to(home))
        if stat.S_ISLNK(st.st_mode):
            bad.append(f"{rel}: a link")
            continue
        top = rel.split("/")[0]
        in_member_folder = top in MEMBER_FOLDERS and rel != top
        if st.st_mode & 0o007:
            bad.append(f"{rel}: the world's ({stat.filemode(st.st_mode)})")
        if st.st_gid != gid:
            bad.append(f"{rel}: group {st.st_gid}")
        if rel in MEMBER_FOLDERS:
            if st.st_uid != runner_uid or stat.S_IMODE(st.st_mode) != 0o3770:
                bad.append(f"{rel}: {stat.filemode(st.st_mode)} of uid {st.st_uid}")
        elif in_member_folder:
            if st.st_mode & stat.S_IWGRP:
                bad.append(f"{rel}: group-writable")
        elif st.st_uid != runner_uid or st.st_mode & stat.S_IWGRP:
            bad.append(f"{rel}: {stat.filemode(st.st_mode)} of uid {st.st_uid}")
    return bad


def test_two_accounts_share_a_home_whose_files_only_its_runner_writes(team: Team) -> None:
    alice, bob = team.accounts
    home = init_shared(team)
    assert stat.S_IMODE(home.stat().st_mode) == 0o3750 and home.stat().st_gid == team.gid
    ids = {}
    for account in (alice, bob):
        src = source_of(team, account, 'echo "trained by $USER with key $WANDB_API_KEY"\n')
        done = team.run(account, "--home", str(home), "submit", "--dir", str(src), "--cmd", "bash train.sh",
                        "--env", f"WANDB_API_KEY=key-of-{account}", umask="0077")
        ids[account] = int(done.stdout)
    assert ids[bob] == ids[alice] + 1  # a member's id is claimed at once, before any pass
    assert "its next pass takes it in" in done.stderr, done.stderr
    # Before alice's pass, bob's job waits in the spool; his `status` says what waits.
    waiting = team.run(bob, "--home", str(home), "requests").stdout
    assert f"submit of job {ids[bob]}" in waiting, waiting

    def both_finished() -> bool:
        team.run(alice, "--home", str(home), "manage", umask="0077")
        got = rows(team, home, bob)
        return len(got) == 2 and all(r["status"] == "finished" for r in got.values())
    wait_for(both_finished, timeout=60, interval=0.3, what="both accounts' jobs to finish")
    for account in (alice, bob):
        tail = team.run(account, "--home", str(home), "tail", str(ids[account])).stdout
        assert f"trained by {alice} with key key-of-{account}" in tail, tail  # run as alice, her consent
    secrets = home / "secrets.json"
    assert secrets.stat().st_uid == team.uid(alice) and stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert not list((home / "spool").glob("submit-*")), "taken in, then removed from the spool"
    assert file_table_breaches(home, team.uid(alice), team.gid) == []
    # bob's pass is refused in one line: the passes are the runner's.
    refused = team.run(bob, "--home", str(home), "manage", check=False, umask="0077")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.splitlines()[0] == (f"jobtpu: error: `jobtpu manage` is for this shared home's runner "
                                              f"({alice}): every file of the home but your own folder and your "
                                              "requests is written by that account alone")


def test_a_members_acts_are_carried_out_by_the_runners_loop_as_the_member(team: Team) -> None:
    alice, bob = team.accounts
    home = init_shared(team)
    quick = timing.env(spool_poll=0.1, stop_poll=0.2, request_wait=50)  # a member waits for the answer, however busy
    mine = int(team.run(alice, "--home", str(home), "submit", "--dir", str(source_of(team, alice)), "--cmd",
                        "sleep 301", umask="0077").stdout)
    his = int(team.run(bob, "--home", str(home), "submit", "--dir", str(source_of(team, bob)), "--cmd",
                       "sleep 302", umask="0077").stdout)
    env = {"HOME": f"/home/{alice}", "USER": alice, "LOGNAME": alice, "PATH": "/usr/local/bin:/usr/bin:/bin",
           "PYTHONPATH": str(REPO), **quick}
    loop = subprocess.Popen(["runuser", "-u", alice, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                             sys.executable, "-m", "jobtpu.cli", "--home", str(home), "manage", "--loop", "600"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: all(r["status"] == "running" for r in rows(team, home).values()) and len(rows(team, home)) == 2,
                 timeout=60, interval=0.3, what="both jobs to run")
        # The loop waits 600 s between passes, yet a request starts its next round at once: bob's
        # kill of alice's job is answered (refused) before his command returns.
        refused = team.run(bob, "--home", str(home), "kill", str(mine), check=False, umask="0077", env=quick)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert refused.stderr.splitlines()[0] == f"jobtpu: error: job {mine} is {alice}'s, not {bob}'s: kill refused"
        assert rows(team, home)[mine]["status"] == "running"
        done = team.run(bob, "--home", str(home), "kill", str(his), umask="0077", env=quick)
        assert "Traceback" not in done.stderr, done.stderr
        assert rows(team, home)[his]["status"] == "killed"
        forced = team.run(bob, "--home", str(home), "kill", "--force", str(mine), umask="0077", env=quick)
        assert "Traceback" not in forced.stderr, forced.stderr
        got = rows(team, home)[mine]
        assert got["status"] == "killed", got
        assert [(f["by"], f["act"], f["uid"], f["account"]) for f in got["forced"]] == \
            [(bob, "kill", team.uid(bob), bob)]
        # tag and note travel the same way, as bob.
        team.run(bob, "--home", str(home), "tag", str(his), "+mine", umask="0077", env=quick)
        team.run(bob, "--home", str(home), "note", str(his), "too slow", umask="0077", env=quick)
        got = rows(team, home)[his]
        assert got["tags"] == ["mine"] and got["note"] == "too slow", got
        # bob's `run --follow` follows the loop's passes: his log, then his job's exit code.
        followed = team.run(bob, "--home", str(home), "run", "--follow", "--dir", str(source_of(team, bob)),
                            "--cmd", "echo followed; exit 3", check=False, umask="0077", env=quick)
        assert followed.returncode == 3 and "followed" in followed.stdout, (followed.stdout, followed.stderr)
    finally:
        os.killpg(loop.pid, signal.SIGINT)
        loop.wait(timeout=60)
    assert "Traceback" not in (loop.stderr.read() if loop.stderr else "")


def test_without_a_loop_an_act_waits_in_the_spool_for_the_next_pass(team: Team) -> None:
    alice, bob = team.accounts
    home = init_shared(team, runner_consents=False)
    his = int(team.run(bob, "--home", str(home), "submit", "--dir", str(source_of(team, bob)), "--cmd", "true",
                       umask="0077").stdout)
    pending = team.run(bob, "--home", str(home), "status", str(his), check=False)
    assert pending.returncode == 1 and pending.stderr.splitlines()[0] == (
        f"jobtpu: error: job {his} was submitted and waits in the spool for the runner's next pass"), pending.stderr
    team.run(alice, "--home", str(home), "manage", umask="0077")
    got = rows(team, home)[his]
    assert got["status"] == "queued" and got["waiting"].startswith(
        f"local jobs run as the runner ({alice}) only with its consent"), got
    held = team.run(bob, "--home", str(home), "hold", str(his), umask="0077")
    assert "carried out by the next pass of " + alice in held.stderr, held.stderr
    assert not rows(team, home)[his].get("held")
    team.run(alice, "--home", str(home), "manage", umask="0077")
    assert rows(team, home)[his].get("held") is True
    answers = team.run(bob, "--home", str(home), "requests").stdout
    assert f"hold {his}: done" in answers, answers


def test_a_members_sweep_cap_and_update_travel_to_the_runner_and_only_the_runner_drains(team: Team) -> None:
    alice, bob = team.accounts
    home = init_shared(team, runner_consents=False)  # bob's jobs stay queued: only their records count here
    out = team.run(bob, "--home", str(home), "submit", "--dir", str(source_of(team, bob)), "--cmd", "true",
                   "--sweep", "lr=0.1,0.2", "--max-running", "1", umask="0077").stdout
    first = int(out.split("-")[0])
    team.run(alice, "--home", str(home), "manage", umask="0077")
    got = rows(team, home)
    assert [(got[i]["max_running"], got[i]["sweep_values"]) for i in (first, first + 1)] == [
        (1, {"lr": "0.1"}), (1, {"lr": "0.2"})], "the runner took the member's cap and values in"
    asked = team.run(bob, "--home", str(home), "update", "--sweep", str(first), "--max-running", "2", umask="0077")
    assert "carried out by the next pass of " + alice in asked.stderr, asked.stderr
    team.run(alice, "--home", str(home), "manage", umask="0077")
    got = rows(team, home)
    assert [got[i]["max_running"] for i in (first, first + 1)] == [2, 2]
    assert f"update --sweep {first} --max-running 2: done" in team.run(bob, "--home", str(home), "requests").stdout
    refused = team.run(bob, "--home", str(home), "machines", "drain", "local", check=False, umask="0077")
    assert refused.returncode == 1 and refused.stderr.splitlines()[0] == (
        f"jobtpu: error: `jobtpu machines drain` is for this shared home's runner ({alice}): every file of the "
        "home but your own folder and your requests is written by that account alone"), refused.stderr
    assert "local" in team.run(bob, "--home", str(home), "machines").stdout, "listing stays every member's"


def test_a_teammate_fetches_into_a_results_folder_of_their_own(team: Team) -> None:
    alice, bob = team.accounts
    home = init_shared(team)
    job = int(team.run(alice, "--home", str(home), "submit", "--dir", str(source_of(team, alice)), "--cmd",
                       "mkdir -p out && echo result > out/r.txt && chmod -R g+rX out", umask="0077").stdout)
    wait_for(lambda: team.run(alice, "--home", str(home), "manage", umask="0077") and
             rows(team, home)[job]["status"] == "finished", timeout=60, interval=0.3, what="alice's job")
    fetched = team.run(bob, "--home", str(home), "fetch", str(job), "out", umask="0077", check=False)
    assert fetched.returncode == 0, fetched.stderr
    results = home / "results" / str(job)
    assert results.stat().st_uid == team.uid(bob) and not results.stat().st_mode & (stat.S_IWGRP | 0o007)
    # bob's folder decides nothing for alice: her fetch goes into a folder of her own, named in its line,
    # and bob's is as he left it (docs/reference/home-files.md §1.6).
    before = sorted(p.name for p in results.rglob("*"))
    again = team.run(alice, "--home", str(home), "fetch", str(job), "out", umask="0077", check=False)
    assert again.returncode == 0, again.stderr
    hers = [p for p in (home / "results").iterdir() if p.name.startswith(f"{job}-")]
    assert len(hers) == 1 and hers[0].stat().st_uid == team.uid(alice), hers
    assert f"fetched into {hers[0]}" in again.stderr, again.stderr
    assert [p.read_text() for p in hers[0].rglob("r.txt")] == ["result\n"]
    assert sorted(p.name for p in results.rglob("*")) == before
    assert file_table_breaches(home, team.uid(alice), team.gid) == []


def old_layout(team: Team, home: Path) -> None:
    """What `init --shared` made before the one-writer layout: every folder 2770 (specs/ 3770), every
    file 0660, the group's; and each job's spec, its submitter's, as that layout's submit wrote it."""
    specs = home / "specs"
    specs.mkdir(exist_ok=True)
    os.chown(specs, home.stat().st_uid, -1)  # made by the home's first submit, its creator's
    for job in json.loads((home / "state.json").read_text())["jobs"] if (home / "state.json").exists() else []:
        spec = {"id": job["id"], "uid": job["uid"], "account": pwd.getpwuid(job["uid"]).pw_name, "user": job["user"],
                "cmd": job["cmd"], "overrides": job.get("overrides", []), "log_stage": job.get("log_stage", False),
                "on_resume": job.get("on_resume"), "env": job.get("env", {}), "archive": job["archive"], "secrets": []}
        (specs / f"{job['id']}.json").write_text(json.dumps(spec))
        os.chown(specs / f"{job['id']}.json", job["uid"], -1)
    for path in [home, *home.rglob("*")]:
        if path.is_symlink():
            continue
        os.chown(path, -1, team.gid)
        mode = (0o3770 if path.name == "specs" else 0o2770) if path.is_dir() else \
            0o640 if path.parent.name == "specs" else 0o660  # a spec was its submitter's alone
        path.chmod(mode)


def test_a_home_of_the_old_shared_layout_moves_to_one_writer_at_its_runners_pass(team: Team) -> None:
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", str(home), umask="0077")
    write_as_runner(team, home / "machines.json", {"machines": {"local": {"kind": "local", "resources": {"slot": 4}}}})
    src = source_of(team, alice)
    mine = int(team.run(alice, "--home", str(home), "submit", "--dir", str(src), "--cmd", "echo mine",
                        umask="0077").stdout)
    old_layout(team, home)
    # What bob could do there: rewrite alice's record (the state file becomes his), add a job of his
    # with a spec of his, leave a log folder and an event line of his.
    state = json.loads((home / "state.json").read_text())
    ours = state["jobs"][0]
    theirs = {**ours, "id": mine + 1, "user": bob, "uid": team.uid(bob), "cmd": "echo his"}
    ours["cmd"] = "echo tampered"
    state["jobs"].append(theirs)
    spec = {"id": mine + 1, "uid": team.uid(bob), "account": bob, "user": bob, "cmd": "echo his", "overrides": [],
            "log_stage": False, "env": {}, "archive": ours["archive"], "secrets": []}
    logs = home / "logs"
    for folder in (logs, logs / str(mine + 1)):  # bob's pass made them
        folder.mkdir(exist_ok=True)
        os.chown(folder, team.uid(bob), team.gid)
        folder.chmod(0o2770)
    for path, text, mode in ((home / "state.json", json.dumps(state), 0o660),
                             (home / "specs" / f"{mine + 1}.json", json.dumps(spec), 0o640),
                             (logs / str(mine + 1) / "0.0.log", "an old line\n", 0o660),
                             (home / "events.jsonl", '{"event": "old"}\n', 0o660)):
        path.write_text(text)
        os.chown(path, team.uid(bob), team.gid)
        path.chmod(mode)
    # Until alice's pass moves it, bob may read but not write.
    waits = team.run(bob, "--home", str(home), "submit", "--dir", str(source_of(team, bob)), "--cmd", "true",
                     check=False, umask="0077")
    assert waits.returncode == 1 and "still has the old layout" in waits.stderr.splitlines()[0], waits.stderr
    assert team.run(bob, "--home", str(home), "status", "--all-users").returncode == 0
    moved = team.run(alice, "--home", str(home), "manage", umask="0077")
    assert "moved this shared home to the one-writer layout" in moved.stderr, moved.stderr
    assert f"job {mine}: its record differed from its spec (cmd); the spec's kept" in moved.stderr, moved.stderr
    assert file_table_breaches(home, team.uid(alice), team.gid) == []
    got = rows(team, home)
    assert got[mine]["cmd"] == "echo mine" and got[mine + 1]["uid"] == team.uid(bob), got
    assert (home / "logs" / str(mine + 1) / "0.0.log").read_text() == "an old line\n"
    assert (home / "events.jsonl").read_text().startswith('{"event": "old"}\n')
    wait_for(lambda: team.run(alice, "--home", str(home), "manage", umask="0077") and
             rows(team, home)[mine]["status"] == "finished", timeout=60, interval=0.3, what="alice's job")
    assert team.run(alice, "--home", str(home), "tail", str(mine)).stdout.split() == ["mine"]
    # Now bob's submits go through the spool.
    again = team.run(bob, "--home", str(home), "submit", "--dir", str(source_of(team, bob)), "--cmd", "true",
                     umask="0077")
    assert int(again.stdout) == mine + 2


def test_discovery_never_adopts_an_outsiders_machines_json_above_the_working_folder(team: Team) -> None:
    """docs/reference/home-files.md §1: with no --home and no $JOBTPU_HOME, a folder others can write
    (a /tmp, a scratch disk) holding an outsider's machines.json is passed over with one line."""
    alice, bob = team.accounts
    eve = team.add_outsider()
    scratch = team.base / "scratch"  # world-writable and sticky, as /tmp is
    scratch.mkdir()
    scratch.chmod(0o1777)
    planted = json.dumps({"machines": {"local": {"kind": "local"}}})
    subprocess.run(["runuser", "-u", eve, "--", "sh", "-c", f"echo '{planted}' > {scratch}/machines.json"], check=True)
    work = scratch / "alice-work"
    work.mkdir()
    os.chown(work, team.uid(alice), team.uid(alice))
    (work / "train.sh").write_text("echo trained\n")
    done = team.run(alice, "submit", "--dir", ".", "--cmd", "bash train.sh", cwd=work, check=False, umask="0077")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    said = [ln for ln in done.stderr.splitlines() if str(scratch) in ln]
    assert said == [f"jobtpu: not using {scratch} as the home: the folder is writable by everyone; "
                    f"give --home {scratch} to use it anyway"], done.stderr
    assert sorted(p.name for p in scratch.iterdir()) == ["alice-work", "machines.json"]  # nothing of alice's there
    assert (Path(f"~{alice}").expanduser() / ".jobtpu" / "state.json").exists()  # her own home instead
    # A private folder of eve's (not writable by others) is eve's: passed over too.
    eves = team.private_folder(eve, "home")
    eves.chmod(0o755)
    (eves / "machines.json").write_text(planted)
    os.chown(eves / "machines.json", team.uid(eve), team.uid(eve))
    inside = eves / "sub"
    inside.mkdir(mode=0o777)
    inside.chmod(0o777)
    done = team.run(alice, "status", cwd=inside, check=False)
    assert done.returncode == 0 and f"jobtpu: not using {eves} as the home: the folder is {eve}'s, not yours" \
        in done.stderr, done.stderr
    # A home `init --shared` made for a group alice is in is adopted, bob's machines.json and all.
    shared = team.shared_folder("homes") / "home"
    team.run(bob, "init", "--shared", team.group, str(shared), umask="0077")
    (shared / "proj").mkdir()
    os.chown(shared / "proj", team.uid(alice), team.gid)
    done = team.run(alice, "submit", "--dir", ".", "--cmd", "true", cwd=shared / "proj", umask="0077")
    assert "not using" not in done.stderr and list((shared / "spool").glob("submit-*")), done.stderr


def test_a_members_submit_keeps_every_field_a_user_sets_as_a_private_home_would(team: Team) -> None:
    """A member's submit travels to the runner as records it rebuilds from the fields a submit sets
    (SUBMIT_FIELDS): the same submit gives the same records in the member's own private home, with
    every field of the table of what a user sets (schema/job_fields.py) given a value of its own."""
    from jobtpu.schema.job_fields import SUBMIT_FIELDS
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.state import Job

    alice, bob = team.accounts
    shared = init_shared(team, runner_consents=False)
    private = team.private_folder(bob, "home")
    # Two ssh boxes nobody reaches (every job stays held) for a gang of two slices, and classes for --class.
    fleet = {"machines": {"local": {"kind": "local"},
                          **{name: {"kind": "ssh", "hosts": ["127.0.0.1:9"], "resources": {"slot": 1}} for name in ("b1", "b2")}},
             "priority_classes": {"low": {"default": True}, "urgent": {}}}
    (private / "machines.json").write_text(json.dumps(fleet))
    os.chown(private / "machines.json", team.uid(bob), team.uid(bob))
    write_as_runner(team, shared / "machines.json", fleet)
    src = source_of(team, bob)
    every = ["--dir", str(src), "--cmd", "bash train.sh", "--user", bob, "--name", "n", "--tag", "a", "--env", "K=V",
             "--rule", "pre", "--max-recoveries", "3", "--timeout", "1h", "--stall", "30m", "--log-stage",
             "--on-resume", "--r={attempt}", "--progress", r"step (\d+)", "--priority", "2", "--sheet-note", "note",
             "--sweep", "lr=1,2", "--max-running", "1", "--after", "1", "--after-any", "1", "--retries", "2",
             "--retry-on-exit", "42,127-255", "--max-preemptions", "4", "--class", "urgent",
             "--saved-when", "saved step", "--checkpoints", "gs://ckpt-{region}/run",
             "--grace", "10s", "--signal", "USR1@60", "--hold", "--machine", "local", "--req", "slot=1", "a=1", "--", "b=2"]
    records = {}
    for home, runner in ((shared, alice), (private, bob)):
        gang = ["--dir", str(src), "--cmd", "true", "--hold", "--slices", "2"]  # a gang takes no --machine
        for words in (["--dir", str(src), "--cmd", "true", "--hold"], every, gang):  # job 1, the one --after names
            team.run(bob, "--home", str(home), "submit", *words, umask="0077")
            team.run(runner, "--home", str(home), "manage", umask="0077")  # the shared home's runner takes it in
        jobs = json.loads((home / "state.json").read_text())["jobs"]
        records[home] = {job["id"]: {k: v for k, v in job.items() if k != "created"} for job in jobs}
    assert sorted(records[shared]) == [1, 2, 3, 4], records[shared]
    assert records[shared] == records[private]
    unset = Job(id=0, user="", cmd="", archive="", created=0)
    same = [field for field in SUBMIT_FIELDS if all(records[private][i].get(field, msgspec.to_builtins(
        getattr(unset, field))) == msgspec.to_builtins(getattr(unset, field)) for i in (2, 3, 4))]
    assert same == [], "a field of the table this test sets no value of its own for"
