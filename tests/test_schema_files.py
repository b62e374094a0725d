"""The schema package (docs/reference/state-json.md §4, docs/reference/machines-json.md §3): every
file jobtpu reads is a msgspec type whose faults one translator tells in one line, and the machine
record's words are enums that state.json stores as the same strings it always did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobtpu.errors import ConfigError
from jobtpu.home.layout import Home
from jobtpu.home.machines import load_fleet
from jobtpu.home.secrets import SecretStore
from jobtpu.home.settings import load_settings
from jobtpu.home.store import Store
from jobtpu.home.trust import load_runner
from jobtpu.home.users import load_users
from jobtpu.schema.records import MachineState, SetupStatus, StepKind
from jobtpu.schema.state import Status
from jobtpu.schema.state_file import encode, render
from jobtpu.views.listing import history

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast

# A state.json byte for byte as jobtpu wrote it before its words were enums: machine records with a
# state, a setup status and saved TPU steps, jobs in several statuses.
OLD_STATE = b"""{
  "version": 1,
  "next_id": 4,
  "machines": {
    "local": {"state":"up"},
    "v4": {"state":"setting up","detail":"setup commands running","tpu_state":"READY","setup":{"status":"running","tries":1,"incarnation":"2026-01-01T00:00:00Z"},"recreations":2,"steps":["forget-keys","setup"]},
    "v5": {"state":"recreating","setup":{"status":"failed","tries":3,"error":"boom"},"operation":{"kind":"create","name":"op-1","since":1700000000.5},"steps":["delete-queued","create-queued"]},
    "box": {"state":"unreachable","detail":"worker 0: refused","since":1700000000,"next_try":1700000030}
  },
  "jobs": [
    {"id":1,"user":"ann","cmd":"echo 1","archive":"a.tar.gz","created":1700000000,"name":"","req":[],"machine":null,"status":"queued","reason":null,"exit_code":null,"attempt":0,"attempts":[],"tags":[],"rule":null,"last_line":""},
    {"id":2,"user":"ann","cmd":"echo 2","archive":"a.tar.gz","created":1700000000,"name":"","req":[],"machine":"local","status":"running","reason":null,"exit_code":null,"attempt":1,"attempts":[{"n":1,"machine":"local","outcome":null,"exit_code":null,"started":1700000001,"ended":null}],"tags":[],"rule":null,"last_line":""},
    {"id":3,"user":"ann","cmd":"echo 3","archive":"a.tar.gz","created":1700000000,"name":"","req":[],"machine":"local","status":"failed","reason":"exit 1","exit_code":1,"attempt":1,"attempts":[{"n":1,"machine":"local","outcome":"exit 1","exit_code":1,"started":1700000001,"ended":1700000002}],"tags":[],"rule":null,"last_line":""}
  ]
}
"""


def test_an_old_state_json_reads_as_enums_and_saves_byte_for_byte(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.state_file.write_bytes(OLD_STATE)
    state = Store(home).load()
    v4, v5 = state.machines["v4"], state.machines["v5"]
    assert isinstance(v4.state, MachineState) and v4.state is MachineState.SETTING_UP and v4.state == "setting up"
    assert v4.setup is not None and v4.setup.status is SetupStatus.RUNNING and v4.setup.status == "running"
    assert v4.steps == [StepKind.FORGET_KEYS, StepKind.SETUP] and all(isinstance(s, StepKind) for s in v4.steps)
    assert v5.steps == ["delete-queued", "create-queued"] and state.machines["box"].state == "unreachable"
    assert [job.status for job in state.jobs] == [Status.QUEUED, Status.RUNNING, Status.FAILED]
    assert render(encode(state)) == OLD_STATE


@pytest.mark.parametrize(("record", "line"), [
    ({"state": "sleeping"},
     "state.json: machine 'm': $.machines['m'].state: invalid enum value 'sleeping' (valid: up, unreachable,"),
    ({"setup": {"status": "finished"}},
     "state.json: machine 'm': $.machines['m'].setup.status: invalid enum value 'finished' "
     "(valid: running, done, failed)"),
    ({"steps": ["create", "reboot"]},
     "state.json: machine 'm': $.machines['m'].steps[1]: invalid enum value 'reboot' "
     "(valid: delete, create, create-queued, delete-queued, forget-keys, setup)"),
])
def test_a_machine_record_word_that_is_not_one_is_refused(tmp_path: Path, record: dict[str, object], line: str) -> None:
    home = Home(tmp_path)
    home.state_file.write_text(json.dumps({"version": 1, "next_id": 1, "jobs": [], "machines": {"m": record}}))
    with pytest.raises(ConfigError) as info:
        Store(home).load()
    assert info.value.message.startswith(line), info.value.message


def _machines(home: Home) -> None:
    load_fleet(home)


def _state(home: Home) -> None:
    Store(home).load()


def _settings(home: Home) -> None:
    load_settings(home, "ann")


def _users(home: Home) -> None:
    load_users(home)


def _secrets(home: Home) -> None:
    SecretStore(home).check()


def _history(home: Home) -> None:
    history(home)


def _runner(home: Home) -> None:
    (home.root / "runner.json").chmod(0o644)  # its owner's, nobody else may write it: honoured
    load_runner(home.root)


JOB = {"id": 7, "user": "ann", "cmd": "true", "archive": "a.tar.gz", "created": 1}

# Every file kind, one bad field each → the one line that says so.
FILES = [
    ("machines.json", {"machines": {"m": {"kind": "ssh", "hosts": ["h"], "port": "22"}}}, _machines,
     "machines.json: machine 'm': 'port' must be an integer port (got '22')"),
    ("machines.json", {"gcp": {"projet": "p"}}, _machines,
     "machines.json: unknown key 'projet' in gcp (valid: project, api_endpoint, credentials, recreate_backoff)"),
    ("state.json", {"version": 1, "next_id": 8, "jobs": [{**JOB, "tags": "a"}]}, _state,
     "state.json: job 7: $.jobs[0].tags: expected array, got str"),
    ("users/ann/settings.json", {"time_zone": 5}, _settings,
     "settings.json of user ann: 'time_zone' must be a time zone: an IANA name like Asia/Shanghai, UTC or local "
     "(got 5)"),
    ("users/ann/settings.json", {"colour": "red"}, _settings,
     "settings.json of user ann: unknown key 'colour' in the top level (valid: rule, req, columns, time_zone, dirs, "
     "aliases, notify, sheet_name)"),
    ("users.json", {"users": ["ann", "Bad Name"]}, _users,
     "users.json: must be an object {\"users\": [names]}, each name 1–32 of a-z, 0-9, '_' or '-', starting with a "
     "letter or '_'"),
    ("secrets.json", {"seven": {"TOKEN": "x"}}, _secrets,
     "secrets.json: must map job ids to objects of NAME: value strings"),
    ("secrets.json", {"7": {"TOKEN": 1}}, _secrets,
     "secrets.json: must map job ids to objects of NAME: value strings"),
    ("history.jsonl", {**JOB, "attempt": "1"}, _history,
     "history.jsonl:1: job 7: $.attempt: expected int, got str"),
    ("runner.json", {"runner": ""}, _runner, "runner.json: 'runner' must be an account's login name (got '')"),
    ("runner.json", {"allow_private_webhooks": "yes"}, _runner,
     "runner.json: 'allow_private_webhooks' must be true or false (got 'yes')"),
    ("runner.json", {"runer": "alice"}, _runner,
     "runner.json: unknown key 'runer' in the top level (valid: runner, allow_private_webhooks, defaults, machines, "
     "gcp, sheet, notify)"),
    ("runner.json", {"gcp": {"project": "p"}}, _runner,
     "runner.json: unknown key 'project' in gcp (valid: credentials, api_endpoint)"),
    ("runner.json", {"defaults": {"identity_file": 5}}, _runner,
     "runner.json: 'defaults.identity_file' must be a string (got 5)"),
    ("runner.json", {"machines": {"gpu1": {"identity_file": ["k"]}}}, _runner,
     "runner.json: machines.gpu1: 'identity_file' must be a string (got ['k'])"),
    ("runner.json", {"machines": {"gpu1": {"port": 22}}}, _runner,
     "runner.json: unknown key 'port' in machines.gpu1 (valid: identity_file, root, setup)"),
    ("runner.json", {"machines": {"gpu1": "k"}}, _runner, "runner.json: machines.gpu1 must be an object"),
]


@pytest.mark.parametrize(("name", "doc", "load", "line"), FILES, ids=[f"{f[0]}-{i}" for i, f in enumerate(FILES)])
def test_each_file_s_bad_field_is_one_line_naming_the_file_and_the_field(
        tmp_path: Path, name: str, doc: object, load: object, line: str) -> None:
    home = Home(tmp_path)
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) + "\n")
    before = path.read_bytes()
    with pytest.raises(ConfigError) as info:
        load(home)  # type: ignore[operator]
    assert info.value.message == line
    assert path.read_bytes() == before


def test_a_good_runner_json_lays_only_the_keys_it_holds_and_a_torn_one_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "runner.json"
    path.write_text('{"runner": "alice", "defaults": {"identity_file": null}, "machines": {"local": {"setup": []}},'
                    ' "notify": [{"command": "true"}]}')
    path.chmod(0o644)
    runner = load_runner(tmp_path)
    assert (runner.runner, runner.allow_private_webhooks, runner.problem) == ("alice", False, None)
    assert runner.privileged == {"defaults": {"identity_file": None}, "machines": {"local": {"setup": []}},
                                 "notify": [{"command": "true"}]}
    path.write_text('{"runner": "alice",\n "gcp": {')
    with pytest.raises(ConfigError) as info:
        load_runner(tmp_path)
    assert info.value.message.startswith("runner.json:2:") and info.value.hint.startswith("fix runner.json")


# The outbox and the hash cache are jobtpu's own files, read on every pass or submit: what a crash
# or a hand edit leaves costs what each says (docs/reference/home-files.md), never the pass.
_EVENT = b'{"time":1700000000.5,"kind":"ended","job":4,"detail":{"status":"failed"}}'
_ITEM = b'{"dest":"cmd-1","name":"failed","event":' + _EVENT + b',"tries":2}'


@pytest.mark.parametrize(("text", "pending", "slow", "line"), [
    (b'{"pending":[' + _ITEM + b'],"slow":{"cmd-1":{"strikes":3,"skip":1}}}', [("cmd-1", "failed", 2)],
     {"cmd-1": (3, 1)}, None),
    # a back-off that is not one costs that back-off only: the notifications beside it still go
    (b'{"pending":[' + _ITEM + b'],"slow":{"cmd-1":{"strikes":true,"skip":1},"x":7}}', [("cmd-1", "failed", 2)],
     {}, None),
    (b'{"pending":[{"dest":"cmd-1","event":' + _EVENT + b',"tries":0}]}', [("cmd-1", "", 0)], {}, None),
    (b'{"pending":[{"dest":"cmd-1","event":' + _EVENT + b',"tries":-1}]}', [], {}, "damaged"),
    (b'{"pending":[{"dest":"cmd-1","event":[],"tries":0}]}', [], {}, "damaged"),
    (b'{"pending":{}}', [], {}, "damaged"),
    (b'{"pend', [], {}, "damaged"),
    (b'[' * 100_000, [], {}, "damaged"),
])
def test_the_outbox_reads_as_its_type_and_a_damaged_one_is_one_line(
        tmp_path: Path, text: bytes, pending: list[tuple[str, str, int]], slow: dict[str, tuple[int, int]],
        line: str | None) -> None:
    from jobtpu.tell.outbox import OUTBOX_FILE, load_outbox, save_outbox
    path = tmp_path / OUTBOX_FILE
    path.write_bytes(text)
    items, backoffs, lines = load_outbox(path)
    assert [(i.dest, i.name, i.tries) for i in items] == pending
    assert {k: (b.strikes, b.skip) for k, b in backoffs.items()} == slow
    assert lines == ([f"notifications: {OUTBOX_FILE} is damaged; pending notifications dropped"] if line else [])
    if items:  # what is written reads back the same
        assert save_outbox(path, items, backoffs) == []
        assert load_outbox(path)[:2] == (items, backoffs)
        assert json.loads(path.read_bytes())["pending"][0]["event"] == json.loads(_EVENT)


_SHA = "ab" * 32


_NAME = "cd" * 32 + ".tar.gz"


@pytest.mark.parametrize(("text", "kept", "named"), [
    (f'{{"files":{{"/r/a":[1,2,3,4,"{_SHA}"]}},"names":{{"/r":["{_NAME}",[["a","f"]]]}}}}'.encode(), {"/r/a"}, {"/r"}),
    (f'{{"files":{{"/r/a":[1,2,3,4,"{_SHA}"],"/r/b":[1,2,3,"{_SHA}"]}}}}'.encode(), set(), set()),  # a bad entry
    (f'{{"files":{{"/r/a":[1,2,3,4,"{_SHA}"]}},"names":{{"/r":["x.tar.gz",[]]}}}}'.encode(), set(), set()),
    (b'{"files":{"/r/a":[1,2,3,4,"not a digest"]}}', set(), set()),
    (f'{{"/r/a":[1,2,3,4,"{_SHA}"]}}'.encode(), set(), set()),  # the shape of before: one re-hash
    (b'[]', set(), set()),
    (b'{"files":', set(), set()),
])
def test_a_damaged_hash_cache_reads_as_empty(text: bytes, kept: set[str], named: set[str]) -> None:
    from jobtpu.schema.hash_cache import read_hash_cache
    cache = read_hash_cache(text)
    assert (set(cache.files), set(cache.names)) == (kept, named)


# The sheet memo (sheet.json) as jobtpu wrote it before it was encoded by its type: `json.dumps(doc,
# indent=1, sort_keys=True)`, `pending` present only while a write is in doubt.
_OLD_MEMO = b"""{
 "claims": {
  "v2-b": "carol"
 },
 "notes": {
  "v3-a": "job 4"
 },
 "pending": {
  "v3-a": "ann"
 },
 "read_at": 1700000000.5,
 "read_of": "Sheet1",
 "unregistered": [
  "gpu1",
  "v5-c"
 ],
 "users": {
  "v3-a": "ann"
 },
 "written": "d1g3st"
}
"""


@pytest.mark.parametrize(("text", "users", "unregistered", "read_at"), [
    (_OLD_MEMO, {"v3-a": "ann"}, {"gpu1", "v5-c"}, 1700000000.5),
    (b'{"users": {"v3-a": "ann"}, "read_at": 0}', {"v3-a": "ann"}, set(), 0.0),  # absent keys: their default
    (b'{"users": {"v3-a": "ann"}, "colour": 1}', {"v3-a": "ann"}, set(), 0.0),  # a key it has not: skipped
    # damaged: an empty memory (a user cell jobtpu wrote looks like a claim until `sheet release`)
    (b'{"users": {"v3-a": 5}}', {}, set(), 0.0),
    (b'{"users": {"v3-a": "ann"}, "unregistered": "gpu1"}', {}, set(), 0.0),
    (b'{"users": {"v3-a": "ann"}, "read_at": "noon"}', {}, set(), 0.0),
    (b'{"users": {"v3-a": "ann"}, "read_at": true}', {}, set(), 0.0),
    (b'["users"]', {}, set(), 0.0),
    (b'{"users": {"v3-', {}, set(), 0.0),
    (b'[' * 100_000, {}, set(), 0.0),
], ids=lambda value: value[:40].decode() if isinstance(value, bytes) else None)
def test_the_sheet_memo_reads_as_its_type_and_a_damaged_one_as_empty(
        tmp_path: Path, text: bytes, users: dict[str, str], unregistered: set[str], read_at: float) -> None:
    from jobtpu.schema.sheet_memo import Memo
    from jobtpu.sheet.memo import load_memo
    path = tmp_path / "sheet.json"
    path.write_bytes(text)
    memo = load_memo(path)
    assert (memo.users, memo.unregistered, memo.read_at) == (users, unregistered, read_at)
    if text == _OLD_MEMO:  # what it wrote before reads and is written again byte for byte
        assert memo.to_bytes() == _OLD_MEMO
    if not users:
        assert memo == Memo()
    idle = Memo({"v3-a": "ann"}, unregistered={"b", "a"})  # no write in doubt: no `pending` key
    assert json.loads(idle.to_bytes()) == {"users": {"v3-a": "ann"}, "notes": {}, "unregistered": ["a", "b"],
                                           "claims": {}, "read_at": 0.0, "written": "", "read_of": ""}


# A job's spec (specs/<id>.json) → what a pass running the job as its own account makes of it
# (docs/design.md §7): the secrets it may take, or why it is not run. `{uid}` is this account's.
_SPEC = ('{{"id": 1, "uid": {uid}, "account": "ann", "user": "ann", "cmd": "python train.py", "overrides": [], '
         '"log_stage": false, "env": {{"TOKEN": "***"}}, "archive": "a.tar.gz", "secrets": ["TOKEN"]{extra}}}')
_NOT_ITS_SUBMITTERS = "its spec specs/1.json is not one its submitter wrote: not run"


@pytest.mark.parametrize(("text", "verdict"), [
    (None, ("ok", {"TOKEN"})),  # as submit writes it
    (_SPEC.format(uid="{uid}", extra=""), ("ok", {"TOKEN"})),  # as written before `submit --on-resume`
    (_SPEC.format(uid="{uid}", extra=', "on_resume": null, "note": "kept"'), ("ok", {"TOKEN"})),
    (_SPEC.format(uid="{uid}", extra=', "on_resume": "--from=ckpt"'),
     ("tampered", "its record differs from its spec specs/1.json (on_resume): not run")),
    (_SPEC.format(uid="{uid}", extra="").replace("train", "evil"),
     ("tampered", "its record differs from its spec specs/1.json (cmd): not run")),
    (_SPEC.format(uid="{uid}", extra="").replace('"id": 1', '"id": true'), ("tampered", _NOT_ITS_SUBMITTERS)),
    (_SPEC.format(uid="{uid}", extra="").replace('"log_stage": false', '"log_stage": 0'),
     ("tampered", _NOT_ITS_SUBMITTERS)),
    (_SPEC.format(uid="{uid}", extra="").replace('["TOKEN"]', '["TOKEN", 5]'), ("tampered", _NOT_ITS_SUBMITTERS)),
    (_SPEC.format(uid="{uid}", extra="").replace('"cmd": "python train.py", ', ""), ("tampered", _NOT_ITS_SUBMITTERS)),
    (_SPEC.format(uid="12345678", extra=""), ("tampered", _NOT_ITS_SUBMITTERS)),
    ('["id", 1]', ("tampered", _NOT_ITS_SUBMITTERS)),
    ('{"id": 1, "uid": ', ("tampered", _NOT_ITS_SUBMITTERS)),
    ("[" * 100_000, ("tampered", _NOT_ITS_SUBMITTERS)),
], ids=lambda value: value[:60] if isinstance(value, str) else None)
def test_a_job_spec_reads_as_its_type_and_one_that_is_not_is_tampered(
        tmp_path: Path, text: str | None, verdict: tuple[str, object]) -> None:
    import os

    from jobtpu.home.specs import local_verdict, write_spec
    from jobtpu.schema.state import Job
    home = Home(tmp_path)
    job = Job(id=1, user="ann", cmd="python train.py", archive="a.tar.gz", created=1, env={"TOKEN": "***"})
    write_spec(home, job, ["TOKEN"])
    spec = tmp_path / "specs" / "1.json"
    if text is not None:
        spec.write_text(text.replace("{uid}", str(os.geteuid())))
    got = local_verdict(home, job, runs_for_team=False)
    assert (got.kind, got.why or set(got.secrets or ())) == verdict
