"""state.json (docs/reference/state-json.md §4): atomic saves with a .bak, precise refusal of bad edits, hand edits honoured,
ids never reused."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobtpu.errors import BusyError, ConfigError
from jobtpu.home import store as store_module
from jobtpu.home.layout import Home
from jobtpu.home.store import Store, hold_lock
from jobtpu.schema.state import Attempt, Ending, Job, State, Status
from tests.helpers import jobtpu, make_home, manage_until, status, submit

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast



def new_job(job_id: int = 0, **kw: Any) -> Job:
    return Job(id=job_id, **{"user": "u", "cmd": "echo hi", "archive": "a.tar.gz", "created": 1.0, **kw})


def add(store: Store, **kw: Any) -> int:
    with store.transaction() as state:
        job = new_job(state.next_id, **kw)
        state.next_id += 1
        state.jobs.append(job)
    return job.id


def record(**kw: Any) -> dict[str, Any]:
    return {**msgspec.to_builtins(new_job(1)), **kw}


def write_state(home: Home, jobs: list[dict[str, Any]], **top: Any) -> str:
    text = json.dumps({"version": 1, "next_id": 10, "jobs": jobs, "machines": {}, **top}, indent=1)
    home.state_file.write_text(text)
    return text


def refused(home: Home) -> str:
    before = home.state_file.read_bytes()
    with pytest.raises(ConfigError) as info:
        Store(home).load()
    with pytest.raises(ConfigError), Store(home).transaction() as state:
        state.next_id += 1  # never reached
    assert home.state_file.read_bytes() == before
    assert "\n" not in info.value.message and str(home.state_file) in (info.value.hint or "")
    return info.value.message


# ---- saving ---------------------------------------------------------------------------------------

def test_save_is_atomic_and_bak_holds_the_previous_good_copy(tmp_path: Path) -> None:
    home = Home(tmp_path)
    store = Store(home)
    assert store.load().jobs == [] and not home.state_file.exists()
    add(store)
    first = home.state_file.read_text()
    assert not home.state_backup.exists()  # there was no previous copy
    add(store)
    second = home.state_file.read_text()
    assert home.state_backup.read_text() == first
    add(store, name="three")
    assert home.state_backup.read_text() == second
    doc = json.loads(home.state_file.read_text())
    assert doc["version"] == 1 and doc["next_id"] == 4 and [j["id"] for j in doc["jobs"]] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.json.bak", "state.json.lock"]


def test_unchanged_transaction_writes_nothing_and_an_exception_saves_nothing(tmp_path: Path) -> None:
    home = Home(tmp_path)
    store = Store(home)
    add(store)
    add(store)
    before, bak, mtime = home.state_file.read_bytes(), home.state_backup.read_bytes(), home.state_file.stat().st_mtime_ns
    with store.transaction() as state:
        assert len(state.jobs) == 2
    with pytest.raises(RuntimeError), store.transaction() as state:
        state.jobs.clear()
        raise RuntimeError("boom")
    assert home.state_file.read_bytes() == before and home.state_backup.read_bytes() == bak
    assert home.state_file.stat().st_mtime_ns == mtime


def test_data_is_fsynced_before_the_rename_and_a_failed_rename_keeps_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Home(tmp_path)
    store = Store(home)
    add(store)
    good = home.state_file.read_bytes()
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(f"fsync {Path(os.readlink(f'/proc/self/fd/{fd}')).name}")
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        calls.append(f"replace {Path(dst).name}")
        if Path(dst).name == "state.json":
            raise OSError("disk on fire")
        real_replace(src, dst)

    monkeypatch.setattr(store_module.os, "fsync", fsync)
    monkeypatch.setattr(store_module.os, "replace", replace)
    with pytest.raises(OSError, match="disk on fire"):
        add(store)
    # The backup is the old file itself (a hard link: its data is on disk already), in place first.
    assert calls.index("replace state.json") > calls.index("replace state.json.bak")
    # The new file's data reached the disk before the rename that makes it state.json.
    synced_temp = next(i for i, c in enumerate(calls) if c.startswith("fsync .state.json.") and c.endswith(".tmp"))
    assert synced_temp < calls.index("replace state.json")
    assert home.state_file.read_bytes() == good  # the crash left the last good file in place
    assert [j.id for j in store.load().jobs] == [1]


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    store = Store(Home(tmp_path))
    threads = [threading.Thread(target=lambda: [add(Store(Home(tmp_path))) for _ in range(15)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    state = store.load()
    assert sorted(j.id for j in state.jobs) == list(range(1, 61)) and state.next_id == 61


def test_a_held_lock_times_out_with_a_busy_error(tmp_path: Path) -> None:
    home = Home(tmp_path)
    with Store(home).lock(), pytest.raises(BusyError, match="state.json is locked"), \
            hold_lock(home.state_lock, 0.1, what="state.json"):
        pass


# ---- round trip ----------------------------------------------------------------------------------

HOSTILE = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
ENV_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True).filter(lambda n: not n.startswith("JOBTPU_"))


@settings(max_examples=60, deadline=None)
@given(cmd=HOSTILE.filter(str.strip), name=HOSTILE, tags=st.lists(HOSTILE, max_size=3),
       env=st.dictionaries(ENV_NAMES, HOSTILE, max_size=3), reason=st.sampled_from([None, "exit 3", "lost"]))
def test_every_field_survives_a_save_and_load(tmp_path_factory: pytest.TempPathFactory, cmd: str, name: str,
                                              tags: list[str], env: dict[str, str], reason: str | None) -> None:
    home = Home(tmp_path_factory.mktemp("rt"))
    job = Job(id=7, user="u", cmd=cmd, archive="x.tar.gz", created=12.5, name=name, req=["gpu=2", "v3+"], pin="m",
              machine="m", status=Status.KILLING, reason=reason, exit_code=3, attempt=1, tags=tags, rule="resume",
              env=env, overrides=["'--a=b c'"], log_stage=True, max_recoveries=4, recoveries=1, timeout=60.0,
              stall=5, resume=True, alloc={"gpu": [1, 3]}, log_size=9, log_grew=11.0, last_line=name, dir=name,
              attempts=[Attempt(0, "m", "lost", None, 1.0, 2.0), Attempt(1, "m", None, None, 3.0, None, True, 2)],
              ending=Ending(Status.FAILED, "exit 3", 3, None))
    with Store(home).transaction() as state:
        state.jobs.append(job)
        state.next_id = 8
    loaded = Store(home).load()
    assert loaded.jobs == [job] and loaded.next_id == 8


# ---- syntax errors and invalid edits -----------------------------------------------------------------

def test_syntax_error_names_line_and_column_and_changes_nothing(tmp_path: Path) -> None:
    home = Home(tmp_path)
    add(Store(home))
    good = home.state_file.read_text()
    assert '"cmd":"echo hi",' in good  # one job per line
    broken = good.replace('"cmd":"echo hi",', '"cmd":"echo hi"', 1)
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if '"cmd"' in text)
    home.state_file.write_text(broken)
    message = refused(home)
    assert message.startswith(f"state.json:{line}:") and message.endswith(": Expecting ',' delimiter")
    home.state_file.write_text('{"version": 1,\n "jobs": [}\n')
    assert refused(home) == "state.json:2:11: Expecting value"


@pytest.mark.parametrize(("edit", "needle"), [
    ({"colour": "red"}, "job 1: $.jobs[0]: object contains unknown field colour (valid: after, after_any, alloc, archive, "),
    ({"cmd": 5}, "job 1: $.jobs[0].cmd: expected str, got int"),
    ({"attempt": "0"}, "job 1: $.jobs[0].attempt: expected int, got str"),
    ({"log_stage": 1}, "job 1: $.jobs[0].log_stage: expected bool, got int"),
    ({"created": True}, "job 1: $.jobs[0].created: expected int | float, got bool"),
    ({"tags": "a,b"}, "job 1: $.jobs[0].tags: expected array, got str"),
    ({"tags": [1]}, "job 1: $.jobs[0].tags[0]: expected str, got int"),
    ({"env": {"A": 1}}, "job 1: $.jobs[0].env[...]: expected str, got int"),
    ({"status": "done"}, "job 1: $.jobs[0].status: invalid enum value 'done' (valid: queued, launching, running, "
                         "killing, finished, failed, killed)"),
    ({"reason": "bored"}, "job 1: field 'reason' is not a known reason: 'bored'"),
    ({"rule": "retry"}, "job 1: field 'rule' must be one of pre, pass, reapply, rerun, resume or null (got 'retry')"),
    ({"cmd": "  "}, "job 1: field 'cmd' is empty"),
    ({"id": 0}, "job 0: field 'id' must be a positive integer"),
    ({"status": "running", "machine": None}, "job 1: a running job needs a 'machine'"),
    ({"status": "launching", "machine": ""}, "job 1: a launching job needs a 'machine'"),
    ({"attempts": [{"n": "0", "machine": "m"}]}, "job 1: $.jobs[0].attempts[0].n: expected int, got str"),
    ({"attempts": [{"n": 0, "machine": "m"}, 5]}, "job 1: $.jobs[0].attempts[1]: expected object, got int"),
    ({"attempts": [{"n": 0, "machine": "m", "outcome": "meh"}]}, "job 1: attempts[0].outcome must be null, 'finished'"),
    ({"attempts": {"n": 0}}, "job 1: $.jobs[0].attempts: expected array, got object"),
    ({"ending": {"status": "running", "reason": None}}, "job 1: ending.status must be one of failed, finished, killed"),
    ({"ending": {"status": "failed", "recover": "again"}}, "job 1: ending.recover must be one of resume, rerun"),
    ({"ending": []}, "job 1: $.jobs[0].ending: expected object | null, got array"),
    ({"archive": "../../etc/x.tar.gz"}, "job 1: field 'archive' must be an archive's bare file name"),
    ({"archive": "$(reboot).tar.gz"}, "job 1: field 'archive' must be an archive's bare file name"),
    ({"env": {"A B": "x"}}, "job 1: field 'env': 'A B' is not a variable name"),
    ({"env": {"JOBTPU_USER": "x"}}, "job 1: field 'env': 'JOBTPU_USER' is not a variable name"),
    ({"alloc": {"gpu;rm": [0]}}, "job 1: field 'alloc': 'gpu;rm' is not a resource name"),
    ({"alloc": {"gpu": [5000]}}, "job 1: field 'alloc': alloc.gpu must list at most 1024 indices"),
    ({"timeout": -1}, "job 1: field 'timeout' must be a number of seconds above 0"),
    ({"recoveries": -1}, "job 1: field 'recoveries' must be 0 or more"),
    ({"attempts": [{"n": 0, "machine": "m", "colour": 1}]}, "colour"),
    ({"alloc": {"gpu": 1}}, "job 1: $.jobs[0].alloc[...]: expected array, got int"),
    ({"attempts": [{"n": 0, "machine": "m", "workers": 0}]}, "job 1: attempts[0].workers must be 1 to 1024"),
    ({"exit_code": 2**64}, "job 1: field 'exit_code' is too large"),
    ({"req": ["gpu=x"]}, "job 1: field 'req': --req 'gpu=x': a resource request is NAME=COUNT"),
])
def test_invalid_job_edits_are_refused_precisely(tmp_path: Path, edit: dict[str, Any], needle: str) -> None:
    home = Home(tmp_path)
    write_state(home, [record(**edit)])
    message = refused(home)
    assert message.startswith("state.json: ") and needle in message, message


@pytest.mark.parametrize(("doc", "needle"), [
    ([], "state.json: $: expected object, got array"),
    ({"jobs": [], "queue": []}, "state.json: $: object contains unknown field queue (valid: jobs, last_pass, "
                                "machines, next_id, runner_token, untold, version)"),
    ({"version": 2}, "state.json: version 2 is not one this jobtpu reads (1)"),
    ({"jobs": {}}, "state.json: $.jobs: expected array, got object"),
    ({"jobs": [5]}, "state.json: $.jobs[0]: expected object, got int"),
    ({"next_id": "3"}, "state.json: $.next_id: expected int, got str"),
    ({"machines": {"m": 1}}, "state.json: machine 'm': $.machines['m']: expected object, got int"),
    ({"machines": {"m": {"operation": "x"}}},
     "state.json: machine 'm': $.machines['m'].operation: expected object | null, got str"),
    ({"machines": {"m": {"operation": {"kind": "x", "name": "op"}}}},
     "state.json: machine 'm': $.machines['m'].operation.kind: invalid enum value 'x' (valid: create, delete)"),
    ({"machines": {"m": {"operation": {"kind": "create"}}}},
     "state.json: machine 'm': $.machines['m'].operation: object missing required field name"),
    ({"machines": {"ok": {}, "m": {"setup": {"status": 1}}}},
     "state.json: machine 'm': $.machines['m'].setup.status: expected str, got int"),
    ({"machines": {"m": {"failures": "2"}}}, "state.json: machine 'm': $.machines['m'].failures: expected int, got str"),
    ({"machines": {"m": {"failures": -1}}}, "state.json: machine 'm': failures must be 0 or more"),
    ({"machines": {"m": {"host_keys": [5]}}},
     "state.json: machine 'm': $.machines['m'].host_keys[0]: expected array, got int"),
    ({"machines": {"m": {"want_recreate": 1}}},
     "state.json: machine 'm': $.machines['m'].want_recreate: expected bool, got int"),
    ({"jobs": [{"id": 1}]}, "state.json: job 1: $.jobs[0]: object missing required field user"),
    ({"jobs": [record(), record(cmd="other")]}, "state.json: job id 1 appears twice"),
])
def test_invalid_top_level_edits_are_refused_precisely(tmp_path: Path, doc: Any, needle: str) -> None:
    home = Home(tmp_path)
    home.state_file.write_text(json.dumps(doc))
    assert refused(home) == needle


def test_ids_are_never_reused(tmp_path: Path) -> None:
    home = Home(tmp_path)
    store = Store(home)
    for _ in range(3):
        add(store)
    doc = json.loads(home.state_file.read_text())
    doc["jobs"] = [j for j in doc["jobs"] if j["id"] != 3]  # the newest, deleted by hand
    home.state_file.write_text(json.dumps(doc))
    assert add(store) == 4
    doc = json.loads(home.state_file.read_text())
    doc["next_id"] = 1  # lowered by hand: still no id a present job holds
    home.state_file.write_text(json.dumps(doc))
    assert add(store) == 5


def test_empty_state_file_is_an_empty_queue(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.state_file.write_text("\n")
    assert Store(home).load() == State()


# ---- hand edits through the CLI --------------------------------------------------------------------------

def test_hand_edits_are_honoured_by_status_and_the_next_pass(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("x")
    first, second, third = (submit(home, src, f"echo job {i} > out.txt") for i in (1, 2, 3))
    doc = json.loads((home / "state.json").read_text())
    doc["jobs"][0]["cmd"] = "echo 'edited by hand' > out.txt"
    doc["jobs"] = [j for j in doc["jobs"] if j["id"] != second]
    (home / "state.json").write_text(json.dumps(doc, indent=2))
    jobs = status(home)
    assert list(jobs) == [first, third] and jobs[first]["cmd"] == "echo 'edited by hand' > out.txt"
    manage_until(home, [first, third], {"finished"})
    assert (home / "run" / "jobs" / str(first) / "out.txt").read_text() == "edited by hand\n"
    assert not (home / "run" / "jobs" / str(second)).exists()
    # the newest job deleted by hand: its id is not given out again
    doc = json.loads((home / "state.json").read_text())
    doc["jobs"] = [j for j in doc["jobs"] if j["id"] != third]
    (home / "state.json").write_text(json.dumps(doc))
    assert submit(home, src, "true") == third + 1


def test_cli_refuses_an_invalid_edit_and_leaves_both_files(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    job_id = submit(home, src, "true")
    doc = json.loads((home / "state.json").read_text())
    doc["jobs"].append({**doc["jobs"][0]})  # a duplicate id
    text = json.dumps(doc, indent=1)
    (home / "state.json").write_text(text)
    machines = (home / "machines.json").read_bytes()
    # (`status` lists through a fast path that checks only what a listing needs; every command that
    # changes state validates the whole file)
    for args in (("submit", "--dir", str(src), "--cmd", "true"), ("manage",), ("kill", str(job_id)),
                 ("resume", str(job_id)), ("clean",)):
        done = jobtpu(home, *args, check=False)
        assert done.returncode == 1 and done.stdout == "", args
        assert done.stderr.splitlines()[0] == f"jobtpu: error: state.json: job id {job_id} appears twice", args
        assert len(done.stderr.splitlines()) <= 2 and "Traceback" not in done.stderr
        assert (home / "state.json").read_text() == text and (home / "machines.json").read_bytes() == machines


@pytest.mark.parametrize("knows_its_read", [True, False])
def test_a_session_that_removes_jobs_keeps_jobs_submitted_meanwhile(tmp_path: Path, knows_its_read: bool) -> None:
    from jobtpu.home.machines import load_fleet
    from jobtpu.passes.session import Session

    home = Home(tmp_path)
    old, kept = add(Store(home)), add(Store(home))
    p = Session(home, load_fleet(home), *Store(home).read()) if knows_its_read else \
        Session(home, load_fleet(home), Store(home).load())
    p.state.require_job(kept).name = "renamed"
    p.commit()  # nobody wrote meanwhile (a session that knows its read saves without reading again)
    assert [(j.id, j.name) for j in Store(home).load().jobs] == [(old, ""), (kept, "renamed")]
    p.state.jobs = [j for j in p.state.jobs if j.id != old]  # what `clean` does
    late = add(Store(home))  # a submit while the session runs
    p.commit()
    assert [j.id for j in Store(home).load().jobs] == [kept, late]
    for tags in ([], ["again"]):  # later commits, with or without a change, keep the late job too
        p.state.require_job(kept).tags = tags
        p.commit()
        assert [(j.id, j.tags) for j in Store(home).load().jobs] == [(kept, tags), (late, [])]


# ---- the format on disk ---------------------------------------------------------------------------

# Written by the jobtpu before state.json had a typed schema (dataclasses and hand-written checks).
PREVIOUS_FORMAT = r"""{
  "version": 1,
  "next_id": 7,
  "machines": {
    "local": {"state":"up","detail":null,"since":null},
    "box": {"state":"unreachable","detail":"ssh: timed out","since":1700000000.5},
    "tpu": {"tpu_state":"READY","health":"HEALTHY","health_description":null,"spec":{"acceleratorType":"v3-8","schedulingConfig":{"preemptible":true}},"operation":{"kind":"create","name":"projects/p/locations/z/operations/op-1","since":1700000000.0},"queued_state":null,"want_recreate":true,"zone":"europe-west4-a","addresses":["10.0.0.2","10.0.0.3"],"workers":2,"incarnation":"2024-01-01T00:00:00+00:00","setup":{"status":"failed","tries":1,"error":"boom"},"transient":{"state":"CREATING","since":1700000000.0},"refused":{"message":"bad","spec_key":"abc"},"failures":2,"next_try":1700000100.0,"last_error":"bad","recreations":3,"zone_capacity_failures":1,"moved":"moved from a to b after 2 capacity errors","host_keys":[["ssh-ed25519 AAAA"],["ssh-ed25519 BBBB"]],"host_keys_for":"2024-01-01T00:00:00+00:00","spec_zone":"europe-west4-a","create_sent":1700000000.0,"queue_asked":1700000000.0,"api_error":"creds"}
  },
  "jobs": [
    {"id":1,"user":"ann","cmd":"python train.py --lr 0.01","archive":"ab12.tar.gz","created":1700000000.25,"name":"sweep","req":[],"machine":null,"status":"queued","reason":null,"exit_code":null,"attempt":0,"attempts":[],"tags":["lr"],"rule":null,"last_line":"","dir":"/src"},
    {"id":2,"user":"bob","cmd":"sleep 100","archive":"ab12.tar.gz","created":1700000001,"name":"","req":["gpu=2"],"pin":"local","machine":"local","status":"running","reason":null,"exit_code":null,"attempt":1,"attempts":[{"n":0,"machine":"local","outcome":"preempted","exit_code":null,"started":1700000002,"ended":1700000003.5},{"n":1,"machine":"local","outcome":null,"exit_code":null,"started":1700000004.0,"ended":null,"resume":true,"workers":2}],"tags":[],"rule":"resume","env":{"A":"1","HF_TOKEN":"<secret>"},"overrides":["--config.x=1"],"log_stage":true,"max_recoveries":5,"recoveries":1,"timeout":3600,"resume":true,"alloc":{"slot":[0],"gpu":[1,3]},"log_size":10,"log_grew":1700000005,"last_line":"step 3"},
    {"id":3,"user":"bob","cmd":"true","archive":"ab12.tar.gz","created":1700000010.0,"name":"","req":[],"machine":"tpu","status":"killing","reason":"killed","exit_code":null,"attempt":0,"attempts":[{"n":0,"machine":"tpu","outcome":null,"exit_code":null,"started":1.0,"ended":null}],"tags":[],"rule":null,"stall":60.5,"last_line":"","ending":{"status":"failed","reason":"exit 3","exit_code":3,"recover":"recreate-rerun"}},
    {"id":5,"user":"ann","cmd":"echo","archive":"ab12.tar.gz","created":1700000011.0,"name":"","req":[],"machine":"local","status":"failed","reason":"exit 2","exit_code":2,"attempt":0,"attempts":[{"n":0,"machine":"local","outcome":"exit 2","exit_code":2,"started":5.0,"ended":6.0}],"tags":[],"rule":null,"last_line":""}
  ]
}
"""


def test_a_state_json_written_by_the_previous_jobtpu_loads_and_keeps_every_value(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    (home / "state.json").write_text(PREVIOUS_FORMAT)
    old = json.loads(PREVIOUS_FORMAT)
    # status --json prints the records exactly as the previous jobtpu stored them
    assert json.loads(jobtpu(home, "status", "--all-users", "--json").stdout) == {"jobs": old["jobs"]}
    state = Store(Home(home)).load()
    running = state.require_job(2)
    assert running.attempts[1] == Attempt(1, "local", None, None, 1700000004.0, None, True, 2)
    assert (running.alloc, running.timeout, running.created) == ({"slot": [0], "gpu": [1, 3]}, 3600, 1700000001)
    assert type(running.timeout) is int and type(running.created) is int  # an integer stays one
    assert state.require_job(3).ending == Ending(Status.FAILED, "exit 3", 3, "recreate-rerun")
    tpu = state.machines["tpu"]
    assert tpu.operation is not None and (tpu.operation.kind, tpu.setup and tpu.setup.tries) == ("create", 1)
    with Store(Home(home)).transaction() as edited:
        edited.next_id += 1  # any change: the whole file is written again
    new_text = (home / "state.json").read_text()
    job_lines = [line for line in PREVIOUS_FORMAT.splitlines() if line.lstrip().startswith('{"id"')]
    assert [line for line in new_text.splitlines() if line.lstrip().startswith('{"id"')] == job_lines
    new = json.loads(new_text)
    for name, record in old["machines"].items():  # every value kept; nulls are left out now
        assert new["machines"][name] == {k: v for k, v in record.items() if v is not None}, name


def test_a_stored_job_holds_the_listed_fields_and_leaves_out_other_defaults(tmp_path: Path) -> None:
    home = Home(tmp_path)
    add(Store(home))
    record = json.loads(home.state_file.read_text())["jobs"][0]
    assert list(record) == ["id", "user", "cmd", "archive", "created", "name", "req", "machine", "status", "reason",
                            "exit_code", "attempt", "attempts", "tags", "rule", "last_line"]


@pytest.mark.parametrize(("text", "needle"), [
    ('{"machines": {"tpu": {"spec": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}}}",
     "state.json: nested too deeply to be a jobtpu file"),
    ('{"jobs": [{"id": 1, "user": "u", "cmd": "c", "archive": "a.tar.gz", "created": 1, "name": "\\ud800"}]}',
     "state.json: not valid JSON text"),
    ('{"version": 1, "next_id": 1, "jobs": [], "machines": {"m": {"since": 1e999}}}',
     "state.json: the number 1e999 is too large"),
], ids=["deep-spec", "lone-surrogate", "huge-float"])
def test_what_no_type_bounds_is_one_line_too(tmp_path: Path, text: str, needle: str) -> None:
    """Deep nesting inside a free-form part (a TPU node's recorded spec), text only a lenient parser
    takes, a number beyond a float: one line from every command, never a traceback."""
    home = make_home(tmp_path)
    (home / "state.json").write_text(text)
    for args in (["status"], ["status", "--json"], ["manage"], ["machines"]):
        done = jobtpu(home, *args, check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.splitlines()[0].startswith(f"jobtpu: error: {needle}"), done.stderr


def test_untold_events_are_typed_and_keep_their_bytes(tmp_path: Path) -> None:
    """state.json's `untold` reads as Events (docs/design.md §3) and is written back byte for byte:
    the keys of an event line in the same order, a key at its default left out."""
    from jobtpu.schema.events import Event
    from jobtpu.schema.state_file import decode_state, encode_head

    untold = ('[{"time":1700000000.5,"kind":"job_ended","id":"ab12","job":3,"user":"ann","attempt":0,'
              '"detail":{"status":"failed","reason":"exit 1","exit_code":1}},{"time":1700000001.25,"kind":"pass_failed",'
              '"id":"cd34","detail":{"error":"boom"}}]')
    raw = '{\n  "version": 1,\n  "next_id": 4,\n  "untold": ' + untold + ',\n  "jobs": [],\n  "machines": {}\n}\n'
    state = decode_state(raw.encode(), tmp_path / "state.json")
    assert [type(e) for e in state.untold] == [Event, Event]
    assert state.untold[0].detail["exit_code"] == 1 and state.untold[1].job is None
    assert f'  "untold": {untold},\n'.encode() in encode_head(state)
    assert state.untold[0].to_json() == json.loads(untold)[0]
    bad = raw.replace('"kind":"pass_failed"', '"kind":7')
    with pytest.raises(ConfigError, match=r"untold\[1\]\.kind"):
        decode_state(bad.encode(), tmp_path / "state.json")
