"""A path jobtpu writes into a line another program parses (a crontab line, a systemd unit, a shell's
completion script, an OpenSSH option) holds no control character: one with a newline would end the
line there and make the rest a line of its own. Such a path is refused with one line, and nothing
is written (docs/reference/commands.md §2.3.1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobtpu.commands import cron
from jobtpu.errors import JobtpuError
from jobtpu.render.text import control_in, refuse_control
from tests.helpers import jobtpu, make_home
from tests.test_cron import fake_tool, with_crontab

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.fast
@pytest.mark.parametrize(("text", "found"), [
    ("/srv/team home", None), ("/srv/équipe/100%", None), ("", None), ("/a'b\"c\\d$e", None),
    ("/h/a\nb", "\\n"), ("/h/a\rb", "\\r"), ("/h/a\tb", "\\t"), ("/h/a\x00b", "\\x00"), ("/h/\x1b[31m", "\\x1b"),
    ("/h/a\x7fb", "\\x7f"), ("/h/a\x85b", "\\x85"), ("/h/a\x9bb", "\\x9b"), ("/h/a\u2028b", "\\u2028"),
    ("/h/a\u202eb", "\\u202e"), ("/h/a\udcffb", "\\udcff"), ("/ok/x\ny\rz", "\\n"),
])
def test_the_first_character_a_line_cannot_carry_is_named(text: str, found: str | None) -> None:
    assert control_in(text) == found
    if found is None:
        assert refuse_control(text, "the path", "a line", "fix it") == text
        return
    with pytest.raises(JobtpuError) as refused:
        refuse_control(text, "the path", "a line", "fix it")
    assert f"holds a control character ({found}), which a line cannot carry: nothing was written" in refused.value.message
    assert "\n" not in refused.value.message and refused.value.hint == "fix it"


@pytest.mark.fast
@pytest.mark.parametrize("home", [Path("/h/a\nb"), Path("/h/a\n* * * * * touch /tmp/x #"), Path("/h/\rb"), Path("/h/\x85")])
def test_no_crontab_line_nor_unit_is_made_for_a_home_whose_path_holds_a_control_character(home: Path) -> None:
    for make in (lambda: cron.cron_line(home, 1), lambda: cron.unit_files(home, 1)):
        with pytest.raises(JobtpuError, match="the home's path .* holds a control character"):
            make()


@pytest.mark.fast
@pytest.mark.parametrize("systemd", [False, True])
def test_cron_install_refuses_a_home_with_a_newline_in_its_path_and_writes_nothing(tmp_path: Path, systemd: bool) -> None:
    home = make_home(tmp_path / "team\n* * * * * touch /tmp/owned #")
    env, table = with_crontab(tmp_path)
    calls = tmp_path / "systemctl.calls"
    tools = fake_tool(tmp_path / "bin", "systemctl", f'#!/bin/sh\necho "$*" >> {calls}\n')
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"))
    table.write_text("MAILTO=me\n")
    done = jobtpu(home, "cron", "install", *(["--systemd"] if systemd else []), env=env, check=False)
    where = "a systemd unit" if systemd else "a crontab line"
    assert done.returncode == 1 and done.stdout == "" and done.stderr.splitlines() == [
        f"jobtpu: error: the home's path {tmp_path}/team\\n* * * * * touch /tmp/owned #/home holds a control "
        f"character (\\n), which {where} cannot carry: nothing was written",
        "hint: move the home to a path of printable characters (`mv`), then install from there"], done.stderr
    assert table.read_text() == "MAILTO=me\n" and not calls.exists() and not (tmp_path / "config").exists()
    assert not (home / "logs").exists() and tools.is_dir()


def test_an_interpreter_whose_path_holds_a_newline_writes_no_completion_script_nor_crontab_line(tmp_path: Path) -> None:
    """jobtpu run by a python reached through a path with a newline (sys.executable is that path):
    the completion script and the crontab line would carry it into a line a shell or cron parses."""
    folder = tmp_path / "py\nthon"
    folder.mkdir()
    python = folder / "python3"
    python.symlink_to(sys.executable)
    home = make_home(tmp_path)
    env, table = with_crontab(tmp_path)
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT), "JOBTPU_USER": "tester"}
    for words, where in ((["completion", "bash"], "a bash completion script"), (["cron", "install"], "a crontab line")):
        done = subprocess.run([str(python), "-m", "jobtpu.cli", "--home", str(home), *words], capture_output=True,
                              text=True, env=full, timeout=60)
        assert done.returncode == 1 and done.stdout == "", done
        assert done.stderr.splitlines()[0] == (
            f"jobtpu: error: this jobtpu's interpreter {tmp_path}/py\\nthon/python3 holds a control character (\\n), "
            f"which {where} cannot carry: nothing was written"), done.stderr
        assert len(done.stderr.splitlines()) == 2 and "Traceback" not in done.stderr
    assert not table.exists()


@pytest.mark.fast
def test_no_openssh_option_carries_a_home_path_with_a_newline(tmp_path: Path) -> None:
    """`ssh -o` is parsed as a line of ssh's config: the known_hosts path of a home under a newline
    would end it there; the worker's copy fails with one line instead."""
    from jobtpu.errors import RemoteError
    from jobtpu.home.layout import Home
    from jobtpu.schema.fleet import Machine
    from jobtpu.transport.base import Endpoint
    from jobtpu.transport.ssh import SshTransport

    machine = Machine(name="box", kind="ssh", hosts=("10.0.0.9",), user="u", host_key_policy="strict")
    home = tmp_path / "a\nIdentityFile /tmp/theirs"
    with pytest.raises(RemoteError) as refused:
        SshTransport(Endpoint("box", 0, "10.0.0.9", 22), machine, Home(home)).ssh_command()
    assert "holds a control character (\\n), which an OpenSSH option cannot carry" in refused.value.message
    assert "\n" not in refused.value.message
