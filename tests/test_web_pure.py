"""`jobtpu serve`'s pure parts as tables: who may talk to it (docs/reference/commands.md §2.29),
the words an act form becomes, and `jobtpu metrics`' text as Prometheus' own parser reads it (§2.30)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobtpu.errors import UsageError
from jobtpu.web import acts, guard

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(("host", "bind", "allowed"), [
    ("localhost:8787", None, True),
    ("127.0.0.1:8787", None, True),
    ("[::1]:8787", None, True),
    ("LOCALHOST", None, True),
    ("evil.example", None, False),
    ("evil.example:8787", None, False),
    ("localhost.evil.example", None, False),
    ("127.0.0.1.nip.io:8787", None, False),
    ("10.0.0.5:8787", None, False),
    ("10.0.0.5:8787", "10.0.0.5", True),
    ("[fd00::5]:80", "fd00::5", True),
    ("", None, False),
    (None, None, False),
])
def test_the_host_header_must_be_loopback_or_the_bind_address(host: str | None, bind: str | None, allowed: bool) -> None:
    assert guard.host_allowed(host, bind) is allowed


@pytest.mark.parametrize(("origin", "host", "allowed"), [
    ("http://localhost:8787", "localhost:8787", True),
    ("http://localhost:8787/", "localhost:8787", True),
    ("http://evil.example", "localhost:8787", False),
    ("http://localhost:9999", "localhost:8787", False),  # another server on the same host
    ("https://localhost:8787", "localhost:8787", False),
    ("null", "localhost:8787", False),  # a sandboxed frame or a file: page
    (None, "localhost:8787", False),  # no Origin at all: refused, not assumed
])
def test_a_post_must_come_from_the_servers_own_origin(origin: str | None, host: str, allowed: bool) -> None:
    assert guard.origin_allowed(origin, host) is allowed


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"),
    ("bearer  abc ", "abc"),
    ("Basic abc", None),
    ("Bearer", None),
    ("Bearer ", None),
    ("", None),
    (None, None),
])
def test_a_scrapers_token_is_its_bearer_header(header: str | None, token: str | None) -> None:
    assert guard.bearer_token(header) == token


def test_the_csrf_token_is_the_secrets_and_the_cookie_is_the_homes() -> None:
    assert guard.csrf_token("a" * 43) == guard.csrf_token("a" * 43) != guard.csrf_token("b" * 43)
    assert "a" * 43 not in guard.csrf_token("a" * 43)
    assert guard.cookie_name("0123456789abcdef") == "jobtpu_0123456789abcdef"
    assert not guard.same_secret(None, "x" * 43) and not guard.same_secret("y" * 43, "x" * 43)


def test_the_secret_is_made_once_private_and_refused_when_others_may_read_it(tmp_path: Path) -> None:
    folder = guard.private_folder(tmp_path)
    assert folder.stat().st_mode & 0o777 == 0o700
    first = guard.load_secret(folder)
    assert guard.load_secret(folder) == first and len(first) >= 40
    assert (folder / "secret").stat().st_mode & 0o777 == 0o600
    (folder / "secret").chmod(0o640)
    with pytest.raises(Exception, match="may be read by other accounts"):
        guard.load_secret(folder)


@pytest.mark.parametrize(("form", "words"), [
    ({"verb": ["kill"], "id": ["3", "4"]}, ["kill", "3", "4"]),
    ({"verb": ["kill"], "id": ["3"], "force": ["1"]}, ["kill", "3", "--force"]),
    ({"verb": ["rerun"], "sel_sweep": ["7"], "sel_status": ["failed"]}, ["rerun", "--status=failed", "--sweep=7"]),
    ({"verb": ["hold"], "sel_all_users": ["1"], "sel_tag": ["x"]}, ["hold", "--tag=x", "--all-users"]),
    ({"verb": ["tag"], "id": ["3"], "value": ["+best -draft"]}, ["tag", "3", "+best", "-draft"]),
    ({"verb": ["note"], "id": ["3"], "value": ["--force me"]}, ["note", "--", "3", "--force me"]),
    ({"verb": ["note"], "id": ["3"], "value": [""]}, ["note", "--", "3", ""]),
    ({"verb": ["note"], "machine": ["box"], "value": ["down for repair"]},
     ["note", "--machine=box", "--", "down for repair"]),
    ({"verb": ["resume"], "sel_name": ["--all-users"]}, ["resume", "--name=--all-users"]),  # a value, never an option
])
def test_an_act_form_becomes_the_commands_own_words(form: dict[str, list[str]], words: list[str]) -> None:
    assert acts.act_words(form) == words


@pytest.mark.parametrize(("form", "says"), [
    ({"verb": ["clean"], "id": ["3"]}, "not an act here"),
    ({"verb": ["manage"]}, "not an act here"),
    ({"verb": ["kill"]}, "nothing to kill"),
    ({"verb": ["kill"], "id": ["3; rm -rf /"]}, "a job id"),
    ({"verb": ["kill"], "id": ["-1"]}, "a job id"),
    ({"verb": ["tag"], "id": ["3"], "value": ["best"]}, "tag needs"),
    ({"verb": ["tag"], "id": ["3"], "value": ["--force"]}, "tag needs"),
    ({"verb": ["note"], "id": ["3", "4"], "value": ["x"]}, "one job at a time"),
    ({"verb": ["note"], "id": ["3"], "value": ["x" * 5000]}, "longer than"),
])
def test_a_bad_act_form_is_one_line(form: dict[str, list[str]], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        acts.act_words(form)


def test_acts_with_a_dry_run_preview_it_and_tag_and_note_show_their_command() -> None:
    assert acts.preview_words(["kill", "3"]) == ["kill", "3", "--dry-run"]
    assert acts.preview_words(["rerun", "--sweep=7"]) == ["rerun", "--sweep=7", "--dry-run"]
    assert acts.preview_words(["tag", "3", "+x"]) is None


@pytest.mark.parametrize(("given", "line", "hint"), [
    ({"given_ids": "3"}, "ids: give a list, not '3'", "like ids=['3']"),
    ({"given_ids": ["x"]}, "argument ID: 'x' is not a job id (a positive number)",
     "docs/reference/python.md lists what each takes"),
    ({"given_ids": [1.5]}, "argument ID: 1.5 is not a whole number", "give ID as an int"),
    ({"given_ids": "x", "user": "a", "all_users": True}, "argument --all-users: not allowed with argument --user",
     "give one of them"),
    ({"statuses": ["nope"]}, "argument --status: 'nope' is not a status: use queued, launching, running, "
     "killing, finished, failed, killed", "docs/reference/python.md lists what each takes"),
    ({"tags": "a"}, "tags: give a list of strings, not the string 'a'", "like tags=['a']"),
    ({"sweeps": [True]}, "argument ID: True is not a whole number", "give ID as an int"),
])
def test_selectors_given_as_values_are_refused_as_the_command_line_refuses_them(
        given: dict[str, object], line: str, hint: str) -> None:
    """The Python API's keywords and the jobs page's query become one selection through the same
    checks (commands/values.py), each mistake one line and its hint, the first found in the order
    `status` reads its options."""
    from jobtpu.commands.values import selection

    with pytest.raises(UsageError) as raised:
        selection(**given)  # type: ignore[arg-type]
    assert (raised.value.message, raised.value.hint) == (line, hint)


def test_selectors_given_as_values_select_as_the_command_line_does() -> None:
    from jobtpu.commands.values import selection

    sel = selection(["3", 4], ["t"], ["n*"], ["running"], ["7"], "ann")
    assert (sel.ids, sel.tags, sel.names, sel.statuses, sel.sweeps, sel.user, sel.all_users, sel.history) == \
        ((3, 4), ("t",), ("n*",), ("running",), (7,), "ann", False, False)
    assert selection([{"id": 5}], id_of=lambda j: j["id"] if isinstance(j, dict) else j).ids == (5,)


def test_metrics_are_the_prometheus_text_format(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from jobtpu.commands.metrics import metrics_text
    from jobtpu.decide import events as ev
    from jobtpu.decide.events import Event
    from jobtpu.home.layout import Home
    from jobtpu.home.store import Store
    from jobtpu.schema.state import Attempt, Job, Status
    from jobtpu.tell import eventlog

    (tmp_path / "machines.json").write_text(json.dumps({"machines": {
        "local": {"kind": "local"}, "box": {"kind": "ssh", "hosts": ["127.0.0.1:1"], "resources": {"gpu": 2}}}}))
    home = Home(tmp_path)
    with Store(home).transaction() as state:
        state.jobs += [
            Job(id=1, user='al"ice', cmd="x", archive="a.tar.gz", created=100.0, status=Status.QUEUED),
            Job(id=2, user="bob", cmd="x", archive="a.tar.gz", created=50.0, status=Status.QUEUED),
            Job(id=3, user="bob", cmd="x", archive="a.tar.gz", created=10.0, machine="box", req=["gpu=2"],
                status=Status.FINISHED, exit_code=0, alloc={"gpu": [0, 1]},
                attempts=[Attempt(0, "box", "finished", 0, 20.0, 3620.0)]),
            Job(id=4, user='al"ice', cmd="x", archive="a.tar.gz", created=5.0, status=Status.QUEUED, held=True),
        ]
        state.next_id = 5
    eventlog.append(tmp_path, [Event(3620.0, ev.JOB_ENDED, id="e1", job=3, machine="box", user="bob",
                                     detail={"status": "finished"}),
                               Event(3000.0, ev.PREEMPTED, id="e2", job=3, machine="box", user="bob")])
    text = metrics_text(home, Store(home).load(), now=4000.0)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    jobs = {(s.labels["status"], s.labels["user"]): s.value for s in families["jobtpu_jobs"].samples}
    # Every status of every known user has its series (0 rather than none); a held job is apart.
    statuses = ["queued", "held", "launching", "running", "killing", "finished", "failed", "killed"]
    assert jobs == {**{(s, u): 0 for s in statuses for u in ('al"ice', "bob")},
                    ("queued", 'al"ice'): 1, ("held", 'al"ice'): 1, ("queued", "bob"): 1, ("finished", "bob"): 1}
    assert families["jobtpu_oldest_queued_seconds"].samples[0].value == 3950.0  # not the held job's 3995
    ended = {(s.labels["outcome"], s.labels["user"]): s.value for s in families["jobtpu_jobs_ended"].samples
             if s.name == "jobtpu_jobs_ended_total"}
    assert ended == {**{(o, u): 0 for o in ("failed", "finished", "killed") for u in ('al"ice', "bob")},
                     ("finished", "bob"): 1}
    assert families["jobtpu_jobs_ended"].type == "counter"
    preempted = {s.labels["machine"]: s.value for s in families["jobtpu_preemptions"].samples
                 if s.name == "jobtpu_preemptions_total"}
    assert preempted == {"box": 1, "local": 0}
    assert {s.labels["state"] for s in families["jobtpu_machines"].samples} == {"up", "unknown"}
    assert families["jobtpu_last_pass_age_seconds"].samples[0].value == -1
    used = {(s.labels["user"], s.labels["unit"]): s.value for s in families["jobtpu_accelerator_hours_used"].samples}
    assert used == {("bob", "GPU"): pytest.approx(2.0)}
