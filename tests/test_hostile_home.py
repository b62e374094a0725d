"""Hostile files in the home itself (docs/design.md §2 and §7): what a member of a shared home can put
where jobtpu reads (a FIFO, a link to a file of secrets, an absurd number, a flood of settings, a
folder at a rotated log's name) costs one line, never a hang, a traceback, a leak or lost events."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import JOBTPU, make_home, passes_until, submit

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast

TOKEN = "ya29.secret-token-" + "x" * 40  # what a member links a home file to, hoping it is echoed


def cli_process(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI as a process with a timeout: a command that blocks on a FIFO fails the test, never hangs it."""
    env = {**os.environ, "JOBTPU_USER": "tester"}
    return subprocess.run([*JOBTPU, "--home", str(home), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def one_error(done: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines and lines[0].startswith("jobtpu: error: ") and needle in lines[0], done.stderr
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), done.stderr
    assert "secret-token" not in done.stderr + done.stdout


@pytest.fixture
def queued_home(tmp_path: Path) -> tuple[Path, Path, int]:
    """A home whose first job finished (so home_id, last_id, the hash cache exist) and whose second waits."""
    home = make_home(tmp_path, slots=1)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    os.utime(src / "a.txt", (1e9, 1e9))  # old enough for the hash cache to keep it
    first = submit(home, src, "true")
    passes_until(home, lambda jobs: jobs[first]["status"] == "finished", "the first job to finish", interval=0.05)
    (src / "b.txt").write_text("b")  # a new snapshot, so the queued job's archive is its own
    queued = submit(home, src, "true")
    (tmp_path / "token").write_text(TOKEN)
    return home, src, queued


def plant(path: Path, what: str) -> None:
    """A FIFO, or a link to the file of secrets next to the home, in place of `path`."""
    path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(next(p for p in path.parents if p.name == "home").parent / "token")


@pytest.mark.parametrize("what", ["fifo", "link"])
@pytest.mark.parametrize(("name", "command"), [("home_id", "manage"), ("last_id", "submit")])
def test_a_fifo_or_a_link_at_an_id_file_is_one_line(queued_home: tuple[Path, Path, int], what: str, name: str,
                                                    command: str) -> None:
    home, src, _ = queued_home
    plant(home / name, what)
    args = ["submit", "--dir", str(src), "--cmd", "true"] if command == "submit" else ["manage"]
    kind = "a FIFO" if what == "fifo" else "a symbolic link"
    one_error(cli_process(home, *args), f"{name}: is {kind}, not a regular file")


@pytest.mark.parametrize("what", ["fifo", "link"])
def test_a_fifo_or_a_link_at_the_hash_cache_costs_a_rehash(queued_home: tuple[Path, Path, int], what: str) -> None:
    home, src, _ = queued_home
    cache = home / "archives" / ".hashcache.json"
    plant(cache, what)
    done = cli_process(home, "submit", "--dir", str(src), "--cmd", "true")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert cache.is_file() and not cache.is_symlink()  # replaced by a cache of jobtpu's own


@pytest.mark.parametrize("what", ["fifo", "link"])
def test_a_fifo_or_a_link_at_a_queued_jobs_snapshot_fails_that_job_alone(queued_home: tuple[Path, Path, int],
                                                                         what: str) -> None:
    home, _, queued = queued_home
    archive = home / "archives" / json.loads((home / "state.json").read_text())["jobs"][-1]["archive"]
    plant(archive, what)
    done = cli_process(home, "manage")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    row = json.loads(cli_process(home, "status", "--json", str(queued)).stdout)["jobs"][0]
    kind = "a FIFO" if what == "fifo" else "a symbolic link"
    assert (row["status"], row["reason"]) == ("failed", "launch_failed"), row
    assert f"is {kind}, not a regular file" in row["last_line"] and "secret-token" not in row["last_line"], row


def test_a_state_file_past_its_cap_is_one_line(queued_home: tuple[Path, Path, int]) -> None:
    home, _, _ = queued_home
    with open(home / "state.json", "r+b") as f:  # sparse: 300 MiB that cost no disk
        f.truncate(300 << 20)
    one_error(cli_process(home, "status"), "state.json: is 314572800 bytes, more than the")


# ---- numbers: bounded where they are set and where they are read back --------------------------------

JOB = {"id": 1, "user": "tester", "cmd": "true", "archive": "a" * 64 + ".tar.gz", "created": 1.7e9}

ABSURD_STATE: list[tuple[dict[str, object], str]] = [  # a job's fields → the field the one line names
    ({"created": 1e300}, "$.jobs[0].created: expected float <= 10000000000.0"),
    ({"created": 10**30}, "$.jobs[0].created"),
    ({"created": -1}, "$.jobs[0].created: expected int >= 0"),
    ({"max_recoveries": 10**19}, "$.jobs[0].max_recoveries"),
    ({"max_recoveries": 10_001}, "$.jobs[0].max_recoveries: expected int <= 10000"),
    ({"retries": 99_999}, "$.jobs[0].retries"),
    ({"max_preemptions": 10_001}, "$.jobs[0].max_preemptions: expected int <= 10000"),
    ({"retry_on_exit": "5-2"}, "field 'retry_on_exit': --retry-on-exit '5-2': the range 5-2 runs backwards"),
    ({"stall": -1}, "field 'stall' must be a number of seconds, 0 or more"),
    ({"priority": -10**7}, "$.jobs[0].priority: expected int >= -1000000"),
    ({"timeout": 1e12}, "$.jobs[0].timeout"),
    ({"grace": 1e300}, "$.jobs[0].grace"),
    ({"attempt": 10**7}, "$.jobs[0].attempt"),
    ({"forced": [{"by": "x", "act": "kill", "at": 1e300}]}, "$.jobs[0].forced[0].at"),
    ({"attempts": [{"n": 1, "machine": "local", "started": 1e300}]}, "$.jobs[0].attempts[0].started"),
]


@pytest.mark.parametrize(("fields", "needle"), ABSURD_STATE, ids=[next(iter(f)) + "=" + str(next(iter(f.values())))[:12]
                                                                   for f, _ in ABSURD_STATE])
def test_an_absurd_number_in_state_json_is_one_line_naming_the_field(fields: dict[str, object], needle: str) -> None:
    from jobtpu.errors import ConfigError
    from jobtpu.schema.state_file import decode_state

    raw = json.dumps({"version": 1, "next_id": 2, "jobs": [{**JOB, **fields}]}).encode()
    with pytest.raises(ConfigError) as caught:
        decode_state(raw, Path("/h/state.json"))
    assert caught.value.message.startswith("state.json: job 1: ") and needle in caught.value.message
    assert "\n" not in caught.value.message


def test_a_huge_created_time_is_one_line_in_status(queued_home: tuple[Path, Path, int]) -> None:
    home, _, queued = queued_home
    doc = json.loads((home / "state.json").read_text())
    doc["jobs"][-1]["created"] = 1e300
    (home / "state.json").write_text(json.dumps(doc))
    for args in (["status"], ["status", "--json"], ["manage"]):
        one_error(cli_process(home, *args), f"state.json: job {queued}: $.jobs[1].created")


@pytest.mark.parametrize(("option", "needle"), [
    (["--max-recoveries", "99999999999999999999999"], "--max-recoveries: '99999999999999999999999': give 0 to 10000"),
    (["--retries", "10001"], "--retries: '10001': give 0 to 10000"),
    (["--priority", "99999999999999999999999"], "give -1000000 to 1000000"),
    (["--priority=-1000001"], "give -1000000 to 1000000"),
])
def test_a_count_past_its_ceiling_is_refused_at_submit(queued_home: tuple[Path, Path, int], option: list[str],
                                                       needle: str) -> None:
    home, src, _ = queued_home
    before = (home / "state.json").read_bytes()
    done = cli_process(home, "submit", "--dir", str(src), "--cmd", "true", *option)
    assert done.returncode == 2 and needle in done.stderr.splitlines()[0], done.stderr
    assert (home / "state.json").read_bytes() == before
    assert cli_process(home, "status").returncode == 0  # every command still reads the home


@pytest.mark.parametrize("option", ["--timeout", "--stall", "--grace"])
def test_a_duration_past_its_ceiling_is_refused_at_submit(queued_home: tuple[Path, Path, int], option: str) -> None:
    home, src, _ = queued_home
    before = (home / "state.json").read_bytes()
    one_error(cli_process(home, "submit", "--dir", str(src), "--cmd", "true", option, "99999999d"),
              f"{option} '99999999d' is longer than 3660 days")
    assert (home / "state.json").read_bytes() == before


@pytest.mark.parametrize("where", ["defaults", "machine"])
def test_a_connect_timeout_past_its_ceiling_is_one_line(tmp_path: Path, where: str) -> None:
    slow = {"connect_timeout": 86400}
    home = make_home(tmp_path, {"local": {"kind": "local"},
                                "far": {"kind": "ssh", "hosts": ["192.0.2.1"], **(slow if where == "machine" else {})}},
                     **({"defaults": slow} if where == "defaults" else {}))
    key = "defaults.connect_timeout" if where == "defaults" else "connect_timeout"
    for args in (["manage"], ["machines"]):
        one_error(cli_process(home, *args), f"{key} 86400 is over 120 seconds, the most a pass waits to reach a host")


# ---- the event log's rotated names ------------------------------------------------------------------

def _events(n: int, start: int = 0) -> list[Any]:
    from jobtpu.decide.events import Event

    return [Event(1.7e9 + i, "job_launched", job=1, attempt=i) for i in range(start, start + n)]


@pytest.mark.parametrize("what", ["folder", "fifo", "link"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_what_sits_at_a_rotated_name_never_stops_the_log(tmp_path: Path, what: str, k: int) -> None:
    from jobtpu.tell import eventlog

    line = 1  # every append rotates: each file holds one event
    eventlog.append(tmp_path, _events(1), max_bytes=line)
    planted = tmp_path / f"events.jsonl.{k}"
    (tmp_path / "token").write_text(TOKEN)
    if what == "folder":
        planted.mkdir()
        (planted / "theirs").write_text("a member's file")
    elif what == "fifo":
        os.mkfifo(planted)
    else:
        planted.symlink_to(tmp_path / "token")
    assert [e.attempt for e in eventlog.read(tmp_path)] == [0]  # passed over when read
    said = [said for i in range(1, 8) for said in eventlog.append(tmp_path, _events(1, start=i), max_bytes=line)]
    assert said and all(s.startswith(f"events.jsonl.{k} was ") for s in said), said
    assert len(said) == 1  # cleared once, at the first rotation
    kept = [e.attempt for e in eventlog.read(tmp_path)]
    assert kept == list(range(8 - len(kept), 8)) and len(kept) == 5  # the newest, in order: nothing new lost
    assert (tmp_path / "token").read_text() == TOKEN  # a link is removed, never followed
    if what == "folder":
        aside = [p for p in tmp_path.iterdir() if p.name.startswith(f"events.jsonl.{k}.not-a-log.")]
        assert len(aside) == 1 and (aside[0] / "theirs").read_text() == "a member's file", said


def test_a_folder_at_the_oldest_rotated_name_keeps_a_pass_logging(queued_home: tuple[Path, Path, int]) -> None:
    home, _, queued = queued_home
    with open(home / "events.jsonl", "ab") as f:  # a full log: the next pass rotates it
        f.write(b"#" * (4 << 20) + b"\n")
    (home / "events.jsonl.4").mkdir()
    done = cli_process(home, "manage")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    said = [ln for ln in done.stderr.splitlines() if "events.jsonl" in ln]
    assert len(said) == 1 and said[0].startswith("events: events.jsonl.4 was a folder, not a log file: moved to "), \
        done.stderr
    shown = cli_process(home, "events", "--job", str(queued))
    assert shown.returncode == 0 and "launched" in shown.stdout, (shown.stdout, shown.stderr)


# ---- a flood of users' settings -----------------------------------------------------------------------

def flood_users(home: Path, n: int) -> None:
    """`n` users' folders, each with a settings file no pass can use."""
    for i in range(n):
        folder = home / "users" / f"u{i:05d}"
        folder.mkdir(parents=True)
        (folder / "settings.json").write_text("{")


def test_a_pass_reads_a_bounded_number_of_users_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobtpu.home import settings
    from jobtpu.passes.tell import users_destinations

    home = make_home(tmp_path)
    flood_users(home, 1500)
    (home / "users" / "not a name").mkdir()
    (home / "users" / "plainfile").write_text("x")
    read: list[str] = []
    real = settings.load_settings
    monkeypatch.setattr(settings, "load_settings", lambda h, user, **kw: read.append(user) or real(h, user, **kw))
    found, lines = users_destinations(home)
    assert found == [] and read == [f"u{i:05d}" for i in range(settings.MAX_SETTINGS_READ)]
    assert lines[0] == ("notify: users/ holds 1500 users' folders; only the first 1000 by name had their "
                        "settings read, the 500 after them are skipped")
    assert len(lines) == 1 + settings.MAX_SETTINGS_LINES + 1, lines
    assert lines[-1] == "notify: and 995 more users' settings could not be used; their own destinations are skipped"


def test_twenty_thousand_users_folders_cost_a_pass_a_few_lines(queued_home: tuple[Path, Path, int]) -> None:
    home, _, queued = queued_home
    flood_users(home, 20_000)
    rounds: list[list[str]] = []  # users' settings are read in a pass with something to tell: its job's end
    for _ in range(60):
        done = cli_process(home, "manage", timeout=120)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
        rounds.append([ln for ln in done.stderr.splitlines() if ln.startswith("notify:")])
        if json.loads(cli_process(home, "status", "--json", str(queued)).stdout)["jobs"][0]["status"] == "finished":
            break
    told = [said for said in rounds if said]
    assert told and all(len(said) == 7 and "holds 20000 users' folders" in said[0] for said in told), rounds[:3]


# ---- home discovery: whose folder may become the home ----------------------------------------------------

ME, OTHER, MY_GROUP, OTHER_GROUP = 1000, 1001, 100, 200


def st(mode: int, uid: int = ME, gid: int = MY_GROUP) -> os.stat_result:
    return os.stat_result((mode, 1, 1, 1, uid, gid, 0, 0, 0, 0))


FOLDER, FILE = 0o040000, 0o100000
ADOPTION: list[tuple[str, os.stat_result, os.stat_result, str | None]] = [
    ("mine, private", st(FOLDER | 0o700), st(FILE | 0o600), None),
    ("mine, readable", st(FOLDER | 0o755), st(FILE | 0o644), None),
    ("mine, my group writes it", st(FOLDER | 0o775), st(FILE | 0o664), None),
    ("world-writable folder (/tmp)", st(FOLDER | 0o1777, uid=0), st(FILE | 0o644, uid=OTHER),
     "the folder is writable by everyone"),
    ("world-writable file", st(FOLDER | 0o755), st(FILE | 0o666), "its machines.json is writable by everyone"),
    ("another account's folder", st(FOLDER | 0o755, uid=OTHER), st(FILE | 0o644), "the folder is uid 1001's, not yours"),
    ("another account's file", st(FOLDER | 0o755), st(FILE | 0o644, uid=OTHER), "its machines.json is uid 1001's"),
    ("a group I am not in writes it", st(FOLDER | 0o775, gid=OTHER_GROUP), st(FILE | 0o644),
     "the folder is writable by the group gid 200, which you are not in"),
    ("a shared home of my group, a member's file", st(FOLDER | 0o2770, uid=OTHER), st(FILE | 0o660, uid=OTHER), None),
    ("a shared home of another group", st(FOLDER | 0o2770, uid=OTHER, gid=OTHER_GROUP), st(FILE | 0o660, uid=OTHER, gid=OTHER_GROUP),
     "the folder is writable by the group gid 200"),
    ("a shared home of my group, the file another group's", st(FOLDER | 0o2770, uid=OTHER),
     st(FILE | 0o660, uid=OTHER, gid=OTHER_GROUP), "its machines.json is writable by the group gid 200"),
    ("a group-writable folder of my group, not setgid, another's", st(FOLDER | 0o770, uid=OTHER), st(FILE | 0o660),
     "the folder is uid 1001's"),
    ("a link at machines.json", st(FOLDER | 0o700), st(0o120000 | 0o777), "its machines.json is not a regular file"),
]


@pytest.mark.parametrize(("folder", "machines", "needle"), [a[1:] for a in ADOPTION], ids=[a[0] for a in ADOPTION])
def test_which_folder_discovery_may_adopt_as_the_home(folder: os.stat_result, machines: os.stat_result,
                                                      needle: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobtpu.home import layout

    monkeypatch.setattr(layout, "_account_name", lambda uid: f"uid {uid}")  # the ids above name no real account
    monkeypatch.setattr(layout, "_group_name", lambda gid: f"gid {gid}")
    why = layout.adoption_refusal(folder, machines, ME, {MY_GROUP})
    assert (why is None) if needle is None else (why is not None and needle in why), why
