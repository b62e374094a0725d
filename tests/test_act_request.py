"""A member's act is parsed once, by the command line's own parser, and travels as its values
(docs/reference/home-files.md §1.3): for every relayed command and many odd words, what the member's
side parsed is what the runner's side hands the command's function, or both refuse it in the same
one line; and whatever a request holds, the runner's carrying-out of it never raises."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jobtpu.commands import relay, table
from jobtpu.commands.act_request import Act, act_of, decode, encode, in_words, namespace, parse_act
from jobtpu.commands.parsing import parse_command_line
from jobtpu.errors import JobtpuError
from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.schema.acts import ARGS
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.spool import MAX_REQUEST_BYTES, ActRequest
from jobtpu.schema.state import Job, Status
from tests.helpers import make_home

pytestmark = pytest.mark.fast

COMMANDS = sorted(table.RELAYED)
# Words a member might type, by mistake or on purpose, for any relayed command.
ODD = ["", " ", "--", "-", "---", "--x=--", "=", "==", "--=", "--name=--", "--tag=--", "--status=--", "--user=--",
       "--machine=--", "--name", "--tag", "--status", "--sweep", "--user", "--machine", "--req", "--set", "--unset",
       "--priority", "--max-running", "--name=", "--user=", "--status=queued,running", "--status=nope",
       "--priority=-5", "--priority=1000001", "--priority=-1000001", "--max-running=-1", "--max-running=10001",
       "--sweep=0", "--sweep=5", "--sweep=-3", "--force", "--force", "--dry-run", "--all-users", "--no-machine",
       "--remote", "--set=a=1", "--unset=a", "--req=v3", "--nme=x", "--fo", "--dry", "--help",
       "--cmd", "--dir", "--hold", "--follow", "--json", "--history", "--home", "--home=x", "--loop", "--version",
       "1", "5", "0", "-1", "-5", "007", "1e9", "0x10", "99999999999999999999", "-99999999999999999999",
       "1000000000000", "1000000000001", "+x", "-x", "+", "+-", "++x", "x=1", "lr=0.1", "--config.lr=0.1",
       "ünïcödé", "٣", "３２", "²", "¹⁰", "\u202e", "\x00", "\x1b[31m", "\n", "a\nb", "\r", "\t", "\x7f", "\udcff",
       "a" * 10_000, "-" + "a" * 10_000, "--name=" + "é" * 10_000, "\x01" * 10_000]
word = st.one_of(st.sampled_from(ODD), st.text(max_size=12), st.integers().map(str))


def member_side(command: str, words: list[str]) -> tuple[bytes | None, list[str], argparse.Namespace | None]:
    """What `jobtpu COMMAND WORDS...` does as a member, in-process: the request file it would leave,
    else the lines it says; and the command line's parse, when it parsed."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            parsed, _ = parse_command_line([command, *words])
    except SystemExit:
        return None, [line for line in said.getvalue().splitlines() if line.strip()], None
    try:
        return encode(act_of(command, parsed), "tester", MAX_REQUEST_BYTES), [], parsed
    except JobtpuError as e:
        return None, [f"jobtpu: error: {e.message}"], parsed


def runner_side(data: bytes) -> Act:
    return decode(msgspec.json.decode(data, type=ActRequest))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    """A private home with jobs of every status the acts choose from (queued, held, running, ended)."""
    os.environ["JOBTPU_USER"] = "tester"
    home = Home(make_home(tmp_path_factory.mktemp("acts")))
    with Store(home).transaction() as state:
        for job_id, status in enumerate((Status.QUEUED, Status.QUEUED, Status.FINISHED, Status.FAILED), start=1):
            state.jobs.append(Job(id=job_id, user="tester", cmd="true", archive="a.tar.gz", created=float(job_id),
                                  name=f"job-{job_id}", status=status, tags=["t"], held=job_id == 2))
        state.next_id = 5
    yield home
    os.environ.pop("JOBTPU_USER", None)


def carried_out(home: Home, act: Act) -> tuple[int, list[str]]:
    code, lines = relay.carry_out(home, act, os.getuid(), "tester")
    assert isinstance(code, int) and all(isinstance(line, str) for line in lines)
    return code, lines


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=st.sampled_from(COMMANDS), words=st.lists(word, max_size=6))
def test_both_sides_parse_odd_words_alike_or_refuse_them_in_one_line(home: Home, command: str,
                                                                     words: list[str]) -> None:
    data, said, parsed = member_side(command, words)
    event("refused" if data is None else "sent")
    if data is None:  # refused by the member's side, nothing sent: one line, and the same from the words' parse
        if words.count("--help") and said and said[0].startswith("usage:"):
            return  # `--help` prints the command's help, as ever
        errors = [line for line in said if line.startswith("jobtpu: error: ")]
        assert len(errors) == 1 and all(line.startswith(("jobtpu: error: ", "hint: ")) for line in said), said
        if "a request may be" in errors[0]:  # too big to travel: a limit of the spool's file, not of the words
            assert parsed is not None and parse_act([command, *words]) == act_of(command, parsed)
            return
        with pytest.raises(JobtpuError) as refused:
            parse_act([command, *words])
        assert f"jobtpu: error: {refused.value.message}" == errors[0]
        return
    assert parsed is not None and len(data) <= MAX_REQUEST_BYTES
    act = runner_side(data)
    fields = ARGS[command].__struct_fields__
    assert {name: getattr(parsed, name) for name in fields} == {name: getattr(namespace(act), name) for name in fields}
    assert act == parse_act([command, *words])  # the words' entry (`serve`'s acts) is the same parse
    carried_out(home, act)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
