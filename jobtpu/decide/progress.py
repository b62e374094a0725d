"""The progress a job reports in its log: `JOBTPU_PROGRESS step=N checkpoint=N` lines, or the job's
own `--progress` pattern (run only under RE2, in time linear in the line), kept per attempt as a
Progress for goodput.py. Pure: the pass feeds the lines and the time."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from jobtpu.schema.msgspec_lib import msgspec

_MARKER = re.compile(r"JOBTPU_PROGRESS\b(?P<rest>.*)")
_FIELD = re.compile(r"\b(step|checkpoint)=(\d+)\b")


PATTERN_LIMIT = 1000  # characters of a --progress pattern (docs/reference/commands.md §2.2.8)
MATCH_LIMIT = 4096  # characters of a log line a --progress pattern is matched against (its start)


class ProgressPattern:
    """A `--progress` pattern compiled by RE2 (linear time in the line, docs/design.md "Progress
    patterns"): never Python's backtracking `re`. Built only by `compile_progress`."""

    def __init__(self, regex: Any, text: str) -> None:
        self._regex, self.text = regex, text
        self.named = bool(set(regex.groupindex) & {"step", "checkpoint"})

    def search(self, line: str) -> tuple[int | None, int | None] | None:
        """(step, checkpoint) in the first MATCH_LIMIT characters of `line`, or None."""
        match = self._regex.search(line[:MATCH_LIMIT])
        if not match:
            return None
        if self.named:
            groups = match.groupdict()
            return _int(groups.get("step")), _int(groups.get("checkpoint"))
        return _int(match.group(1)), None


def compile_pattern(text: str, option: str) -> Any:
    """A user's regex in RE2's syntax, compiled (an `option`'s value, named in the error): ValueError
    with one line when RE2 cannot take it (a backreference or lookaround included: RE2 cannot take
    them, and they are what makes a match take exponential time) or it is over PATTERN_LIMIT."""
    import re2  # only a pass or a submit with a pattern matches one: `status` never loads it

    if len(text) > PATTERN_LIMIT:
        raise ValueError(f"{option} is {len(text)} characters, over the limit of {PATTERN_LIMIT}")
    options = re2.Options()
    options.log_errors = False  # the error comes back to us as one line; RE2 would print its own to stderr
    try:
        return re2.compile(text, options)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ValueError(f"{option} {text!r} is not a valid regular expression for RE2 ({why}; "
                         "no backreferences or lookarounds)") from None


def compile_progress(text: str) -> ProgressPattern:
    """A user's `--progress` regex in RE2's syntax (compile_pattern): one capturing group (the step),
    or named groups `step` and/or `checkpoint`. ValueError with one line otherwise."""
    regex = compile_pattern(text, "--progress")
    named = set(regex.groupindex) & {"step", "checkpoint"}
    if not named and regex.groups != 1:
        raise ValueError(f"--progress {text!r} must capture the step number in one group, like 'step (\\d+)', "
                         "or name groups (?P<step>…) and (?P<checkpoint>…)")
    return ProgressPattern(regex, text)


def progress_of(line: str, regex: ProgressPattern | None = None) -> tuple[int | None, int | None] | None:
    """(step, checkpoint) a log line reports, either possibly None; None for a line that reports
    nothing. `JOBTPU_PROGRESS step=1200 checkpoint=1000` always counts; `regex` adds the job's own."""
    marker = _MARKER.search(line)
    if marker:
        found = dict(_FIELD.findall(marker.group("rest")))
        if found:
            return _int(found.get("step")), _int(found.get("checkpoint"))
    if regex is None:
        return None
    mine = regex.search(line)
    if mine is None:
        return None
    step, checkpoint = mine
    return None if step is None and checkpoint is None else (step, checkpoint)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


class Progress(msgspec.Struct):
    """The last progress one attempt reported, and when the pass saw it."""

    step: int | None = None
    step_at: float | None = None
    checkpoint: int | None = None
    checkpoint_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, doc: Any) -> Progress:
        if not isinstance(doc, dict):
            return cls()
        return cls(**{k: doc[k] for k in ("step", "step_at", "checkpoint", "checkpoint_at")
                      if isinstance(doc.get(k), int | float) and not isinstance(doc.get(k), bool)})


def scan(lines: Iterable[str], now: float, regex: ProgressPattern | None = None,
         record: Progress | None = None) -> Progress:
    """`record` updated with what the new complete `lines` report (seen at `now`)."""
    result = msgspec.structs.replace(record) if record else Progress()
    for line in lines:
        found = progress_of(line, regex)
        if found is None:
            continue
        step, checkpoint = found
        if step is not None:
            result.step, result.step_at = step, now
        if checkpoint is not None:
            result.checkpoint, result.checkpoint_at = checkpoint, now
    return result

