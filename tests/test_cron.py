"""Installing the passes (docs/reference/commands.md §2.3.1): `jobtpu cron install` writes a crontab
line that runs THIS jobtpu by its absolute path, so a jobtpu installed in a virtualenv runs from
cron's bare environment; show and remove find it again; doctor and status name the command when
the passes stopped.

`crontab` itself is a fake on PATH that keeps the table in a file (cron is not installed where the
tests run, and a real crontab would be the machine's): the line it holds is then run exactly as
cron runs it, `env -i PATH=/usr/bin:/bin /bin/sh -c LINE`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobtpu.commands import cron
from tests.helpers import jobtpu, make_home, status, submit, wait_for, write_tree

ROOT = Path(__file__).resolve().parent.parent

FAKE_CRONTAB = """#!/bin/sh
# crontab -l / crontab -: the table in $FAKE_CRONTAB, as crontab(1) answers
case "$1" in
  -l) if [ -f "$FAKE_CRONTAB" ]; then exec cat "$FAKE_CRONTAB"; fi
      echo "no crontab for $(id -un)" >&2; exit 1 ;;
  -) exec cat > "$FAKE_CRONTAB" ;;
  *) echo "usage: crontab [-l | -]" >&2; exit 1 ;;
esac
"""


def fake_tool(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)
    return folder


def with_crontab(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment of a command that finds the fake crontab, and the file it keeps the table in."""
    table = tmp_path / "crontab"
    tools = fake_tool(tmp_path / "bin", "crontab", FAKE_CRONTAB)
    return {"PATH": f"{tools}:{os.environ['PATH']}", "FAKE_CRONTAB": str(table)}, table


def command_of(line: str) -> str:
    """A crontab line's command: what cron hands to /bin/sh -c (after the five time fields)."""
    return line.split(None, 5)[5]


# ---- the line, as pure functions ---------------------------------------------------------------------

@pytest.mark.fast
@pytest.mark.parametrize(("every", "schedule"), [(1, "* * * * *"), (5, "*/5 * * * *"), (59, "*/59 * * * *")])
def test_the_line_runs_this_jobtpu_by_absolute_path_on_this_home(every: int, schedule: str) -> None:
    home = Path("/srv/team home")
    line = cron.cron_line(home, every)
    assert line == (f"{schedule} {sys.executable} -m jobtpu.cli --home '/srv/team home' manage --every {every * 60} "
                    ">> '/srv/team home/logs/passes.log' 2>&1 # jobtpu passes of /srv/team home")
    assert Path(sys.executable).is_absolute() and cron.is_home_line(line, home)
    assert not cron.is_home_line(line, Path("/srv/team"))


@pytest.mark.fast
def test_install_keeps_the_other_lines_replaces_its_own_and_remove_takes_only_its_own() -> None:
    a, b = Path("/h/a"), Path("/h/b")
    mine = "MAILTO=me\n0 3 * * * backup.sh\n"
    once = cron.with_line(mine, a, cron.cron_line(a, 1))
    assert once.splitlines() == ["MAILTO=me", "0 3 * * * backup.sh", cron.cron_line(a, 1)]
    assert cron.with_line(once, a, cron.cron_line(a, 1)) == once  # idempotent
    both = cron.with_line(cron.with_line(once, a, cron.cron_line(a, 5)), b, cron.cron_line(b, 1))
    assert both.splitlines() == ["MAILTO=me", "0 3 * * * backup.sh", cron.cron_line(a, 5), cron.cron_line(b, 1)]
    assert cron.without_line(both, a).splitlines() == ["MAILTO=me", "0 3 * * * backup.sh", cron.cron_line(b, 1)]
    assert cron.without_line(cron.with_line("", a, cron.cron_line(a, 1)), a) == ""
    assert cron.home_line(both, b) == cron.cron_line(b, 1) and cron.home_line(mine, a) is None
    # cron turns a bare % into a new line: a home named with one is escaped
    assert "/h/100\\%" in cron.cron_line(Path("/h/100%"), 1) and "%" not in cron.cron_line(a, 1)


# ---- through the CLI ---------------------------------------------------------------------------------

