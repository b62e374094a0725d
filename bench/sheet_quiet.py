"""What the TPU sheet adds to a quiet pass: the pass's sheet work (read at its start, fresh read and
no write at its end) for N machines against the fake Sheets API (tests/fake_sheets.py, driven by the
real gspread client), (a) in a fresh process, as a cron pass pays it (imports included), and (b) in
a warm process, as `manage --loop` pays it. Checks that the quiet passes wrote nothing. Compare the
medians with a quiet `jobtpu manage` (target once wired in: a quiet pass with a sheet at most 1.2x
one without).

    python3 bench/sheet_quiet.py [--machines 16] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobtpu.decide.sheet_layout import SheetMachine  # noqa: E402
from jobtpu.schema.sheet_config import parse_config  # noqa: E402
from jobtpu.sheet.sync import PassSheet, sync  # noqa: E402
from tests.fake_sheets import FakeSheetsApi  # noqa: E402

KEY = "1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms"
ONE_PASS = """
import sys, time
from pathlib import Path
started = time.perf_counter()
from jobtpu.sheet import sync
from jobtpu.schema import sheet_config as sheetconfig
from jobtpu.decide import sheet_layout as layout
config = sheetconfig.parse_config({{"spreadsheet": "{key}", "credentials": "anonymous", "api_endpoint": "{endpoint}"}})
rows = [layout.SheetMachine(f"v3-{{i}}", "tpu", "v3-8", "europe-west4-a", "preemptible", "idle") for i in range({n})]
ps = sync.PassSheet(config, Path("{memo}"))
ps.claims()
result = ps.finish(rows, now=1.0)
assert ps.problem is None and result.problem is None and not result.wrote, (ps.problem, result)
print(time.perf_counter() - started)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    api = FakeSheetsApi().start()
    api.add_spreadsheet(KEY)
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        memo = Path(tmp) / "sheet.json"
        config = parse_config({"spreadsheet": KEY, "credentials": "anonymous", "api_endpoint": api.endpoint})
        rows = [SheetMachine(f"v3-{i}", "tpu", "v3-8", "europe-west4-a", "preemptible", "idle")
                for i in range(args.machines)]
        assert sync(config, rows, memo, now=1.0).wrote
        api.clear_log()
        code = ONE_PASS.format(key=KEY, endpoint=api.endpoint, n=args.machines, memo=memo)
        cold = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                     cwd=root).stdout) for _ in range(args.rounds)]
        warm = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            ps = PassSheet(config, memo)
            ps.claims()
            assert not ps.finish(rows, now=1.0).wrote
            warm.append(time.perf_counter() - started)
        writes = len(api.requests_made(writes_only=True))
    api.close()
    print(f"{args.machines} machines, {args.rounds} rounds: quiet pass's sheet work, median "
          f"cold {statistics.median(cold) * 1000:.0f} ms (imports included), warm {statistics.median(warm) * 1000:.1f} ms;"
          f" writes during quiet passes: {writes} (target 0)")


if __name__ == "__main__":
    main()
