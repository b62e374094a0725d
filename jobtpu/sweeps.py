"""Sweeps and dependencies, as what a user types becomes (docs/reference/commands.md §2.2). Pure.

A sweep is the cross product of `--sweep KEY=V1,V2,...` axes, or the rows of a `--sweep-file` (one
JSON object per line, or a CSV with a header): a list of combinations, each a KEY → VALUE mapping
that becomes the job's config overrides (through the aliases, as `lr=0.01` does).

A dependency (`--after`, `--after-any`) names jobs that must have ended (finished, for `--after`)
before a job may start; what is refused at submit and what a waiting job is told lives here too."""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from jobtpu.errors import JobtpuError

MAX_COMBINATIONS = 10_000  # more is a typo (a stray axis), not a sweep anyone runs
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def parse_axes(specs: Iterable[str]) -> list[tuple[str, list[str]]]:
    """`lr=0.1,0.01` → ("lr", ["0.1", "0.01"]), one axis per --sweep, in the order given."""
    axes: list[tuple[str, list[str]]] = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not _KEY.match(key):
            raise JobtpuError(f"--sweep {spec!r} is not KEY=V1,V2,...", hint="like --sweep lr=0.1,0.01")
        choices = [v.strip() for v in split_values(values)]
        if any(not v for v in choices):
            raise JobtpuError(f"--sweep {spec!r} has an empty value", hint="like --sweep lr=0.1,0.01")
        if any(key == k for k, _ in axes):
            raise JobtpuError(f"--sweep {key} is given twice", hint="give every value of one key in one --sweep")
        if len(set(choices)) != len(choices):
            raise JobtpuError(f"--sweep {spec!r} repeats a value")
        axes.append((key, choices))
    return axes


def split_values(values: str) -> list[str]:
    """`0.1,0.01` → ["0.1", "0.01"]; `\\,` is a comma inside a value: `32\\,64,128` → ["32,64", "128"]."""
    return [v.replace("\\,", ",") for v in _SEPARATOR.split(values)]


_SEPARATOR = re.compile(r"(?<!\\),")  # a comma not escaped by a backslash


def expand(axes: list[tuple[str, list[str]]]) -> list[dict[str, str]]:
    """The cross product, first axis slowest (like nested loops in the order given)."""
    total = 1
    for _, values in axes:
        total *= len(values)
    _check_size(total)
    keys = [key for key, _ in axes]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(values for _, values in axes))]


# ---- the Python API's sweep= (docs/reference/python.md §11.1): values as values, never split again ---

def from_python(sweep: object) -> list[dict[str, str]] | None:
    """`sweep=` as combinations: a dict of KEY → values is the cross product of its axes (as --sweep's),
    a list of dicts a job array, one job per dict with its own keys (as a --sweep-file's lines). Each
    value is one value whatever it holds (a comma too), written as str() writes it. None: no sweep."""
    from collections.abc import Mapping as MappingType

    from jobtpu.errors import UsageError

    if isinstance(sweep, MappingType):
        axes = [(_python_key(key), _python_values(key, values)) for key, values in sweep.items()]
        if len({key for key, _ in axes}) != len(axes):
            raise UsageError("sweep: a key is given twice (once with leading '-')", hint="give each key once")
        return expand(axes) if axes else None
    if not isinstance(sweep, list | tuple):
        raise UsageError(f"sweep: give a dict of KEY: [values] or a list of dicts, not {type(sweep).__name__}",
                         hint='like sweep={"lr": [0.1, 0.01]} or sweep=[{"lr": 0.1, "bs": 32}, {"lr": 0.01, "bs": 64}]')
    if not sweep:
        raise UsageError("sweep: an empty list is a job array of no jobs", hint="give one dict per job")
    _check_size(len(sweep))
    rows = []
    for n, row in enumerate(sweep):
        if not isinstance(row, MappingType) or not row:
            raise UsageError(f"sweep[{n}]: {row!r} is not a dict of KEY: value",
                             hint='a job array is a list of dicts, like [{"lr": 0.1, "bs": 32}, {"lr": 0.01, "bs": 64}]')
        keys = [_python_key(key) for key in row]
        if len(set(keys)) != len(keys):
            raise UsageError(f"sweep[{n}]: a key is given twice (once with leading '-')", hint="give each key once")
        rows.append({key: _python_value(f"sweep[{n}][{key!r}]", value) for key, value in zip(keys, row.values(),
                                                                                             strict=True)})
    return rows


