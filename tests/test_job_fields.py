"""The one table of what a user may set on a job (jobtpu/schema/job_fields.py): each list that is
written out elsewhere (SubmitOptions, submit's parser, the Python API's keywords, the job file's keys,
the job's spec and record) holds exactly its rows, and a row that is added without being wired
everywhere it says is named by the check (docs/reference/commands.md §2.2)."""

from __future__ import annotations

import argparse
import inspect
import typing
from collections.abc import Iterable
from pathlib import Path

import pytest

from jobtpu.errors import ConfigError
from jobtpu.schema.job_fields import LAUNCH_FIELDS, ROWS, SUBMIT_FIELDS, Kind, Row

pytestmark = pytest.mark.fast

SPEC_OWN = ("id", "uid", "account", "secrets")  # a spec's fields of its own, no option's
SAMPLE = {Kind.TEXT: '"x"', Kind.LIST: '["x"]', Kind.INT: "3", Kind.BOOL: "true"}  # as TOML writes them
KIND_OF_TYPE = {str | None: Kind.TEXT, str: Kind.TEXT, list[str]: Kind.LIST, int: Kind.INT, bool: Kind.BOOL}


def _plain(value: object) -> object:
    """A default as a value: the API's () and {} are the option's empty list."""
    return list(value) if isinstance(value, tuple | list | dict) else value


def _parser_kinds() -> dict[str, Kind]:
    """Each dest of submit's parser and the kind of value it gives, found by parsing a sample."""
    from jobtpu.commands.submit import add_job_options

    parser = argparse.ArgumentParser()
    add_job_options(parser)
    kinds: dict[str, Kind] = {}
    for action in parser._actions:
        if action.dest in ("help", "json"):
            continue
        if action.nargs == 0:
            kinds[action.dest] = Kind.BOOL
            continue
        word = str(next(iter(action.choices))) if action.choices else "3"
        given = [word, word] if not action.option_strings else [action.option_strings[0], word] * 2
        value = getattr(parser.parse_args(given), action.dest)
        kinds[action.dest] = Kind.LIST if isinstance(value, list) else Kind.INT if isinstance(value, int) else Kind.TEXT
    kinds[parser.after_dashes] = Kind.LIST  # type: ignore[attr-defined]  # the words after `--`
    return kinds


def wiring_gaps(rows: Iterable[Row]) -> list[str]:
    """What the code lacks, or has beyond, the rows: one line each; [] when every list holds them."""
    from jobtpu.api import Home
    from jobtpu.commands.submit import SubmitOptions
    from jobtpu.jobfile import parse_job_file
    from jobtpu.schema.job_spec import JobSpec
    from jobtpu.schema.state import Job

    rows = list(rows)
    gaps = []
    options = {row.option: row for row in rows if row.option is not None}
    hints = typing.get_type_hints(SubmitOptions)
    parser = _parser_kinds()
    api = {name: p.default for name, p in inspect.signature(Home.submit).parameters.items() if name != "self"}
    for name, row in options.items():
        if name not in SubmitOptions._fields:
            gaps.append(f"{name}: no field of SubmitOptions")
        elif (KIND_OF_TYPE.get(hints[name]), SubmitOptions._field_defaults[name]) != (row.kind, row.default):
            gaps.append(f"{name}: SubmitOptions holds it as {hints[name]} = {SubmitOptions._field_defaults[name]!r}")
        if parser.get(name) is not row.kind:
            gaps.append(f"{name}: submit's parser gives it as {parser.get(name)}, not {row.kind}")
        if row.api is not None and (row.api not in api or _plain(api[row.api]) != _plain(row.default)):
            gaps.append(f"{name}: api.Home.submit takes no {row.api}={row.default!r}")
        toml = f"[job]\n{name} = {SAMPLE[row.kind]}\n".encode() if row.kind is not None else b""
        try:
            taken = name in parse_job_file(toml, Path("jobtpu.toml")) if row.kind is not None else False
        except ConfigError:
            taken = False
        if taken != row.job_file:
            gaps.append(f"{name}: a job file {'refuses' if row.job_file else 'takes'} it")
    gaps += [f"{name}: SubmitOptions has it, the table no row" for name in SubmitOptions._fields if name not in options]
    gaps += [f"{name}: the parser has it, the table no row" for name in parser if name not in options]
    known_api = {row.api for row in rows}
    gaps += [f"{name}: api.Home.submit takes it, the table no row" for name in api if name not in known_api]
    for row in rows:
        gaps += [f"{field}: no field of a job's record" for field in row.sets if field not in Job.__struct_fields__]
        if row.launch:
            gaps += [f"{field}: no field of JobSpec" for field in row.sets if field not in JobSpec.__struct_fields__]
    launch = {field for row in rows if row.launch for field in row.sets}
    gaps += [f"{name}: JobSpec has it, the table marks no row launch" for name in JobSpec.__struct_fields__
             if name not in SPEC_OWN and name not in launch]
    return gaps


