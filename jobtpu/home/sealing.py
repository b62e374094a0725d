"""Sealed boxes in a shared home (docs/reference/home-files.md §1.3, docs/design.md §7): what a
member leaves in the spool and what the runner answers in `replies/` are files the whole group can
read, so their private parts travel sealed (Curve25519 sealed boxes: only the holder of the private
key opens them, and the sender needs no key of its own).

- The runner's key pair: `runner.key` (0600, the runner's alone) and `runner.pub` (0640), at the
  top of the home. A member seals its secret `--env` values to `runner.pub`, taken only when it is
  a regular file of the runner's with one link that nobody else can write.
- A member's reply key: `reply.key` (0600) in the member's own folder of the spool
  (`spool.member_cache`). Each request carries its public half; the runner seals the reply to it.

PyNaCl is imported here alone, and only when a box is made or opened: a private home's commands
never load it."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from jobtpu.errors import JobtpuError
from jobtpu.home import safefs
from jobtpu.home.trust import folder_is_own

if TYPE_CHECKING:
    from jobtpu.schema.spool import Reply

RUNNER_KEY = "runner.key"
RUNNER_PUB = "runner.pub"
REPLY_KEY = "reply.key"
KEY_BYTES = 32  # a Curve25519 key, raw


# ---- pure: which key file may be used -------------------------------------------------------------

def why_not_private_key(st: os.stat_result, me: int, links_count: bool = True) -> str | None:
    """Pure: why a private key file is not one to use (None: it is): this account's regular file
    with one link, 32 bytes, readable by nobody else. `links_count` False: a second link is no sign
    against it (its folder is this account's alone, trust.folder_is_own)."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != me:
        return "is another account's"
    if links_count and st.st_nlink != 1:
        return "has other hard links"
    if st.st_mode & 0o077:
        return "is readable or writable by other accounts"
    if st.st_size != KEY_BYTES:
        return f"is not a {KEY_BYTES}-byte key"
    return None


def why_not_public_key(st: os.stat_result, runner: int) -> str | None:
    """Pure: why `runner.pub` is not the runner's key (None: it is): a regular file of the runner's
    with one link, 32 bytes, that neither the group nor others can write."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != runner:
        return "is not the runner's file"
    if st.st_nlink != 1:
        return "has other hard links"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by others than the runner"
    if st.st_size != KEY_BYTES:
        return f"is not a {KEY_BYTES}-byte key"
    return None


# ---- boxes ------------------------------------------------------------------------------------------

def seal(public: bytes, data: bytes) -> bytes:
    """`data` sealed to `public` (ValueError when it is not a key)."""
    from nacl.exceptions import CryptoError
    from nacl.public import PublicKey, SealedBox

    try:
        return bytes(SealedBox(PublicKey(public)).encrypt(data))
    except CryptoError as e:  # nacl's ValueError is a CryptoError too
        raise ValueError(str(e)) from None


def unseal(private: bytes, blob: bytes) -> bytes | None:
    """What `blob` holds, or None when it was not sealed to this key (or is damaged)."""
    from nacl.exceptions import CryptoError
    from nacl.public import PrivateKey, SealedBox

    try:
        return bytes(SealedBox(PrivateKey(private)).decrypt(blob))
    except CryptoError:
        return None


def public_of(private: bytes) -> bytes:
    from nacl.public import PrivateKey

    return bytes(PrivateKey(private).public_key)


def _new_private() -> bytes:
    from nacl.public import PrivateKey

    return bytes(PrivateKey.generate())


# ---- the runner's key pair ----------------------------------------------------------------------------

def ensure_runner_keys(root: Path, check_pair: bool = False) -> list[str]:
    """As the runner: `runner.key` and `runner.pub` at the top of the home, made when missing or not
    fit to use (another account's, a link, readable by others: then a new pair, since the old key
    may be known). With `check_pair` (init, the move from the old layout) `runner.pub` is also
    checked against the key. One line when an unfit key was replaced (requests sealed to it then
    do not open: their senders submit again)."""
    top = safefs.open_dir(root)
    try:
        me = os.geteuid()
        key_st = safefs.lstat_in(top, RUNNER_KEY)
        why = None if key_st is None else why_not_private_key(key_st, me)
        if key_st is None or why is not None:
            private = _new_private()
            try:
                safefs.write_in(top, RUNNER_KEY, private, 0o600)
                safefs.write_in(top, RUNNER_PUB, public_of(private), 0o640)
            except OSError as e:  # a folder of that name, left in the old layout: not ours to remove
                return [f"{RUNNER_KEY}, {RUNNER_PUB}: cannot make the runner's key pair ({e.strerror or e}); move "
                        "them away by hand (members cannot send secret --env values until then)"]
            return [] if why is None else [f"{RUNNER_KEY} {why}: replaced by a new key pair (secrets sealed to the "
                                           "old one are refused; their senders submit again)"]
        pub_st = safefs.lstat_in(top, RUNNER_PUB)
        if pub_st is None or why_not_public_key(pub_st, me) is not None or check_pair:
            public = public_of(_read_key(top, RUNNER_KEY))
            if pub_st is None or why_not_public_key(pub_st, me) is not None or _read_key(top, RUNNER_PUB) != public:
                safefs.write_in(top, RUNNER_PUB, public, 0o640)
        return []
    finally:
        os.close(top)


def runner_private_key(root: Path) -> bytes:
    """The runner's own private key (as the runner: take_in made it before any intake)."""
    top = safefs.open_dir(root)
    try:
        st = safefs.lstat_in(top, RUNNER_KEY)
        why = "is missing" if st is None else why_not_private_key(st, os.geteuid())
        if why is not None:
            raise JobtpuError(f"{RUNNER_KEY} {why}", hint="the runner's next pass makes a new one")
        return _read_key(top, RUNNER_KEY)
    finally:
        os.close(top)


def runner_public_key(root: Path, runner_name: str) -> bytes:
    """As a member: the runner's public key, taken only when `runner.pub` is the runner's own file
    (the owner of the top folder); anything else is one line, and nothing is sealed to it."""
    hint = f"ask {runner_name}, this home's runner, to run `jobtpu manage`: its pass makes a new one"
    try:
        fd = safefs.open_file(root, RUNNER_PUB)
    except FileNotFoundError:
        raise JobtpuError(f"this shared home has no {RUNNER_PUB} yet, so your secret --env values cannot be "
                          "sealed to its runner; nothing was sent", hint=hint) from None
    except safefs.UnsafePath as e:
        raise JobtpuError(f"{e.message}: your secret --env values are not sealed to it; nothing was sent",
                          hint=hint) from None
    try:
        why = why_not_public_key(os.fstat(fd), os.stat(root).st_uid)
        if why is not None:
            raise JobtpuError(f"{RUNNER_PUB} {why}: your secret --env values are not sealed to it; nothing was sent",
                              hint=hint)
        return safefs.read_fd(fd, KEY_BYTES)
    finally:
        os.close(fd)


# ---- a member's reply key --------------------------------------------------------------------------------

def reply_key(folder: Path) -> bytes:
    """This account's private reply key in its own folder of the spool (`spool.member_cache`), made
    when missing. Two commands making it at once keep the first one's."""
    key = _reply_key(folder, create=True)
    assert key is not None  # made above when it was missing
    return key


def reply_key_if_any(folder: Path) -> bytes | None:
    """This account's reply key, or None when it has made none yet (nothing is sealed to it then)."""
    return _reply_key(folder, create=False)


def _reply_key(folder: Path, create: bool) -> bytes | None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if safefs.lstat_in(fd, REPLY_KEY) is None:
            if not create:
                return None
            tmp, out = safefs.new_temp(fd, REPLY_KEY, 0o600)
            try:
                try:
                    safefs.write_all(out, _new_private())
                    os.fsync(out)
                finally:
                    os.close(out)
                with contextlib.suppress(FileExistsError):  # another command of ours made it first
                    os.link(tmp, REPLY_KEY, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            finally:
                os.unlink(tmp, dir_fd=fd)
        st = safefs.lstat_in(fd, REPLY_KEY)
        # Its maker links it in from a temporary name it then removes, so another command of ours sees
        # two links for a moment (and for good where the maker was killed between): in a folder nobody
        # else can write, that second name is ours too.
        own = folder_is_own(os.fstat(fd), os.geteuid())
        why = "is missing" if st is None else why_not_private_key(st, os.geteuid(), links_count=not own)
        if why is not None:
            raise JobtpuError(f"{folder.parent.name}/{folder.name}/{REPLY_KEY} {why}",
                              hint="remove it: your next request makes a new one (answers sealed to the old one "
                                   "then show only whether they were done)")
        return _read_key(fd, REPLY_KEY)
    finally:
        os.close(fd)


def _read_key(dir_fd: int, name: str) -> bytes:
    fd = safefs.open_in(dir_fd, name)
    try:
        return safefs.read_fd(fd, KEY_BYTES)
    finally:
        os.close(fd)


# ---- replies ---------------------------------------------------------------------------------------------

def sealed_reply(reply: Reply, key: bytes) -> Reply:
    """The reply as the group may read it: its words (what, lines, ids) sealed to the sender's reply
    key, or dropped when there is no key to seal them to (a request of an older jobtpu, or a key
    that is not one): then it says only whether it was done."""
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.spool import Reply, ReplyContent

    bare = Reply(request=reply.request, account=reply.account, code=reply.code, at=reply.at)
    if len(key) != KEY_BYTES:
        return bare
    content = ReplyContent(what=reply.what, lines=reply.lines, ids=reply.ids)
    with contextlib.suppress(ValueError):
        bare.sealed = seal(key, msgspec.json.encode(content))
    return bare


def opened_reply(reply: Reply, private: bytes | None) -> Reply:
    """The reply with its words opened by this account's reply key; as it is when they are not
    sealed to that key (another member's, or a key since lost)."""
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.spool import ReplyContent

    if not reply.sealed or private is None:
        return reply
    raw = unseal(private, reply.sealed)
    if raw is None:
        return reply
    try:
        content = msgspec.json.decode(raw, type=ReplyContent)
    except msgspec.DecodeError:
        return reply
    reply.what, reply.lines, reply.ids, reply.sealed = content.what, content.lines, content.ids, b""
    return reply
