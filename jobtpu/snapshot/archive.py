"""The snapshot of a job's working folder: which files are kept (git's ignore rules, or gitignore_parser
outside git), their hash cache, and the deterministic, content-addressed .tar.gz holding them.

Every file is read relative to the snapshot's root one folder at a time, never through a symlinked
folder, and the home's own files (state, secrets, archives, logs, ...) are never packed."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import gzip
import hashlib
import json
import os
import re
import secrets
import shlex
import stat
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from jobtpu.errors import JobtpuError
from jobtpu.home.layout import is_own_entry, make_dirs, open_new, write_atomic

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

LARGE_SNAPSHOT_BYTES = 300 * 1024 * 1024
COMPRESS_LEVEL = 1  # half the time of level 6 for ~10% more bytes to upload (measured with bench/snapshot.py)
_CACHE_NAME = ".hashcache.json"
_RACY_NS = 1_000_000_000  # a file modified this close to the snapshot may change again within its mtime tick
_HASH_FIRST_BYTES = 64 << 20  # below this, hash before archiving: a reverted tree then costs no tar at all
_PROGRESS_AFTER = 0.5
_TMP_PREFIX = ".snapshot."  # + "<pid>.<random>.tmp": a later snapshot removes those of dead processes
_COPY_BYTES = 1 << 20  # the archiver's read size, so also how far it reads past an abort


def _env() -> dict[str, str]:  # a GIT_DIR set by a hook must not point ls-files at another repository
    drop = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "LC_ALL": "C"}


@dataclass(frozen=True)
class Snapshot:
    name: str  # "<64-hex sha256>.tar.gz": the hash of the sorted (relpath, kind, content-sha256) list
    path: Path  # archives_dir / name
    files: int  # number of files kept
    size: int  # total bytes of kept files
    reused: bool  # True when the archive already existed, nothing was written
    largest: list[tuple[str, int]]  # the 5 largest kept files (relpath, bytes), biggest first


def list_files(src: Path, include: Sequence[str] = (), exclude: Sequence[str] = (), home: Path | None = None,
               leave_out: Sequence[Path] = ()) -> list[str]:
    """Sorted posix relpaths of the regular files and symlinks (kept as links) a snapshot of `src` holds.

    Kept: what `.gitignore` does not ignore (git's own rules via `git ls-files` inside a checkout, else
    every `.gitignore` met while walking, nested ones and `!negations` included), plus files matching an
    `include` glob even if ignored, minus files matching an `exclude` glob; `.git/` never. A glob matches
    the relpath with fnmatch semantics (`*` crosses `/`); a glob without `/` also matches the basename;
    a glob naming a directory (`data/` or `data`) matches everything under it. Never kept: a file reached
    through a symlinked folder, the `home`'s own files (home.is_own_entry) and anything in `leave_out`."""
    with _Tree(_check_src(src)) as tree:
        return [rel for rel, _ in _collect(tree, include, exclude, _Private(tree.root, home, leave_out)).entries]


def _check_src(src: Path) -> str:
    if not src.is_dir():
        what = "is not a folder" if src.exists() else "does not exist"
        raise JobtpuError(f"the folder to snapshot {what}: {src}", hint="pass --dir PATH naming a folder")
    return os.path.abspath(src)


class _Private:
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


@dataclass
class _Listing:
    entries: list[tuple[str, os.stat_result]]
    through_symlinks: dict[str, int]  # symlinked folder (relpath) -> how many listed files it would bring in


def _collect(tree: _Tree, include: Sequence[str], exclude: Sequence[str], private: _Private) -> _Listing:
    src = tree.root
    inc, exc = _compile_globs(include), _compile_globs(exclude)
    ignored = _git_ignores(src)  # runs alongside ls-files
    try:
        names = _git_files(src)
    finally:
        src_ignored = ignored()  # reaped even when ls-files fails
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
        except _SymlinkedFolder as e:  # e.g. a tracked d/f, where d is now a symlink out of the checkout
            hidden[e.rel] = hidden.get(e.rel, 0) + 1
            continue
        except FileNotFoundError:
            continue  # tracked by git but deleted from the working tree
        except OSError as e:
            where = e.filename or os.path.join(src, rel)
            raise JobtpuError(f"cannot read {where}: {e.strerror}", hint=_exclude_hint(rel)) from e
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            out.append((rel, st))
    return _Listing(out, hidden)


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


def _say_many(console: Console, count: int) -> None:
    if count > WARN_FILES:
        console.print(f"[yellow]note:[/] the snapshot holds {count} files (over {WARN_FILES}); if some are "
                      "data or an environment, .gitignore them or pick a smaller --dir", soft_wrap=True,
                      highlight=False)


