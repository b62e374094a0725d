"""Opening files under a home without following a link or blocking on a special file
(docs/design.md §7, the shared-home threat model).

In a shared home any member of the group may put a symlink, a FIFO or a folder of their own where
jobtpu is about to read or write. `O_NOFOLLOW` guards only a path's last component, so every path
under a home is opened here one component at a time from a folder descriptor: no component may be a
link, every folder must be a folder, and the file at the end must be a regular file. Files are
opened with `O_NONBLOCK` (a FIFO never blocks the open) and checked with fstat before a byte is read
or written. Whatever is wrong raises `UnsafePath`, one line naming the path, which the caller turns
into the failure of that one job or command, never of the whole pass."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from pathlib import Path, PurePath

from jobtpu import timing
from jobtpu.errors import JobtpuError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_GROUP_WRITE = 0o020
_SETGID = 0o2000


class UnsafePath(JobtpuError):
    """A path under the home is a link, a special file or a folder jobtpu cannot use."""

    def __init__(self, path: PurePath | str, why: str,
                 hint: str = "remove or rename it (jobtpu never reads or writes through a link or a special file)") -> None:
        super().__init__(f"{path}: {why}", hint=hint)
        self.path = str(path)
        self.why = why


def _parts(rel: PurePath | str) -> list[str]:
    parts = [p for p in PurePath(rel).parts if p not in ("", ".")]
    if any(p == ".." or p.startswith("/") for p in parts):
        raise ValueError(f"not a plain relative path: {rel}")
    return parts


def kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _why(dir_fd: int, name: str, err: OSError, want: str) -> str:
    """Why opening `name` in `dir_fd` failed, in words: what is there instead, or the OS's reason."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return err.strerror or str(err)
    if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO) or (want == "a folder") != stat.S_ISDIR(st.st_mode):
        return f"is {kind_of(st.st_mode)}, not {want}"
    return err.strerror or str(err)


def modes_in(parent_mode: int) -> tuple[int, int]:
    """Pure: the modes of a new folder and a new file in a folder of mode `parent_mode`
    (docs/reference/home-files.md §1.4): the owner's alone in a private folder; in a shared home of the
    one-writer layout (setgid, the group reads) the group reads them; in the sticky folders members
    write into (spool/, users/, results/) a member's own entry is theirs, the group reads it; in a
    folder of the old shared layout (group-writable) the group writes them too. Never the world's."""
    sticky, setgid = bool(parent_mode & stat.S_ISVTX), bool(parent_mode & _SETGID)
    if parent_mode & _GROUP_WRITE:
        return (0o2750, 0o640) if sticky else (0o2770, 0o660)
    if setgid and parent_mode & stat.S_IRGRP:
        return 0o2750, 0o640
    return 0o700, 0o600


def folder_mode(parent_fd: int) -> int:
    """The mode of a new folder in the folder `parent_fd` (layout.modes_in)."""
    return modes_in(os.fstat(parent_fd).st_mode)[0]


def file_mode_of(dir_fd: int) -> int:
    return modes_in(os.fstat(dir_fd).st_mode)[1]


