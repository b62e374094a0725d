"""Bench: one `jobtpu submit` of a small folder against starting Python, as a user pays them: the
console script of a jobtpu pip-installed in a fresh venv, and a bare `python -c pass` of the same
interpreter from a venv with nothing installed (bench/clirun.py installed_jobtpu).

A submit should cost little more than starting Python: import only what the command needs, and do
no work a later pass would redo. Each round times both, alternating, into the same home (the
folder is unchanged, so its snapshot is reused as a resubmit's is).
Target: submit / bare start <= 6x (medians over --rounds).
Usage: python bench/submit_start.py [--rounds 15]"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from clirun import installed_jobtpu, run, timed, user_env  # bench/clirun.py (benches run as scripts)

REPO = Path(__file__).resolve().parent.parent
TARGET = 6.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        jobtpu, python = installed_jobtpu(tmp, REPO)
        env = user_env(JOBTPU_USER="alice")
        home, src = tmp / "home", tmp / "src"
        src.mkdir()
        for i in range(20):
            (src / f"file{i}.py").write_text(f"print({i})\n")
        run([*jobtpu, "--home", str(home), "init"], env)
        submit = [*jobtpu, "--home", str(home), "submit", "--dir", str(src), "--cmd", "true"]
        floor = [*python, "-c", "pass"]
        timed(submit, env)  # the snapshot's archive exists from now on, as for a resubmit
        ours, base = [], []
        for _ in range(args.rounds):
            base.append(timed(floor, env))
            ours.append(timed(submit, env))
    o, b = statistics.median(ours), statistics.median(base)
    verdict = "ok" if o / b <= TARGET else "OVER"
    print(f"submit of a 20-file folder: median {o * 1000:.0f} ms; bare python start: median {b * 1000:.0f} ms; "
          f"{o / b:.1f}x (target <= {TARGET:.0f}x) {verdict}")


if __name__ == "__main__":
    main()
