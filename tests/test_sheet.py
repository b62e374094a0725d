"""The team's TPU sheet (jobtpu/sheet/) through the real gspread client against the fake Sheets API,
reached only through `sheet.api_endpoint`, as machines.json would set it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtpu.decide.observation import claim_reason
from jobtpu.decide.sheet_layout import COLUMNS, SheetMachine
from jobtpu.errors import ConfigError, JobtpuError, NotFoundError
from jobtpu.schema.sheet_config import SheetConfig, parse_config
from jobtpu.sheet.api import SheetError, read_sheet
from jobtpu.sheet.edits import register, release, set_note, unregister
from jobtpu.sheet.jobnote import job_note
from jobtpu.sheet.rows import find, format_rows, render_rows
from jobtpu.sheet.sync import PassSheet, sync
from tests.fake_sheets import FakeSheetsApi

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


KEY = "1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms"
TAB = "jobtpu"
NOW = 1_780_000_000.0  # 2026-05-28 20:26 UTC
HEADER = ["Machine", "Kind", "Accelerator", "Zone", "Provisioning", "State", "User", "Jobs", "Since", "Note",
          "Updated"]


@pytest.fixture
def api() -> Iterator[FakeSheetsApi]:
    fake = FakeSheetsApi().start()
    fake.add_spreadsheet(KEY, (TAB, "Other"))
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def config(api: FakeSheetsApi) -> SheetConfig:
    return parse_config({"spreadsheet": f"https://docs.google.com/spreadsheets/d/{KEY}/edit#gid=0",
                               "credentials": "anonymous", "api_endpoint": api.endpoint, "timeout": 2})


@pytest.fixture
def memo(tmp_path: Path) -> Path:
    return tmp_path / "sheet.json"


def fleet(users: tuple[str, ...] = ("alice",), jobs: tuple[str, ...] = ("12 train-a",)) -> list[SheetMachine]:
    return [SheetMachine("v3-a", "tpu", "v3-8", "europe-west4-a", "preemptible", "busy", users, jobs, NOW - 3600),
            SheetMachine("v2-b", "tpu", "v2-8", "us-central1-f", "on-demand", "idle"),
            SheetMachine("box", "ssh", "", "", "", "up")]


def writes(api: FakeSheetsApi) -> list[dict[str, Any]]:
    return api.requests_made(writes_only=True)


def by_name(api: FakeSheetsApi) -> dict[str, dict[str, str]]:
    grid = api.grid(KEY, TAB)
    return {row[0]: dict(zip(grid[0], row + [""] * (len(grid[0]) - len(row)), strict=True)) for row in grid[1:] if row}


def test_a_sync_writes_one_row_per_machine_with_who_runs_what(api: FakeSheetsApi, config: SheetConfig,
                                                              memo: Path) -> None:
    result = sync(config, fleet(), memo, now=NOW)
    assert result.problem is None and result.wrote
    grid = api.grid(KEY, TAB)
    assert grid[0] == HEADER
    written = [line + [""] * (len(HEADER) - len(line)) for line in grid]
    assert [line[:-1] for line in written] == [line[:-1] for line in render_rows(fleet())]
    assert grid[1] == ["v3-a", "tpu", "v3-8", "europe-west4-a", "preemptible", "busy", "alice", "12 train-a",
                       "2026-05-28 19:26 UTC", "", "2026-05-28 20:26 UTC"]
    assert grid[2] == ["v2-b", "tpu", "v2-8", "us-central1-f", "on-demand", "idle", "", "", "", "",
                       "2026-05-28 20:26 UTC"]
    assert grid[3][0] == "box" and len(grid) == 4
    assert [(r["method"], r["path"]) for r in api.requests_made()] == [
        ("GET", f"/v4/spreadsheets/{KEY}/values/'{TAB}'"), ("POST", f"/v4/spreadsheets/{KEY}/values:batchUpdate")]
    assert writes(api)[0]["body"]["valueInputOption"] == "RAW"  # a job named "=IMPORTXML(...)" stays text


def test_a_quiet_sync_writes_nothing_and_one_change_writes_once(api: FakeSheetsApi, config: SheetConfig,
                                                                memo: Path) -> None:
    sync(config, fleet(), memo, now=NOW)
    api.clear_log()
    quiet = sync(config, fleet(), memo, now=NOW + 60)
    assert (quiet.wrote, quiet.problem) == (False, None)
    assert [r["method"] for r in api.requests_made()] == ["GET"]

    api.clear_log()
    started = fleet()[:1] + [SheetMachine("v2-b", "tpu", "v2-8", "us-central1-f", "on-demand", "busy", ("bob",),
                                        ("13 eval",), NOW + 100)] + fleet()[2:]
    sync(config, started, memo, now=NOW + 120)
    [write] = writes(api)
    assert write["body"]["data"] == [{"range": f"'{TAB}'!F3:I3", "values": [["busy", "bob", "13 eval",
                                                                           "2026-05-28 20:28 UTC"]]},
                                     {"range": f"'{TAB}'!K3:K3", "values": [["2026-05-28 20:28 UTC"]]}]
    assert by_name(api)["v3-a"]["Updated"] == "2026-05-28 20:26 UTC"  # an unchanged row keeps its time


def test_a_hand_claim_is_reported_and_survives_syncs(api: FakeSheetsApi, config: SheetConfig, memo: Path) -> None:
    sync(config, fleet(), memo, now=NOW)
    api.edit(KEY, TAB, "G3", "carol")  # v2-b, typed in the browser
    first = PassSheet(config, memo)
    assert first.problem is None
    assert first.claims() == {"v2-b": "carol"}
    assert claim_reason("carol") == "claimed by carol in the sheet"
    result = first.finish(fleet(), now=NOW + 60)
    assert result.claims == {"v2-b": "carol"}
    assert by_name(api)["v2-b"]["User"] == "carol"
    assert by_name(api)["v2-b"]["Since"] == "2026-05-28 20:27 UTC"  # when jobtpu first saw the claim
    assert PassSheet(config, memo).claims() == {"v2-b": "carol"}
    # jobtpu's own user cell is no claim, even when its memo is lost, while the job still runs there
    memo.unlink()
    assert PassSheet(config, memo).claims({"v3-a": "alice"}) == {"v2-b": "carol"}
    assert PassSheet(config, memo).claims() == {"v2-b": "carol", "v3-a": "alice"}


def test_a_claim_made_while_jobtpu_runs_there_is_kept_after_its_jobs_end(api: FakeSheetsApi, config: SheetConfig,
                                                                        memo: Path) -> None:
    sync(config, fleet(), memo, now=NOW)
    api.edit(KEY, TAB, "G2", "dave")
    assert sync(config, fleet(), memo, now=NOW + 60).claims == {"v3-a": "dave"}
    sync(config, fleet(users=(), jobs=()), memo, now=NOW + 120)
    row = by_name(api)["v3-a"]
    assert (row["User"], row["Jobs"]) == ("dave", "")


def test_claims_still_hold_while_the_sheet_cannot_be_read(api: FakeSheetsApi, config: SheetConfig,
                                                          memo: Path) -> None:
    sync(config, fleet(), memo, now=NOW)
    api.edit(KEY, TAB, "G4", "erin")
    sync(config, fleet(), memo, now=NOW + 60)
    api.go_dead("refuse")
    blind = PassSheet(config, memo)
    assert blind.problem is not None and "connection refused" in blind.problem
    assert blind.claims() == {"box": "erin"}
    assert blind.finish(fleet()).problem is None  # the read's line is the pass's only one


def test_release_frees_a_claim_and_checks_the_user(api: FakeSheetsApi, config: SheetConfig, memo: Path) -> None:
    sync(config, fleet(), memo, now=NOW)
    api.edit(KEY, TAB, "G3", "carol, frank")
    sync(config, fleet(), memo, now=NOW + 60)
    api.clear_log()
    with pytest.raises(JobtpuError, match="v2-b is claimed by carol, frank, not bob; nothing was changed"):
        release(config, "v2-b", memo, user="bob")
    assert writes(api) == []
    assert "released" in release(config, "v2-b", memo, user="frank", now=NOW + 120)
    row = by_name(api)["v2-b"]
    assert (row["User"], row["Since"], row["Updated"]) == ("", "", "2026-05-28 20:28 UTC")
    assert PassSheet(config, memo).claims() == {}
    with pytest.raises(JobtpuError, match="v2-b is not claimed in the sheet"):
        release(config, "v2-b", memo)
    with pytest.raises(JobtpuError, match="not claimed by hand: jobtpu's jobs of alice run there"):
        release(config, "v3-a", memo)
    with pytest.raises(NotFoundError, match="no row for 'nope'"):
        release(config, "nope", memo)
    assert sync(config, fleet(), memo, now=NOW + 180).wrote is False  # released stays released


def test_notes_set_append_and_a_jobs_note(api: FakeSheetsApi, config: SheetConfig, memo: Path) -> None:
    sync(config, fleet(), memo, now=NOW)
    set_note(config, "v2-b", "don't touch, long run until Friday")
    assert set_note(config, "v2-b", "ask gina", append=True) == (
        "v2-b: note: don't touch, long run until Friday; ask gina")
    assert by_name(api)["v2-b"]["Note"] == "don't touch, long run until Friday; ask gina"
    set_note(config, "box", "first", append=True)  # appending to nothing sets it
    assert by_name(api)["box"]["Note"] == "first"
    # a job's note is written once, when it arrives; a person's later edit is then left alone
    noted = [SheetMachine("v3-a", "tpu", "v3-8", "europe-west4-a", "preemptible", "busy", ("alice",), ("12 train-a",),
                        NOW - 3600, note="sweep lr=3e-4"), *fleet()[1:]]
    sync(config, noted, memo, now=NOW + 60)
    assert by_name(api)["v3-a"]["Note"] == "sweep lr=3e-4"
    api.edit(KEY, TAB, "J2", "sweep lr=3e-4 (diverged)")
    api.clear_log()
    assert sync(config, noted, memo, now=NOW + 120).wrote is False
    assert by_name(api)["v3-a"]["Note"] == "sweep lr=3e-4 (diverged)"


def test_a_jobs_note_leaves_with_its_job_unless_a_person_changed_it(api: FakeSheetsApi, config: SheetConfig,
                                                                    memo: Path) -> None:
    noted = [SheetMachine("v3-a", "tpu", "v3-8", "europe-west4-a", "preemptible", "busy", ("alice",), ("12 train-a",),
                        NOW - 3600, note="sweep lr=3e-4"), *fleet()[1:]]
    ended = [SheetMachine("v3-a", "tpu", "v3-8", "europe-west4-a", "preemptible", "idle"), *fleet()[1:]]
    sync(config, noted, memo, now=NOW)
    assert by_name(api)["v3-a"]["Note"] == "sweep lr=3e-4"
    sync(config, ended, memo, now=NOW + 60)  # ended, killed or failed: its row no longer has the job
    assert by_name(api)["v3-a"]["Note"] == ""
    sync(config, noted, memo, now=NOW + 120)
    api.edit(KEY, TAB, "J2", "sweep lr=3e-4: diverged, keep the logs")
    sync(config, ended, memo, now=NOW + 180)
    assert by_name(api)["v3-a"]["Note"] == "sweep lr=3e-4: diverged, keep the logs"
    assert json.loads(memo.read_text())["notes"] == {}


@pytest.mark.parametrize(("claims", "names", "users", "found"), [
    ({"v3-a": "Lyy"}, {"lyy": "Lyy"}, {"lyy", "bob"}, {"v3-a": {"lyy"}}),
    ({"v3-a": "LYY"}, {}, {"lyy"}, {"v3-a": {"lyy"}}),  # no sheet_name: the user name, in any case
    ({"v3-a": "Li Y"}, {"lyy": "Li Y"}, {"lyy"}, {"v3-a": {"lyy"}}),
    ({"v3-a": "alice,  Lyy "}, {"lyy": "Lyy"}, {"lyy", "alice"}, {"v3-a": {"lyy", "alice"}}),
    ({"v3-a": "Lyy2"}, {"lyy": "Lyy"}, {"lyy"}, {}),
    ({"v3-a": "bob", "v2-b": "lyy"}, {}, {"ann"}, {}),
])
def test_a_claim_names_the_users_whose_name_or_sheet_name_it_holds(claims: dict[str, str], names: dict[str, str],
                                                                   users: set[str], found: dict[str, set[str]]) -> None:
    from jobtpu.passes.sheet_hook import claimants

    assert claimants(claims, names, users) == {m: frozenset(u) for m, u in found.items()}


@pytest.mark.parametrize(("written", "seen", "holder", "mine", "claim"), [
    ({}, {}, "", "", False),
    ({}, {}, "carol", "", True),
    ({"v3-a": "alice"}, {}, "alice", "", False),  # jobtpu wrote it: its job ended, the cell is emptied next
    ({}, {}, "alice", "alice", False),  # what jobtpu writes now, its memo lost: jobtpu's
    ({}, {"v3-a": "alice"}, "alice", "alice", True),  # typed before alice's job came: hers, kept after it
])
def test_what_counts_as_a_claim(written: dict[str, str], seen: dict[str, str], holder: str, mine: str,
                                claim: bool) -> None:
    from jobtpu.sheet.memo import Memo
    from jobtpu.sheet.rows import is_claim

    assert is_claim(Memo(users=written, claims=seen), "v3-a", holder, mine) is claim


def test_sheet_rows_line_up_wide_characters_and_fit_a_terminal() -> None:
    from jobtpu.decide.sheet_layout import SheetRow

    rows = [SheetRow(2, {"name": "v3-a", "user": "张三", "note": "长时间训练，周五前不要动", "state": "up"}),
            SheetRow(3, {"name": "v2-b", "user": "bob", "note": "eval", "state": "up"})]
    whole = format_rows(rows, ("name", "user", "note"), titles=["名字", "User", "Note"])
    assert whole == ["名字  User  Note", "v3-a  张三  长时间训练，周五前不要动", "v2-b  bob   eval"]
    # in 30 columns: the empty zone left out, the note cut at a character's edge, name, user, state whole
    fitted = format_rows(rows, ("name", "user", "note", "state", "zone"), width=30)
    assert fitted == ["MACHINE  USER  NOTE      STATE", "v3-a     张三  长时间…   up", "v2-b     bob   eval      up"]


def test_register_and_unregister_move_rows_with_peoples_columns(api: FakeSheetsApi, config: SheetConfig,
                                                                memo: Path) -> None:
    sync(config, fleet(), memo, now=NOW)
    api.edit(KEY, TAB, "L1", "Budget")  # a column of the team's own
    api.edit(KEY, TAB, "L3", "grant A")  # v2-b
    api.edit(KEY, TAB, "L4", "grant B")  # box
    assert unregister(config, "v3-a", memo) == "v3-a: removed from the sheet"
    grid = api.grid(KEY, TAB)
    assert [(r[0], r[11] if len(r) > 11 else "") for r in grid[1:]] == [("v2-b", "grant A"), ("box", "grant B")]
    api.clear_log()
    assert sync(config, fleet(), memo, now=NOW + 60).wrote is False  # passes leave it off
    assert register(config, "v3-a", memo, fleet()[0], now=NOW + 120) == "v3-a: added to the sheet"
    assert [r[0] for r in api.grid(KEY, TAB)[1:]] == ["v2-b", "box", "v3-a"]
    assert by_name(api)["v3-a"]["User"] == "alice"
    assert register(config, "tpu-elsewhere", memo) == "tpu-elsewhere: added to the sheet"
    assert register(config, "box", memo) == "box: already in the sheet (row 3)"
    api.clear_log()
    sync(config, fleet(), memo, now=NOW + 120)
    assert writes(api) == []
    with pytest.raises(NotFoundError):
        unregister(config, "nope", memo)


def test_columns_are_found_by_title_and_unknown_columns_are_left_alone(api: FakeSheetsApi, memo: Path) -> None:
    for a1, text in {"A1": "Owner notes", "B1": "user", "C1": "TPU stuff", "D1": "machine", "A2": "mine!",
                     "D2": "v3-a", "B2": "alice"}.items():
        api.edit(KEY, TAB, a1, text)
    config = parse_config({"spreadsheet": KEY, "credentials": "anonymous", "api_endpoint": api.endpoint,
                                 "columns": ["name", "user", "accelerator"]})
    sync(config, fleet(), memo, now=NOW)
    grid = api.grid(KEY, TAB)
    assert grid[0] == ["Owner notes", "user", "TPU stuff", "machine", "Accelerator"]
    assert grid[1] == ["mine!", "alice", "", "v3-a", "v3-8"]
    assert [r[3] for r in grid[2:]] == ["v2-b", "box"]
    assert PassSheet(config, memo).claims() == {}


def test_find_filters_like_req_and_reads_rows_of_other_homes(api: FakeSheetsApi, config: SheetConfig,
                                                             memo: Path) -> None:
    sync(config, fleet(), memo, now=NOW)
    for row, cells in enumerate([["v3-far", "tpu", "v3-32", "us-east1-d", "spot", "", "hana", "", "", "big run"],
                                 ["v4-x", "tpu", "v4-8", "us-central2-b", "on-demand"],
                                 ["v5-y", "tpu", "v5litepod-4", "us-west4-a", "preemptible"]], start=5):
        for column, text in enumerate(cells):
            api.edit(KEY, TAB, f"{'ABCDEFGHIJ'[column]}{row}", text)
    rows = read_sheet(config).rows

    def names(tokens: list[str], preemptible: bool | None = None) -> list[str]:
        return [r.name for r in find(rows, tokens, preemptible)]

    assert names(["v3"], True) == ["v3-a", "v3-far"]
    assert names(["v3"], False) == []
    assert names(["v2,v3"]) == ["v3-a", "v2-b", "v3-far"]
    assert names(["v3+"]) == ["v3-a", "v3-far", "v4-x", "v5-y"]  # v5litepod ranks as v5, as in --req
    assert names(["v3+", "preemptible"]) == ["v3-a", "v3-far", "v5-y"]
    assert names(["v3-32"]) == ["v3-far"]
    assert names(["on-demand"]) == ["v2-b", "v4-x"]
    assert names([], True) == ["v3-a", "v3-far", "v5-y"]
    lines = format_rows(find(rows, ["v3-32"]))
    assert lines[1].split()[:3] == ["v3-far", "tpu", "v3-32"] and "hana" in lines[1] and "big run" in lines[1]
    with pytest.raises(JobtpuError, match="gpu=... is a resource"):
        find(rows, ["gpu=2"])
    with pytest.raises(JobtpuError, match="not a resource"):
        find(rows, ["tpu3"])


@pytest.mark.parametrize("how", ["hang", "refuse", "drip"])
def test_a_dead_api_costs_one_line_within_the_timeout_and_the_sheet_catches_up(
        api: FakeSheetsApi, config: SheetConfig, memo: Path, how: str) -> None:
    sync(config, fleet(users=()), memo, now=NOW)
    api.go_dead(how)
    # Within the timeout: a hung API never answers and a dripping one takes far longer than it, so
    # only the timeout ends the call (a read timeout alone would never fire on the drip).
    result = sync(config, fleet(), memo, now=NOW + 60)
    assert result.problem is not None and not result.wrote
    assert "\n" not in result.problem and "http" not in result.problem and "?" not in result.problem
    expected = "connection refused" if how == "refuse" else "no answer within 2 s"
    assert result.problem == f"sheet: Sheets API at 127.0.0.1:{api.port}: {expected}; the next pass tries again"
    api.revive()
    assert sync(config, fleet(), memo, now=NOW + 120).wrote
    assert by_name(api)["v3-a"]["User"] == "alice"


def test_a_dead_write_is_bounded_too(api: FakeSheetsApi, config: SheetConfig, memo: Path) -> None:
    ps = PassSheet(config, memo)
    api.go_dead("hang")  # never answers: only the timeout ends the write
    result = ps.finish(fleet(), now=NOW)
    assert result.problem is not None and "no answer" in result.problem
    assert not memo.exists() or json.loads(memo.read_text())["users"] == {}  # nothing was written: nothing remembered


def test_a_quota_answer_costs_one_line_and_the_next_sync_catches_up(api: FakeSheetsApi, config: SheetConfig,
                                                                    memo: Path) -> None:
    sync(config, fleet(users=()), memo, now=NOW)
    api.fail_next(1)
    read_failed = sync(config, fleet(), memo, now=NOW + 60)
    assert read_failed.problem is not None and read_failed.problem.startswith("sheet: Sheets API: 429 RESOURCE_EXHAUSTED: ")
    ps = PassSheet(config, memo)
    api.fail_next(1)
    write_failed = ps.finish(fleet(), now=NOW + 90)
    assert write_failed.problem is not None and "429" in write_failed.problem
    assert by_name(api)["v3-a"]["User"] == ""
    assert sync(config, fleet(), memo, now=NOW + 120).wrote
    assert by_name(api)["v3-a"]["User"] == "alice"
    assert PassSheet(config, memo).claims() == {}  # the catch-up write is jobtpu's, not a claim


def test_sheet_problems_are_one_line_each(api: FakeSheetsApi, config: SheetConfig, memo: Path,
                                          tmp_path: Path) -> None:
    missing = parse_config({"spreadsheet": "x" * 44, "credentials": "anonymous", "api_endpoint": api.endpoint})
    assert sync(missing, fleet(), memo).problem == f"sheet: spreadsheet {'x' * 44} not found"
    no_tab = parse_config({"spreadsheet": KEY, "worksheet": "TPUs", "credentials": "anonymous",
                                 "api_endpoint": api.endpoint})
    assert sync(no_tab, fleet(), memo).problem == f"sheet: spreadsheet {KEY} has no worksheet 'TPUs'"
    bad_key = tmp_path / "key.json"
    bad_key.write_text('{"type": "service_account"}')
    broken = parse_config({"spreadsheet": KEY, "credentials": str(bad_key), "api_endpoint": api.endpoint})
    problem = sync(broken, fleet(), memo).problem
    assert problem is not None and problem.startswith(f"sheet: Sheets credentials '{bad_key}': ") and "\n" not in problem
    with pytest.raises(SheetError, match="has no worksheet 'TPUs'"):
        set_note(no_tab, "v3-a", "x")
    assert api.requests_made(writes_only=True) == []


@pytest.mark.parametrize(("raw", "message"), [
    ("k", "sheet must be an object"),
    ({"spreadsheet": KEY, "colour": "red"}, "unknown key 'colour' in sheet"),
    ({}, "sheet.spreadsheet is missing"),
    ({"spreadsheet": 5}, "sheet.spreadsheet must be a non-empty string"),
    ({"spreadsheet": "https://example.com/x y"}, "sheet.spreadsheet must be the sheet's key or its URL"),
    ({"spreadsheet": KEY, "timeout": 0}, "sheet.timeout must be a number of seconds above 0"),
    ({"spreadsheet": KEY, "timeout": True}, "sheet.timeout must be a number"),
    ({"spreadsheet": KEY, "columns": ["name", "colour"]}, "columns: unknown column 'colour'"),
    ({"spreadsheet": KEY, "columns": ["user"]}, "columns must include 'name'"),
    ({"spreadsheet": KEY, "columns": ["name", "name"]}, "columns names a column twice"),
    ({"spreadsheet": KEY, "api_endpoint": "ftp://x"}, "sheet.api_endpoint must be a base URL"),
    ({"spreadsheet": KEY, "api_endpoint": "http://h/?key=1"}, "sheet.api_endpoint must be a base URL"),
])
def test_a_bad_sheet_section_is_one_config_error(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert message in error.value.message and error.value.message.startswith("machines.json: ")
    assert "\n" not in error.value.message and error.value.hint


def test_config_defaults_and_keys() -> None:
    config = parse_config({"spreadsheet": f"https://docs.google.com/spreadsheets/d/{KEY}/edit",
                                 "api_endpoint": "sheets.example.internal/"})
    assert config == SheetConfig(spreadsheet=KEY, worksheet="jobtpu", credentials="default",
                                 columns=COLUMNS, api_endpoint="https://sheets.example.internal", timeout=5.0)


def test_the_pure_parts_load_no_google_stack() -> None:
    """Parsing the section, planning and finding never import gspread, google-auth or requests."""
    code = ("import sys; from jobtpu.sheet import memo, rows; from jobtpu.schema import sheet_config as config; "
            "from jobtpu.decide import sheet_layout as layout; c = config.parse_config({'spreadsheet': 'k'}); "
            "s = rows.grid_from_values([]); rows.plan_write(s, [layout.SheetMachine('a')], memo.Memo(), c.columns, 1.0);"
            "rows.find([], ['v3']); print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('gspread', 'google', 'requests')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(("text", "note"), [
    ("wandb_notes: long run until Friday  # comment\n", "long run until Friday"),
    ("project: x\nwandb_notes: 'it''s mine'\n", "it's mine"),
    ('wandb_notes: "a: b"\n', "a: b"),
    ("wandb_notes: |\n  line one\n  line two\nnext: 1\n", "line one\nline two"),
    ("wandb_notes:\n", None),
    ("nested:\n  wandb_notes: no\n", None),
])
def test_a_jobs_note_comes_from_its_run_config(tmp_path: Path, text: str, note: str | None) -> None:
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "remote_run_config.yml").write_text(text)
    assert job_note(tmp_path) == note
    assert job_note(tmp_path, given="from submit") == "from submit"


def test_no_run_config_no_note(tmp_path: Path) -> None:
    assert job_note(tmp_path) is None


def test_a_name_typed_with_spaces_is_the_same_row_and_a_broken_memo_is_survived(
        api: FakeSheetsApi, config: SheetConfig, memo: Path) -> None:
    sync(config, fleet(), memo, now=NOW)
    api.edit(KEY, TAB, "A3", " v2-b ")
    memo.write_text("{not json")
    api.clear_log()
    result = sync(config, fleet(), memo, now=NOW + 60)
    assert result.problem is None and result.claims == {}  # alice's cell matches what jobtpu writes now
    assert [r[0] for r in api.grid(KEY, TAB)[1:]] == ["v3-a", " v2-b ", "box"]
    assert writes(api) == []
    assert json.loads(memo.read_text())["users"] == {"v3-a": "alice"}  # rebuilt from this sync


def test_rows_people_reorder_during_a_pass_get_their_own_machines_cells(api: FakeSheetsApi, config: SheetConfig,
                                                                        memo: Path) -> None:
    sync(config, fleet(users=()), memo, now=NOW)
    ps = PassSheet(config, memo)  # the pass starts: claims read
    grid = api.grid(KEY, TAB)
    for column, (upper, lower) in enumerate(zip(grid[1], grid[2], strict=True)):  # someone sorts rows 2 and 3
        api.edit(KEY, TAB, f"{'ABCDEFGHIJK'[column]}2", lower)
        api.edit(KEY, TAB, f"{'ABCDEFGHIJK'[column]}3", upper)
    assert ps.finish(fleet(), now=NOW + 60).wrote  # a job started on v3-a meanwhile
    rows = by_name(api)
    assert (rows["v3-a"]["User"], rows["v3-a"]["Accelerator"]) == ("alice", "v3-8")
    assert (rows["v2-b"]["User"], rows["v2-b"]["Accelerator"]) == ("", "v2-8")
    assert [r[0] for r in api.grid(KEY, TAB)[1:]] == ["v2-b", "v3-a", "box"]


def test_the_memo_is_changed_by_one_command_at_a_time(api: FakeSheetsApi, memo: Path) -> None:
    import fcntl
    import os

    config = parse_config({"spreadsheet": KEY, "credentials": "anonymous", "api_endpoint": api.endpoint,
                                 "timeout": 0.2})
    fd = os.open(memo.with_name("sheet.json.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        # The lock is held until the end of this block: a sync that waited for it would never return.
        assert sync(config, fleet(), memo).problem == "sheet: sheet.json is held by another jobtpu command"
        with pytest.raises(JobtpuError, match="held by another jobtpu command"):
            register(config, "v3-a", memo)
    finally:
        os.close(fd)
    assert api.requests_made(writes_only=True) == []
    assert sync(config, fleet(), memo).wrote


def test_commands_use_the_sheets_own_columns_and_refuse_missing_ones(api: FakeSheetsApi, memo: Path) -> None:
    """A team's User column counts for claims and release even when jobtpu is told not to write it."""
    config = parse_config({"spreadsheet": KEY, "credentials": "anonymous", "api_endpoint": api.endpoint,
                                 "columns": ["name", "state"]})
    for a1, text in {"A1": "Machine", "B1": "State", "C1": "User", "A2": "v3-a", "C2": "ivan"}.items():
        api.edit(KEY, TAB, a1, text)
    assert sync(config, fleet(), memo, now=NOW).claims == {"v3-a": "ivan"}
    assert api.grid(KEY, TAB)[1] == ["v3-a", "busy", "ivan"]
    with pytest.raises(JobtpuError, match="the sheet has no Note column; nothing was changed"):
        set_note(config, "v3-a", "x")
    assert release(config, "v3-a", memo, user="ivan") == "v3-a: released (was claimed by ivan)"
    assert api.cell(KEY, TAB, "C2") == ""
