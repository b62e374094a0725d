"""Whose consent a file carries (docs/design.md §7): a pass runs code or uses a credential as its own
account only when a file that account alone could have written says so.

A file is *trusted* by the account running this process when it is a regular file that account owns,
no group or other write bit is set, and it has one link. A file a teammate wrote, or `mv`d into a
group-writable folder, is the teammate's, so it is never trusted by another account's pass.

`runner.json` at the top of a home is such a file: honoured only when trusted, it may name the
account whose passes run every member's local jobs and hold the privileged settings that
machines.json may carry only when it is trusted itself (identity files, credentials, endpoints,
command destinations, the local machine's root and setup)."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Any

from jobtpu.errors import ConfigError
from jobtpu.home import safefs
from jobtpu.schema.msgspec_lib import msgspec

RUNNER_FILE = "runner.json"
MAX_RUNNER_BYTES = 1 << 20


def account_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def why_untrusted(st: os.stat_result, euid: int, links_count: bool = True) -> str | None:
    """None when the file whose stat this is carries the consent of account `euid`, else why not
    (the end of a sentence "NAME ..."). Pure: a function of the stat result and the account.
    `links_count` False: a second hard link is no sign against it (its folder is `euid`'s alone to
    write, so no other account can have made the name, folder_is_own)."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != euid:
        return f"is {account_name(st.st_uid)}'s, not {account_name(euid)}'s"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by its group or by everyone"
    if links_count and st.st_nlink != 1:
        return "has other hard links"
    return None


def folder_is_own(st: os.stat_result, euid: int) -> bool:
    """Pure: whether names in the folder whose stat this is can only have been made by account `euid`
    (its folder, which neither its group nor others may write)."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == euid and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read_checked(root: Path, rel: str, limit: int = MAX_RUNNER_BYTES) -> tuple[bytes, os.stat_result] | None:
    """The bytes and the stat of `root/rel`, opened through safefs (no link, no FIFO); None when absent."""
    try:
        fd = safefs.open_file(root, rel)
    except FileNotFoundError:
        return None
    try:
        return safefs.read_fd(fd, limit), os.fstat(fd)
    finally:
        os.close(fd)


# ---- runner.json ---------------------------------------------------------------------------------

class Runner(msgspec.Struct, frozen=True):
    """What a trusted runner.json says (absent, or not trusted: `Runner()` with `problem` set)."""

    runner: str | None = None  # the account whose passes run every member's local jobs
    allow_private_webhooks: bool = False
    privileged: dict[str, Any] = msgspec.field(default_factory=dict)  # machines.json's shape, privileged keys only
    problem: str | None = None  # one line: why a runner.json present was not honoured

    def runs_for_team(self, euid: int) -> bool:
        return self.runner is not None and self.runner == account_name(euid)


def load_runner(home_root: Path, euid: int | None = None) -> Runner:
    """runner.json as the account `euid` (this process's) may use it."""
    euid = os.geteuid() if euid is None else euid
    try:
        found = read_checked(home_root, RUNNER_FILE)
    except safefs.UnsafePath as e:
        return Runner(problem=f"{e.message}: not used")
    if found is None:
        return Runner()
    data, st = found
    why = why_untrusted(st, euid)
    if why is not None:
        return Runner(problem=f"{RUNNER_FILE} {why}: not used (a pass honours only a runner.json of its own account "
                              "that nobody else can write)")
    return parse_runner(data)


def parse_runner(data: bytes) -> Runner:
    """runner.json's text as its type (schema/runner.py); anything wrong is one ConfigError naming
    runner.json and the key."""
    from jobtpu.schema.decode import FileRefused, decode, read_file
    from jobtpu.schema.msgspec_lib import UnsetType
    from jobtpu.schema.runner import RunnerFile, RunnerMachine, privileged_keys

    hint = f"fix {RUNNER_FILE}"
    doc: RunnerFile = read_file(data, RunnerFile, Path(RUNNER_FILE), RUNNER_FILE, hint)
    machines: dict[str, RunnerMachine] = {}
    for name, entry in ({} if isinstance(doc.machines, UnsetType) else doc.machines).items():
        try:
            machines[name] = decode(entry, RunnerMachine, owner=f"machines.{name}")
        except FileRefused as e:
            raise ConfigError(f"{RUNNER_FILE}: {e}", hint=hint) from None
    return Runner(runner=doc.runner, allow_private_webhooks=doc.allow_private_webhooks,
                  privileged=privileged_keys(doc, machines))


def write_runner(home_root: Path, doc: dict[str, Any]) -> None:
    """runner.json, owned by this account, mode 0644: its group may read it, nobody else may write it."""
    import json

    parse_runner(json.dumps(doc).encode())  # refuse what a pass would refuse
    from jobtpu.home.layout import write_atomic

    write_atomic(home_root / RUNNER_FILE, (json.dumps(doc, indent=2) + "\n").encode(), mode=0o644)