@pytest.mark.fast
def test_cron_install_show_remove_keep_the_users_other_lines(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    env, table = with_crontab(tmp_path)
    table.write_text("MAILTO=me\n0 3 * * * backup.sh\n")
    done = jobtpu(home, "cron", "install", env=env)
    line = cron.cron_line(home, 1)
    assert done.stdout == f"installed in your crontab: {line}\n"
    assert f"its output goes to {home}/logs/passes.log" in done.stderr and (home / "logs").is_dir()
    assert table.read_text() == f"MAILTO=me\n0 3 * * * backup.sh\n{line}\n"
    assert jobtpu(home, "cron", "install", env=env).stdout == f"already installed: {line}\n"
    jobtpu(home, "cron", "install", "--every", "5", env=env)
    assert table.read_text() == f"MAILTO=me\n0 3 * * * backup.sh\n{cron.cron_line(home, 5)}\n"
    assert jobtpu(home, "cron", "show", env=env).stdout == f"crontab: {cron.cron_line(home, 5)}\n"
    assert jobtpu(home, "cron", "remove", env=env).stdout == f"removed from your crontab: {cron.cron_line(home, 5)}\n"
    assert table.read_text() == "MAILTO=me\n0 3 * * * backup.sh\n"
    shown = jobtpu(home, "cron", "show", env=env)
    assert shown.stdout == "" and "no passes are installed" in shown.stderr and "jobtpu cron install" in shown.stderr


@pytest.mark.fast
def test_cron_mistakes_are_one_line_and_change_nothing(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    env, table = with_crontab(tmp_path)
    for words, code, said in ((["--every", "0"], 2, "give whole minutes from 1 to 59"),
                              (["--every", "90"], 2, "give whole minutes from 1 to 59"),
                              (["--every", "1.5"], 2, "give whole minutes from 1 to 59")):
        done = jobtpu(home, "cron", "install", *words, env=env, check=False)
        assert done.returncode == code and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = jobtpu(home, "cron", "show", "--every", "5", env=env, check=False)
    assert done.returncode == 2 and "options of `cron install`" in done.stderr
    nowhere = jobtpu(tmp_path / "no home", "cron", "install", env=env, check=False)
    assert nowhere.returncode == 1 and nowhere.stderr.splitlines() == [
        f"jobtpu: error: no home at {tmp_path / 'no home'}", f"hint: make it first: `jobtpu init {tmp_path / 'no home'}`"]
    assert not table.exists()
    bare = {"PATH": str(fake_tool(tmp_path / "empty", "true", "#!/bin/sh\n").absolute())}  # no crontab on PATH
    done = jobtpu(home, "cron", "install", env=bare, check=False)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "jobtpu: error: crontab is not installed on this machine",
        "hint: install cron (`sudo apt-get install -y cron`), or use `jobtpu cron install --systemd`"]


@pytest.mark.fast
def test_cron_install_systemd_writes_a_user_timer_and_enables_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    calls = tmp_path / "systemctl.calls"
    tools = fake_tool(tmp_path / "bin", "systemctl", f'#!/bin/sh\necho "$*" >> {calls}\n')
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = jobtpu(home, "cron", "install", "--systemd", "--every", "2", env=env)
    name = cron.unit_name(home)
    units = tmp_path / "config" / "systemd" / "user"
    assert f"installed {units / name}.timer: a pass every 2 min" in done.stdout
    service, timer = (units / f"{name}.service").read_text(), (units / f"{name}.timer").read_text()
    assert f'ExecStart="{sys.executable}" "-m" "jobtpu.cli" "--home" "{home}" "manage" "--every" "120"' in service
    assert f"StandardOutput=append:{home}/logs/passes.log" in service and "OnCalendar=*:0/2" in timer
    assert calls.read_text().splitlines() == ["--user daemon-reload", f"--user enable --now {name}.timer"]
    assert jobtpu(home, "cron", "show", env=env).stdout == f"systemd: {units / name}.timer\n"
    jobtpu(home, "cron", "remove", env=env)
    assert not list(units.iterdir()) and f"--user disable --now {name}.timer" in calls.read_text()
    # A user systemd that cannot be reached: one line, and no unit file is left behind.
    (tools / "systemctl").write_text('#!/bin/sh\necho "Failed to connect to bus: No medium found" >&2\nexit 1\n')
    failed = jobtpu(home, "cron", "install", "--systemd", env=env, check=False)
    assert failed.returncode == 1 and failed.stderr.splitlines()[0] == (
        "jobtpu: error: systemctl --user daemon-reload failed: Failed to connect to bus: No medium found")
    assert not list(units.iterdir())


def test_the_installed_line_runs_a_venv_jobtpu_from_crons_bare_environment(tmp_path: Path) -> None:
    """jobtpu pip-installed in a fresh virtualenv, not on cron's PATH: the line `cron install` writes
    runs as cron runs it (env -i, PATH=/usr/bin:/bin, /bin/sh -c) and runs the job submitted before.
    The line the docs showed before (`jobtpu --home HOME manage`) finds no jobtpu there."""
    source = tmp_path / "checkout"
    shutil.copytree(ROOT / "jobtpu", source / "jobtpu", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--disable-pip-version-check", str(source)],
                   check=True, capture_output=True, timeout=600)
    home = make_home(tmp_path)
    job = submit(home, write_tree(tmp_path / "src", {"run.sh": "echo hello from cron\n"}), "bash run.sh")
    env, table = with_crontab(tmp_path)
    env["PATH"] = f"{env['PATH'].split(':')[0]}:/usr/bin:/bin"  # the venv is not activated: not on PATH
    installed = subprocess.run([str(venv / "bin" / "jobtpu"), "--home", str(home), "cron", "install"],
                               capture_output=True, text=True, env=env, check=True)
    [line] = [x for x in table.read_text().splitlines() if cron.is_home_line(x, home)]
    assert line in installed.stdout and f"{venv}/bin/python" in line, line

    def as_cron(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "/bin/sh", "-c", command],
                              capture_output=True, text=True, timeout=120)

    old = as_cron(f"jobtpu --home {home} manage")
    assert old.returncode == 127 and "jobtpu: not found" in old.stderr
    assert status(home)[job]["status"] == "queued"

    def ran() -> bool:
        done = as_cron(command_of(line))
        assert done.returncode == 0 and done.stdout == done.stderr == "", done  # all of it went to the log
        return status(home)[job]["status"] == "finished"

    wait_for(ran, timeout=120, interval=0.2, what="the cron line to run the job")
    assert (home / "logs" / str(job) / "0.0.log").read_text() == "hello from cron\n"
    log = (home / "logs" / "passes.log").read_text()
    assert f"job {job}" in log, log
    last = json.loads(jobtpu(home, "machines", "--json").stdout)["last_pass"]
    assert last["every"] == 60 and last["stale"] is False


