"""Which folder is the home (docs/reference/home-files.md §1), every local path inside it, and how files in it are written.

A home may be shared by several accounts (a group-writable, setgid folder). Then any of them could
plant a symlink where jobtpu is about to write, so every file is written through the helpers at the
end of this module: temporary files are created exclusively under a random name and never through a
symlink, appends and locks refuse a symlink, and modes follow the folder: a private folder keeps its
files to the owner (0600/0700), a group-writable one shares them with its group (0660/2770), never
with everyone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from jobtpu.home import safefs

# What jobtpu itself writes at the top of a home (with their .bak/.lock/.tmp companions): never part
# of a snapshot, even when the folder snapshotted is the home or holds it. machines.json is the user's.
_OWN_FOLDERS = frozenset({"archives", "aside", "cache", "lease", "logs", "results", "run", "specs", "users"})
_OWN_FILES = frozenset({"state.json", "secrets.json", ".secrets.json", "history.jsonl", "known_hosts", "manage.lock",
                        "last_id", "home_id", ".home_id", "events.jsonl", "notify-outbox.json", "sheet.json",
                        "users.json", "runner.json", "runner.key", "runner.pub"})
_OWN_COMPANIONS = tuple(f"{name}." for name in sorted(_OWN_FILES))


def is_own_entry(name: str) -> bool:
    """Whether `name`, directly in a home, is one of jobtpu's own files or folders (checked for every
    file of a snapshot of the home, so one set lookup or one startswith)."""
    return name in _OWN_FOLDERS or name in _OWN_FILES or name.startswith(_OWN_COMPANIONS)


class Home:
    """A home folder. A plain class, not a dataclass: `jobtpu status` must not pay for importing
    dataclasses (and inspect) on every call."""

    __slots__ = ("root",)

    def __init__(self, root: Path) -> None:
        self.root = root

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Home) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"Home({str(self.root)!r})"

    @property
    def machines_file(self) -> Path:
        return self.root / "machines.json"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def state_backup(self) -> Path:
        return self.root / "state.json.bak"

    @property
    def state_lock(self) -> Path:
        """Held briefly by every reader-modifier-writer of state.json."""
        return self.root / "state.json.lock"

    @property
    def pass_lock(self) -> Path:
        """Held for a whole pass by whatever acts on the fleet, so two passes never both act."""
        return self.root / "manage.lock"

    @property
    def id_mark(self) -> Path:
        """The highest job id ever given out, kept outside state.json: ids are never reused, even if
        state.json is lost, emptied or replaced by an old copy."""
        return self.root / "last_id"

    @property
    def history_file(self) -> Path:
        return self.root / "history.jsonl"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    def archive(self, name: str) -> Path:
        return self.archives / name

    def job_logs(self, job_id: int) -> Path:
        return self.root / "logs" / str(job_id)

    def log_file(self, job_id: int, attempt: int, worker: int) -> Path:
        return self.job_logs(job_id) / f"{attempt}.{worker}.log"

    def results(self, job_id: int) -> Path:
        return self.root / "results" / str(job_id)

    @property
    def local_run_root(self) -> Path:
        """Where the built-in local machine keeps job folders when machines.json names no root."""
        return self.root / "run"

    def ensure(self) -> None:
        """The home's folder; a command that makes it says where, once (docs/reference/home-files.md §1.1).
        A runner holding the home's lease never makes it again (§1.7): its filesystem is gone, not new."""
        if str(self.root) in NEVER_MADE and not self.root.is_dir():
            import errno

            raise FileNotFoundError(errno.ENOENT, f"the home {self.root} is gone", str(self.root))
        if make_dirs(self.root):
            import sys

            from jobtpu.render.text import printable

            sys.stderr.write(printable(f"new home {self.root}") + "\n")


# The homes whose runner lease this process holds (home/fence.py keeps it): never made again here.
NEVER_MADE: set[str] = set()


def find_home(explicit: str | None = None, cwd: Path | None = None) -> Home:
    """--home, else $JOBTPU_HOME, else the nearest folder up from cwd with a machines.json that this
    account may adopt (`adoption_refusal`), else ~/.jobtpu. A folder passed over is named on stderr."""
    if explicit:
        return Home(Path(explicit).expanduser().resolve())
    env = os.environ.get("JOBTPU_HOME")
    if env:
        return Home(Path(env).expanduser().resolve())
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "machines.json").is_file():
            why = _refusal_of(folder)
            if why is None:
                return Home(folder)
            import sys

            from jobtpu.render.text import printable

            sys.stderr.write(printable(f"jobtpu: not using {folder} as the home: {why}; give --home {folder} "
                                       "to use it anyway") + "\n")
    return Home(Path("~/.jobtpu").expanduser())


def _refusal_of(folder: Path) -> str | None:
    try:
        folder_st, file_st = os.stat(folder), os.lstat(folder / "machines.json")
    except OSError as e:
        return f"cannot look at it ({e.strerror})"
    return adoption_refusal(folder_st, file_st, os.geteuid(), {os.getegid(), *os.getgroups()})