def _python_key(key: object) -> str:
    from jobtpu.errors import UsageError

    name = key.strip().lstrip("-") if isinstance(key, str) else ""
    if not _KEY.match(name):
        raise UsageError(f"sweep: {key!r} is not a config key", hint="a key is a name like lr or model.depth")
    return name


def _python_values(key: object, values: object) -> list[str]:
    from jobtpu.errors import UsageError

    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise UsageError(f"sweep: {key!r}: give a list of values, not {values!r}",
                         hint=f"like sweep={{{key!r}: [{values!r}]}}")
    choices = [_python_value(f"sweep[{key!r}]", v) for v in values]
    if not choices:
        raise UsageError(f"sweep: {key!r} has no values", hint="give it at least one, or leave the key out")
    if len(set(choices)) != len(choices):
        raise UsageError(f"sweep: {key!r} repeats a value", hint="give each value once")
    return choices


def _python_value(where: str, value: object) -> str:
    from jobtpu.errors import UsageError

    if isinstance(value, str | int | float):  # bool is an int: True as str() writes it, as overrides= does
        text = str(value).strip()
        if text:
            return text
        raise UsageError(f"{where} is empty", hint="give a value, or leave the key out")
    raise UsageError(f"{where}: {value!r} is not a string or a number", hint="give each value as a str, int or float")


MAX_FILE_BYTES = 8 << 20  # a sweep file: 10,000 combinations of a few overrides fit many times over


def read_file(path: Path) -> list[dict[str, str]]:
    """A sweep file: one JSON object per line (scalars only), or a CSV whose first line names the keys.
    Refused by size before it is read (a stat, then a read of at most MAX_FILE_BYTES), and by its
    count of combinations as soon as the one past MAX_COMBINATIONS is met."""
    text = _bounded_text(path)
    rows = _json_lines(text, path) if text.lstrip().startswith("{") else _csv_rows(text, path)
    if not rows:
        raise JobtpuError(f"--sweep-file {path}: no combinations in it")
    return rows


