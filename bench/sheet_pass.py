"""A quiet `jobtpu manage` with the team sheet configured against one without, side by side in one run:
two homes with the same N machines, one of them with a `sheet` section pointing at the fake Sheets
API (tests/fake_sheets.py). Each round runs one fresh-process pass in each home, alternately, as cron
would; the sheet home's first pass writes its rows, the passes timed are quiet. Target: the sheet
home's median at most 1.2x the other's, and no request to the API during the quiet passes. For
scale, a third home reads the sheet on every pass (`read_every` 0), as one pass in `read_every`
seconds does: what a pass that reads costs (client imports and two reads, no write).

    python3 bench/sheet_pass.py [--machines 16] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_sheets import FakeSheetsApi  # noqa: E402

KEY = "1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms"


def make_home(root: Path, machines: int, sheet: dict[str, object] | None) -> Path:
    root.mkdir(parents=True)
    doc: dict[str, object] = {"machines": {f"m{i}": {"kind": "local", "accelerator": "v3-8"} for i in range(machines)}}
    if sheet is not None:
        doc["sheet"] = sheet
    (root / "machines.json").write_text(json.dumps(doc))
    return root


def one_pass(home: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBTPU_USER": "bench"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jobtpu.cli", "--home", str(home), "manage"], check=True, env=env,
                   capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    api = FakeSheetsApi().start()
    api.add_spreadsheet(KEY)
    with tempfile.TemporaryDirectory() as tmp:
        plain = make_home(Path(tmp) / "plain", args.machines, None)
        sheet: dict[str, object] = {"spreadsheet": KEY, "credentials": "anonymous", "api_endpoint": api.endpoint}
        with_sheet = make_home(Path(tmp) / "sheet", args.machines, sheet)
        reading = make_home(Path(tmp) / "reading", args.machines, {**sheet, "read_every": 0})
        one_pass(plain)
        one_pass(with_sheet)  # writes the rows
        assert len(api.grid(KEY, "jobtpu")) == args.machines + 1
        one_pass(reading)
        times: dict[str, list[float]] = {"without": [], "with": [], "reading": []}
        asked = 0
        for _ in range(args.rounds):
            times["without"].append(one_pass(plain))
            api.clear_log()
            times["with"].append(one_pass(with_sheet))
            asked += len(api.requests_made())
            times["reading"].append(one_pass(reading))
    api.close()
    without, with_, read = (statistics.median(times[k]) for k in ("without", "with", "reading"))
    print(f"{args.machines} machines, {args.rounds} rounds of quiet fresh-process passes, median: "
          f"without a sheet {without * 1000:.0f} ms, with a sheet {with_ * 1000:.0f} ms, "
          f"ratio {with_ / without:.2f} (target <= 1.2); Sheets API requests during them: {asked} (target 0); "
          f"a pass that reads the sheet (once per read_every) {read * 1000:.0f} ms")


if __name__ == "__main__":
    main()
