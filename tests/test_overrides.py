"""Config overrides as a user types them (docs/reference/commands.md §2.2.2, §2.2.3): every way of making one
(plain words, --sweep, --sweep-file) names its key in full through the same three alias levels, and
the old tool's habits and typos get one line saying what to do instead of a silent wrong job."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from jobtpu.home.settings import full_key
from jobtpu.inputs import override_mistake
from jobtpu.suggest import command_for, option_for
from tests.accounts import Team
from tests.helpers import jobtpu, make_home, status

REPO = Path(__file__).resolve().parent.parent


# ---- one function names an override's key in full ---------------------------------------------------

@pytest.mark.fast
@pytest.mark.parametrize(("key", "shared", "own", "full"), [
    ("lr", {}, {}, "config.training.learning_rate"),  # built-in
    ("lr", {"lr": "team.lr"}, {}, "team.lr"),  # the team's over the built-in
    ("lr", {"lr": "team.lr"}, {"lr": "mine.lr"}, "mine.lr"),  # yours over both
    ("depth", {"depth": "config.model.depth"}, {}, "config.model.depth"),
    ("dp", {}, {"dp": "config.model.drop_path"}, "config.model.drop_path"),
    ("seed", {"depth": "x"}, {"dp": "y"}, "seed"),  # no alias: the key itself
    ("config.training.learning_rate", {}, {}, "config.training.learning_rate"),
])
def test_full_key_goes_through_every_alias_level(key: str, shared: dict[str, str], own: dict[str, str],
                                                 full: str) -> None:
    assert full_key(key, shared, own) == full


def test_the_guides_sweep_makes_distinct_jobs_with_full_names(tmp_path: Path) -> None:
    """docs/guide.md §6 "Sweeps", as printed: six different jobs, each with its full config keys."""
    home = make_home(tmp_path, slots=2, config_aliases={"depth": "config.model.depth"})
    done = jobtpu(home, "submit", "--dir", "examples/train", "--cmd", "bash run_remote.sh --steps 100",
                  "--sweep", "lr=0.01,0.03,0.1", "--sweep", "bs=32,64", cwd=REPO)
    first = int(done.stdout.split("-")[0])
    jobs = status(home)
    got = [jobs[i]["overrides"] for i in range(first, first + 6)]
    assert got == [[f"--config.training.learning_rate={lr}", f"--config.training.batch_size={bs}"]
                   for lr in ("0.01", "0.03", "0.1") for bs in ("32", "64")]
    # status shows them short again, through the same aliases
    table = jobtpu(home, "status", "--sweep", str(first), "--all", env={"COLUMNS": "200"}).stdout
    assert "lr=0.01 bs=32" in table and "lr=0.1 bs=64" in table
    (tmp_path / "grid.csv").write_text("lr,bs\n0.01,32\n0.1,128\n")
    done = jobtpu(home, "submit", "--dir", "examples/train", "--cmd", "bash run_remote.sh",
                  "--sweep-file", str(tmp_path / "grid.csv"), cwd=REPO)
    first = int(done.stdout.split("-")[0])
    jobs = status(home)
    assert [jobs[first]["overrides"], jobs[first + 1]["overrides"]] == [
        ["--config.training.learning_rate=0.01", "--config.training.batch_size=32"],
        ["--config.training.learning_rate=0.1", "--config.training.batch_size=128"]]


def _team_home(team: Team) -> Path:
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    with open(home / "machines.json", "w") as f:  # as an editor would: same file, owner and mode
        json.dump({"machines": {"local": {"kind": "local", "resources": {"slot": 2}}},
                   "config_aliases": {"depth": "config.model.depth"}}, f)
    for account in (alice, bob):
        team.run(alice, "--home", str(home), "user", "add", account, umask="0077")
    return home


def _overrides(team: Team, home: Path, ids: list[int]) -> list[list[str]]:
    team.run(team.accounts[0], "--home", str(home), "manage", umask="0077")  # the runner takes bob's submits in
    doc = json.loads(team.run(team.accounts[0], "--home", str(home), "status", "--all-users", "--json").stdout)
    by_id = {j["id"]: j["overrides"] for j in doc["jobs"]}
    return [by_id[i] for i in ids]


def _ids(text: str) -> list[int]:
    first, _, last = text.strip().partition("-")
    return list(range(int(first), int(last or first) + 1))


def test_team_and_personal_aliases_apply_in_sweeps_and_sweep_files(team: Team) -> None:
    alice, bob = team.accounts
    home = _team_home(team)
    team.run(alice, "--home", str(home), "alias", "add", "dp", "config.model.drop_path", umask="0077")
    team.run(alice, "--home", str(home), "alias", "add", "lr", "mine.lr", umask="0077")  # hers over the built-in
    srcs = {a: team.private_folder(a, "src") for a in (alice, bob)}

    def submit(account: str, *extra: str) -> list[int]:
        return _ids(team.run(account, "--home", str(home), "submit", "--dir", str(srcs[account]), "--cmd", "true",
                             *extra, umask="0077").stdout)

    swept = submit(alice, "--sweep", "dp=0.1,0.2", "--sweep", "depth=2", "--sweep", "lr=0.3")
    assert _overrides(team, home, swept) == [
        ["--config.model.drop_path=0.1", "--config.model.depth=2", "--mine.lr=0.3"],
        ["--config.model.drop_path=0.2", "--config.model.depth=2", "--mine.lr=0.3"]]
    grid = team.base / "grid.jsonl"
    grid.write_text('{"dp": 0.1, "depth": 4, "lr": 0.01}\n')
    grid.chmod(0o644)
    assert _overrides(team, home, submit(alice, "--sweep-file", str(grid))) == [
        ["--config.model.drop_path=0.1", "--config.model.depth=4", "--mine.lr=0.01"]]
    # bob has no aliases of his own: the team's and the built-in ones, and dp passes as it is
    assert _overrides(team, home, submit(bob, "--sweep-file", str(grid))) == [
        ["--dp=0.1", "--config.model.depth=4", "--config.training.learning_rate=0.01"]]
    assert _overrides(team, home, submit(bob, "--sweep", "lr=0.1,0.2")) == [
        ["--config.training.learning_rate=0.1"], ["--config.training.learning_rate=0.2"]]
    # and a plain override of alice's goes the same way as her sweep's
    assert _overrides(team, home, submit(alice, "dp=0.3", "depth=8", "lr=1")) == [
        ["--config.model.drop_path=0.3", "--config.model.depth=8", "--mine.lr=1"]]


# ---- old habits and typos ----------------------------------------------------------------------------

COMMANDS = ("submit", "run", "status", "watch", "user", "dir", "clean", "rules", "kill", "tail")


@pytest.mark.fast
@pytest.mark.parametrize(("typed", "meant"), [
    ("monitor", "jobtpu watch"), ("add-user", "jobtpu user add"), ("set-cur", "jobtpu dir set"),
    ("clear", "jobtpu clean"), ("check-rules", "jobtpu rules"),  # the old tool's verbs
    ("stauts", "jobtpu status"), ("sumbit", "jobtpu submit"), ("kil", "jobtpu kill"), ("rule", "jobtpu rules"),
    ("xyzzy", None), ("", None),
])
def test_command_for_a_mistyped_or_old_verb(typed: str, meant: str | None) -> None:
    assert command_for(typed, COMMANDS) == meant


@pytest.mark.fast
@pytest.mark.parametrize(("typed", "meant"), [
    ("--stauts", "--status"), ("--stauts=running", "--status"), ("--reqq", "--req"), ("--machnie", "--machine"),
    ("--wd", None), ("--zzz", None), ("--ab", None),  # the shared dashes make no match by themselves
])
def test_option_for_a_mistyped_option(typed: str, meant: str | None) -> None:
    options = ["--status", "--req", "--machine", "--dir", "--sweep", "--name", "-n", "--help", "-h"]
    assert option_for(typed, options) == meant


@pytest.mark.fast
@pytest.mark.parametrize(("word", "says"), [
    ("tag=best", "tag=best is not a config override here: use --tag best"),
    ("tag=", "tag= is not a config override here: use --tag TAG"),
    ("rule=resume", "rule=resume is not a config override here: use --rule resume"),
    ("dir=2", "dir=2 is not a config override here: use --dir 2"),
    ("ssn=lr sweep", "ssn=lr sweep is not a config override here: the machine's note in the team sheet is "
                     "--sheet-note 'lr sweep'"),
    ("w=3", "w=3 is not a config override here: jobs have ids, not windows (`jobtpu status` lists them; kill, "
            "tail and the rest take the id)"),
    ("lr=", "lr= has no value: give it one, or put it after `--` (-- lr=) to pass it empty"),
    ("--lr=", "--lr= has no value: give it one, or put it after `--` (-- --lr=) to pass it empty"),
    ("lr=0.1", None), ("tags=x", None), ("config.tag=x", None), ("width=3", None), ("note", None),
])
def test_override_mistake(word: str, says: str | None) -> None:
    assert override_mistake(word) == says


@pytest.mark.fast
def test_an_alias_in_force_makes_an_old_word_a_config_key() -> None:
    assert override_mistake("w=3", {"w", "lr"}) is None  # the team's w is config.model.width
    assert override_mistake("dir=/data", {"dir"}) is None
    assert override_mistake("w=", {"w"}) == "w= has no value: give it one, or put it after `--` (-- w=) to pass it empty"
    assert override_mistake("tag=x", {"w"}) == "tag=x is not a config override here: use --tag x"


def _usage_error(done: subprocess.CompletedProcess[str], line: str, hint: str | None) -> None:
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [f"jobtpu: error: {line}", *([f"hint: {hint}"] if hint else [])], done.stderr


def test_a_mistyped_or_old_command_says_what_to_type(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    for typed, meant in (("monitor", "watch"), ("add-user", "user add"), ("set-cur", "dir set"),
                         ("clear", "clean"), ("check-rules", "rules"), ("stauts", "status")):
        _usage_error(jobtpu(home, typed, check=False),
                     f"{typed!r} is not a jobtpu command: did you mean `jobtpu {meant}`?", "see `jobtpu --help`")
    done = jobtpu(home, "user", "ad", "bob", check=False)
    _usage_error(done, "argument op: invalid choice: 'ad': did you mean 'add'? (choose from 'add', 'ls', 'rm')",
                 "see `jobtpu user --help`")


def test_a_mistyped_option_is_named_with_its_commands_help(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    _usage_error(jobtpu(home, "status", "--stauts", "running", check=False),
                 "unrecognized option --stauts: did you mean --status?", "see `jobtpu status --help`")
    _usage_error(jobtpu(home, "submit", "--cmd", "true", "--reqq", "v3", check=False),
                 "unrecognized option --reqq: did you mean --req?", "see `jobtpu submit --help`")
    _usage_error(jobtpu(home, "submit", "--cmd", "true", "--bogus", check=False),
                 "unrecognized option --bogus", "see `jobtpu submit --help`")
    _usage_error(jobtpu(home, "submit", "--cmd", "true", "--dir", ".", "x", "y", "-q", check=False),
                 "unrecognized arguments: -q", "see `jobtpu submit --help`")
    assert not (home / "state.json").exists()


def test_the_old_tools_words_and_empty_values_change_nothing_and_pass_after_dashes(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    first = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "true").stdout)
    before = (home / "state.json").read_bytes()
    archives = sorted((home / "archives").iterdir())
    for word in ("tag=best", "rule=resume", "dir=2", "ssn=lr sweep", "w=3", "lr="):
        for command in ("submit", "run"):
            done = jobtpu(home, command, "--dir", str(src), "--cmd", "true", "lr=0.1", word, check=False)
            _usage_error(done, override_mistake(word) or "", None)
    assert (home / "state.json").read_bytes() == before and sorted((home / "archives").iterdir()) == archives
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "lr=0.1", "--", "tag=best", "lr=", "--w=3")
    assert status(home)[int(done.stdout)]["overrides"] == [
        "--config.training.learning_rate=0.1", "--tag=best", "--config.training.learning_rate=", "--w=3"]
    assert first in status(home)
    # a team alias named like one of those words makes it a config key like any other
    doc = json.loads((home / "machines.json").read_text())
    (home / "machines.json").write_text(json.dumps({**doc, "config_aliases": {"w": "config.model.width"}}))
    done = jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "w=3")
    assert status(home)[int(done.stdout)]["overrides"] == ["--config.model.width=3"]


def test_resume_and_rerun_take_no_overrides_and_say_so(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    job = int(jobtpu(home, "submit", "--dir", str(src), "--cmd", "true", "lr=0.1").stdout)
    before = (home / "state.json").read_bytes()
    for command in ("resume", "rerun"):
        _usage_error(jobtpu(home, command, str(job), "lr=0.5", check=False),
                     "argument ID: 'lr=0.5' is not a job id: a job keeps the overrides it was submitted with; "
                     "submit it again to change them", f"see `jobtpu {command} --help`")
    assert (home / "state.json").read_bytes() == before
