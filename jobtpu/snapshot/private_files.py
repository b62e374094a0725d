"""What a snapshot must not carry unless asked to (--allow-secrets): the submitting account's login home
folder, folders of credentials, and private-key files (docs/reference/commands.md §2.2.1). An archive is
readable by the whole team in a shared home and is copied to every machine that runs the job.

Speed: the folders and key names are checked on the names the listing already holds (no I/O); only
files named like a PEM key (*.pem, *.key, or an extension-less name with "key" in it) have their
head read, since reading every file without an extension (scripts, LICENSE, data) would cost a
snapshot of a large tree a read per file on every submit."""

from __future__ import annotations

import os
import pwd
import re
import shlex
from collections.abc import Callable, Iterable

from jobtpu.errors import JobtpuError

CREDENTIAL_FOLDERS = (".ssh", ".gnupg", ".aws", ".config/gcloud")
_KEY_NAME = re.compile(r"id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?\Z")  # ssh-keygen's default private keys
_PEM_SUFFIXES = (".pem", ".key")
HEAD_BYTES = 64 << 10  # a PEM bundle may put certificates before its key
_PEM_KEY = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
ALLOW_HINT = "pass --allow-secrets to send it anyway"


def login_home() -> str | None:
    """The real path of the submitting account's home folder, from the password database."""
    try:
        return os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        return None


def check_not_login_home(src: str) -> None:
    """Refuse a snapshot of the account's own home folder, before it is walked."""
    home = login_home()
    if home is not None and home != "/" and os.path.realpath(src) == home:
        raise JobtpuError(f"the folder to snapshot is your login home folder {src}: its keys and credentials "
                          "would go to the team and to the machines",
                          hint=f"submit from a project folder or pass --dir PATH; {ALLOW_HINT}")


def credential_folder(rel: str) -> str | None:
    """The credentials folder (relative to the snapshot) `rel` lies in, or None."""
    parts = rel.split("/")
    for i, part in enumerate(parts[:-1]):
        if part in (".ssh", ".gnupg", ".aws"):
            return "/".join(parts[:i + 1])
        if part == ".config" and parts[i + 1:i + 2] == ["gcloud"] and i + 2 < len(parts):
            return "/".join(parts[:i + 2])
    return None


def is_key_name(rel: str) -> bool:
    return bool(_KEY_NAME.match(rel.rpartition("/")[2]))


def may_hold_pem_key(rel: str) -> bool:
    name = rel.rpartition("/")[2].lower()
    return name.endswith(_PEM_SUFFIXES) or ("." not in name.lstrip(".") and "key" in name)


def holds_pem_key(head: bytes) -> bool:
    return bool(_PEM_KEY.search(head))


def _may_flag(files: Iterable[str]) -> list[str]:
    """The names holding what one of the checks above looks for, in order: plain substring tests, the
    cheapest pass over every name (20,000 names: a few ms); the checks then run on these few alone."""
    return [rel for rel in files if "key" in rel or "Key" in rel or "KEY" in rel or "id_" in rel or ".pem" in rel
            or ".PEM" in rel or ".ssh/" in rel or ".gnupg/" in rel or ".aws/" in rel or "/gcloud/" in rel]


def first_secret(files: Iterable[str], read_head: Callable[[str], bytes]) -> tuple[str, str] | None:
    """The first credential among the files (relpaths of regular files): (its relpath, what it is)."""
    for rel in _may_flag(files):
        if (folder := credential_folder(rel)) is not None:
            return folder, "a folder of credentials"
        if is_key_name(rel):
            return rel, "a private key"
        if may_hold_pem_key(rel) and holds_pem_key(read_head(rel)):
            return rel, "a file holding a PEM private key"
    return None


def check_no_secrets(src: str, files: Iterable[str], read_head: Callable[[str], bytes]) -> None:
    found = first_secret(files, read_head)
    if found is not None:
        rel, what = found
        raise JobtpuError(f"the snapshot of {src} would carry {rel} ({what}) to the team and to the machines",
                          hint=f"leave it out with --exclude {shlex.quote(rel)}, or {ALLOW_HINT}")