def _bounded_text(path: Path) -> str:
    import os
    import stat

    def refuse(size: int) -> JobtpuError:
        return JobtpuError(f"--sweep-file {path}: {size} bytes, more than {MAX_FILE_BYTES}",
                           hint=f"a sweep has at most {MAX_COMBINATIONS} combinations: split it")

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise JobtpuError(f"--sweep-file {path}: not a regular file")
            if info.st_size > MAX_FILE_BYTES:
                raise refuse(info.st_size)
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)  # a file still growing is bounded all the same
        finally:
            os.close(fd)
        if len(data) > MAX_FILE_BYTES:
            raise refuse(len(data))
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise JobtpuError(f"--sweep-file {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None


def _json_lines(text: str, path: Path) -> list[dict[str, str]]:
    import json  # a --sweep-file's: a sweep typed on the command line loads no parser

    rows: list[dict[str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(rows) == MAX_COMBINATIONS:  # refused as the one too many is met, not after the rest is parsed
            raise JobtpuError(f"--sweep-file {path}: more than {MAX_COMBINATIONS} combinations",
                              hint="split it, or check for an axis given by mistake")
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise JobtpuError(f"--sweep-file {path}:{number}: not a JSON object ({e.msg})") from None
        if not isinstance(row, dict) or not row:
            raise JobtpuError(f"--sweep-file {path}:{number}: each line must be a JSON object of KEY: VALUE")
        rows.append(_combination(row, f"{path}:{number}"))
    return rows


def _csv_rows(text: str, path: Path) -> list[dict[str, str]]:
    import csv

    reader = (row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row))
    first = next(reader, None)
    if first is None:
        return []
    header = [cell.strip() for cell in first]
    rows: list[dict[str, str]] = []
    for number, cells in enumerate(reader, 2):
        if len(rows) == MAX_COMBINATIONS:  # refused as the one too many is met, not after the rest is parsed
            raise JobtpuError(f"--sweep-file {path}: more than {MAX_COMBINATIONS} combinations",
                              hint="split it, or check for an axis given by mistake")
        if len(cells) != len(header):
            raise JobtpuError(f"--sweep-file {path}:{number}: {len(cells)} values for {len(header)} columns")
        rows.append(_combination(dict(zip(header, cells, strict=True)), f"{path}:{number}"))
    return rows


def _combination(row: Mapping[str, object], where: str) -> dict[str, str]:
    out = {}
    for key, value in row.items():
        key = str(key).strip().lstrip("-")
        if not _KEY.match(key):
            raise JobtpuError(f"--sweep-file {where}: {key!r} is not a config key")
        if isinstance(value, bool) or value is None:
            value = {True: "true", False: "false", None: "null"}[value]  # true/false/null, as the program's own config would spell them
        elif isinstance(value, int | float | str):
            value = str(value).strip()
        else:
            raise JobtpuError(f"--sweep-file {where}: {key} must be a number or a string")
        if value == "":
            raise JobtpuError(f"--sweep-file {where}: {key} is empty")
        out[key] = str(value)
    return out


def _check_size(total: int) -> None:
    if total > MAX_COMBINATIONS:
        raise JobtpuError(f"the sweep has {total} combinations, more than {MAX_COMBINATIONS}",
                          hint="split it, or check for an axis given by mistake")


def as_overrides(combination: Mapping[str, str]) -> list[str]:
    """The KEY=VALUE words a combination adds to the job's command line overrides."""
    return [f"{key}={value}" for key, value in combination.items()]


# A sweep's values in its jobs' environment (docs/reference/job-environment.md §8.2): the key upper-cased,
# every character but A-Z, 0-9 and _ as _. JOBTPU_SWEEP_INDEX is jobtpu's own (the combination's index).
ENV_PREFIX = "JOBTPU_SWEEP_"
RESERVED_ENV = frozenset({"JOBTPU_SWEEP_INDEX"})
_NOT_ENV = re.compile(r"[^A-Z0-9_]")


def env_name(key: str) -> str:
    """`lr` → JOBTPU_SWEEP_LR, `model.depth` → JOBTPU_SWEEP_MODEL_DEPTH."""
    return ENV_PREFIX + _NOT_ENV.sub("_", key.upper())


def check_env_names(combinations: Iterable[Mapping[str, str]]) -> list[str]:
    """Refuse two keys whose variables would be one (`lr-x` and `lr_x`, `LR` and `lr`): neither
    value could be told from the other. Returns the keys left out of the environment because their
    name is jobtpu's own (`index`), for submit to say."""
    names: dict[str, str] = {}
    for combination in combinations:
        for key in combination:
            name = env_name(key)
            other = names.setdefault(name, key)
            if other != key:
                raise JobtpuError(f"the sweep keys {other!r} and {key!r} would both be ${name} in the job's "
                                  "environment", hint="rename one of them (every key becomes JOBTPU_SWEEP_ and its "
                                  "name upper-cased, other characters as _)")
    return [key for name, key in names.items() if name in RESERVED_ENV]


def sweep_env(values: Mapping[str, str]) -> dict[str, str]:
    """A sweep job's combination as environment variables (not JOBTPU_SWEEP_INDEX: that is jobtpu's)."""
    env = {env_name(key): value for key, value in values.items()}
    return {name: value for name, value in env.items() if name not in RESERVED_ENV}


def id_range(ids: list[int]) -> str:
    """What submit prints for a sweep: "12-17", or the ids one by one when they are not consecutive."""
    if ids and ids == list(range(ids[0], ids[0] + len(ids))) and len(ids) > 1:
        return f"{ids[0]}-{ids[-1]}"
    return " ".join(map(str, ids))


# ---- dependencies ------------------------------------------------------------------------------------

def parse_after(values: Iterable[str], option: str) -> list[int]:
    """`--after 3,4 --after 7` → [3, 4, 7]."""
    ids: list[int] = []
    for value in values:
        for word in value.split(","):
            word = word.strip()
            if not word.isdigit() or int(word) <= 0:
                raise JobtpuError(f"{option} {value!r}: job ids are positive numbers, like {option} 12,13")
            if int(word) not in ids:
                ids.append(int(word))
    return ids


def check_dependencies(new_id: int, after: list[int], known: Mapping[int, list[int]]) -> None:
    """Refuse an unknown id or a cycle. `known`: every job's id → the ids it waits for (jobs in state
    and in history; a history job waits for nothing that matters any more)."""
    for job_id in after:
        if job_id == new_id:
            raise JobtpuError(f"job {new_id} cannot wait for itself")
        if job_id not in known:
            raise JobtpuError(f"--after {job_id}: there is no job {job_id}", hint="see `jobtpu status --all`")
    # A new job can only close a cycle if something it waits for already waits for it.
    seen: set[int] = set()
    stack = list(after)
    while stack:
        job_id = stack.pop()
        if job_id == new_id:
            raise JobtpuError(f"--after would make a dependency cycle through job {new_id}")
        if job_id in seen:
            continue
        seen.add(job_id)
        stack.extend(known.get(job_id, ()))
