"""Writing a snapshot's .tar.gz: deterministic (sorted entries, no owners, mtime 0, modes 644/755/777),
on a thread beside the hashing, into a temporary file of this process that an abort removes."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from jobtpu.errors import JobtpuError
from jobtpu.home.layout import open_new
from jobtpu.snapshot.tree import FolderTree, exclude_hint

if TYPE_CHECKING:
    import tarfile

COMPRESS_LEVEL = 1  # half the time of level 6 for ~10% more bytes to upload (measured with bench/snapshot.py)
_COPY_BYTES = 1 << 20  # the archiver's read size, so also how far it reads past an abort


class _Aborted(Exception):
    """Raised inside the archiver's reads once the snapshot is abandoned (an error, a reuse, Ctrl-C)."""


class Archiver(threading.Thread):
    """Writes src's entries, in the given order, into `tmp` as a normalised tar.gz. A thread is enough:
    file reads and zlib release the GIL, so it runs alongside the hashing at the speed of `tar -z`.
    Setting `aborted` stops it within one read, even in the middle of a large file."""

    def __init__(self, src: str, entries: list[tuple[str, os.stat_result]], tmp: Path) -> None:
        super().__init__(daemon=True)
        self.src, self.entries, self.tmp = src, entries, tmp
        self.done, self.aborted, self.current = 0, False, ""
        self.error: OSError | None = None
        self.start()

    def run(self) -> None:
        import gzip  # here: a snapshot whose archive exists already writes none
        import tarfile

        try:
            with FolderTree(self.src) as tree, os.fdopen(open_new(self.tmp), "wb") as out:
                with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=COMPRESS_LEVEL,
                                   mtime=0) as gz, tarfile.TarFile(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT,
                                                                   copybufsize=_COPY_BYTES) as tf:
                    self._add_all(tree, tf)
                out.flush()
                os.fsync(out.fileno())
        except _Aborted:
            return
        except OSError as e:  # raised as a JobtpuError by the calling thread
            self.error = e

    def _add_all(self, tree: FolderTree, tf: tarfile.TarFile) -> None:
        for rel, st in self.entries:
            if self.aborted:
                raise _Aborted
            info = self._info(tree, rel, st)
            if info.issym():
                tf.addfile(info)
                continue
            self.current = os.path.join(self.src, rel)
            with tree.open(rel) as f:
                tf.addfile(info, _AbortableReader(f, self))

    def _info(self, tree: FolderTree, rel: str, st: os.stat_result) -> tarfile.TarInfo:
        import tarfile

        info = tarfile.TarInfo(rel)  # uid, gid 0 and uname, gname "" already; never a hard link
        info.mtime = 0
        if stat.S_ISLNK(st.st_mode):
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, tree.readlink(rel), 0o777
        else:
            info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
        return info

    def check(self) -> None:
        if (e := self.error) is None:
            return
        name = str(e.filename or "")
        if name.startswith(self.src + os.sep):
            rel = os.path.relpath(name, self.src)
            raise JobtpuError(f"cannot read {name}: {e.strerror}", hint=exclude_hint(rel)) from e
        if e.errno is None:  # tarfile: the file shrank between listing and reading
            raise JobtpuError(f"{self.current} changed while it was archived", hint="run the command again") from e
        raise JobtpuError(f"could not write the snapshot of {self.src}: {e.strerror}",
                          hint=f"check the free space and permissions of {self.tmp.parent}") from e


class _AbortableReader:
    """What tarfile copies a file from: counts progress, and stops the copy once the archiver is aborted."""

    def __init__(self, f: BinaryIO, archiver: Archiver) -> None:
        self.f, self.archiver = f, archiver

    def read(self, n: int = -1) -> bytes:
        if self.archiver.aborted:
            raise _Aborted
        data = self.f.read(n)
        self.archiver.done += len(data)
        return data
