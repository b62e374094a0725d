"""`sheet.layout: tpu-manager` (docs/reference/machines-json.md §3.8): the older tool's tab kept as it is, through the
CLI against the fake Sheets API. Columns by letter: B name or alias, C belongs-to, D status, E user,
F user note, G script note, H env, I other note; K/L are the team's totals, never touched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from jobtpu.decide.sheet_layout import (
    FREE,
    GONE,
    JOBTPU,
    SheetMachine,
    SheetRow,
    TpuManagerLayout,
    script_note,
)
from jobtpu.schema.msgspec_lib import msgspec
from tests import test_sheet_cli
from tests.fake_sheets import FakeSheetsApi
from tests.helpers import jobtpu, make_home, manage, passes_until, submit, until, wait_for
from tests.test_sheet_cli import KEY, machines
from tests.test_sheet_cli import start as start_job
from tests.tpufleet import ZONE, TpuFleet, tpu_home

TAB = "TPUs"
NOT_READY = "reserved(error)"  # the tab's status for a machine held for a job that waits to resume there
MACHINES = {"v3-a": {"kind": "local", "accelerator": "v3-8", "aliases": ["a3"]},
            "v2-b": {"kind": "local", "accelerator": "v2-8"}}
# The tab as the older tool left it: row 2 is v3-a by its alias and free, row 3 v2-b held by alice,
# row 4 a TPU of another home; K/L hold the team's totals.
TABLE = [["#", "TPU", "Belongs", "Status", "User", "User note", "Script note", "Env", "Other", "", "Total", "Free"],
         ["1", "a3", "lab", FREE, FREE, "", "", "jax 0.4", "", "", "3", "1"],
         ["2", "v2-b", "lab", "reserved", "alice", "eval until Fri", "", "", "", "", "", ""],
         ["3", "v4-elsewhere", "lab", "running", "bob", "", "old line", "", "", "", "", ""]]


@pytest.fixture
def api() -> Iterator[FakeSheetsApi]:
    fake = FakeSheetsApi().start()
    fake.add_spreadsheet(KEY, (TAB,))
    for r, line in enumerate(TABLE, start=1):
        for c, value in enumerate(line):
            if value:
                fake.edit(KEY, TAB, f"{'ABCDEFGHIJKL'[c]}{r}", value)
    try:
        yield fake
    finally:
        fake.close()


src, cleanup = test_sheet_cli.src, test_sheet_cli.cleanup  # its fixtures: a job's folder, jobs killed at the end


def tab_home(tmp_path: Path, api: FakeSheetsApi, **settings: Any) -> Path:
    home = make_home(tmp_path, MACHINES)
    doc = json.loads((home / "machines.json").read_text())
    doc["sheet"] = {"spreadsheet": KEY, "worksheet": TAB, "layout": "tpu-manager", "credentials": "anonymous",
                    "api_endpoint": api.endpoint, "timeout": 2, **settings}
    (home / "machines.json").write_text(json.dumps(doc))
    return home


def written_ranges(api: FakeSheetsApi) -> list[str]:
    return [d["range"] for r in api.requests_made(writes_only=True) for d in r["body"]["data"]]


def others(grid: list[list[str]], *owned: str) -> dict[str, str]:
    """Every non-empty cell but the `owned` ones (A1 names), to show nothing else moved."""
    return {f"{'ABCDEFGHIJKL'[c]}{r}": v for r, line in enumerate(grid, start=1) for c, v in enumerate(line)
            if v and f"{'ABCDEFGHIJKL'[c]}{r}" not in owned}


def status_of(home: Path, job: int, wanted: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        record = manage(home)[job]
        return record if record["status"] == wanted else None
    return wait_for(reached, timeout=30, interval=0.2, what=f"job {job} to be {wanted}")


def test_the_old_tab_free_claimed_a_job_start_and_end_write_d_and_e_only(tmp_path: Path, api: FakeSheetsApi,
                                                                         src: Path, cleanup: list) -> None:
    home = tab_home(tmp_path, api)
    before = api.grid(KEY, TAB)
    manage(home)
    assert written_ranges(api) == []  # the tab already says what jobtpu would: 闲的 and alice's claim
    fleet = machines(home)
    assert fleet["v3-a"]["claimed_by"] is None  # 闲的 in E is free
    assert fleet["v2-b"]["claimed_by"] == "alice"

    waiting = start_job(home, src, cleanup, "--req", "v2")
    job = start_job(home, src, cleanup, "--req", "v3")
    api.clear_log()
    status_of(home, job, "running")
    assert "v2-b is claimed by alice in the sheet" in manage(home)[waiting]["waiting"]
    assert written_ranges(api) == [f"'{TAB}'!D2:E2"]  # status and user of v3-a's row, nothing else
    assert (api.cell(KEY, TAB, "D2"), api.cell(KEY, TAB, "E2")) == ("running", "tester")
    assert others(api.grid(KEY, TAB), "D2", "E2") == others(before, "D2", "E2")

    api.clear_log()
    jobtpu(home, "kill", str(job))
    manage(home)
    assert written_ranges(api) == [f"'{TAB}'!D2:E2"]
    assert api.grid(KEY, TAB) == before  # back to free; K/L, headers and other rows never touched

    assert jobtpu(home, "sheet", "release", "v2-b", "--user", "alice").stdout.strip() == \
        "v2-b: released (was claimed by alice)"
    assert (api.cell(KEY, TAB, "D3"), api.cell(KEY, TAB, "E3")) == (FREE, FREE)
    assert status_of(home, waiting, "running")["machine"] == "v2-b"
    assert api.cell(KEY, TAB, "E3") == "tester"
    assert api.cell(KEY, TAB, "F3") == "eval until Fri"  # a person's note stays


def test_notes_find_and_what_the_tab_does_not_allow(tmp_path: Path, api: FakeSheetsApi, src: Path,
                                                    cleanup: list) -> None:
    home = tab_home(tmp_path, api)
    api.clear_log()
    assert jobtpu(home, "sheet", "note", "a3", "long run until Friday").stdout.strip() == \
        "a3: note: long run until Friday"
    assert written_ranges(api) == [f"'{TAB}'!F2:F2"]
    assert api.cell(KEY, TAB, "F2") == "long run until Friday"

    found = jobtpu(home, "sheet", "find", "v2").stdout.splitlines()
    assert found[0].split()[:2] == ["TPU", "Accelerator"]  # the tab's own title of B; the accelerator is jobtpu's
    assert [line.split()[:2] for line in found[1:]] == [["v2-b", "v2-8"]] and "alice" in found[1]
    assert [line.split()[0] for line in jobtpu(home, "sheet", "show").stdout.splitlines()[1:]] == ["v3-a", "v2-b"]

    api.edit(KEY, TAB, "E2", "carol")  # claimed by hand, then released by its alias
    assert "v3-a: claimed by carol in the sheet" in jobtpu(home, "sheet", "sync").stdout
    assert jobtpu(home, "sheet", "release", "a3").stdout.strip() == "v3-a: released (was claimed by carol)"
    api.clear_log()
    job = start_job(home, src, cleanup, "--req", "v3", "--sheet-note", "lr sweep")
    status_of(home, job, "running")
    assert written_ranges(api) == [f"'{TAB}'!D2:E2", f"'{TAB}'!G2:G2"]  # a job's note: G, saying whose job it is
    assert api.cell(KEY, TAB, "F2") == "long run until Friday"  # F is people's: `sheet note` wrote it
    assert api.cell(KEY, TAB, "G2").startswith(f"lr sweep (job {job} since ")

    for command in (["register", "v3-a"], ["unregister", "v3-a"]):
        refused = jobtpu(home, "sheet", *command, check=False)
        assert refused.returncode != 0 and refused.stdout == ""
        assert refused.stderr.splitlines()[0] == (f"jobtpu: error: sheet {command[0]}: the tpu-manager tab's rows are "
                                                  "the team's own; nothing was changed")
    missing = jobtpu(home, "sheet", "note", "v4-elsewhere", "x", check=False)
    assert missing.returncode != 0 and "column B" in missing.stderr
    assert api.cell(KEY, TAB, "G4") == "old line"


def test_a_tpu_brought_back_for_a_job_stays_its_users_row_marked_not_ready(tmp_path: Path, api: FakeSheetsApi,
                                                                             tpus: TpuFleet) -> None:
    """Preempted, the TPU is deleted, created and set up again for the job waiting to resume there: all
    along D/E say `reserved(error)` and the job's user, never 闲的 (a teammate would take it)."""
    tpus.add_node("tpu-a", workers=1, accelerator="v3-8", preemptible=True)
    home = tpu_home(tmp_path, tpus, {"v3-8-p1": tpus.machine_spec("tpu-a", setup=["true"])})
    doc = json.loads((home / "machines.json").read_text())
    doc["sheet"] = {"spreadsheet": KEY, "worksheet": TAB, "layout": "tpu-manager", "credentials": "anonymous",
                    "api_endpoint": api.endpoint, "timeout": 2}
    (home / "machines.json").write_text(json.dumps(doc))
    api.edit(KEY, TAB, "B5", "v3-8-p1")
    api.edit(KEY, TAB, "D5", FREE)
    api.edit(KEY, TAB, "E5", FREE)
    job = submit(home, tmp_path / "src", "sleep 300", "--req", "v3-8")
    until(home, job, lambda j: j["status"] == "running", what="the job to run")
    assert (api.cell(KEY, TAB, "D5"), api.cell(KEY, TAB, "E5")) == ("running", "tester")

    tpus.api.hold_creating(ZONE, "tpu-a")
    tpus.api.preempt(ZONE, "tpu-a")
    seen: set[str] = set()

    def row_while_it_waits(jobs: dict[int, dict[str, Any]]) -> None:
        if jobs[job]["status"] == "queued":
            seen.add(machines(home)["v3-8-p1"]["state"])
            assert (api.cell(KEY, TAB, "D5"), api.cell(KEY, TAB, "E5")) == (NOT_READY, "tester"), seen

    def creating(jobs: dict[int, dict[str, Any]]) -> bool:
        return (tpus.api.node(ZONE, "tpu-a") or {}).get("state") == "CREATING" and jobs[job]["status"] == "queued"
    passes_until(home, creating, "the node to be created again", each=row_while_it_waits)
    tpus.api.hold_creating(ZONE, "tpu-a", False)
    until(home, job, lambda j: (row_while_it_waits({job: j}), j["status"] == "running")[1], timeout=90,
          what="the job to resume")
    assert {"recreating"} <= seen, seen  # rows were checked while the node was away, not only before
    assert (api.cell(KEY, TAB, "D5"), api.cell(KEY, TAB, "E5")) == ("running", "tester")
    jobtpu(home, "kill", str(job))
    manage(home)
    assert (api.cell(KEY, TAB, "D5"), api.cell(KEY, TAB, "E5")) == (FREE, FREE)


