"""The snapshot of a job's working folder: which files are kept (git's ignore rules, or gitignore_parser
outside git), their hash cache, and the deterministic, content-addressed .tar.gz holding them."""

from __future__ import annotations

import contextlib
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
from typing import TYPE_CHECKING

from jobtpu.errors import JobtpuError
from jobtpu.home import make_dirs, open_new, write_atomic

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

LARGE_SNAPSHOT_BYTES = 300 * 1024 * 1024
COMPRESS_LEVEL = 1  # half the time of level 6 for ~10% more bytes to upload (measured with bench/snapshot.py)
_CACHE_NAME = ".hashcache.json"
_RACY_NS = 1_000_000_000  # a file modified this close to the snapshot may change again within its mtime tick
_HASH_FIRST_BYTES = 64 << 20  # below this, hash before archiving: a reverted tree then costs no tar at all
_PROGRESS_AFTER = 0.5


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


def list_files(src: Path, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[str]:
    """Sorted posix relpaths of the regular files and symlinks (kept as links) a snapshot of `src` holds.

    Kept: what `.gitignore` does not ignore (git's own rules via `git ls-files` inside a checkout, else
    every `.gitignore` met while walking, nested ones and `!negations` included), plus files matching an
    `include` glob even if ignored, minus files matching an `exclude` glob; `.git/` never. A glob matches
    the relpath with fnmatch semantics (`*` crosses `/`); a glob without `/` also matches the basename;
    a glob naming a directory (`data/` or `data`) matches everything under it."""
    return [rel for rel, _ in _collect(_check_src(src), include, exclude)]


def _check_src(src: Path) -> str:
    if not src.is_dir():
        what = "is not a folder" if src.exists() else "does not exist"
        raise JobtpuError(f"the folder to snapshot {what}: {src}", hint="pass --dir PATH naming a folder")
    return os.path.abspath(src)


def _collect(src: str, include: Sequence[str], exclude: Sequence[str]) -> list[tuple[str, os.stat_result]]:
    inc, exc = _compile_globs(include), _compile_globs(exclude)
    names = _git_files(src)
    keep = set(names if names is not None else _walk(src, exc, ignore=True))
    if inc:
        keep.update(rel for rel in _walk(src, exc, ignore=False) if _glob_match(rel, inc))
    out = []
    for rel in sorted(keep):
        if ".git" in rel.split("/") or _glob_match(rel, exc):
            continue
        try:
            st = os.lstat(os.path.join(src, rel))
        except FileNotFoundError:
            continue  # tracked by git but deleted from the working tree
        except OSError as e:
            raise JobtpuError(f"cannot read {os.path.join(src, rel)}: {e.strerror}", hint=_exclude_hint(rel)) from e
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            out.append((rel, st))
    return out


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


def _walk(src: str, exclude: list[re.Pattern[str]], ignore: bool) -> list[str]:
    """Files and symlinks under src, pruning .git, excluded folders and (with ignore) .gitignore'd ones."""
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
            elif not _glob_match(path, exclude):
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
    """A transient progress bar, shown only once the snapshot has taken _PROGRESS_AFTER seconds."""

    def __init__(self, console: Console, total: int) -> None:
        self.console, self.total, self.start = console, total, time.monotonic()
        self.progress: Progress | None = None

    def update(self, done: int) -> None:
        if self.progress is None and time.monotonic() - self.start > _PROGRESS_AFTER:
            from rich.progress import DownloadColumn, Progress
            self.progress = Progress(*Progress.get_default_columns(), DownloadColumn(), console=self.console,
                                     transient=True)
            self.progress.add_task("snapshot", total=self.total)
            self.progress.start()
        if self.progress is not None:
            self.progress.update(self.progress.task_ids[0], completed=done)


class _Archiver(threading.Thread):
    """Writes src's entries, in the given order, into `tmp` as a normalised tar.gz. A thread is enough:
    file reads and zlib release the GIL, so it runs alongside the hashing at the speed of `tar -z`."""

    def __init__(self, src: str, entries: list[tuple[str, os.stat_result]], tmp: Path) -> None:
        super().__init__(daemon=True)
        self.src, self.entries, self.tmp = src, entries, tmp
        self.done, self.aborted, self.current = 0, False, ""
        self.error: OSError | None = None
        self.start()

    def run(self) -> None:
        try:
            with os.fdopen(open_new(self.tmp), "wb") as out:
                with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=COMPRESS_LEVEL,
                                   mtime=0) as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tf:
                    for rel, st in self.entries:
                        if self.aborted:
                            return
                        info = self._info(rel, st)
                        if info.issym():
                            tf.addfile(info)
                            continue
                        self.current = os.path.join(self.src, rel)
                        with open(self.current, "rb") as f:
                            tf.addfile(info, f)
                        self.done += st.st_size
                out.flush()
                os.fsync(out.fileno())
        except OSError as e:  # raised as a JobtpuError by the calling thread
            self.error = e

    def _info(self, rel: str, st: os.stat_result) -> tarfile.TarInfo:
        info = tarfile.TarInfo(rel)  # uid, gid 0 and uname, gname "" already; never a hard link
        info.mtime = 0
        if stat.S_ISLNK(st.st_mode):
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(os.path.join(self.src, rel)), 0o777
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


