"""A shared home's one-writer layout (docs/reference/home-files.md §1.3, the file table): made by
`init --shared`, and reached from the old layout (a group-writable top folder) by the runner's
`jobtpu init --shared GROUP HOME` or by its next pass, losing no job, log or event.

Every path of the home is the runner's and read-only to the group, except three sticky folders the
group writes into (`spool/`, `users/`, `results/`), each entry there its maker's. What another
account made where only the runner may write is copied into a file of the runner's and the old one
removed; links, FIFOs and devices there are removed. Job folders under `run/` that another account's
processes may still use are left as they are. Copying moves bytes, never trust: first, what the group
could write and trust hangs on is set aside (aside.py) for the runner to adopt on purpose."""

from __future__ import annotations

import contextlib
import os
import stat
from typing import TYPE_CHECKING

from jobtpu.home.aside import ASIDE
from jobtpu.home.roles import REPLIES, SPOOL

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from jobtpu.home.layout import Home
    from jobtpu.schema.job_spec import JobSpec

TOP_MODE = 0o3750  # setgid, sticky, the group reads
MEMBER_FOLDERS = frozenset({SPOOL, "users", "results"})  # 3770: the group adds entries, each its maker's
MEMBER_MODE = 0o3770
FOLDER_MODE = 0o2750
PRIVATE_FILES = frozenset({"secrets.json", ".secrets.json", "notify-outbox.json", "runner.key"})  # the runner's alone
LEFT_TO_OWNERS = ("run/jobs", "run/meta")  # a running job's own folders, used by its processes


def file_mode(rel: str, st: os.stat_result) -> int:
    """Pure: a runner's file's mode in the one-writer layout."""
    if rel.split("/")[-1] in PRIVATE_FILES or rel.split("/")[-1].startswith(tuple(f"{n}." for n in PRIVATE_FILES)):
        return 0o600
    return 0o750 if st.st_mode & 0o100 else 0o640


def folder_mode(rel: str) -> int:
    """Pure: a runner's folder's mode in the one-writer layout ('' is the top folder)."""
    if rel == "":
        return TOP_MODE
    return MEMBER_MODE if rel in MEMBER_FOLDERS else FOLDER_MODE


