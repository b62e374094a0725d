"""The Python API's values (docs/reference/python.md §11.1, §11.2), pure: a sweep's values stay values
(a comma in one too), a job array is a list of dicts, a bad shape is one UsageError line; `str()` of
an error carries its hint while the command line's lines stay as they were; and `--sweep`'s `\\,`
(docs/reference/commands.md §2.2.3)."""

from __future__ import annotations

from typing import Any

import pytest

from jobtpu import sweeps
from jobtpu.errors import JobtpuError, RemoteError, UsageError

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(("given", "combinations"), [
    ({"layers": ["32,64", "128"]}, [{"layers": "32,64"}, {"layers": "128"}]),
    ({"lr": [0.1, 0.01], "bs": (32, 64)}, [{"lr": "0.1", "bs": "32"}, {"lr": "0.1", "bs": "64"},
                                           {"lr": "0.01", "bs": "32"}, {"lr": "0.01", "bs": "64"}]),
    ({"--lr": [1]}, [{"lr": "1"}]),  # as --sweep takes a key
    ({"flag": [True, False]}, [{"flag": "True"}, {"flag": "False"}]),  # as str() writes it, as overrides= does
    ({}, None),
    ([{"lr": 0.1, "bs": 32}, {"lr": 0.01, "bs": 64}], [{"lr": "0.1", "bs": "32"}, {"lr": "0.01", "bs": "64"}]),
    ([{"lr": 0.1}, {"lr": 0.1, "layers": "32,64"}], [{"lr": "0.1"}, {"lr": "0.1", "layers": "32,64"}]),
    (({"lr": 1},), [{"lr": "1"}]),
])
def test_a_python_sweep_is_its_combinations_each_value_whole(given: Any, combinations: Any) -> None:
    assert sweeps.from_python(given) == combinations


@pytest.mark.parametrize(("given", "says"), [
    ("lr=0.1", "sweep: give a dict of KEY: [values] or a list of dicts, not str"),
    ([], "sweep: an empty list is a job array of no jobs"),
    ([{"lr": 1}, 5], "sweep[1]: 5 is not a dict of KEY: value"),
    ([{}], "sweep[0]: {} is not a dict of KEY: value"),
    ([{"lr": [1, 2]}], "sweep[0]['lr']: [1, 2] is not a string or a number"),
    ([{"lr": None}], "sweep[0]['lr']: None is not a string or a number"),
    ([{"lr": " "}], "sweep[0]['lr'] is empty"),
    ({"lr": "0.1"}, "sweep: 'lr': give a list of values, not '0.1'"),
    ({"lr": 3}, "sweep: 'lr': give a list of values, not 3"),
    ({"lr": []}, "sweep: 'lr' has no values"),
    ({"lr": [1, 1]}, "sweep: 'lr' repeats a value"),
    ({"a b": [1]}, "sweep: 'a b' is not a config key"),
    ({"lr": [1], "-lr": [2]}, "sweep: a key is given twice (once with leading '-')"),
    ([{"lr": 1, "--lr": 2}], "sweep[0]: a key is given twice (once with leading '-')"),
])
def test_a_bad_python_sweep_is_one_usage_line(given: Any, says: str) -> None:
    with pytest.raises(UsageError) as raised:
        sweeps.from_python(given)
    assert raised.value.message == says and raised.value.hint and "\n" not in raised.value.hint


def test_a_job_array_past_the_sweep_limit_is_refused_by_its_length() -> None:
    with pytest.raises(JobtpuError, match="more than 10000"):
        sweeps.from_python([{"i": n} for n in range(sweeps.MAX_COMBINATIONS + 1)])


def test_sweep_words_take_an_escaped_comma_as_part_of_a_value() -> None:
    assert sweeps.parse_axes(["layers=32\\,64,128", "lr=0.1,0.01", "path=a\\b,c", "all=1\\,2\\,3"]) == [
        ("layers", ["32,64", "128"]), ("lr", ["0.1", "0.01"]),
        ("path", ["a\\b", "c"]),  # a backslash before anything but a comma is itself
        ("all", ["1,2,3"])]


@pytest.mark.parametrize(("error", "text"), [
    (JobtpuError("no job 12"), "no job 12"),
    (UsageError("argument --status: 'runing'", hint="did you mean running?"),
     "argument --status: 'runing'\nhint: did you mean running?"),
    (RemoteError("box: unreachable", hint="see `jobtpu doctor box`"), "box: unreachable\nhint: see `jobtpu doctor box`"),
])
def test_str_of_an_error_carries_its_hint_and_a_line_of_ours_does_not(error: JobtpuError, text: str) -> None:
    from jobtpu.commands.common import error_text
    from jobtpu.errors import message_of

    assert str(error) == text  # what a notebook's traceback shows
    assert message_of(error) == error.message and "\n" not in message_of(error)
    assert error_text(error) == f"jobtpu: error: {error.message}" + (f"\nhint: {error.hint}" if error.hint else "")
    assert message_of(ValueError("plain")) == "plain"
