"""Every example in README.md and docs/guide.md, as printed: a user copies them first.

Each `jobtpu …` command line in a bash block (or a plain block of commands) must be one the parser takes as written (machines,
TPUs and sheets the page only imagines are not needed for that). Each machines.json shown whole is
one jobtpu loads. The examples that run on the built-in local machine are run as printed, through
bash, with `jobtpu` on PATH, in a copy of this clone: the README's first command, and the guide's
first job the usual way (docs/guide.md §1)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobtpu.cli import build_parser
from jobtpu.home.layout import Home
from jobtpu.home.machines import load_fleet

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", REPO / "docs" / "guide.md"]
SEPARATORS = {"&&", "||", ";", "|", "(", ")", "&", "$(", ">", ">>", "<"}


def fenced_blocks(text: str) -> Iterator[tuple[str, int, str]]:
    """(language, first line number, text) of each fenced block of a Markdown text."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^```(\w*)\s*$", lines[i])
        if opening:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            yield opening.group(1), i + 2, "\n".join(lines[i + 1:end])
            i = end
        i += 1


def shell_lines(block: str) -> list[str]:
    """The block's command lines, with backslash continuations joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def jobtpu_commands(line: str) -> list[list[str]]:
    """The words of each jobtpu command in a shell line: `a && jobtpu x`, `$(jobtpu y)`, cron lines."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        # `train=$(jobtpu …)` splits as `train=$`, `(`: the assignment ends a command like `(` does
        if token in SEPARATORS or set(token) <= set("();&|<>") or token.endswith("$"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [words[words.index("jobtpu"):] for words in commands if "jobtpu" in words]


def all_examples() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for language, at, block in fenced_blocks(page.read_text()):
            if language not in ("bash", "sh", ""):
                continue
            for line in shell_lines(block):
                if not language and not line.startswith("jobtpu "):  # a plain block: output, or commands
                    continue
                for words in jobtpu_commands(line):
                    found.append((f"{page.relative_to(REPO)}:{at}: {line.strip()}", words))
    return found


EXAMPLES = all_examples()


def test_the_pages_show_examples_and_the_line_splitter_finds_them() -> None:
    assert len(EXAMPLES) >= 60
    assert jobtpu_commands('train=$(jobtpu submit --dir . --cmd "python train.py" --retries 2)') == [
        ["jobtpu", "submit", "--dir", ".", "--cmd", "python train.py", "--retries", "2"]]
    assert jobtpu_commands("cd ~/src/mae && jobtpu dir set 1          # working directory 1") == [
        ["jobtpu", "dir", "set", "1"]]
    assert jobtpu_commands("* * * * * jobtpu --home /home/me/exp manage") == [
        ["jobtpu", "--home", "/home/me/exp", "manage"]]
    assert jobtpu_commands("jobtpu user add ann && jobtpu user add bob # optional") == [
        ["jobtpu", "user", "add", "ann"], ["jobtpu", "user", "add", "bob"]]


@pytest.mark.fast
@pytest.mark.parametrize("where,words", EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_every_jobtpu_command_in_the_readme_and_guide_parses_as_printed(
        where: str, words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        build_parser().parse_args(words[1:])
    except SystemExit as e:
        pytest.fail(f"{where}\n  is refused by the parser (exit {e.code}): {capsys.readouterr().err}")


def _whole_machines_files() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for language, at, block in fenced_blocks(page.read_text()):
            if language == "json" and block.lstrip().startswith("{") and '"machines"' in block:
                found.append((f"{page.relative_to(REPO)}:{at}", block))
    return found


@pytest.mark.fast
def test_every_whole_machines_json_in_the_guide_loads(tmp_path: Path) -> None:
    shown = _whole_machines_files()
    assert len(shown) >= 3
    for where, text in shown:
        home = tmp_path / str(len(list(tmp_path.iterdir())))
        home.mkdir()
        (home / "machines.json").write_text(text)
        fleet = load_fleet(Home(home))
        assert set(fleet.machines) == set(json.loads(text)["machines"]), where


# ---- run as printed --------------------------------------------------------------------------------

def _clone_as_home(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of what a fresh clone holds for the examples, and an environment where `jobtpu` is this
    checkout's (what `pip install -e .` gives the user)."""
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(REPO / "machines.json", clone / "machines.json")
    shutil.copytree(REPO / "examples", clone / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "jobtpu"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m jobtpu.cli "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTPU_")}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", PYTHONPATH=str(REPO), HOME=str(tmp_path))
    return clone, env


def _block_after(page: Path, marker: str) -> list[str]:
    """The command lines of the first bash block after the line holding `marker`."""
    text = page.read_text()
    rest = text[text.index(marker):]
    block = next(b for language, _, b in fenced_blocks(rest) if language == "bash")
    return shell_lines(block)


def _run(line: str, clone: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True, text=True, timeout=120)


def test_the_readme_first_command_and_the_guides_first_job_run_as_printed(tmp_path: Path) -> None:
    clone, env = _clone_as_home(tmp_path)
    readme = (REPO / "README.md").read_text().splitlines()
    fence = readme.index("```bash")
    install, run = readme[fence + 1], readme[fence + 2]
    assert install.startswith("pip install -e .") and " && " in install  # one line: install, then run
    printed = install.split(" && ", 1)[1]

    done = _run(printed, clone, env)
    assert done.returncode == 0, done.stderr
    assert "job 1 attempt 0 worker 0/1 on local (resume=0)" in done.stdout
    assert 'done: {"w": ' in done.stdout and "job 1: finished" in done.stderr
    assert run == "bash .ci/run"

    # The guide's same job "in the usual, non-blocking way", line by line; the user waits for the
    # job to end (passes, as §5 says) before the fetch.
    lines = _block_after(REPO / "docs" / "guide.md", "The same job in the usual, non-blocking way")
    assert [shlex.split(line, comments=True)[:2] for line in lines] == [
        ["jobtpu", "submit"], ["jobtpu", "manage"], ["jobtpu", "status"], ["jobtpu", "tail"], ["jobtpu", "fetch"]]
    submitted = _run(lines[0], clone, env)
    assert submitted.returncode == 0 and submitted.stdout.strip() == "2", submitted.stderr
    for line in lines[1:3]:
        shown = _run(line, clone, env)
        assert shown.returncode == 0, shown.stderr
    assert re.search(r"^\s*2\s.*running", shown.stdout, re.M), shown.stdout
    for _ in range(200):
        state = json.loads((clone / "state.json").read_text())
        if next(j for j in state["jobs"] if j["id"] == 2)["status"] == "finished":
            break
        assert _run("jobtpu manage", clone, env).returncode == 0
    tail = _run(lines[3], clone, env)
    assert tail.returncode == 0 and "done: " in tail.stdout, tail.stderr
    fetched = _run(lines[4], clone, env)
    assert fetched.returncode == 0, fetched.stderr
    assert json.loads((clone / "results" / "2" / "result.json").read_text())["steps"] == 100


def test_the_readmes_one_minute_local_run_runs_as_printed(tmp_path: Path) -> None:
    clone, env = _clone_as_home(tmp_path)
    readme = REPO / "README.md"
    first = readme.read_text().splitlines()[readme.read_text().splitlines().index("```bash") + 1]
    assert _run(first.split(" && ", 1)[1], clone, env).returncode == 0  # job 1, as the README says
    lines = _block_after(readme, "## A one-minute local run")
    assert [shlex.split(line, comments=True)[:2] for line in lines] == [
        ["jobtpu", "submit"], ["jobtpu", "manage"], ["jobtpu", "status"], ["jobtpu", "tail"], ["jobtpu", "manage"]]
    said = [_run(line, clone, env) for line in lines]
    assert all(done.returncode == 0 for done in said), [done.stderr for done in said]
    assert said[0].stdout.strip() == "2"
    assert re.search(r"^\s*2\s.*running", said[2].stdout, re.M), said[2].stdout
    assert 'done: {"w": ' in said[3].stdout  # tail -f followed the log to its end
    assert re.search(r"^\s*2\s.*finished", said[4].stdout, re.M), said[4].stdout
    fetched = _run("jobtpu fetch 2 result.json", clone, env)  # the sentence under the block
    assert fetched.returncode == 0 and (clone / "results" / "2" / "result.json").is_file(), fetched.stderr
