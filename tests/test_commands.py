"""The command line as a whole: every option explains itself, `jobtpu rules` shows what the pass
decides with, and the status table shows what a person reads (all of it with --all)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from jobtpu.cli import build_parser
from jobtpu.commands.parsing import every_parser
from jobtpu.commands.status import ENDED_SHOWN, QUEUED_SHOWN
from jobtpu.commands.submit import RULE_NAMES
from jobtpu.decide import rules
from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.schema.state import Attempt, Job, Status
from tests.helpers import jobtpu, make_home

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast



def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_option_of_every_command_has_help() -> None:
    parser = every_parser()
    missing = [f"jobtpu {name} {a.option_strings or a.dest}"
               for name, sub in [("", parser), *_subparsers(parser).items()]
               for a in sub._actions
               if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction) and not a.help]
    assert missing == []


def test_every_command_is_dispatched_and_rule_names_match_the_rules() -> None:
    # Each command's parser names the function it runs (set_defaults(func=...) beside add_parser).
    commands = _subparsers(every_parser())
    assert len(commands) > 20 and [name for name, sub in commands.items() if not callable(sub.get_default("func"))] == []
    assert RULE_NAMES == rules.RULES


def test_a_parser_built_for_one_command_parses_as_the_full_one() -> None:
    """A command line imports only its own command's module (the command table names it): it must
    parse as the full parser does, whose placeholders load the same module when reached."""
    from jobtpu import cli

    for words in (["--home", "h", "status", "--all"], ["submit", "--cmd", "x", "lr=1"], ["--home=h", "kill", "3"]):
        assert vars(build_parser(cli.command_word(words)).parse_args(words)).keys() == \
            vars(build_parser().parse_args(words)).keys()
    assert [cli.command_word(w) for w in (["--help"], ["--home", "h"], ["--version"], [])] == [None] * 4


def _every_parser(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(" ".join(words), parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _every_parser(sub, (*words, name))
    return found


def test_every_parser_keeps_its_own_record_of_its_arguments_and_commands() -> None:
    """cli.py and completion read the command line's arguments from the parsers' own record
    (args.Parser), not argparse's private lists: the record must hold every argument, those of a
    mutually exclusive group too, in argparse's order, and the subcommands."""
    from jobtpu.commands import args

    parsers = _every_parser(every_parser())
    assert len(parsers) > 40
    for words, parser in parsers:
        assert isinstance(parser, args.Parser), words
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        assert parser.arguments == [a for a in parser._actions if a not in subs], words
        assert parser.commands is (subs[0] if subs else None), words
        for action in parser.arguments:
            assert all(parser.option(o) is action for o in action.option_strings), words


def test_cli_and_completion_read_no_private_part_of_argparse_but_two_narrow_overrides() -> None:
    """Python 3.11's argparse gives no public hook for a subcommand word's check (_check_value) nor
    for `--name=--` (_get_values): those two overrides stay, commented; nothing else private."""
    private = {name for name in [*dir(argparse.ArgumentParser()), *vars(argparse.ArgumentParser())]
               if name.startswith("_") and not name.startswith("__")}
    private |= {f"argparse.{name}" for name in vars(argparse) if name.startswith("_") and not name.startswith("__")}
    for module in ("cli.py", "commands/completion.py", "commands/args.py"):
        text = (Path(__file__).parent.parent / "jobtpu" / module).read_text(encoding="utf-8")
        text = re.sub(r"(?m)^if TYPE_CHECKING:\n(    .*\n|\n)*", "", text)  # a type's name is no use of it
        used = {name.removeprefix(".") for name in re.findall(r"argparse\._\w+|\._\w+", text)} & private
        assert used <= {"_check_value", "_get_values", "_get_value"}, (module, used)


def test_submit_options_are_the_parser_s_options_with_its_defaults() -> None:
    """SubmitOptions names each option of submit's parser, and takes each default from it."""
    from jobtpu.commands.submit import SubmitOptions, add_job_options

    parser = argparse.ArgumentParser()
    add_job_options(parser)
    defaults = vars(parser.parse_args([]))
    assert set(SubmitOptions._fields) == set(defaults) - {"json"}
    assert SubmitOptions._field_defaults == {name: defaults[name] for name in SubmitOptions._fields}
    assert SubmitOptions().max_recoveries == parser.get_default("max_recoveries") == 20


def test_rules_prints_what_the_pass_decides_with(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"box": {"kind": "local"},
                                "v4": {"kind": "tpu", "node": "n", "zone": "z", "accelerator": "v4-8",
                                       "preemptible": True}})
    doc = json.loads((home / "machines.json").read_text())
    (home / "machines.json").write_text(json.dumps({**doc, "gcp": {"project": "p"}}))
    doc = json.loads(jobtpu(home, "rules", "--json").stdout)
    by_rule = {row["rule"]: row for row in doc["rules"]}
    assert list(by_rule) == list(rules.RULES)
    assert by_rule["pre"]["preempted"] == "recreate the TPU, then resume"
    assert by_rule["pre"]["grpc_lost_hang"] == "resume"
    assert by_rule["rerun"]["grpc_lost_hang"] == "run from the start"
    assert by_rule["pass"]["preempted"] == by_rule["pass"]["grpc_lost_hang"] == "fail"
    assert all(row["other_failure"] == "fail" and row["exit_0"] == "finished" for row in by_rule.values())
    assert by_rule["pre"]["machines"] == ["v4"] and by_rule["pass"]["machines"] == ["box"]
    assert "preemptible or spot TPU" in by_rule["pre"]["default_for"]
    table = jobtpu(home, "rules", env={"COLUMNS": "250"}).stdout
    assert re.search(r"reapply +recreate the TPU, then resume +recreate the TPU, then resume +fail +finished", table)


