"""The Python API (docs/reference/python.md §11.1, §11.2): its page's examples run as printed, and
the same actions taken through the API and through the command line, on two homes, leave the same
state.json and events and say the same things."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from tests.helpers import cli, make_home, manage_until, write_tree
from tests.test_doc_examples import fenced_blocks

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "reference" / "python.md"
TRAIN = ('import sys\nprint("step 1")\nprint("done", " ".join(sys.argv[1:]))\n'
         'open("out.txt", "w").write("args " + " ".join(sys.argv[1:]) + "\\n")\n')
SHORT = {"follow_poll": 0.05}  # the wait between wait()'s rounds


def _project(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "project", {"train.py": TRAIN})


def test_the_pages_examples_run_as_printed(tmp_path: Path) -> None:
    home, project = make_home(tmp_path), _project(tmp_path)
    blocks = [block for language, _, block in fenced_blocks(PAGE.read_text()) if language == "python"]
    # One interpreter, as a notebook runs its cells: each block as printed, then a line to split on.
    driver = ("import json, sys\nspace = {}\nfor block in json.loads(sys.argv[1]):\n"
              "    exec(compile(block, '<python.md>', 'exec'), space)\n    print('--8<--', flush=True)\n")
    env = {**os.environ, "JOBTPU_HOME": str(home), "JOBTPU_USER": "tester", **timing.env(**SHORT),
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", driver, json.dumps(blocks)], cwd=project, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # nothing printed but what the examples print
    said = done.stdout.split("--8<--\n")
    assert len(said) == len(blocks) + 1
    assert said[0] == "1 queued\n"
    assert said[1] == "[2, 3, 4, 5] 2\n"
    assert said[2] == "finished 0\nstep 1\ndone --steps=3\n"
    assert said[3] == "args --steps=3\n"
    finished = said[4].splitlines()
    assert [line.split()[0] for line in finished] == ["2", "3", "4", "5"]
    assert finished[0] == "2 ['--config.training.learning_rate=0.1', '--seed=1']"  # lr: a built-in alias
    assert said[5] == "queued ['1']\nkilled ['local']\n"
    message, hint = said[6].splitlines()  # the command line's line and its hint
    assert "'nowhere'" in message and hint
    assert said[7] == "1\n"
    assert said[8] == ("[['--config.training.learning_rate=0.5', '--layers=32,64'], "  # §11.5: a job array, a value whole
                       "['--config.training.learning_rate=0.25']]\n")
    assert said[9] == ("6 finished None\n7 finished None\n8 failed job 8 failed (exit 3)\n"
                       "hint: `jobtpu tail 8` shows its log, `jobtpu events --job 8` what happened\n")


# ---- the API and the command line agree ----------------------------------------------------------

TIME_KEYS = {"created", "started", "ended", "last_alive", "log_grew", "at", "time", "since", "took", "age", "id"}
PLACE_KEYS = {"archive", "dir", "uid", "account"}


def _normal(value: Any, home: Path) -> Any:
    """Times, snapshot names, folders and accounts out; the home's path as HOME."""
    if isinstance(value, dict):
        return {k: _normal(v, home) for k, v in value.items() if k not in TIME_KEYS | PLACE_KEYS}
    if isinstance(value, list):
        return [_normal(v, home) for v in value]
    if isinstance(value, str):
        return value.replace(str(home), "HOME")
    return value


def _state(home: Path) -> Any:
    doc = json.loads((home / "state.json").read_text())
    doc.pop("last_pass", None)
    return _normal(doc, home)


def _events(home: Path) -> list[tuple[str, Any, Any]]:
    lines = (home / "events.jsonl").read_text().splitlines() if (home / "events.jsonl").exists() else []
    return sorted((e["kind"], e.get("job"), json.dumps(_normal(e.get("detail"), home), sort_keys=True))
                  for e in map(json.loads, lines))


def _api_error(act: Callable[[], Any]) -> list[str]:
    import jobtpu
    from jobtpu.commands.common import error_text

    with pytest.raises(jobtpu.JobtpuError) as raised:
        act()
    return error_text(raised.value).splitlines()


def _ids(jobs: list[Any]) -> list[str]:
    return [f"{jobs[0].id}-{jobs[-1].id}" if len(jobs) > 1 else str(jobs[0].id)]


