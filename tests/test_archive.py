"""Snapshots of real folders, with real git and real tar."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from jobtpu.errors import JobtpuError
from jobtpu.snapshot import archive, selection
from jobtpu.snapshot.archive import content_name, snapshot
from jobtpu.snapshot.selection import list_files
from jobtpu.snapshot.tree import FolderTree
from tests.helpers import write_tree as write

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


HOSTILE = ["with space.txt", "quote'd\".txt", "dollar$HOME.txt", "back`tick`.txt", "new\nline.txt",
           "ünïcødé-日本.txt", "-dash-first.txt", "back\\slash.txt", "deep/er/ nested /x.py"]


@pytest.fixture(autouse=True)
def _isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the user's global excludes file must not leak into the git-vs-parser comparison
    home = tmp_path / "_home"
    home.mkdir()
    for var, value in {"HOME": home, "XDG_CONFIG_HOME": home, "GIT_CONFIG_GLOBAL": os.devnull,
                       "GIT_CONFIG_NOSYSTEM": "1"}.items():
        monkeypatch.setenv(var, str(value))


def git_init(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)


def members(snap: archive.ArchiveInfo) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(snap.path) as tf:
        return {m.name: m for m in tf.getmembers()}


def quiet() -> Console:
    return Console(file=io.StringIO(), stderr=True)


TRICKY = {
    ".gitignore": ("# a comment\n*.log\n!keep.log\nbuild/\n**/tmp\n/root_only.txt\nmy secret.txt\n"
                   "\\#hash.txt\nstar\\*.txt\nesc\\ aped.txt\nlogs/**\n!logs/keep/\n"),
    "keep.log": "kept by negation", "drop.log": "x", "root_only.txt": "x", "sub/root_only.txt": "kept",
    "build/out.bin": "x", "src/build/deep.o": "x", "build.txt": "kept: build/ is a directory pattern",
    "a/b/tmp/t.txt": "x", "tmp/t.txt": "x", "tmpfile": "kept", "my secret.txt": "x", "#hash.txt": "x",
    "sub/.gitignore": "*.dat\n!important.dat\n/local/\n", "sub/x.dat": "x", "sub/important.dat": "kept",
    "sub/local/l.txt": "x", "local/l.txt": "kept: only sub/local is ignored", "sub/deeper/y.dat": "x",
    "sub/deeper/keep.log": "kept", "src/main.py": "print()", "a file with spaces.py": "kept",
    "star*.txt": "x", "starX.txt": "kept", "esc aped.txt": "x", "logs/a.txt": "x", "logs/keep/k.txt": "x",
}


def test_git_and_parser_agree_on_a_tricky_tree(tmp_path: Path) -> None:
    plain = write(tmp_path / "plain", TRICKY)
    expected = sorted(set(TRICKY) - {"drop.log", "root_only.txt", "build/out.bin", "src/build/deep.o",
                                     "a/b/tmp/t.txt", "tmp/t.txt", "my secret.txt", "#hash.txt", "sub/x.dat",
                                     "sub/local/l.txt", "sub/deeper/y.dat", "star*.txt", "esc aped.txt",
                                     "logs/a.txt", "logs/keep/k.txt"})
    assert selection._git_files(str(plain)) is None  # so the gitignore_parser walk answered
    assert list_files(plain) == expected
    checkout = write(tmp_path / "checkout", TRICKY)
    git_init(checkout)
    assert sorted(selection._git_files(str(checkout)) or []) == expected  # and here git itself
    assert list_files(checkout) == expected


def test_gitignore_honoured_in_the_archive(tmp_path: Path) -> None:
    src = write(tmp_path / "src", {".gitignore": "big.bin\n", "big.bin": os.urandom(5 << 20), "a.py": "x",
                                   "sub/.gitignore": "*.tmp\n!keep.tmp\n", "sub/x.tmp": "x", "sub/keep.tmp": "k"})
    for use_git in (False, True):
        if use_git:
            git_init(src)
        snap = snapshot(src, tmp_path / f"archives{use_git}", console=quiet())
        assert sorted(members(snap)) == [".gitignore", "a.py", "sub/.gitignore", "sub/keep.tmp"]
        assert snap.files == 4 and snap.path.stat().st_size < 10_000


def test_subfolder_of_a_checkout_and_deleted_tracked_file(tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {".gitignore": "*.ckpt\n", "proj/a.py": "a", "proj/gone.py": "g",
                                     "proj/m.ckpt": "x", "proj/new.py": "n", "other/b.py": "b"})
    git_init(repo)
    subprocess.run(["git", "-C", str(repo), "add", "proj/a.py", "proj/gone.py"], check=True)
    (repo / "proj/gone.py").unlink()
    assert list_files(repo / "proj") == ["a.py", "new.py"]


def test_include_and_exclude(tmp_path: Path) -> None:
    src = write(tmp_path / "src", {".gitignore": "data/\n*.ckpt\n", "data/a.csv": "a", "data/sub/b.csv": "b",
                                   "m.ckpt": "m", "x/m.ckpt": "m", "a.py": "a", "logs/l.txt": "l",
                                   "x/logs/l2.txt": "l", "notes.md": "n", "x/notes.md": "n"})
    for use_git in (False, True):
        if use_git:
            git_init(src)
        assert list_files(src, include=["data"]) == [".gitignore", "a.py", "data/a.csv", "data/sub/b.csv",
                                                     "logs/l.txt", "notes.md", "x/logs/l2.txt", "x/notes.md"]
        assert "x/m.ckpt" in list_files(src, include=["*.ckpt"])
        assert list_files(src, include=["data/"], exclude=["data/sub", "logs", "x/notes.md"]) == [
            ".gitignore", "a.py", "data/a.csv", "notes.md"]
        assert list_files(src, exclude=["*.md", "x"]) == [".gitignore", "a.py", "logs/l.txt"]


def test_hostile_names_survive(tmp_path: Path) -> None:
    files = {name: f"content of {name}" for name in HOSTILE}
    for use_git in (False, True):
        src = write(tmp_path / f"src{use_git}", files)
        if use_git:
            git_init(src)
        assert list_files(src) == sorted(files)
        snap = snapshot(src, tmp_path / f"archives{use_git}", console=quiet())
        out = tmp_path / f"out{use_git}"
        with tarfile.open(snap.path) as tf:
            tf.extractall(out, filter="tar")
        assert {n: (out / n).read_text() for n in files} == files


def test_deterministic_across_copies_mtimes_and_modes(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {f"d{i % 7}/f{i}.py": f"print({i})\n" * i for i in range(60)}
    files["bin.dat"] = os.urandom(100_000)
    a = write(tmp_path / "a", files)
    (a / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(a / "run.sh", 0o700)
    os.symlink("d0/f0.py", a / "link")
    b = tmp_path / "b"
    shutil.copytree(a, b, symlinks=True)
    for i, p in enumerate(sorted(b.rglob("*"))):
        if p.is_file() and not p.is_symlink():
            os.utime(p, ns=(10**18 + i, 10**18 + i))
            os.chmod(p, 0o750 if p.name == "run.sh" else 0o600)
    sa, sb = snapshot(a, tmp_path / "arch_a", console=quiet()), snapshot(b, tmp_path / "arch_b", console=quiet())
    assert sa.name == sb.name and sa.path.read_bytes() == sb.path.read_bytes()
    assert len(sa.name) == 64 + len(".tar.gz") and sa.files == 63 and not sa.reused
    assert sa.largest[0] == ("bin.dat", 100_000) and len(sa.largest) == 5
    m = members(sa)
    assert m["run.sh"].mode == 0o755 and m["bin.dat"].mode == 0o644 and m["link"].issym()
    assert all(x.mtime == 0 and x.uid == 0 and x.gid == 0 and x.uname == x.gname == "" for x in m.values())
    assert sa.path.read_bytes()[3:8] == b"\0" * 5  # gzip header: no FNAME flag, mtime 0


def test_reuse_change_and_extraction(tmp_path: Path) -> None:
    src = write(tmp_path / "src", {"a.py": "a", "b/c.txt": "c", ".gitignore": "*.o\n", "x.o": "o"})
    os.chmod(src / "a.py", 0o755)
    arch = tmp_path / "archives"
    first = snapshot(src, arch, console=quiet())
    listing = {p.name: p.stat().st_mtime_ns for p in arch.iterdir()}
    again = snapshot(src, arch, console=quiet())
    assert again.reused and again.name == first.name
    assert {p.name: p.stat().st_mtime_ns for p in arch.iterdir() if p.name != ".hashcache.json"} == {
        k: v for k, v in listing.items() if k != ".hashcache.json"}
    (src / "b/c.txt").write_text("changed")
    changed = snapshot(src, arch, console=quiet())
    assert not changed.reused and changed.name != first.name
    assert sorted(p.name for p in arch.iterdir() if not p.name.startswith(".")) == sorted(
        [first.name, changed.name])
    out = tmp_path / "out"
    with tarfile.open(changed.path) as tf:
        tf.extractall(out, filter="tar")
    got = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert got == [".gitignore", "a.py", "b/c.txt"] and (out / "b/c.txt").read_text() == "changed"
    assert os.access(out / "a.py", os.X_OK) and not os.access(out / "b/c.txt", os.X_OK)


def test_hash_cache_avoids_rereading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write(tmp_path / "src", {"a.py": "a", "b.py": "b"})
    for p in src.iterdir():
        os.utime(p, ns=(10**18, 10**18))  # old enough not to be racy
    arch = tmp_path / "archives"
    first = snapshot(src, arch, console=quiet())
    assert (arch / ".hashcache.json").exists()
    monkeypatch.setattr(archive, "hash_file", lambda *a: pytest.fail("re-read an unchanged file"))
    assert snapshot(src, arch, console=quiet()).name == first.name


def _old(src: Path) -> None:
    for p in src.rglob("*"):  # old enough not to be racy: the hash cache remembers them
        os.utime(p, ns=(10**18, 10**18), follow_symlinks=False)


def _unchanged(src: Path) -> None:
    pass


def _edit_keeping_size_and_mtime(src: Path) -> None:
    (src / "a.py").write_text("A")
    os.utime(src / "a.py", ns=(10**18, 10**18))


@pytest.mark.parametrize("change", [
    _unchanged,
    _edit_keeping_size_and_mtime,
    lambda src: (src / "a.py").rename(src / "renamed.py"),
    lambda src: (src / "b" / "c.txt").unlink(),
    lambda src: (src / "new.txt").write_text("new"),
    lambda src: os.chmod(src / "a.py", 0o755),
    lambda src: (src / ".gitignore").write_text("*.txt\n"),
    lambda src: os.symlink("a.py", src / "link"),
], ids=["unchanged", "edit-keeping-size-and-mtime", "rename", "delete", "add", "chmod", "ignore-rule", "symlink"])
def test_a_name_from_the_hash_cache_is_the_name_made_afresh(tmp_path: Path, change: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/design.md §9.1: a snapshot that keeps the same files unchanged takes its archive's name
    from the hash cache, without hashing; any change names it anew, as a snapshot with no cache would."""
    src = write(tmp_path / "src", {"a.py": "a", "b/c.txt": "c", ".gitignore": "*.o\n"})
    _old(src)
    arch = tmp_path / "archives"
    first = snapshot(src, arch, console=quiet())
    change(src)
    made = []
    monkeypatch.setattr(archive, "content_name", lambda *a: made.append(1) or content_name(*a))
    again = snapshot(src, arch, console=quiet())
    fresh = snapshot(src, tmp_path / "fresh", console=quiet())
    assert again.name == fresh.name
    assert (again.name == first.name) == (change is _unchanged)
    assert made == ([1] if change is _unchanged else [1, 1])  # only the fresh one hashed, when unchanged


