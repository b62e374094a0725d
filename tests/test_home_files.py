"""What a teammate can plant in a shared home (docs/design.md §2, §4): links, FIFOs, held locks and
folders of their own never make a pass write through them, read through them or hang; the job whose
file is wrong fails alone (docs/reference/state-json.md §4.3, `home_file`). And `tail` reads a log from its end
and shows what it holds as text, never as terminal commands."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from tests.accounts import Team
from tests.helpers import JOBTPU, jobtpu, make_home, manage_until, submit, wait_for


def _locked(path: Path) -> bool:
    """Whether another process holds an exclusive flock on the file (asked without waiting)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts as a teammate (each in a session of its own), stopped at the end."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in started:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def shared_home(team: Team) -> Path:
    alice = team.accounts[0]
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    with open(home / "machines.json", "w") as f:  # as an editor would: same file, owner and mode
        json.dump({"machines": {"local": {"kind": "local", "resources": {"slot": 8}}}}, f)
    team.run(alice, "--home", str(home), "user", "add", alice, umask="0077")
    return home


def as_(team: Team, account: str, *cmd: str) -> None:
    subprocess.run(["runuser", "-u", account, "--", *cmd], check=True, cwd=team.base)


def submit_as(team: Team, account: str, home: Path, cmd: str) -> int:
    src = team.private_folder(account, f"src{time.monotonic_ns()}")
    done = team.run(account, "--home", str(home), "submit", "--dir", str(src), "--cmd", cmd, umask="0077")
    return int(done.stdout)


def rows(team: Team, home: Path) -> dict[int, dict[str, Any]]:
    doc = json.loads(team.run(team.accounts[0], "--home", str(home), "status", "--all-users", "--json").stdout)
    return {r["id"]: r for r in doc["jobs"]}


def alice_secret(team: Team) -> Path:
    """A folder of alice's own, with a file a teammate must never get jobtpu to read or replace."""
    folder = team.private_folder(team.accounts[0], "dotssh")
    (folder / "authorized_keys").write_text("alice's key\n")
    os.chown(folder / "authorized_keys", team.uid(team.accounts[0]), team.uid(team.accounts[0]))
    return folder


def plant_fifo(team: Team, account: str, path: Path) -> None:
    """A FIFO of `account`'s where a file of the home goes, planted as root (the account itself may not
    write there in a shared home)."""
    os.mkfifo(path)
    os.chown(path, team.uid(account), team.gid)
    path.chmod(0o660)


# A teammate's held lock costs each pass the lock wait: shortened, the same passes take a second.
QUICK_LOCKS = timing.env(lock_wait=0.5)


def passes(team: Team, home: Path, done: Any, what: str, timeout: float = 90) -> list[str]:
    """alice's passes (each must exit 0) until done(rows) holds; every line they printed."""
    said: list[str] = []

    def one() -> bool:
        run = team.run(team.accounts[0], "--home", str(home), "manage", umask="0077", timeout=120, env=QUICK_LOCKS)
        assert "Traceback" not in run.stderr, run.stderr
        said.extend(run.stdout.splitlines() + run.stderr.splitlines())
        return bool(done(rows(team, home)))
    wait_for(one, timeout=timeout, interval=0.3, what=what)
    return said


def test_fetch_never_writes_through_a_results_link_a_teammate_planted(team: Team) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    job = submit_as(team, alice, home, "echo result > out.txt")
    passes(team, home, lambda r: r[job]["status"] == "finished", "alice's job to finish")
    secret = alice_secret(team)
    before = sorted(p.name for p in secret.iterdir())
    as_(team, bob, "mkdir", "-p", str(home / "results"))
    as_(team, bob, "ln", "-s", str(secret), str(home / "results" / str(job)))
    done = team.run(alice, "--home", str(home), "fetch", str(job), check=False, umask="0077")
    # bob's link decides nothing: alice's fetch goes into a folder of her own, never through the link
    # (docs/reference/home-files.md §1.3).
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    hers = [p for p in (home / "results").iterdir() if p.name.startswith(f"{job}-")]
    assert len(hers) == 1 and not hers[0].is_symlink() and hers[0].stat().st_uid == team.uid(alice), hers
    assert done.stderr.splitlines() == [f"fetched into {hers[0]}"], done.stderr
    assert (hers[0] / "out.txt").read_text() == "result\n"
    assert sorted(p.name for p in secret.iterdir()) == before
    assert (secret / "authorized_keys").read_text() == "alice's key\n"