# (what, the command line's words, the API's call on a jobtpu.Home giving the lines the command prints)
ACTS: list[tuple[str, list[str], Callable[[Any], list[str]]]] = [
    ("submit", ["submit", "--cmd", "python3 train.py", "--name", "one", "--tag", "t"],
     lambda h: _ids(h.submit("python3 train.py", name="one", tags=["t"]))),
    ("a sweep", ["submit", "--cmd", "python3 train.py", "--sweep", "lr=0.1,0.01", "--hold"],
     lambda h: _ids(h.submit("python3 train.py", sweep={"lr": [0.1, 0.01]}, hold=True))),
    ("a held job killed", ["kill", "2"], lambda h: (h.kill([2]), h.said)[1]),
    ("one pass", ["manage"], lambda h: h.manage()),
    ("an unknown job", ["kill", "99"], lambda h: _api_error(lambda: h.kill([99]))),
    ("a bad status", ["status", "--status", "runing"], lambda h: _api_error(lambda: h.jobs(statuses=["runing"]))),
    ("a bad machine", ["submit", "--cmd", "x", "--machine", "gone"],
     lambda h: _api_error(lambda: h.submit("x", machine="gone"))),
    ("an unended job rerun", ["rerun", "3"], lambda h: _api_error(lambda: h.job(3).rerun())),
    ("until it ends", [], lambda h: (h.job(1).wait(timeout=120), [])[1]),
    ("its log", ["tail", "1", "-n", "1"], lambda h: h.job(1).tail(n=1).splitlines()),
    ("no such attempt", ["tail", "1", "--attempt", "7"], lambda h: _api_error(lambda: h.job(1).tail(attempt=7))),
    ("rerun", ["rerun", "1"], lambda h: (h.job(1).rerun(), h.said)[1]),
    ("kill the sweep's other", ["kill", "3"], lambda h: (h.job(3).kill(), h.said)[1]),
]


def test_the_api_and_the_command_line_do_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jobtpu

    monkeypatch.setenv(timing.ENV, json.dumps(SHORT))
    monkeypatch.setenv("JOBTPU_USER", "tester")
    by_cli, by_api = make_home(tmp_path / "cli"), make_home(tmp_path / "api")
    monkeypatch.chdir(_project(tmp_path))
    home = jobtpu.Home(by_api)
    for what, words, api in ACTS:
        if words:
            code, out, err = cli(by_cli, *words)
            expected = [line for line in (out + err).splitlines() if line]
            if what == "a bad status":  # argparse's usage line names the parser, the API the option
                expected = [re.sub(r"^jobtpu status: error", "jobtpu: error", line) for line in expected]
        else:
            manage_until(by_cli, [1], {"finished"})
            expected = []
        got = [line.replace(str(by_api), str(by_cli)) for line in api(home) if line]
        if what == "a bad status":
            got = [line for line in got if not line.startswith("hint:")]
            expected = [line for line in expected if not line.startswith("hint:")]
        assert got == expected, what
        assert _state(by_api) == _state(by_cli), what
    assert _events(by_api) == _events(by_cli)
    listed = [j.record for j in home.jobs(all_users=True)]
    assert _normal(json.loads(cli(by_cli, "status", "--json", "--all-users")[1])["jobs"], by_cli) == \
        _normal([json.loads(__import__("msgspec").json.encode(r)) for r in listed], by_api)


def test_a_record_is_read_only_and_a_python_value_the_parser_refuses_is_a_usage_error(tmp_path: Path) -> None:
    import msgspec

    import jobtpu
    from jobtpu.errors import UsageError

    home = jobtpu.Home(make_home(tmp_path))
    write_tree(tmp_path / "p", {"a.py": ""})
    [job] = home.submit("true", dir=tmp_path / "p", hold=True)
    with pytest.raises(AttributeError):
        job.record.status = "finished"  # type: ignore[misc]
    assert isinstance(job.record, msgspec.Struct) and job.record.held
    for bad in (lambda: home.submit("true", dir=tmp_path / "p", tags="lr"),
                lambda: home.submit("true", dir=tmp_path / "p", retries=-1),
                lambda: home.submit("true", dir=tmp_path / "p", rule="again"),
                lambda: home.jobs(statuses=["done"]), lambda: home.jobs(user="a", all_users=True),
                lambda: home.kill([0])):
        with pytest.raises(UsageError) as raised:
            bad()
        assert raised.value.hint and "\n" not in raised.value.message
    assert [j.id for j in home.jobs(all_users=True)] == [1]  # nothing else was queued


