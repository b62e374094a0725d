"""A job cannot end its own --timeout (docs/reference/commands.md §2.2): the wrapper's watches run in
a session of their own, children of no process of the job's and without its marker, so a job that
kills its process group, its session, its parent's children and every process that carries its
marker, then sleeps on, is still stopped at its limit on the worker, with no pass running."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import (
    make_home,
    manage_until,
    pid_alive,
    status,
    submit,
    wait_for,
    watch_processes,
    write_tree,
)

# Every process of the job's but itself: its group, its session, its parent's children (the
# wrapper's), every process that carries its marker. Then it sleeps, ignoring TERM (KILL must come).
ATTACK = r"""trap '' TERM HUP INT
echo $$ > job.pid
g=$(ps -o pgid= -p $$ | tr -d ' '); s=$(ps -o sid= -p $$ | tr -d ' ')
others() {
  ps -eo pid=,pgid=,sid=,ppid= | awk -v me=$$ -v g="$g" -v s="$s" -v pp="$PPID" \
    '$1 != me && ($2 == g || $3 == s || $4 == pp) {print $1}'
  grep -lzx "JOBTPU_MARK=$JOBTPU_MARK" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vx "$$"
}
for round in 1 2 3; do kill -KILL $(others) 2>/dev/null; done
echo attacked > attacked
sleep 300 & wait
"""


def test_a_job_that_kills_all_it_can_reach_of_its_own_is_still_stopped_at_its_limit(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"attack.sh": ATTACK})
    job = submit(home, src, "bash attack.sh", "--timeout", "5s", "--grace", "1")
    manage_until(home, [job], {"running"})  # the last pass until it has ended
    folder, meta = home / "run" / "jobs" / str(job), home / "run" / "meta" / str(job)
    wait_for(lambda: (folder / "attacked").exists(), what="the job to kill everything of its own it reaches")
    pid = int((folder / "job.pid").read_text())
    leader = int((meta / "0.0.pid").read_text().split()[0])
    assert pid_alive(pid) and not pid_alive(leader)  # its wrapper is gone, it lives on
    wait_for(lambda: not pid_alive(pid), timeout=60, what="the job to be stopped at its limit, no pass running")
    assert (meta / "0.0.timedout").exists() and status(home)[job]["status"] == "running"  # no pass saw it yet
    wait_for(lambda: not watch_processes(meta / "0.0"), what="the watch to end with the job")
    jobs = manage_until(home, [job], {"failed"})
    assert jobs[job]["reason"] == "timeout", jobs[job]



def test_a_job_that_kills_all_it_can_reach_of_its_own_still_obeys_a_stop_request(tmp_path: Path) -> None:
    """The stop watch of a local job (a teammate's kill in a shared home, docs/design.md §7) is out of
    the job's reach the same way: the request stops it, TERM ignored, KILL after its grace."""
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"attack.sh": ATTACK})
    job = submit(home, src, "bash attack.sh", "--grace", "1")
    manage_until(home, [job], {"running"})
    folder = home / "run" / "jobs" / str(job)
    wait_for(lambda: (folder / "attacked").exists(), what="the job to kill everything of its own it reaches")
    pid = int((folder / "job.pid").read_text())
    assert pid_alive(pid)
    (home / "run" / "stop" / f"{job}.0").touch()
    wait_for(lambda: not pid_alive(pid), timeout=60, what="the stop request to stop the job, no pass running")