def test_a_claim_in_the_user_column_is_its_persons_own_place_to_run(tmp_path: Path, api: FakeSheetsApi,
                                                                     src: Path, cleanup: list) -> None:
    """`Lyy` typed in E is lyy (their sheet_name, in any case): lyy's jobs run there, the claim stays
    theirs (D and E as typed, after the job too), and another person's jobs still wait."""
    home = tab_home(tmp_path, api)
    lyy = {"JOBTPU_USER": "lyy"}
    jobtpu(home, "config", "set", "sheet_name", "Lyy", env=lyy)
    api.edit(KEY, TAB, "D2", "reserved")
    api.edit(KEY, TAB, "E2", "LYY")  # v3-a, claimed by hand
    manage(home)
    others = start_job(home, src, cleanup, "--req", "v3")  # tester's
    job = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 60", "--req", "v3", "--sheet-note", "mine",
                     env=lyy).stdout)
    try:
        record = status_of(home, job, "running")
        assert record["machine"] == "v3-a"
        for _ in range(2):
            assert "v3-a is claimed by LYY in the sheet" in (manage(home)[others]["waiting"] or "")
        assert (api.cell(KEY, TAB, "D2"), api.cell(KEY, TAB, "E2")) == ("reserved", "LYY")
        assert api.cell(KEY, TAB, "G2").startswith(f"mine (job {job} since ")
        assert machines(home)["v3-a"]["claimed_by"] == "LYY"
    finally:
        jobtpu(home, "kill", str(job), env=lyy)
    for _ in range(2):
        assert manage(home)[others]["status"] == "queued"
    assert (api.cell(KEY, TAB, "D2"), api.cell(KEY, TAB, "E2"), api.cell(KEY, TAB, "G2")) == ("reserved", "LYY", "")
    assert jobtpu(home, "sheet", "release", "a3").stdout.strip() == "v3-a: released (was claimed by LYY)"
    assert status_of(home, others, "running")["machine"] == "v3-a"