# Values of the right shape more often than not, so most requests get as far as the command's function
# (a file holds UTF-8: no lone surrogate).
TEXTS = [w for w in ODD if w.isascii() or "\udcff" not in w]
VALUE = st.one_of(JSON, st.booleans(), st.none(), st.integers(min_value=-3, max_value=6), st.sampled_from(TEXTS),
                  st.lists(st.integers(min_value=0, max_value=6), max_size=3), st.lists(st.sampled_from(TEXTS), max_size=3),
                  st.lists(st.sampled_from(["queued", "running", "failed", "killed", "nope"]), max_size=2))
IDS = st.lists(st.integers(min_value=1, max_value=6) | st.sampled_from([0, -1, 10**13]), max_size=3)
SOME_TEXT = st.lists(st.sampled_from(TEXTS), max_size=3)
NUMBER = st.none() | st.integers(min_value=-2_000_000, max_value=2_000_000)
GOOD = {"ids": IDS, "sweeps": IDS, "tags": SOME_TEXT, "names": SOME_TEXT, "set": SOME_TEXT, "unset": SOME_TEXT,
        "words": SOME_TEXT, "req": st.none() | SOME_TEXT, "user": st.none() | st.sampled_from(TEXTS),
        "machine": st.none() | st.sampled_from(TEXTS), "priority": NUMBER, "max_running": NUMBER,
        "statuses": st.lists(st.sampled_from(["queued", "running", "failed", "killed", "nope"]), max_size=2)}


@st.composite
def hand_made(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A command (a relayed one mostly) and its values as a member's own program could write them:
    mostly of the right names and shapes, so most get as far as the command's function."""
    command = draw(st.sampled_from([*COMMANDS, *COMMANDS, "user", "manage", "", "kill "]))
    fields = list(ARGS[command].__struct_fields__) if command in ARGS else ["ids", "words"]
    names = draw(st.lists(st.sampled_from([*fields, *fields, *fields, "argv", "func", "home"]), max_size=5, unique=True))
    return command, {name: draw(st.one_of(*[GOOD.get(name, st.booleans())] * 4, VALUE))
                     for name in names}


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=hand_made())
def test_a_hand_made_request_is_refused_in_one_line_or_carried_out_without_raising(
        home: Home, request: tuple[str, dict[str, Any]]) -> None:
    command, args = request
    raw = msgspec.json.encode({"v": 2, "command": command, "args": args, "user": "tester", "at": 0})
    try:
        act = runner_side(raw)
    except JobtpuError as e:
        event("refused")
        assert "\n" not in e.message
        return
    event("carried out")
    assert set(args) <= set(ARGS[command].__struct_fields__)
    carried_out(home, act)


@pytest.mark.parametrize("words,names", [
    (["kill", "--name=--"], ["--"]),
    (["kill", "--name", "a", "--name=--", "--name=b=c"], ["a", "--", "b=c"]),
    (["hold", "--name=-x"], ["-x"]),
])
def test_an_attached_dashes_value_is_the_value_on_both_sides(words: list[str], names: list[str]) -> None:
    """The root of `kill --name=--`: Python 3.11's argparse strips "--" from an option's attached value
    (so [] reached fnmatch inside [[]]); the command line's parser keeps it, and now the only parser."""
    data, said, _ = member_side(words[0], words[1:])
    assert data is not None, said
    assert runner_side(data).args.names == names  # type: ignore[union-attr]


def test_the_relayed_commands_are_the_structs_commands() -> None:
    assert set(ARGS) == table.RELAYED


@pytest.mark.parametrize("words,said", [
    (["kill", "5", "--name=--", "--force"], "kill --name=-- --force 5"),
    (["update", "3", "--priority", "-2", "--set", "lr=1", "--no-machine"],
     "update --priority=-2 --set lr=1 --no-machine 3"),
    (["rerun", "--status", "failed,killed", "--machine", "m"], "rerun --status failed --status killed --machine m"),
    (["hold", "--name", "a b", "--name="], "hold --name=a b --name="),
    (["note", "4", "lr too high"], "note 4 lr too high"),
    (["tag", "--force", "1", "+a", "-b"], "tag --force 1 +a -b"),
])
def test_an_act_in_words(words: list[str], said: str) -> None:
    assert in_words(parse_act(words)) == said


def test_a_request_past_the_size_a_request_may_be_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    data, said, _ = member_side("note", ["3", *(["\x01" * 10_000] * 2)])
    assert data is None and len(said) == 1 and "more than the" in said[0], said


def test_a_value_that_is_no_text_is_refused_alike_from_words_and_from_a_parse() -> None:
    """A lone surrogate (bytes the terminal did not decode): the member's request cannot carry it,
    and the words' parse (`serve`'s acts) refuses it in the same line rather than carry it out."""
    with pytest.raises(JobtpuError) as from_words:
        parse_act(["note", "1", "\udcff"])
    assert from_words.value.message == "note: a value is not text (bytes the terminal did not decode?)"
