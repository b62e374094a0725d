"""Tab completion (docs/reference/python.md §11.4): what is offered after each word, by the command
line's own parser and the home's words (a table over the pure walk), after a `=` and a comma, the
descriptions beside commands and options, the home's words in their order, and the script each shell
loads, in a real bash and a real zsh (in tmux)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobtpu.cli import build_parser
from jobtpu.commands.completion import complete, lines, offer
from jobtpu.commands.home_words import counts_up_to, home_values
from jobtpu.commands.select import STATUS_NAMES
from jobtpu.commands.submit import RULE_NAMES
from jobtpu.home.settings import CONFIG_KEYS
from tests.helpers import cli, make_home, manage_until, run, wait_for, write_tree

REPO = Path(__file__).resolve().parent.parent
WORDS = {"ids": ["4", "3", "1", "2"], "sweeps": ["3"], "machines": ["local", "a100", "box"],
         "req": ["gpu=", "slot=", "preemptible", "on-demand"], "config": list(CONFIG_KEYS),
         "aliases": ["bs=", "lr="], "alias-names": ["bs", "lr"], "accelerators": ["v4-8", "v4-32", "v5e-16"],
         "counts": ["gpu=1", "gpu=2", "gpu=4", "slot=1", "slot=2"]}
asked: list[tuple[str, str]] = []


def _words(kind: str, home: str) -> list[str]:
    asked.append((kind, home))
    return WORDS[kind]


@pytest.mark.fast
@pytest.mark.parametrize(("typed", "offered"), [
    (["ki"], ["kill"]),
    (["st"], ["status"]),
    (["kill", ""], WORDS["ids"]),
    (["kill", "4", ""], WORDS["ids"]),  # kill takes many
    (["tail", ""], WORDS["ids"]),
    (["tail", "4", ""], []),  # one job only
    (["submit", "--machine", ""], WORDS["machines"]),
    (["submit", "--machine", "b"], ["box"]),
    (["submit", "--machine=b"], ["--machine=box"]),
    (["submit", "--machine", "=", "b"], ["box"]),  # as bash splits `--machine=b`
    (["submit", "--req", ""], WORDS["req"]),
    (["run", "--req", "g"], ["gpu="]),
    (["submit", "--rule", ""], list(RULE_NAMES)),
    (["submit", "--after", ""], WORDS["ids"]),
    (["submit", "--sweep", "l"], ["lr="]),
    (["submit", "--cmd", "x", "b"], ["bs="]),
    (["status", "--status", "r"], [s for s in STATUS_NAMES if s.startswith("r")]),
    (["status", "--sw"], ["--sweep"]),
    (["kill", "--sweep", ""], WORDS["sweeps"]),
    (["resume", "--machine", "l"], ["local"]),
    (["config", ""], ["get", "set", "reset"]),
    (["config", "set", ""], list(CONFIG_KEYS)),
    (["alias", "rm", ""], WORDS["alias-names"]),
    (["dir", "set", ""], []),
    (["completion", ""], ["bash", "zsh", "fish"]),
    (["--home", "/h", "kill", ""], WORDS["ids"]),
    (["nosuchcommand", ""], []),
    # after a `=` and within a list (docs/reference/requests-and-rules.md §6.1)
    (["submit", "--req", "gpu="], ["gpu=1", "gpu=2", "gpu=4"]),
    (["submit", "--req", "slot=2"], ["slot=2"]),
    (["submit", "--req", "gpu", "=", ""], ["1", "2", "4"]),  # as bash splits `gpu=`: it completes what follows
    (["submit", "--req", "gpu", "=", "4"], ["4"]),
    (["submit", "--req=gpu="], ["--req=gpu=1", "--req=gpu=2", "--req=gpu=4"]),
    (["submit", "--req", "v4-8,"], ["v4-8,v4-32", "v4-8,v5e-16"]),  # the alternatives not given yet
    (["submit", "--req", "v4-8,v5"], ["v4-8,v5e-16"]),
    (["submit", "--after", "4,"], ["4,3", "4,1", "4,2"]),
    (["submit", "--after", "4,1,"], ["4,1,3", "4,1,2"]),
    (["run", "--after-any", "3,2"], ["3,2"]),
    (["submit", "--after", "=", "4,"], ["4,3", "4,1", "4,2"]),  # bash's `--after=4,`
    (["submit", "--cmd", "x", "lr="], []),  # an override's value: the shell's own (a path)
    (["submit", "--cmd", "x", "lr", "=", ""], []),
])
def test_what_tab_offers(typed: list[str], offered: list[str]) -> None:
    assert complete(typed, build_parser(), _words) == offered


@pytest.mark.fast
@pytest.mark.parametrize(("typed", "files"), [
    (["submit", "--dir", ""], True),  # a folder
    (["submit", "--cmd", "x", "lr="], True),  # an override's value may be a path
    (["submit", "--cmd", "x", "l"], True),
    (["dir", "set", ""], True),
    (["submit", "--req", "gpu="], False),  # words jobtpu knows, or nothing: never a file name
    (["submit", "--req", "nosuch"], False),
    (["submit", "--after", "4,"], False),
    (["kill", "99"], False),
    (["submit", "--rule", "x"], False),
    (["submit", "--machine=zz"], False),
    (["zz"], False),
    (["kill", "--zz"], False),
])
def test_file_names_are_offered_only_where_they_may_fit(typed: list[str], files: bool) -> None:
    assert offer(typed, build_parser(), _words).files is files


@pytest.mark.fast
def test_commands_and_options_come_with_their_descriptions() -> None:
    from jobtpu.commands.table import ROWS

    commands = offer(["re"], build_parser(), _words)
    assert commands.words == ["resume", "rerun", "release", "requests", "report"]
    assert commands.described["release"] == ROWS["release"].summary  # the command table's summary
    assert commands.described["requests"].endswith("…") and len(commands.described["requests"]) <= 60
    options = offer(["submit", "--ma"], build_parser(), _words)
    assert options.words == ["--machine", "--max-preemptions", "--max-recoveries", "--max-running"]
    assert options.described["--max-recoveries"].startswith("recoveries the rule may make from infrastructure")
    assert options.described["--max-recoveries"].endswith("…") and len(options.described["--max-recoveries"]) <= 60
    assert offer(["kill", ""], build_parser(), _words).described == {}  # ids: no descriptions


@pytest.mark.fast
def test_what_each_shell_reads_of_an_offer() -> None:
    described = offer(["sheet", "s"], build_parser(), _words)  # a command's own subcommands, with their help
    assert described.words == ["sync", "show"]
    said = described.described
    assert said["sync"] == "write the machines' rows now (a pass does it on its own)"
    assert lines(described, "bash") == ["sync", "show"]
    assert lines(described, "fish") == [f"sync\t{said['sync']}", f"show\t{said['show']}"]
    assert lines(described, "zsh") == [f"sync\tsync  -- {said['sync']}", f"show\tshow  -- {said['show']}"]
    options = lines(offer(["tail", "--f"], build_parser(), _words), "zsh")
    assert options == ["--follow\t--follow  -- keep printing as the log grows; exit with the attempt's…"], options
    plain = offer(["kill", ""], build_parser(), _words)
    assert lines(plain, "zsh") == lines(plain, "fish") == WORDS["ids"]


@pytest.mark.fast
@pytest.mark.parametrize(("most", "counts"), [
    (1, [1]), (2, [1, 2]), (8, list(range(1, 9))), (16, list(range(1, 17))),
    (64, [1, 2, 4, 8, 16, 32, 64]), (100, [1, 2, 4, 8, 16, 32, 64, 100]),
])
def test_the_counts_offered_of_a_resource(most: int, counts: list[int]) -> None:
    assert counts_up_to(most) == counts


@pytest.mark.fast
def test_the_home_words_come_from_the_home_typed_before_the_command() -> None:
    asked.clear()
    complete(["--home", "/h", "submit", "--machine", ""], build_parser(), _words)
    complete(["--home=/g", "kill", ""], build_parser(), _words)
    assert asked == [("machines", "/h"), ("ids", "/g")]


def _home(tmp_path: Path) -> Path:
    """Your finished job 1, ann's queued job 2, your held sweep 3-4; a box with an alias; a team alias."""
    home = make_home(tmp_path, {"local": {"kind": "local", "resources": {"slot": 2}},
                                "a100": {"kind": "ssh", "hosts": ["10.0.0.5"], "resources": {"gpu": 8},
                                         "aliases": ["box"]}}, config_aliases={"seed": "config.seed"})
    src = write_tree(tmp_path / "src", {"a.py": ""})
    run(home, "submit", "--dir", str(src), "--cmd", "true", "--machine", "local", in_process=True)
    manage_until(home, [1], {"finished"})
    assert cli(home, "submit", "--dir", str(src), "--cmd", "true", "--hold", user="ann")[0] == 0
    run(home, "submit", "--dir", str(src), "--cmd", "true", "--hold", "--sweep", "lr=1,2", in_process=True)
    return home


