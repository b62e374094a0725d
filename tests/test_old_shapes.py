"""The old TPU manager's command shapes (docs/reference/commands.md §2.1, §2.2.10; docs/guide.md §10):
its verbs, flags and bare words become jobtpu's commands and options, or one line says what to type;
the guide's table of them and its shared-login example are run as printed."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobtpu.cli import build_parser
from tests.helpers import cli, jobtpu, make_home, manage_until, status, write_tree

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "guide.md"


# ---- the command line, rewritten before it is parsed ---------------------------------------------------

REWRITES: list[tuple[list[str], list[str]]] = [
    (["run", "-p", "xibo"], ["run", "--req", "preemptible", "xibo"]),
    (["run", "v3-32-p1", "-n", "-auto", "lr=0.01"], ["run", "--req", "on-demand", "v3-32-p1", "lr=0.01"]),
    (["run", "v3-32-p1", "-p", "xibo"], ["run", "--req", "preemptible", "v3-32-p1", "xibo"]),  # first: argparse
    (["--home", "h", "queue", "v3-32-p1", "xibo", "-p"],
     ["--home", "h", "submit", "--req", "preemptible", "v3-32-p1", "xibo"]),
    (["submit", "--on-resume", "-p", "--", "-p"], ["submit", "--on-resume", "-p", "--", "-p"]),  # values, verbatim
    (["run", "--tag", "-n", "-p", "--", "-n"], ["run", "--req", "preemptible", "--tag", "-n", "--", "-n"]),
    (["kill", "w=43"], ["kill", "43"]),
    (["kill", "-w=43", "xibo"], ["kill", "43", "--user", "xibo"]),
    (["kill", "window=7", "8"], ["kill", "7", "8"]),
    (["kill", "xibo"], ["kill", "xibo"]),  # a user alone would select all their jobs: left to kill
    (["kill", "--name", "w=3"], ["kill", "--name", "w=3"]),
    (["rel", "v3-32-p1"], ["sheet", "release", "v3-32-p1"]),
    (["rel", "v3-32-p1", "xibo"], ["sheet", "release", "v3-32-p1", "--user", "xibo"]),
    (["describe", "v3-32-p1", "--json"], ["tpu", "describe", "v3-32-p1", "--json"]),
    (["find", "v3", "-p"], ["sheet", "find", "v3", "-p"]),
    (["check", "xibo"], ["status", "--user", "xibo"]),
    (["check"], ["status"]),
    (["ls", "xibo"], ["dir", "ls", "--user", "xibo"]),
    # jobtpu's own words stay as they are
    (["tail", "-n", "5", "3"], ["tail", "-n", "5", "3"]),
    (["sheet", "find", "-n"], ["sheet", "find", "-n"]),
    (["status", "--user", "ls"], ["status", "--user", "ls"]),
    (["--home", "rel", "status"], ["--home", "rel", "status"]),
    (["exec", "box", "--", "kill", "w=1"], ["exec", "box", "--", "kill", "w=1"]),
]


@pytest.mark.fast
@pytest.mark.parametrize(("old", "new"), REWRITES, ids=[" ".join(old) for old, _ in REWRITES])
def test_the_old_shapes_become_jobtpus_words_before_parsing(old: list[str], new: list[str]) -> None:
    parser = build_parser()
    assert parser.old_shapes(old) == new
    assert parser.old_shapes(new) == new  # twice is once: a relayed act is parsed again
    assert _parsed(parser, old) == _parsed(parser, new)


def _parsed(parser: argparse.ArgumentParser, words: list[str]) -> dict[str, object] | int:
    """What the parser makes of the words, or its exit status (`kill xibo`: not a job id)."""
    try:
        return vars(parser.parse_args(words))
    except SystemExit as e:
        return int(e.code or 0)


MACHINES = {"box": "box", "v3-32-p1": "box", "local": "local", "node-7": "tpu7"}
USERS = ["xibo", "ann"]
PLACED: list[tuple[list[str], str | None, str | None, tuple[str | None, str | None, list[str]] | str]] = [
    (["v3-32-p1", "xibo", "lr=0.01"], None, None, ("v3-32-p1", "xibo", ["lr=0.01"])),
    (["lr=0.01", "bs=8"], None, None, (None, None, ["lr=0.01", "bs=8"])),
    (["node-7"], None, "ann", ("node-7", "ann", [])),
    (["box", "xibo"], "v3-32-p1", "xibo", ("v3-32-p1", "xibo", [])),  # the same machine, the same user
    (["local"], "box", None, "two machines given, 'box' and 'local'"),
    (["xibo", "ann"], None, None, "two users given, 'xibo' and 'ann'"),
    (["v3-32"], None, None, "'v3-32' is not a KEY=VALUE config override, nor a machine or a user of this home\n"
                            "to run on any free machine of that type, ask for it: --req v3-32"),
    (["2"], None, None, "'2' is not a KEY=VALUE config override, nor a machine or a user of this home\n"
                        "working directory 2 is --dir 2; overrides look like lr=0.01"),
    (["v3-32-p2"], None, None, "'v3-32-p2' is not a KEY=VALUE config override, nor a machine or a user of this "
                               "home: did you mean 'v3-32-p1'?\n`jobtpu machines` lists the machines, "
                               "`jobtpu user ls` the users"),
    (["qqq"], None, None, "'qqq' is not a KEY=VALUE config override, nor a machine or a user of this home\n"
                          "`jobtpu machines` lists the machines, `jobtpu user ls` the users; overrides look like "
                          "lr=0.01"),
]


@pytest.mark.fast
@pytest.mark.parametrize(("words", "machine", "user", "placed"), PLACED, ids=[" ".join(w) for w, *_ in PLACED])
def test_a_runs_bare_words_name_its_machine_and_user(words: list[str], machine: str | None, user: str | None,
                                                      placed: tuple[str | None, str | None, list[str]] | str) -> None:
    from jobtpu.errors import JobtpuError
    from jobtpu.oldshapes import place_bare_words

    if isinstance(placed, tuple):
        assert place_bare_words(words, MACHINES, USERS, machine, user) == placed
        return
    with pytest.raises(JobtpuError) as raised:
        place_bare_words(words, MACHINES, USERS, machine, user)
    assert f"{raised.value.message}{chr(10) + raised.value.hint if raised.value.hint else ''}".startswith(placed)


@pytest.mark.fast
def test_a_word_both_a_machine_and_a_user_says_which_to_write() -> None:
    from jobtpu.errors import JobtpuError
    from jobtpu.oldshapes import place_bare_words

    with pytest.raises(JobtpuError) as raised:
        place_bare_words(["box"], MACHINES, ["box"])
    assert (raised.value.message, raised.value.hint) == ("'box' is both a machine and a user of this home",
                                                         "say which: --machine box or --user box")


# ---- through the command line --------------------------------------------------------------------------

def _home(tmp_path: Path) -> tuple[Path, Path]:
    """A home whose local machine answers to v3-32-p1, with users xibo and ann, and a project whose
    jobtpu.toml gives the command."""
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 2}, "aliases": ["v3-32-p1"]},
                                "box": {"kind": "ssh", "hosts": ["127.0.0.1"]}})
    (home / "users.json").write_text(json.dumps({"users": ["xibo", "ann"]}))
    src = write_tree(tmp_path / "src", {".jobtpu": "", "jobtpu.toml": '[job]\ncmd = "echo ran"\n'})
    return home, src


def test_run_takes_a_machine_and_a_user_as_bare_words_and_dry_run_shows_them(tmp_path: Path) -> None:
    home, src = _home(tmp_path)
    as_ann = {"JOBTPU_USER": "ann"}
    # -n, not -p: the local machine is on-demand, and a dry run refuses what the submit would
    old = jobtpu(home, "run", "v3-32-p1", "xibo", "lr=0.01", "-n", "-auto", "--dry-run", env=as_ann, cwd=src)
    new = jobtpu(home, "run", "--machine", "v3-32-p1", "--user", "xibo", "--req", "on-demand", "lr=0.01",
                 "--dry-run", env=as_ann, cwd=src)
    assert old.stdout == new.stdout == ("cmd: echo ran\nreq: on-demand\nmachine: v3-32-p1\nuser: xibo\n"
                                        "overrides: lr=0.01\n")
    preemptible = jobtpu(home, "run", "v3-32-p1", "xibo", "-p", "--dry-run", env=as_ann, cwd=src, check=False)
    assert preemptible.returncode != 0 and "no machine in the fleet could ever run" in preemptible.stderr
    assert not (home / "state.json").exists()
    # for real: the job file's command, pinned to the machine the alias names, as xibo
    job = int(jobtpu(home, "run", "v3-32-p1", "xibo", "lr=0.01", env=as_ann, cwd=src).stdout)
    # and the option as jobtpu spells it, with the job file's command (docs/reference/commands.md §2.2.9)
    other = int(jobtpu(home, "run", "--machine", "v3-32-p1", "lr=0.01", env=as_ann, cwd=src).stdout)
    jobs = manage_until(home, [job, other], {"finished"})
    assert [(jobs[i]["user"], jobs[i]["pin"], jobs[i]["cmd"], jobs[i]["overrides"]) for i in (job, other)] == [
        ("xibo", "local", "echo ran", ["--config.training.learning_rate=0.01"]),
        ("ann", "local", "echo ran", ["--config.training.learning_rate=0.01"])]


def test_a_bare_word_that_is_both_or_neither_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    home, src = _home(tmp_path)
    (home / "users.json").write_text(json.dumps({"users": ["xibo", "ann", "box"]}))
    for words, line, hint in [
        (["v3-32", "xibo"], "'v3-32' is not a KEY=VALUE config override, nor a machine or a user of this home",
         "to run on any free machine of that type, ask for it: --req v3-32"),
        (["box"], "'box' is both a machine and a user of this home", "say which: --machine box or --user box"),
        (["xibo", "local", "box"], "'box' is both a machine and a user of this home",
         "say which: --machine box or --user box"),
        (["v3-32-p1", "--machine", "box"], "two machines given, 'box' and 'v3-32-p1'",
         "a job runs on one machine: keep one, or ask for any machine of a type with --req (like --req v3-32)"),
    ]:
        for command in ("run", "submit", "queue"):
            code, out, err = cli(home, command, "--dir", str(src), *words, user="ann")
            assert (code, out, err) == (1, "", f"jobtpu: error: {line}\nhint: {hint}\n"), (command, words)
    assert not (home / "state.json").exists() and not (home / "archives").exists()


def test_kill_takes_the_window_shape_and_check_ls_queue_rel_describe_are_jobtpus(tmp_path: Path) -> None:
    home, src = _home(tmp_path)
    code, out, err = cli(home, "queue", "v3-32-p1", "xibo", "--dir", str(src), "--hold", user="xibo")
    assert code == 0, err
    job = int(out)
    assert status(home)[job]["pin"] == "local" and status(home)[job]["held"]
    code, out, _ = cli(home, "check", "xibo", user="ann")  # `status --user xibo`
    assert code == 0 and re.search(rf"^\s*{job}\s.*queued", out, re.M), out
    code, out, err = cli(home, "kill", f"w={job}", "xibo", user="xibo")
    assert code == 0 and f"kill job {job}" in out, err
    assert status(home)[job]["status"] == "killed"
    code, out, err = cli(home, "ls", "xibo", user="ann")  # `dir ls --user xibo`
    assert (code, out) == (0, "") and "no working directories yet" in err
    # rel and describe reach the sheet's and the TPU's commands, whose own lines say what they lack
    code, _, err = cli(home, "rel", "v3-32-p1", "xibo", user="xibo")
    assert code == 1 and err.startswith("jobtpu: error: machines.json has no sheet section"), err
    code, _, err = cli(home, "describe", "box", user="xibo")
    assert code == 1 and err.startswith("jobtpu: error: box is a ssh machine, not a TPU"), err


def test_ack_names_the_pass_that_does_it_and_changes_nothing(tmp_path: Path) -> None:
    home, _ = _home(tmp_path)
    code, out, err = cli(home, "ack")
    assert (code, out, err) == (2, "", "jobtpu: error: 'ack' is not a jobtpu command: did you mean `jobtpu manage`?\n"
                                       "hint: see `jobtpu --help`\n")
    assert not (home / "state.json").exists()


# ---- docs/guide.md §10, as printed ---------------------------------------------------------------------

SECTION = "### One login for the team, and the old commands"


def _section() -> str:
    text = GUIDE.read_text()
    return text[text.index(SECTION):].split("\n## ", 1)[0]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", _section(), re.M | re.S)


def _table() -> list[tuple[list[str], list[str], str]]:
    rows = re.findall(r"^\| `(tpu [^`]*)` \| `(jobtpu [^`]*)` \| ([^|]*) \|$", _section(), re.M)
    return [(shlex.split(old), shlex.split(new), typed.strip()) for old, new, typed in rows]


def test_the_guides_table_of_old_commands_is_what_jobtpu_does(tmp_path: Path) -> None:
    from jobtpu.oldshapes import place_bare_words

    rows = _table()
    assert len(rows) >= 15 and {typed for *_, typed in rows} >= {"runs it", "says `jobtpu manage`"}
    home, src = _home(tmp_path)
    parser = build_parser()
    for old, new, typed in rows:
        wanted = vars(parser.parse_args(new[1:]))  # the new command as printed
        typed_old = old[1:]  # `jobtpu` for `tpu`
        if typed == "runs it":
            got = vars(parser.parse_args(parser.old_shapes(typed_old)))
            if "overrides" in got:  # the bare words, as submit places them in this home
                got["machine"], got["user"], got["overrides"] = place_bare_words(
                    got["overrides"], {"v3-32-p1": "local", "local": "local"}, ["xibo", "ann"],
                    got["machine"], got["user"])
            assert got == wanted, old
            continue
        said = re.fullmatch(r"says `([^`]+)`", typed)
        assert said, typed
        code, out, err = cli(home, *typed_old, "--dir", str(src)) if old[1] == "run" else cli(home, *typed_old)
        assert code in (1, 2) and out == "" and said[1] in err and len(err.splitlines()) == 2, (old, err)
    assert not (home / "state.json").exists()


def test_the_guides_shared_login_example_runs_as_printed(tmp_path: Path) -> None:
    home, _ = _home(tmp_path)
    project = tmp_path / "mae"
    shutil.copytree(REPO / "examples" / "train", project)
    (project / "jobtpu.toml").write_text(_blocks("toml")[0])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "jobtpu").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m jobtpu.cli "$@"\n')
    (bin_dir / "jobtpu").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTPU_")}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", PYTHONPATH=str(REPO), JOBTPU_HOME=str(home),
               HOME=str(tmp_path))
    block = _blocks("bash")[0]
    assert block.splitlines()[0].startswith("export JOBTPU_USER=xibo")
    done = subprocess.run(["bash", "-e", "-c", block], cwd=project, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    job = int(done.stdout.splitlines()[0])
    assert re.search(rf"^\s*{job}\s.*(launching|running|finished)", done.stdout, re.M), done.stdout  # status: xibo's own
    jobs = manage_until(home, [job], {"finished"})
    assert (jobs[job]["user"], jobs[job]["pin"], jobs[job]["cmd"], jobs[job]["overrides"]) == (
        "xibo", "local", "bash run_remote.sh", ["--config.training.learning_rate=0.01"])
