"""`jobtpu cron install`, `show` and `remove`: run the passes of this home unattended, from the user's crontab
or a systemd user timer, with THIS jobtpu's absolute path: cron's PATH (/usr/bin:/bin) has no
`jobtpu` installed in a virtualenv or under ~/.local (docs/reference/commands.md §2.3.1)."""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.errors import JobtpuError, UsageError
from jobtpu.home.layout import Home
from jobtpu.render.text import printable, refuse_control

if TYPE_CHECKING:
    import subprocess

INSTALL = "jobtpu cron install"  # what doctor, status and watch name when the passes stopped
MARK = "# jobtpu passes of "  # ends the crontab line of a home: `# jobtpu passes of /abs/home`


def passes_log(home: Path) -> Path:
    """Where the installed passes' output goes (a pass prints only news: a line per event)."""
    return home / "logs" / "passes.log"


def this_jobtpu() -> list[str]:
    """The words that run this very jobtpu from any environment: its interpreter by absolute path
    (a virtualenv's own python finds its packages without activation), never a `jobtpu` on PATH."""
    return [str(Path(sys.executable).absolute()), "-m", "jobtpu.cli"]


def pass_words(home: Path, every: int, standby: bool = False) -> list[str]:
    """One pass of `home`, recording the interval it runs at (so `status` knows when it is late);
    `standby`: a standby runner's pass, which takes the lease over when it expires (home-files.md §1.7)."""
    return [*this_jobtpu(), "--home", str(home), "manage", "--every", str(every * 60), *(["--standby"] if standby else [])]


def schedule(every: int) -> str:
    return "* * * * *" if every == 1 else f"*/{every} * * * *"


def _cron_escape(text: str) -> str:
    # cron turns an unescaped % into a newline (and feeds the rest to stdin)
    return text.replace("%", "\\%")


def line_safe(home: Path, where: str) -> None:
    """Pure: refuse a home or an interpreter whose path holds a control character (one line, nothing
    written). cron and systemd read their files a line at a time: a newline in a path would end the
    line there and make the rest a line of its own, a command of the home's path's choosing."""
    refuse_control(str(home), "the home's path", where,
                   "move the home to a path of printable characters (`mv`), then install from there")
    refuse_control(this_jobtpu()[0], "this jobtpu's interpreter", where,
                   "install jobtpu under a path of printable characters and run its `jobtpu cron install`")


def cron_line(home: Path, every: int, standby: bool = False) -> str:
    """The crontab line: a pass of `home` every `every` minutes, its output appended to the home's
    passes log, marked with a comment naming the home (how show and remove find it again)."""
    line_safe(home, "a crontab line")
    command = f"{shlex.join(pass_words(home, every, standby))} >> {shlex.quote(str(passes_log(home)))} 2>&1"
    return _cron_escape(f"{schedule(every)} {command} {MARK}{home}")


def is_home_line(line: str, home: Path) -> bool:
    return line.rstrip().endswith(_cron_escape(f"{MARK}{home}"))


def with_line(crontab: str, home: Path, line: str) -> str:
    """The crontab with `line` as the home's only entry: every other line kept as it was."""
    kept = [x for x in crontab.splitlines() if not is_home_line(x, home)]
    return "\n".join([*kept, line]) + "\n"


def without_line(crontab: str, home: Path) -> str:
    kept = [x for x in crontab.splitlines() if not is_home_line(x, home)]
    return "\n".join(kept) + "\n" if kept else ""


def home_line(crontab: str, home: Path) -> str | None:
    return next((x for x in crontab.splitlines() if is_home_line(x, home)), None)


# ---- the crontab ------------------------------------------------------------------------------------

def _crontab_program() -> str:
    import shutil
    found = shutil.which("crontab")
    if found is None:
        raise JobtpuError("crontab is not installed on this machine",
                          hint="install cron (`sudo apt-get install -y cron`), or use `jobtpu cron install --systemd`")
    return found


def read_crontab() -> str:
    """The user's crontab; empty when they have none (`crontab -l` then exits 1: no crontab for …)."""
    import subprocess
    done = subprocess.run([_crontab_program(), "-l"], capture_output=True, text=True)
    if done.returncode != 0:
        if "no crontab" in done.stderr.lower():
            return ""
        raise JobtpuError(f"crontab -l failed: {_first_line(done.stderr)}", hint="check `crontab -l` by hand")
    return done.stdout


def write_crontab(text: str) -> None:
    import subprocess
    done = subprocess.run([_crontab_program(), "-"], input=text, capture_output=True, text=True)
    if done.returncode != 0:
        raise JobtpuError(f"crontab refused the new table: {_first_line(done.stderr)}",
                          hint="check `crontab -l` by hand; it was not changed")


def _first_line(text: str) -> str:
    return printable((text.strip().splitlines() or ["no message"])[0])


# ---- systemd ------------------------------------------------------------------------------------------

def unit_name(home: Path) -> str:
    """One timer per home, named from its path (a unit name cannot hold a path's characters)."""
    return f"jobtpu-passes-{hashlib.sha256(str(home).encode()).hexdigest()[:12]}"


def unit_folder() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def _unit_word(word: str) -> str:
    """A word of an ExecStart= line: double-quoted, % doubled (systemd's specifier character)."""
    quoted = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return quoted.replace("%", "%%")