def test_links_and_a_foreign_folder_at_a_jobs_logs_fail_that_job_alone(team: Team) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    secret = alice_secret(team)
    linked = submit_as(team, alice, home, "sleep 2; echo into the link")
    foreign = submit_as(team, alice, home, "sleep 2; echo into bobs folder")
    fine = submit_as(team, alice, home, "sleep 2; echo fine")
    (home / "logs").mkdir(exist_ok=True)
    os.chown(home / "logs", team.uid(alice), team.gid)
    (home / "logs").chmod(0o2770)
    as_(team, bob, "ln", "-s", str(secret), str(home / "logs" / str(linked)))
    as_(team, bob, "bash", "-c", f"umask 022; mkdir {home / 'logs' / str(foreign)}")
    said = passes(team, home, lambda r: all(r[j]["status"] in ("finished", "failed") for j in (linked, foreign, fine)),
                  "the three jobs to end")
    jobs = rows(team, home)
    assert jobs[fine]["status"] == "finished", jobs[fine]
    for job in (linked, foreign):
        assert (jobs[job]["status"], jobs[job]["reason"]) == ("failed", "home_file"), jobs[job]
        assert any(f"logs/{job}" in line for line in said), said
    assert sorted(p.name for p in secret.iterdir()) == ["authorized_keys"]
    assert (secret / "authorized_keys").read_text() == "alice's key\n"


def test_fifos_and_held_locks_never_hang_a_pass_or_events(team: Team, holders: list[subprocess.Popen[bytes]]) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    fifo_job = submit_as(team, alice, home, "echo a; sleep 6")
    locked_job = submit_as(team, alice, home, "for i in 1 2 3 4 5 6 7 8; do echo $i; sleep 1; done")
    fine = submit_as(team, alice, home, "echo fine; sleep 6")
    log = home / "logs" / str(fifo_job) / "0.0.log"
    held_log = home / "logs" / str(locked_job) / "0.0.log"
    passes(team, home, lambda r: log.exists() and held_log.exists() and (home / "events.jsonl.lock").exists(),
           "the jobs' first log bytes to come home")
    # In a shared home only alice's account writes logs/ and the events log (docs/reference/home-files.md
    # §1.3): bob cannot put a FIFO there; whatever still does (a slip of alice's, root) costs one line.
    refused = subprocess.run(["runuser", "-u", bob, "--", "mkfifo", "-m", "0660", str(log.with_name("x"))],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused.stderr
    log.unlink()
    plant_fifo(team, bob, log)
    for path in (held_log, home / "events.jsonl.lock"):
        assert path.exists(), path
        holders.append(subprocess.Popen(["runuser", "-u", bob, "--", "flock", str(path), "sleep", "600"],
                                        start_new_session=True))
    wait_for(lambda: all(_locked(path) for path in (held_log, home / "events.jsonl.lock")), what="bob's locks")
    said = passes(team, home, lambda r: r[fine]["status"] == "finished" and r[fifo_job]["status"] == "failed",
                  "the fine job to finish and the FIFO's to fail", timeout=120)
    jobs = rows(team, home)
    assert jobs[fifo_job]["reason"] == "home_file", jobs[fifo_job]
    assert any(f"logs/{fifo_job}/0.0.log: is a FIFO" in line for line in said), said
    assert any("events.jsonl.lock" in line for line in said), said
    assert any(f"logs/{locked_job}/0.0.log is locked" in line for line in said), said
    # A FIFO at events.jsonl: a pass goes on, `jobtpu events` says so in one line.
    (home / "events.jsonl").unlink()
    plant_fifo(team, bob, home / "events.jsonl")
    # Neither waits on the FIFO: each ends (its run's timeout is the hang guard, not a measure).
    team.run(alice, "--home", str(home), "manage", umask="0077", timeout=60, env=QUICK_LOCKS)
    shown = team.run(alice, "--home", str(home), "events", check=False, timeout=60, env=QUICK_LOCKS)
    assert shown.returncode == 1 and "events.jsonl: is a FIFO" in shown.stderr.splitlines()[0], shown.stderr


# ---- tail ------------------------------------------------------------------------------------------

def finished_job(tmp_path: Path) -> tuple[Path, int, Path]:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    job = submit(home, src, "echo done")
    manage_until(home, [job], {"finished"})
    return home, job, home / "logs" / str(job) / "0.0.log"


@pytest.mark.fast
def test_tail_shows_a_jobs_escape_sequences_as_text(tmp_path: Path) -> None:
    home, job, log = finished_job(tmp_path)
    with open(log, "ab") as f:
        f.write(b"\x1b]0;retitled\x07\x1b[31mred\x1b[0m\n")
    out = subprocess.run([*JOBTPU, "--home", str(home), "tail", str(job)], capture_output=True, check=True).stdout
    assert b"\x1b" not in out and b"\x07" not in out, out
    assert b"\\x1b]0;retitled\\x07\\x1b[31mred\\x1b[0m\n" in out, out


RSS = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True); " \
      "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"


