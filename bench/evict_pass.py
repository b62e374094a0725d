"""Bench: one pass's decision when a large urgent sweep meets a full fleet (docs/reference/
requests-and-rules.md §8): 10,000 queued jobs of class `urgent` and 1,000 running jobs of class
`low` on 100 machines of 10 slots, side by side with the floor, the same pass with no
priority_classes (every queued job just waits). The decision is pure (jobtpu/decide/core.py), so the
bench calls it directly and times nothing but it: medians over --rounds, alternating.

Each urgent job that fits nowhere looks for jobs to evict: 1,000 of them evict one low job each, the
other 9,000 find nothing left. Looking costs one scan of the jobs per pass (decide/evict_index.py),
not one per urgent job: target <= 4x the floor (the floor stops nothing; this pass
stops 1,000 jobs).
Usage: python bench/evict_pass.py [--queued 10000] [--running 1000] [--rounds 5]"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobtpu.decide import core  # noqa: E402
from jobtpu.decide.observation import Kill, MachineView, Observation  # noqa: E402
from jobtpu.decide.workers import WorkerRef, WorkerState  # noqa: E402
from jobtpu.schema.fleet import Fleet, Machine, MachineKind  # noqa: E402
from jobtpu.schema.priority import parse_classes  # noqa: E402
from jobtpu.schema.state import Attempt, Job, Status  # noqa: E402

SLOTS = 10
TARGET = 4.0
CLASSES = {"low": {"min_runtime": 0}, "normal": {"default": True}, "urgent": {}}
T0 = 1_000_000.0


def scene(queued: int, running: int, classes: bool) -> tuple[list[Job], Fleet, Observation]:
    names = [f"m{i}" for i in range(max(1, running // SLOTS))]
    fleet = Fleet(machines={n: Machine(name=n, kind=MachineKind.LOCAL, resources={"slot": SLOTS}) for n in names},
                  classes=parse_classes(CLASSES) if classes else None)
    jobs: list[Job] = []
    views = {n: MachineView(reachable=True) for n in names}
    for i in range(running):
        name = names[i // SLOTS]
        job = Job(id=i + 1, user="bob", cmd="python train.py", archive="a.tar.gz", created=T0 + i,
                  priority_class="low" if classes else None, status=Status.RUNNING, machine=name,
                  alloc={"slot": [i % SLOTS]}, attempts=[Attempt(n=0, machine=name, started=T0)], log_grew=T0 + 500)
        ref = WorkerRef(job.id, 0, 0)
        views[name].workers[ref] = WorkerState(ref, pid=100 + i, alive=True, exit_code=None, log_size=0, claimed=True)
        jobs.append(job)
    for i in range(queued):
        jobs.append(Job(id=running + i + 1, user="alice", cmd=f"python eval.py --seed {i}", archive="a.tar.gz",
                        created=T0 + running + i, priority_class="urgent" if classes else None))
    return jobs, fleet, Observation(now=T0 + 1000, machines=views)


def one(queued: int, running: int, classes: bool) -> tuple[float, int]:
    jobs, fleet, seen = scene(queued, running, classes)
    start = time.perf_counter()
    plan = core.decide(jobs, fleet, seen)
    took = time.perf_counter() - start
    return took, sum(isinstance(a, Kill) for a in plan.actions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    floor, classed, evicted = [], [], 0
    for _ in range(opts.rounds):
        floor.append(one(opts.queued, opts.running, False)[0])
        took, evicted = one(opts.queued, opts.running, True)
        classed.append(took)
    f, c = statistics.median(floor), statistics.median(classed)
    ratio = c / f
    print(f"{opts.queued} queued urgent, {opts.running} running low: {evicted} evicted in one pass")
    print(f"pass with classes {c:.3f} s   floor (no classes) {f:.3f} s   ratio {ratio:.2f}x   target <= {TARGET}x  "
          + ("ok" if ratio <= TARGET else "OVER"))
    sys.exit(0 if ratio <= TARGET else 1)


if __name__ == "__main__":
    main()
