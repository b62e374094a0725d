"""Submit from the page (docs/reference/commands.md §2.29): the form, filled with the folder's job
file defaults (jobtpu.toml's [job] table: command, requests, overrides, sweep, ...), becomes
`jobtpu submit`'s own words (pure: `submit_words`). It goes through the acts' flow: the preview is
`submit --dry-run` (the options as the submit would take them, or its one error line), and the
confirmation runs `submit` through the command line's parser and function (fleet_acts.run_words)."""

from __future__ import annotations

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
    words += [w for w in overrides if not w.startswith("-")]
    verbatim = [w for w in overrides if w.startswith("-")]
    return [*words, *(["--", *verbatim] if verbatim else [])]


class SubmitForm(msgspec.Struct):
    """What the form shows: the folder, its job file's values as the fields' defaults, the
    person's working directories, and the one line that says why the file could not be read."""

    dir: str
    values: dict[str, str]
    dirs: list[tuple[str, str]]
    problem: str = ""


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
        try:
            values = {k: _text(k, v) for k, v in read_job_file(Path(path)).items()}
        except JobtpuError as e:
            problem = error_text(e).replace("\n", " ")
    return SubmitForm(folder, values, [(n, str(p)) for n, p in dirs], problem)


def _text(key: str, value: Any) -> str:
    """A job file's value as the form's field holds it (a sweep's axes a line each)."""
    if isinstance(value, list):
        return ("\n" if key == "sweep" else " ").join(str(v) for v in value)
    return str(value)