@pytest.mark.fast
def test_tail_of_a_large_log_reads_from_its_end(tmp_path: Path) -> None:
    home, job, log = finished_job(tmp_path)
    with open(log, "r+b") as f:
        f.truncate(200 << 20)  # sparse: 200 MB of holes, then the last lines
        f.seek(0, os.SEEK_END)
        f.write(b"\nsecond to last\nthe last line\n")
    assert log.stat().st_blocks * 512 < (10 << 20)
    tailed = subprocess.run([*JOBTPU, "--home", str(home), "tail", "-n", "2", str(job)], capture_output=True,
                            check=True).stdout
    assert tailed.endswith(b"second to last\nthe last line\n"), tailed[-100:]

    def peak_kb(*cmd: str) -> int:
        return int(subprocess.run([sys.executable, "-c", RSS, *cmd], capture_output=True, text=True,
                                  check=True).stdout)
    whole = peak_kb(sys.executable, "-c", f"open({str(log)!r}, 'rb').read()")
    tail = peak_kb(*JOBTPU, "--home", str(home), "tail", str(job))
    assert whole > (200 << 10)  # reading it whole costs its size
    assert tail < whole / 2, (tail, whole)


# ---- the local machine's run root (docs/design.md §4) ---------------------------------------------

def loose_entries(root: Path, allowed: int) -> list[str]:
    """The entries under `root` (links aside) whose mode grants more than `allowed` to group and others."""
    bad = []
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077 & ~allowed:
            bad.append(f"{path.relative_to(root)}: {stat.filemode(st.st_mode)}")
    return bad


@pytest.mark.fast
def test_a_private_home_from_a_clone_keeps_its_run_folder_to_its_owner(tmp_path: Path) -> None:
    was = os.umask(0o022)
    try:
        home = make_home(tmp_path)
        home.chmod(0o755)  # as a clone's folder is
        src = tmp_path / "src"
        src.mkdir()
        job = submit(home, src, "echo my key is 1234; mkdir -p out; echo x > out/file")
        manage_until(home, [job], {"finished"})
    finally:
        os.umask(was)
    assert (home / "run" / "meta" / str(job)).is_dir()
    assert not loose_entries(home / "run", 0), loose_entries(home / "run", 0)