def test_the_home_words_in_their_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _home(tmp_path)
    monkeypatch.setenv("JOBTPU_USER", "tester")
    assert home_values("ids", str(home)) == ["4", "3", "1", "2"]  # yours waiting or running first, newest first
    assert home_values("sweeps", str(home)) == ["3"]
    assert home_values("machines", str(home)) == ["local", "a100", "box"]
    assert home_values("req", str(home)) == ["gpu=", "slot=", "preemptible", "on-demand"]
    assert "seed=" in home_values("aliases", str(home)) and "lr=" in home_values("aliases", str(home))
    assert home_values("config", str(home)) == list(CONFIG_KEYS)
    assert home_values("counts", str(home)) == [*(f"gpu={n}" for n in range(1, 9)), "slot=1", "slot=2"]
    assert home_values("accelerators", str(home)) == []  # no TPU in this fleet
    (home / "state.json").write_text("{")  # a broken home: nothing offered, nothing said
    assert home_values("ids", str(home)) == []


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "JOBTPU_HOME": str(home), "JOBTPU_USER": "tester",
            "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}


def test_a_real_bash_completes_with_the_script_jobtpu_prints(tmp_path: Path) -> None:
    home = _home(tmp_path)
    drive = f"""
eval "$({shlex.join([sys.executable, '-m', 'jobtpu.cli', 'completion', 'bash'])})"
spec=$(complete -p jobtpu)
echo "$spec"
fn=${{spec##*-F }}; fn=${{fn%% *}}
offer() {{
    COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${{#COMP_LINE}}
    COMPREPLY=()
    "$fn" jobtpu "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD - 1]}}"
    echo "${{COMPREPLY[*]}}"
}}
offer jobtpu ki
offer jobtpu kill ""
offer jobtpu submit --machine ""
offer jobtpu submit --req ""
offer jobtpu submit --machine = b
"""
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", drive], env=_env(home), capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines() == [
        "complete -o default -o nosort -F _jobtpu_complete jobtpu",
        "kill", "4 3 1 2", "local a100 box", "gpu= slot= preemptible on-demand", "box"]


