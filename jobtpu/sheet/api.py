"""The team's TPU spreadsheet: one row per machine, who uses it since when, and people's notes.

Optional: only a `sheet` object in machines.json turns it on, and gspread (with google-auth and
requests) is imported only inside the functions that talk to the Sheets API.

How the sheet is kept (jobtpu's own layout; `sheet.layout: tpu-manager` keeps the older tool's tab as it
is, see jobtpu/sheet/layout.py). Row 1 is a header; jobtpu finds its columns there by title (`Machine`,
`Kind`, ... or the column keys), adds the configured ones that are missing at the right end, and
never touches a column it does not know, so people may add, move and fill their own. A pass reads
the sheet at its start (for claims) and again at its end, to plan its one `values:batchUpdate` on
rows as they are then (people sort and insert rows meanwhile); the write holds only the cells that
differ, so a quiet pass writes nothing. `Updated` changes only with the row. The `User` cell says
who holds a machine: jobtpu writes the users of the jobs running there and remembers what it wrote in a small
memo file; a user cell holding anything else was typed by a person, is a claim, and stays until
`release` (or the person) empties it. A `Note` belongs to people: jobtpu writes one only when a
job brings a new one (`submit --sheet-note`, or `wandb_notes`).

Wiring (the few calls the rest of jobtpu makes):
- machines.json: keep the top-level `sheet` object and give it to `parse_config(raw)` → SheetConfig
  (a one-line ConfigError when it is wrong). No `sheet` key: nothing here is called.
- A pass (jobtpu/sheet/hook.py): at its start `ps = PassSheet.start(config, memo_path)` (one read, unless
  the last one is younger than `read_every`; memo_path: `<home>/sheet.json`); print `ps.problem` when set. Dispatch skips every machine in
  `ps.claims(own)` (own: machine → ", ".join(users running jobs there now)), giving
  `claim_reason(holder)` as the pending reason and in `machines`. At its end build a MachineRow per
  machine and `result = ps.finish(rows)`; print `result.problem` when set. Neither ever raises for
  the API's sake; the start costs at most `sheet.timeout`, the end two (and nothing when the start
  failed, or when it did not read and the rows are those last written: a quiet pass). The memo is jobtpu's own file: add `sheet.json` to home.py's own files (never snapshotted).
- `jobtpu sheet sync`: `sync(config, rows, memo_path)` (print `problem`, exit 1 when set).
- `jobtpu sheet release NAME [--user U]`: `release(config, NAME, memo_path, U)`;
  `sheet note NAME TEXT [--append]`: `set_note(config, NAME, TEXT, append)`;
  `sheet register NAME`: `register(config, NAME, memo_path, row)` (row: the MachineRow when NAME is
  in machines.json, else None); `sheet unregister NAME`: `unregister(config, NAME, memo_path)`.
  Each prints the line it returns, or raises a JobtpuError (one line, nothing changed).
- `jobtpu sheet find [TYPES...] [-p|-n]`: print `format_rows(find(read_sheet(config).rows, TYPES,
  True|False|None))`; `sheet show`: `format_rows(read_sheet(config).rows)`.
- `submit --sheet-note TEXT` (else `wandb_notes` from the job's `utils/remote_run_config.yml`, see
  `job_note`): the job keeps it; the pass passes it as MachineRow.note while the job runs there.
Every failure to reach the API is a SheetError (a JobtpuError): one line, no URL, no traceback.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import astuple, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from jobtpu.errors import BusyError, ConfigError, JobtpuError, NotFoundError, credentials_message
from jobtpu.home.layout import open_lock, write_atomic
from jobtpu.limits import MAX_SHEET_NOTE, cell, check_length
from jobtpu.sheet import layout as sheetlayout
from jobtpu.sheet.layout import COLUMNS, JOBTPU, TITLES, Layout, MachineRow, SheetRow, layout_for, when

DEFAULT_WORKSHEET = "jobtpu"
DEFAULT_TIMEOUT = 5.0
DEFAULT_READ_EVERY = 60.0  # seconds a quiet pass trusts the last read (hand claims are seen this late)
MAX_TIMEOUT = 60.0
GOOGLE_BASE = "https://sheets.googleapis.com"
SCOPES = ["https://www.googleapis.com/auth/spreadsheets"]
_KEYS = ("spreadsheet", "worksheet", "credentials", "columns", "api_endpoint", "timeout", "read_every", "layout")
_KEY = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_URL_KEY = re.compile(r"/spreadsheets/d/([A-Za-z0-9_-]+)")
_NOTE_SEPARATOR = "; "
_GRACE = 0.5  # beyond the deadline, for a call already under way to return its own error
T = TypeVar("T")


class SheetError(JobtpuError):
    """The Sheets API could not be used now (unreachable, slow, refused, credentials): one line."""


# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class SheetConfig:
    spreadsheet: str  # the key (the id in the sheet's URL)
    worksheet: str = DEFAULT_WORKSHEET
    credentials: str = "default"  # a key file's path, "default" (ADC) or "anonymous" (tests, proxies)
    columns: tuple[str, ...] = COLUMNS
    api_endpoint: str = GOOGLE_BASE
    timeout: float = DEFAULT_TIMEOUT  # for everything one read or one write costs, retries included
    read_every: float = DEFAULT_READ_EVERY  # a pass with nothing to write reads no oftener than this
    layout: str = "jobtpu"  # or "tpu-manager": the older tool's tab as it is (jobtpu/sheet/layout.py)
    # Fleet.resolve, given by load_fleet: the machine a tpu-manager row's name (or alias) means.
    resolve: Callable[[str], Any] | None = field(default=None, compare=False, repr=False)

    @property
    def tab(self) -> Layout:
        return layout_for(self.layout, self.resolve)


def parse_config(raw: Any, where: str = "machines.json") -> SheetConfig:
    """machines.json's `sheet` object → SheetConfig; anything wrong is one ConfigError line."""
    hint = f"fix the sheet section of {where}; nothing was changed"

    def fail(message: str) -> ConfigError:
        return ConfigError(f"{where}: sheet.{message}", hint)

    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: sheet must be an object", hint)
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} in sheet (valid: {', '.join(_KEYS)})", hint)
    for key in ("spreadsheet", "worksheet", "credentials", "api_endpoint"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise fail(f"{key} must be a non-empty string")
    if "spreadsheet" not in raw:
        raise fail("spreadsheet is missing: the sheet's key or URL")
    layout = raw.get("layout", "jobtpu")
    if layout not in sheetlayout.LAYOUTS:
        raise fail(f"layout must be one of {', '.join(map(repr, sheetlayout.LAYOUTS))}, not {str(layout)[:40]!r}")
    if layout != "jobtpu" and "columns" in raw:
        raise fail(f"columns is for the jobtpu layout: the {layout} tab's columns are fixed (docs/reference/machines-json.md §3.8)")
    timeout = raw.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= MAX_TIMEOUT:
        raise fail(f"timeout must be a number of seconds above 0, at most {MAX_TIMEOUT:g}")
    read_every = raw.get("read_every", DEFAULT_READ_EVERY)
    if not isinstance(read_every, int | float) or isinstance(read_every, bool) or not 0 <= read_every <= 86400:
        raise fail("read_every must be a number of seconds from 0 to 86400 (0: every pass reads the sheet)")
    return SheetConfig(spreadsheet=_spreadsheet_key(raw["spreadsheet"].strip(), fail),
                       worksheet=raw.get("worksheet", DEFAULT_WORKSHEET),
                       credentials=raw.get("credentials", "default"),
                       columns=_columns(raw.get("columns", list(sheetlayout.layout_columns(layout))), fail, layout),
                       api_endpoint=_endpoint(raw.get("api_endpoint", GOOGLE_BASE).strip(), fail),
                       timeout=float(timeout), read_every=float(read_every), layout=layout)


def _spreadsheet_key(text: str, fail: Callable[[str], ConfigError]) -> str:
    match = _URL_KEY.search(text)
    key = match[1] if match else text
    if not _KEY.match(key):
        raise fail("spreadsheet must be the sheet's key or its URL (https://docs.google.com/spreadsheets/d/KEY/...)")
    return key


def _columns(value: Any, fail: Callable[[str], ConfigError], layout: str) -> tuple[str, ...]:
    if layout != "jobtpu":
        return tuple(value)
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise fail("columns must be a list of column names")
    for column in value:
        if column not in TITLES:
            raise fail(f"columns: unknown column {column!r} (known: {', '.join(COLUMNS)})")
    if len(set(value)) != len(value):
        raise fail("columns names a column twice")
    if "name" not in value:
        raise fail("columns must include 'name': rows are found by the machine's name")
    return tuple(value)


def _endpoint(text: str, fail: Callable[[str], ConfigError]) -> str:
    url = text if "://" in text else f"https://{text}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise fail("api_endpoint must be a base URL like https://sheets.googleapis.com")
    return url.rstrip("/")


# ----------------------------------------------------------------------------- rows and the sheet
@dataclass(frozen=True)
class Snapshot:
    """One read of the worksheet: the raw grid and where jobtpu's columns are in it."""

    grid: list[list[str]]
    positions: dict[str, int]  # column key → 0-based column in the sheet
    taken: float = 0.0  # when it was read (epoch seconds); 0: not read from the API
    layout: Layout = JOBTPU

    @property
    def rows(self) -> list[SheetRow]:
        """Rows with a machine name, first one of a name only (a copy further down is a person's)."""
        seen: set[str] = set()
        rows = []
        name_at = self.positions.get("name")
        if name_at is None:
            return []
        for index, line in enumerate(self.grid[1:], start=1):
            name = self.layout.machine_of(_at(line, name_at).strip())
            if not name or name in seen:
                continue
            seen.add(name)
            cells = {k: _at(line, i) for k, i in self.positions.items()}
            rows.append(SheetRow(index + 1, {**self.layout.known(name), **cells, "name": name}))
        return rows

    def row(self, name: str) -> SheetRow | None:
        name = self.layout.machine_of(name.strip()) or name  # an alias typed for a tpu-manager row
        return next((r for r in self.rows if r.name == name), None)

    def claims(self, memo: Memo, own: Mapping[str, str] | None = None) -> dict[str, str]:
        """Machine → who holds it by hand: a user cell jobtpu did not write (nor would write now)."""
        own = own or {}
        held = {}
        for row in self.rows:
            holder = self.layout.holder(row)
            if holder and not memo.mine(row.name, holder) and holder != own.get(row.name, ""):
                held[row.name] = holder
        return held


def _at(line: list[str], index: int) -> str:
    return line[index] if index < len(line) else ""


def snapshot_from_grid(grid: list[list[Any]], layout: Layout = JOBTPU) -> Snapshot:
    """The layout locates jobtpu's columns (on its own layout: by the header row's titles)."""
    rows = [[str(c) for c in line] for line in grid]
    return Snapshot(rows, layout.positions(rows[0] if rows else []), layout=layout)


def claim_reason(holder: str) -> str:
    return f"claimed by {holder} in the sheet"


# ----------------------------------------------------------------------------- the memo
@dataclass
class Memo:
    """What jobtpu last wrote (user and note cells) and the machines taken off the sheet."""

    users: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    unregistered: set[str] = field(default_factory=set)
    # The hand claims the last good read saw: they still hold while the API cannot be read.
    claims: dict[str, str] = field(default_factory=dict)
    # When the sheet was last read (epoch seconds), and the digest of the rows the sheet was last
    # brought to: a pass whose rows have that digest, within read_every of the read, skips the API.
    read_at: float = 0.0
    written: str = ""
    read_of: str = ""  # the worksheet that read was of: the claims of another sheet are no claims here
    # User cells a write was sent with but never known to have landed (no answer in time, or the
    # process killed meanwhile): recorded before the write is sent, so a cell holding one of them is
    # jobtpu's, not a claim, and the next write brings it to what it should be (docs/design.md).
    pending: dict[str, str] = field(default_factory=dict)

    def copy(self) -> Memo:
        return Memo(dict(self.users), dict(self.notes), set(self.unregistered), dict(self.claims), self.read_at,
                    self.written, self.read_of, dict(self.pending))

    def mine(self, name: str, holder: str) -> bool:
        """Whether jobtpu wrote (or may have written) `holder` into the machine's user cell."""
        return holder == self.users.get(name, "") or holder == self.pending.get(name)

    def to_bytes(self) -> bytes:
        doc = {"users": self.users, "notes": self.notes, "unregistered": sorted(self.unregistered),
               "claims": self.claims, "read_at": self.read_at, "written": self.written, "read_of": self.read_of,
               **({"pending": self.pending} if self.pending else {})}
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def load_memo(path: Path) -> Memo:
    """An unreadable memo counts as empty: at worst a user cell jobtpu wrote looks like a claim
    until `release` (cells matching the users it runs now never do)."""
    try:
        doc = json.loads(path.read_bytes())
        return Memo(_texts(doc.get("users", {})), _texts(doc.get("notes", {})),
                    {str(n) for n in doc.get("unregistered", [])}, _texts(doc.get("claims", {})),
                    float(doc.get("read_at", 0.0)), str(doc.get("written", "")), str(doc.get("read_of", "")),
                    _texts(doc.get("pending", {})))
    except (OSError, ValueError, AttributeError, TypeError):
        return Memo()


def _texts(mapping: dict[Any, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in mapping.items()}


def save_memo(path: Path, memo: Memo) -> None:
    write_atomic(path, memo.to_bytes())


def sheet_id(config: SheetConfig) -> str:
    return f"{config.spreadsheet}/{config.worksheet}"


def rows_digest(config: SheetConfig, rows: Iterable[MachineRow]) -> str:
    """What a pass would bring the sheet to, in a few bytes: the rows, and where and which columns."""
    doc = [config.spreadsheet, config.worksheet, config.layout, list(config.columns), [astuple(row) for row in rows]]
    return hashlib.sha256(json.dumps(doc, default=str).encode()).hexdigest()[:32]


# ----------------------------------------------------------------------------- planning writes
@dataclass
class WritePlan:
    """Cells to change, as (0-based row, 0-based column) → text, and the memo after the write."""

    cells: dict[tuple[int, int], str]
    memo: Memo

    def ranges(self, worksheet: str) -> list[dict[str, Any]]:
        """One A1 range per run of adjacent changed cells in a row: the body of one batchUpdate."""
        data = []
        for row in sorted({r for r, _ in self.cells}):
            columns = sorted(c for r, c in self.cells if r == row)
            start = prev = columns[0]
            for column in [*columns[1:], None]:
                if column is not None and column == prev + 1:
                    prev = column
                    continue
                values = [cell(self.cells[(row, c)]) for c in range(start, prev + 1)]  # never over Google's cap
                data.append({"range": f"{quote_title(worksheet)}!{_a1(row, start)}:{_a1(row, prev)}",
                             "values": [values]})
                if column is not None:
                    start = prev = column
        return data


def plan_write(snapshot: Snapshot, wanted: Iterable[MachineRow], memo: Memo, columns: tuple[str, ...],
               now: float) -> WritePlan:
    """The fewest cells that make the sheet show `wanted`, leaving claims, people's notes and
    columns jobtpu does not own alone. Empty when the sheet already shows it all."""
    positions, cells = _with_header(snapshot, columns)
    after = memo.copy()
    existing = {r.name: r for r in snapshot.rows}
    next_free = max(len(snapshot.grid), 1)
    for machine in wanted:
        if machine.name in memo.unregistered:
            continue
        row = existing.get(machine.name)
        if row is None and not snapshot.layout.adds_rows:
            continue  # a tab jobtpu does not keep: only rows people made are written
        if row is None:
            row = SheetRow(next_free + 1, {})
            next_free += 1
        target = _row_cells(snapshot.layout, row, machine, memo, after, now)
        if row.cells:
            target.pop("name", None)  # found by its name: leave it as typed (" v3-a " included)
        changed = {k: v for k, v in target.items() if k in positions and v != row.get(k)}
        if changed and "updated" in positions:
            changed["updated"] = when(now)
        for key, value in changed.items():
            cells[(row.number - 1, positions[key])] = value
    return WritePlan(cells, after)


def _with_header(snapshot: Snapshot, columns: tuple[str, ...]) -> tuple[dict[str, int], dict[tuple[int, int], str]]:
    """Where each configured column is, adding the missing ones at the header's right end."""
    if not snapshot.layout.adds_rows:
        return dict(snapshot.positions), {}  # fixed columns: the tab's header is people's
    positions = {k: i for k, i in snapshot.positions.items() if k in columns}
    header = snapshot.grid[0] if snapshot.grid else []
    cells: dict[tuple[int, int], str] = {}
    free = len(header)
    for key in columns:
        if key not in positions:
            positions[key] = free
            cells[(0, free)] = TITLES[key]
            free += 1
    return positions, cells


render_row = JOBTPU.render


def render_rows(machines: Iterable[MachineRow], columns: tuple[str, ...] = COLUMNS) -> list[list[str]]:
    """The header and one line per machine, in `columns` order (`updated` left empty: it is the write's time)."""
    return [[TITLES[c] for c in columns]] + [[render_row(m).get(c, "") for c in columns] for m in machines]


def _row_cells(layout: Layout, row: SheetRow, machine: MachineRow, memo: Memo, after: Memo,
               now: float) -> dict[str, str]:
    """The text each cell of a machine's row should hold; updates `after` with what jobtpu writes."""
    mine = ", ".join(machine.users)
    rendered = layout.render(machine)
    target = {k: rendered[k] for k in layout.always}
    current = layout.holder(row)
    if current and not memo.mine(machine.name, current) and current != mine:
        if not row.get("since"):  # a claim: the person's cell stays; note when jobtpu first saw it
            target["since"] = when(now)
    else:
        target.update({k: rendered[k] for k in layout.held})
        if mine:
            after.users[machine.name] = mine
        else:
            after.users.pop(machine.name, None)
    if machine.note is not None and machine.note != memo.notes.get(machine.name):
        target.update({k: rendered[k] for k in layout.note_cells})
        after.notes[machine.name] = machine.note
    return target


def _a1(row: int, column: int) -> str:
    letters = ""
    index = column + 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return f"{letters}{row + 1}"


def quote_title(title: str) -> str:
    """A worksheet title in an A1 range, always quoted (Google accepts it quoted whatever it holds)."""
    return "'" + title.replace("'", "''") + "'"


# ----------------------------------------------------------------------------- finding
def find(rows: Iterable[SheetRow], tokens: list[str], preemptible: bool | None = None) -> list[SheetRow]:
    """Rows whose accelerator matches every token the way `--req` matches machines (v3, v2,v3, v3+,
    v3-32, preemptible, on-demand); `preemptible` (-p / -n) adds a provisioning filter."""
    from jobtpu.decide.fit import accelerator_matches, parse_request

    request = parse_request(tokens)
    if request.resources:
        name = next(iter(request.resources))
        raise JobtpuError(f"sheet find: {name}=... is a resource; find filters by accelerator",
                          hint="accelerator patterns: v3-32 (exact), v3 (family), v2-32,v3-32 (either), v3+; -p, -n")
    want_preemptible = preemptible if preemptible is not None else request.preemptible
    found = []
    for row in rows:
        accelerator = row.get("accelerator").strip().lower()
        if not all(any(accelerator_matches(p, accelerator) for p in alternatives)
                   for alternatives in request.accelerators):
            continue
        if want_preemptible is not None and row.preemptible is not want_preemptible:
            continue
        found.append(row)
    return found


def format_rows(rows: list[SheetRow], columns: tuple[str, ...] = COLUMNS, layout: Layout = JOBTPU) -> list[str]:
    """Aligned text lines: a header, then one line per row (a cell's own line breaks become spaces)."""
    table = [[layout.title(c).upper() for c in columns]]
    table += [[" ".join((r.get(c) or "-").split()) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table]


# ----------------------------------------------------------------------------- talking to the API
class _Api:
    """gspread's HTTPClient over a session that sends Google's URLs to `api_endpoint` and keeps
    every call within what remains of one deadline (a slow API costs a pass `timeout`, not more).
    One instance makes one call (a read or a write)."""

    def __init__(self, config: SheetConfig) -> None:
        self.config = config
        # The client's modules load first (a second or more on a busy host): `timeout` is for the
        # API's answer, and an import counted in it made a loaded machine report the API as slow.
        _load_client_modules()
        self.deadline = time.monotonic() + config.timeout
        self.client = _http_client(config, self)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def values(self) -> list[list[Any]]:
        doc = self._call(lambda c: c.values_get(self.config.spreadsheet, quote_title(self.config.worksheet),
                                                params={"majorDimension": "ROWS"}))
        values = doc.get("values", []) if isinstance(doc, dict) else None
        if not isinstance(values, list) or not all(isinstance(v, list) for v in values):
            raise SheetError(f"Sheets API at {self.host}: the answer holds no rows")
        return values

    def write(self, data: list[dict[str, Any]]) -> None:
        self._call(lambda c: c.values_batch_update(self.config.spreadsheet,
                                                   body={"valueInputOption": "RAW", "data": data}))

    @property
    def host(self) -> str:
        return urlsplit(self.config.api_endpoint).netloc

    def _call(self, request: Callable[[Any], T]) -> T:
        """One API call; every way it can fail becomes a SheetError line."""
        import requests
        from google.auth import exceptions as auth_errors
        from gspread.exceptions import APIError, GSpreadException

        try:
            return self._within_deadline(request)
        except APIError as e:
            if e.error.get("code") == -1 and e.response.status_code >= 500:  # Google's front end, down for now
                raise SheetError(f"Sheets API at {self.host}: HTTP {e.response.status_code}; {_AGAIN}") from None
            if e.error.get("code") == -1:  # gspread's mark for an error answer that is not JSON (a proxy's page)
                raise SheetError(f"Sheets API at {self.host}: HTTP {e.response.status_code}, not the API's answer"
                                 "; check sheet.api_endpoint") from None
            raise self._refused(e.response.status_code, e.error) from None
        except (requests.Timeout, _OutOfTime):
            raise SheetError(f"Sheets API at {self.host}: no answer within {self.config.timeout:g} s; {_AGAIN}") from None
        except requests.ConnectionError as e:
            why = "connection refused" if "refused" in str(e).lower() else "cannot connect"
            raise SheetError(f"Sheets API at {self.host}: {why}; {_AGAIN}") from None
        except auth_errors.TransportError as e:  # the token endpoint could not be reached: an outage
            raise SheetError(f"Sheets credentials {self.config.credentials!r}: {_first_line(e)}; {_AGAIN}") from None
        except auth_errors.GoogleAuthError as e:  # a key the token endpoint refuses, say
            raise SheetError(credentials_message("Sheets", "sheet.credentials", self.config.credentials, e)) from None
        except (requests.RequestException, GSpreadException, ValueError) as e:
            raise SheetError(f"Sheets API at {self.host}: {type(e).__name__}: {_first_line(e)}") from None
        finally:
            self.client.session.close()  # one call per _Api: no pooled sockets outlive it in a --loop process

    def _within_deadline(self, request: Callable[[Any], T]) -> T:
        """The call on a helper thread, given up at the deadline: socket timeouts alone do not bound
        an answer that trickles in a byte at a time. A call given up on ends with its socket (the
        session is closed) or with the process; its answer is dropped, and the next pass reads again."""
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, request(self.client)))
            except BaseException as e:  # handed to the caller's thread, which sorts it
                outcome.append((False, e))

        worker = threading.Thread(target=run, name="sheets-call", daemon=True)
        worker.start()
        worker.join(max(self.remaining(), 0.0) + _GRACE)
        if not outcome:
            raise _OutOfTime()
        ok, value = outcome[0]
        if ok:
            return value
        raise value

    def _refused(self, status: int, error: Mapping[str, Any]) -> SheetError:
        message = _first_line(error.get("message", ""))
        key, title = self.config.spreadsheet, self.config.worksheet
        if status == 404:
            return SheetError(f"spreadsheet {key} not found",
                              hint="check sheet.spreadsheet, and share the sheet with the credentials' account")
        if status == 400 and "Unable to parse range" in message:
            return SheetError(f"spreadsheet {key} has no worksheet {title!r}",
                              hint="add a tab of that name, or set sheet.worksheet")
        if status in (401, 403):
            return SheetError(f"Sheets API refused credentials {self.config.credentials!r}: {message}",
                              hint=_CREDENTIALS_HINT)
        if status >= 500:  # the API's own trouble, for now: nothing for the user to change
            return SheetError(f"Sheets API at {self.host}: {status} {error.get('status', '')}: "
                              f"{message.rstrip('.')}; {_AGAIN}".replace("  ", " "))
        return SheetError(f"Sheets API: {status} {error.get('status', '')}: {message}".replace("  ", " "))


_AGAIN = "the next pass tries again"


_CREDENTIALS_HINT = ("share the sheet with the key's client_email, or set sheet.credentials to a key file it is "
                     "shared with (docs/reference/machines-json.md §3.8)")


class _OutOfTime(Exception):
    """The deadline passed before a call could be sent."""


def _first_line(error: object) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"https?://\S+", "<url>", text)  # no endpoint URLs, query strings or tokens in a pass's line
    return text[:200]


