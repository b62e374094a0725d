"""A script cut short on its way runs nothing (transport/base.py, `whole`): a pass killed while it
wrote a script to bash's stdin, or a connection dropped mid-send, used to leave bash a prefix, which
`eval "$(cat)"` ran: its complete commands, and a last one with its words cut (a job id 12 read as 1).
Real bash, fed every kind of prefix, through both ways scripts reach a shell."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from jobtpu.remote.scripts import RUN_SCRIPT, call, render, serve_script
from jobtpu.transport.base import whole


def _script(out: Path) -> str:
    """Commands that each leave a mark: any prefix bash runs shows as a file under `out`."""
    return render(("common.sh",), [
        "mark() { : > \"$1\"; }",
        "put() { printf '%s' \"$1\" > \"$2\"; }",
        call("mark", str(out / "first")),
        call("put", "a quoted value\nover two lines } with a brace", str(out / "quoted")),
        "for i in 1 2; do mark \"" + str(out) + "/loop$i\"; done",
        "mark " + str(out / "job_12"),  # unquoted: cut after "job_1", it would name another job
    ])


def _cuts(data: bytes) -> list[int]:
    """Every line end, the last 40 bytes one by one, and random points between; never past the closing
    brace (all but the final newline is the whole script)."""
    rng = random.Random(7)
    ends = [i + 1 for i, c in enumerate(data) if c == ord("\n")]
    return sorted({*ends, *range(max(0, len(data) - 40), len(data)), *(rng.randrange(len(data)) for _ in range(60))}
                  - {len(data), len(data) - 1})


def test_the_whole_script_runs(tmp_path: Path) -> None:
    subprocess.run(RUN_SCRIPT, shell=True, input=whole(_script(tmp_path)).encode(), check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first", "job_12", "loop1", "loop2", "quoted"]


@pytest.mark.parametrize("way", ["eval", "kept shell"])
def test_a_script_cut_anywhere_runs_nothing(tmp_path: Path, way: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    data = whole(_script(out)).encode()
    for cut in _cuts(data):
        if way == "eval":
            subprocess.run(RUN_SCRIPT, shell=True, input=data[:cut], capture_output=True)
        else:  # the kept connection's shell: a length, then fewer bytes than it says, then the end
            subprocess.run(["bash", "--noprofile", "--norc", "-c", serve_script()],
                           input=f"{len(data)}\n".encode() + data[:cut], capture_output=True)
        made = sorted(p.name for p in out.iterdir())
        assert made == [], f"cut at byte {cut} of {len(data)} ran: {made}"