def test_the_scripts_are_shellcheck_clean_and_each_shell_parses_its_own(tmp_path: Path) -> None:
    script = run(tmp_path, "completion", "bash", in_process=True)[0]
    (tmp_path / "c.bash").write_text(script)
    checked = subprocess.run(["shellcheck", "-s", "bash", str(tmp_path / "c.bash")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout
    for shell in ("zsh", "fish"):
        text = run(tmp_path, "completion", shell, in_process=True)[0]
        assert f"{sys.executable} -P -m jobtpu.tab {shell} " in text
    parsed = subprocess.run(["zsh", "-n"], input=run(tmp_path, "completion", "zsh", in_process=True)[0],
                            capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    code, out, err = cli(tmp_path, "completion", "tcsh")
    assert code == 2 and "invalid choice: 'tcsh'" in err and out == ""


class _Tmux:
    def __init__(self, command: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        self.socket = f"jobtpu-completion-{os.getpid()}-{id(self)}"
        line = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *command])
        where = ["-c", str(cwd)] if cwd is not None else []
        self._tmux("new-session", "-d", "-s", "z", "-x", "120", "-y", "30", *where, line)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "z")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "z", *keys)

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._tmux("kill-server")


@contextlib.contextmanager
def _zsh(home: Path) -> Iterator[_Tmux]:
    env = {k: _env(home)[k] for k in ("JOBTPU_HOME", "JOBTPU_USER", "PYTHONPATH")}
    term = _Tmux(["zsh", "-f"], {**env, "TERM": "xterm-256color", "PS1": "zsh> "})
    try:
        load = shlex.join([sys.executable, "-m", "jobtpu.cli", "completion", "zsh"])
        term.keys(f'autoload -U compinit && compinit -u && eval "$({load})" && echo LOADED', "Enter")
        wait_for(lambda: "\nLOADED" in term.screen(), what="the completion script loaded")
        yield term
    finally:
        term.close()


