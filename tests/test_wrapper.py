"""The wrapper's helpers (jobtpu/remote/sh/wrapper.sh) in a real bash. Its watches (the time limit and
the stop request) run where the job cannot reach them by its group, its session or its parent's
children, and end with the job: the wrapper records the job's exit only once a watch is gone with
all it started, so nothing of it outlives that record (docs/reference/commands.md §2.2.6). A watch
signals the job's processes only, never a process that reuses one of their pids."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jobtpu.remote import scripts
from tests.helpers import wait_for, watch_processes

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast

MARK = "h0me.7.0.0"


def program(body: str) -> str:
    return "\n".join(["set -u", scripts.script_file("common.sh"), scripts.script_file("wrapper.sh"), body])


def stat_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # fields from the 3rd on


@pytest.mark.parametrize("watch", [
    'JOBTPU_w_timer USR1 30 "$$" "$start" "" 50 "$PWD/stem" "$JOBTPU_MARK"',  # --signal due in 30 s
    'JOBTPU_w_timer "" 0 "$$" "$start" 60 50 "$PWD/stem" "$JOBTPU_MARK"',  # a --timeout of 60 s
    'JOBTPU_w_stopper "$PWD/no-request" 30 5 "$$" "$start" "$JOBTPU_MARK"',  # a stop watch polling every 30 s
])
def test_a_watch_is_out_of_the_jobs_reach_and_gone_with_all_it_started_when_told(watch: str, tmp_path: Path) -> None:
    body = ('read -r -a st < /proc/$$/stat; start=${st[21]}; JOBTPU_w_fds=()\n'
            f'JOBTPU_w_detach "$PWD/fifo" {watch} || exit 3\n'
            'echo started; read -r _\n'
            'JOBTPU_w_end "$JOBTPU_w_L" "$JOBTPU_w_G"; echo ended\n')
    shell = subprocess.Popen(["bash", "-c", program(body)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=tmp_path, env={**os.environ, "JOBTPU_MARK": MARK})
    assert shell.stdout is not None and shell.stdin is not None
    try:
        assert shell.stdout.readline() == "started\n"
        def the_watch() -> list[int]:  # not a subshell it forked (the same words), which may come and go
            found = watch_processes(tmp_path)
            try:
                return [p for p in found if int(stat_of(p)[1]) not in found]
            except OSError:
                return []

        [pid] = wait_for(the_watch, what="the watch to start")
        ours, its = stat_of(shell.pid), stat_of(pid)
        # ppid, pgid, session: none is the job's (the shell plays the wrapper, the group's leader)
        assert its[1] != str(shell.pid) and its[2] != ours[2] and its[3] != ours[3], (its, ours)
        assert b"JOBTPU_MARK=" not in Path(f"/proc/{pid}/environ").read_bytes()
        assert not (tmp_path / "fifo").exists()
        shell.stdin.write("go\n")
        shell.stdin.flush()
        assert shell.stdout.readline() == "ended\n"
        assert watch_processes(tmp_path) == []  # gone, with everything it started, when JOBTPU_w_end returns
    finally:
        shell.kill()
        shell.wait()


def test_a_group_under_a_reused_pid_is_none_of_the_jobs(tmp_path: Path) -> None:
    """The wrapper's pid, once it is gone, may come back as another process's group: a watch then finds
    no process of the job's in it (its leader started at another time, and none carries the marker)."""
    foreign = subprocess.Popen(["setsid", "sleep", "60"], env={k: v for k, v in os.environ.items() if k != "JOBTPU_MARK"})
    try:
        wait_for(lambda: stat_of(foreign.pid)[2] == str(foreign.pid), what="the group of its own")
        start = int(stat_of(foreign.pid)[19])
        body = (f'echo "other start: $(JOBTPU_w_procs {foreign.pid} {start + 1} {MARK} | tr "\\n" " ")"\n'
                f'echo "its start: $(JOBTPU_w_procs {foreign.pid} {start} {MARK} | tr "\\n" " ")"\n')
        done = subprocess.run(["bash", "-c", program(body)], capture_output=True, text=True, cwd=tmp_path,
                              env={**os.environ, "JOBTPU_MARK": "another.1.0.0"}, timeout=30)
        assert done.stdout.splitlines() == ["other start: ", f"its start: {foreign.pid} "], done.stdout + done.stderr
    finally:
        foreign.kill()
        foreign.wait()


def test_a_launch_gone_before_the_wrappers_word_leaves_the_job_running(tmp_path: Path) -> None:
    """The wrapper tells its launch on fd 3 that its pid is recorded (jobtpu/remote/sh/launch.sh). A
    launch killed meanwhile (its pass shot) has closed the pipe's other end: the word is lost, never
    the job, which a SIGPIPE would have taken with it (seen in tests/test_crash.py)."""
    body = ('exec {k}<> <(:); exec 3> "/proc/self/fd/$k"; exec {k}>&-\n'  # fd 3: a pipe nobody reads
            ': > "$PWD/stem.env"\n'
            'jobtpu_wrapper "$PWD/stem" "echo ran > $PWD/ran" "" 0 0022 "" 5\n')
    done = subprocess.run(["setsid", "bash", "-c", program(body)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "JOBTPU_MARK": MARK}, timeout=60)
    assert (tmp_path / "ran").read_text() == "ran\n", done
    assert (tmp_path / "stem.exit").read_text().strip() == "0", done
