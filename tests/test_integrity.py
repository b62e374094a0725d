"""Records that cannot lose, leak or reuse: a failed submit leaves no secret behind, ids are never
given out twice whatever happens to state.json, every file jobtpu reads is validated with one line
naming the field, and a shared home cannot redirect jobtpu's writes."""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import cli, jobtpu, make_home, manage_until, status, submit


def one_line_error(done: object, needle: str) -> str:
    """The command failed with exit 1 and one error line (plus an optional hint) holding `needle`."""
    assert done.returncode == 1, (done.stdout, done.stderr)  # type: ignore[attr-defined]
    lines = done.stderr.splitlines()  # type: ignore[attr-defined]
    assert "Traceback" not in done.stderr and 1 <= len(lines) <= 2, done.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith("jobtpu: error: ") and needle in lines[0], lines
    assert len(lines) == 1 or lines[1].startswith("hint: "), lines
    return done.stderr  # type: ignore[attr-defined]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    return folder


# ---- secrets and ids ------------------------------------------------------------------------------

def test_a_submit_that_fails_while_saving_leaves_no_secret_for_the_next_job(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    (home / "state.json").write_text('{"jobs": []}')
    (home / "state.json.bak").mkdir()  # the save fails after the secret was filed: no .bak can replace it
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--env", "WANDB_API_KEY=ann-secret",
                  check=False, env={"JOBTPU_USER": "ann"})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert (home / "state.json").read_text() == '{"jobs": []}'
    assert "ann-secret" not in (home / "secrets.json").read_text() if (home / "secrets.json").exists() else True
    (home / "state.json.bak").rmdir()
    job = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "env > env.txt",
                     env={"JOBTPU_USER": "bob"}).stdout)
    assert job == 2  # the failed submit spent id 1: nothing filed under it is ever adopted
    manage_until(home, [job], {"finished"})
    env = (home / "run" / "jobs" / str(job) / "env.txt").read_text()
    assert "ann-secret" not in env and "WANDB_API_KEY" not in env


