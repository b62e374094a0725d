"""A team member's own things, through the CLI: settings (`config`), numbered working directories
(`dir`, `submit --dir N`), config aliases at three levels (`alias`), machine aliases wherever a machine
is named, the hint for an override typed as an option, and `tldr`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobtpu.cli import build_parser
from jobtpu.commands.tldr import TLDR
from tests.helpers import JOBTPU, allow_private_webhooks, jobtpu, make_home, manage_until, status, write_tree

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


def _settings(home: Path, user: str = "tester") -> dict[str, Any]:
    return dict(json.loads((home / "users" / user / "settings.json").read_text()))


def _one_error(done: Any, text: str) -> None:
    """A refused command: exit 1, and the error's one line (plus a hint line at most) says `text`."""
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith("jobtpu: error: ") and text in lines[0], done.stderr
    assert all(line.startswith("hint: ") for line in lines[1:]), done.stderr


# ---- config ---------------------------------------------------------------------------------------

def test_config_sets_the_defaults_submit_takes_and_reset_restores_them(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 4}}})
    src = write_tree(tmp_path / "proj", {"pyproject.toml": "", "train.py": ""})
    jobtpu(home, "config", "set", "rule", "resume")
    jobtpu(home, "config", "set", "req", "slot=2")
    assert _settings(home) == {"rule": "resume", "req": ["slot=2"]}
    assert jobtpu(home, "config", "get", "rule").stdout == "resume\n"
    assert jobtpu(home, "config", "get").stdout.splitlines() == [
        "rule = resume", "req = slot=2", "columns = (not set: every column but 'submitted')",
        "time_zone = (not set: local)", "notify = (not set: none)", "sheet_name = (not set: your user name)"]

    first = int(jobtpu(home, "submit", "--cmd", "true", cwd=src).stdout)
    chosen = int(jobtpu(home, "submit", "--cmd", "true", "--rule", "pass", "--req", "slot=1", cwd=src).stdout)
    jobs = status(home)
    assert (jobs[first]["rule"], jobs[first]["req"]) == ("resume", ["slot=2"])
    assert (jobs[chosen]["rule"], jobs[chosen]["req"]) == ("pass", ["slot=1"])  # what is typed wins

    jobtpu(home, "config", "reset", "rule")
    assert _settings(home) == {"req": ["slot=2"]}
    jobtpu(home, "config", "reset")
    after = int(jobtpu(home, "submit", "--cmd", "true", cwd=src).stdout)
    assert (status(home)[after]["rule"], status(home)[after]["req"]) == (None, [])


def test_a_bad_setting_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    jobtpu(home, "config", "set", "rule", "resume")
    before = _settings(home)
    for args, text in ((("rule", "sometimes"), "'rule' 'sometimes' is not a rule"),
                       (("req", "gpu=-1"), "--req 'gpu=-1'"),
                       (("columns", "id,colour"), "'colour' is not a status column"),
                       (("time_zone", "Mars/Olympus"), "'Mars/Olympus' is not a time zone"),
                       (("colour", "red"), "unknown setting 'colour'"),
                       (("rule",), "`config set rule` needs a value"),
                       (("req", ""), "`config set req` needs a value"),
                       (("columns", ","), "`config set columns` needs a value")):
        _one_error(jobtpu(home, "config", "set", *args, check=False), text)
    assert _settings(home) == before

    # A hand-edited file with a wrong value: every command that reads it names the file and the key.
    path = home / "users" / "tester" / "settings.json"
    path.write_text('{"rule": "resume", "dirs": {"one": "/tmp"}}')
    src = write_tree(tmp_path / "proj", {"setup.py": ""})
    done = jobtpu(home, "submit", "--cmd", "true", cwd=src, check=False)
    _one_error(done, "settings.json of user tester: 'dirs': 'one' is not a working directory number")
    path.write_text('{"rule": 3}')
    _one_error(jobtpu(home, "config", "get", check=False),
               "settings.json of user tester: 'rule' must be a rule (pre, pass, reapply, rerun or resume), or null (got 3)")
    assert status(home) == {}  # the refused submit queued nothing


