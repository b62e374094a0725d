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
        # A notebook's traceback, or a caller's f"{e}", shows only str(): the hint goes with the line.
        # The command line prints `message` and `hint` apart (commands/common.error_text).
        return self.message + (f"\nhint: {self.hint}" if self.hint else "")


def message_of(error: BaseException) -> str:
    """An error's one line for a line of our own: a JobtpuError's message without its hint, else str()."""
    return error.message if isinstance(error, JobtpuError) else str(error)


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


class JobFailed(JobtpuError):
    """What `Job.result()` raises for a job that failed or was killed: which, why, and its exit code."""

    def __init__(self, job_id: int, status: str, reason: str | None, exit_code: int | None) -> None:
        code = f"exit {exit_code}" if exit_code is not None else ""
        said = reason if reason and reason != status else ""  # a kill's reason is `killed`: said once
        why = ", ".join(w for w in (said, "" if said.startswith(code) else code) if w)
        super().__init__(f"job {job_id} {status}" + (f" ({why})" if why else ""),
                         hint=f"`jobtpu tail {job_id}` shows its log, `jobtpu events --job {job_id}` what happened")
        self.job_id = job_id
        self.status = status
        self.reason = reason
        self.job_exit_code = exit_code  # (exit_code is the CLI's status for any JobtpuError)


class Terminated(KeyboardInterrupt):
    """SIGTERM, where jobtpu asks for it to interrupt like Ctrl-C: cleanup runs, `except Exception` does not
    swallow it, and the process exits 143."""


# ---- credentials --------------------------------------------------------------------------------
# What an API's 401 means (a deleted key's self-signed token, an expired login), instead of Google's
# paragraph and its link: with a key's usual path the whole line stays under 200 characters.
REFUSED_BY_GOOGLE = "Google refused it (invalid authentication credentials)"
# google-auth and the OS report an unusable credentials file in many shapes, some with a paragraph
# and a URL; a user needs the file, the cause in a few words and what to do (docs/reference/machines-json.md §3.8).
# Tried in order against the error and the errors it was raised from, by type name or by text.
_CREDENTIALS_CAUSES: tuple[tuple[str, str], ...] = (
    ("FileNotFoundError|was not found\\.?$|No such file", "no such file"),
    ("IsADirectoryError|Is a directory", "a folder, not a key file"),
    ("PermissionError|Permission denied", "not readable by this account (permission denied)"),
    ("default credentials were not found", "no application-default credentials on this machine"),
    ("JSONDecodeError|UnicodeDecodeError|not a valid json|has no attribute 'get'", "not a JSON key file"),
    ("does not have a valid type|a key file of type", "not a service-account key (no known \"type\")"),
    ("PEM|No key could be detected|deserialize|private key", "its private_key is not a valid key"),
    ("Unauthenticated|invalid authentication credentials", REFUSED_BY_GOOGLE),
)
_MISSING_FIELDS = r"missing fields ([\w, ]+)"


def credentials_cause(error: BaseException) -> str:
    """A few words for why credentials could not be loaded or used, from the error google-auth or the OS raised."""
    import re

    chain = _chain(error)
    for e in chain:
        missing = re.search(_MISSING_FIELDS, str(e))
        if missing:
            fields = sorted(f.strip() for f in missing[1].split(",") if f.strip())  # google-auth's order varies
            return f"an incomplete service-account key (no {', '.join(fields)})"
    for pattern, cause in _CREDENTIALS_CAUSES:
        if any(re.search(pattern, f"{type(e).__name__} {_text(e)}") for e in chain):
            return cause
    if type(error).__name__ == "RefreshError":  # the token endpoint refused the key: its own words
        return f"Google refused it ({_text(error)})"
    return _text(error)


def credentials_message(service: str, setting: str, source: str, error: BaseException | None,
                        cause: str | None = None) -> str:
    """One line for credentials that cannot be used: whose, which file, why, and what to do.
    `setting`: the machines.json key (gcp.credentials, sheet.credentials); `source`: what it holds;
    `cause`: the words for why, when not read from `error`."""
    named = None
    if source == "default":
        from os import environ

        named = environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        fix = f"run `gcloud auth application-default login`, or set {setting} to a key file"
    else:
        fix = f"set {setting} to a valid service-account key file"
    why = cause if cause is not None else credentials_cause(error) if error is not None else "unusable"
    return credentials_line(service, named or source, why, fix, from_variable=named is not None)


def credentials_line(service: str, path: str, cause: str, then: str, from_variable: bool = False) -> str:
    """`SERVICE credentials 'PATH': CAUSE; THEN`: which credentials, why in a few words, what to do."""
    where = f"{path!r} ($GOOGLE_APPLICATION_CREDENTIALS)" if from_variable else repr(path)
    return f"{service} credentials {where}: {cause}; {then}"


def _chain(error: BaseException) -> list[BaseException]:
    """The error, then those it was raised from (google-auth wraps the OS's and the parser's)."""
    chain: list[BaseException] = []
    found: BaseException | None = error
    while found is not None and found not in chain:
        chain.append(found)
        nested = [a for a in found.args if isinstance(a, BaseException)]  # google-auth's ('text', cause)
        found = found.__cause__ or found.__context__ or (nested[0] if nested else None)
    return chain


def _text(error: BaseException) -> str:
    """The error's own words, one line, no URL: google-auth's args are often ('text', {details})."""
    import re

    first = error.args[0] if error.args and isinstance(error.args[0], str) else str(error)
    line = (first.strip().splitlines() or [type(error).__name__])[0]
    line = re.sub(r"\s*(To set up|See|For more information)\b.*$", "", re.sub(r"https?://\S+", "", line)).strip()
    return (line if len(line) <= 100 else line[:99] + "…") or type(error).__name__
