"""Submit from the page (docs/reference/commands.md §2.29): the form, filled with the folder's job
file defaults (jobtpu.toml's [job] table: command, requests, overrides, sweep, ...), becomes
`jobtpu submit`'s own words (pure: `submit_words`). It goes through the acts' flow: the preview is
`submit --dry-run` (the options as the submit would take them, or its one error line), and the
confirmation runs `submit` through the command line's parser and function (fleet_acts.run_words)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jobtpu.errors import JobtpuError, UsageError
from jobtpu.home.layout import Home
from jobtpu.schema.msgspec_lib import msgspec

MAX_FIELD = 4000
# The form's fields: (its name, the option it fills, whether it takes one value per line or word).
LISTS = (("req", "--req"), ("tag", "--tag"), ("sweep", "--sweep"))
SINGLES = (("cmd", "--cmd"), ("name", "--name"), ("machine", "--machine"), ("rule", "--rule"), ("slices", "--slices"))


def _one(form: Mapping[str, Sequence[str]], key: str) -> str:
    return (form.get(key) or [""])[0].strip()


def submit_words(form: Mapping[str, Sequence[str]]) -> list[str]:
    """Pure: `jobtpu submit`'s words for the form; UsageError for what no submit could take. Each
    value travels as an option's value (`--cmd=...`); an override that starts with '-' goes after
    '--', as the command line passes it on untouched."""
    folder = _one(form, "dir")
    if not folder:
        raise UsageError("the folder to snapshot is empty", hint="give its full path, or a working directory's number")
    if not folder.isdigit() and not folder.startswith("/"):
        raise UsageError(f"the folder {folder[:80]!r} is not a full path",
                         hint="give its full path (/home/you/project) or a working directory's number (jobtpu dir)")
    for key in ("dir", "cmd", "name", "machine", "rule", "slices", "req", "tag", "sweep", "overrides"):
        if len(_one(form, key)) > MAX_FIELD:
            raise UsageError(f"{key}: longer than {MAX_FIELD} characters", hint="shorten it")
    words = ["submit", f"--dir={folder}"]
    words += [f"{option}={_one(form, key)}" for key, option in SINGLES if _one(form, key)]
    for key, option in LISTS:
        # requests and tags are words; a sweep's axes a line each (a value may hold a space)
        values = _one(form, key).splitlines() if key == "sweep" else _one(form, key).split()
        words += [f"{option}={v.strip()}" for v in values if v.strip()]
    if _one(form, "hold") in ("1", "on"):
        words.append("--hold")
    overrides = _one(form, "overrides").split()
    bare = next((w for w in overrides if "=" not in w and not w.startswith("-")), None)
    if bare is not None:  # the command line would take it for --machine or --user: the page's user is fixed
        raise UsageError(f"overrides: {bare[:80]!r} is not KEY=VALUE",
                         hint="write overrides as KEY=VALUE; the machine has a field of its own")
    words += [w for w in overrides if not w.startswith("-")]
    verbatim = [w for w in overrides if w.startswith("-")]
    return [*words, *(["--", *verbatim] if verbatim else [])]


def own_folder(home: Home, user: str, words: list[str]) -> list[str]:
    """The submit's words with its folder (`--dir=`, a full path or a working directory's number)
    made the real path of a folder of this account's own, or UsageError: the page snapshots only the
    serving person's own folders (not another account's, even one they may read, nor one reached
    through a link another account could point elsewhere between the check and the snapshot)."""
    asked = words[1].removeprefix("--dir=")
    real = _own_real_folder(home, user, asked)
    return [words[0], f"--dir={real}", *words[2:]]


def _own_real_folder(home: Home, user: str, asked: str) -> str:
    from jobtpu.home.settings import load_settings

    path = load_settings(home, user).dirs.get(asked) if asked.isdigit() else asked
    if path is None:
        raise UsageError(f"working directory {asked} is not set", hint="`jobtpu dir ls` lists yours")
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as e:
        raise UsageError(f"the folder {str(path)[:200]!r} cannot be read ({e.strerror})",
                         hint="give the full path of a folder of yours") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UsageError(f"the folder {str(path)[:200]!r} is not a folder of this account's own",
                         hint="the page snapshots only your own folders; another's: `jobtpu submit --dir` in a terminal")
    return real


class SubmitForm(msgspec.Struct):
    """What the form shows: the folder, its job file's values as the fields' defaults, the
    person's working directories, and the one line that says why the file could not be read."""

    dir: str
    values: dict[str, str]
    dirs: list[tuple[str, str]]
    problem: str = ""
    file_adds: str = ""  # the job file's overrides: the submit adds them itself, before the form's


def form_defaults(home: Home, user: str, folder: str) -> SubmitForm:
    """The form for `folder` (a full path or a working directory's number; "" : the person's working
    directory 1, when set), filled from its job file."""
    from jobtpu.commands.common import error_text
    from jobtpu.home.settings import load_settings
    from jobtpu.jobfile import read_job_file

    settings = load_settings(home, user)
    dirs = sorted(settings.dirs.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)
    folder = folder or ("1" if "1" in settings.dirs else "")
    values: dict[str, str] = {}
    problem = ""
    path = settings.dirs.get(folder) if folder.isdigit() else folder
    if path and Path(path).is_absolute():
        try:  # only a folder of this account's own: another's job file is not read into the form
            values = {k: _text(k, v) for k, v in read_job_file(Path(_own_real_folder(home, user, folder))).items()}
        except JobtpuError as e:
            problem = error_text(e).replace("\n", " ")
    # Overrides add up (the file's, then the command line's: docs/reference/commands.md §2.2.9): in
    # the form's field, the file's would be given twice, and taking one out there would not remove it.
    return SubmitForm(folder, values, [(n, str(p)) for n, p in dirs], problem, values.pop("overrides", ""))


def _text(key: str, value: Any) -> str:
    """A job file's value as the form's field holds it (a sweep's axes a line each)."""
    if isinstance(value, list):
        return ("\n" if key == "sweep" else " ").join(str(v) for v in value)
    return str(value)
