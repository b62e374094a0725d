"""A shared home's requests (docs/reference/home-files.md §1.3): a member's acts go into the spool as
requests, and the runner carries them out, through the same command functions, as the account that
owns each request file.

Member side: `send_act` writes the act's values, as the command line's one parser made them
(commands/act_request.py), and returns at once, or, while the runner's loop runs, waits a few seconds
for its reply and prints it. Runner side: `carry_out` runs an act's command function with
`actor.acting_for(sender)` (the ownership rule and every record name the sender), catching what it
says as its reply. Only the commands the command table (commands/table.py) marks RELAYED travel
this way: their values choose jobs and values, never a path, a command to run or a credential."""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobtpu import timing
from jobtpu.commands.common import error_text, note
from jobtpu.errors import JobtpuError
from jobtpu.home import spool
from jobtpu.home.layout import Home
from jobtpu.home.roles import Role, runner_name

if TYPE_CHECKING:
    from jobtpu.commands.act_request import Act
    from jobtpu.schema.spool import Reply

def command_words(argv: Sequence[str], command: str) -> list[str]:
    """Pure: the words from the command on (global options before it, like --home, left out)."""
    words = list(argv)
    i = 0
    while i < len(words) and words[i] != command:
        i += 2 if words[i] == "--home" else 1
    return words[i:]


def refuse_runner_only(role: Role, command: str) -> JobtpuError:
    runner = runner_name(role)
    return JobtpuError(f"`jobtpu {command}` is for this shared home's runner ({runner}): every file of the home "
                       "but your own folder and your requests is written by that account alone",
                       hint=f"ask {runner}; your submits and acts (kill, hold, rerun, tag, note…) go to its passes as requests")


def refuse_old_layout(role: Role, command: str) -> JobtpuError:
    runner = runner_name(role)
    return JobtpuError(f"this shared home still has the old layout, where every member writes every file: "
                       f"`jobtpu {command}` waits until its runner ({runner}) moves it to the one-writer layout",
                       hint=f"{runner} runs `jobtpu init --shared GROUP HOME` (or any pass of theirs does it); "
                            "status, tail, machines and events work meanwhile")


# ---- member side -------------------------------------------------------------------------------------

def send_act(home: Home, role: Role, act: Act, user: str) -> int:
    """Leave an act for the runner; wait for its reply while a loop of the runner's runs."""
    from jobtpu.commands.act_request import encode, in_words
    from jobtpu.home.sealing import public_of, reply_key
    from jobtpu.schema.spool import MAX_REQUEST_BYTES

    name = spool.new_act_name()
    private = reply_key(spool.member_cache(home))
    data = encode(act, user, MAX_REQUEST_BYTES, public_of(private))  # the runner seals its reply to that key
    fd = spool.open_spool(home)
    try:
        spool.put_file(fd, name, data)
    finally:
        os.close(fd)
    runner = runner_name(role)
    if loop_running(home):
        reply = wait_reply(home, name, timing.current().request_wait, private)
        if reply is not None:
            return show_reply(reply)
    note(f"requested: jobtpu {in_words(act)} (carried out by the next pass of {runner}, this home's runner; "
         "`jobtpu requests` shows what waits and the answers)")
    return 0


def loop_running(home: Home) -> bool:
    """Whether the runner's passes run in a loop now (a reply comes within seconds)."""
    from jobtpu.commands.freshness import freshness
    from jobtpu.home.store import Store

    try:
        last = Store(home).load().last_pass
    except JobtpuError:
        return False
    return last is not None and last.every is not None and not freshness(last)[1]


def wait_reply(home: Home, name: str, seconds: float, private: bytes | None) -> Reply | None:
    deadline = time.monotonic() + seconds
    while True:
        reply = read_reply(home, name, private)
        if reply is not None or time.monotonic() >= deadline:
            return reply
        time.sleep(timing.current().spool_poll / 5)


def read_reply(home: Home, name: str, private: bytes | None = None) -> Reply | None:
    """The runner's reply to `name`, its words opened with `private` (this member's reply key, read
    when not given); a reply sealed to another key says only whether it was done."""
    from jobtpu.home.sealing import opened_reply
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.spool import MAX_REPLY_BYTES, Reply

    raw = spool.read_reply(home, name, MAX_REPLY_BYTES)
    if raw is None:
        return None
    try:
        reply: Reply = msgspec.json.decode(raw, type=Reply)
    except msgspec.DecodeError:
        return None
    if reply.sealed and private is None:
        private = own_reply_key(home)
    return opened_reply(reply, private)


def own_reply_key(home: Home) -> bytes | None:
    """This member's reply key, when it has one (the runner has none: members' replies are sealed to them)."""
    from jobtpu.home.roles import role_of
    from jobtpu.home.sealing import reply_key_if_any

    if not role_of(home.root).is_member:
        return None
    return reply_key_if_any(spool.member_cache(home))


def show_reply(reply: Reply) -> int:
    import sys

    from jobtpu.render.text import printable_lines

    for line in reply.lines:
        sys.stderr.write(printable_lines(line) + "\n")
    return reply.code


# ---- runner side -------------------------------------------------------------------------------------

def carry_out(home: Home, act: Act, actor_uid: int, user: str) -> tuple[int, list[str]]:
    """One member's act, as that member: its exit code and every line it said. Only what the
    command's function raises as a JobtpuError is said here; anything else is the caller's to catch."""
    from jobtpu.commands.act_request import function_of, namespace
    from jobtpu.home.actor import Actor, acting_for
    from jobtpu.home.trust import account_name

    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            func = function_of(act.command)
            with acting_for(Actor(actor_uid, account_name(actor_uid), user)):
                code = int(func(home, namespace(act)) or 0)
        except JobtpuError as e:
            code = e.exit_code
            note(error_text(e))
    return code, [line for line in out.getvalue().splitlines() if line.strip()]


def carry_out_words(home: Home, words: list[str], actor_uid: int, user: str) -> tuple[int, list[str]]:
    """An act given as its words (the command first), parsed by the command line's one parser, then
    carried out as `carry_out` does; a mistake in the words is its one line."""
    from jobtpu.commands.act_request import parse_act

    try:
        act = parse_act(words)
    except JobtpuError as e:
        return e.exit_code, [error_text(e)]
    return carry_out(home, act, actor_uid, user)