def _job(job_id: int, status: Status, ended: float | None = None) -> Job:
    if status is Status.QUEUED:
        return Job(id=job_id, user="tester", cmd="true", archive="a.tar.gz", created=float(job_id))
    attempt = Attempt(0, "local", None if ended is None else "finished", None if ended is None else 0,
                      float(job_id), ended)
    return Job(id=job_id, user="tester", cmd="true", archive="a.tar.gz", created=float(job_id), machine="local",
               status=status, exit_code=0 if status is Status.FINISHED else None, attempts=[attempt])


def _ids_in_table(text: str) -> list[int]:
    """The ids of the table's rows: a row is an id then (these nameless jobs are all the viewer's own,
    so no user column) a status, then more cells (the count line under the table says `1 finished`)."""
    return [int(m[1]) for m in re.finditer(r"^ *(\d+) +(?:queued|running|finished) +\S", text, re.M)]


def test_status_table_shows_active_and_recent_jobs_and_says_how_many_it_left_out(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    extra_queued, extra_ended = 7, 5
    ended = list(range(1, ENDED_SHOWN + extra_ended + 1))
    running = [100, 101]
    queued = list(range(200, 200 + QUEUED_SHOWN + extra_queued))
    with Store(Home(home)).transaction() as state:
        # Ended in an order unlike their ids: the table keeps the ones that ended last.
        state.jobs += [_job(i, Status.FINISHED, ended=1000.0 - i) for i in ended]
        state.jobs += [_job(i, Status.RUNNING) for i in running] + [_job(i, Status.QUEUED) for i in queued]
        state.next_id = 300
    wide = {"COLUMNS": "200"}
    table = jobtpu(home, "status", env=wide).stdout
    assert _ids_in_table(table) == ended[:ENDED_SHOWN] + running + queued[:QUEUED_SHOWN]
    assert f"{extra_queued} more queued and {extra_ended} older ended job(s) not shown (--all shows every job)" in table
    everything = jobtpu(home, "status", "--all", env=wide).stdout
    assert _ids_in_table(everything) == ended + running + queued and "not shown" not in everything
    named = jobtpu(home, "status", str(ended[-1]), env=wide).stdout  # a job named by id is always shown
    assert _ids_in_table(named) == [ended[-1]]
    listed = json.loads(jobtpu(home, "status", "--json").stdout)["jobs"]  # scripts still get every job
    assert [j["id"] for j in listed] == ended + running + queued


def test_a_short_status_table_leaves_nothing_out(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    with Store(Home(home)).transaction() as state:
        state.jobs += [_job(1, Status.FINISHED, ended=5.0), _job(2, Status.QUEUED)]
        state.next_id = 3
    table = jobtpu(home, "status", env={"COLUMNS": "200"}).stdout
    assert _ids_in_table(table) == [1, 2] and "not shown" not in table


def test_on_resume_takes_dashed_words_and_refuses_an_unknown_placeholder(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true",
                  "--on-resume", "--from=gs://b-{region}/{run_id} --home=${HOME}", check=False)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.splitlines()[0] == "jobtpu: error: --on-resume names unknown placeholder {run_id}"
    assert "Traceback" not in done.stderr and not (home / "state.json").exists()
    # A value that starts with dashes is the option's value, not another option (docs/reference/commands.md §2.2).
    job = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true",
                 "--on-resume", "--config.load_from=gs://ckpt-{region}/run{job}").stdout.strip()
    record = json.loads(jobtpu(home, "status", job, "--json").stdout)
    assert record["jobs"][0]["on_resume"] == "--config.load_from=gs://ckpt-{region}/run{job}"


def test_commands_added_in_one_loop_each_run_their_own_act(monkeypatch: pytest.MonkeyPatch) -> None:
    """resume/rerun and hold/release are added by one loop each: every parser's function keeps its own
    flag (one closing over the loop's variable would make both commands act as the last one)."""
    from jobtpu.commands import hold, requeue

    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(requeue, "requeue", lambda home, sel, machine, resume, force, dry_run:
                        calls.append(("requeue", resume)) or 0)
    monkeypatch.setattr(hold, "hold", lambda home, sel, release, force, dry_run: calls.append(("hold", release)) or 0)
    parser = build_parser()
    for argv in (["resume", "3"], ["rerun", "3"], ["hold", "3"], ["release", "3"]):
        parsed = parser.parse_args(argv)
        assert parsed.func(None, parsed) == 0
    assert calls == [("requeue", True), ("requeue", False), ("hold", False), ("hold", True)]


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    """`jobtpu --version` (docs/reference/commands.md §2.1): the version package metadata records,
    on stdout, exit 0, with no command and no home needed."""
    from importlib import metadata

    done = jobtpu(tmp_path / "nowhere", "--version")
    assert done.stdout == f"jobtpu {metadata.version('jobtpu')}\n" and done.stderr == ""
    assert not (tmp_path / "nowhere").exists()