def test_a_jobs_note_goes_in_g_only_where_no_person_wrote_and_goes_with_the_job(tmp_path: Path, api: FakeSheetsApi,
                                                                                src: Path, cleanup: list) -> None:
    """F is people's and so is a line typed in G: a job's note goes in an empty G and leaves with the job,
    whether it is killed or fails."""
    home = tab_home(tmp_path, api)
    api.edit(KEY, TAB, "F2", "eval until Fri")
    api.edit(KEY, TAB, "G2", "ask bob first")  # v3-a's G, by hand
    manage(home)
    before = api.grid(KEY, TAB)
    job = start_job(home, src, cleanup, "--req", "v3", "--sheet-note", "lr sweep")
    status_of(home, job, "running")
    assert (api.cell(KEY, TAB, "F2"), api.cell(KEY, TAB, "G2")) == ("eval until Fri", "ask bob first")
    jobtpu(home, "kill", str(job))
    manage(home)
    assert api.grid(KEY, TAB) == before

    jobtpu(home, "sheet", "release", "v2-b")
    flag = tmp_path / "fail-now"
    failing = submit(home, src, f"while [ ! -e {flag} ]; do sleep 0.1; done; exit 3", "--req", "v2",
                     "--sheet-note", "eval run")  # fails when the test says so
    cleanup.append((home, failing))
    status_of(home, failing, "running")
    assert api.cell(KEY, TAB, "G3").startswith(f"eval run (job {failing} since ")
    assert api.cell(KEY, TAB, "F3") == "eval until Fri"  # alice's, kept through release and the job
    flag.touch()
    status_of(home, failing, "failed")
    assert (api.cell(KEY, TAB, "E3"), api.cell(KEY, TAB, "F3"), api.cell(KEY, TAB, "G3")) == \
        (FREE, "eval until Fri", "")


