"""One home shared by two real Unix accounts in a group (docs/reference/home-files.md §1): both submit and run
passes, and every file jobtpu writes stays the group's, group-writable, never world-writable."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

from jobtpu import timing
from tests.accounts import Team
from tests.helpers import wait_for


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
        for account in (alice, bob):  # a local job runs as its submitter, so each account's pass runs its own
            team.run(account, "--home", str(home), "manage", umask="0077")
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


def group_modes_kept(home: Path, gid: int) -> list[str]:
    """What in the home is not the group's, or is world-writable (symlinks aside)."""
    bad = []
    for path in [home, *home.rglob("*")]:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        if st.st_gid != gid:
            bad.append(f"{path.relative_to(home)}: group {st.st_gid}")
        if st.st_mode & stat.S_IWOTH:
            bad.append(f"{path.relative_to(home)}: world-writable")
    return bad


def test_a_home_made_by_init_shared_serves_two_accounts_with_secrets_and_guards_their_jobs(team: Team) -> None:
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    outsider = team.run(alice, "init", "--shared", "root", str(home), check=False, umask="0077")
    assert outsider.returncode == 1 and "Traceback" not in outsider.stderr, outsider.stderr
    assert outsider.stderr.startswith("jobtpu: error: you are not in the group 'root'") and not home.exists()
    made = team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    assert made.stdout.strip().endswith(f"{home}, shared with group {team.group}")
    assert stat.S_IMODE(home.stat().st_mode) == 0o2770 and home.stat().st_gid == team.gid
    assert stat.S_IMODE((home / "machines.json").stat().st_mode) == 0o660
    with open(home / "machines.json", "w") as f:  # as an editor would: same file, same owner and mode
        json.dump({"machines": {"local": {"kind": "local", "resources": {"slot": 4}}}}, f)
    for account in (alice, bob):
        team.run(bob, "--home", str(home), "user", "add", account, umask="0077")
    ids = {}
    for account in (alice, bob):
        src = source_of(team, account)
        (src / "train.sh").write_text('echo "trained by $USER with key $WANDB_API_KEY"\n')
        done = team.run(account, "--home", str(home), "submit", "--dir", str(src), "--cmd", "bash train.sh",
                        "--env", f"WANDB_API_KEY=key-of-{account}", umask="0077")
        ids[account] = int(done.stdout)
    assert stat.S_IMODE((home / "secrets.json").stat().st_mode) == 0o660  # bob's pass reads alice's key

    def both_finished() -> bool:
        for account in (alice, bob):  # a local job runs as its submitter: each pass starts its own (design §7)
            team.run(account, "--home", str(home), "manage", umask="0077")
        rows = json.loads(team.run(alice, "--home", str(home), "status", "--all-users", "--json").stdout)["jobs"]
        return all(r["status"] == "finished" for r in rows) and len(rows) == 2
    wait_for(both_finished, timeout=60, interval=0.5, what="both accounts' jobs to finish")
    for account in (alice, bob):
        tail = team.run(account, "--home", str(home), "tail", str(ids[account])).stdout
        assert f"with key key-of-{account}" in tail, tail

    # bob's long job runs as bob (his pass started it): alice may not kill it, and with --force the
    # kill is saved and recorded, and its wrapper (bob's) obeys her stop request at once.
    src = team.private_folder(bob, "long")
    long_job = int(team.run(bob, "--home", str(home), "submit", "--dir", str(src), "--cmd", "sleep 300",
                            umask="0077").stdout)

    def running() -> bool:
        team.run(bob, "--home", str(home), "manage", umask="0077")
        rows = json.loads(team.run(bob, "--home", str(home), "status", "--json", str(long_job)).stdout)["jobs"]
        return rows[0]["status"] == "running"
    wait_for(running, timeout=60, interval=0.5, what="bob's long job to run")
    before = (home / "state.json").read_bytes()
    refused = team.run(alice, "--home", str(home), "kill", str(long_job), check=False, umask="0077")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.splitlines()[0] == f"jobtpu: error: job {long_job} is {bob}'s, not {alice}'s: kill refused"
    assert (home / "state.json").read_bytes() == before
    forced = team.run(alice, "--home", str(home), "kill", "--force", str(long_job), umask="0077")
    assert "Traceback" not in forced.stderr, forced.stderr
    row = json.loads(team.run(alice, "--home", str(home), "status", "--json", str(long_job)).stdout)["jobs"][0]
    assert row["status"] == "killed" and [(f["by"], f["act"]) for f in row["forced"]] == [(alice, "kill")]
    assert not group_modes_kept(home, team.gid), group_modes_kept(home, team.gid)
    for name in ("state.json", "last_id", "secrets.json", "users.json"):
        assert (home / name).stat().st_mode & stat.S_IWGRP and not (home / name).stat().st_mode & 0o007, name