def make_one_writer(root: Path, gid: int, active: Sequence[int] = ()) -> list[str]:
    """Bring the home at `root` to the one-writer layout for group `gid`, as its runner (this account);
    one line per entry that was another account's, and per file set aside (aside.py; `active`: the
    jobs whose processes may run now)."""
    from jobtpu.home.aside import set_aside

    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        was = os.fstat(top)
        # First take write away from the group: nobody adds to or renames in the top folder meanwhile.
        os.fchown(top, -1, gid)
        os.fchmod(top, TOP_MODE)
        # Then what carries trust and the group could write goes aside, before the walk copies
        # anything into a file of the runner's: trust never transfers by copying.
        lines = set_aside(top, was, active)
        # And before the walk, which would adopt a runner.key another account left as the runner's: a key
        # anyone but the runner made or could read is replaced by a new pair.
        from jobtpu.home.sealing import ensure_runner_keys

        lines += ensure_runner_keys(root, check_pair=True)
        _walk(top, "", gid, lines)
        for name, mode in ((SPOOL, MEMBER_MODE), ("users", MEMBER_MODE), ("results", MEMBER_MODE),
                           (REPLIES, FOLDER_MODE)):
            _ensure_folder(top, name, gid, mode)
        users = os.open("users", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        try:  # made now: under a member folder, a member could take the name first
            _ensure_folder(users, ".offered", gid, FOLDER_MODE)
        except OSError as e:  # a member took it: imported settings are then offered to nobody
            lines.append(f"users/.offered: cannot make it the runner's folder ({e.strerror or e}); move it away by hand")
        finally:
            os.close(users)
        spool = os.open(SPOOL, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        try:
            with contextlib.suppress(FileExistsError):
                os.close(os.open(".claims.lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640,
                                 dir_fd=spool))
            fd = os.open(".claims.lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=spool)
            try:
                if os.fstat(fd).st_uid == os.geteuid():
                    os.fchmod(fd, 0o640)
            finally:
                os.close(fd)
        finally:
            os.close(spool)
    finally:
        os.close(top)
    return lines


def _ensure_folder(dir_fd: int, name: str, gid: int, mode: int) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    _fix(dir_fd, name, gid, mode)


def _walk(dir_fd: int, rel: str, gid: int, lines: list[str]) -> None:
    """Every entry of the open folder (the runner's), made the runner's with its layout mode."""
    for name in sorted(os.listdir(dir_fd)):
        path = f"{rel}/{name}" if rel else name
        try:
            _take_over(dir_fd, name, path, rel, gid, lines)
        except FileNotFoundError:
            continue  # gone since the listing (a running job's wrapper renamed its temporary file): nothing to take
        except OSError as e:  # root's, or another's not shared with the group: said, and left
            lines.append(f"{path}: cannot take it over ({e.strerror or e}); move it away by hand")


def _take_over(dir_fd: int, name: str, path: str, rel: str, gid: int, lines: list[str]) -> None:
    """One entry of the runner's folder made the runner's (folders walked)."""
    me = os.geteuid()
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if rel == "" and name == ASIDE and stat.S_ISDIR(st.st_mode) and st.st_uid == me:
        _fix(dir_fd, name, gid, 0o700)  # the runner's alone; its files were written 0600
        return
    if rel == "" and name in MEMBER_FOLDERS and stat.S_ISDIR(st.st_mode):
        if st.st_uid != me:
            _adopt_folder(dir_fd, name, gid, path)
        _fix(dir_fd, name, gid, MEMBER_MODE)
        return  # members' own places: each entry in them stays its maker's
    if any(path == kept or path.startswith(kept + "/") for kept in LEFT_TO_OWNERS) and st.st_uid != me:
        return
    if stat.S_ISDIR(st.st_mode):
        if st.st_uid != me:
            _adopt_folder(dir_fd, name, gid, path)
            lines.append(f"{path}/: was {_who(st.st_uid)}'s; now the runner's")
        else:
            _fix(dir_fd, name, gid, folder_mode(path))
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            _walk(child, path, gid, lines)
        finally:
            os.close(child)
    elif stat.S_ISREG(st.st_mode):
        if st.st_uid != me or st.st_nlink != 1:
            _adopt_file(dir_fd, name, gid, file_mode(path, st))
            lines.append(f"{path}: was {_who(st.st_uid)}'s; copied into the runner's file")
        else:
            _fix(dir_fd, name, gid, file_mode(path, st))
    else:  # a link, a FIFO, a socket, a device: never jobtpu's
        os.unlink(name, dir_fd=dir_fd)
        lines.append(f"{path}: a {'link' if stat.S_ISLNK(st.st_mode) else 'special file'}; removed")


def _fix(dir_fd: int, name: str, gid: int, mode: int) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        os.fchown(fd, -1, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _adopt_file(dir_fd: int, name: str, gid: int, mode: int) -> None:
    """Another account's file (or one with other links): its bytes in a new file of ours, renamed over it."""
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    tmp = f".{name}.{os.urandom(6).hex()}.tmp"
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        while chunk := os.read(src, 1 << 20):
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
        os.fchown(out, -1, gid)
        os.fchmod(out, mode)
        os.fsync(out)
    except BaseException:
        os.unlink(tmp, dir_fd=dir_fd)
        raise
    finally:
        os.close(src)
        os.close(out)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _adopt_folder(dir_fd: int, name: str, gid: int, path: str) -> None:
    """Another account's folder: a new one of ours takes its entries (moved; _walk then adopts each)."""
    new = f".{name}.{os.urandom(6).hex()}.new"
    os.mkdir(new, 0o700, dir_fd=dir_fd)
    _fix(dir_fd, new, gid, folder_mode(path))
    old = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    target = os.open(new, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        for entry in os.listdir(old):
            os.rename(entry, entry, src_dir_fd=old, dst_dir_fd=target)
    finally:
        os.close(old)
        os.close(target)
    os.rmdir(name, dir_fd=dir_fd)
    os.rename(new, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _who(uid: int) -> str:
    from jobtpu.home.trust import account_name

    return account_name(uid)


def migrate(home: Home) -> list[str]:
    """The runner's pass in a home of the old shared layout moves it to the one-writer layout first,
    under the pass lock; the lines say what it took over."""
    from jobtpu.home.store import Store, hold_lock
    from jobtpu.timing import current

    gid = os.stat(home.root).st_gid
    with hold_lock(home.pass_lock, current().act_lock_wait, "the pass lock (manage.lock)"):
        lines = settle_records(home)
        active = [job.id for job in Store(home).load().jobs if job.active]
        lines += make_one_writer(home.root, gid, active)
    return ["moved this shared home to the one-writer layout (docs/reference/home-files.md §1.3): every file "
            "is now written by its runner alone; members' submits and acts go through spool/", *lines]


def settle_records(home: Home) -> list[str]:
    """Before the home becomes the runner's: every record of the old layout, which any member could
    rewrite, is held to its submitter's spec (specs/<id>.json, each its submitter's file): the spec's
    launch fields and account win; a queued job with no spec of its submitter's is held until its
    owner looks at it and releases it."""
    from jobtpu.home.store import Store

    lines: list[str] = []
    with Store(home).transaction() as state:
        for job in state.jobs:
            spec = _spec_of(home, job.id)
            if spec is None:
                if job.status == "queued" and not job.held:
                    job.held = True
                    job.waiting = "held: no spec of its submitter's (moved from the old shared layout); check it and release it"
                    lines.append(f"job {job.id}: held (no spec of its submitter's to check its record against)")
                continue
            from jobtpu.schema.job_fields import LAUNCH_FIELDS

            differ = [f for f in LAUNCH_FIELDS if _plain(getattr(job, f)) != _plain(getattr(spec, f))]
            for name in differ:
                setattr(job, name, getattr(spec, name))
            if differ:
                lines.append(f"job {job.id}: its record differed from its spec ({', '.join(differ)}); the spec's kept")
            job.uid = spec.uid
    return lines


def _plain(value: object) -> object:
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


def _spec_of(home: Home, job_id: int) -> JobSpec | None:
    """The job's spec when it is a file its submitter wrote (owner = the uid it names), else None."""
    from jobtpu.home import safefs
    from jobtpu.home.specs import MAX_SPEC_BYTES, spec_path
    from jobtpu.schema.job_spec import read_spec

    try:
        fd = safefs.open_file(home.root, spec_path(job_id))
    except (FileNotFoundError, safefs.UnsafePath):
        return None
    try:
        st = os.fstat(fd)
        spec = read_spec(safefs.read_fd(fd, MAX_SPEC_BYTES))
    finally:
        os.close(fd)
    if spec is None or spec.uid != st.st_uid or spec.id != job_id or st.st_nlink != 1 or st.st_mode & 0o022:
        return None
    return spec