class _SymlinkedFolder(Exception):
    def __init__(self, rel: str) -> None:
        super().__init__(rel)
        self.rel = rel


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a fifo swapped in must not block


class _Tree:
    """The snapshot root, opened once. Every path below it is reached one folder at a time, each opened
    relative to its parent without following a symlink, so a folder that is (or becomes) a symlink never
    brings content from outside into a snapshot. Not thread-safe: each thread opens its own."""

    _MAX_OPEN = 256  # folder fds kept open; paths come sorted, so even a small cache mostly hits

    def __init__(self, root: str) -> None:
        self.root = root
        self._fds = {"": os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)}

    def __enter__(self) -> _Tree:
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
                    raise _SymlinkedFolder(rel) from e
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


def _exclude_hint(rel: str) -> str:
    return f"make it readable, or leave it out with --exclude {shlex.quote(rel)}"


def _git_files(src: str) -> list[str] | None:
    """What git keeps under src (relative to it), or None when src is not in a git checkout."""
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
        raise JobtpuError(f"cannot read folder {os.path.join(src, where)}: {why}", hint=_exclude_hint(where))
    return [os.fsdecode(n) for n in proc.stdout.split(b"\0") if n and not n.endswith(b"/")]


def _git_ignores(src: str) -> Callable[[], bool]:
    """Starts asking whether the checkout's ignore rules cover src itself (git then lists none of its
    untracked files); the answer, False outside a checkout, comes from calling the result."""
    cmd = ["git", "-C", src, "check-ignore", "-q", "."]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=_env())
    except OSError:  # no git at all
        return lambda: False
    return lambda: proc.wait() == 0


_Rule = tuple[str, re.Pattern[str], bool, bool]  # (base relpath, regex, negation, directory_only)


def _parse_gitignore(path: str, base: str) -> list[_Rule]:
    from gitignore_parser import rule_from_pattern  # only outside git; keeps the import off the hot path
    rules: list[_Rule] = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f.read().splitlines():
            line = re.sub(r"(?<!\\) +$", "", line)  # the parser keeps trailing spaces of 1-char patterns
            line = re.sub(r"\\(.)", _unescape, line)  # it takes "\ " or "\*" as a literal backslash
            try:
                r = rule_from_pattern(line, base_path=base or "/")
            except IndexError:  # the parser trips on lines such as "!" or "\"; git ignores them too
                continue
            if r is not None:
                # a negated directory rule only matches paths with a trailing "/"; we pass dirs without one
                rx = r.regex[:-2] + "$" if r.regex.endswith("/$") else r.regex
                rules.append((base, re.compile(rx), r.negation, r.directory_only))
    return rules


def _unescape(m: re.Match[str]) -> str:
    c = m.group(1)  # "[c]" is a literal c to the parser; a leading "\#" or "\!" it unescapes itself
    return m.group(0) if m.start() == 0 and c in "#!" else c if c in "#!" else f"[{c}]"


def _ignored(rel: str, is_dir: bool, rules: list[_Rule]) -> bool:
    for base, rx, negation, dir_only in reversed(rules):  # the last matching rule wins
        if (is_dir or not dir_only) and rx.search(rel[len(base) + 1 :] if base else rel):
            return not negation
    return False


def _walk(src: str, exclude: list[re.Pattern[str]], private: _Private, ignore: bool) -> list[str]:
    """Files and symlinks under src, pruning .git, excluded and private folders and (with ignore)
    .gitignore'd ones."""
    out: list[str] = []
    stack: list[tuple[str, list[_Rule]]] = [("", [])]
    while stack:
        rel, rules = stack.pop()
        folder = os.path.join(src, rel)
        try:
            entries = list(os.scandir(folder))
            if ignore and any(e.name == ".gitignore" and e.is_file() for e in entries):
                rules = rules + _parse_gitignore(os.path.join(folder, ".gitignore"), rel)
        except OSError as e:
            raise JobtpuError(f"cannot read {e.filename}: {e.strerror}", hint=_exclude_hint(rel)) from e
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if entry.name == ".git" or (ignore and _ignored(path, is_dir, rules)):
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


