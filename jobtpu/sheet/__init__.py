"""The team's TPU spreadsheet: one row per machine, who uses it since when, and people's notes.

Optional: only a `sheet` object in machines.json turns it on, and gspread (with google-auth and
requests) is imported only inside the functions that talk to the Sheets API (sheet/api.py).

How the sheet is kept (jobtpu's own layout; `sheet.layout: tpu-manager` keeps the older tool's tab as it
is, see jobtpu/decide/sheet_layout.py). Row 1 is a header; jobtpu finds its columns there by title (`Machine`,
`Kind`, ... or the column keys), adds the configured ones that are missing at the right end, and
never touches a column it does not know, so people may add, move and fill their own. A pass reads
the sheet at its start (for claims) and again at its end, to plan its one `values:batchUpdate` on
rows as they are then (people sort and insert rows meanwhile); the write holds only the cells that
differ, so a quiet pass writes nothing. `Updated` changes only with the row. The `User` cell says
who holds a machine: jobtpu writes the users of the jobs running there (or waiting to resume there while
the machine is brought back) and remembers what it wrote in a small
memo file; a user cell holding anything else was typed by a person, is a claim, and stays until
`release` (or the person) empties it; the users it names may still run there (`claimants`). A `Note`
belongs to people: jobtpu writes one only when a job brings a new one (`submit --sheet-note`, or
`wandb_notes`), and empties it when the job leaves, unless a person changed it meanwhile.

Wiring (the few calls the rest of jobtpu makes):
- machines.json: keep the top-level `sheet` object and give it to `config.parse_config(raw)` → SheetConfig
  (a one-line ConfigError when it is wrong). No `sheet` key: nothing here is called.
- A pass (jobtpu/passes/sheet_hook.py): at its start `ps = sync.PassSheet.start(config, memo_path)` (one read, unless
  the last one is younger than `read_every`; memo_path: `<home>/sheet.json`); print `ps.problem` when set. Dispatch skips every machine in
  `ps.claims(own)` (own: machine → ", ".join(users running jobs there now)) but for the users the claim names, giving
  `decide.observation.claim_reason(holder)` as the pending reason and in `machines`. At its end build a SheetMachine per
  machine and `result = ps.finish(rows)`; print `result.problem` when set. Neither ever raises for
  the API's sake; the start costs at most `sheet.timeout`, the end two (and nothing when the start
  failed, or when it did not read and the rows are those last written: a quiet pass). The memo (sheet/memo.py) is jobtpu's own file: `sheet.json` is one of the home's own files (never snapshotted).
- `jobtpu sheet sync`: `sync.sync(config, rows, memo_path)` (print `problem`, exit 1 when set).
- sheet/edits.py: `jobtpu sheet release NAME [--user U]`: `release(config, NAME, memo_path, U)`;
  `sheet note NAME TEXT [--append]`: `set_note(config, NAME, TEXT, append)`;
  `sheet register NAME`: `register(config, NAME, memo_path, row)` (row: the SheetMachine when NAME is
  in machines.json, else None); `sheet unregister NAME`: `unregister(config, NAME, memo_path)`.
  Each prints the line it returns, or raises a JobtpuError (one line, nothing changed).
- `jobtpu sheet find [TYPES...] [-p|-n]`: print `rows.format_rows(rows.find(api.read_sheet(config).rows, TYPES,
  True|False|None))`; `sheet show`: `format_rows(grid.rows, columns, layout, grid.titles(columns), width)`.
- `submit --sheet-note TEXT` (else `wandb_notes` from the job's `utils/remote_run_config.yml`, see
  `jobnote.job_note`): the job keeps it; the pass passes it as SheetMachine.note while the job runs there.
Every failure to reach the API is a SheetError (a JobtpuError): one line, no URL, no traceback.
"""
