"""A member's own entry in a folder every member of a shared home adds to (`spool/`, `results/`;
docs/reference/home-files.md §1.6): found by its owner, never only by its name, so a name another
member took first decides nothing for anyone else."""

import contextlib
import os
import re
import stat
from pathlib import Path

from jobtpu.home import safefs
from jobtpu.home.layout import Home


def own_folder(dir_fd: int, name: str, mode: int, shown: str) -> str:
    """The name of this account's folder for `name` in a sticky folder every member adds to: `name`
    itself when it is free or this account's folder, else `name-<random>` (one of this account's
    found first, or a new one, which no other member can have taken first). Kept at `mode`."""
    me = os.geteuid()
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, mode, dir_fd=dir_fd)
    candidates = [name, *sorted(n for n in os.listdir(dir_fd) if OWN_ALTERNATE.fullmatch(n) and n.startswith(f"{name}-"))]
    for each in candidates:
        try:
            st = os.stat(each, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if st.st_uid == me and stat.S_ISDIR(st.st_mode):
            _keep_mode(dir_fd, each, mode, shown)
            return each
    while True:
        alternate = f"{name}-{os.urandom(6).hex()}"
        try:
            os.mkdir(alternate, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
        _keep_mode(dir_fd, alternate, mode, shown)
        return alternate


OWN_ALTERNATE = re.compile(r".+-[0-9a-f]{12}")


def _keep_mode(dir_fd: int, name: str, mode: int, shown: str) -> None:
    fd = safefs.open_subdir(dir_fd, name)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise safefs.UnsafePath(f"{shown}/{name}", "is another account's folder")
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:  # setgid: what it makes stays the group's
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def results_folder(home_root: Path, job_id: int) -> Path:
    """Where `fetch` puts a job's files in a shared home: `results/<id>/` when it is this account's
    folder or one its group shares, else a folder of this account's own, `results/<id>-<random>/`:
    what another member made at `results/<id>` (a folder of theirs, a file, a link) decides nothing."""
    try:
        os.close(safefs.own_dir(home_root, f"results/{job_id}"))
        return home_root / "results" / str(job_id)
    except safefs.UnsafePath:
        pass
    results = safefs.open_dir(home_root, "results")
    try:
        return home_root / "results" / own_folder(results, str(job_id), 0o2750, "results")
    finally:
        os.close(results)


def results_target(home: Home, job_id: int) -> Path:
    """Where `fetch` puts a job's files: results/<id>, or in a shared home this account's own folder
    for it (results_folder)."""
    from jobtpu.home.roles import Layout, role_of

    if role_of(home.root).layout is not Layout.SHARED:
        return home.results(job_id)
    return results_folder(home.root, job_id)


def named_account(name: str) -> int | None:
    """The uid of the account called `name` on this box, or None when there is none."""
    import pwd

    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def settings_owner_refusal(home_root: Path, user: str) -> str | None:
    """Why users/<user>/ cannot be user <user>'s in a shared home (None: it can): when an account of
    that name exists, the folder must be that account's; another member who made it first speaks for
    nobody (their webhooks would hear of the other's jobs)."""
    uid = named_account(user)
    if uid is None:
        return None
    try:
        owner = os.stat(home_root / "users" / user, follow_symlinks=False).st_uid
    except OSError:
        return None
    if owner == uid:
        return None
    from jobtpu.home.trust import account_name

    return f"users/{user}/ is account {account_name(owner)}'s, not {user}'s: not read as {user}'s settings"


def reclaim_user_folders(home_root: Path, limit: int) -> list[str]:
    """The runner's pass, in a shared home: a folder in users/ named after an account that another
    account made is moved aside (`users/.taken-<ns>-<name>`; the runner owns users/, so the sticky bit
    lets it rename), so the account can keep settings under its own name. One line each, and one for
    the rest past `limit` names looked at."""
    import time

    from jobtpu.schema.names import USER_NAME

    try:
        fd = safefs.open_dir(home_root, "users")
    except (FileNotFoundError, safefs.UnsafePath):
        return []
    lines: list[str] = []
    try:
        names = sorted(n for n in os.listdir(fd) if USER_NAME.match(n))[:limit]
        for name in names:
            why = settings_owner_refusal(home_root, name)
            if why is None:
                continue
            with contextlib.suppress(OSError):
                os.rename(name, f".taken-{time.time_ns()}-{name}", src_dir_fd=fd, dst_dir_fd=fd)
                lines.append(f"{why}; moved aside, so {name} can keep settings of their own")
    finally:
        os.close(fd)
    return lines[:5] + ([f"and {len(lines) - 5} more such folders moved aside"] if len(lines) > 5 else [])