class _Bar:
    """A transient progress bar, shown only once the snapshot has taken _PROGRESS_AFTER seconds, and
    only on a terminal: elsewhere rich draws nothing but leaves an empty line behind when it stops."""

    def __init__(self, console: Console, total: int) -> None:
        self.console, self.total, self.start = console, total, time.monotonic()
        self.progress: Progress | None = None
        self.wanted = console.is_terminal

    def update(self, done: int) -> None:
        if self.progress is None and self.wanted and time.monotonic() - self.start > _PROGRESS_AFTER:
            from rich.progress import DownloadColumn, Progress
            self.progress = Progress(*Progress.get_default_columns(), DownloadColumn(), console=self.console,
                                     transient=True)
            self.progress.add_task("snapshot", total=self.total)
            self.progress.start()
        if self.progress is not None:
            self.progress.update(self.progress.task_ids[0], completed=done)


class _Aborted(Exception):
    """Raised inside the archiver's reads once the snapshot is abandoned (an error, a reuse, Ctrl-C)."""


class _Archiver(threading.Thread):
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
        try:
            with _Tree(self.src) as tree, os.fdopen(open_new(self.tmp), "wb") as out:
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

    def _add_all(self, tree: _Tree, tf: tarfile.TarFile) -> None:
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

    def _info(self, tree: _Tree, rel: str, st: os.stat_result) -> tarfile.TarInfo:
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
            raise JobtpuError(f"cannot read {name}: {e.strerror}", hint=_exclude_hint(rel)) from e
        if e.errno is None:  # tarfile: the file shrank between listing and reading
            raise JobtpuError(f"{self.current} changed while it was archived", hint="run the command again") from e
        raise JobtpuError(f"could not write the snapshot of {self.src}: {e.strerror}",
                          hint=f"check the free space and permissions of {self.tmp.parent}") from e


class _AbortableReader:
    """What tarfile copies a file from: counts progress, and stops the copy once the archiver is aborted."""

    def __init__(self, f: BinaryIO, archiver: _Archiver) -> None:
        self.f, self.archiver = f, archiver

    def read(self, n: int = -1) -> bytes:
        if self.archiver.aborted:
            raise _Aborted
        data = self.f.read(n)
        self.archiver.done += len(data)
        return data


def _head(tree: _Tree, rel: str) -> bytes:
    """The first bytes of a file, for the credentials check; b"" when unreadable (archiving says why)."""
    from jobtpu.snapshot.private_files import HEAD_BYTES
    try:
        with tree.open(rel) as f:
            return f.read(HEAD_BYTES)
    except OSError:
        return b""


def _hash_file(tree: _Tree, rel: str, on_bytes: Callable[[int], None]) -> str:
    h = hashlib.sha256()
    with tree.open(rel) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            on_bytes(len(chunk))
    return h.hexdigest()


