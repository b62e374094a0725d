"""Which files a snapshot of a folder holds: git's ignore rules inside a checkout (`git ls-files`),
every `.gitignore` met outside one, `--include` and `--exclude` globs, never `.git/`, a file reached
through a symlinked folder, or the home's own files; and the notes about what was left out."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jobtpu.errors import JobtpuError
from jobtpu.home.layout import is_own_entry
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.snapshot.gitignore import Rule, ignored, parse_gitignore
from jobtpu.snapshot.tree import FolderTree, SymlinkedFolder, exclude_hint

if TYPE_CHECKING:
    from rich.console import Console


def _env() -> dict[str, str]:  # a GIT_DIR set by a hook must not point ls-files at another repository
    drop = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "LC_ALL": "C"}



def list_files(src: Path, include: Sequence[str] = (), exclude: Sequence[str] = (), home: Path | None = None,
               leave_out: Sequence[Path] = ()) -> list[str]:
    """Sorted posix relpaths of the regular files and symlinks (kept as links) a snapshot of `src` holds.

    Kept: what `.gitignore` does not ignore (git's own rules via `git ls-files` inside a checkout, else
    every `.gitignore` met while walking, nested ones and `!negations` included), plus files matching an
    `include` glob even if ignored, minus files matching an `exclude` glob; `.git/` never. A glob matches
    the relpath with fnmatch semantics (`*` crosses `/`); a glob without `/` also matches the basename;
    a glob naming a directory (`data/` or `data`) matches everything under it. Never kept: a file reached
    through a symlinked folder, the `home`'s own files (home.is_own_entry) and anything in `leave_out`."""
    with FolderTree(check_src(src)) as tree:
        return [rel for rel, _ in collect(tree, include, exclude, NeverPacked(tree.root, home, leave_out)).entries]


def check_src(src: Path) -> str:
    if not src.is_dir():
        what = "is not a folder" if src.exists() else "does not exist"
        raise JobtpuError(f"the folder to snapshot {what}: {src}", hint="pass --dir PATH naming a folder")
    return os.path.abspath(src)


class NeverPacked:
    """Which relpaths under the snapshot root are the home's own files or folders never to pack."""

    def __init__(self, src: str, home: Path | None, leave_out: Sequence[Path]) -> None:
        real = os.path.realpath(src)
        self.home = _inside(real, home) if home is not None else None  # "" when src is the home itself
        self.folders = tuple(rel for p in leave_out if (rel := _inside(real, p)))

    def __contains__(self, rel: str) -> bool:
        if self.home is not None:
            below = rel if not self.home else rel[len(self.home) + 1:] if rel.startswith(self.home + "/") else ""
            if below and is_own_entry(below.split("/", 1)[0]):
                return True
        return bool(self.folders) and any(rel == f or rel.startswith(f + "/") for f in self.folders)


def _inside(real_src: str, path: Path) -> str | None:
    """path relative to real_src ("" for real_src itself), or None when it is not inside it."""
    rel = os.path.relpath(os.path.realpath(path), real_src)
    if rel == ".":
        return ""
    return None if rel == ".." or rel.startswith("../") else rel.replace(os.sep, "/")


class Listing(msgspec.Struct):
    entries: list[tuple[str, os.stat_result]]
    through_symlinks: dict[str, int]  # symlinked folder (relpath) -> how many listed files it would bring in


def collect(tree: FolderTree, include: Sequence[str], exclude: Sequence[str], private: NeverPacked) -> Listing:
    src = tree.root
    inc, exc = _compile_globs(include), _compile_globs(exclude)
    if _maybe_checkout(src):
        ignored = _git_ignores(src)  # runs alongside ls-files
        try:
            names = _git_files(src)
        finally:
            src_ignored = ignored()  # reaped even when ls-files fails
    else:  # no git to ask: two processes spared (a third of a small folder's submit)
        names, src_ignored = None, False
    if src_ignored and names is not None and not inc:
        raise JobtpuError(f"git ignores the folder to snapshot, so the snapshot would leave out its files: {src}",
                          hint="snapshot a folder the checkout does not ignore, or take its files with "
                               "--include GLOB (e.g. --include '*')")
    if names is not None:
        _check_count(len(names), src)
    keep = set(names if names is not None else _walk(src, exc, private, ignore=True))
    if inc:
        keep.update(rel for rel in _walk(src, exc, private, ignore=False) if _glob_match(rel, inc))
        _check_count(len(keep), src)
    out: list[tuple[str, os.stat_result]] = []
    hidden: dict[str, int] = {}
    for rel in sorted(keep):
        if ".git" in rel.split("/") or _glob_match(rel, exc) or rel in private:
            continue
        try:
            st = tree.lstat(rel)
        except SymlinkedFolder as e:  # e.g. a tracked d/f, where d is now a symlink out of the checkout
            hidden[e.rel] = hidden.get(e.rel, 0) + 1
            continue
        except FileNotFoundError:
            continue  # tracked by git but deleted from the working tree
        except OSError as e:
            where = e.filename or os.path.join(src, rel)
            raise JobtpuError(f"cannot read {where}: {e.strerror}", hint=exclude_hint(rel)) from e
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            out.append((rel, st))
    return Listing(out, hidden)


