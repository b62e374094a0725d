"""What notifications cost a quiet pass: two homes alike (the local machine, some running jobs), one
of them with notification destinations (a webhook and a command), passes run alternately in this
process; medians and their ratio (target: at most 1.1x). A quiet pass has nothing to notify, so
delivery must cost it next to nothing (one stat of the outbox).

    python3 bench/notify_pass.py [--jobs 8] [--rounds 21]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobtpu.cli import main as jobtpu_main  # noqa: E402
from jobtpu.home.layout import Home  # noqa: E402
from jobtpu.home.store import Store  # noqa: E402
from jobtpu.passes.manage import run_pass  # noqa: E402


def jobtpu(home: Path, *args: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = jobtpu_main(["--home", str(home), *args])
    if code != 0:
        raise SystemExit(f"jobtpu {' '.join(args)} failed ({code})")


def make_home(base: Path, name: str, jobs: int, notify: list[dict[str, object]] | None) -> Home:
    root = base / name
    root.mkdir()
    doc: dict[str, object] = {"machines": {"local": {"kind": "local", "resources": {"slot": jobs},
                                                     "root": str(root / "run")}}}
    if notify is not None:
        doc["notify"] = notify
    (root / "machines.json").write_text(json.dumps(doc))
    src = base / "code"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text("print('hi')\n")
    for _ in range(jobs):
        jobtpu(root, "submit", "--dir", str(src), "--cmd", "sleep 600")
    home = Home(root)
    deadline = time.monotonic() + 60
    while not all(j.status == "running" for j in Store(home).load().jobs):
        if time.monotonic() > deadline:
            raise SystemExit("the jobs did not start")
        run_pass(home)
    return home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    os.environ["JOBTPU_USER"] = "bench"  # submits and kills as one user
    with tempfile.TemporaryDirectory(prefix="jobtpu-bench-") as tmp:
        base = Path(tmp)
        plain = make_home(base, "plain", args.jobs, None)
        told = make_home(base, "notify", args.jobs, [
            {"webhook": "http://127.0.0.1:9/hook", "events": ["failed", "recovered"]},
            {"command": "cat > /dev/null", "events": ["failed", "finished", "machine_down"]}])
        try:
            for home in (plain, told):  # warm: imports, page cache
                run_pass(home)
            plain_t: list[float] = []
            told_t: list[float] = []
            for i in range(args.rounds):
                pair = ((plain, plain_t), (told, told_t))
                for home, times in pair if i % 2 else pair[::-1]:  # alternate who goes first: no drift bias
                    t = time.perf_counter()
                    report = run_pass(home)
                    times.append(time.perf_counter() - t)
                    if report.notes or report.skipped:
                        raise SystemExit(f"not a quiet pass: {report.notes}")
            a, b = statistics.median(plain_t), statistics.median(told_t)
            print(f"{'jobs':>4}  {'quiet pass':>10}  {'with notify':>11}  {'ratio':>5}")
            print(f"{args.jobs:>4}  {a * 1000:>8.1f}ms  {b * 1000:>9.1f}ms  {b / a:>5.2f}", flush=True)
        finally:
            for home in (plain, told):
                jobtpu(home.root, "kill", *[str(j.id) for j in Store(home).load().jobs if j.active])


if __name__ == "__main__":
    main()