def open_dir(root: Path, rel: PurePath | str = "", create: bool = False, mode: int | None = None) -> int:
    """A descriptor of the folder `root/rel`, reached one component at a time, no component a link.
    With `create`, missing folders are made with the mode their parent implies (or `mode`, for the
    last one), exactly, whatever the umask. `root` itself is the home: trusted as given."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = PurePath()
    try:
        parts = _parts(rel)
        for i, name in enumerate(parts):
            walked = walked / name
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                new_mode = mode if mode is not None and i == len(parts) - 1 else folder_mode(fd)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, new_mode, dir_fd=fd)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    raise UnsafePath(walked, _why(fd, name, e, "a folder")) from None
                st = os.fstat(child)
                if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != new_mode:
                    os.fchmod(child, new_mode)  # mkdir's mode is cut by the umask
            except OSError as e:
                raise UnsafePath(walked, _why(fd, name, e, "a folder")) from None
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(root: Path, rel: PurePath | str, flags: int = os.O_RDONLY, create: bool = False,
              mode: int | None = None) -> int:
    """A descriptor of the regular file `root/rel` (folders walked as `open_dir` does; with `create`,
    the folders and the file are made, the file with the folder's mode or `mode`). Never blocks on a
    FIFO and never opens a link, a device or a socket: those raise UnsafePath naming the path."""
    parts = _parts(rel)
    if not parts:
        raise ValueError("a file needs a name")
    dir_fd = open_dir(root, PurePath(*parts[:-1]), create=create)
    try:
        return open_in(dir_fd, parts[-1], flags, create=create, mode=mode, shown=PurePath(rel))
    finally:
        os.close(dir_fd)


def open_in(dir_fd: int, name: str, flags: int = os.O_RDONLY, create: bool = False, mode: int | None = None,
            shown: PurePath | str | None = None) -> int:
    """`open_file` for one name in an open folder."""
    shown = shown if shown is not None else name
    fd = -1
    try:
        if create:
            new_mode = file_mode_of(dir_fd) if mode is None else mode
            try:
                fd = os.open(name, flags | _FILE_FLAGS | os.O_CREAT | os.O_EXCL, new_mode, dir_fd=dir_fd)
                os.fchmod(fd, new_mode)  # ours, new: exactly this mode, whatever the umask
            except FileExistsError:
                fd = os.open(name, flags | _FILE_FLAGS, dir_fd=dir_fd)
        else:
            fd = os.open(name, flags | _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise UnsafePath(shown, _why(dir_fd, name, e, "a regular file")) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(shown, f"is {kind_of(st.st_mode)}, not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_file(root: Path, rel: PurePath | str, limit: int | None = None) -> bytes:
    """The bytes of a regular file under `root` (at most `limit` of them, from the start)."""
    fd = open_file(root, rel)
    try:
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int | None = None) -> bytes:
    chunks = []
    left = limit if limit is not None else -1
    while left != 0:
        chunk = os.read(fd, 1 << 20 if left < 0 else min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        if left > 0:
            left -= len(chunk)
    return b"".join(chunks)


def lock_wait() -> float:
    """How long to wait for a lock a teammate may hold (docs/design.md §2): timing's lock_wait, which
    $JOBTPU_LOCK_WAIT sets."""
    return timing.current().lock_wait


def lock(fd: int, timeout: float, shared: bool = False) -> bool:
    """flock `fd`, waiting at most `timeout` seconds: a lock a teammate holds for ever costs a wait,
    never the whole pass. False when it could not be had in time."""
    deadline = time.monotonic() + timeout
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(timing.current().lock_poll)


def relative_to_home(home_root: Path, path: Path) -> PurePath:
    """`path` as a path under the home, for open_file/open_dir (a path outside it raises ValueError)."""
    return PurePath(os.path.relpath(path, home_root)) if path.is_absolute() else PurePath(path)


def copy_into(source: Path, dir_fd: int) -> None:
    """A local folder's contents (or one file) copied into the open folder `dir_fd`, never writing
    through what is already there: files are written under a new name and renamed over the old entry
    (a planted link is replaced, never followed), folders are entered only when they are folders."""
    st = os.lstat(source)
    if stat.S_ISDIR(st.st_mode):
        for entry in sorted(os.listdir(source)):
            _copy_entry(source / entry, dir_fd, entry)
    else:
        _copy_entry(source, dir_fd, source.name)


def _copy_entry(source: Path, dir_fd: int, name: str) -> None:
    st = os.lstat(source)
    if stat.S_ISDIR(st.st_mode):
        child = _sub_folder(dir_fd, name)
        try:
            copy_into(source, child)
        finally:
            os.close(child)
    elif stat.S_ISREG(st.st_mode):
        mode = file_mode_of(dir_fd) | (0o100 | (0o010 if file_mode_of(dir_fd) & 0o040 else 0) if st.st_mode & 0o100 else 0)
        tmp, fd = _new_temp(dir_fd, name, mode)
        try:
            with open(source, "rb") as src:
                while chunk := src.read(1 << 20):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
        except BaseException:
            os.unlink(tmp, dir_fd=dir_fd)
            raise
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    elif stat.S_ISLNK(st.st_mode):  # copied as the link it is (never followed here or there)
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
        os.symlink(os.readlink(source), tmp, dir_fd=dir_fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    # a FIFO, socket or device in the job's folder is not copied


def _sub_folder(dir_fd: int, name: str) -> int:
    """The folder `name` in `dir_fd`, made when missing; a link or file there is replaced by a folder."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        os.unlink(name, dir_fd=dir_fd)  # a link or a file: removed, never followed
    new_mode = folder_mode(dir_fd)
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, new_mode, dir_fd=dir_fd)
    child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    if os.fstat(child).st_uid == os.geteuid():
        os.fchmod(child, new_mode)
    return child