def _lines(term: _Tmux) -> list[str]:
    return [line.rstrip() for line in term.screen().splitlines()]  # tmux leaves out trailing blanks


def test_a_real_zsh_completes_with_the_script_jobtpu_prints(tmp_path: Path) -> None:
    home = _home(tmp_path)
    with _zsh(home) as term:
        term.keys("clear", "Enter")
        term.keys("jobtpu ki", "Tab")
        wait_for(lambda: "zsh> jobtpu kill" in _lines(term), what="`jobtpu ki<Tab>` to become `jobtpu kill`")
        term.keys("Tab")
        wait_for(lambda: any(line.split() == ["4", "3", "1", "2"] for line in term.screen().splitlines()),
                 what="the ids offered, yours waiting first")
        _fresh_line(term, "zsh>")
        term.keys("jobtpu submit --machine ", "Tab")
        wait_for(lambda: any(line.split() == ["local", "a100", "box"] for line in term.screen().splitlines()),
                 what="the machines and aliases offered")
        _fresh_line(term, "zsh>")
        term.keys("jobtpu submit --req g", "Tab")
        wait_for(lambda: "zsh> jobtpu submit --req gpu=" in _lines(term), what="--req g<Tab> to become gpu=")


def test_the_state_is_read_once_per_completion(tmp_path: Path) -> None:
    home = _home(tmp_path)
    traced = subprocess.run(
        ["strace", "-f", "-e", "trace=openat", sys.executable, "-P", "-m", "jobtpu.tab", "bash",
         "kill", ""], env=_env(home), capture_output=True, text=True, timeout=60)
    assert traced.stdout.split() == ["4", "3", "1", "2"], traced.stdout
    opened = [line for line in traced.stderr.splitlines() if "state.json" in line and "ENOENT" not in line]
    assert len(opened) == 1, opened
    assert json.loads((home / "state.json").read_text())["next_id"] == 5  # and nothing written


def _offered(term: _Tmux, words: list[str]) -> bool:
    return any(line.split() == words for line in term.screen().splitlines())


def _fresh_line(term: _Tmux, prompt: str = "bash>") -> None:
    """The line given up (readline's own discard: a Ctrl-C that lands while a completer still runs
    stops the completer, not the line) and the screen cleared; the next keys are typed only once the
    prompt is back alone, never as typeahead while `clear` runs."""
    term.keys("C-e", "C-u", "clear", "Enter")
    try:
        wait_for(lambda: [line for line in _lines(term) if line] == [prompt], what="a clear screen with its prompt")
    except AssertionError:
        raise AssertionError(f"no clear screen with its prompt; the screen: {_lines(term)!r}") from None