def test_a_teammate_fetches_a_local_job_then_its_owner_does_and_all_stays_the_groups(team: Team) -> None:
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    (home / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local",
                                                                           "resources": {"slot": 4}}}}))
    team.run(alice, "--home", str(home), "user", "add", alice, umask="0077")
    src = source_of(team, alice)
    job = int(team.run(alice, "--home", str(home), "submit", "--dir", str(src), "--cmd",
                       "mkdir -p out/deep && echo result > out/deep/r.txt && printf '#!/bin/sh\\n' > run.sh "
                       "&& chmod +x run.sh", umask="0077").stdout)
    private = int(team.run(alice, "--home", str(home), "submit", "--dir", str(src), "--cmd",
                           "echo mine > mine.txt && chmod 600 mine.txt", umask="0077").stdout)

    def finished() -> bool:
        team.run(alice, "--home", str(home), "manage", umask="0077")
        rows = json.loads(team.run(alice, "--home", str(home), "status", "--json").stdout)["jobs"]
        return all(r["status"] == "finished" for r in rows)
    wait_for(finished, timeout=60, interval=0.5, what="alice's jobs to finish")
    results = home / "results" / str(job)
    for account in (bob, alice):  # a teammate fetches first, then the job's owner into the same folder
        done = team.run(account, "--home", str(home), "fetch", str(job), umask="0077", check=False)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (account, done.stderr)
        read = subprocess.run(["runuser", "-u", account, "--", "cat", str(results / "out/deep/r.txt")],
                              capture_output=True, text=True)
        assert read.stdout == "result\n", (account, read.stderr)
    assert sorted(str(p.relative_to(results)) for p in results.rglob("*")) == [
        "out", "out/deep", "out/deep/r.txt", "run.sh", "train.sh"]
    assert group_modes_kept(home, team.gid) == []
    exposed = [str(p.relative_to(home)) for p in [home, *home.rglob("*")] if p.lstat().st_mode & 0o007]
    assert exposed == []  # never world-readable
    for path in [results, *results.rglob("*")]:  # what either fetched, the other may read and replace
        mode = path.stat().st_mode
        expected = 0o2770 if path.is_dir() else 0o770 if path.name == "run.sh" else 0o660
        assert stat.S_IMODE(mode) == expected, (path, oct(mode))
    # A copy that cannot read one file says so in one line, naming it.
    failed = team.run(bob, "--home", str(home), "fetch", str(private), umask="0077", check=False)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    error, hint = failed.stderr.splitlines()
    assert error.startswith("jobtpu: error: local: copying ") and "mine.txt" in error, error
    assert "Permission denied" in error and hint.startswith("hint: "), error


def test_a_member_stops_anothers_local_job_at_once_without_its_owners_pass(team: Team) -> None:
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    for account in (alice, bob):
        team.run(alice, "--home", str(home), "user", "add", account, umask="0077")
    quick = timing.env(stop_poll=0.2)  # how often the wrapper looks for a stop request, shortened
    src = team.private_folder(alice, "long")
    job = int(team.run(alice, "--home", str(home), "submit", "--dir", str(src), "--cmd",
                       "sleep 301 & sleep 302 & wait", umask="0077").stdout)

    def sleeps() -> list[str]:
        out = subprocess.run(["ps", "-u", alice, "-o", "stat=,args="], capture_output=True, text=True).stdout
        return [ln for ln in out.splitlines() if ln.split()[1:] in (["sleep", "301"], ["sleep", "302"]) and not ln.startswith("Z")]

    def running() -> bool:  # alice's single passes, no loop: nothing of hers runs after this
        team.run(alice, "--home", str(home), "manage", umask="0077", env=quick)
        rows = json.loads(team.run(alice, "--home", str(home), "status", "--json", str(job)).stdout)["jobs"]
        return rows[0]["status"] == "running" and len(sleeps()) == 2
    wait_for(running, timeout=60, interval=0.5, what="alice's job to run")

    refused = team.run(bob, "--home", str(home), "kill", str(job), check=False, umask="0077", env=quick)
    assert refused.returncode == 1 and "kill refused" in refused.stderr and len(sleeps()) == 2, refused.stderr
    started = time.monotonic()
    forced = team.run(bob, "--home", str(home), "kill", "--force", str(job), umask="0077", env=quick)
    assert "Traceback" not in forced.stderr and f"run as {alice}" not in forced.stderr, forced.stderr
    assert not sleeps(), sleeps()  # gone when bob's kill returns, with no pass of alice's
    assert time.monotonic() - started < 5 + 0.2 + 5, "within the job's grace and a poll"
    row = json.loads(team.run(bob, "--home", str(home), "status", "--json", str(job)).stdout)["jobs"][0]
    assert (row["status"], row["reason"]) == ("killed", "killed"), row
    assert [(f["by"], f["act"], f["account"]) for f in row["forced"]] == [(bob, "kill", bob)]
    ended = [json.loads(ln) for ln in (home / "events.jsonl").read_text().splitlines()
             if '"job_ended"' in ln]
    assert [(e["job"], e["detail"]["status"], e["detail"]["by"], e["account"]) for e in ended] == [
        (job, "killed", bob, bob)], ended
    assert not list((home / "run" / "stop").iterdir()), "bob's request is removed once the job is gone"


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
    assert "not using" not in done.stderr and (shared / "state.json").exists(), done.stderr
