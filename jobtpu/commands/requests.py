"""`jobtpu requests`: in a shared home, your submits and acts waiting in the spool for the runner's
next pass, and the runner's answers to the ones it carried out (docs/reference/home-files.md §1.3)."""

from __future__ import annotations

import os

from jobtpu.commands import args
from jobtpu.commands.common import note
from jobtpu.home.layout import Home
from jobtpu.home.roles import Layout, role_of, runner_name

SHOWN_ANSWERS = 20


def requests(home: Home) -> int:
    from jobtpu.commands.act_request import decode, in_words
    from jobtpu.commands.relay import own_reply_key, read_reply
    from jobtpu.errors import JobtpuError
    from jobtpu.home import safefs, spool
    from jobtpu.home.roles import REPLIES
    from jobtpu.home.trust import account_name
    from jobtpu.render.text import printable
    from jobtpu.schema.decode import decode_sent
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.spool import MAX_REQUEST_BYTES, ActRequest

    role = role_of(home.root)
    if role.layout is not Layout.SHARED:
        note("this home is not shared: commands act at once, there are no requests")
        return 0
    me = account_name(os.geteuid())
    fd = spool.open_spool(home)
    try:
        waiting = []
        for entry in spool.entries(spool.names_in(fd)):
            try:
                st = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if st.st_uid != os.geteuid() and not role.is_runner:
                continue
            who = "" if st.st_uid == os.geteuid() else f" (from {account_name(st.st_uid)})"
            if entry.kind == "submit":
                ids = f"job {entry.first}" if entry.n == 1 else f"jobs {entry.first}-{entry.first + entry.n - 1}"
                waiting.append(f"submit of {ids}{who}")
                continue
            try:
                raw, _ = spool.read_request(fd, entry.name, MAX_REQUEST_BYTES)
                words = in_words(decode(decode_sent(raw, ActRequest)))
            except (OSError, safefs.UnsafePath, msgspec.DecodeError, JobtpuError):
                words = entry.name
            waiting.append(f"{words}{who}")
    finally:
        os.close(fd)
    print(f"waiting for the next pass of {runner_name(role)}:" if waiting else "nothing waits in the spool")
    for line in waiting:
        print(printable(f"  {line}"))
    answers = []
    try:
        names = sorted(os.listdir(home.root / REPLIES), reverse=True)
    except OSError:
        names = []
    private = own_reply_key(home) if names else None  # the runner's own view opens no member's words
    for name in names:
        reply = read_reply(home, name, private)
        if reply is None or (reply.account != me and not role.is_runner):
            continue
        verdict = "done" if reply.code == 0 else f"refused: {reply.lines[0] if reply.lines else 'exit ' + str(reply.code)}"
        answers.append(f"{reply.what or name}: {verdict}")
        if len(answers) == SHOWN_ANSWERS:
            break
    if answers:
        print("answered (newest first):")
        for line in answers:
            print(printable(f"  {line}"))
    return 0


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "requests")
    p.set_defaults(func=lambda home, a: requests(home))
