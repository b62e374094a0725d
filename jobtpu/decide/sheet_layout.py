"""How a tab of the team sheet is laid out: which row is a machine's, which cells say who holds it
and carry notes, and what jobtpu writes into a row (docs/reference/machines-json.md §3.8, `sheet.layout`).

Two layouts, behind one small interface (`SheetLayout`):
- `jobtpu` (the default): row 1 titles the columns, found by title; a pass adds missing titles and
  rows, and writes every column it owns.
- `tpu-manager`: the tab the team's older tool keeps, as it is. Columns by letter (B name or alias,
  C belongs-to, D status, E user, F user note, G script note, H env, I other note), its status words,
  `闲的` for free. Rows are found by a name in B that resolves to a machine of machines.json; a pass
  writes only D and E, and G with a job's note while G is empty or still holds what jobtpu wrote there;
  never F (people's: only `sheet note` writes it), a header, a new row, or a cell it does not own (K/L
  totals and the like).
Pure: no I/O here, and nothing of Google's client is loaded."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobtpu.errors import JobtpuError
from jobtpu.limits import cell
from jobtpu.schema.msgspec_lib import msgspec

# The layouts' names and columns are what machines.json's `sheet` section is checked against, so they
# live with its type (schema/sheet_config.py); the layouts' behaviour lives here.
from jobtpu.schema.sheet_config import COLUMNS as COLUMNS
from jobtpu.schema.sheet_config import LAYOUTS as LAYOUTS
from jobtpu.schema.sheet_config import TITLES as TITLES
from jobtpu.schema.sheet_config import layout_columns as layout_columns

if TYPE_CHECKING:
    from jobtpu.schema.sheet_config import SheetConfig


FREE = "闲的"  # the older tool's word for free, in its status and user columns
GONE = "没了!"  # its status for a machine that is not there (preempted, deleted, down)
RUNNING = "running"
# Its status for a machine held for a job that waits there to resume (a preempted TPU being deleted,
# created and set up again): reserved for the user in E, and not ready.
RESUMING = "reserved(error)"
# What `machines` shows for a machine that cannot take a job now: "没了!" on the tpu-manager tab.
GONE_STATES = frozenset({"preempted", "down", "deleted", "unreachable", "recreating"})


class SheetMachine(msgspec.Struct, frozen=True):
    """What a pass knows about one machine; the pass builds these from its views."""

    name: str
    kind: str = ""
    accelerator: str = ""
    zone: str = ""
    provisioning: str = ""  # preemptible | spot | on-demand ("" for ssh/local)
    state: str = ""
    users: tuple[str, ...] = ()  # who runs jobs there now
    jobs: tuple[str, ...] = ()  # "12 train-a", ...
    since: float | None = None  # when the oldest running job started (epoch seconds)
    note: str | None = None  # a note a starting job brings; None: leave the cell to people
    # `users`' jobs are not running but wait to resume here (the machine is being brought back):
    # the row stays theirs meanwhile, marked as not ready.
    recovering: bool = False


class SheetRow(msgspec.Struct, frozen=True):
    """A row as jobtpu reads it: its 1-based row number and its known columns' text."""

    number: int
    cells: dict[str, str]

    @property
    def name(self) -> str:
        return self.cells.get("name", "").strip()  # "v3-a " typed by hand is still v3-a's row

    def get(self, column: str) -> str:
        return self.cells.get(column, "")

    @property
    def preemptible(self) -> bool | None:
        word = self.get("provisioning").strip().lower()
        if word in ("preemptible", "spot"):
            return True
        return False if word in ("on-demand", "ondemand", "standard", "reserved") else None


def when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch)) if epoch else ""


class SheetLayout:
    """jobtpu's own layout. A subclass changes where cells are and what they say, never how a pass
    plans: `sheet.plan_write` asks the layout, and writes only what it renders and finds."""

    name = "jobtpu"
    adds_rows = True  # a pass adds rows and header titles for what is missing; register works
    always: tuple[str, ...] = ("name", "kind", "accelerator", "zone", "provisioning", "state", "jobs")
    held: tuple[str, ...] = ("user", "since")  # written only while no person claims the row
    note_cell = "note"  # where a job's note goes
    notes_over_people = True  # a job's new note replaces a person's text there (a later edit stays)
    titles = TITLES
    # `sheet show` in a narrow terminal: never cut; cut first; left out first when cutting is not enough
    whole: tuple[str, ...] = ("name", "user", "state")
    cut_first = "note"
    dropped_first: tuple[str, ...] = ("updated", "since", "zone", "kind", "provisioning", "jobs", "accelerator")

    def positions(self, header: list[str]) -> dict[str, int]:
        """The header row's titles (or column keys), case-insensitively, locate jobtpu's columns."""
        by_title = {t.lower(): k for k, t in TITLES.items()} | {k: k for k in TITLES}
        positions: dict[str, int] = {}
        for index, title in enumerate(header):
            key = by_title.get(title.strip().lower())
            if key is not None and key not in positions:
                positions[key] = index
        return positions

    def machine_of(self, text: str) -> str | None:
        """The machine a row's name cell means (None: not a machine's row)."""
        return text or None

    def known(self, name: str) -> dict[str, str]:
        """Cells a row shows that are not on the tab (the tpu-manager tab has no accelerator column)."""
        return {}

    def holder(self, row: SheetRow) -> str:
        """Who the row's user cell says holds the machine ("" when free)."""
        return row.get("user").strip()

    def render(self, machine: SheetMachine) -> dict[str, str]:
        """A machine's cells as jobtpu writes them on a row with no claim and no notes of people's."""
        cells = {"name": machine.name, "kind": machine.kind, "accelerator": machine.accelerator,
                 "zone": machine.zone, "provisioning": machine.provisioning, "state": machine.state,
                 "user": ", ".join(machine.users), "jobs": ", ".join(machine.jobs),
                 "since": when(machine.since) if machine.users else "", "note": machine.note or ""}
        return {k: cell(v) for k, v in cells.items()}  # as the sheet will hold it: cut below Google's cap

    def job_note(self, machine: SheetMachine) -> str:
        """The text of `note_cell` while the machine's jobs are there ("": none of them brings a note)."""
        return cell(machine.note or "")

    def header(self, column: str, tab_title: str) -> str:
        """A column's title in `sheet show` and `find` (`tab_title`: the tab's own header cell, if any)."""
        return self.title(column).upper()

    def freed(self) -> dict[str, str]:
        """The cells `sheet release` writes."""
        return {"user": "", "since": ""}

    def title(self, column: str) -> str:
        return self.titles[column]

    def missing_row_hint(self, name: str) -> str:
        return f"`jobtpu sheet register {name}` adds one"

    def check_rows_editable(self, command: str) -> None:
        """register/unregister add and take away rows: only on a tab jobtpu keeps."""


