"""Benchmark jobtpu.snapshot.archive.snapshot against `git ls-files -z | tar --null -T - -czf` on a synthetic checkout.

python bench/snapshot.py [--files 20000 --kept-mb 200 --ignored-mb 1000] [--rounds 3] [--quick]
Targets: first/baseline <= 1.3, resnapshot/first <= 0.2."""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402

from jobtpu.snapshot.archive import snapshot  # noqa: E402

T = TypeVar("T")

WORDS = ["def", "class", "return", "import", "self", "for", "in", "if", "else", "while", "yield", "lambda",
         "try", "except", "with", "as", "print", "range", "len", "dict", "list", "tuple", "numpy", "jax",
         "params", "batch", "grad", "loss", "optimizer", "learning_rate", "step", "config", "x", "y", "z"]


def corpus(rng: random.Random, size: int) -> bytes:
    """Source-like text: compresses about as well as real code (roughly 4x with gzip -6)."""
    lines = []
    n = 0
    while n < size:
        indent = " " * 4 * rng.randrange(4)
        line = indent + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(2, 12))) + f"  # {rng.random()}\n"
        lines.append(line)
        n += len(line)
    return "".join(lines).encode()


def build(root: Path, files: int, kept_mb: int, ignored_mb: int) -> None:
    rng = random.Random(42)
    text = corpus(rng, 8 << 20)
    kept = kept_mb << 20
    # mixed sizes: many small files, a tail of big ones; about 15% of the bytes random binary
    weights = [rng.paretovariate(1.2) for _ in range(files)]
    scale = kept / sum(weights)
    for i, w in enumerate(weights):
        size = max(1, int(w * scale))
        p = root / f"pkg{i % 40}" / f"mod{i % 7}" / (f"f{i}.bin" if i % 10 == 0 else f"f{i}.py")
        p.parent.mkdir(parents=True, exist_ok=True)
        if i % 10 == 0 and rng.random() < 0.6:
            p.write_bytes(os.urandom(size))
        else:
            start = rng.randrange(max(1, len(text) - size))
            p.write_bytes(f"# file {i}\n".encode() + text[start:start + size])
    (root / ".gitignore").write_text("data/\n*.ckpt\n__pycache__/\n")
    ignored = ignored_mb << 20
    chunk = os.urandom(8 << 20)
    for j in range(max(1, ignored * 3 // 4 // (64 << 20))):
        write_big(root / "data" / f"shard{j}.bin", min(64 << 20, ignored * 3 // 4), chunk)
    ckpts = max(1, ignored // 4 // (16 << 20))
    for j in range(ckpts):
        write_big(root / f"pkg{j % 40}" / f"model{j}.ckpt", ignored // 4 // ckpts, chunk)
    git = ["git", "-C", str(root), "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "tree"], check=True)


def write_big(path: Path, size: int, chunk: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        while size > 0:
            f.write(chunk[: min(size, len(chunk))])
            size -= len(chunk)


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--kept-mb", type=int, default=200)
    ap.add_argument("--ignored-mb", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2k files, 20 MB kept, 100 MB ignored")
    args = ap.parse_args()
    if args.quick:
        args.files, args.kept_mb, args.ignored_mb = 2000, 20, 100
    tmp = Path(tempfile.mkdtemp(prefix="jobtpu-bench-"))
    try:
        tree = tmp / "tree"
        t, _ = timed(lambda: build(tree, args.files, args.kept_mb, args.ignored_mb))
        print(f"built {args.files} kept files, ~{args.kept_mb} MB kept, ~{args.ignored_mb} MB ignored in {t:.1f}s")
        quiet = Console(file=io.StringIO(), stderr=True)
        base, first, again = [], [], []
        for r in range(args.rounds):
            out = tmp / f"baseline{r}.tgz"
            t, _ = timed(partial(subprocess.run, f"git ls-files -z | tar --null -T - -czf {out}", shell=True,
                                 cwd=tree, check=True))
            base.append(t)
            arch = tmp / f"archives{r}"
            t, one = timed(partial(snapshot, tree, arch, console=quiet))
            first.append(t)
            t, two = timed(partial(snapshot, tree, arch, console=quiet))
            again.append(t)
            assert not one.reused and two.reused and one.name == two.name
            print(f"round {r + 1}: baseline {base[-1]:.2f}s  first {first[-1]:.2f}s  resnapshot {again[-1]:.3f}s"
                  f"  ({one.files} files, {one.size / 1e6:.0f} MB -> "
                  f"{one.path.stat().st_size / 1e6:.0f} MB; baseline {out.stat().st_size / 1e6:.0f} MB)")
        b, f, a = (statistics.median(x) for x in (base, first, again))
        print(f"median: baseline {b:.2f}s  first {f:.2f}s  resnapshot {a:.3f}s")
        print(f"first/baseline = {f / b:.2f} (target <= 1.3)   resnapshot/first = {a / f:.3f} (target <= 0.2)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
