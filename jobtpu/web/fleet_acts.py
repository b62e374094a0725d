"""The fleet page's acts (docs/reference/commands.md §2.29): `tpu apply`, `tpu reapply`,
`tpu restart`, `tpu setup` and `machines drain`/`undrain` of one machine. A form becomes the
command's own words (pure: `machine_words`), previewed as the command it will run and what that
does, and run through the command line's own parser and member check (so the command's own rule
says who may: in a shared home only the runner), as the server's account and jobtpu user."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence

from jobtpu.errors import JobtpuError, UsageError
from jobtpu.home.layout import Home

TPU_OPS = ("apply", "reapply", "restart", "setup")
MACHINE_ACTS = (*TPU_OPS, "drain", "undrain")
# What each does, said in the preview before the person confirms (docs/reference/commands.md, tpu).
WHAT_IT_DOES = {
    "apply": "creates the TPU node as machines.json describes it (a later pass follows the operation)",
    "reapply": "deletes the TPU node and creates it again (refused while a job runs there)",
    "restart": "stops and starts the TPU node (single-host v4 and newer)",
    "setup": "runs the machine's setup commands again on every worker now",
    "drain": "starts no new job on the machine; what runs there goes on",
    "undrain": "lets queued jobs start on the machine again",
}
MAX_NAME = 200


def machine_words(form: Mapping[str, Sequence[str]], verb: str) -> list[str]:
    """Pure: the command's words for a machine act's form; UsageError for anything else. The name
    travels after "--" (or as an option's value), never where it could be read as an option."""
    machine = (form.get("machine") or [""])[0]
    if not machine or len(machine) > MAX_NAME or machine.startswith("-") or not machine.isprintable():
        raise UsageError(f"{verb} needs a machine's name", hint="use the buttons of a machine on the machines page")
    force = (form.get("force") or [""])[0] in ("1", "on")
    if verb in ("drain", "undrain"):
        reason = (form.get("value") or [""])[0]
        return ["machines", verb, machine, *([f"--reason={reason}"] if verb == "drain" and reason else [])]
    return ["tpu", verb, *(["--force"] if force and verb == "setup" else []), "--", machine]


def is_machine_act(words: Sequence[str]) -> bool:
    return bool(words) and words[0] in ("tpu", "machines")


def shown_words(words: Sequence[str]) -> str:
    """The words as the person would type them (without the "--" that keeps a name a name)."""
    return " ".join(w for w in words if w != "--")


def preview(home: Home, words: list[str]) -> tuple[int, list[str]]:
    """What the act would do, or the one line that refuses it: who may is the command's own rule
    (in a shared home a member may not: it changes where everyone's jobs run)."""
    from jobtpu.commands.common import error_text
    from jobtpu.commands.relay import refuse_runner_only
    from jobtpu.home.roles import role_of

    role = role_of(home.root)
    if role.is_member:
        e = refuse_runner_only(role, shown_words(words[:2]))
        return e.exit_code, [error_text(e)]
    verb = words[1]
    try:
        check_act(home, words)
    except JobtpuError as e:
        return e.exit_code, [error_text(e)]
    return 0, [f"would run: jobtpu {shown_words(words)}", f"it {WHAT_IT_DOES[verb]}"]


def check_act(home: Home, words: list[str]) -> None:
    """What the command itself would refuse before it does anything, said in the preview (as a
    dry run says it), not only once confirmed: a machine no name of machines.json means, a TPU act
    on a machine that is no TPU, a drain's reason that is no note (docs/reference/commands.md §2.29)."""
    from jobtpu.commands.annotate import note_text
    from jobtpu.home.machines import load_fleet

    verb = words[1]
    name = words[-1] if verb in TPU_OPS else words[2]
    fleet = load_fleet(home)
    group = fleet.slices_of(name)
    machine = group[0] if group else fleet.require(name)
    if verb in TPU_OPS:
        from jobtpu.tpu.operations import require_tpu

        require_tpu(machine)  # the command's own line
    reason = next((w.removeprefix("--reason=") for w in words if w.startswith("--reason=")), "")
    note_text([reason])


def run_words(home: Home, words: list[str]) -> tuple[int, list[str]]:
    """A command's words through the command line's parser, its member check (front.as_member) and
    the command's function, as `jobtpu` runs them: its exit code and its lines (the submit page's
    `submit` too)."""
    from jobtpu.commands.common import error_text
    from jobtpu.commands.front import as_member
    from jobtpu.commands.parsing import parse_command_line

    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            parsed, typed = parse_command_line(words)
            relayed = as_member(home, parsed.command, typed, parsed)
            code = relayed if relayed is not None else int(parsed.func(home, parsed) or 0)
        except SystemExit as e:  # the parser's own line is in `out`
            code = e.code if isinstance(e.code, int) else 2
        except JobtpuError as e:
            code = e.exit_code
            out.write(error_text(e) + "\n")
    return code, [line for line in out.getvalue().splitlines() if line.strip()]
