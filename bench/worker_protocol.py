"""Benchmark the worker protocol's cost against bare words, on both ends of a probe.

Bash (the worker, every busy worker every round): the real probe script over N workers (each with a
pid record and a log with new bytes) against the same script whose jobtpu_say prints its values as
bare words; and N `worker` reports by jobtpu_say alone against N `echo`s. Python (the home, every
pass): decoding N reports into WorkerStates (scripts.parse_probe) against splitting the words (the
parser of old, kept here as the baseline). Each prints its times and the ratio.

python bench/worker_protocol.py [--workers 200] [--rounds 5]"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobtpu.decide.workers import WorkerRef, WorkerState  # noqa: E402
from jobtpu.remote.scripts import parse_probe, probe_script, render  # noqa: E402

SAY = ('jobtpu_say worker n:job "$i" n:attempt 0 n:worker 3 n:pid 12345 b:alive 1 n:exit - n:size 1048576 '
       "b:claimed 1 n:at - n:marked -")
ECHO = 'echo "W $i 0 3 12345 1 - 1048576 1 - -"'


def bash_lines(command: str, workers: int) -> tuple[float, str]:
    script = render(["common.sh"], [f"for ((i = 0; i < {workers}; i++)); do {command}; done"])
    start = time.perf_counter()
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return time.perf_counter() - start, done.stdout


# The baseline's jobtpu_say: its values as words, as the scripts printed them before.
WORDS_SAY = 'jobtpu_say() { local out=$1; shift; while [ $# -ge 2 ]; do out+=" $2"; shift 2; done; echo "$out"; }'


def probe_run(root: Path, workers: int, words: bool) -> float:
    script = probe_script(str(root), [(WorkerRef(w, 0, 0), 0) for w in range(workers)], home_id="bench")
    if words:  # defined after common.sh's, so it is the one called
        script = script.replace("\njobtpu_probe ", f"\n{WORDS_SAY}\njobtpu_probe ", 1)
    start = time.perf_counter()
    subprocess.run(["bash", "-c", script], capture_output=True, check=True)
    return time.perf_counter() - start


def make_root(base: Path, workers: int) -> Path:
    for w in range(workers):
        meta = base / "meta" / str(w)
        meta.mkdir(parents=True)
        (meta / "0.0.pid").write_text("1 0\n")  # pid 1 with another start time: not alive, never signalled
        (meta / "0.0.log").write_bytes(b"step 1 loss 0.5\n" * 64)
    return base


def parse_words(stdout: str) -> dict[WorkerRef, WorkerState]:
    """The word parser the protocol replaced: the baseline."""
    states: dict[WorkerRef, WorkerState] = {}
    for line in stdout.splitlines():
        words = line.split(" ")
        if words[0] == "W" and len(words) in (10, 11):
            ref = WorkerRef(int(words[1]), int(words[2]), int(words[3]))
            states[ref] = WorkerState(
                ref=ref, pid=int(words[4]) if words[4].isdigit() else None, alive=words[5] == "1",
                exit_code=int(words[6]) if words[6].lstrip("-").isdigit() else None,
                log_size=int(words[7]), claimed=words[8] == "1", exited_at=None,
                marked=int(words[10]) if len(words) == 11 and words[10].isdigit() else 0)
    return states


def best(rounds: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(rounds))


def timed(parse: Callable[[str], object], text: str) -> float:
    start = time.perf_counter()
    parse(text)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n = args.workers
    with tempfile.TemporaryDirectory() as tmp:
        root = make_root(Path(tmp), n)
        probe_json = best(args.rounds, lambda: probe_run(root, n, words=False))
        probe_words = best(args.rounds, lambda: probe_run(root, n, words=True))
    print(f"probe of {n} workers, best of {args.rounds}: reports {probe_json:.3f}s   words {probe_words:.3f}s   "
          f"ratio {probe_json / probe_words:.2f}")
    said = [bash_lines(SAY, n) for _ in range(args.rounds)]
    echoed = [bash_lines(ECHO, n) for _ in range(args.rounds)]
    json_out, words_out = said[0][1], echoed[0][1]
    assert parse_probe(json_out) == parse_words(words_out), "the two formats disagree"
    say_s = min(t for t, _ in said)
    echo_s = min(t for t, _ in echoed)
    decode_s = best(args.rounds, lambda: timed(parse_probe, json_out))
    words_s = best(args.rounds, lambda: timed(parse_words, words_out))
    print(f"{n} worker reports alone, best of {args.rounds} (whole bash runs; spread "
          f"{statistics.pstdev(t for t, _ in said):.3f}s)")
    print(f"bash   jobtpu_say {say_s / n * 1e6:8.1f} us/line   echo words {echo_s / n * 1e6:8.1f} us/line   "
          f"ratio {say_s / echo_s:.2f}")
    print(f"python decode     {decode_s / n * 1e6:8.1f} us/line   split words {words_s / n * 1e6:8.1f} us/line   "
          f"ratio {decode_s / words_s:.2f}")


if __name__ == "__main__":
    main()