def test_a_shared_homes_run_folder_is_never_world_readable_and_refuses_a_planted_job_folder(team: Team) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    secret = alice_secret(team)
    first = submit_as(team, alice, home, "echo my key is 1234")
    passes(team, home, lambda r: r[first]["status"] == "finished", "alice's first job to finish")
    assert not loose_entries(home / "run", 0o070), loose_entries(home / "run", 0o070)
    # bob cannot make the next job's folder his own: run/ is alice's alone in a shared home.
    planted = home / "run" / "meta" / str(first + 1)
    refused = subprocess.run(["runuser", "-u", bob, "--", "mkdir", str(planted)], capture_output=True, text=True)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused.stderr
    # A folder of bob's there all the same (made by root), with a link where the log goes, fails that
    # launch alone and is never written through.
    planted.mkdir()
    os.symlink(secret / "authorized_keys", planted / "0.0.log")
    os.chown(planted, team.uid(bob), team.gid)
    os.lchown(planted / "0.0.log", team.uid(bob), team.gid)
    second = submit_as(team, alice, home, "echo overwrite")
    fine = submit_as(team, alice, home, "echo fine")
    assert second == first + 1
    passes(team, home, lambda r: r[second]["status"] == "failed" and r[fine]["status"] == "finished",
           "the planted job to fail and the other to finish")
    failed = rows(team, home)[second]
    assert failed["reason"] == "launch_failed" and str(planted) in failed["last_line"], failed
    assert (secret / "authorized_keys").read_text() == "alice's key\n"
    loose = [e for e in loose_entries(home / "run", 0o070) if not e.startswith(f"meta/{second}:")]  # bob's own
    assert not loose, loose


@pytest.mark.fast
@pytest.mark.parametrize("name", ["state.json", "users.json", "users/tester/settings.json", "secrets.json",
                                  "history.jsonl"])
def test_a_fifo_where_a_home_file_goes_is_one_line_never_a_hang(tmp_path: Path, name: str) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    first = submit(home, src, "true", "--env", "WANDB_API_KEY=k1")
    manage_until(home, [first], {"finished"})
    if name == "history.jsonl":
        jobtpu(home, "clean", str(first))  # moves the job there
    (home / name).parent.mkdir(parents=True, exist_ok=True)
    (home / name).unlink(missing_ok=True)
    os.mkfifo(home / name)
    args = ["status", str(first)] if name == "history.jsonl" else \
        ["submit", "--dir", str(src), "--cmd", "true", "--env", "WANDB_API_KEY=k2"]
    done = jobtpu(home, *args, check=False, timeout=30)  # a hang fails here
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{name}: is " in done.stderr.splitlines()[0] and "regular file" in done.stderr, done.stderr


@pytest.mark.fast
def test_tail_of_an_attempt_whose_vm_went_says_what_the_home_kept_and_when(tmp_path: Path) -> None:
    """docs/reference/commands.md §2.3: an attempt preempted with its VM shows what the home kept, and
    when it went; one of which the home kept nothing says so, never "no log yet" for ever."""
    home, job, log = finished_job(tmp_path)
    state = json.loads((home / "state.json").read_text())
    record = next(j for j in state["jobs"] if j["id"] == job)
    record["attempts"][0].update(outcome="preempted", ended=1_800_000_000.0)
    (home / "state.json").write_text(json.dumps(state))
    kept = jobtpu(home, "tail", str(job), "--attempt", "0")
    assert kept.stdout == "done\n"
    assert kept.stderr.startswith(f"jobtpu: job {job} attempt 0 ran on local until it was preempted at "), kept.stderr
    assert "above is what the home kept (5 bytes)" in kept.stderr, kept.stderr
    log.unlink()
    lost = jobtpu(home, "tail", str(job), "--attempt", "0", check=False)
    assert lost.returncode == 1 and "Traceback" not in lost.stderr, lost.stderr
    line = lost.stderr.splitlines()[0]
    assert line.startswith(f"jobtpu: error: job {job} attempt 0 ran on local until it was preempted at ") and \
        line.endswith("the home kept no log of worker 0: its VM went before a pass or a loop brought any home"), line
