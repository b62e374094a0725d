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