# Loaded credentials by setting: a `manage --loop` process reuses its access token across passes
# instead of asking the token endpoint again for every read and write.
_LOADED_CREDENTIALS: dict[str, Any] = {}


def _credentials(config: SheetConfig) -> Any:
    kind = config.credentials
    if kind not in _LOADED_CREDENTIALS:
        _LOADED_CREDENTIALS[kind] = _load_credentials(kind)
    return _LOADED_CREDENTIALS[kind]


def _load_credentials(kind: str) -> Any:
    import google.auth
    from google.auth.credentials import AnonymousCredentials

    try:
        if kind == "anonymous":
            return AnonymousCredentials()
        if kind == "default":
            return google.auth.default(scopes=SCOPES)[0]
        return _key_file(Path(os.path.expanduser(kind)))
    except Exception as e:  # google.auth and the OS raise several unrelated types for a missing or bad key
        raise SheetError(credentials_message("Sheets", "sheet.credentials", kind, e)) from None


def _key_file(path: Path) -> Any:
    """A service-account key or a user's ADC file, each through its own loader (never an arbitrary
    external-account configuration, which could make google-auth run a command)."""
    kind = json.loads(path.read_text(encoding="utf-8")).get("type")
    if kind == "service_account":
        from google.oauth2 import service_account

        return service_account.Credentials.from_service_account_file(str(path), scopes=SCOPES)
    if kind == "authorized_user":
        from google.oauth2 import credentials

        return credentials.Credentials.from_authorized_user_file(str(path), scopes=SCOPES)
    raise ValueError(f"a key file of type {kind!r}; use a service-account key or an ADC file (authorized_user)")


