"""The note a job brings to its machine's sheet row (`submit --sheet-note`, else `wandb_notes`)."""

from __future__ import annotations

import re
from pathlib import Path

RUN_CONFIG = Path("utils") / "remote_run_config.yml"
_NOTE_LINE = re.compile(r"^wandb_notes\s*:(.*)$")


def job_note(folder: Path, given: str | None = None) -> str | None:
    """The note a job brings to its machine's row: `submit --sheet-note`, else the top-level
    `wandb_notes` of the job's utils/remote_run_config.yml (a one-line or a block scalar), else None.
    Read without a YAML library (a scalar is all it takes); a file that is not there or not
    readable gives None, never an error."""
    if given is not None:
        return given
    try:
        with open(folder / RUN_CONFIG, "rb") as f:  # a run config is small: its first MiB holds the note
            lines = f.read(1 << 20).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for index, line in enumerate(lines):
        match = _NOTE_LINE.match(line)
        if match:
            return _scalar(match[1].strip(), lines[index + 1:])
    return None


def _scalar(text: str, following: list[str]) -> str | None:
    if text[:1] in ("|", ">"):  # a block: the indented lines that follow
        block = []
        for line in following:
            if line.strip() and not line[:1].isspace():
                break
            block.append(line.strip())
        joiner = "\n" if text[0] == "|" else " "
        return joiner.join(block).strip() or None
    if text[:1] in ("'", '"'):
        quote = text[0]
        end = text.rfind(quote)
        body = text[1:end] if end > 0 else text[1:]
        return (body.replace("''", "'") if quote == "'" else body.replace('\\"', '"')) or None
    text = re.split(r"\s#", text, maxsplit=1)[0].strip()  # a plain scalar ends at a comment
    return None if text in ("", "~", "null") else text
