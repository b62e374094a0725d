"""A team's job defaults kept in its repository: `jobtpu.toml` in the folder a submit snapshots
(docs/reference/commands.md §2.2.9), read by `submit` and `run`, the command line winning, as
SkyPilot's task files and an sbatch script's `#SBATCH` lines do.

    [job]
    cmd = "bash run_remote.sh"
    req = ["v3-32", "preemptible"]
    rule = "pre"
    env = ["WANDB_PROJECT=mae"]
    on_resume = "--config.load_from=gs://ckpt-{region}/run{job}"
    tags = ["mae"]

Pure but for the read: the file is data, never run, and what is wrong in it is one line naming the
file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobtpu.errors import ConfigError

NAME = "jobtpu.toml"
MAX_BYTES = 256 << 10

PLURALS = {"tags": "tag"}  # `tags = [...]` reads as naturally as `tag`


def read_job_file(folder: Path) -> dict[str, Any]:
    """The [job] table of FOLDER/jobtpu.toml, checked ({} when there is none)."""
    from jobtpu.home import safefs

    path = folder / NAME
    try:
        data = safefs.read_regular(folder, NAME, MAX_BYTES)  # a FIFO or link there is one line, never a hang
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror})") from None
    return parse_job_file(data, path)


def parse_job_file(data: bytes, path: Path) -> dict[str, Any]:
    """Pure: the checked [job] table of a job file's bytes."""
    import tomllib  # here: a folder without a job file parses none

    # The keys a job file may set: each is the submit option of the same name (dashes as underscores),
    # and what its value must be (the table of what a user sets on a job, schema/job_fields.py; loaded
    # here, so a folder without a job file loads none of it).
    from jobtpu.schema.job_fields import Kind, job_file_keys

    text_keys, list_keys = job_file_keys(Kind.TEXT), job_file_keys(Kind.LIST)
    int_keys, bool_keys = job_file_keys(Kind.INT), job_file_keys(Kind.BOOL)

    hint = f"fix {path}: a [job] table of submit's options (cmd, req, rule, env, tags…), see `jobtpu submit --help`"
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path} is not TOML: {e}", hint=hint) from None
    unknown = sorted(set(doc) - {"job"})
    if unknown:
        raise ConfigError(f"{path}: unknown table or key {unknown[0]!r}: everything goes under [job]", hint=hint)
    job = doc.get("job", {})
    if not isinstance(job, dict):
        raise ConfigError(f"{path}: job must be a table, [job]", hint=hint)
    checked: dict[str, Any] = {}
    for key, value in job.items():
        name = PLURALS.get(key, str(key)).replace("-", "_")
        if name in text_keys and isinstance(value, str):
            checked[name] = value
        elif name in list_keys and isinstance(value, list) and all(isinstance(v, str) for v in value):
            checked[name] = list(value)
        elif (name in int_keys and isinstance(value, int) and not isinstance(value, bool)
              or name in bool_keys and isinstance(value, bool)):
            checked[name] = value
        else:
            kinds = ("a string" if name in text_keys else "a list of strings" if name in list_keys else
                     "a whole number" if name in int_keys else "true or false" if name in bool_keys else None)
            if kinds is None:
                known = ", ".join(sorted((*text_keys, *list_keys, *int_keys, *bool_keys)))
                raise ConfigError(f"{path}: [job] has no key {key!r} (it takes: {known})", hint=hint)
            raise ConfigError(f"{path}: [job] {key} must be {kinds}", hint=hint)
    return checked


def merged(given: dict[str, Any], defaults: dict[str, Any], from_file: dict[str, Any]) -> dict[str, Any]:
    """Pure: the options a submit runs with: what the command line gave (a value other than its
    default) wins; else the job file's; else the default. Overrides and --env add up: the file's,
    then the command line's (a later KEY=VALUE wins)."""
    out = dict(given)
    for name, value in from_file.items():
        if name in ("overrides", "env"):
            out[name] = [*value, *given.get(name, [])]
        elif given.get(name, defaults.get(name)) == defaults.get(name):
            out[name] = value
    return out
