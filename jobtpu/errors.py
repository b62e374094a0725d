"""The errors jobtpu raises for a user to act on, and the exit codes they map to.

Every problem a user can fix is a JobtpuError carrying one line of message and an optional hint;
cli.py is the only place that turns them into stderr text and an exit status."""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
EXIT_TERMINATED = 143  # 128 + SIGTERM


class JobtpuError(Exception):
    """A problem the user can act on: one line saying what is wrong, and a hint saying what to do."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(JobtpuError):
    """Words the user typed that parse but cannot mean what they seem to (exit 2, as argparse's)."""

    exit_code = EXIT_USAGE


class ConfigError(JobtpuError):
    """machines.json or state.json is malformed or fails validation; nothing was changed."""


class NotFoundError(JobtpuError):
    """A job id, machine name or file the user named does not exist."""


class BusyError(JobtpuError):
    """Another pass holds the lock for longer than we are willing to wait."""


class RemoteError(JobtpuError):
    """A machine could not be reached or refused us (unreachable host, bad key, changed host key)."""


class UnreachableError(RemoteError):
    """The machine could not be reached or refused us before anything ran there."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, where jobtpu asks for it to interrupt like Ctrl-C: cleanup runs, `except Exception` does not
    swallow it, and the process exits 143."""
