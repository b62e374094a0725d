"""Hostile input through the real command line on the local machine (docs/reference/guarantees-and-numbers.md §9): what a user types
arrives byte-exact, and bad input gets one clear line, the right exit status, and changes nothing."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.helpers import JOBTPU, cli, make_home, passes_until, run

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


ALIASES = {"lr": "config.training.learning_rate"}
PROBE = "import json, sys\njson.dump(sys.argv[1:], open('argv.json', 'w'))\n"


# ---- running the CLI in-process -------------------------------------------------------------------

def ok(home: Path, *args: str) -> str:
    return run(home, *args, in_process=True)[0]


def manage_until_ended(home: Path, ids: list[int], timeout: float = 20) -> dict[int, dict[str, Any]]:
    return passes_until(home, lambda jobs: all(jobs[i]["status"] in ("finished", "failed", "killed") for i in ids),
                        f"jobs {ids} to end", timeout=timeout, interval=0.05, in_process=True)


# ---- byte-exact: a property ------------------------------------------------------------------------

# Everything a terminal can hand over: quotes, $, backticks, spaces, newlines, backslashes, non-ASCII.
# Not NUL (no argv or environment can carry it) and not lone surrogates (not text).
NASTY = ["'", '"', "$", "`", " ", "\n", "\\", "$(id)", "`id`", "${HOME}", "'\"'\"'", "\t", "\r", "*", "?",
         "~", "!", "#", ";", "&", "|", "<", ">", "(", ")", "{", "}", "%s", "%", "-", "--", "=", "ü", "日本", "😀",
         # what a table or a terminal could take as instructions: rich markup, escape sequences, line breaks
         "[/x]", "[bold]", "[link=http://e/]", "\x1b]0;t\x07", "\x1b[2J", "\x1b]8;;http://e\x1b\\", "\u202e",
         "\x85", "\u2028", "\x7f"]
PIECE = st.one_of(st.sampled_from(NASTY), st.text(st.characters(exclude_categories=("Cs",),
                                                                exclude_characters="\x00"), max_size=4))
HOSTILE = st.lists(PIECE, max_size=8).map("".join)
# Characters that must never reach a terminal raw, and every line break str.splitlines() knows.
DISPLAY_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
NONBLANK = HOSTILE.filter(lambda s: s.strip() != "")


@st.composite
def job_input(draw: st.DrawFn) -> dict[str, Any]:
    return {"said": draw(HOSTILE), "name": draw(HOSTILE), "tags": draw(st.lists(NONBLANK, max_size=2)),
            "env": draw(HOSTILE), "env2": draw(HOSTILE),
            "overrides": draw(st.lists(st.tuples(st.sampled_from(["lr", "model.depth", "--x-y"]), HOSTILE),
                                       max_size=3))}


def literal_env(value: str) -> str:
    """An --env value that arrives as `value` itself: `$NAME` is expanded on the worker, `\\$` is a `$`."""
    return value.replace("$", "\\$")


@pytest.mark.starts_first  # long: handed out first under -n (tests/conftest.py)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(job_input(), min_size=1, max_size=3))
@example(batch=[{"said": "%s", "name": "", "tags": [], "env": "", "env2": "", "overrides": []}])
# "--" attached to an option (`--name=--`) is the user's value: Python 3.11's argparse used to drop it
@example(batch=[{"said": "", "name": "--", "tags": ["--"], "env": "--", "env2": "", "overrides": [("lr", "--")]}])
# markup and escape sequences in a name, tags and the last log line are shown as text, one row
@example(batch=[{"said": "", "name": "[/x]\x1b]0;t\x07", "tags": ["[link=http://e/]l", "a\nb"],
                 "env": "\x1b[2J[bold]\u2028", "env2": "", "overrides": []}])
def test_what_the_user_types_arrives_byte_exact(batch: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory(prefix="jobtpu-hostile-") as tmp:
        home = make_home(Path(tmp), config_aliases=ALIASES)
        src = Path(tmp) / "src"
        src.mkdir()
        (src / "probe.py").write_text(PROBE)
        ids, cmds = [], []
        for item in batch:
            cmd = (f"printf %s {shlex.quote(item['said'])} > said.out && printf %s \"$MY_VAR\" > env.out && "
                   f"printf %s \"$OTHER\" > env2.out && printf '%s\\n' \"$MY_VAR\" && python3 probe.py")
            args = ["submit", f"--dir={src}", f"--cmd={cmd}", f"--name={item['name']}",
                    f"--env=MY_VAR={literal_env(item['env'])}", f"--env=OTHER={literal_env(item['env2'])}",
                    *(f"--tag={t}" for t in item["tags"])]
            # a word that starts with "-" is an option to any command line, and an empty value before "--"
            # is refused as a likely mistake (lr=): such overrides go after "--", where they pass as they are
            dashed = any(key.startswith("-") or value == "" for key, value in item["overrides"])
            args += ["--"] * dashed + [f"{key}={value}" for key, value in item["overrides"]]
            ids.append(int(ok(home, *args)))
            cmds.append(cmd)
        jobs = manage_until_ended(home, ids)
        for job_id, item, cmd in zip(ids, batch, cmds, strict=True):
            job = jobs[job_id]
            assert (job["status"], job["exit_code"]) == ("finished", 0), job
            assert (job["name"], job["tags"], job["cmd"]) == (item["name"], item["tags"], cmd)
            folder = home / "run" / "jobs" / str(job_id)
            assert (folder / "said.out").read_bytes() == item["said"].encode()
            assert (folder / "env.out").read_bytes() == item["env"].encode()
            assert (folder / "env2.out").read_bytes() == item["env2"].encode()
            expected = [f"--{ALIASES.get(k.lstrip('-'), k.lstrip('-'))}={v}" for k, v in item["overrides"]]
            assert json.loads((folder / "argv.json").read_text()) == expected
        # The display path: the table shows every name, tag and last log line as text, one row each.
        rc, out, err = cli(home, "status", "--all-users")
        assert rc == 0 and err == "", err
        assert DISPLAY_UNSAFE.search(out) is None, repr(out)
        assert len(out.splitlines()) == 1 + len(ids) + 1, out  # the header, a row per job, the count line


def test_hostile_dir_and_a_command_bash_must_interpret(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_aliases=ALIASES)
    src = tmp_path / "my dir $HOME `id` 'q' \"z\" ü\\ \n(x)"
    src.mkdir()
    (src / "data file.txt").write_bytes(b"payload \xc3\xbc\n")
    cmd = ("x=\"$(printf %s 'a\"b')\"\n"
           "echo \"$x `echo tick` $((1 + 2))\" > multi.out\n"
           "cat 'data file.txt' >> multi.out; printf '%s\\n' \"$JOBTPU_JOB_ID\" >> multi.out")
    job_id = int(ok(home, "submit", "--dir", str(src), "--cmd", cmd))
    job = manage_until_ended(home, [job_id])[job_id]
    assert (job["status"], job["dir"], job["cmd"]) == ("finished", str(src.resolve()), cmd)
    out = (home / "run" / "jobs" / str(job_id) / "multi.out").read_bytes()
    assert out == f'a"b tick 3\npayload ü\n{job_id}\n'.encode()


# ---- bad input: one line, exit 1 (2 for usage), nothing changed --------------------------------------

@pytest.fixture(scope="module")
def _busy_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int, int]:
    root = tmp_path_factory.mktemp("busy")
    home = make_home(root, slots=1, config_aliases=ALIASES)
    src = root / "src"
    src.mkdir()
    (src / "f.txt").write_text("x")
    done = int(ok(home, "submit", "--dir", str(src), "--cmd", "true"))
    manage_until_ended(home, [done])
    queued = int(ok(home, "submit", "--dir", str(src), "--cmd", "true"))
    return home, src, done, queued


@pytest.fixture
def busy_home(_busy_template: tuple[Path, Path, int, int], tmp_path: Path) -> tuple[Path, Path, int, int]:
    """A home with a finished job and a queued one (no pass has run since it was submitted), a fresh copy
    per test."""
    template, src, done, queued = _busy_template
    home = tmp_path / "home"
    shutil.copytree(template, home, symlinks=True, ignore=shutil.ignore_patterns("*.lock"))
    return home, src, done, queued


def snapshot(home: Path) -> dict[str, bytes]:
    return {name: (home / name).read_bytes() for name in ("machines.json", "state.json", "state.json.bak")
            if (home / name).exists()}


def assert_one_error(rc: int, out: str, err: str, expected_rc: int, needle: str) -> None:
    lines = err.splitlines()
    assert rc == expected_rc, (rc, err)
    assert out == "", out
    assert lines and lines[0].startswith("jobtpu: error: ") and needle in lines[0], err
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), err
    assert "Traceback" not in err


BAD_SUBMITS: list[tuple[list[str], str]] = [
    (["--machine", "nope"], "unknown machine 'nope'"),
    (["--req", "v9-2048"], "no machine in the fleet could ever run this request (local: has no accelerator, "
                           "the job asks v9-2048)"),
    (["--req", "gpu=99"], "no machine in the fleet could ever run this request (local: offers gpu=0, the job asks 99)"),
    (["--req", "gpu=lots"], "--req 'gpu=lots'"),
    (["--req", "v3+", "--req", "preemptible"], "no machine in the fleet could ever run this request"),
    (["--user", "Bad Name"], "user name 'Bad Name' is not valid"),
    (["--user", "x" * 33], "is not valid"),
    (["--env", "NOEQUALS"], "--env 'NOEQUALS' is not NAME=VALUE"),
    (["--env", "1X=2"], "--env '1X=2' is not NAME=VALUE"),
    (["--env", "=v"], "--env '=v' is not NAME=VALUE"),
    (["--env", "JOBTPU_ATTEMPT=7"], "JOBTPU_* variables are set by jobtpu itself"),
    (["--timeout", "5x"], "--timeout '5x' is not a duration"),
    (["--timeout", "0"], "--timeout '0' is not a duration"),
    (["--stall=-1s"], "--stall '-1s' is not a duration"),
    (["--stall", "1 h"], "--stall '1 h' is not a duration"),
    (["--tag", " "], "--tag must not be empty"),
    (["not-a-pair"], "'not-a-pair' is not a KEY=VALUE config override"),
    (["--dir", "/nonexistent/jobtpu"], "the folder to snapshot does not exist"),
]


@pytest.mark.parametrize(("extra", "needle"), BAD_SUBMITS, ids=[" ".join(e) for e, _ in BAD_SUBMITS])
def test_bad_submit_is_one_line_and_changes_nothing(busy_home: tuple[Path, Path, int, int], extra: list[str],
                                                    needle: str) -> None:
    home, src, _, _ = busy_home
    before = snapshot(home)
    archives = sorted((home / "archives").iterdir())
    rc, out, err = cli(home, "submit", "--dir", str(src), "--cmd", "true", *extra)
    assert_one_error(rc, out, err, 1, needle)
    assert snapshot(home) == before and sorted((home / "archives").iterdir()) == archives


def test_blank_command_and_bad_user_from_the_environment(busy_home: tuple[Path, Path, int, int]) -> None:
    home, src, _, _ = busy_home
    before = snapshot(home)
    assert_one_error(*cli(home, "submit", "--dir", str(src), "--cmd", "  \n"), 1, "--cmd is empty")
    assert_one_error(*cli(home, "submit", "--dir", str(src), "--cmd", "true", user="Bad Name"), 1,
                     "user name 'Bad Name' is not valid")
    assert_one_error(*cli(home, "status", "--user", "Bad Name"), 1, "user name 'Bad Name' is not valid")
    assert snapshot(home) == before


@pytest.mark.parametrize("args", [["status", "999"], ["status", "--json", "999"], ["kill", "999"], ["tail", "999"],
                                  ["resume", "999"], ["rerun", "999"], ["fetch", "999"], ["kill", "1", "999"]])
def test_unknown_job_id(busy_home: tuple[Path, Path, int, int], args: list[str]) -> None:
    home, _, _, _ = busy_home
    before = snapshot(home)
    assert_one_error(*cli(home, *args), 1, "no job 999")
    assert snapshot(home) == before


def test_wrong_state_for_the_command(busy_home: tuple[Path, Path, int, int]) -> None:
    home, _, done, queued = busy_home
    before = snapshot(home)
    assert_one_error(*cli(home, "resume", str(queued)), 1, f"job {queued} is queued; only an ended job")
    assert_one_error(*cli(home, "tail", str(queued)), 1, f"job {queued} has not started yet")
    assert_one_error(*cli(home, "tail", str(done), "--attempt", "5"), 1, f"job {done} has no attempt 5")
    assert_one_error(*cli(home, "resume", str(done), "--machine", "nope"), 1, "unknown machine 'nope'")
    assert_one_error(*cli(home, "fetch", str(done), "../x"), 1, "must be relative to the job's folder")
    assert snapshot(home) == before


USAGE_ERRORS: list[tuple[list[str], str]] = [
    (["status", "abc"], "'abc' is not a job id"), (["submit"], "--cmd"), (["frobnicate"], "invalid choice"),
    (["submit", "--cmd", "x", "--rule", "sometimes"], "invalid choice"), (["tail", "1", "-n", "many"], "whole number"),
    (["status", "--user", "a", "--all-users"], "not allowed with"), (["manage", "--loop", "soon"], "seconds"),
    # numbers out of range are refused before anything runs (a zero interval would spin forever)
    (["manage", "--loop", "0"], "above 0"), (["manage", "--loop", "-5"], "above 0"),
    (["status", "--watch", "0"], "above 0"), (["status", "--watch=-1"], "above 0"),
    (["manage", "--loop", "nan"], "above 0"), (["tail", "1", "-n", "-5"], "0 or more"),
    (["tail", "1", "--worker=-1"], "0 or more"), (["tail", "1", "--attempt=-2"], "0 or more"),
    (["submit", "--cmd", "true", "--max-recoveries", "-1"], "--max-recoveries: '-1': give 0 or more"),
]


@pytest.mark.parametrize(("args", "needle"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_exit_2(busy_home: tuple[Path, Path, int, int], args: list[str], needle: str) -> None:
    home, _, _, _ = busy_home
    before = snapshot(home)
    rc, out, err = cli(home, *args)
    assert_one_error(rc, out, err, 2, needle)
    assert err.splitlines()[1] == "hint: see `jobtpu --help`" or "--help" in err.splitlines()[1]
    assert snapshot(home) == before


MALFORMED_MACHINES = '{"machines": {\n  "local": {"kind": "local"},\n}}\n'
MALFORMED_STATE = '{"version": 1, "next_id": 3,\n "jobs": [\n  {"id": 1 "user": "tester"}\n]}\n'


MALFORMED = {  # file, what it holds, the error every command must give for it
    "machines.json": (MALFORMED_MACHINES, "jobtpu: error: machines.json:3:1: "),
    "state.json": (MALFORMED_STATE, "state.json:3:12: Expecting ',' delimiter"),
}


@pytest.mark.parametrize(("broken", "args"), [
    *(("machines.json", a) for a in [["submit", "--dir", "{src}", "--cmd", "true"],
                                     ["run", "--dir", "{src}", "--cmd", "true"], ["manage"], ["manage", "--dry-run"],
                                     ["machines"], ["kill", "2"], ["resume", "1"], ["clean"], ["doctor", "local"]]),
    *(("state.json", a) for a in [["submit", "--dir", "{src}", "--cmd", "true"], ["manage"], ["status"],
                                  ["status", "--json"], ["machines", "--json"], ["kill", "1"], ["tail", "1"],
                                  ["resume", "1"], ["clean"]]),
])
def test_malformed_file(busy_home: tuple[Path, Path, int, int], broken: str, args: list[str]) -> None:
    home, src, _, _ = busy_home
    content, error = MALFORMED[broken]
    (home / broken).write_text(content)
    before = snapshot(home)
    rc, out, err = cli(home, *(a.format(src=src) for a in args))
    assert_one_error(rc, out, err, 1, error)
    assert snapshot(home) == before


def test_the_real_entry_point_prints_no_traceback(busy_home: tuple[Path, Path, int, int]) -> None:
    home, src, _, _ = busy_home
    (home / "machines.json").write_text(MALFORMED_MACHINES)
    before = snapshot(home)
    env = {**os.environ, "JOBTPU_USER": "tester"}
    for args, expected_rc, needle in [
        (["submit", "--dir", str(src), "--cmd", "true"], 1, "machines.json:3:1:"),
        (["status", "999"], 1, "no job 999"),
        (["submit", "--dir", str(src), "--cmd", "true", "--user", "Bad Name"], 1, "machines.json:3:1:"),
        (["status", "x"], 2, "'x' is not a job id"),
    ]:
        done = subprocess.run(["jobtpu", "--home", str(home), *args], capture_output=True, text=True, env=env,
                              timeout=30)
        assert_one_error(done.returncode, done.stdout, done.stderr, expected_rc, needle)
    done = subprocess.run([*JOBTPU, "--home", str(home), "tail", "999"], capture_output=True, text=True, env=env,
                          timeout=30)
    assert_one_error(done.returncode, done.stdout, done.stderr, 1, "no job 999")
    assert snapshot(home) == before


def test_an_unwritable_home_is_one_clear_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "machines.json").write_text('{"machines": {"local": {"kind": "local"}}}')
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.sh").write_text("true\n")
    (home / "archives").write_text("not a folder")  # the snapshot cannot be written
    rc, out, err = cli(home, "submit", "--dir", str(src), "--cmd", "true")
    assert rc == 1 and out == "" and "Traceback" not in err
    assert err.startswith("jobtpu: error: ") and len(err.strip().splitlines()) <= 2
    assert not (home / "state.json").exists()


# ---- the environment, not the user -----------------------------------------------------------------

def test_a_home_that_is_a_file_and_a_target_we_cannot_write(busy_home: tuple[Path, Path, int, int],
                                                            tmp_path: Path) -> None:
    home, _, done, _ = busy_home
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    assert_one_error(*cli(a_file, "status"), 1, f"the home {a_file} is not a folder")
    before = snapshot(home)
    rc, out, err = cli(home, "fetch", str(done), "--to", str(a_file / "sub"))
    assert_one_error(rc, out, err, 1, str(a_file / "sub"))
    assert "hint" not in err  # the folder named by --to is at fault, not the home
    assert snapshot(home) == before


def test_a_reader_that_leaves_early_gets_no_error_text(busy_home: tuple[Path, Path, int, int]) -> None:
    home, _, _, _ = busy_home
    for args in (["status", "--json"], ["status", "--all-users", "--json"], ["status"]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # like `| head` that already left: every write fails with EPIPE, at once
        try:
            done = subprocess.run([*JOBTPU, "--home", str(home), *args], stdout=write_end, stderr=subprocess.PIPE,
                                  env={**os.environ, "JOBTPU_USER": "tester"}, timeout=30)
        finally:
            os.close(write_end)
        assert done.returncode == 1 and done.stderr == b"", (args, done.stderr)
