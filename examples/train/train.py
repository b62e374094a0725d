"""A tiny training job for jobtpu: fits y = 3x + 1 by gradient descent, with no dependencies.

It checkpoints every few steps, resumes from its checkpoint when JOBTPU_RESUME=1, and writes its
final result to result.json. Where checkpoints go is --ckpt-dir (default: ./ckpt, inside the job's
folder); on a TPU, point it at a bucket or shared disk, since a recreated TPU has a new, empty disk.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--ckpt-every", type=int, default=20)
    parser.add_argument("--step-seconds", type=float, default=0.01)
    parser.add_argument("--ckpt-dir", default="ckpt")
    parser.add_argument("--config.training.learning_rate", dest="lr", type=float, default=0.05)
    args, _ = parser.parse_known_args()

    worker = int(os.environ.get("JOBTPU_WORKER", "0"))
    ckpt = Path(args.ckpt_dir) / f"worker{worker}.json"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    state = {"step": 0, "w": 0.0, "b": 0.0}
    if os.environ.get("JOBTPU_RESUME") == "1" and ckpt.exists():
        state = json.loads(ckpt.read_text())
        print(f"resumed from step {state['step']}", flush=True)
    else:
        print("starting from scratch", flush=True)

    while state["step"] < args.steps:
        # Data depend only on the step, so a resumed run sees exactly what an uninterrupted one would.
        rng = random.Random(state["step"])
        xs = [rng.uniform(-1, 1) for _ in range(32)]
        grad_w = sum(2 * ((state["w"] * x + state["b"]) - (3 * x + 1)) * x for x in xs) / len(xs)
        grad_b = sum(2 * ((state["w"] * x + state["b"]) - (3 * x + 1)) for x in xs) / len(xs)
        state["w"] -= args.lr * grad_w
        state["b"] -= args.lr * grad_b
        state["step"] += 1
        if state["step"] % args.ckpt_every == 0 or state["step"] == args.steps:
            tmp = ckpt.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            tmp.replace(ckpt)
            print(f"step {state['step']} w={state['w']:.6f} b={state['b']:.6f} (checkpoint)", flush=True)
        time.sleep(args.step_seconds)

    result = {"w": round(state["w"], 9), "b": round(state["b"], 9), "steps": state["step"]}
    Path("result.json").write_text(json.dumps(result) + "\n")
    print(f"done: {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main()