def test_import_jobtpu_loads_nothing_heavy() -> None:
    code = ("import sys, jobtpu\nheavy = [m for m in sys.modules if m.split('.')[0] in "
            "('rich', 'paramiko', 'google', 'gspread', 'msgspec', 'orjson', 'argparse') or m.startswith('jobtpu.')]\n"
            "print(heavy)\nassert jobtpu.Home.__module__ == 'jobtpu.api'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


# ---- sweeps as values, job arrays, handles (issue: the API gives results back) --------------------

def test_a_sweep_value_with_a_comma_is_one_value_and_a_list_of_dicts_is_a_job_array(tmp_path: Path) -> None:
    import jobtpu
    from jobtpu.errors import UsageError

    home_dir, project = make_home(tmp_path), _project(tmp_path)
    with jobtpu.Home(home_dir) as home:
        comma = home.submit("true", dir=project, sweep={"layers": ["32,64", "128"]}, hold=True)
        array = home.submit("true", dir=project, sweep=[{"seed": 1, "bs": 32}, {"seed": 2}], hold=True)
        for bad in ([{"seed": 1}, "bs=64"], {"layers": "32,64"}):
            with pytest.raises(UsageError) as raised:
                home.submit("true", dir=project, sweep=bad, hold=True)
            assert "\n" not in raised.value.message
    assert [j.record.overrides for j in comma] == [["--layers=32,64"], ["--layers=128"]]
    assert [j.record.overrides for j in array] == [["--seed=1", "--config.training.batch_size=32"], ["--seed=2"]]  # bs: a built-in alias
    assert {j.record.sweep for j in array} == {array[0].id} and array[0].id != comma[0].id
    # The command line's own way to give such a value: `\,` (docs/reference/commands.md §2.2.3).
    code, out, err = cli(home_dir, "submit", "--cmd", "true", "--dir", str(project), "--hold", "--json",
                         "--sweep", "layers=32\\,64,128")
    assert code == 0, err
    ids = json.loads(out)["ids"]
    assert [home.job(i).record.overrides for i in ids] == [["--layers=32,64"], ["--layers=128"]]
    assert [j.id for j in home.jobs(all_users=True)] == [1, 2, 3, 4, 5, 6]  # nothing from the refused calls


def test_a_job_is_the_same_job_by_home_and_id(tmp_path: Path) -> None:
    import jobtpu

    home_dir, project = make_home(tmp_path / "a"), _project(tmp_path)
    [job] = jobtpu.Home(home_dir).submit("true", dir=project, hold=True)
    again = jobtpu.Home(home_dir).job(job.id)
    assert again == job and hash(again) == hash(job) and len({job, again}) == 1
    other = jobtpu.Home(make_home(tmp_path / "b")).submit("true", dir=project, hold=True)[0]
    assert other.id == job.id and other != job and job != job.id


def test_mypy_finds_the_typed_package_after_the_readmes_editable_install(tmp_path: Path) -> None:
    """README.md's `pip install -e .`, into a fresh environment, then mypy on a script of the user's."""
    import shutil

    project = tmp_path / "project"
    shutil.copytree(REPO / "jobtpu", project / "jobtpu", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, project / name)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                                "-e", "."], cwd=project, capture_output=True, text=True, timeout=240)
    assert installed.returncode == 0, installed.stderr
    (tmp_path / "use.py").write_text("import jobtpu\nfrom jobtpu.errors import JobtpuError\n\n"
                                     "home: jobtpu.Home = jobtpu.Home()\nwrong: int = JobtpuError('x').message\n")
    bare = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}  # the install alone
    checked = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--python-executable", str(python),
                              "use.py"], cwd=tmp_path, capture_output=True, text=True, timeout=240, env=bare)
    # Found and typed: the one error is the script's own (a str is no int), not a missing module.
    assert "import-not-found" not in checked.stdout, checked.stdout
    assert checked.stdout.splitlines()[0].startswith("use.py:5: error: Incompatible types in assignment"), checked.stdout
