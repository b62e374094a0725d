"""The team sheet end to end through the CLI: passes, `machines`, `submit --sheet-note` and `jobtpu sheet ...`
against the fake Sheets API, driven by the real gspread client and reached only through machines.json's
`sheet.api_endpoint`, as a user with a proxy would set it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from tests.fake_sheets import FakeSheetsApi
from tests.helpers import jobtpu, make_home, manage, status, submit, wait_for, write_tree
from tests.sshfleet import SshFleet
from tests.tpufleet import ZONE, TpuFleet, write_machines

KEY = "1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms"
TAB = "jobtpu"
# Two machines on this host, told apart by accelerator so `--req v3` picks one.
MACHINES = {"v3-a": {"kind": "local", "accelerator": "v3-8"}, "v2-b": {"kind": "local", "accelerator": "v2-8"}}
LONG = "sleep 60"


@pytest.fixture
def api() -> Iterator[FakeSheetsApi]:
    fake = FakeSheetsApi().start()
    fake.add_spreadsheet(KEY, (TAB,))
    try:
        yield fake
    finally:
        fake.close()


def sheet_home(tmp_path: Path, api: FakeSheetsApi, **settings: Any) -> Path:
    home = make_home(tmp_path, MACHINES)
    doc = json.loads((home / "machines.json").read_text())
    doc["sheet"] = {"spreadsheet": f"https://docs.google.com/spreadsheets/d/{KEY}/edit", "credentials": "anonymous",
                    "api_endpoint": api.endpoint, "timeout": 2, **settings}
    (home / "machines.json").write_text(json.dumps(doc))
    return home


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "src", {"train.py": "print('hi')\n"})


@pytest.fixture
def cleanup() -> Iterator[list[tuple[Path, int]]]:
    """Jobs to kill at the end, so no `sleep` outlives its test."""
    started: list[tuple[Path, int]] = []
    yield started
    for home, job in started:
        jobtpu(home, "kill", str(job), check=False)


def rows(api: FakeSheetsApi) -> dict[str, dict[str, str]]:
    grid = api.grid(KEY, TAB)
    header = grid[0]
    return {line[0]: dict(zip(header, line + [""] * (len(header) - len(line)), strict=True))
            for line in grid[1:] if line}


def machines(home: Path) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]}


def start(home: Path, src: Path, cleanup: list[tuple[Path, int]], *extra: str) -> int:
    job = submit(home, src, LONG, *extra)
    cleanup.append((home, job))
    return job


def running(home: Path, job: int) -> dict[str, Any]:
    def on_a_machine() -> dict[str, Any] | None:
        record = manage(home)[job]
        return record if record["status"] == "running" else None
    return wait_for(on_a_machine, timeout=30, interval=0.2, what=f"job {job} to run")


def test_after_a_pass_the_rows_match_machines_including_who_runs_what(tmp_path: Path, api: FakeSheetsApi,
                                                                      src: Path, cleanup: list) -> None:
    home = sheet_home(tmp_path, api)
    job = start(home, src, cleanup, "--req", "v3", "--name", "train-a")
    record = running(home, job)
    assert record["machine"] == "v3-a"
    sheet, fleet = rows(api), machines(home)
    assert sorted(sheet) == sorted(fleet) == ["v2-b", "v3-a"]
    for name, machine in fleet.items():
        row = sheet[name]
        assert (row["Kind"], row["Accelerator"], row["State"]) == (machine["kind"], machine["accelerator"],
                                                                   machine["state"])
        assert row["Updated"].endswith("UTC")
    assert (sheet["v3-a"]["User"], sheet["v3-a"]["Jobs"]) == ("tester", f"{job} train-a")
    assert sheet["v3-a"]["Since"].endswith("UTC")
    assert (sheet["v2-b"]["User"], sheet["v2-b"]["Jobs"], sheet["v2-b"]["Since"]) == ("", "", "")
    assert "sheet" not in jobtpu(home, "manage").stderr
    # `sheet show` prints the sheet as jobtpu reads it
    shown = jobtpu(home, "sheet", "show").stdout.splitlines()
    assert shown[0].split()[:3] == ["MACHINE", "KIND", "ACCELERATOR"]
    assert any(line.split()[:3] == ["v3-a", "local", "v3-8"] and "tester" in line for line in shown)


def test_a_quiet_pass_asks_nothing_and_a_job_starting_writes_once(tmp_path: Path, api: FakeSheetsApi,
                                                                  src: Path, cleanup: list) -> None:
    home = sheet_home(tmp_path, api)
    manage(home)
    assert rows(api)["v3-a"]["State"] == "up"
    api.clear_log()
    manage(home)
    manage(home)
    assert api.requests_made() == []  # neither a write nor a read: the last read is younger than read_every

    job = start(home, src, cleanup, "--req", "v3")
    api.clear_log()
    assert manage(home)[job]["status"] == "running"
    [write] = api.requests_made(writes_only=True)
    assert write["path"].endswith("values:batchUpdate")
    assert rows(api)["v3-a"]["User"] == "tester"
    api.clear_log()
    manage(home)
    assert api.requests_made(writes_only=True) == []


def test_a_pass_reads_again_once_read_every_has_passed(tmp_path: Path, api: FakeSheetsApi) -> None:
    home = sheet_home(tmp_path, api, read_every=0)
    manage(home)
    api.clear_log()
    manage(home)
    assert [r["method"] for r in api.requests_made()] == ["GET", "GET"]  # claims at the start, the plan at the end
    assert api.requests_made(writes_only=True) == []


def test_a_hand_claim_stops_dispatch_there_until_sheet_release(tmp_path: Path, api: FakeSheetsApi, src: Path,
                                                               cleanup: list) -> None:
    home = sheet_home(tmp_path, api)
    manage(home)
    api.edit(KEY, TAB, "G2", "bob")  # v3-a's User cell, typed in the browser
    synced = jobtpu(home, "sheet", "sync").stdout
    assert "v3-a: claimed by bob in the sheet" in synced
    job = start(home, src, cleanup, "--req", "v3")
    for _ in range(2):
        record = manage(home)[job]
        assert record["status"] == "queued"
        assert "v3-a is claimed by bob in the sheet" in record["waiting"]
    fleet = machines(home)
    assert fleet["v3-a"]["claimed_by"] == "bob" and "claimed by bob in the sheet" in fleet["v3-a"]["detail"]
    assert fleet["v2-b"]["claimed_by"] is None
    assert rows(api)["v3-a"]["User"] == "bob"  # passes never overwrite a claim

    refused = jobtpu(home, "sheet", "release", "v3-a", "--user", "carol", check=False)
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.splitlines()[0] == "jobtpu: error: v3-a is claimed by bob, not carol; nothing was changed"
    assert api.cell(KEY, TAB, "G2") == "bob"
    assert manage(home)[job]["status"] == "queued"

    assert jobtpu(home, "sheet", "release", "v3-a", "--user", "bob").stdout.strip() == \
        "v3-a: released (was claimed by bob)"
    record = manage(home)[job]
    assert (record["status"], record["machine"]) == ("running", "v3-a")
    assert rows(api)["v3-a"]["User"] == "tester"
    assert machines(home)["v3-a"]["claimed_by"] is None


def test_a_claim_made_in_the_sheet_is_seen_by_the_next_pass_that_reads(tmp_path: Path, api: FakeSheetsApi,
                                                                       src: Path, cleanup: list) -> None:
    home = sheet_home(tmp_path, api, read_every=0)
    manage(home)
    api.edit(KEY, TAB, "G2", "bob")
    job = start(home, src, cleanup, "--req", "v3")
    assert "claimed by bob in the sheet" in manage(home)[job]["waiting"]
    dry = jobtpu(home, "manage", "--dry-run").stdout
    assert "would launch" not in dry


def test_notes_by_hand_and_from_jobs(tmp_path: Path, api: FakeSheetsApi, src: Path, cleanup: list) -> None:
    home = sheet_home(tmp_path, api)
    manage(home)
    assert jobtpu(home, "sheet", "note", "v2-b", "long run until Friday").stdout.strip() == \
        "v2-b: note: long run until Friday"
    jobtpu(home, "sheet", "note", "v2-b", "ask alice", "--append")
    assert rows(api)["v2-b"]["Note"] == "long run until Friday; ask alice"
    manage(home)
    assert rows(api)["v2-b"]["Note"] == "long run until Friday; ask alice"  # a person's note stays

    missing = jobtpu(home, "sheet", "note", "nope", "x", check=False)
    assert missing.returncode != 0 and missing.stderr.startswith("jobtpu: error: the sheet has no row for 'nope'")

    noted = start(home, src, cleanup, "--req", "v3", "--sheet-note", "lr sweep, do not touch")
    assert status(home)[noted]["sheet_note"] == "lr sweep, do not touch"
    running(home, noted)
    assert rows(api)["v3-a"]["Note"] == "lr sweep, do not touch"

    write_tree(src, {"utils/remote_run_config.yml": "project: x\nwandb_notes: \"baseline, seed 3\"  # why\n"})
    from_config = start(home, src, cleanup, "--req", "v2")
    running(home, from_config)
    assert rows(api)["v2-b"]["Note"] == "baseline, seed 3"


def test_sheet_find_filters_like_req(tmp_path: Path, api: FakeSheetsApi) -> None:
    home = sheet_home(tmp_path, api)
    # TPUs other homes keep: find reads the sheet, not machines.json
    table = [["Machine", "Accelerator", "Provisioning", "User", "Note"],
             ["tpu-x", "v3-8", "preemptible", "", ""], ["tpu-y", "v3-32", "on-demand", "alice", "eval"],
             ["tpu-z", "v2-8", "preemptible", "", ""], ["tpu-w", "v4-8", "spot", "", ""]]
    for r, line in enumerate(table, start=1):
        for c, value in enumerate(line):
            api.edit(KEY, TAB, f"{'ABCDE'[c]}{r}", value)

    def found(*args: str) -> list[str]:
        lines = jobtpu(home, "sheet", "find", *args).stdout.splitlines()
        return [line.split()[0] for line in lines[1:]]

    assert found("v3", "-p") == ["tpu-x"]
    assert found("v3") == ["tpu-x", "tpu-y"]
    assert found("v3-32") == ["tpu-y"]
    assert found("v2,v3", "-n") == ["tpu-y"]
    assert found("v3+", "--preemptible") == ["tpu-x", "tpu-w"]
    assert found("preemptible") == ["tpu-x", "tpu-z", "tpu-w"]
    assert found() == ["tpu-x", "tpu-y", "tpu-z", "tpu-w"]
    assert "alice" in jobtpu(home, "sheet", "find", "v3-32").stdout
    assert jobtpu(home, "sheet", "find", "v5").stdout.strip() == "no row in the sheet matches"
    wrong = jobtpu(home, "sheet", "find", "gpu=1", check=False)
    assert wrong.returncode != 0 and len(wrong.stderr.splitlines()) == 2 and "is a resource" in wrong.stderr
    both = jobtpu(home, "sheet", "find", "v3", "-p", "-n", check=False)
    assert both.returncode == 2


def test_register_and_unregister(tmp_path: Path, api: FakeSheetsApi) -> None:
    home = sheet_home(tmp_path, api)
    manage(home)
    assert jobtpu(home, "sheet", "unregister", "v2-b").stdout.strip() == "v2-b: removed from the sheet"
    manage(home)
    assert sorted(rows(api)) == ["v3-a"]  # passes leave it off
    assert jobtpu(home, "sheet", "register", "v2-b").stdout.strip() == "v2-b: added to the sheet"
    assert rows(api)["v2-b"]["Accelerator"] == "v2-8"
    assert jobtpu(home, "sheet", "register", "tpu-elsewhere").stdout.strip() == "tpu-elsewhere: added to the sheet"
    manage(home)
    assert sorted(rows(api)) == ["tpu-elsewhere", "v2-b", "v3-a"]


@pytest.mark.parametrize("how", ["refuse", "hang"])
def test_a_dead_sheets_api_costs_a_pass_one_line_and_the_sheet_catches_up(tmp_path: Path, api: FakeSheetsApi,
                                                                         src: Path, cleanup: list, how: str) -> None:
    home = sheet_home(tmp_path, api, timeout=1)
    manage(home)
    api.go_dead(how)
    job = start(home, src, cleanup, "--req", "v3")
    done = jobtpu(home, "manage")  # returns: the hung API never answers, the dripping one far too slowly
    assert done.returncode == 0
    lines = [line for line in done.stderr.splitlines() if "sheet" in line.lower()]
    assert len(lines) == 1 and lines[0].startswith("sheet: Sheets API at 127.0.0.1:"), done.stderr
    assert "Traceback" not in done.stderr and "http://" not in done.stderr
    assert status(home)[job]["status"] == "running"
    assert jobtpu(home, "sheet", "sync", check=False).returncode == 1

    api.revive()
    manage(home)
    assert rows(api)["v3-a"]["User"] == "tester"
    api.clear_log()
    assert "sheet" not in jobtpu(home, "manage").stderr
    assert api.requests_made(writes_only=True) == []


def test_without_a_sheet_section_the_sheet_commands_say_so(tmp_path: Path) -> None:
    home = make_home(tmp_path, MACHINES)
    done = jobtpu(home, "sheet", "show", check=False)
    assert done.returncode != 0
    assert done.stderr.splitlines()[0] == "jobtpu: error: machines.json has no sheet section; nothing was changed"
    loaded = loaded_by_a_pass(home, tmp_path)
    assert not {m for m in loaded if m.split(".")[0] in ("gspread", "requests") or m.startswith("google.auth")}
    assert not (home / "sheet.json").exists()


def test_a_bad_sheet_section_is_one_line_and_changes_nothing(tmp_path: Path, api: FakeSheetsApi) -> None:
    home = sheet_home(tmp_path, api, read_every=-1)
    done = jobtpu(home, "manage", check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[0].startswith("jobtpu: error: machines.json: sheet.read_every must be")
    assert api.requests_made() == []


# Runs the real main() and records every module loaded by the time the pass is done.
RUNNER = """
import json, sys
from jobtpu.cli import main
record, argv = sys.argv[1], sys.argv[2:]
try:
    code = main(argv)