# A snapshot's count of files (docs/reference/commands.md §2.2.7): past WARN_FILES a note says that it is
# a lot (a dataset or a virtualenv picked up by mistake), past MAX_FILES it is refused before any
# file is read (a million files cost minutes and gigabytes of memory in every submit).
WARN_FILES = 20_000
MAX_FILES = 200_000


def _check_count(count: int, src: str) -> None:
    if count > MAX_FILES:
        raise JobtpuError(f"the folder to snapshot holds over {MAX_FILES} files: {src}",
                          hint="add what the job does not need (data, environments) to .gitignore, "
                               "or pick a smaller --dir")


def say_many(console: Console, count: int) -> None:
    if count > WARN_FILES:
        console.print(f"[yellow]note:[/] the snapshot holds {count} files (over {WARN_FILES}); if some are "
                      "data or an environment, .gitignore them or pick a smaller --dir", soft_wrap=True,
                      highlight=False)



def _maybe_checkout(src: str) -> bool:
    """Whether git could find a checkout holding src: a `.git` in src or a folder above it, as git's
    own discovery looks (a GIT_CEILING_DIRECTORIES, which stops it early, is left to git to apply)."""
    if "GIT_CEILING_DIRECTORIES" in os.environ:
        return True
    folder = os.path.abspath(src)
    while True:
        if os.path.lexists(os.path.join(folder, ".git")):
            return True
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent


def _git_files(src: str) -> list[str] | None:
    """What git keeps under src (relative to it), or None when src is not in a git checkout."""
    import subprocess  # here: a folder no checkout holds runs no git (_maybe_checkout)

    cmd = ["git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    try:
        proc = subprocess.run(cmd, capture_output=True, env=_env(), check=False)
    except OSError:  # no git at all
        return None
    if proc.returncode != 0:  # not in a checkout (or one git refuses): the gitignore_parser walk stands in
        return None
    m = re.search(rb"could not open directory '(.*?)': (.*)", proc.stderr)
    if m:  # git warns and goes on, which would silently drop a whole folder from the job
        where, why = os.fsdecode(m.group(1)), m.group(2).decode(errors="replace")
        raise JobtpuError(f"cannot read folder {os.path.join(src, where)}: {why}", hint=exclude_hint(where))
    return [os.fsdecode(n) for n in proc.stdout.split(b"\0") if n and not n.endswith(b"/")]


def _git_ignores(src: str) -> Callable[[], bool]:
    """Starts asking whether the checkout's ignore rules cover src itself (git then lists none of its
    untracked files); the answer, False outside a checkout, comes from calling the result."""
    import subprocess

    cmd = ["git", "-C", src, "check-ignore", "-q", "."]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=_env())
    except OSError:  # no git at all
        return lambda: False
    return lambda: proc.wait() == 0



def _walk(src: str, exclude: list[re.Pattern[str]], private: NeverPacked, ignore: bool) -> list[str]:
    """Files and symlinks under src, pruning .git, excluded and private folders and (with ignore)
    .gitignore'd ones."""
    out: list[str] = []
    stack: list[tuple[str, list[Rule]]] = [("", [])]
    while stack:
        rel, rules = stack.pop()
        folder = os.path.join(src, rel)
        try:
            entries = list(os.scandir(folder))
            if ignore and any(e.name == ".gitignore" and e.is_file() for e in entries):
                rules = rules + parse_gitignore(os.path.join(folder, ".gitignore"), rel)
        except OSError as e:
            raise JobtpuError(f"cannot read {e.filename}: {e.strerror}", hint=exclude_hint(rel)) from e
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if entry.name == ".git" or (ignore and ignored(path, is_dir, rules)):
                continue
            if not is_dir:
                out.append(path)
                if ignore and len(out) > MAX_FILES:  # stopped as it is met, not after a million more
                    _check_count(len(out), src)
            elif not _glob_match(path, exclude) and path not in private:
                stack.append((path, rules))
    return out


def _compile_globs(globs: Sequence[str]) -> list[re.Pattern[str]]:
    out = []
    for g in globs:
        if not (g := g.removeprefix("./").strip("/")):
            continue
        body = fnmatch.translate(g).removesuffix(r"\Z")
        if "/" not in g:  # also the basename, or the name of any folder on the way
            body = rf"(?:.*/)?{body}"
        out.append(re.compile(rf"{body}(?:/.*)?\Z", re.S))  # and everything under a matching folder
    return out


def _glob_match(rel: str, globs: list[re.Pattern[str]]) -> bool:
    return any(rx.match(rel) for rx in globs)


def say_left_out(console: Console, hidden: dict[str, int]) -> None:
    if not hidden:
        return
    from rich.markup import escape
    count, folders = sum(hidden.values()), sorted(hidden)
    names = ", ".join(folders[:5]) + (f" and {len(folders) - 5} more" if len(folders) > 5 else "")
    console.print(f"[yellow]note:[/] left out {count} file{'s' * (count != 1)} under the symlinked "
                  f"folder{'s' * (len(folders) != 1)} {escape(names)}: a snapshot never reads through a "
                  "symlinked folder (make it a real folder to send its files)", soft_wrap=True, highlight=False)