def test_status_shows_the_columns_and_time_zone_a_user_chose(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "proj", {".jobtpu": ""})
    job_id = int(jobtpu(home, "submit", "--cmd", "true", "--name", "first", cwd=src).stdout)
    default = jobtpu(home, "status").stdout.splitlines()
    # (your own jobs only: the user column would say your name on every row, so it is left out)
    assert default[0].split()[:3] == ["id", "name", "status"] and "submitted" not in default[0]
    assert "user" not in default[0].split()

    jobtpu(home, "config", "set", "columns", "id,submitted", "status")
    created = datetime.fromtimestamp(status(home)[job_id]["created"], UTC)
    for zone, offset in (("UTC", 0), ("Asia/Shanghai", 8)):  # Shanghai keeps UTC+8 all year
        jobtpu(home, "config", "set", "time_zone", zone)
        lines = jobtpu(home, "status").stdout.splitlines()
        assert lines[0].split() == ["id", "submitted", "status"]
        assert lines[1].split() == [str(job_id), *(created + timedelta(hours=offset)).strftime("%m-%d %H:%M").split(),
                                    "queued"]


def test_machines_shows_when_a_machine_became_unreachable_in_the_users_time_zone(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"gone": {"kind": "ssh", "hosts": ["127.0.0.1:1"], "connect_timeout": 2}})
    src = write_tree(tmp_path / "proj", {".jobtpu": ""})
    jobtpu(home, "submit", "--cmd", "true", cwd=src)
    jobtpu(home, "manage")  # the launch finds nobody listening: the machine is unreachable since now
    since = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"][0]["unreachable_since"]
    for zone, offset in (("UTC", 0), ("Asia/Shanghai", 8)):
        jobtpu(home, "config", "set", "time_zone", zone)
        shown = (datetime.fromtimestamp(since, UTC) + timedelta(hours=offset)).strftime("%m-%d %H:%M")
        assert f"(since {shown})" in jobtpu(home, "machines", env={"COLUMNS": "200"}).stdout


# ---- working directories --------------------------------------------------------------------------

def test_dir_set_here_then_submit_dir_n_from_elsewhere_snapshots_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    first = write_tree(tmp_path / "first", {"which.txt": "the first folder\n"})
    other = write_tree(tmp_path / "other", {"which.txt": "the other folder\n", "pyproject.toml": ""})
    jobtpu(home, "dir", "set", "2", cwd=first)  # PATH defaults to the current folder
    job_id = int(jobtpu(home, "submit", "--dir", "2", "--cmd", "cat which.txt", cwd=other).stdout)
    assert status(home)[job_id]["dir"] == str(first)
    manage_until(home, [job_id], {"finished"})
    assert jobtpu(home, "tail", str(job_id)).stdout == "the first folder\n"

    jobtpu(home, "dir", "set", "1", str(other))
    assert jobtpu(home, "dir", "ls").stdout.splitlines() == [f"1  {other}", f"2  {first}"]
    assert jobtpu(home, "dir", "swap", "1", "2").stdout.splitlines() == [f"1  {first}", f"2  {other}"]
    jobtpu(home, "dir", "swap", "2", "5")  # swapping with an unset number moves it
    assert jobtpu(home, "dir", "ls").stdout.splitlines() == [f"1  {first}", f"5  {other}"]
    jobtpu(home, "dir", "rm", "5")
    assert jobtpu(home, "dir", "ls").stdout.splitlines() == [f"1  {first}"]

    _one_error(jobtpu(home, "submit", "--dir", "3", "--cmd", "true", check=False), "working directory 3 is not set")
    _one_error(jobtpu(home, "dir", "rm", "3", check=False), "working directory 3 is not set")
    _one_error(jobtpu(home, "dir", "set", "0", check=False), "'0' is not a working directory number")
    _one_error(jobtpu(home, "dir", "set", "1", str(tmp_path / "nowhere"), check=False), "is not a folder")
    _one_error(jobtpu(home, "dir", "swap", "1", check=False), "`dir swap` takes 2 argument(s), got 1")
    assert jobtpu(home, "dir", "ls").stdout.splitlines() == [f"1  {first}"]