def test_every_list_of_what_a_user_sets_holds_the_table_s_rows() -> None:
    assert wiring_gaps(ROWS) == []


def test_a_row_added_without_its_wiring_is_named_by_the_check() -> None:
    new = Row("budget", ("budget",), Kind.INT, 0, job_file=True, api="budget", launch=True)
    assert wiring_gaps([*ROWS, new]) == [
        "budget: no field of SubmitOptions",
        "budget: submit's parser gives it as None, not int",
        "budget: api.Home.submit takes no budget=0",
        "budget: a job file refuses it",
        "budget: no field of a job's record",
        "budget: no field of JobSpec"]
    dropped = [row for row in ROWS if row.option != "priority"]
    assert wiring_gaps(dropped) == ["priority: SubmitOptions has it, the table no row",
                                    "priority: the parser has it, the table no row",
                                    "priority: api.Home.submit takes it, the table no row"]


def test_the_launch_fields_are_the_spec_s_in_its_order() -> None:
    """Their order is the order a spec's differences are named in ("its record differs from its spec (cmd, env)")."""
    from jobtpu.schema.job_spec import JobSpec

    assert tuple(name for name in JobSpec.__struct_fields__ if name not in SPEC_OWN) == LAUNCH_FIELDS
    assert LAUNCH_FIELDS == ("user", "cmd", "overrides", "log_stage", "on_resume", "saving", "env", "archive")


def test_a_member_s_submit_carries_every_field_an_option_sets() -> None:
    """Intake rebuilds a member's jobs from SUBMIT_FIELDS alone: every field a row sets is among them,
    and none that a submit does not set (the runner's own: the id, the time, the account, the status)."""
    from jobtpu.commands import intake_submits

    assert intake_submits.SUBMIT_FIELDS is SUBMIT_FIELDS
    assert set(SUBMIT_FIELDS) == {field for row in ROWS for field in row.sets}
    assert not {"id", "created", "uid", "status", "waiting"} & set(SUBMIT_FIELDS)


def test_the_job_file_s_keys_in_the_reference_are_the_table_s() -> None:
    """docs/reference/commands.md §2.2.9 names each key a job file takes, by the kind of its value."""
    import re

    from jobtpu.schema.job_fields import job_file_keys

    text = (Path(__file__).parent.parent / "docs" / "reference" / "commands.md").read_text(encoding="utf-8")
    section = " ".join(text.split("#### 2.2.9 Job files", 1)[1].split("```", 1)[0].split())
    said = {kind: re.search(rf"{lead} (.*?);", section) for kind, lead in (
        (Kind.TEXT, "strings for"), (Kind.LIST, "lists of strings for"), (Kind.INT, "whole numbers for"))}
    for kind, found in said.items():
        assert found is not None, kind
        assert set(re.findall(r"`(\w+)`", found.group(1))) - {"tags"} == set(job_file_keys(kind)), kind
    assert all(f"`{key} = true`" in section for key in job_file_keys(Kind.BOOL))