# ---- when the passes stopped -------------------------------------------------------------------------

def _last_pass_ago(home: Path, seconds: float, every: float | None = None) -> None:
    import time

    state = json.loads((home / "state.json").read_text())
    state["last_pass"] = {"ended": time.time() - seconds, "took": 0.5, **({"every": every} if every else {})}
    (home / "state.json").write_text(json.dumps(state))


@pytest.mark.fast
def test_doctor_and_status_say_the_passes_stopped_and_name_the_install_command(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    submit(home, write_tree(tmp_path / "src", {"a": "1\n"}), "true")
    never = jobtpu(home, "doctor", check=False)
    assert never.returncode == 1 and never.stderr.splitlines() == [
        "passes: problem: no manage pass has run in this home yet: `jobtpu cron install` runs one every minute"]
    assert "`jobtpu cron install`" in " ".join(jobtpu(home, "status").stderr.split())  # (folded at 80 columns)
    jobtpu(home, "manage")
    fresh = jobtpu(home, "doctor")
    assert fresh.stderr.startswith("passes: ok: the last pass ended ") and "they run every 60 s" in fresh.stderr
    _last_pass_ago(home, 2 * 3600)  # a cron pass (no interval recorded): every minute, 120 missed
    late = jobtpu(home, "doctor", check=False)
    assert late.returncode == 1 and late.stderr.splitlines() == [
        "passes: problem: no manage pass for 2 h, and they should run every 60 s: `jobtpu cron install` runs them from cron"]
    machine = jobtpu(home, "doctor", "local", check=False)  # a machine's checks say it last, and fail for it
    assert machine.returncode == 1 and machine.stderr.splitlines()[-1] == late.stderr.splitlines()[0]
    said = " ".join(jobtpu(home, "status").stderr.split())
    assert "STALE: last pass 2 h ago" in said and "`jobtpu cron install`" in said, said
    _last_pass_ago(home, 20 * 60, every=600)  # passes every 10 min (cron install --every 10): not late yet
    assert jobtpu(home, "doctor").stderr.startswith("passes: ok: the last pass ended 20 min ago")
    done = jobtpu(home, "doctor", "--fix", check=False)
    assert done.returncode == 2 and "name it" in done.stderr