class TpuManagerLayout(SheetLayout):
    """The older tool's tab: see the module's docstring. `resolve` is Fleet.resolve."""

    name = "tpu-manager"
    adds_rows = False
    always = ()
    held = ("state", "user")  # a claim holds the status the person gave too
    note_cell = "jobs"  # G, the script note: F is people's (only `sheet note` writes it)
    notes_over_people = False  # G may hold a person's line too: a job's note never replaces it
    cut_first = "other"
    dropped_first = ("other", "env", "belongs", "accelerator")
    # Column letters → keys; C, H and I are read (shown), never written.
    LETTERS = {"name": "B", "belongs": "C", "state": "D", "user": "E", "note": "F", "jobs": "G", "env": "H",
               "other": "I"}
    titles = {**TITLES, "name": "Name", "belongs": "Belongs to", "state": "Status", "note": "User note",
              "jobs": "Script note", "env": "Env", "other": "Other note"}

    def __init__(self, resolve: Callable[[str], Any] | None) -> None:
        self.resolve = resolve

    def positions(self, header: list[str]) -> dict[str, int]:
        return {key: ord(letter) - ord("A") for key, letter in self.LETTERS.items()}

    def machine_of(self, text: str) -> str | None:
        machine = self._machine(text)
        return machine.name if machine is not None else None

    def _machine(self, text: str) -> Any:
        if not text or self.resolve is None:
            return None
        try:
            return self.resolve(text)
        except JobtpuError:  # not one of this home's machines: a row of someone else's, left alone
            return None

    def known(self, name: str) -> dict[str, str]:
        machine = self._machine(name)
        if machine is None:
            return {}
        kind = ("spot" if machine.spot else "preemptible" if machine.preemptible else "on-demand") \
            if machine.cloud_node else ""
        return {"accelerator": machine.accelerator or "", "provisioning": kind}

    def holder(self, row: SheetRow) -> str:
        text = row.get("user").strip()
        return "" if text == FREE else text

    def render(self, machine: SheetMachine) -> dict[str, str]:
        state = (RESUMING if machine.recovering else RUNNING) if machine.users else \
            GONE if machine.state in GONE_STATES else FREE
        return {"state": state, "user": cell(", ".join(machine.users) or FREE), "jobs": self.job_note(machine)}

    def job_note(self, machine: SheetMachine) -> str:
        """G: the note and whose job brought it, `lr sweep (job 12 since 12-04 10:00)`."""
        return cell(f"{machine.note} ({script_note(machine)})") if machine.note else ""

    def header(self, column: str, tab_title: str) -> str:
        return tab_title.strip() or self.title(column)  # the tab's own words, as people read them there

    def freed(self) -> dict[str, str]:
        return {"state": FREE, "user": FREE}

    def missing_row_hint(self, name: str) -> str:
        return f"write {name} (or one of its aliases) in column B of its row on the tab"

    def check_rows_editable(self, command: str) -> None:
        raise JobtpuError(f"sheet {command}: the tpu-manager tab's rows are the team's own; nothing was changed",
                          hint="add or remove the row by hand: jobtpu finds a machine by its name in column B")


def script_note(machine: SheetMachine) -> str:
    """jobtpu's own line about the jobs on a machine: `job 12 since 12-04 10:00` (UTC), or
    `job 12 waits to resume` while the machine is brought back for it."""
    ids = ", ".join(job.split()[0] for job in machine.jobs if job.split())
    if not ids:
        return ""
    if machine.recovering:
        return f"job{'s' if ',' in ids else ''} {ids} {'wait' if ',' in ids else 'waits'} to resume"
    since = time.strftime(" since %m-%d %H:%M", time.gmtime(machine.since)) if machine.since else ""
    return f"job{'s' if ',' in ids else ''} {ids}{since}"


def layout_for(name: str, resolve: Callable[[str], Any] | None = None) -> SheetLayout:
    return TpuManagerLayout(resolve) if name == "tpu-manager" else JOBTPU


def layout_of(config: SheetConfig) -> SheetLayout:
    """The layout a home's `sheet` section names, finding the tpu-manager tab's machines with its fleet."""
    return layout_for(config.layout, config.resolve)


JOBTPU = SheetLayout()
