"""The sheet's part in a pass and in `sheet sync`: read once, then at most one batch write that
brings the machines' rows to what the pass knows, the memo kept in step. Never raises for the
API's sake: a failure is one `problem` line and the next pass catches up."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from jobtpu.decide.sheet_layout import SheetMachine
from jobtpu.errors import BusyError, message_of
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.sheet_config import SheetConfig, sheet_id
from jobtpu.sheet.api import SheetApi, SheetError, read_sheet
from jobtpu.sheet.memo import load_memo, memo_lock, rows_digest, save_memo
from jobtpu.sheet.rows import SheetGrid, plan_write


class SyncResult(msgspec.Struct, frozen=True):
    wrote: bool = False
    cells: int = 0
    claims: dict[str, str] = msgspec.field(default_factory=dict)
    problem: str | None = None  # one line for the pass to print; the sheet catches up next time



def write_rows(config: SheetConfig, grid: SheetGrid, rows: Iterable[SheetMachine], memo_path: Path,
               now: float | None = None, seen: Mapping[str, str] | None = None) -> SyncResult:
    """At most one batch write bringing the sheet to `rows`; never raises for the API's sake.
    `seen`: the claims the pass's dispatch was given, when a pass writes."""
    try:
        with memo_lock(config, memo_path):
            return _write_rows(config, grid, list(rows), memo_path, time.time() if now is None else now, seen)
    except (BusyError, OSError) as e:
        return SyncResult(problem=f"sheet: {message_of(e)}")


def _write_rows(config: SheetConfig, grid: SheetGrid, rows: list[SheetMachine], memo_path: Path,
                now: float, seen: Mapping[str, str] | None = None) -> SyncResult:
    memo = load_memo(memo_path)
    if seen is not None:
        # A person's claim their own job came to run under keeps being a claim (rows.is_claim), even
        # when no write since the pass's read recorded it.
        memo.claims = {**memo.claims, **seen}
    plan = plan_write(grid, rows, memo, config.columns, now)
    claims = grid.claims(memo, {row.name: ", ".join(row.users) for row in rows})
    plan.memo.claims = claims
    plan.memo.read_at = grid.taken or memo.read_at
    plan.memo.read_of = sheet_id(config) if grid.taken else memo.read_of
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
            SheetApi(config).write(plan.ranges(config.worksheet))
        except SheetError as e:
            plan.memo = memo.copy()  # not known to be written: the next pass plans from the same memory
            plan.memo.claims = claims
            plan.memo.read_at, plan.memo.written = grid.taken or memo.read_at, ""
            plan.memo.read_of = sheet_id(config) if grid.taken else memo.read_of
            problem = f"sheet: {message_of(e)}"
    if plan.memo != memo:
        try:
            save_memo(memo_path, plan.memo)
        except OSError as e:
            problem = problem or f"sheet: cannot save {memo_path.name}: {e.strerror or e}"
    return SyncResult(wrote=bool(plan.cells) and problem is None, cells=len(plan.cells) if problem is None else 0,
                      claims=claims, problem=problem)



class PassSheet:
    """The sheet's part in one pass: read once at its start (claims for dispatch), write once at
    its end. A failed read costs one line (`problem`); the claims last seen still hold meanwhile.
    Made by `start`, a pass reads only when its last read is older than `read_every`, and a pass
    that neither read nor has rows to change does not touch the API (nor import its client)."""

    def __init__(self, config: SheetConfig, memo_path: Path, read: bool = True) -> None:
        self.config, self.memo_path, self.read = config, memo_path, read
        self.grid: SheetGrid | None = None
        self.problem: str | None = None
        self.given: dict[str, str] | None = None  # the claims `claims` last gave (to dispatch)
        if not read:
            return
        try:
            self.grid = read_sheet(config)
        except SheetError as e:
            self.problem = f"sheet: {message_of(e)}"

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

    def quiet(self, rows: list[SheetMachine]) -> bool:
        """Nothing for the API this pass: no read at its start, and the sheet was last brought to these rows."""
        return not self.read and load_memo(self.memo_path).written == rows_digest(self.config, rows)

    def claims(self, own: Mapping[str, str] | None = None) -> dict[str, str]:
        """Machine → who holds it in the sheet (`own`: machine → the users jobtpu runs there now)."""
        memo = load_memo(self.memo_path)
        self.given = dict(memo.claims) if self.grid is None else self.grid.claims(memo, own)
        return dict(self.given)

    def finish(self, rows: Iterable[SheetMachine], now: float | None = None) -> SyncResult:
        """The pass's write, planned on a fresh read: rows a person inserted, deleted or sorted
        while the pass ran would otherwise receive other machines' cells."""
        rows = list(rows)
        if self.quiet(rows) or (self.read and self.grid is None):
            # Quiet, or the API failed this pass already (one line is enough, the next pass catches up).
            return SyncResult(claims=self.claims({row.name: ", ".join(row.users) for row in rows}))
        return sync(self.config, rows, self.memo_path, now, self.given)


def sync(config: SheetConfig, rows: Iterable[SheetMachine], memo_path: Path, now: float | None = None,
         seen: Mapping[str, str] | None = None) -> SyncResult:
    """One read and at most one write, bounded by 2 × timeout; a failure is `problem`, never raised."""
    try:
        grid = read_sheet(config)
    except SheetError as e:
        return SyncResult(problem=f"sheet: {message_of(e)}")
    return write_rows(config, grid, rows, memo_path, now, seen)