def lstat_in(dir_fd: int, name: str) -> os.stat_result | None:
    """What `name` in the open folder is, never followed through a link; None when there is nothing."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_subdir(dir_fd: int, name: str) -> int:
    """The folder `name` in the open folder `dir_fd`, never through a link (UnsafePath otherwise)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise UnsafePath(name, _why(dir_fd, name, e, "a folder")) from None


def write_all(fd: int, data: bytes) -> None:
    """Every byte of `data` to `fd` (os.write may take fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_in(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """`name` in the open folder, whole or not at all: a new file under a random name (never through a
    link), exactly `mode`, every byte written and synced, then renamed over `name`; a failure leaves
    no temporary file."""
    tmp, fd = _new_temp(dir_fd, name, mode)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def new_temp(dir_fd: int, name: str, mode: int) -> tuple[str, int]:
    """A new file in `dir_fd` under a random name next to `name`, open for writing, exactly `mode`."""
    return _new_temp(dir_fd, name, mode)


def _new_temp(dir_fd: int, name: str, mode: int) -> tuple[str, int]:
    while True:
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
        os.fchmod(fd, mode)
        return tmp, fd


def own_dir(root: Path, rel: PurePath | str) -> int:
    """`open_dir(create=True)` for a folder jobtpu writes into: ours, or in a shared home one a teammate
    made that the group shares as the home does (setgid, group-writable, the home's group, not
    world-writable: two members may fetch one job into results/ID). Else UnsafePath."""
    fd = open_dir(root, rel, create=True)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() and not _group_shared(st, os.stat(root).st_gid):
        os.close(fd)
        error = UnsafePath(rel, "is a folder another account made and does not share with the home's group")
        error.hint = "fetch into a folder of yours with --to DIR (or ask its owner to remove it)"
        raise error
    return fd


def _group_shared(st: os.stat_result, gid: int) -> bool:
    shared = _SETGID | 0o070
    return st.st_gid == gid and st.st_mode & shared == shared and not st.st_mode & 0o002


# The most bytes jobtpu reads of each kind of file in a home (docs/reference/guarantees-and-numbers.md
# §10): far above what jobtpu itself writes, so only a planted or runaway file reaches one, and it is then
# one line instead of a command that reads gigabytes.
CAP_ID = 4 * 1024  # home_id, last_id
CAP_SMALL = 1 << 20  # users.json, a user's settings, the sheet memo, notify-outbox.json
CAP_CONFIG = 16 << 20  # machines.json, known_hosts
CAP_LARGE = 256 << 20  # state.json, secrets.json, history.jsonl, archives/.hashcache.json


def read_capped(fd: int, shown: PurePath | str, cap: int) -> bytes:
    """The bytes of the open regular file `fd`, refused (UnsafePath naming `shown`) when it holds
    more than `cap`: checked on its size first, then on what was read (a file still growing)."""
    size = os.fstat(fd).st_size
    data = b"" if size > cap else read_fd(fd, cap + 1)
    if size > cap or len(data) > cap:
        raise UnsafePath(shown, f"is {max(size, len(data))} bytes, more than the {cap} jobtpu reads of it",
                         hint="move it away, or restore it from a good copy")
    return data


def read_regular(root: Path, path: PurePath | str, cap: int) -> bytes:
    """The bytes of the regular file `path` under the home `root` (a path under it, or relative to
    it), opened as open_file does (no link on the way, never blocking on a FIFO) and at most `cap`
    of them: anything else raises UnsafePath, one line naming the path and never its content.
    FileNotFoundError as open() raises it."""
    rel = relative_to_home(root, Path(path))
    fd = open_file(root, rel)
    try:
        return read_capped(fd, rel, cap)
    finally:
        os.close(fd)