finally:
    with open(record, "w") as f:
        json.dump(sorted(sys.modules), f)
sys.exit(code)
"""
SHEETS_CLIENT = ("gspread", "google.auth", "requests")


def loaded_by_a_pass(home: Path, tmp_path: Path) -> set[str]:
    record = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", RUNNER, str(record), "--home", str(home), "manage"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "JOBTPU_USER": "tester"})
    assert done.returncode == 0, done.stderr
    return set(json.loads(record.read_text()))


def test_a_quiet_pass_does_not_load_the_sheets_client(tmp_path: Path, api: FakeSheetsApi) -> None:
    home = sheet_home(tmp_path, api)
    assert set(SHEETS_CLIENT) <= loaded_by_a_pass(home, tmp_path)  # the first pass reads and writes
    quiet = loaded_by_a_pass(home, tmp_path)
    assert not {m for m in quiet if m.split(".")[0] in ("gspread", "requests") or m.startswith("google.auth")}


def test_a_tpu_row_shows_what_the_tpu_api_says_and_follows_a_preemption(tmp_path: Path, api: FakeSheetsApi,
                                                                        tpus: TpuFleet) -> None:
    home = tmp_path / "home"
    tpus.add_node("tpu-a", workers=1, accelerator="v3-8", preemptible=True)
    write_machines(home, tpus, {"v3-8-p1": tpus.machine_spec("tpu-a")})
    doc = json.loads((home / "machines.json").read_text())
    doc["sheet"] = {"spreadsheet": KEY, "credentials": "anonymous", "api_endpoint": api.endpoint, "timeout": 2}
    (home / "machines.json").write_text(json.dumps(doc))

    def agree() -> str:
        row, machine = rows(api)["v3-8-p1"], machines(home)["v3-8-p1"]
        assert (row["Kind"], row["Accelerator"], row["Zone"], row["Provisioning"], row["State"]) == \
            ("tpu", "v3-8", ZONE, machine["provisioning"], machine["state"])
        return row["State"]

    manage(home)
    assert agree() == "up" and rows(api)["v3-8-p1"]["Provisioning"] == "preemptible"
    tpus.api.preempt(ZONE, "tpu-a")
    api.clear_log()
    manage(home)
    assert agree() == "preempted"
    assert len(api.requests_made(writes_only=True)) == 1


def test_a_claim_in_the_sheet_used_before_does_not_hold_in_the_next(tmp_path: Path, api: FakeSheetsApi, src: Path,
                                                                    cleanup: list) -> None:
    home = sheet_home(tmp_path, api)
    manage(home)
    api.edit(KEY, TAB, "G2", "bob")
    assert "claimed by bob" in jobtpu(home, "sheet", "sync").stdout
    other = "2CyjNWt1YSB6oGNeLwCeCZkhnVVrqumct85PhwF3vqnt"
    api.add_spreadsheet(other, (TAB,))
    doc = json.loads((home / "machines.json").read_text())
    doc["sheet"]["spreadsheet"] = other
    (home / "machines.json").write_text(json.dumps(doc))
    job = start(home, src, cleanup, "--req", "v3")
    record = manage(home)[job]
    assert (record["status"], record["machine"]) == ("running", "v3-a")
    assert api.grid(other, TAB)[1][:1] == ["v3-a"]



def test_sheet_sync_right_after_kill_leaves_the_job_off_its_row(tmp_path: Path, api: FakeSheetsApi, src: Path,
                                                               ssh_fleet: SshFleet) -> None:
    box = ssh_fleet.add_machine("box")
    home = make_home(tmp_path, {"box": {"kind": "ssh", "hosts": [h.address() for h in box.hosts], "user": box.user,
                                        "identity_file": str(ssh_fleet.identity), "connect_timeout": 2}})
    doc = json.loads((home / "machines.json").read_text())
    doc["sheet"] = {"spreadsheet": KEY, "credentials": "anonymous", "api_endpoint": api.endpoint, "timeout": 2}
    (home / "machines.json").write_text(json.dumps(doc))
    job = submit(home, src, "sleep 600", "--name", "train-a")
    assert manage(home)[job]["status"] == "running"
    assert (rows(api)["box"]["User"], rows(api)["box"]["Jobs"]) == ("tester", f"{job} train-a")
    ssh_fleet.stop_host(box.hosts[0])  # the kill cannot reach it: the job stays killing
    jobtpu(home, "kill", str(job))
    assert status(home)[job]["status"] == "killing"
    assert jobtpu(home, "sheet", "sync").stdout.startswith("sheet: wrote ")
    row = rows(api)["box"]
    assert (row["User"], row["Jobs"], row["Since"]) == ("", "", "")  # a job being killed holds no row
    assert "claimed" not in jobtpu(home, "sheet", "sync").stdout  # the emptied cell is no one's claim


def test_a_claim_typed_a_moment_ago_stops_a_launch_there(tmp_path: Path, api: FakeSheetsApi, src: Path,
                                                         cleanup: list) -> None:
    home = sheet_home(tmp_path, api)  # read_every: a minute, so a quiet pass would not read
    fresh = timing.env(claims_fresh=0)  # the claims' freshness (seconds), shortened
    jobtpu(home, "manage", env=fresh)
    api.edit(KEY, TAB, "G2", "bob")  # v3-a's User cell, typed in the browser just now
    api.clear_log()
    jobtpu(home, "manage", env=fresh)
    assert api.requests_made() == []  # nothing to launch: the pass trusts its last read
    job = start(home, src, cleanup, "--req", "v3")
    done = jobtpu(home, "manage", env=fresh)
    record = status(home)[job]
    assert record["status"] == "queued", done.stderr
    assert "v3-a is claimed by bob in the sheet" in record["waiting"]
    assert machines(home)["v3-a"]["claimed_by"] == "bob"
    assert rows(api)["v3-a"]["User"] == "bob"
    # with the last read fresh enough, a pass about to launch trusts it
    other = start(home, src, cleanup, "--req", "v2")
    api.clear_log()
    assert status(home)[other]["status"] == "queued"
    assert jobtpu(home, "manage", env=timing.env(claims_fresh=3600)).returncode == 0
    assert status(home)[other]["status"] == "running"
    assert [r["method"] for r in api.requests_made()] == ["GET", "POST"]  # only the end's read and its write


def sheet_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stdout.splitlines() + done.stderr.splitlines() if "sheet" in line.lower()]


@pytest.mark.parametrize("how", ["hang", "drip", "stall", 500, 503, "503-page"])
def test_a_failing_sheets_api_costs_every_pass_one_line_and_the_next_good_pass_catches_up(
        tmp_path: Path, api: FakeSheetsApi, src: Path, cleanup: list, how: str | int) -> None:
    home = sheet_home(tmp_path, api, timeout=1)
    manage(home)
    stalled = None
    if how == "stall":  # writes are carried out, their answers never come
        stalled = api.stall_answers("POST", "values:batchUpdate")
    elif how == "503-page":  # Google's front end: an HTML page, not the API's JSON
        api.fail_next(1000, 503, "", page=True)
    elif isinstance(how, int):  # the API's own JSON error, as Google words it
        api.fail_next(1000, how, "The service is currently unavailable." if how == 503 else "Internal error encountered.")
    else:
        api.go_dead(how)
    jobs = []
    # (through $JOBTPU_SHEET_FRESH, the documented setting, which must keep working)
    for fresh, req, name in (("0", "v3", "one"), ("3600", "v2", "two")):  # a read before the launch, or none
        job = start(home, src, cleanup, "--req", req, "--name", name, "--sheet-note", f"{name} note")
        jobs.append(job)
        done = jobtpu(home, "manage", env={"JOBTPU_SHEET_FRESH": fresh})  # returns, however the API fails
        [line] = sheet_lines(done)
        assert line.startswith("sheet: Sheets API at 127.0.0.1:") and line.endswith("; the next pass tries again")
        assert "http" not in line and "api_endpoint" not in line and len(line) < 200, line  # nothing to fix
        assert status(home)[job]["status"] == "running"
    first, second = jobs
    jobtpu(home, "kill", str(first))
    [line] = sheet_lines(jobtpu(home, "manage"))  # a pass that only has rows to write: one line again

    api.revive()
    if stalled is not None:
        stalled.set()
    assert sheet_lines(jobtpu(home, "manage")) == []
    sheet = rows(api)
    assert (sheet["v3-a"]["User"], sheet["v3-a"]["Jobs"]) == ("", "")
    assert (sheet["v2-b"]["User"], sheet["v2-b"]["Jobs"], sheet["v2-b"]["Note"]) == ("tester", f"{second} two", "two note")
    api.clear_log()
    assert sheet_lines(jobtpu(home, "manage")) == []
    assert api.requests_made(writes_only=True) == []
