"""What every command group shares: how a line reaches the user, JSON output, and SIGTERM handling."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from contextvars import ContextVar

from jobtpu.errors import JobtpuError, Terminated
from jobtpu.render.text import printable, printable_lines


def emit_json(document: object) -> None:
    import orjson

    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_APPEND_NEWLINE))
    sys.stdout.flush()


# Where a command's lines go while the Python API runs it (jobtpu/api.py): kept for its caller, not
# printed. Unset (the command line), `note` writes stderr and `say` stdout.
_kept: ContextVar[list[str] | None] = ContextVar("jobtpu_kept_lines", default=None)


def note(text: str) -> None:
    """One line for the user on stderr. Untrusted parts (names, remote messages) are escaped; the
    line breaks our own messages put between lines are kept."""
    kept = _kept.get()
    if kept is not None:
        kept.append(text)
        return
    sys.stderr.write(printable_lines(text) + "\n")


def say(text: object) -> None:
    """One line of a command's output on stdout (already escaped where it holds untrusted text)."""
    kept = _kept.get()
    if kept is not None:
        kept.append(str(text))
        return
    print(text)


@contextlib.contextmanager
def kept_lines() -> Iterator[list[str]]:
    """Meanwhile, `note` and `say` keep their lines in the list given, in order, instead of printing."""
    lines: list[str] = []
    token = _kept.set(lines)
    try:
        yield lines
    finally:
        _kept.reset(token)


def error_text(error: JobtpuError) -> str:
    """How a JobtpuError reads on stderr: `jobtpu: error: ...` and, when it has one, `hint: ...`.
    The one wording for errors, whether the command ends with it or a `manage --loop` carries on."""
    text = f"jobtpu: error: {printable(error.message)}"
    return text + (f"\nhint: {printable(error.hint)}" if error.hint else "")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises Terminated meanwhile, as Ctrl-C raises KeyboardInterrupt: the work under way
    cleans up after itself (no half-written archive) instead of the process vanishing mid-write."""
    import signal

    def terminated(signum: int, frame: object) -> None:
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread, which alone gets signals (asked so, not of threading: 0.7 ms)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