def test_system_tar_extracts_it(tmp_path: Path) -> None:
    # what a worker does with it: GNU tar, hostile names and a symlink included
    files = {n: n for n in HOSTILE}
    src = write(tmp_path / "src", files)
    os.symlink("with space.txt", src / "lnk")
    snap = snapshot(src, tmp_path / "archives", console=quiet())
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(snap.path), "-C", str(out)], check=True)
    assert {n: (out / n).read_text() for n in files} == files
    assert os.readlink(out / "lnk") == "with space.txt"


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(JobtpuError, match="does not exist: .*nope"):
        snapshot(tmp_path / "nope", tmp_path / "archives")
    (tmp_path / "file").write_text("x")
    with pytest.raises(JobtpuError, match="is not a folder"):
        list_files(tmp_path / "file")


def test_unreadable_file_names_it_and_suggests_exclude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests run as root, who reads everything, so the permission error is raised where a read happens.
    src = write(tmp_path / "src", {"ok.py": "x", "secret.key": "x"})
    real = archive.hash_file

    def deny(tree: FolderTree, rel: str, on_bytes: object) -> str:
        if rel.endswith("secret.key"):
            raise PermissionError(13, "Permission denied", os.path.join(tree.root, rel))
        return real(tree, rel, on_bytes)  # type: ignore[arg-type]

    monkeypatch.setattr(archive, "hash_file", deny)
    with pytest.raises(JobtpuError, match="secret.key") as e:
        snapshot(src, tmp_path / "archives", console=quiet())
    assert "--exclude" in (e.value.hint or "")
    assert [p.name for p in (tmp_path / "archives").iterdir() if p.name.endswith(".tmp")] == []


def test_large_snapshot_warns_on_the_console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write(tmp_path / "src", {"big.bin": b"\0" * 3000, "small.py": "x"})
    monkeypatch.setattr(archive, "LARGE_SNAPSHOT_BYTES", 1000)
    buf = io.StringIO()
    snapshot(src, tmp_path / "archives", console=Console(file=buf, width=300))
    assert "warning" in buf.getvalue() and "big.bin" in buf.getvalue()


def test_progress_only_for_slow_snapshots_and_never_on_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    src = write(tmp_path / "src", {f"f{i}.py": "x" * 1000 for i in range(20)})
    quick = io.StringIO()
    snapshot(src, tmp_path / "a1", console=Console(file=quick, force_terminal=True))
    assert quick.getvalue() == ""
    monkeypatch.setattr(archive, "_PROGRESS_AFTER", -1.0)
    slow = io.StringIO()
    snapshot(src, tmp_path / "a2", console=Console(file=slow, force_terminal=True))
    assert "snapshot" in slow.getvalue()
    snapshot(src, tmp_path / "a3")  # the default console is stderr
    assert capsys.readouterr().out == ""