def test_clean_drops_secrets_no_job_holds(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    kept = submit(home, src, "true", "--env", "HF_TOKEN=kept")
    done = submit(home, src, "true", "--env", "HF_TOKEN=done")
    secrets = json.loads((home / "secrets.json").read_text())
    secrets["7"] = {"HF_TOKEN": "left by a submit that failed"}
    (home / "secrets.json").write_text(json.dumps(secrets))
    jobtpu(home, "kill", str(done))
    jobtpu(home, "clean")
    assert set(json.loads((home / "secrets.json").read_text())) == {str(kept)}


def test_ids_are_never_reused_when_state_json_is_deleted_before_any_run(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    first = submit(home, src, "true")
    (home / "state.json").unlink()  # one save so far: no .bak, no logs — a fresh queue, but not fresh ids
    assert submit(home, src, "true") == first + 1


@pytest.mark.parametrize("how", ["empty", "deleted"])
def test_a_lost_state_json_in_a_home_with_history_is_refused(tmp_path: Path, src: Path, how: str) -> None:
    home = make_home(tmp_path)
    first = submit(home, src, "echo one > out.txt")
    second = submit(home, src, "sleep 30")
    manage_until(home, [first], {"finished"})
    assert status(home)[second]["status"] == "running"
    backup = (home / "state.json.bak").read_bytes()
    if how == "empty":
        (home / "state.json").write_bytes(b"")
    else:
        (home / "state.json").unlink()
    for args in (["submit", "--dir", str(src), "--cmd", "echo two > out.txt"], ["manage"], ["status"],
                 ["status", "--json"], ["status", "--all-users"], ["kill", str(second)], ["clean"], ["machines"],
                 ["tail", str(first)], ["resume", str(first)]):
        err = one_line_error(jobtpu(home, *args, check=False), f"state.json is {'empty' if how == 'empty' else 'missing'}")
        assert f"cp {home / 'state.json.bak'} {home / 'state.json'}" in err, err
    assert (home / "state.json.bak").read_bytes() == backup  # never overwritten with a degenerate copy
    assert (home / "state.json").exists() == (how == "empty")
    # Restored as the hint says: the running job is still known, and the next id is new.
    (home / "state.json").write_bytes(backup)
    assert status(home)[second]["status"] == "running"
    third = submit(home, src, "true")
    assert third > second
    jobtpu(home, "kill", str(second))


def test_an_empty_queue_written_on_purpose_is_accepted_and_ids_stay_new(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    first = submit(home, src, "true")
    manage_until(home, [first], {"finished"})
    (home / "state.json").write_text('{"jobs": []}')
    assert status(home) == {}
    assert submit(home, src, "true") == first + 1


# ---- validation: every file jobtpu reads ----------------------------------------------------------

def assert_success_or_one_line(rc: int, err: str) -> None:
    if rc == 0:
        return
    lines = err.splitlines()
    assert "Traceback" not in err and lines and lines[0].startswith("jobtpu: error: "), err
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), err


def _template_state(home: Path, src: Path) -> dict[str, Any]:
    """A state.json with a job in every shape a pass meets: queued, running, killing with an ending,
    ended with attempts, secrets, allocations, and machine records."""
    first = submit(home, src, "true", "--env", "WANDB_API_KEY=k", "--req", "slot=1")
    doc = json.loads((home / "state.json").read_text())
    base = doc["jobs"][0]
    attempt = {"n": 0, "machine": "local", "outcome": None, "exit_code": None, "started": 5.0, "ended": None,
               "resume": False, "workers": 1}
    doc["jobs"] = [
        base,
        {**base, "id": first + 1, "status": "running", "machine": "local", "attempt": 0, "attempts": [attempt],
         "alloc": {"slot": [0]}, "env": {"A": "1"}, "tags": ["t"], "timeout": 60.0},
        {**base, "id": first + 2, "status": "killing", "machine": "local", "attempts": [attempt],
         "alloc": {"slot": [1]}, "ending": {"status": "killed", "reason": "killed", "exit_code": None, "recover": None}},
        {**base, "id": first + 3, "status": "failed", "reason": "exit 3", "exit_code": 3, "machine": "local",
         "attempt": 1, "attempts": [{**attempt, "outcome": "preempted", "ended": 6.0},
                                    {**attempt, "n": 1, "outcome": "exit 3", "exit_code": 3, "ended": 7.0}]},
    ]
    doc["next_id"] = first + 4
    doc["machines"] = {"local": {"state": "up", "detail": None, "since": None},
                       "tpu": {"state": "recreating", "operation": {"kind": "create", "name": "op", "since": 1.0},
                               "setup": {"status": "done", "incarnation": "x"}, "addresses": ["10.0.0.1"],
                               "host_keys": [["ssh-ed25519 AAAA"]], "failures": 1, "want_recreate": False}}
    return doc


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document (the root excluded)."""
    out: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        out.append((*prefix, key))
        out.extend(_paths(child, (*prefix, key)))
    return out


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
              st.floats(allow_nan=False, allow_infinity=False),
              st.sampled_from(["", "x", "running", "../../x.tar.gz", "a b", "exit 1", "local", "gpu", "1e9",
                               "$(id)", "finished", "create", "JOBTPU_USER", "0"])),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.sampled_from(["n", "machine", "status", "kind", "x", "gpu", "slot"]),
                                               children, max_size=3)),
    max_leaves=6)
COMMANDS = [["status"], ["status", "--json"], ["status", "--all-users"], ["status", "2"], ["tail", "4"],
            ["machines"], ["manage", "--dry-run"], ["manage"], ["kill", "2"], ["resume", "4"], ["rerun", "4"],
            ["clean"], ["submit", "--dir", "{src}", "--cmd", "true"]]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("template")
    src = base / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    home = make_home(base)
    return home, src, _template_state(home, src)


@pytest.mark.starts_first  # long: handed out first under -n (tests/conftest.py)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_edit_of_state_json_gives_success_or_one_line(template: tuple[Path, Path, dict[str, Any]],
                                                          tmp_path_factory: pytest.TempPathFactory,
                                                          data: st.DataObject) -> None:
    template_home, src, doc = template
    doc = copy.deepcopy(doc)
    assert cli(template_home, "status")[0] == 0
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        path = data.draw(st.sampled_from(_paths(doc)), label="where")
        *parent_path, key = path
        parent = doc
        for step in parent_path:
            parent = parent[step]
        if data.draw(st.booleans(), label="delete") and isinstance(parent, dict):
            del parent[key]
        else:
            parent[key] = data.draw(JSON_VALUES, label="value")
    home = tmp_path_factory.mktemp("edited") / "home"
    shutil.copytree(template_home, home, ignore=shutil.ignore_patterns("*.lock", "cache"))
    (home / "state.json").write_text(json.dumps(doc))
    args = [a.format(src=src) for a in data.draw(st.sampled_from(COMMANDS), label="command")]
    before = (home / "state.json").read_bytes()
    rc, _, err = cli(home, *args)
    assert_success_or_one_line(rc, err)
    if rc != 0:
        assert (home / "state.json").read_bytes() == before, "a refused command changed state.json"
    if args[0] == "manage" and rc == 0:  # a pass that went through must be able to go through again
        rc, _, err = cli(home, "kill", "2", "3")
        assert_success_or_one_line(rc, err)
    shutil.rmtree(home.parent, ignore_errors=True)


DEEP = "[" * 100_000


@pytest.mark.parametrize(("name", "readers"), [
    ("state.json", {"submit", "status", "manage", "clean"}), ("machines.json", {"submit", "manage", "clean"}),
    ("secrets.json", {"submit", "clean"}),
    ("history.jsonl", set()),  # appended to, scanned for ids
    ("archives/.hashcache.json", set())])  # a damaged hash cache only costs a re-hash
def test_deeply_nested_json_is_one_line_in_every_file(tmp_path: Path, src: Path, name: str, readers: set[str]) -> None:
    home = make_home(tmp_path)
    (home / "state.json").write_text('{"jobs": []}')  # (a home with history and no state.json is refused)
    (home / name).parent.mkdir(exist_ok=True)
    (home / name).write_text(DEEP)
    for args in (["submit", "--dir", str(src), "--cmd", "true", "--env", "HF_TOKEN=x"], ["status"], ["manage"],
                 ["clean"]):
        done = jobtpu(home, *args, check=False)
        if args[0] in readers:
            one_line_error(done, f"{name}: nested too deeply")
        else:
            assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("text", "needle"), [
    ('{"version": 1, "next_id": 1e999, "jobs": []}', "state.json: the number 1e999 is too large"),
    ('{"version": 1, "next_id": NaN, "jobs": []}', "state.json: NaN is not a number JSON allows"),
    ('{"version": 1, "next_id": ' + "9" * 5000 + ', "jobs": []}', "state.json: the number 99999"),
])
def test_numbers_json_cannot_carry_are_one_line(tmp_path: Path, text: str, needle: str) -> None:
    home = make_home(tmp_path)
    (home / "state.json").write_text(text)
    for args in (["status"], ["status", "--all-users", "--json"], ["manage"]):
        one_line_error(jobtpu(home, *args, check=False), needle)


TPU_FLEET = {"gcp": {"project": "p", "api_endpoint": "http://127.0.0.1:9", "credentials": "anonymous"},
             "machines": {"local": {"kind": "local"},
                          "tpu": {"kind": "tpu", "node": "n", "zone": "z", "accelerator": "v3-8"}}}


@pytest.mark.parametrize(("name", "record", "needle"), [
    ("local", {"state": "up", "operation": "x"}, "$.machines['local'].operation: expected object | null, got str"),
    ("tpu", {"spec": "x"}, "$.machines['tpu'].spec: expected object | null, got str"),
    ("tpu", {"refused": "x"}, "$.machines['tpu'].refused: expected object | null, got str"),
    ("tpu", {"zone": 5}, "$.machines['tpu'].zone: expected str | null, got int"),
    ("tpu", {"api_error": ["x"]}, "$.machines['tpu'].api_error: expected str | null, got array"),
    ("tpu", {"setup": {"status": "done", "tries": "1"}}, "$.machines['tpu'].setup.tries: expected int, got str"),
    ("tpu", {"operation": {"kind": "create"}}, "$.machines['tpu'].operation: object missing required field name"),
    ("tpu", {"transient": {"since": 1}}, "$.machines['tpu'].transient: object missing required field state"),
    ("tpu", {"recreations": -1}, "recreations must be 0 or more"),
])
def test_a_hand_edited_machine_record_is_refused_by_every_command(tmp_path: Path, src: Path, name: str,
                                                                 record: dict[str, Any], needle: str) -> None:
    """A machine's record is jobtpu's memory of it; a hand edit that breaks it is one line naming the
    machine and the path, from every command, never a traceback in the middle of a pass."""
    home = make_home(tmp_path, TPU_FLEET["machines"])
    (home / "machines.json").write_text(json.dumps(TPU_FLEET))
    job = submit(home, src, "true", "--machine", "local")
    doc = json.loads((home / "state.json").read_text())
    doc["machines"][name] = record
    (home / "state.json").write_text(json.dumps(doc))
    for args in (["manage", "--dry-run"], ["machines"], ["machines", "--json"], ["kill", str(job)], ["status"],
                 ["status", "--all-users", "--json"]):
        one_line_error(jobtpu(home, *args, check=False), f"state.json: machine {name!r}: {needle}")


def test_status_refuses_what_every_other_command_refuses(tmp_path: Path, src: Path) -> None:
    """The quick listing path checks only the listed fields of a file jobtpu saved itself; after a
    hand edit it validates as fully as the rest, so `status` and `manage` agree."""
    home = make_home(tmp_path)
    job = submit(home, src, "true")
    assert status(home)[job]["status"] == "queued"  # the per-user listing is current
    text = (home / "state.json").read_text().replace('"archive":"', '"archive":"../../', 1)
    (home / "state.json").write_text(text)
    needle = f"state.json: job {job}: field 'archive' must be an archive's bare file name"
    for args in (["status"], ["status", "--json"], ["status", str(job)], ["status", "--all-users"],
                 ["tail", str(job)], ["manage"], ["submit", "--dir", str(src), "--cmd", "true"]):
        one_line_error(jobtpu(home, *args, check=False), needle)


@pytest.mark.parametrize(("machines", "args", "needle"), [
    ({"local": {"kind": "local", "resources": {"slot": 1_000_000_000}}}, ["status"],
     "machines.json: machine 'local': resource 'slot' count 1000000000 is more than jobtpu hands out (1024 at most)"),
    ({"local": {"kind": "local", "resources": {"slot": 1e9}}}, ["status"],
     "machines.json: machine 'local': resource 'slot' must be a lowercase name with a count"),
    ({"local": {"kind": "local"}}, ["--req", "slot=" + "9" * 5000], "at most 1024 of a resource"),
    ({"local": {"kind": "local"}}, ["--req", "gpu=1025"], "--req 'gpu=1025': at most 1024 of a resource"),
])
def test_resource_counts_have_an_upper_bound(tmp_path: Path, src: Path, machines: dict[str, Any], args: list[str],
                                             needle: str) -> None:
    home = make_home(tmp_path, machines)
    if args == ["status"]:
        (home / "state.json").write_text('{"jobs": []}')
        args = ["manage"]
    one_line_error(jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", *args, check=False, timeout=30), needle)


# ---- shared homes ---------------------------------------------------------------------------------

OUTSIDE_TEXT = "a file outside the home that jobtpu must never write\n"


def test_a_symlink_planted_at_a_temporary_name_is_never_followed(tmp_path: Path, src: Path) -> None:
    home = make_home(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text(OUTSIDE_TEXT)
    first = submit(home, src, "true")  # so that every file below is rewritten, not created
    manage_until(home, [first], {"finished"})
    names = ["state.json.tmp", "state.json.bak.tmp", ".secrets.json.tmp", "last_id.tmp", ".last_id.tmp",
             ".known_hosts.tmp", "archives/.hashcache.json.tmp"]
    for name in names:
        link = home / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(outside)
    job = submit(home, src, "echo ran > out.txt", "--env", "WANDB_API_KEY=k")
    manage_until(home, [job], {"finished"})
    jobtpu(home, "clean")
    assert outside.read_text() == OUTSIDE_TEXT
    assert (home / "run" / "jobs" / str(job) / "out.txt").read_text() == "ran\n"


@pytest.mark.parametrize("name", ["state.json.lock", "manage.lock", "secrets.json.lock", "history.jsonl",
                                  "logs/{job}/0.0.log"])
def test_a_symlink_planted_at_a_lock_or_appended_file_is_refused(tmp_path: Path, src: Path, name: str) -> None:
    outside, missing = tmp_path / "outside.txt", tmp_path / "created-by-jobtpu.txt"
    outside.write_text(OUTSIDE_TEXT)
    for target in (outside, missing):  # a file of theirs to overwrite, or one to create
        home = make_home(tmp_path / target.stem)
        job = submit(home, src, "echo hi")
        link = home / name.format(job=job)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        for args in (["submit", "--dir", str(src), "--cmd", "true", "--env", "HF_TOKEN=x"], ["manage"], ["manage"],
                     ["kill", str(job)], ["clean"]):
            done = jobtpu(home, *args, check=False)
            assert done.returncode == 0 or len(done.stderr.splitlines()) <= 2 and "Traceback" not in done.stderr, \
                done.stderr
        assert outside.read_text() == OUTSIDE_TEXT and not missing.exists()


def modes_in(home: Path) -> dict[str, int]:
    """The permission bits of what jobtpu keeps in the home (the local machine's job folders aside)."""
    out = {}
    for path in home.rglob("*"):
        rel = path.relative_to(home).as_posix()
        if rel != "machines.json" and not rel.startswith("run"):
            out[rel + ("/" if path.is_dir() else "")] = stat.S_IMODE(path.stat().st_mode)
    return out


@pytest.mark.parametrize("shared", [False, True])
def test_file_modes_follow_the_home(tmp_path: Path, src: Path, shared: bool) -> None:
    home = make_home(tmp_path)
    home.chmod(0o755)
    if shared:  # its runner writes, its group reads (docs/reference/home-files.md §1.6)
        jobtpu(home, "init", "--shared", "root", str(home))
    first = submit(home, src, "echo one", "--env", "WANDB_API_KEY=k")
    second = submit(home, src, "echo two")
    manage_until(home, [first, second], {"finished"})
    jobtpu(home, "clean")
    modes = modes_in(home)
    for must in ("state.json", "state.json.bak", "last_id", "history.jsonl", "secrets.json", "state.json.lock",
                 "manage.lock", f"logs/{first}/", f"logs/{first}/0.0.log", "archives/"):
        assert must in modes, sorted(modes)
    # secrets.json is the owner's alone in either: in a shared home only the runner's passes read it.
    for rel, mode in modes.items():
        if rel == "secrets.json":
            assert mode == 0o600, (rel, oct(mode))
        elif rel in ("spool/", "users/", "results/"):
            assert shared and mode == 0o3770, (rel, oct(mode))
        elif rel.endswith("/"):
            assert mode == (0o2750 if shared else 0o700), (rel, oct(mode))
        else:
            assert mode == (0o640 if shared else 0o600), (rel, oct(mode))


def test_in_a_private_home_secrets_are_filed_only_by_the_account_that_runs_manage(tmp_path: Path, src: Path) -> None:
    import pwd

    home = make_home(tmp_path)
    home.chmod(0o755)  # not group-writable: secrets.json is the owner's alone
    first = submit(home, src, "true")
    jobtpu(home, "manage")  # manage.lock now exists: hand it to another account
    os.chown(home / "manage.lock", pwd.getpwnam("nobody").pw_uid, -1)
    before = (home / "state.json").read_bytes()
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "--env", "WANDB_API_KEY=k", check=False)
    one_line_error(done, "secret --env values in this home are kept by nobody, who runs `jobtpu manage`")
    assert (home / "state.json").read_bytes() == before and not (home / "secrets.json").exists()
    assert submit(home, src, "true", "--env", "PLAIN=1") == first + 1  # no secret: anyone may submit


def test_in_a_shared_home_the_runner_keeps_every_secret_for_itself(tmp_path: Path, src: Path) -> None:
    """docs/reference/home-files.md §1.5: in a shared home secrets.json is the runner's alone (only its
    passes launch jobs); members' secrets reach it through their submit requests."""
    home = make_home(tmp_path)
    jobtpu(home, "init", "--shared", "root", str(home))
    first = submit(home, src, "true", "--env", "WANDB_API_KEY=k")
    secrets = home / "secrets.json"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600 and secrets.stat().st_uid == os.geteuid()
    assert b'"k"' in secrets.read_bytes() and first == 1


