"""A launch unpacks a snapshot once per archive file (docs/design.md, the remote layout): python3
checks and unpacks it, the result is kept as that file's verified tree, and later jobs' folders are
copies of the tree, never links to it, so a job's writes stay its own; a copy of the archive rewritten
in any way names another tree; the unpack's python3 starts isolated (`-I -S`). Through passes, with
the real launch script on the local machine and over a real sshd."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.helpers import jobtpu, make_home, manage_until, status, submit, write_tree
from tests.sshfleet import SshFleet


def _run(home: Path, job_id: int) -> str:
    assert manage_until(home, [job_id], {"finished", "failed"})[job_id]["status"] == "finished"
    return jobtpu(home, "tail", str(job_id)).stdout


def test_jobs_of_one_snapshot_are_copied_from_its_verified_tree_and_keep_their_writes(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    src = write_tree(tmp_path / "src", {"data.txt": "original\n"})
    cmd = "echo changed >> data.txt; cat data.txt; cat planted.txt 2>/dev/null; true"
    first = submit(home, src, cmd)
    assert _run(home, first) == "original\nchanged\n"
    archive = status(home)[first]["archive"]
    copy = home / "run" / "archives" / archive
    trees = sorted((home / "run" / "archives").glob(f".tree.{archive.removesuffix('.tar.gz')}.*"))
    assert len(trees) == 1, trees
    # Planted in the tree after its check: a job that shows it was copied from the tree, not unpacked.
    (trees[0] / "planted.txt").write_text("from the tree\n")

    second = submit(home, src, cmd)
    assert status(home)[second]["archive"] == archive
    # The first job's append never reached the tree, and the second's never reaches it either.
    assert _run(home, second) == "original\nchanged\nfrom the tree\n"
    assert (trees[0] / "data.txt").read_text() == "original\n"
    assert (home / "run" / "jobs" / str(second) / "data.txt").stat().st_nlink == 1

    # The same bytes written again (its times put back): another file, so it is checked again.
    st = copy.stat()
    copy.write_bytes(copy.read_bytes())
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    third = submit(home, src, cmd)
    assert _run(home, third) == "original\nchanged\n"
    assert len(list((home / "run" / "archives").glob(".tree.*"))) == 2


def test_clean_takes_a_snapshot_s_tree_away_with_its_archive(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    job = submit(home, write_tree(tmp_path / "src", {"data.txt": "original\n"}), "cat data.txt")
    assert _run(home, job) == "original\n"
    archive = status(home)[job]["archive"]
    archives = home / "run" / "archives"
    assert sorted(p.name.split(".")[1] if p.name.startswith(".") else p.name for p in archives.iterdir()) == [
        archive, "tree"]
    jobtpu(home, "clean", "--remote")
    assert list(archives.iterdir()) == []


def test_the_unpack_runs_whatever_python_modules_the_login_has(ssh_fleet: SshFleet, tmp_path: Path) -> None:
    """The worker's python3 unpacks with `-I -S`: a usercustomize.py in the login's user site (which
    every plain `python3` of that account imports first) cannot fail or change the unpack."""
    fm = ssh_fleet.add_machine("box")
    for minor in range(7, 16):
        site = fm.home / ".local" / "lib" / f"python3.{minor}" / "site-packages"
        site.mkdir(parents=True, exist_ok=True)
        (site / "usercustomize.py").write_text("import os, sys\nsys.stderr.write('the login module ran')\nos._exit(5)\n")
    for folder in [fm.home / ".local", *(fm.home / ".local").rglob("*")]:
        shutil.chown(folder, fm.user, fm.user)
    home = tmp_path / "home"
    home.mkdir()
    spec = {"kind": "ssh", "hosts": [h.address() for h in fm.hosts], "user": fm.user,
            "identity_file": str(ssh_fleet.identity), "connect_timeout": 3, "resources": {"slot": 1}}
    (home / "machines.json").write_text(json.dumps({"machines": {"box": spec}}))
    job = submit(home, write_tree(tmp_path / "src", {"data.txt": "original\n"}), "cat data.txt")
    assert manage_until(home, [job], {"finished", "failed"}, timeout=60)[job]["status"] == "finished"
    assert jobtpu(home, "tail", str(job)).stdout == "original\n"