def adoption_refusal(folder: os.stat_result, machines: os.stat_result, euid: int, groups: set[int]) -> str | None:
    """Why home discovery must not adopt a folder with this stat and this machines.json, for the
    account `euid` in `groups`; None when it may. Pure. An outsider who writes a machines.json into a
    folder others can write (/tmp, a scratch disk) above a user's working folder must not receive
    that user's jobs and secrets: the folder and the file must be the user's, writable by no one
    else (no world write, no group the user is not in), unless the folder is a home `init --shared`
    made for a group the user is in: its runner's (setgid, sticky, the group reads; machines.json the
    runner's too), or one of the old layout (setgid, group-writable), whose members may own it and its
    machines.json (docs/reference/home-files.md §1)."""
    if not stat.S_ISREG(machines.st_mode):
        return "its machines.json is not a regular file"
    old_layout = (folder.st_mode & (_SETGID | _GROUP_WRITE) == _SETGID | _GROUP_WRITE
                  and folder.st_gid in groups and not folder.st_mode & 0o002)
    one_writer = (folder.st_mode & (_SETGID | stat.S_ISVTX | stat.S_IRGRP) == _SETGID | stat.S_ISVTX | stat.S_IRGRP
                  and not folder.st_mode & (_GROUP_WRITE | 0o002) and folder.st_gid in groups
                  and machines.st_uid == folder.st_uid)  # the runner's home and fleet (§1.3)
    shared = old_layout or one_writer
    for what, st in (("the folder", folder), ("its machines.json", machines)):
        if st.st_mode & 0o002:
            return f"{what} is writable by everyone"
        if st.st_mode & _GROUP_WRITE and st.st_gid not in groups:
            return f"{what} is writable by the group {_group_name(st.st_gid)}, which you are not in"
        if st.st_uid != euid and not shared:
            return f"{what} is {_account_name(st.st_uid)}'s, not yours"
    return None


def _account_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


# ---- writing files in the home ----------------------------------------------------------------------

_GROUP_WRITE = 0o020
_SETGID = 0o2000


def is_shared(folder: Path) -> bool:
    """A folder its group may write to: files in it are shared with that group."""
    try:
        return bool(os.stat(folder).st_mode & _GROUP_WRITE)
    except OSError:
        return False


def file_mode(folder: Path) -> int:
    """The mode of a new file in `folder` (modes_in)."""
    try:
        return safefs.modes_in(os.stat(folder).st_mode)[1]
    except OSError:
        return 0o600


def make_dirs(folder: Path) -> bool:
    """mkdir -p, each new folder getting the mode its parent implies (setgid keeps a shared group).
    True when this call made `folder` itself (not when another process did meanwhile)."""
    if folder.is_dir():
        return False
    parent = folder.parent
    if parent != folder:
        make_dirs(parent)
    try:
        mode = safefs.modes_in(os.stat(parent).st_mode)[0]
    except OSError:
        mode = 0o700
    try:
        os.mkdir(folder, mode)
    except FileExistsError:
        if not folder.is_dir():
            raise
        return False
    os.chmod(folder, mode)  # mkdir's mode is cut by the umask; setgid is not always kept either
    return True


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_temp(path: Path, mode: int | None = None) -> tuple[int, Path]:
    """A new, empty file next to `path`, open for writing: created exclusively under a random name
    (so a symlink planted there is never followed), with `mode` (default: the folder's)."""
    mode = file_mode(path.parent) if mode is None else mode
    while True:
        tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, _NEW_FILE, mode)
            break
        except FileExistsError:
            continue
    try:
        os.fchmod(fd, mode)  # exactly `mode`, whatever the umask
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return fd, tmp


def open_new(path: Path) -> int:
    """A descriptor to a file that must not exist yet (never a symlink), with the folder's mode."""
    mode = file_mode(path.parent)
    fd = os.open(path, _NEW_FILE, mode)
    os.fchmod(fd, mode)
    return fd


def write_temp(path: Path, data: bytes, mode: int | None = None, sync: bool = True) -> Path:
    """A new file next to `path` holding `data` (see create_temp); synced unless `sync` is False."""
    fd, tmp = create_temp(path, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def rename_synced(tmp: Path, path: Path) -> None:
    """Move a file from write_temp into place (a rename replaces a symlink, never follows it)."""
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def write_atomic(path: Path, data: bytes, mode: int | None = None, sync: bool = True) -> None:
    """Replace `path` with `data` all at once (durably unless `sync` is False: for caches), never
    writing through a symlink."""
    tmp = write_temp(path, data, mode, sync)
    if sync:
        rename_synced(tmp, path)
        return
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def open_append(path: Path) -> int:
    """A descriptor appending to `path` (created with the folder's mode); refuses a symlink there."""
    return _open_or_create(path, os.O_WRONLY | os.O_APPEND)


def open_lock(path: Path) -> int:
    """A descriptor to flock: created with the folder's mode, never through a symlink."""
    return _open_or_create(path, os.O_RDWR)


def _open_or_create(path: Path, flags: int) -> int:
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    mode = file_mode(path.parent)
    while True:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            try:
                # someone else's file in a shared home: its mode stays; a FIFO there never blocks
                return regular_fd(os.open(path, flags | os.O_NONBLOCK), path)
            except FileNotFoundError:
                continue  # removed in between
        try:
            os.fchmod(fd, mode)  # ours, new: exactly the home's mode, whatever the umask
        except BaseException:
            os.close(fd)
            raise
        return fd


def regular_fd(fd: int, path: Path) -> int:
    """`fd` if it is a regular file (back in blocking mode); else closed, and UnsafePath naming it."""
    from jobtpu.home.safefs import UnsafePath

    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePath(path, "is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