def test_a_note_on_a_row_someone_else_holds_is_written_with_one_warning(tmp_path: Path, api: FakeSheetsApi) -> None:
    home = tab_home(tmp_path, api)
    done = jobtpu(home, "sheet", "note", "v2-b", "can I have it Sat?")
    assert done.stdout.strip() == "v2-b: note: can I have it Sat?"
    assert done.stderr.splitlines() == ["jobtpu: warning: v2-b is held by alice in the sheet: the note is written "
                                        "on their row"]
    assert api.cell(KEY, TAB, "F3") == "can I have it Sat?"
    api.edit(KEY, TAB, "E2", "Tester")  # the caller's own claim, and a free row: no warning
    for name in ("a3", "v2-b"):
        if name == "v2-b":
            jobtpu(home, "sheet", "release", "v2-b")
        quiet = jobtpu(home, "sheet", "note", name, "ok")
        assert quiet.stderr == "" and quiet.stdout.strip() == f"{name}: note: ok"


def test_sheet_show_aligns_wide_characters_under_the_tabs_own_titles_at_80_columns(tmp_path: Path,
                                                                                 api: FakeSheetsApi) -> None:
    home = tab_home(tmp_path, api)
    for a1, text in {"C1": "属于", "D1": "状态", "E1": "用户", "F1": "用户备注", "C2": "实验室", "F2": "长时间训练，周五前不要动",
                     "E3": "张三", "G3": "评估 eval run (job 7 since 12-04 10:00)", "I3": "别的备注 other note"}.items():
        api.edit(KEY, TAB, a1, text)
    lines = jobtpu(home, "sheet", "show", env={"COLUMNS": "80"}).stdout.splitlines()
    assert lines[0].split()[:7] == ["TPU", "Accelerator", "属于", "状态", "用户", "用户备注", "Script"]
    assert [line.split()[0] for line in lines[1:]] == ["v3-a", "v2-b"]
    assert all(cell_len(line) <= 80 for line in lines), lines
    # every cell starts at the same screen column as its title (a CJK character is two wide)
    starts = [cell_starts(line) for line in lines]
    assert len(starts[0]) == 8 and starts[0] == starts[1] == starts[2], lines
    assert "张三" in lines[2] and "长时间训" in lines[1]