def _stamp(st: os.stat_result) -> list[int | str]:
    """What git's index compares too: a same-size edit that restores the mtime still changes the ctime."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _tmp_name(archives_dir: Path) -> Path:
    return archives_dir / f"{_TMP_PREFIX}{os.getpid()}.{secrets.token_hex(8)}.tmp"


def _remove_dead_tmps(archives_dir: Path) -> None:
    """Temporary files left by a snapshot whose process died (SIGKILL, a power cut) before its cleanup."""
    for path in archives_dir.glob(f"{_TMP_PREFIX}*.tmp"):
        pid = path.name[len(_TMP_PREFIX):].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process
        return True
    return True


def _say_left_out(console: Console, hidden: dict[str, int]) -> None:
    if not hidden:
        return
    from rich.markup import escape
    count, folders = sum(hidden.values()), sorted(hidden)
    names = ", ".join(folders[:5]) + (f" and {len(folders) - 5} more" if len(folders) > 5 else "")
    console.print(f"[yellow]note:[/] left out {count} file{'s' * (count != 1)} under the symlinked "
                  f"folder{'s' * (len(folders) != 1)} {escape(names)}: a snapshot never reads through a "
                  "symlinked folder (make it a real folder to send its files)", soft_wrap=True, highlight=False)


def snapshot(src: Path, archives_dir: Path, include: Sequence[str] = (), exclude: Sequence[str] = (),
             console: Console | None = None, home: Path | None = None, leave_out: Sequence[Path] = (),
             allow_secrets: bool = False) -> Snapshot:
    """Archive what list_files keeps into archives_dir/<content sha256>.tar.gz, unless it is there already.
    Refused, unless allow_secrets, for a login home folder or a folder whose kept files hold credentials.
    Interrupted (KeyboardInterrupt or any exception), it stops within a read and leaves no temporary file."""
    if console is None:
        from rich.console import Console
        console = Console(stderr=True)
    from jobtpu.snapshot import private_files as credentials
    root = _check_src(src)
    if not allow_secrets:
        credentials.check_not_login_home(root)
    with _Tree(root) as tree:
        t0 = time.time_ns()
        listing = _collect(tree, include, exclude, _Private(tree.root, home, leave_out))
        if not allow_secrets:
            credentials.check_no_secrets(root, (rel for rel, st in listing.entries if stat.S_ISREG(st.st_mode)),
                                         lambda rel: _head(tree, rel))
        _say_left_out(console, listing.through_symlinks)
        _say_many(console, len(listing.entries))
        return _archive(tree, listing.entries, archives_dir, console, t0)


def _archive(tree: _Tree, entries: list[tuple[str, os.stat_result]], archives_dir: Path, console: Console,
             t0: int) -> Snapshot:
    src_s = tree.root
    make_dirs(archives_dir)
    _remove_dead_tmps(archives_dir)
    cache_path = archives_dir / _CACHE_NAME
    try:  # a lost or damaged cache only costs a re-hash
        old_cache = json.loads(cache_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        old_cache = {}
    old_cache = old_cache if isinstance(old_cache, dict) else {}
    cache: dict[str, list[int | str]] = {k: v for k, v in old_cache.items() if not k.startswith(src_s + os.sep)}
    shas: dict[str, str] = {}
    misses: list[tuple[str, os.stat_result]] = []
    for rel, st in entries:
        key = os.path.join(src_s, rel)
        if stat.S_ISLNK(st.st_mode):
            shas[rel] = hashlib.sha256(os.fsencode(tree.readlink(rel))).hexdigest()
            continue
        hit = old_cache.get(key)
        if isinstance(hit, list) and len(hit) == 5 and hit[:4] == _stamp(st):
            shas[rel], cache[key] = str(hit[4]), hit
        else:
            misses.append((rel, st))
    size = sum(st.st_size for _, st in entries)
    miss_bytes = sum(st.st_size for _, st in misses)
    bar = _Bar(console, miss_bytes + size)
    tmp = _tmp_name(archives_dir)
    archiver: _Archiver | None = None
    hashed = 0

    def on_bytes(n: int) -> None:
        nonlocal hashed
        hashed += n
        bar.update(hashed + (archiver.done if archiver else 0))

    try:  # from here on, any exception (Ctrl-C, SIGTERM) stops the archiver and removes tmp
        if miss_bytes > _HASH_FIRST_BYTES:
            archiver = _Archiver(src_s, entries, tmp)
        for rel, st in misses:
            try:
                shas[rel] = _hash_file(tree, rel, on_bytes)
            except OSError as e:
                where = e.filename or os.path.join(src_s, rel)
                raise JobtpuError(f"cannot read {where}: {e.strerror}", hint=_exclude_hint(rel)) from e
            if st.st_mtime_ns < t0 - _RACY_NS:  # as git's racy check: an edit in the same tick is caught
                cache[os.path.join(src_s, rel)] = [*_stamp(st), shas[rel]]
        digest = hashlib.sha256()
        for rel, st in entries:
            kind = "l" if stat.S_ISLNK(st.st_mode) else "x" if st.st_mode & 0o111 else "f"
            digest.update(b"%s\0%s\0%s\n" % (os.fsencode(rel), kind.encode(), shas[rel].encode()))
        name = f"{digest.hexdigest()}.tar.gz"
        final = archives_dir / name
        reused = final.exists()
        if not reused:
            archiver = archiver or _Archiver(src_s, entries, tmp)
            while archiver.is_alive():
                archiver.join(0.1)
                bar.update(hashed + archiver.done)
            archiver.check()
            os.replace(tmp, final)
    finally:
        if archiver is not None:  # a no-op once it finished; stops it within a read on an error or a reuse
            archiver.aborted = True
            archiver.join()
        if bar.progress is not None:
            bar.progress.stop()
        tmp.unlink(missing_ok=True)
    if cache != old_cache:  # atomically; but a cache we cannot write is not worth failing a submit over
        with contextlib.suppress(OSError):
            write_atomic(cache_path, json.dumps(cache, separators=(",", ":")).encode(), sync=False)
    largest = [(rel, st.st_size) for rel, st in sorted(entries, key=lambda e: (-e[1].st_size, e[0]))[:5]]
    if size > LARGE_SNAPSHOT_BYTES:
        from rich.markup import escape

        from jobtpu.views.text import printable
        names = ", ".join(f"{escape(printable(rel))} ({n / 1e6:.0f} MB)" for rel, n in largest)
        console.print(f"[yellow]warning:[/] the snapshot of {escape(printable(src_s))} holds {size / 1e6:.0f} MB in "
                      f"{len(entries)} files; largest: {names}. Leave some out with .gitignore or --exclude.")
    return Snapshot(name, final, len(entries), size, reused, largest)
