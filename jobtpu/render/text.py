"""Untrusted text made safe to show: names, tags, reasons, log lines and remote messages come from
users, jobs and machines, and must reach a terminal as the characters they are, never as commands
to it.

A control character (ESC starting a colour or an OSC hyperlink/clipboard sequence, a newline that
would split one row into two, a carriage return that would overwrite what was printed, a
bidirectional override that reorders what follows) is shown as its escape (`\\x1b`, `\\n`), so a
row stays one row and the terminal is never steered by data."""

from __future__ import annotations

import functools
import re
from typing import Any

from jobtpu.errors import JobtpuError

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    return _escape_char(match.group())


def _escape_char(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


@functools.cache
def _unsafe() -> re.Pattern[str]:
    """C0 and C1 controls and DEL; the Unicode line and paragraph separators; bidirectional
    embeddings, overrides and isolates (the "Trojan source" characters). Compiled when first
    needed: most commands print nothing that needs it, and it costs a start 0.4 ms."""
    return re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character shown as its escape: one line, nothing a terminal obeys."""
    if text.isascii() and text.isprintable():  # most cells: nothing to escape, no regex run
        return text
    return _unsafe().sub(_escape, text)


def cell_width(text: str) -> int:
    """Columns a string takes on a terminal (wide East Asian characters two, combining ones none)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def printable_lines(text: str) -> str:
    """Like `printable`, but the line breaks in `text` (ours, between lines we composed) are kept."""
    return "\n".join(printable(line) for line in text.split("\n"))


def control_in(text: str) -> str | None:
    """Pure: the first character of `text` that str.isprintable() rejects (C0 and C1 controls, DEL,
    line and paragraph separators, format characters, a byte that was no UTF-8), as its escape; None
    when there is none. A value that holds one can end or split a line another program parses."""
    for char in text:
        if not char.isprintable():
            return _escape_char(char)
    return None


def refuse_control(text: str, what: str, where: str, hint: str) -> str:
    """`text` as it is, when it can go into `where` (a crontab line, a systemd unit, a shell script, an
    OpenSSH option…: a line another program parses) whole; else one line saying which character stops
    it, and nothing is written (docs/design.md §7)."""
    found = control_in(text)
    if found is not None:
        raise JobtpuError(f"{what} {printable(text)} holds a control character ({found}), which {where} "
                          "cannot carry: nothing was written", hint=hint)
    return text


def clock(seconds: float, zone: Any = None) -> str:
    """A time as month-day hour:minute in `zone` (a tzinfo; None: this machine's local time)."""
    from datetime import datetime

    return datetime.fromtimestamp(seconds, zone).strftime("%m-%d %H:%M")
