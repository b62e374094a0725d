"""A job hands a value back (docs/reference/python.md §11.5): `jobtpu.save_result` in the job, the pass
bringing it home with the attempt's log, `Job.result()` / `Job.exception()`, `jobtpu.as_completed`
and `Home.wait`, through the real API on a real home with real passes, on the local machine and on
an ssh box."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from tests.helpers import cli, make_home, wait_for, write_tree
from tests.sshfleet import SshFleet
from tests.test_ssh_jobs import code_dir, write_fleet

REPO = Path(__file__).resolve().parent.parent
SHORT = {"follow_poll": 0.05}
SAVES = ("import sys, jobtpu\n"
         "jobtpu.save_result({'loss': 0.25, 'layers': '32,64', 'args': sys.argv[1:]})\n")
# The file itself, for a job that is no Python program: $JOBTPU_RESULT (docs/reference/job-environment.md).
BY_HAND = "printf '[1, \"a,b\", null]\\n' > \"$JOBTPU_RESULT\""
TOO_BIG = ("python3 -c 'import os; open(os.environ[\"JOBTPU_RESULT\"], \"w\").write(\"[\" + \"0,\" * 600000 + \"0]\")'")


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(timing.ENV, json.dumps(SHORT))
    monkeypatch.setenv("JOBTPU_USER", "tester")
    import jobtpu

    return jobtpu


def test_a_job_s_value_comes_home_and_a_failure_is_an_error(api: Any, tmp_path: Path) -> None:
    project = write_tree(tmp_path / "project", {"train.py": SAVES})
    with api.Home(make_home(tmp_path / "home")) as home:
        saves = home.submit("python3 train.py", dir=project, env={"PYTHONPATH": str(REPO)}, overrides={"steps": 3})[0]
        by_hand = home.submit(BY_HAND, dir=project)[0]
        nothing = home.submit("true", dir=project)[0]
        fails = home.submit("echo no; exit 3", dir=project)[0]
        held = home.submit("true", dir=project, hold=True)[0]
        ended = list(api.as_completed([saves, by_hand, nothing, fails], timeout=120))
        assert sorted(j.id for j in ended) == [1, 2, 3, 4] and all(j.ended for j in ended)
        assert {id(j) for j in ended} == {id(saves), id(by_hand), id(nothing), id(fails)}  # the caller's own handles
        assert saves.result() == {"loss": 0.25, "layers": "32,64", "args": ["--steps=3"]}
        assert saves.exception() is None
        assert by_hand.result(timeout=0) == [1, "a,b", None]
        assert nothing.result() is None and nothing.status == "finished"
        error = fails.exception()
        assert isinstance(error, api.JobFailed) and isinstance(error, api.JobtpuError)
        assert error.message == "job 4 failed (exit 3)" and error.hint and error.job_exit_code == 3
        with pytest.raises(api.JobFailed) as raised:
            fails.result()
        assert str(raised.value) == f"job 4 failed (exit 3)\nhint: {error.hint}"  # a notebook shows both
        # A result the pass does not bring home: its line says why, and result() raises it.
        too_big = home.submit(TOO_BIG, dir=project)[0]
        not_json = home.submit("echo oops > \"$JOBTPU_RESULT\"", dir=project)[0]
        said: list[str] = []

        def both_ended() -> bool:
            said.extend(home.manage())
            return all(j.refresh().ended for j in (too_big, not_json))

        wait_for(both_ended, what="the two jobs to end")
        for refused, why in ((too_big, "bytes, more than 1048576"), (not_json, "is not JSON")):
            with pytest.raises(api.JobtpuError) as raised:
                refused.result()
            assert raised.value.message.startswith(f"job {refused.id} finished, but its result ")
            assert why in raised.value.message and not isinstance(raised.value, api.JobFailed)
            assert [line for line in said if line.startswith(f"job {refused.id}: its result")] == \
                [raised.value.message.replace(" finished, but", ":")]
        with pytest.raises(TimeoutError, match="job 5 is still queued"):
            held.result(timeout=0.2)
        held.kill()
        assert isinstance(held.exception(timeout=0), api.JobFailed) and held.exception().message == "job 5 killed"
        assert home.wait([saves, held], timeout=0) == [saves, held]
        (home.path / "logs" / str(saves.id) / "0.result.json").write_text('{"value": [1, ')  # a damaged copy
        with pytest.raises(api.JobtpuError) as raised:
            saves.result()
        assert raised.value.message == f"logs/{saves.id}/0.result.json: not a result jobtpu kept"
    code, out, err = cli(home.path, "manage")  # nothing is pulled twice: the results are home already
    assert code == 0 and "result" not in out + err


def test_saving_outside_a_job_or_a_value_that_is_no_json_is_one_line(api: Any, monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.delenv("JOBTPU_RESULT", raising=False)
    with pytest.raises(api.JobtpuError, match=r"not inside a jobtpu job \(\$JOBTPU_RESULT is not set\)"):
        api.save_result(1)
    monkeypatch.setenv("JOBTPU_RESULT", str(tmp_path / "0.0.result"))
    for bad, says in ((object(), "is not JSON"), (float("nan"), "is not JSON"), ("x" * (1 << 20), "more than 1048576")):
        with pytest.raises(api.JobtpuError, match=says) as raised:
            api.save_result(bad)
        assert "\n" not in raised.value.message and raised.value.hint
    assert not os.listdir(tmp_path)  # nothing half-written
    api.save_result({"ok": [1, 2]})
    api.save_result({"ok": [3]})  # a later call replaces it
    assert json.loads((tmp_path / "0.0.result").read_text()) == {"ok": [3]} and os.listdir(tmp_path) == ["0.0.result"]


def test_worker_0_s_value_comes_home_from_an_ssh_box_after_the_whole_log(api: Any, tmp_path: Path,
                                                                        ssh_fleet: SshFleet) -> None:
    box = ssh_fleet.add_machine("box", n_hosts=2)
    home_dir = tmp_path / "home"
    write_fleet(home_dir, ssh_fleet, {"box": (box, {})})
    # Each worker saves its own value; its log is longer than a probe brings in one round (1 MiB).
    cmd = ("printf '{\"worker\": %s, \"hosts\": \"%s\"}' \"$JOBTPU_WORKER\" \"$JOBTPU_HOSTS\" > \"$JOBTPU_RESULT\"; "
           "head -c 2500000 /dev/zero | tr '\\0' x; echo")
    with api.Home(home_dir) as home:
        job = home.submit(cmd, dir=code_dir(tmp_path), machine="box")[0]
        assert job.result(timeout=120) == {"worker": 0, "hosts": ",".join(h.addr for h in box.hosts)}
        assert (home_dir / "logs" / str(job.id) / "0.0.log").stat().st_size == 2500001  # the result came after it
        assert [a.logs_behind for a in job.record.attempts] == [False]
        # The other worker's value stays on its worker, where the job wrote it.
        kept = box.home / "jobtpu" / "meta" / str(job.id) / "0.1.result"
        assert json.loads(kept.read_text())["worker"] == 1
        assert not (home_dir / "logs" / str(job.id) / "0.1.result.json").exists()


def test_a_job_s_import_of_save_result_loads_nothing_of_the_command_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import sys, jobtpu\nbefore = set(sys.modules)\njobtpu.save_result([1])\n"
            "print(' '.join(sorted(m for m in set(sys.modules) - before if m.startswith('jobtpu') or '.' not in m)))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "JOBTPU_RESULT": str(tmp_path / "0.0.result")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) <= {"jobtpu.errors", "jobtpu.result", "json", "_json"}, done.stdout
    assert json.loads((tmp_path / "0.0.result").read_text()) == [1]