def cell_starts(line: str) -> list[int]:
    """The screen columns where a cell of a `sheet show` line begins (cells are two spaces apart)."""
    return [cell_len(line[:i]) for i, ch in enumerate(line) if ch != " " and (i == 0 or line[i - 2:i] == "  ")]


@pytest.mark.parametrize(("sheet", "message"), [
    ({"layout": "tpu-mgr"}, "sheet.layout must be one of 'jobtpu', 'tpu-manager', not 'tpu-mgr'"),
    ({"layout": "tpu-manager", "columns": ["name"]}, "sheet.columns is for the jobtpu layout"),
])
def test_a_bad_layout_is_one_line(tmp_path: Path, api: FakeSheetsApi, sheet: dict[str, Any], message: str) -> None:
    home = tab_home(tmp_path, api, **sheet)
    done = jobtpu(home, "sheet", "show", check=False)
    assert done.returncode != 0 and message in done.stderr.splitlines()[0] and "Traceback" not in done.stderr


# ---- the layout's pure row read and write -------------------------------------------------------------

class _Machine:
    def __init__(self, name: str) -> None:
        self.name, self.accelerator, self.cloud_node, self.preemptible, self.spot = name, "v3-8", True, True, False


def _resolve(text: str) -> _Machine:
    from jobtpu.errors import NotFoundError

    if text in ("v3-a", "a3"):
        return _Machine("v3-a")
    raise NotFoundError(f"unknown machine {text!r}")


TPU_MANAGER = TpuManagerLayout(_resolve)
NOW = 1_780_000_000.0  # 2026-05-28 20:26 UTC


@pytest.mark.parametrize(("machine", "cells", "script"), [
    (SheetMachine("v3-a", state="up"), {"state": FREE, "user": FREE, "jobs": ""}, ""),
    (SheetMachine("v3-a", state="preempted"), {"state": GONE, "user": FREE, "jobs": ""}, ""),
    (SheetMachine("v3-a", state="unreachable"), {"state": GONE, "user": FREE, "jobs": ""}, ""),
    (SheetMachine("v3-a", state="up", users=("ana",), jobs=("12 train",), since=NOW, note="n"),
     {"state": "running", "user": "ana", "jobs": "n (job 12 since 05-28 20:26)"}, "job 12 since 05-28 20:26"),
    (SheetMachine("v3-a", state="preempted", users=("ana", "bo"), jobs=("12 a", "13 b")),
     {"state": "running", "user": "ana, bo", "jobs": ""}, "jobs 12, 13"),
])
def test_tpu_manager_renders_its_status_words(machine: SheetMachine, cells: dict[str, str], script: str) -> None:
    """D and E always; G (the script note) only with a job's note: F is people's."""
    assert TPU_MANAGER.render(machine) == cells
    assert script_note(machine) == script


