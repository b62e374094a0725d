"""Check a snapshot archive against its name and unpack it without trusting it.

A snapshot is named by the digest archive.py computes over its sorted (relpath, kind, content sha256)
entries, so its name can be checked by reading it once. Unpacking writes only what a snapshot can
hold: regular files (mode 0755 or 0644, owned by whoever unpacks) and symlinks, at plain relative
paths, never through a symlink. Anything else (devices, fifos, hard links, absolute or `..` paths,
setuid bits) means the archive is not one jobtpu wrote: it is refused or, for mode bits, dropped.

This module is self-contained (standard library only, Python 3.7+): the home imports it to check its
own copy, and its source is sent to each worker and run there with `python3 -c SOURCE ARCHIVE [DEST]`."""

from __future__ import annotations

import hashlib
import os
import sys
import tarfile
import zlib
from typing import IO, Any

BAD_ARCHIVE_EXIT = 3  # the archive is damaged or not a snapshot: a fresh copy may fix it
CANNOT_WRITE_EXIT = 4  # the archive is fine but the folder could not be written (disk full, permissions)
_CHUNK = 1 << 20


class BadArchive(Exception):
    """The archive does not hold what its name says, or holds something a snapshot never does."""


def check_name(name: str) -> str:
    """The expected digest in an archive's file name `<64 hex>.tar.gz`."""
    digest = name[: -len(".tar.gz")] if name.endswith(".tar.gz") else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise BadArchive(f"{name} is not a snapshot name (<sha256>.tar.gz)")
    return digest


def _member_path(name: str) -> str:
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise BadArchive(f"member {name!r} is not a plain relative path")
    return name


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "l"
    if member.isreg():
        return "x" if member.mode & 0o111 else "f"
    what = ("a device node" if member.ischr() or member.isblk() else "a fifo" if member.isfifo()
            else "a hard link" if member.islnk() else "a folder" if member.isdir() else "a special file")
    raise BadArchive(f"member {member.name!r} is {what}; a snapshot holds only files and symlinks")


def _no_link_on_the_way(dest: str, rel: str) -> None:
    """Refuse a path whose parent folders include a symlink: writing there could land outside dest."""
    path = dest
    for part in rel.split("/")[:-1]:
        path = os.path.join(path, part)
        if os.path.islink(path):
            raise BadArchive(f"member {rel!r} lies under a symlink")


def _write_file(dest: str, rel: str, member: tarfile.TarInfo, data: IO[bytes], h: Any) -> None:
    _no_link_on_the_way(dest, rel)
    path = os.path.join(dest, rel)
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise BadArchive(f"member {rel!r} clashes with another member") from None
    except NotADirectoryError:
        raise BadArchive(f"member {rel!r} lies under a file") from None
    with os.fdopen(fd, "wb") as out:
        _copy(data, h, out)
        # Exactly the two modes tarball.py records; no setuid, setgid or sticky bit survives. The time
        # is the archive's, as tar would set it.
        # The umask cuts them as it would tar's (a private home's run folder keeps them its owner's).
        os.fchmod(out.fileno(), (0o755 if member.mode & 0o111 else 0o644) & ~_umask())
        out.flush()
        os.utime(out.fileno(), (member.mtime, member.mtime))


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _copy(data: IO[bytes], h: Any, out: IO[bytes] | None) -> None:
    """Stream data into the hash (and out, when given)."""
    while True:
        chunk = data.read(_CHUNK)
        if not chunk:
            return
        h.update(chunk)
        if out is not None:
            out.write(chunk)


def _make_links(dest: str, links: list[tuple[str, str]]) -> None:
    # Made after every file, so no file member can be written through one of them.
    for rel, target in links:
        _no_link_on_the_way(dest, rel)
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.symlink(target, path)
        except FileExistsError:
            raise BadArchive(f"member {rel!r} clashes with another member") from None


def unpack(archive: str, dest: str | None, fileobj: IO[bytes] | None = None) -> None:
    """Check `archive` against its name; with dest (an empty folder), also unpack it there.
    `fileobj`: the archive already opened (the home opens its copy through safefs, never a link or
    a FIFO). Raises BadArchive, or OSError when dest cannot be written."""
    expected = check_name(os.path.basename(archive))
    digest = hashlib.sha256()
    links: list[tuple[str, str]] = []
    try:
        with tarfile.open(archive, mode="r:gz", fileobj=fileobj, encoding="utf-8", errors="surrogateescape") as tf:
            for member in tf:
                rel = _member_path(member.name)
                kind = _kind(member)
                h = hashlib.sha256()
                if kind == "l":
                    h.update(member.linkname.encode("utf-8", "surrogateescape"))
                    links.append((rel, member.linkname))
                else:
                    data = tf.extractfile(member)
                    if data is None:  # never for a regular member; a broken tarfile at worst
                        raise BadArchive(f"member {rel!r} has no data")
                    if dest is None:
                        _copy(data, h, None)
                    else:
                        _write_file(dest, rel, member, data, h)
                digest.update(b"%s\0%s\0%s\n" % (rel.encode("utf-8", "surrogateescape"), kind.encode(),
                                                  h.hexdigest().encode()))
    except (tarfile.TarError, zlib.error, EOFError) as e:
        raise BadArchive(f"it is not a readable .tar.gz ({e})") from None
    except OSError as e:
        if e.errno is not None:  # the system's: a missing archive, or a folder we cannot write
            raise
        raise BadArchive(f"it is not a readable .tar.gz ({e})") from None  # gzip's BadGzipFile
    if digest.hexdigest() != expected:
        raise BadArchive("its content does not match its name (damaged or altered)")
    if dest is not None:
        _make_links(dest, links)


def problem(archive: str, fileobj: IO[bytes] | None = None) -> str | None:
    """Why the archive at this path (read from `fileobj` when given) cannot be used (missing,
    unreadable, damaged), or None."""
    try:
        unpack(archive, None, fileobj)
    except FileNotFoundError:
        return "is missing"
    except BadArchive as e:
        return f"is unusable: {e}"
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    return None


def main(argv: list[str]) -> int:
    """ARCHIVE DEST: check and unpack; ARCHIVE alone: only check it (a copy a peer sent, jobtpu/sh/peer.sh)."""
    archive, dest = argv[0], (argv[1] if len(argv) > 1 else None)
    try:
        unpack(archive, dest)
    except BadArchive as e:
        print(f"bad snapshot: {e}", file=sys.stderr)
        return BAD_ARCHIVE_EXIT
    except OSError as e:
        print(f"cannot unpack: {e.strerror or e} {e.filename or ''}".rstrip(), file=sys.stderr)
        return CANNOT_WRITE_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
