"""The acts of `jobtpu serve` (kill, resume, rerun, hold, release, tag, note; the fleet page's
machine acts are fleet_acts.py's, dispatched from here): a submitted form
becomes the command's own words (pure: `act_words`), which run through the CLI's own functions as
the server's account and its jobtpu user, fixed at start: `relay.carry_out_words` (the command
line's one parser, then the function a shared home's runner uses for a member's request: the same
ownership rule, `--force` recorded as a forced act, and wait for a running pass), or, where this
account is a member of a shared home, `relay.send_act` (a request, as the command line sends it)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import threading
import time
from collections.abc import Mapping, Sequence

from jobtpu.errors import JobtpuError, UsageError
from jobtpu.home.layout import Home

ACTS = ("kill", "resume", "rerun", "hold", "release", "tag", "note")
# Those whose command has --dry-run; tag and note are shown as the command they will run.
DRY_RUNS = frozenset({"kill", "resume", "rerun", "hold", "release", "submit"})
SELECTORS = (("sel_tag", "--tag"), ("sel_name", "--name"), ("sel_status", "--status"), ("sel_sweep", "--sweep"),
             ("sel_user", "--user"))
MAX_TEXT = 2000

# carry_out catches a command's lines by redirecting stdout and stderr: one act at a time.
_ONE_AT_A_TIME = threading.Lock()


def act_words(form: Mapping[str, Sequence[str]]) -> list[str]:
    """Pure: the command's words for a submitted act form; UsageError for anything else. Values
    travel as the values of options (or after "--"), so no form text is ever taken for an option."""
    from jobtpu.commands import args
    from jobtpu.web.fleet_acts import MACHINE_ACTS, machine_words

    verb = _one(form, "verb")
    if verb in MACHINE_ACTS:  # the fleet page's (fleet_acts.py)
        return machine_words(form, verb)
    if verb == "submit":  # the submit page's (submit_form.py)
        from jobtpu.web.submit_form import submit_words

        return submit_words(form)
    if verb not in ACTS:
        raise UsageError(f"{verb!r} is not an act here", hint=f"choose one of {', '.join((*ACTS, *MACHINE_ACTS))}")
    try:
        ids = [str(args.job_id(i)) for i in form.get("id", []) if i]
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"a job id: {e}", hint="tick jobs in the table") from None
    force = ["--force"] if _one(form, "force") in ("1", "on") else []
    text = _one(form, "value")
    if len(text) > MAX_TEXT:
        raise UsageError(f"the text is longer than {MAX_TEXT} characters", hint="shorten it")
    if verb == "note":
        machine = _one(form, "machine")
        if machine:
            return ["note", f"--machine={machine}", "--", text]
        if len(ids) != 1:
            raise UsageError("a note is set on one job at a time", hint="tick one job, or open its page")
        return ["note", *force, "--", ids[0], text]
    if verb == "tag":
        changes = text.split()
        if not ids or not changes or any(c[:1] not in "+-" or c[1:2] in ("", "+", "-") for c in changes):
            raise UsageError("tag needs jobs and changes like +best -draft",
                             hint="tick jobs and write the changes, each starting with + or -")
        return ["tag", *force, *ids, *changes]
    selectors = [w for key, option in SELECTORS for v in form.get(key, []) if v for w in (f"{option}={v}",)]
    if _one(form, "sel_all_users") == "1":
        selectors.append("--all-users")
    if not ids and not selectors:
        raise UsageError(f"nothing to {verb}: no job ticked", hint="tick jobs in the table, or act on the view's selection")
    return [verb, *ids, *selectors, *force]


def _one(form: Mapping[str, Sequence[str]], key: str) -> str:
    values = form.get(key) or [""]
    return values[0]


def preview_words(words: list[str]) -> list[str] | None:
    """Pure: the words of the act's --dry-run; None for an act that has none (tag, note). Before a
    "--", whose words the command takes as they are."""
    if words[0] not in DRY_RUNS:
        return None
    at = words.index("--") if "--" in words else len(words)
    return [*words[:at], "--dry-run", *words[at:]]


def run(home: Home, words: list[str], user: str) -> tuple[int, list[str]]:
    """The act, as this account and `user`: its exit code and the lines it said (first, when it had
    to wait for a running pass, how long: the command line's wait, in the server's worker thread)."""
    from jobtpu.commands import relay
    from jobtpu.home.roles import role_of
    from jobtpu.web import fleet_acts

    with _ONE_AT_A_TIME:
        if words[0] == "submit":
            from jobtpu.commands.common import error_text
            from jobtpu.web.submit_form import own_folder

            try:
                words = own_folder(home, user, words)
            except JobtpuError as e:
                return e.exit_code, [error_text(e)]
        if fleet_acts.is_machine_act(words) or words[0] == "submit":
            return fleet_acts.run_words(home, words)
        role = role_of(home.root)
        if not role.is_member:
            busy, start = pass_running(home), time.monotonic()
            code, lines = relay.carry_out_words(home, words, os.getuid(), user)
            waited = [f"a pass was running: this waited {time.monotonic() - start:.1f} s for it to end"] if busy else []
            return code, [*waited, *lines]
        from jobtpu.commands.common import error_text, kept_lines

        out = io.StringIO()
        code = 0
        with kept_lines() as lines, contextlib.redirect_stderr(out):
            try:
                from jobtpu.commands.act_request import parse_act

                code = relay.send_act(home, role, parse_act(words), user)
            except JobtpuError as e:
                code = e.exit_code
                lines.append(error_text(e))
        return code, [*lines, *(line for line in out.getvalue().splitlines() if line.strip())]


def pass_running(home: Home) -> bool:
    """Whether a pass holds the home's pass lock now (asked without waiting, and let go at once)."""
    import fcntl

    try:
        fd = os.open(home.pass_lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing lets go of the shared lock, if taken
    return False
