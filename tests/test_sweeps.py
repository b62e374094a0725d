"""Sweeps and dependencies as typed (jobtpu/sweeps.py, pure); the end-to-end sweeps are in the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobtpu.errors import JobtpuError
from jobtpu.sweeps import (
    as_overrides,
    check_dependencies,
    expand,
    id_range,
    parse_after,
    parse_axes,
    read_file,
)

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast



def test_axes_expand_to_the_cross_product_first_axis_slowest() -> None:
    combos = expand(parse_axes(["lr=0.1,0.01,0.001", "bs=32,64"]))
    assert len(combos) == 6 and combos[0] == {"lr": "0.1", "bs": "32"} and combos[1] == {"lr": "0.1", "bs": "64"}
    assert as_overrides(combos[-1]) == ["lr=0.001", "bs=64"]


@pytest.mark.parametrize(("specs", "needle"), [
    (["lr"], "KEY=V1,V2"), (["lr=0.1,,0.2"], "empty value"), (["lr=1", "lr=2"], "twice"),
    (["lr=1,1"], "repeats"), (["=1,2"], "KEY=V1,V2"), (["a b=1"], "KEY=V1,V2")])
def test_a_bad_axis_is_one_line(specs: list[str], needle: str) -> None:
    with pytest.raises(JobtpuError, match=needle):
        parse_axes(specs)


def test_a_huge_sweep_is_refused_before_it_is_built() -> None:
    axes = parse_axes([f"k{i}=" + ",".join(map(str, range(10))) for i in range(5)])
    with pytest.raises(JobtpuError, match="100000 combinations"):
        expand(axes)


def test_sweep_files_as_json_lines_or_csv(tmp_path: Path) -> None:
    lines = tmp_path / "s.jsonl"
    lines.write_text('{"lr": 0.1, "bs": 32}\n\n{"lr": "3e-4", "warm": true}\n')
    assert read_file(lines) == [{"lr": "0.1", "bs": "32"}, {"lr": "3e-4", "warm": "true"}]
    table = tmp_path / "s.csv"
    table.write_text("lr,bs\n0.1,32\n0.01,64\n")
    assert read_file(table) == [{"lr": "0.1", "bs": "32"}, {"lr": "0.01", "bs": "64"}]
    for text, needle in (('{"lr": [1]}\n', "number or a string"), ("lr,bs\n0.1\n", "1 values for 2"),
                         ("{oops\n", "not a JSON object"), ("", "no combinations")):
        bad = tmp_path / "bad.txt"
        bad.write_text(text)
        with pytest.raises(JobtpuError, match=needle):
            read_file(bad)


def test_ids_print_as_a_range_when_they_are_one() -> None:
    assert id_range([12, 13, 14]) == "12-14" and id_range([3]) == "3" and id_range([3, 5]) == "3 5"


def test_dependencies_refuse_unknown_ids_self_and_cycles() -> None:
    assert parse_after(["3,4", "4", "7"], "--after") == [3, 4, 7]
    with pytest.raises(JobtpuError, match="positive numbers"):
        parse_after(["x"], "--after")
    known = {1: [], 2: [1], 3: [2]}
    check_dependencies(4, [3], known)
    with pytest.raises(JobtpuError, match="no job 9"):
        check_dependencies(4, [9], known)
    with pytest.raises(JobtpuError, match="itself"):
        check_dependencies(4, [4], known)
    with pytest.raises(JobtpuError, match="cycle"):  # a hand edit made 2 wait for 5; 5 now waits for 2
        check_dependencies(5, [2], {**known, 2: [1, 5]})
