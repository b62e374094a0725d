"""A standby runner (docs/reference/home-files.md §1.7): the lease's rules as a table, its words, and
two or three runners on one home as boxes of their own (processes with their own $JOBTPU_BOX, as
a second box is to the lease): a runner killed in the middle of a pass, one stopped past its lease,
a planned handover, two standbys at once, a damaged lease, a home gone away, and a chaos run of
kills and stops over jobs on local slots and an SSH box."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from jobtpu.home import fence, lease
from jobtpu.home.layout import Home
from jobtpu.home.lease_rules import Held, Lease, Me, Seen, judge
from jobtpu.home.lease_view import filesystem_line, filesystem_of, lease_lines
from jobtpu.home.store import Store
from tests.helpers import JOBTPU, make_home, status, submit, wait_for
from tests.sshfleet import SshFleet

INTERVAL = 0.3
LEASE_INTERVALS = 10  # a 3 s lease: a pass on a loaded machine never outlasts it
# How long a wait for an event may last on a machine busy enough to starve a runner for many leases:
# the takeover's timing is the lease rules' (table-tested above), the end-to-end tests wait on the event.
EVENTUALLY = 120
ENV = {**os.environ, "JOBTPU_USER": "tester", **timing.env(lease_intervals=LEASE_INTERVALS)}


# ---- the rules, pure -------------------------------------------------------------------------------

A, B = Me("run", "boxA", 10), Me("run", "boxB", 20)
L1 = Lease(1, "run", "boxA", 10, 3.0, 1000.0, 5)


@pytest.mark.parametrize(("top", "current", "me", "held", "standby", "seen", "now", "want"), [
    (0, None, A, None, False, None, 50.0, ("take", 1)),  # the first runner
    (0, None, B, None, True, None, 50.0, ("wait", 0)),  # a standby with no runner watches first
    (0, None, B, None, True, Seen(0, 0, 40.0, "b1"), 50.0, ("take", 1)),  # ... for a whole lease
    (1, L1, A, Held(1, 49.0, 3.0), False, None, 50.0, ("renew", 1)),
    (2, None, A, Held(1, 49.0, 3.0), False, None, 50.0, ("fenced", 1)),  # a higher token: lost
    (1, L1, A, Held(1, 46.0, 3.0), False, None, 50.0, ("fenced", 1)),  # paused past its lease
    (1, L1, A, Held(1, 47.2, 3.0), False, None, 50.0, ("fenced", 1)),  # ... or nearly (the margin)
    (1, L1, A, None, False, None, 50.0, ("renew", 1)),  # the same runner's next process (cron)
    (1, L1, B, None, False, None, 50.0, ("wait", 0)),  # no standby: never takes another's lease
    (1, L1, B, None, True, None, 50.0, ("wait", 0)),  # a standby starts watching
    (1, L1, B, None, True, Seen(1, 5, 48.0, "b1"), 50.0, ("wait", 0)),  # not a lease yet
    (1, L1, B, None, True, Seen(1, 5, 47.0, "b1"), 50.0, ("take", 2)),  # unchanged for a lease
    (1, L1, B, None, True, Seen(1, 4, 40.0, "b1"), 50.0, ("wait", 0)),  # it was renewed since
    (1, L1, B, None, True, Seen(1, 5, 40.0, "b0"), 50.0, ("wait", 0)),  # watched on another boot
    (1, L1._replace(renewed=0.0), B, None, True, Seen(1, 5, 49.0, "b1"), 50.0, ("wait", 0)),  # a clock far behind
    (1, L1._replace(renewed=9e9), B, None, True, Seen(1, 5, 47.0, "b1"), 50.0, ("take", 2)),  # ... or ahead
    (1, L1._replace(released=True), B, None, True, None, 50.0, ("take", 2)),  # handed over: at once
    (1, L1._replace(released=True), A, None, True, None, 50.0, ("wait", 0)),  # not back to who released it
    (3, None, B, None, False, None, 50.0, ("wait", 0)),  # damaged: a plain pass does nothing
    (3, None, B, None, True, Seen(3, -1, 40.0, "b1"), 50.0, ("take", 4)),  # a standby takes it after a lease
])
def test_the_lease_rules(top: int, current: Lease | None, me: Me, held: Held | None, standby: bool,
                         seen: Seen | None, now: float, want: tuple[str, int]) -> None:
    step = judge(top, current, me, held, standby, seen, now, "b1", 3.0)
    assert (step.kind, step.token) == want
    if step.kind == "fenced" or (step.kind == "wait" and not standby):
        assert step.line and "\n" not in step.line  # one line says why


MOUNTS = ("proc /proc proc rw 0 0\n/dev/sda1 / ext4 rw 0 0\nfiler:/teams /mnt/teams nfs4 rw 0 0\n"
          "gcs /mnt/bucket fuse.gcsfuse rw 0 0\n")


@pytest.mark.parametrize(("path", "kind", "problem", "says"), [
    ("/home/me/.jobtpu", "ext4", False, "local to this box"),
    ("/mnt/teams/ml/home", "nfs4", False, "a standby runner on another box can work here"),
    ("/mnt/teamsx/home", "ext4", False, "local"),  # a prefix of a name is not its mount point
    ("/mnt/bucket/home", "fuse.gcsfuse", True, "a standby cannot work here"),
])
def test_the_homes_filesystem_for_a_standby(path: str, kind: str, problem: bool, says: str) -> None:
    assert filesystem_of(path, MOUNTS) == kind
    line, bad = filesystem_line(kind)
    assert bad is problem and says in line


def test_the_lease_in_words_damaged_or_from_a_clock_ahead() -> None:
    assert "damaged" in lease_lines(4, None, [], 1000.0)[0][0]
    lines = lease_lines(1, L1._replace(renewed=2000.0), [("run@boxB", 999.0)], 1000.0)
    assert "clocks of this box and boxA differ" in lines[1][0] and lines[1][1]
    assert lines[-1][0].startswith("standby: run@boxB")


def test_the_runner_token_is_recorded_in_state_jsons_head() -> None:
    head = b'  "version": 1,\n  "next_id": 4,\n  "last_pass": {},\n'
    stamped = fence.with_token(head, 7)
    assert stamped == b'  "version": 1,\n  "next_id": 4,\n  "runner_token": 7,\n  "last_pass": {},\n'
    assert fence.token_in(b"{\n" + fence.with_token(stamped, 9)) == 9
    assert fence.token_in(b"{\n" + head) == 0


def test_cron_installs_a_standbys_passes(tmp_path: Path) -> None:
    from jobtpu.commands.cron import cron_line, unit_files

    assert " manage --every 300 --standby >> " in cron_line(tmp_path, 5, standby=True)
    assert "--standby" not in cron_line(tmp_path, 5)
    service = next(text for name, text in unit_files(tmp_path, 1, standby=True).items() if name.endswith(".service"))
    assert '"manage" "--every" "60" "--standby"\n' in service
    refused = run_cli(tmp_path, "cron", "show", "--standby")
    assert refused.returncode == 2 and "are options of `cron install`" in refused.stderr


# ---- one process: what a runner that lost its lease may still do -----------------------------------

def test_a_runner_that_lost_its_lease_saves_nothing_and_launches_nothing(tmp_path: Path) -> None:
    home_dir = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    job = submit(home_dir, src, "true")
    home = Home(home_dir)
    try:
        assert fence.round_(home, standby=True, interval=INTERVAL) == (False, [])  # a standby watches first
        lease.create(home, Lease(1, "run", "elsewhere", 1, 60.0, time.time(), 0))  # another runner holds it
        assert fence.round_(home, standby=False, interval=INTERVAL)[0] is False  # no standby: waits
        fence._held[str(home.root)] = Held(1, time.monotonic(), 60.0)  # as if this process held token 1
        assert lease.create(home, Lease(2, "run", "boxB", 2, 60.0, time.time(), 0))  # boxB took over
        before = (home_dir / "state.json").read_bytes()
        with pytest.raises(fence.Fenced, match="lost the lease"), Store(home).transaction() as state:
            state.require_job(job).note = "a stale runner's edit"
        assert (home_dir / "state.json").read_bytes() == before
        fence._held[str(home.root)] = Held(2, time.monotonic() - 61.0, 60.0)  # holds 2, paused past it
        from jobtpu.passes.manage import run_pass
        with pytest.raises(fence.Fenced, match="past its lease"):
            run_pass(home)
        assert (home_dir / "state.json").read_bytes() == before and status(home_dir)[job]["status"] == "queued"
    finally:
        fence.drop(home)


def test_a_runner_that_hands_the_lease_over_stands_by_from_then_on(tmp_path: Path) -> None:
    home = Home(make_home(tmp_path))
    lease.ensure(home)
    try:
        assert fence.round_(home, standby=False, interval=INTERVAL) == (True, ["this runner takes the lease (token 1)"])
        lease.ask_handover(home, "someone")
        go, lines = fence.round_(home, standby=False, interval=INTERVAL)
        assert not go and lines[-1] == "this runner handed the lease over (token 1); it now stands by"
        assert lease.read(home, 1).released and not lease.handover_asked(home)  # type: ignore[union-attr]
        assert lease.create(home, Lease(2, "run", "boxB", 2, 60.0, time.time(), 0))  # a standby took it
        assert fence.round_(home, standby=False, interval=INTERVAL) == (False, [])  # it watches, as a standby
    finally:
        fence.drop(home)
        fence._handed_over.clear()


def test_a_worker_refuses_the_launch_of_a_runner_older_than_one_it_has_seen(tmp_path: Path) -> None:
    from jobtpu.decide.workers import LaunchSpec, WorkerRef
    from jobtpu.remote.scripts import launch_script, parse_launch
    from jobtpu.snapshot.archive import snapshot

    root = tmp_path / "root"
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    snap = snapshot(src, root / "archives")

    def launch(job: int, token: int) -> tuple[str, str]:
        ref = WorkerRef(job, 0, 0)
        script = launch_script([LaunchSpec(ref, str(root), snap.name, "true", {}, home_id="h1", token=token)])
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
        report = parse_launch(done.stdout)[ref]
        return report.outcome, report.detail

    assert launch(1, 5)[0] == "ok"  # the runner of token 5 launched here
    outcome, detail = launch(2, 4)  # a runner that lost its lease to it
    assert outcome == "fail" and "newer lease token" in detail
    assert not (root / "jobs" / "2").exists() and not (root / "meta" / "2" / "0.0.pid").exists()
    assert launch(3, 6)[0] == "ok" and launch(4, 0)[0] == "ok"  # a newer runner; a home without a lease


# ---- runners as processes of their own boxes ---------------------------------------------------------

class Runner:
    """`jobtpu manage --loop --standby` as box `box`; its stderr in a file the test reads as it runs."""

    def __init__(self, home: Path, box: str, logs: Path, env: dict[str, str] | None = None) -> None:
        self.box, self.err = box, logs / f"{box}.{time.monotonic_ns()}.err"
        with self.err.open("w") as err:
            self.proc = subprocess.Popen([*JOBTPU, "--home", str(home), "manage", "--loop", str(INTERVAL), "--standby"],
                                         stdout=subprocess.DEVNULL, stderr=err,
                                         env={**ENV, "JOBTPU_BOX": self.box, **(env or {})})

    def said(self) -> str:
        return self.err.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def runners(tmp_path: Path) -> Iterator[list[Runner]]:
    started: list[Runner] = []
    yield started
    for runner in started:
        runner.stop()


def holder(home: Path) -> tuple[int, str | None]:
    """The lease in force: its token and its box (None: damaged or none)."""
    top, current = lease.current(Home(home))
    return top, current.box if current is not None else None


def start(runners: list[Runner], home: Path, box: str, tmp_path: Path, env: dict[str, str] | None = None) -> Runner:
    runner = Runner(home, box, tmp_path, env)
    runners.append(runner)
    return runner


def ssh_home(tmp_path: Path, ssh_fleet: SshFleet, slots: int = 2) -> tuple[Path, Path]:
    """A home whose jobs run on an ssh machine, which every box reaches alike (a local job waits for its
    own box's runner: test_standby_local.py); and the file its jobs' starts are recorded in."""
    box = ssh_fleet.add_machine("box")
    machine = {"kind": "ssh", "hosts": [h.address() for h in box.hosts], "user": box.user,
               "identity_file": str(ssh_fleet.identity), "connect_timeout": 3, "resources": {"slot": slots}}
    return make_home(tmp_path, {"box": machine}), box.home / "starts"


REMOTE_STARTS = Path("$HOME/starts")  # a job's start file on the ssh machine, as its command names it


def counting_job(starts: Path, seconds: float = 0.3) -> str:
    """A command that records each start of the job (its id and attempt) and runs a while."""
    return f'echo "$JOBTPU_JOB_ID $JOBTPU_ATTEMPT" >> {starts}; sleep {seconds}'


def assert_once_each(ids: list[int], *start_files: Path) -> None:
    starts = Counter(int(line.split()[0]) for f in start_files if f.exists() for line in f.read_text().splitlines())
    assert {i: starts[i] for i in ids} == dict.fromkeys(ids, 1), "a job lost or started twice"


def ended_told(home: Path) -> set[int]:
    events = [json.loads(line) for line in (home / "events.jsonl").read_text().splitlines()]
    return {e["job"] for e in events if e["kind"] == "job_ended"}


def test_a_runner_killed_in_a_pass_is_replaced_within_its_lease(tmp_path: Path, runners: list[Runner],
                                                                 ssh_fleet: SshFleet) -> None:
    home, starts = ssh_home(tmp_path, ssh_fleet)
    src = tmp_path / "src"
    src.mkdir()
    active = start(runners, home, "boxA", tmp_path)
    wait_for(lambda: holder(home) == (1, "boxA"), what="boxA to take the lease")
    standby = start(runners, home, "boxB", tmp_path)
    wait_for(lambda: (home / "lease" / "seen.root@boxB").exists(), what="boxB to stand by")
    ids = [submit(home, src, counting_job(REMOTE_STARTS)) for _ in range(6)]
    # In the middle of a pass: its intents saved (a job launching), its result not yet.
    wait_for(lambda: any(j["status"] == "launching" for j in status(home).values()), interval=0.01,
             what="a pass that is launching")
    active.proc.send_signal(signal.SIGKILL)
    # When it takes over is the lease rules' (their table above), on the standby's own clock: a bound on
    # the test's wall time would fail on a machine busy enough to starve the standby. It takes over once.
    wait_for(lambda: holder(home) == (2, "boxB"), timeout=EVENTUALLY, what="boxB to take over")
    wait_for(lambda: all(j["status"] == "finished" for j in status(home).values()), timeout=60,
             what="every job to finish under boxB")
    assert_once_each(ids, starts)
    wait_for(lambda: set(ids) <= ended_told(home), what="every end told")  # told right after the result's save
    assert "root@boxA's lease expired (token 1" in standby.said() and "Traceback" not in standby.said()
    assert json.loads((home / "state.json").read_text())["runner_token"] == 2
    events = run_cli(home, "events").stdout
    assert "runner: root@boxB took over from root@boxA (lease token 2)" in events
    shown = run_cli(home, "status")
    assert "runner: root@boxB" in shown.stderr and "lease token 2" in shown.stderr


def run_cli(home: Path, *words: str, box: str = "boxC") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*JOBTPU, "--home", str(home), *words], capture_output=True, text=True, timeout=60,
                          env={**ENV, "JOBTPU_BOX": box})


def locks_held(pid: int, *paths: Path) -> set[Path]:
    """Which of these lock files process `pid` holds a flock on (from /proc/locks)."""
    inodes = {p.stat().st_ino: p for p in paths if p.exists()}
    held = set()
    for line in Path("/proc/locks").read_text().splitlines():
        words = line.split()
        if len(words) > 5 and words[1] == "FLOCK" and int(words[4]) == pid:
            inode = int(words[5].rsplit(":", 1)[1])
            if inode in inodes:
                held.add(inodes[inode])
    return held


def stop_in_a_pass(proc: subprocess.Popen[bytes], home: Path) -> None:
    """SIGSTOP the runner in the middle of a pass: holding the pass lock, not the state lock (held only
    for a save: a runner stopped in it holds up every writer until it goes on, home-files.md §1.7)."""
    pass_lock, state_lock = home / "manage.lock", home / "state.json.lock"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T",
                 interval=0.001, what="the runner to stop")  # its locks are still only once it has
        if locks_held(proc.pid, pass_lock, state_lock) == {pass_lock}:
            return
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.005)
    raise AssertionError("the runner was never caught in a pass")


def test_a_runner_stopped_past_its_lease_wakes_to_write_nothing_and_exits(tmp_path: Path, runners: list[Runner],
                                                                           ssh_fleet: SshFleet) -> None:
    home, starts = ssh_home(tmp_path, ssh_fleet)
    src = tmp_path / "src"
    src.mkdir()
    active = start(runners, home, "boxA", tmp_path)
    wait_for(lambda: holder(home) == (1, "boxA"), what="boxA to take the lease")
    start(runners, home, "boxB", tmp_path)
    first = [submit(home, src, counting_job(REMOTE_STARTS, 0.1)) for _ in range(2)]
    stop_in_a_pass(active.proc, home)
    wait_for(lambda: holder(home) == (2, "boxB"), timeout=EVENTUALLY, what="boxB to take over")
    later = [submit(home, src, counting_job(REMOTE_STARTS, 0.1)) for _ in range(3)]
    # The new runner runs them while the old one stays stopped, even if it stopped holding the pass lock.
    wait_for(lambda: all(status(home)[i]["status"] == "finished" for i in first + later), timeout=60,
             what="boxB to run jobs while boxA is stopped")
    said_before = active.said()
    active.proc.send_signal(signal.SIGCONT)
    assert active.proc.wait(timeout=30) == fence.Fenced.exit_code
    woke = active.said()[len(said_before):].splitlines()
    assert len(woke) == 1 and ("past its lease" in woke[0] or "lost the lease" in woke[0]), woke
    assert_once_each([*first, *later], starts)
    assert json.loads((home / "state.json").read_text())["runner_token"] == 2


def test_a_planned_handover_and_two_standbys_never_make_two_runners(tmp_path: Path, runners: list[Runner]) -> None:
    home = make_home(tmp_path, slots=2)
    a = start(runners, home, "boxA", tmp_path)
    wait_for(lambda: holder(home) == (1, "boxA"), what="boxA to take the lease")
    assert stat.S_IMODE((home / "lease").stat().st_mode) == 0o700  # a private home's: the owner's alone
    start(runners, home, "boxB", tmp_path)
    wait_for(lambda: (home / "lease" / "seen.root@boxB").exists(), what="boxB to stand by")
    asked = run_cli(home, "runner", "handover")
    assert asked.returncode == 0 and "asked root@boxA to hand the lease over (token 1)" in asked.stderr
    wait_for(lambda: holder(home) == (2, "boxB"), timeout=EVENTUALLY, what="boxB to take the handed-over lease")
    assert a.proc.poll() is None and "handed the lease over (token 1); it now stands by" in a.said()
    shown = run_cli(home, "runner").stdout
    assert "runner: root@boxB" in shown and "standby: root@boxA" in shown and "home filesystem: " in shown
    checked = run_cli(home, "doctor")
    assert "runner: root@boxB" in checked.stderr and "home filesystem: " in checked.stderr
    # A third box stands by too; the runner dies: one standby takes token 3, never both.
    start(runners, home, "boxC", tmp_path)
    wait_for(lambda: (home / "lease" / "seen.root@boxC").exists(), what="boxC to stand by")
    b = next(r for r in runners if r.box == "boxB")
    b.proc.send_signal(signal.SIGKILL)
    wait_for(lambda: holder(home)[0] == 3, timeout=EVENTUALLY, what="a standby to take over")
    winner = holder(home)[1]
    assert winner in ("boxA", "boxC")
    # The other standby watches token 3 being renewed (its beat moves on) and takes nothing.
    other = home / "lease" / f"seen.root@{'boxC' if winner == 'boxA' else 'boxA'}"
    wait_for(lambda: seen_of(other)[0] == 3, timeout=EVENTUALLY, what="the other standby to watch token 3")
    first = seen_of(other)[1]
    wait_for(lambda: seen_of(other)[1] >= first + 2, timeout=EVENTUALLY, what="token 3 to be renewed twice")
    assert sorted(lease.tokens(Home(home)))[-1] == 3 and holder(home) == (3, winner)


def seen_of(path: Path) -> tuple[int, int]:
    """The token and beat a standby last watched (lease/seen.<runner>@<box>); (0, -1) before it has."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0, -1
    return int(doc["token"]), int(doc["beat"])


def test_a_damaged_lease_and_a_home_gone_away_are_one_line_each(tmp_path: Path, runners: list[Runner]) -> None:
    home = make_home(tmp_path, slots=2)
    (home / "lease").mkdir()
    (home / "lease" / "1").write_text("{not a lease")
    shown = run_cli(home, "runner")
    assert shown.stdout.splitlines()[0].startswith("runner lease: lease/1 is damaged")
    plain = run_cli(home, "manage")
    assert plain.returncode == 0 and plain.stderr.count("\n") == 1 and "lease/1 is damaged" in plain.stderr
    b = start(runners, home, "boxB", tmp_path)
    wait_for(lambda: holder(home) == (2, "boxB"), timeout=EVENTUALLY, what="a standby to take the damaged lease")
    away = tmp_path / "away"
    home.rename(away)  # the home's filesystem gone: the runner writes nothing, makes no new home
    wait_for(lambda: "lease cannot be read" in b.said(), timeout=EVENTUALLY, what="the runner to say so")
    assert not home.exists()
    # Past its lease while the home is away: its last renewal (a wall time, on this one machine) is a lease old.
    away_lease = lease.current(Home(away))[1]
    assert away_lease is not None and away_lease.box == "boxB"
    wait_for(lambda: time.time() > away_lease.renewed + away_lease.seconds, timeout=EVENTUALLY,
             what="boxB's lease to run out while the home is away")
    away.rename(home)
    assert b.proc.wait(timeout=30) == fence.Fenced.exit_code
    assert len([line for line in b.said().splitlines() if "cannot be read" in line]) == 1  # once, not each round
    assert "Traceback" not in b.said()


# ---- chaos ----------------------------------------------------------------------------------------

def waits_elsewhere(rows: dict[int, dict[str, Any]], box: str | None) -> bool:
    """Whether a job launching or running on the local machine of a box other than the lease holder's waits."""
    return any(j["status"] in ("launching", "running") and j["attempts"] and j["attempts"][-1].get("box") not in
               (None, box) for j in rows.values())


def progressed(home: Path, done_before: int) -> bool:
    """More jobs finished, or some wait for a runner on another box (a handover's turn)."""
    rows = status(home)
    return sum(j["status"] == "finished" for j in rows.values()) > done_before or waits_elsewhere(rows, holder(home)[1])


def test_chaos_kills_and_stops_of_both_runners_lose_no_job_and_start_none_twice(
        tmp_path: Path, runners: list[Runner], ssh_fleet: SshFleet) -> None:
    box = ssh_fleet.add_machine("box")
    home = tmp_path / "home"
    home.mkdir()
    machines: dict[str, Any] = {
        "local": {"kind": "local", "resources": {"slot": 4}},
        "box": {"kind": "ssh", "hosts": [h.address() for h in box.hosts], "user": box.user,
                "identity_file": str(ssh_fleet.identity), "connect_timeout": 3, "resources": {"slot": 4}}}
    (home / "machines.json").write_text(json.dumps({"machines": machines}))
    src = tmp_path / "src"
    src.mkdir()
    local_starts, box_starts = tmp_path / "starts", box.home / "starts"
    ids = [submit(home, src, counting_job(local_starts if n % 2 else Path("$HOME/starts"), 0.2),
                  "--machine", "local" if n % 2 else "box") for n in range(100)]
    for name in ("boxA", "boxB"):
        start(runners, home, name, tmp_path)
    faults = 0
    deadline = time.monotonic() + 900  # a hang guard only: the rounds wait on events, the count is what is checked
    while True:
        rows = status(home)
        if all(j["status"] == "finished" for j in rows.values()):
            break
        assert time.monotonic() < deadline, "the jobs did not all end under chaos"
        top, box_name = holder(home)
        # A local job waits for its own box's runner (home-files.md §1.7): hand the lease to it, as a person would.
        if waits_elsewhere(rows, box_name):
            assert run_cli(home, "runner", "handover").returncode == 0
            wait_for(lambda t=top: holder(home)[0] > t, timeout=EVENTUALLY, what="the standby to take the lease")
            continue
        victim = next((r for r in runners if r.box == box_name and r.proc.poll() is None), None)
        done_before = sum(j["status"] == "finished" for j in rows.values())
        wait_for(lambda n=done_before: progressed(home, n), timeout=EVENTUALLY, what="the runner to make progress")
        if victim is None or faults >= 6:
            continue
        if faults % 2 == 0:
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            start(runners, home, victim.box, tmp_path)  # the box comes back, as a standby
        else:
            victim.proc.send_signal(signal.SIGSTOP)
            wait_for(lambda t=top: holder(home)[0] > t, timeout=EVENTUALLY, what="the other runner to take over")
            victim.proc.send_signal(signal.SIGCONT)
            assert victim.proc.wait(timeout=30) == fence.Fenced.exit_code
            start(runners, home, victim.box, tmp_path)
        faults += 1
    assert faults >= 4
    assert_once_each(ids, local_starts, box_starts)
    wait_for(lambda: set(ids) <= ended_told(home), what="every end told")
    # Each stop made the other runner take over (a killed box that comes back may go on with its own lease).
    assert lease.tokens(Home(home))[-1] >= 1 + faults // 2
