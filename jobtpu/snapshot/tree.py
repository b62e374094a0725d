"""The snapshot's root folder, opened once, and every path below it reached one folder at a time:
a folder that is (or becomes) a symlink never brings content from outside into a snapshot."""

from __future__ import annotations

import errno
import os
import shlex
import stat
from typing import BinaryIO


class SymlinkedFolder(Exception):
    def __init__(self, rel: str) -> None:
        super().__init__(rel)
        self.rel = rel


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a fifo swapped in must not block


class FolderTree:
    """The snapshot root, opened once. Every path below it is reached one folder at a time, each opened
    relative to its parent without following a symlink, so a folder that is (or becomes) a symlink never
    brings content from outside into a snapshot. Not thread-safe: each thread opens its own."""

    _MAX_OPEN = 256  # folder fds kept open; paths come sorted, so even a small cache mostly hits

    def __init__(self, root: str) -> None:
        self.root = root
        self._fds = {"": os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)}

    def __enter__(self) -> FolderTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def lstat(self, rel: str) -> os.stat_result:
        fd, name = self._locate(rel)
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as e:
            raise self._named(e, rel) from e

    def readlink(self, rel: str) -> str:
        fd, name = self._locate(rel)
        try:
            return os.readlink(name, dir_fd=fd)
        except OSError as e:
            raise self._named(e, rel) from e

    def open(self, rel: str) -> BinaryIO:
        """rel for reading; an OSError naming its full path unless it is still a regular file."""
        fd, name = self._locate(rel)
        try:
            file_fd = os.open(name, _FILE_FLAGS, dir_fd=fd)
        except OSError as e:
            raise self._named(e, rel) from e
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            os.close(file_fd)
            raise OSError(errno.EINVAL, "it is no longer a regular file", os.path.join(self.root, rel))
        return os.fdopen(file_fd, "rb")

    def _locate(self, rel: str) -> tuple[int, str]:
        if len(self._fds) > self._MAX_OPEN:
            root = self._fds.pop("")
            self.close()
            self._fds[""] = root
        folder, _, name = rel.rpartition("/")
        return self._folder(folder), name

    def _folder(self, rel: str) -> int:
        fd = self._fds.get(rel)
        if fd is None:
            parent, _, name = rel.rpartition("/")
            parent_fd = self._folder(parent)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except OSError as e:  # Linux says ENOTDIR for a symlink opened this way, ELOOP elsewhere
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and self._is_symlink(parent_fd, name):
                    raise SymlinkedFolder(rel) from e
                raise self._named(e, rel) from e
            self._fds[rel] = fd
        return fd

    @staticmethod
    def _is_symlink(folder_fd: int, name: str) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def _named(self, e: OSError, rel: str) -> OSError:
        """The same error naming the full path, not just the last component. A folder on the way that
        is now a file (ENOTDIR) means the path is gone, as a deleted one is."""
        if e.errno == errno.ENOTDIR:
            return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.path.join(self.root, rel))
        return OSError(e.errno, e.strerror, os.path.join(self.root, rel))


def exclude_hint(rel: str) -> str:
    return f"make it readable, or leave it out with --exclude {shlex.quote(rel)}"