def _hash_file(path: str, on_bytes: Callable[[int], None]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            on_bytes(len(chunk))
    return h.hexdigest()


def snapshot(src: Path, archives_dir: Path, include: Sequence[str] = (), exclude: Sequence[str] = (),
             console: Console | None = None) -> Snapshot:
    """Archive what list_files keeps into archives_dir/<content sha256>.tar.gz, unless it is there already."""
    if console is None:
        from rich.console import Console
        console = Console(stderr=True)
    src_s = _check_src(src)
    t0 = time.time_ns()
    entries = _collect(src_s, include, exclude)
    make_dirs(archives_dir)
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
            shas[rel] = hashlib.sha256(os.fsencode(os.readlink(key))).hexdigest()
            continue
        hit = old_cache.get(key)
        if isinstance(hit, list) and hit[:3] == [st.st_size, st.st_mtime_ns, st.st_ino] and len(hit) == 4:
            shas[rel], cache[key] = str(hit[3]), hit
        else:
            misses.append((rel, st))
    size = sum(st.st_size for _, st in entries)
    miss_bytes = sum(st.st_size for _, st in misses)
    bar = _Bar(console, miss_bytes + size)
    tmp = archives_dir / f".tmp-{secrets.token_hex(8)}"
    archiver = _Archiver(src_s, entries, tmp) if miss_bytes > _HASH_FIRST_BYTES else None
    hashed = 0

    def on_bytes(n: int) -> None:
        nonlocal hashed
        hashed += n
        bar.update(hashed + (archiver.done if archiver else 0))

    try:
        for rel, st in misses:
            key = os.path.join(src_s, rel)
            try:
                shas[rel] = _hash_file(key, on_bytes)
            except OSError as e:
                raise JobtpuError(f"cannot read {key}: {e.strerror}", hint=_exclude_hint(rel)) from e
            if st.st_mtime_ns < t0 - _RACY_NS:
                cache[key] = [st.st_size, st.st_mtime_ns, st.st_ino, shas[rel]]
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
        if archiver is not None:  # a no-op once it finished; stops it on an error or a reuse
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
        names = ", ".join(f"{escape(rel)} ({n / 1e6:.0f} MB)" for rel, n in largest)
        console.print(f"[yellow]warning:[/] the snapshot of {escape(src_s)} holds {size / 1e6:.0f} MB in "
                      f"{len(entries)} files; largest: {names}. Leave some out with .gitignore or --exclude.")
    return Snapshot(name, final, len(entries), size, reused, largest)
