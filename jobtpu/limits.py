"""The sizes a job's text may have (docs/reference/commands.md §2.2.7): checked at submit, before anything
is read whole or written, so one teammate's value never makes a listing, the team sheet or a pass
slow or refused for everyone. Pure: each check raises a JobtpuError with one line, or returns."""

from __future__ import annotations

from collections.abc import Sequence

from jobtpu.errors import JobtpuError

MAX_NAME = 200  # --name: one cell of a table
MAX_TAG = 100  # each --tag
MAX_TAGS = 50  # tags on one job
MAX_SHEET_NOTE = 1000  # --sheet-note (or the run config's wandb_notes): part of a sheet cell
MAX_OVERRIDE = 10_000  # one KEY=VALUE config override
MAX_OVERRIDES = 64 * 1024  # all of a job's overrides together
MAX_CMD = 64 * 1024  # --cmd
# Google refuses a whole batchUpdate holding a cell over 50,000 characters: every cell jobtpu writes
# is cut well below it, ending in MARK so a reader sees that it was cut.
MAX_CELL = 40_000
MARK = "…"


def check_length(what: str, text: str, limit: int, hint: str = "") -> None:
    if len(text) > limit:
        raise JobtpuError(f"{what} is {len(text)} characters, over the limit of {limit}",
                          hint=hint or "see `jobtpu submit --help` and the reference's Limits")


def check_submit(cmd: str, name: str, tags: Sequence[str], overrides: Sequence[str], sheet_note: str | None) -> None:
    """What one submit stores, against the limits above."""
    check_length("--cmd", cmd, MAX_CMD, "put a long command in a script of the job's folder")
    check_length("--name", name, MAX_NAME)
    check_tags(tags)
    check_overrides(overrides)
    if sheet_note is not None:
        check_length("--sheet-note", sheet_note, MAX_SHEET_NOTE, "keep the note short; it is shown in a sheet cell")


def check_tags(tags: Sequence[str]) -> None:
    if len(tags) > MAX_TAGS:
        raise JobtpuError(f"a job has at most {MAX_TAGS} tags (this one would have {len(tags)})")
    for tag in tags:
        check_length(f"tag {tag[:40]!r}…" if len(tag) > 40 else f"tag {tag!r}", tag, MAX_TAG)


def check_overrides(overrides: Sequence[str]) -> None:
    total = 0
    for word in overrides:
        check_length(f"config override {word[:40]!r}…", word, MAX_OVERRIDE,
                     "put a long value in a file of the job's folder and pass its name")
        total += len(word) + 1
    if total > MAX_OVERRIDES:
        raise JobtpuError(f"the config overrides are {total} characters together, over the limit of {MAX_OVERRIDES}",
                          hint="put long values in a file of the job's folder and pass its name")


def cell(text: str, limit: int = MAX_CELL) -> str:
    """`text` as one sheet cell: cut to `limit` characters, the last one MARK, when it is longer."""
    return text if len(text) <= limit else text[: limit - len(MARK)] + MARK