def test_a_real_bash_completes_values_after_an_equals_sign_and_a_comma(tmp_path: Path) -> None:
    """In a folder of files (`home/`, `src/`), as a person presses Tab: a value jobtpu knows is offered,
    and where none fits nothing is, never a file name."""
    home = _home(tmp_path)
    env = {k: _env(home)[k] for k in ("JOBTPU_HOME", "JOBTPU_USER", "PYTHONPATH")}
    term = _Tmux(["bash", "--norc", "--noprofile"], {**env, "TERM": "xterm-256color", "PS1": "bash> "}, cwd=tmp_path)
    try:
        load = shlex.join([sys.executable, "-m", "jobtpu.cli", "completion", "bash"])
        term.keys(f'eval "$({load})" && echo LOADED', "Enter")
        wait_for(lambda: "\nLOADED" in term.screen(), what="the completion script loaded")
        term.keys("clear", "Enter")
        term.keys("jobtpu submit --req gpu=", "Tab", "Tab")
        wait_for(lambda: _offered(term, [str(n) for n in range(1, 9)]), what="gpu= to offer the counts 1 to 8")
        _fresh_line(term)
        term.keys("jobtpu submit --after 4,", "Tab", "Tab")
        wait_for(lambda: _offered(term, ["4,3", "4,1", "4,2"]), what="4, to offer the other job ids")
        _fresh_line(term)
        term.keys("jobtpu submit --req g", "Tab", "8")  # no space after `gpu=`: its count comes next
        wait_for(lambda: "bash> jobtpu submit --req gpu=8" in _lines(term), what="--req g<Tab>8 to be gpu=8")
        _fresh_line(term)
        term.keys("jobtpu kill h", "Tab", "Z")  # no job id starts with h: nothing, not the folder home/
        wait_for(lambda: "bash> jobtpu kill hZ" in _lines(term), what="kill h<Tab> to offer nothing")
        _fresh_line(term)
        term.keys("jobtpu submit --dir h", "Tab", "Z")  # a folder: the file names, as before
        try:
            wait_for(lambda: "bash> jobtpu submit --dir home/Z" in _lines(term), what="--dir h<Tab> to be home/")
        except AssertionError:  # seen once under load in CI: say what the terminal and the folder held
            raise AssertionError(f"--dir h<Tab> did not become home/; the screen:\n{term.screen()}\nthe folder: "
                                 f"{sorted(p.name for p in tmp_path.iterdir())}") from None
    finally:
        term.close()


def test_a_real_zsh_shows_descriptions_and_completes_values(tmp_path: Path) -> None:
    from jobtpu.commands.table import ROWS

    home = _home(tmp_path)
    with _zsh(home) as term:
        term.keys("clear", "Enter")
        term.keys("jobtpu rel", "Tab")
        wait_for(lambda: "zsh> jobtpu release" in _lines(term), what="rel<Tab> to become release")
        _fresh_line(term, "zsh>")
        term.keys("jobtpu re", "Tab")
        summary = ROWS["release"].summary
        wait_for(lambda: any(line.split() == ["release", "--", *summary.split()] for line in _lines(term)),
                 what="the commands listed with their summaries")
        _fresh_line(term, "zsh>")
        term.keys("jobtpu tail --", "Tab")
        wait_for(lambda: any(line.split()[:3] == ["--follow", "--", "keep"] for line in _lines(term) if line.split()),
                 what="the options listed with their help")
        _fresh_line(term, "zsh>")
        term.keys("jobtpu submit --req gpu=", "Tab")
        wait_for(lambda: _offered(term, [f"gpu={n}" for n in range(1, 9)]), what="gpu= to offer the counts")
        _fresh_line(term, "zsh>")
        term.keys("jobtpu submit --after 4,", "Tab")
        wait_for(lambda: _offered(term, ["4,3", "4,1", "4,2"]), what="4, to offer the other job ids")