def unit_files(home: Path, every: int, standby: bool = False) -> dict[str, str]:
    """The service (one pass, its output appended to the passes log) and its timer."""
    line_safe(home, "a systemd unit")
    name, log = unit_name(home), str(passes_log(home)).replace("%", "%%")
    service = (f"[Unit]\nDescription=jobtpu passes of {str(home).replace('%', '%%')}\n\n"
               f"[Service]\nType=oneshot\nExecStart={' '.join(map(_unit_word, pass_words(home, every, standby)))}\n"
               f"StandardOutput=append:{log}\nStandardError=append:{log}\n")
    timer = (f"[Unit]\nDescription=a jobtpu pass every {every} min: {str(home).replace('%', '%%')}\n\n"
             f"[Timer]\nOnCalendar=*:0/{every}\nAccuracySec=1s\n\n[Install]\nWantedBy=timers.target\n")
    return {f"{name}.service": service, f"{name}.timer": timer}


def _systemctl(*words: str) -> subprocess.CompletedProcess[str]:
    import shutil
    import subprocess
    program = shutil.which("systemctl")
    if program is None:
        raise JobtpuError("systemctl is not installed on this machine", hint="use cron: `jobtpu cron install`")
    return subprocess.run([program, "--user", *words], capture_output=True, text=True)


def install_systemd(home: Path, every: int, standby: bool = False) -> None:
    folder = unit_folder()
    files = unit_files(home, every, standby)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    timer = unit_name(home) + ".timer"
    for words in (("daemon-reload",), ("enable", "--now", timer)):
        done = _systemctl(*words)
        if done.returncode != 0:
            for name in files:  # nothing half-installed is left behind
                (folder / name).unlink(missing_ok=True)
            raise JobtpuError(f"systemctl --user {' '.join(words)} failed: {_first_line(done.stderr)}",
                              hint="run it where your user's systemd runs (a login session; `loginctl enable-linger` "
                                   "keeps it after you log out), or use cron: `jobtpu cron install`")
    print(printable(f"installed {folder / timer}: a pass every {every} min, its output in {passes_log(home)}"))


def remove_systemd(home: Path) -> bool:
    folder, name = unit_folder(), unit_name(home)
    files = [folder / f"{name}.timer", folder / f"{name}.service"]
    if not any(f.exists() for f in files):
        return False
    _systemctl("disable", "--now", f"{name}.timer")  # already stopped or unknown: the files go all the same
    for f in files:
        f.unlink(missing_ok=True)
    _systemctl("daemon-reload")
    print(printable(f"removed {files[0]} and its service"))
    return True


# ---- the command --------------------------------------------------------------------------------------

def _home_path(home: Home) -> Path:
    root = home.root.absolute()
    if not root.is_dir():
        raise JobtpuError(f"no home at {root}", hint=f"make it first: `jobtpu init {root}`")
    return root


def install(home: Home, every: int, systemd: bool, standby: bool = False) -> int:
    root = _home_path(home)
    line_safe(root, "a systemd unit" if systemd else "a crontab line")  # before anything is made
    passes_log(root).parent.mkdir(exist_ok=True)  # the log's folder must be there for the redirect
    if systemd:
        install_systemd(root, every, standby)
        return 0
    before = read_crontab()
    line = cron_line(root, every, standby)
    if home_line(before, root) == line:
        print(printable(f"already installed: {line}"))
        return 0
    write_crontab(with_line(before, root, line))
    print(printable(f"installed in your crontab: {line}"))
    note(f"a pass every {every} min; its output goes to {passes_log(root)}")
    return 0


def show(home: Home) -> int:
    import shutil
    root = home.root.absolute()
    found = False
    if shutil.which("crontab") is not None:
        line = home_line(read_crontab(), root)
        if line is not None:
            print(printable(f"crontab: {line}"))
            found = True
    timer = unit_folder() / f"{unit_name(root)}.timer"
    if timer.exists():
        print(printable(f"systemd: {timer}"))
        found = True
    if not found:
        note(f"no passes are installed for {root}: `{INSTALL}` runs one every minute")
    return 0


def remove(home: Home) -> int:
    import shutil
    root = home.root.absolute()
    removed = remove_systemd(root)
    if shutil.which("crontab") is not None:
        before = read_crontab()
        line = home_line(before, root)
        if line is not None:
            write_crontab(without_line(before, root))
            print(printable(f"removed from your crontab: {line}"))
            removed = True
    if not removed:
        note(f"nothing to remove: no passes are installed for {root}")
    return 0


def minutes(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 59:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole minutes from 1 to 59, like 1 or 5")
    return int(text)


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "cron")
    p.add_argument("op", choices=("install", "show", "remove"), help="install, show, or remove")
    p.add_argument("--every", type=minutes, default=1, metavar="MINUTES",
                   help="install: a pass every MINUTES minutes, 1 to 59 (default 1)")
    p.add_argument("--systemd", action="store_true",
                   help="install: a systemd user timer in ~/.config/systemd/user instead of a crontab line")
    p.add_argument("--standby", action="store_true",
                   help="install: this box's passes stand by for the home's runner on another box and take over "
                   "its lease when it stops renewing it")
    p.set_defaults(func=cron)


def cron(home: Home, a: argparse.Namespace) -> int:
    if a.op == "install":
        return install(home, a.every, a.systemd, a.standby)
    if a.every != 1 or a.systemd or a.standby:
        raise UsageError(f"--every, --systemd and --standby are options of `cron install`, not of `cron {a.op}`",
                         hint=f"run `jobtpu cron {a.op}` alone: it finds the crontab line and the timer itself")
    return show(home) if a.op == "show" else remove(home)