def test_settings_changed_at_once_by_several_commands_keep_every_change(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    folders = [write_tree(tmp_path / f"d{n}", {"x": ""}) for n in range(1, 7)]
    runs = [subprocess.Popen([*JOBTPU, "--home", str(home), "dir", "set", str(n), str(folder)],
                             env={**os.environ, "JOBTPU_USER": "tester"}, stderr=subprocess.PIPE)
            for n, folder in enumerate(folders, start=1)]
    runs.append(subprocess.Popen([*JOBTPU, "--home", str(home), "alias", "add", "dr", "config.model.dropout"],
                                 env={**os.environ, "JOBTPU_USER": "tester"}, stderr=subprocess.PIPE))
    assert [run.wait(timeout=120) for run in runs] == [0] * len(runs)
    settings = _settings(home)
    assert settings["dirs"] == {str(n): str(folder) for n, folder in enumerate(folders, start=1)}
    assert settings["aliases"] == {"dr": "config.model.dropout"}


def test_without_dir_a_project_is_snapshotted_else_working_directory_1(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    dir1 = write_tree(tmp_path / "dir1", {"train.py": ""})
    loose = write_tree(tmp_path / "loose", {"notes.txt": ""})
    project = write_tree(tmp_path / "repo", {"src/train.py": ""})
    (project / ".git").mkdir()

    before = int(jobtpu(home, "submit", "--cmd", "true", cwd=loose).stdout)  # no dir 1 yet: here
    jobtpu(home, "dir", "set", "1", str(dir1))
    done = jobtpu(home, "submit", "--cmd", "true", cwd=loose)
    assert f"snapshotting working directory 1 ({dir1})" in done.stderr
    in_project = int(jobtpu(home, "submit", "--cmd", "true", cwd=project / "src").stdout)  # below a .git
    named = int(jobtpu(home, "submit", "--dir", str(loose), "--cmd", "true", cwd=loose).stdout)
    jobs = status(home)
    assert jobs[before]["dir"] == str(loose) and jobs[int(done.stdout)]["dir"] == str(dir1)
    assert jobs[in_project]["dir"] == str(project / "src") and jobs[named]["dir"] == str(loose)


@pytest.mark.parametrize("url", ["https://x:99999/", "https://x:abc/", "http://[::1/hook"])
def test_config_set_notify_with_a_bad_url_is_one_line_and_writes_nothing(tmp_path: Path, url: str) -> None:
    home = make_home(tmp_path)
    done = jobtpu(home, "config", "set", "notify", json.dumps([{"webhook": url}]), check=False)
    _one_error(done, "notify[0].webhook is not a valid URL (")
    assert "hint: " in done.stderr
    assert not (home / "users" / "tester" / "settings.json").exists()


def test_config_set_notify_keeps_a_private_webhook_only_when_runner_json_allows_it(tmp_path: Path) -> None:
    """The pass, run by runner.json's owner, decides at send time (docs/design.md §7): `config set`
    refuses a private address unless that file allows them, and then keeps it with a warning."""
    home = make_home(tmp_path)
    hook = json.dumps([{"webhook": "http://10.0.0.5/hook", "events": ["failed"]}])
    done = jobtpu(home, "config", "set", "notify", hook, check=False)
    _one_error(done, "notify[0].webhook: 10.0.0.5 resolves to a private address (10.0.0.5)")
    assert '"allow_private_webhooks": true in its runner.json' in done.stderr
    assert not (home / "users" / "tester" / "settings.json").exists()
    allow_private_webhooks(home)
    done = jobtpu(home, "config", "set", "notify", hook)
    warned = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and "runner.json allows private webhooks; passes run by root post it" in warned[0], \
        done.stderr
    assert _settings(home)["notify"] == json.loads(hook)
    # A runner.json its group may rewrite is nobody's consent: refused again, and nothing changes.
    (home / "runner.json").chmod(0o664)
    done = jobtpu(home, "config", "set", "notify", json.dumps([{"webhook": "http://[::ffff:10.0.0.6]/"}]), check=False)
    _one_error(done, "resolves to a private address (::ffff:a00:6)")
    assert _settings(home)["notify"] == json.loads(hook)


# ---- config aliases -------------------------------------------------------------------------------

def test_config_aliases_come_from_three_levels_yours_first(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    doc = json.loads((home / "machines.json").read_text())
    doc["config_aliases"] = {"bs": "team.batch", "drop": "team.dropout"}
    (home / "machines.json").write_text(json.dumps(doc))
    src = write_tree(tmp_path / "proj", {"pyproject.toml": ""})
    jobtpu(home, "alias", "add", "lr", "mine.lr")
    jobtpu(home, "alias", "add", "heads", "mine.model.heads")
    listing = {line.split()[0]: line.split(None, 2)[1:] for line in jobtpu(home, "alias", "ls").stdout.splitlines()}
    assert listing["lr"] == ["mine.lr", "yours (over built-in)"]
    assert listing["bs"] == ["team.batch", "team (over built-in)"]
    assert listing["heads"] == ["mine.model.heads", "yours"]
    assert listing["ep"] == ["config.training.num_epochs", "built-in"]
    assert listing["drop"] == ["team.dropout", "team"]

    job_id = int(jobtpu(home, "submit", "--cmd", "python t.py", "lr=1", "bs=2", "drop=3", "ep=4", "wd=5",
                        "model.depth=6", cwd=src).stdout)
    assert status(home)[job_id]["overrides"] == [
        "--mine.lr=1", "--team.batch=2", "--team.dropout=3", "--config.training.num_epochs=4",
        "--config.training.weight_decay=5", "--model.depth=6"]

    jobtpu(home, "alias", "rm", "lr")
    assert "config.training.learning_rate" in jobtpu(home, "alias", "ls").stdout
    _one_error(jobtpu(home, "alias", "rm", "drop", check=False), "drop is a team alias, not one of yours")
    _one_error(jobtpu(home, "alias", "rm", "nosuch", check=False), "no alias 'nosuch'")
    _one_error(jobtpu(home, "alias", "add", "2x", "a.b", check=False), "alias name '2x' must be")
    _one_error(jobtpu(home, "alias", "add", "x", "a b", check=False), "'a b' is not a config key")
    assert _settings(home)["aliases"] == {"heads": "mine.model.heads"}


def test_an_override_typed_as_an_option_gets_a_hint(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "proj", {"pyproject.toml": ""})
    done = jobtpu(home, "submit", "--cmd", "python t.py", "--wd=0.1", cwd=src, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines()[1] == ("hint: --wd=0.1 looks like a config override: write it without dashes "
                                           "(wd=0.1), or after `--` (-- --wd=0.1); overrides come after the options")
    assert status(home) == {}
    job_id = int(jobtpu(home, "submit", "--cmd", "python t.py", "--", "--wd=0.1", cwd=src).stdout)
    assert status(home)[job_id]["overrides"] == ["--config.training.weight_decay=0.1"]


# ---- machine aliases ------------------------------------------------------------------------------

def test_a_machine_alias_works_wherever_a_machine_is_named(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"box": {"kind": "local", "aliases": ["bx", "the-box"]},
                                "other": {"kind": "local", "root": "other-run"}})
    src = write_tree(tmp_path / "proj", {"pyproject.toml": ""})
    job_id = int(jobtpu(home, "submit", "--cmd", "true", "--machine", "the-box", cwd=src).stdout)
    assert status(home)[job_id]["pin"] == "box"  # the machine's own name is recorded
    manage_until(home, [job_id], {"finished"})
    jobtpu(home, "rerun", str(job_id), "--machine", "bx")
    assert status(home)[job_id]["pin"] == "box"
    assert "box[0] (this machine): ok" in jobtpu(home, "doctor", "bx").stderr
    _one_error(jobtpu(home, "tpu", "describe", "bx", check=False), "box is a local machine, not a TPU")
    unknown = jobtpu(home, "submit", "--cmd", "true", "--machine", "bz", cwd=src, check=False)
    _one_error(unknown, "unknown machine 'bz'")
    assert unknown.stderr.splitlines()[1] == "hint: machines in machines.json: box (bx, the-box), other"


def test_an_alias_that_names_two_machines_is_refused(tmp_path: Path) -> None:
    for machines, text in (
            ({"a": {"kind": "local", "aliases": ["x"]}, "b": {"kind": "local", "root": "b", "aliases": ["x"]}},
             "machine 'b': alias 'x' already names machine 'a'"),
            ({"a": {"kind": "local", "aliases": ["b"]}, "b": {"kind": "local", "root": "b"}},
             "machine 'a': alias 'b' already names machine 'b'"),
            ({"a": {"kind": "local", "aliases": ["no spaces"]}}, "alias 'no spaces' must be letters"),
            ({"a": {"kind": "local", "aliases": "x"}}, "'aliases' must be a list of other names")):
        home = make_home(tmp_path / text[:12].replace(" ", "_"), machines)
        _one_error(jobtpu(home, "machines", check=False), text)


# ---- tldr -----------------------------------------------------------------------------------------

def test_tldr_shows_ten_commands_each_example_a_valid_command_line() -> None:
    parser = build_parser()
    assert len(TLDR) == 10
    for _, example in TLDR:
        words = shlex.split(example)
        assert words[0] == "jobtpu"
        parser.parse_args(words[1:])  # exits on a wrong example
    shown = jobtpu(Path("unused-home"), "tldr").stdout
    assert all(example in shown for _, example in TLDR)