def test_tpu_manager_marks_a_machine_brought_back_for_its_job_not_ready() -> None:
    """A job waiting to resume there: the row stays its user's, reserved and not ready."""
    for state, note, g in (("recreating", "n", "n (job 12 waits to resume)"), ("setting up", None, "")):
        machine = SheetMachine("v3-a", state=state, users=("ana",), jobs=("12 a",), note=note, recovering=True)
        assert TPU_MANAGER.render(machine) == {"state": NOT_READY, "user": "ana", "jobs": g}
        assert script_note(machine) == "job 12 waits to resume"


@pytest.mark.parametrize(("user", "holder"), [(FREE, ""), (f" {FREE} ", ""), ("", ""), ("alice", "alice"),
                                              ("reserved", "reserved")])
def test_tpu_manager_reads_the_free_marker_as_free(user: str, holder: str) -> None:
    assert TPU_MANAGER.holder(SheetRow(2, {"user": user})) == holder
    assert JOBTPU.holder(SheetRow(2, {"user": "alice"})) == "alice"


@pytest.mark.parametrize(("text", "machine"), [("v3-a", "v3-a"), ("a3", "v3-a"), ("v4-elsewhere", None), ("", None)])
def test_tpu_manager_finds_rows_by_a_name_that_resolves(text: str, machine: str | None) -> None:
    assert TPU_MANAGER.machine_of(text) == machine


@pytest.mark.parametrize(("layout", "columns", "name", "machine"), [
    ("jobtpu", ("name", "kind", "accelerator", "zone", "provisioning", "state", "user", "jobs", "since", "note",
                "updated"), "jobtpu", "a3"),
    ("tpu-manager", ("name", "accelerator", "belongs", "state", "user", "note", "jobs", "env", "other"),
     "tpu-manager", "v3-a"),
])
def test_a_sheet_section_names_its_layout_and_the_columns_shown(layout: str, columns: tuple[str, ...], name: str,
                                                               machine: str) -> None:
    """The `sheet` section is checked against the layouts' names and columns (schema/sheet_config.py);
    `layout_of` makes the tab's layout of it, the tpu-manager's finding rows through the fleet."""
    from jobtpu.decide.sheet_layout import layout_of
    from jobtpu.schema.sheet_config import parse_config

    config = msgspec.structs.replace(parse_config({"spreadsheet": KEY, "layout": layout}), resolve=_resolve)
    assert config.columns == columns
    tab = layout_of(config)
    assert tab.name == name and tab.machine_of("a3") == machine


def test_tpu_manager_columns_are_by_letter_and_it_writes_no_header_nor_rows() -> None:
    from jobtpu.sheet.memo import Memo
    from jobtpu.sheet.rows import grid_from_values, plan_write

    grid = [line[:] for line in TABLE]
    snapshot = grid_from_values(grid, TPU_MANAGER)
    assert {k: snapshot.positions[k] for k in ("name", "state", "user", "note", "jobs")} == \
        {"name": 1, "state": 3, "user": 4, "note": 5, "jobs": 6}
    [row] = snapshot.rows
    assert (row.number, row.name, row.get("accelerator"), row.get("provisioning"), row.get("env")) == \
        (2, "v3-a", "v3-8", "preemptible", "jax 0.4")
    running = SheetMachine("v3-a", state="up", users=("ana",), jobs=("12 t",), since=NOW)
    plan = plan_write(snapshot, [running, SheetMachine("not-on-the-tab")], Memo(), (), NOW)
    assert plan.cells == {(1, 3): "running", (1, 4): "ana"}
    assert plan.memo.users == {"v3-a": "ana"}
    claimed = grid_from_values([TABLE[0], ["1", "a3", "", "reserved", "carol"]], TPU_MANAGER)
    assert claimed.claims(Memo()) == {"v3-a": "carol"}
    assert plan_write(claimed, [running], Memo(), (), NOW).cells == {}  # a claim keeps its status and user