def _load_client_modules() -> None:
    import google.auth.transport.requests  # noqa: F401 - loaded here, outside any call's deadline
    import gspread.http_client  # noqa: F401
    import requests  # noqa: F401


def _http_client(config: SheetConfig, api: _Api) -> Any:
    from google.auth.transport.requests import AuthorizedSession
    from gspread.http_client import HTTPClient

    class RoutedSession(AuthorizedSession):
        """Google's URLs go to api_endpoint; no call outlives the deadline."""

        def request(self, method: str, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
            url = url.decode() if isinstance(url, bytes) else url
            if url.startswith(GOOGLE_BASE):
                url = config.api_endpoint + url[len(GOOGLE_BASE):]
            left = api.remaining()
            if left <= 0.05:
                raise _OutOfTime()
            kwargs["timeout"] = min(config.timeout, left)
            kwargs["max_allowed_time"] = left  # a token refresh counts too
            return super().request(method, url, *args, **kwargs)

    session = RoutedSession(_credentials(config))
    return HTTPClient(None, session)  # type: ignore[arg-type]  # a session given: gspread never reads auth


# ----------------------------------------------------------------------------- operations
@dataclass(frozen=True)
class SyncResult:
    wrote: bool = False
    cells: int = 0
    claims: dict[str, str] = field(default_factory=dict)
    problem: str | None = None  # one line for the pass to print; the sheet catches up next time


def read_sheet(config: SheetConfig) -> Snapshot:
    """One read of the worksheet (SheetError when it cannot be had)."""
    grid = _Api(config).values()
    return replace(snapshot_from_grid(grid, config.tab), taken=time.time())


def write_rows(config: SheetConfig, snapshot: Snapshot, rows: Iterable[MachineRow], memo_path: Path,
               now: float | None = None) -> SyncResult:
    """At most one batch write bringing the sheet to `rows`; never raises for the API's sake."""
    try:
        with _memo_lock(config, memo_path):
            return _write_rows(config, snapshot, list(rows), memo_path, time.time() if now is None else now)
    except (BusyError, OSError) as e:
        return SyncResult(problem=f"sheet: {e}")


def _write_rows(config: SheetConfig, snapshot: Snapshot, rows: list[MachineRow], memo_path: Path,
                now: float) -> SyncResult:
    memo = load_memo(memo_path)
    plan = plan_write(snapshot, rows, memo, config.columns, now)
    claims = snapshot.claims(memo, {row.name: ", ".join(row.users) for row in rows})
    plan.memo.claims = claims
    plan.memo.read_at = snapshot.taken or memo.read_at
    plan.memo.read_of = sheet_id(config) if snapshot.taken else memo.read_of
    plan.memo.written = rows_digest(config, rows)
    problem = None
    if plan.cells:
        # What this write sends to user cells, on disk before it is sent: if no answer comes (or the
        # process is killed), the next pass knows those cells may be jobtpu's and repairs them.
        sent = {name: who for name, who in plan.memo.users.items() if memo.users.get(name) != who}
        sent = {name: sent[name] for name in sent if memo.pending.get(name) != sent[name]}
        if sent:
            attempted = memo.copy()
            attempted.pending.update(sent)
            save_memo(memo_path, attempted)
            memo = attempted
        written = {row.name for row in rows}
        plan.memo.pending = {n: v for n, v in memo.pending.items() if n not in written}
        try:
            _Api(config).write(plan.ranges(config.worksheet))
        except SheetError as e:
            plan.memo = memo.copy()  # not known to be written: the next pass plans from the same memory
            plan.memo.claims = claims
            plan.memo.read_at, plan.memo.written = snapshot.taken or memo.read_at, ""
            plan.memo.read_of = sheet_id(config) if snapshot.taken else memo.read_of
            problem = f"sheet: {e}"
    if plan.memo != memo:
        try:
            save_memo(memo_path, plan.memo)
        except OSError as e:
            problem = problem or f"sheet: cannot save {memo_path.name}: {e.strerror or e}"
    return SyncResult(wrote=bool(plan.cells) and problem is None, cells=len(plan.cells) if problem is None else 0,
                      claims=claims, problem=problem)


@contextlib.contextmanager
def _memo_lock(config: SheetConfig, memo_path: Path) -> Iterator[None]:
    """The memo is read, a write made, and the memo saved as one step: a pass and `sheet register`
    at once would otherwise lose one's memory. Held at most one write's time, so waited on for two."""
    fd = open_lock(memo_path.with_name(memo_path.name + ".lock"))
    try:
        deadline = time.monotonic() + 2 * (config.timeout + _GRACE)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BusyError(f"{memo_path.name} is held by another jobtpu command",
                                    hint="try again in a moment") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


class PassSheet:
    """The sheet's part in one pass: read once at its start (claims for dispatch), write once at
    its end. A failed read costs one line (`problem`); the claims last seen still hold meanwhile.
    Made by `start`, a pass reads only when its last read is older than `read_every`, and a pass
    that neither read nor has rows to change does not touch the API (nor import its client)."""

    def __init__(self, config: SheetConfig, memo_path: Path, read: bool = True) -> None:
        self.config, self.memo_path, self.read = config, memo_path, read
        self.snapshot: Snapshot | None = None
        self.problem: str | None = None
        if not read:
            return
        try:
            self.snapshot = read_sheet(config)
        except SheetError as e:
            self.problem = f"sheet: {e}"

    @classmethod
    def start(cls, config: SheetConfig, memo_path: Path, now: float | None = None) -> PassSheet:
        """A pass's start: the sheet is read when the last read is older than `read_every`, else
        the claims that read saw hold (a hand claim is seen at most `read_every` late)."""
        memo = load_memo(memo_path)
        age = (time.time() if now is None else now) - memo.read_at
        return cls(config, memo_path, read=memo.read_of != sheet_id(config) or not 0 <= age < config.read_every)

    def read_within(self, seconds: float, now: float | None = None) -> bool:
        """Whether this sheet's claims were read from the API less than `seconds` ago."""
        memo = load_memo(self.memo_path)
        age = (time.time() if now is None else now) - memo.read_at
        return memo.read_of == sheet_id(self.config) and 0 <= age < seconds

    def quiet(self, rows: list[MachineRow]) -> bool:
        """Nothing for the API this pass: no read at its start, and the sheet was last brought to these rows."""
        return not self.read and load_memo(self.memo_path).written == rows_digest(self.config, rows)

    def claims(self, own: Mapping[str, str] | None = None) -> dict[str, str]:
        """Machine → who holds it in the sheet (`own`: machine → the users jobtpu runs there now)."""
        memo = load_memo(self.memo_path)
        if self.snapshot is None:
            return {name: who for name, who in memo.claims.items() if who != (own or {}).get(name)}
        return self.snapshot.claims(memo, own)

    def finish(self, rows: Iterable[MachineRow], now: float | None = None) -> SyncResult:
        """The pass's write, planned on a fresh read: rows a person inserted, deleted or sorted
        while the pass ran would otherwise receive other machines' cells."""
        rows = list(rows)
        if self.quiet(rows) or (self.read and self.snapshot is None):
            # Quiet, or the API failed this pass already (one line is enough, the next pass catches up).
            return SyncResult(claims=self.claims({row.name: ", ".join(row.users) for row in rows}))
        return sync(self.config, rows, self.memo_path, now)


def sync(config: SheetConfig, rows: Iterable[MachineRow], memo_path: Path, now: float | None = None) -> SyncResult:
    """One read and at most one write, bounded by 2 × timeout; a failure is `problem`, never raised."""
    try:
        snapshot = read_sheet(config)
    except SheetError as e:
        return SyncResult(problem=f"sheet: {e}")
    return write_rows(config, snapshot, rows, memo_path, now)


def _require_row(snapshot: Snapshot, name: str) -> SheetRow:
    row = snapshot.row(name)
    if row is None:
        names = ", ".join(r.name for r in snapshot.rows[:10]) or "none"
        raise NotFoundError(f"the sheet has no row for {name!r} (rows: {names})",
                            hint=snapshot.layout.missing_row_hint(name))
    return row


def _require_column(snapshot: Snapshot, config: SheetConfig, column: str) -> int:
    """The column's place in the sheet: a header people wrote counts, even one jobtpu does not write."""
    if column not in snapshot.positions:
        hint = ("run `jobtpu sheet sync` to add it" if column in config.columns
                else f"add {column!r} to sheet.columns and run `jobtpu sheet sync`, or give a column the header {TITLES[column]!r}")
        raise JobtpuError(f"the sheet has no {TITLES[column]} column; nothing was changed", hint=hint)
    return snapshot.positions[column]


def _write_cells(config: SheetConfig, snapshot: Snapshot, row: SheetRow, values: dict[str, str], now: float) -> None:
    cells = {(row.number - 1, snapshot.positions[k]): v for k, v in values.items() if k in snapshot.positions}
    if "updated" in snapshot.positions and "updated" in config.columns:
        cells[(row.number - 1, snapshot.positions["updated"])] = when(now)
    _Api(config).write(WritePlan(cells, Memo()).ranges(config.worksheet))


def set_note(config: SheetConfig, name: str, text: str, append: bool = False, now: float | None = None) -> str:
    """`sheet note NAME TEXT [--append]`: the note replaced, or TEXT added after it."""
    check_length("the note", text, MAX_SHEET_NOTE, "keep the note short; it is shown in a sheet cell")
    snapshot = read_sheet(config)
    row = _require_row(snapshot, name)
    _require_column(snapshot, config, "note")
    old = row.get("note").strip()
    note = f"{old}{_NOTE_SEPARATOR}{text}" if append and old else text
    _write_cells(config, snapshot, row, {"note": note}, time.time() if now is None else now)
    return f"{name}: note: {note}" if note else f"{name}: note cleared"


def release(config: SheetConfig, name: str, memo_path: Path, user: str | None = None,
            now: float | None = None) -> str:
    """`sheet release NAME [--user U]`: empty a hand claim; with `user`, only when U holds it."""
    snapshot = read_sheet(config)
    row = _require_row(snapshot, name)
    name = row.name  # the memo knows machines by their names, not by an alias typed on a tpu-manager tab
    _require_column(snapshot, config, "user")
    holder = snapshot.layout.holder(row)
    memo = load_memo(memo_path)
    if not holder:
        raise JobtpuError(f"{name} is not claimed in the sheet; nothing was changed")
    if memo.mine(name, holder):
        raise JobtpuError(f"{name} is not claimed by hand: jobtpu's jobs of {holder} run there; nothing was changed",
                          hint=f"`jobtpu kill` their jobs to free {name}")
    holders = [h.strip() for h in holder.split(",")]
    if user is not None and user not in holders:
        raise JobtpuError(f"{name} is claimed by {holder}, not {user}; nothing was changed",
                          hint="leave out --user to release it anyway")
    _write_cells(config, snapshot, row, snapshot.layout.freed(), time.time() if now is None else now)
    with _memo_lock(config, memo_path):  # passes that trust the last read must not keep the claim
        memo = load_memo(memo_path)
        memo.claims.pop(name, None)
        memo.written = ""
        save_memo(memo_path, memo)
    return f"{name}: released (was claimed by {holder})"


def register(config: SheetConfig, name: str, memo_path: Path, row: MachineRow | None = None,
             now: float | None = None) -> str:
    """`sheet register NAME`: the machine gets its row now (and in every later pass)."""
    with _memo_lock(config, memo_path):
        return _register(config, name, memo_path, row, time.time() if now is None else now)


def _register(config: SheetConfig, name: str, memo_path: Path, row: MachineRow | None, now: float) -> str:
    memo = load_memo(memo_path)
    snapshot = read_sheet(config)
    memo.unregistered.discard(name)
    memo.written = ""  # the next pass writes the row as it knows it
    existing = snapshot.row(name)
    if existing is not None:
        save_memo(memo_path, memo)
        return f"{name}: already in the sheet (row {existing.number})"
    plan = plan_write(snapshot, [row or MachineRow(name)], memo, config.columns, now)
    _Api(config).write(plan.ranges(config.worksheet))
    save_memo(memo_path, plan.memo)
    return f"{name}: added to the sheet"


def unregister(config: SheetConfig, name: str, memo_path: Path) -> str:
    """`sheet unregister NAME`: its row goes (the rows below move up, people's columns with them)
    and passes no longer write it, until `sheet register NAME`."""
    with _memo_lock(config, memo_path):
        return _unregister(config, name, memo_path)


def _unregister(config: SheetConfig, name: str, memo_path: Path) -> str:
    snapshot = read_sheet(config)
    row = _require_row(snapshot, name)
    memo = load_memo(memo_path)
    memo.unregistered.add(name)
    memo.written = ""
    memo.users.pop(name, None)
    memo.notes.pop(name, None)
    grid = snapshot.grid
    width = max(len(line) for line in grid)
    below = [line + [""] * (width - len(line)) for line in grid[row.number:]] + [[""] * width]
    cells = {(row.number - 1 + r, c): value for r, line in enumerate(below) for c, value in enumerate(line)}
    _Api(config).write(WritePlan(cells, memo).ranges(config.worksheet))
    save_memo(memo_path, memo)
    return f"{name}: removed from the sheet"


# ----------------------------------------------------------------------------- a job's note
RUN_CONFIG = Path("utils") / "remote_run_config.yml"
_NOTE_LINE = re.compile(r"^wandb_notes\s*:(.*)$")


def job_note(folder: Path, given: str | None = None) -> str | None:
    """The note a job brings to its machine's row: `submit --sheet-note`, else the top-level
    `wandb_notes` of the job's utils/remote_run_config.yml (a one-line or a block scalar), else None.
    Read without a YAML library (a scalar is all it takes); a file that is not there or not
    readable gives None, never an error."""
    if given is not None:
        return given
    try:
        with open(folder / RUN_CONFIG, "rb") as f:  # a run config is small: its first MiB holds the note
            lines = f.read(1 << 20).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for index, line in enumerate(lines):
        match = _NOTE_LINE.match(line)
        if match:
            return _scalar(match[1].strip(), lines[index + 1:])
    return None


def _scalar(text: str, following: list[str]) -> str | None:
    if text[:1] in ("|", ">"):  # a block: the indented lines that follow
        block = []
        for line in following:
            if line.strip() and not line[:1].isspace():
                break
            block.append(line.strip())
        joiner = "\n" if text[0] == "|" else " "
        return joiner.join(block).strip() or None
    if text[:1] in ("'", '"'):
        quote = text[0]
        end = text.rfind(quote)
        body = text[1:end] if end > 0 else text[1:]
        return (body.replace("''", "'") if quote == "'" else body.replace('\\"', '"')) or None
    text = re.split(r"\s#", text, maxsplit=1)[0].strip()  # a plain scalar ends at a comment
    return None if text in ("", "~", "null") else text
