"""The snapshot of a job's working folder: which files are kept (git's ignore rules, or gitignore_parser
outside git), their hash cache, and the deterministic, content-addressed .tar.gz holding them."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import gzip
import hashlib
import json
import os
import re
import secrets
import shutil
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

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

LARGE_SNAPSHOT_BYTES = 300 * 1024 * 1024
COMPRESS_LEVEL = 6  # the same as `tar -czf`: level 1 saves little wall time once hashing overlaps, see bench/
_CACHE_NAME = ".hashcache.json"
_RACY_NS = 1_000_000_000  # a file modified this close to the snapshot may change again within its mtime tick
_HASH_FIRST_BYTES = 64 << 20  # below this, hash before archiving: a reverted tree then costs no tar at all
_CHECKPOINT = 100  # tar records (10 KiB each) between two progress reports
_PROGRESS_AFTER = 0.5
_GIT_ENV = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
_C_ENV = {**_GIT_ENV, "LC_ALL": "C"}


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
    if not src.exists():
        raise JobtpuError(f"the folder to snapshot does not exist: {src}", hint="pass --dir PATH naming a folder")
    if not src.is_dir():
        raise JobtpuError(f"the path to snapshot is not a folder: {src}", hint="pass --dir PATH naming a folder")
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
    return f"make it readable, or leave it out with --exclude {json.dumps(rel)}"


def _git_files(src: str) -> list[str] | None:
    """What git keeps under src (relative to it), or None when src is not in a git checkout."""
    cmd = ["git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    try:
        proc = subprocess.run(cmd, capture_output=True, env=_C_ENV, check=False)
    except OSError:
        return None
    if proc.returncode != 0:
        return None
    m = re.search(rb"could not open directory '(.*?)': (.*)", proc.stderr)
    if m:  # git warns and goes on, which would silently drop a whole folder from the job
        where, why = os.fsdecode(m.group(1)), m.group(2).decode(errors="replace")
        raise JobtpuError(f"cannot read folder {os.path.join(src, where)}: {why}", hint=_exclude_hint(where))
    return [os.fsdecode(n) for n in proc.stdout.split(b"\0") if n and not n.endswith(b"/")]


_Rule = tuple[str, re.Pattern[str], bool, bool]  # (base relpath, regex, negation, directory_only)


def _parse_gitignore(path: str, base: str) -> list[_Rule]:
    from gitignore_parser import rule_from_pattern

    rules: list[_Rule] = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f.read().splitlines():
            line = re.sub(r"(?<!\\) +$", "", line)  # the parser keeps trailing spaces of 1-char patterns
            try:
                r = rule_from_pattern(line, base_path=base or "/")
            except IndexError:  # the parser trips on lines such as "!" or "\"; git ignores them too
                continue
            if r is not None:
                # a negated directory rule only matches paths with a trailing "/"; we pass dirs without one
                rx = r.regex[:-2] + "$" if r.regex.endswith("/$") else r.regex
                rules.append((base, re.compile(rx), r.negation, r.directory_only))
    return rules


def _ignored(rel: str, is_dir: bool, rules: list[_Rule]) -> bool:
    for base, rx, negation, dir_only in reversed(rules):  # the last matching rule wins
        if dir_only and not is_dir:
            continue
        if rx.search(rel[len(base) + 1 :] if base else rel):
            return not negation
    return False


def _walk(src: str, exclude: list[re.Pattern[str]], ignore: bool) -> list[str]:
    """Files and symlinks under src, pruning .git, excluded folders and (with ignore) .gitignore'd ones."""
    out: list[str] = []
    stack: list[tuple[str, list[_Rule]]] = [("", [])]
    while stack:
        rel, rules = stack.pop()
        folder = os.path.join(src, rel)
        if ignore and os.path.isfile(os.path.join(folder, ".gitignore")):
            rules = rules + _parse_gitignore(os.path.join(folder, ".gitignore"), rel)
        try:
            entries = list(os.scandir(folder))
        except OSError as e:
            raise JobtpuError(f"cannot read folder {folder}: {e.strerror}", hint=_exclude_hint(rel)) from e
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if entry.name == ".git" or (ignore and _ignored(path, is_dir, rules)):
                continue
            if is_dir:
                if not _glob_match(path, exclude):
                    stack.append((path, rules))
            else:
                out.append(path)
    return out


def _compile_globs(globs: Sequence[str]) -> list[re.Pattern[str]]:
    out = []
    for g in globs:
        g = g.removeprefix("./").strip("/")
        if not g:
            continue
        body = fnmatch.translate(g).removesuffix(r"\Z")
        if "/" not in g:  # also the basename, or the name of any folder on the way
            body = rf"(?:.*/)?{body}"
        out.append(re.compile(rf"{body}(?:/.*)?\Z", re.S))  # and everything under a matching folder
    return out


def _glob_match(rel: str, globs: list[re.Pattern[str]]) -> bool:
    return any(rx.match(rel) for rx in globs)


class _Bar:
    """A transient progress bar that shows up only once the snapshot has taken _PROGRESS_AFTER seconds."""

    def __init__(self, console: Console, total: int) -> None:
        self.console, self.total, self.start = console, total, time.monotonic()
        self.progress: Progress | None = None

    def update(self, done: int) -> None:
        if self.progress is None and time.monotonic() - self.start > _PROGRESS_AFTER:
            from rich.progress import DownloadColumn, Progress

            self.progress = Progress(*Progress.get_default_columns(), DownloadColumn(), console=self.console,
                                     transient=True)
            self.task = self.progress.add_task("snapshot", total=self.total)
            self.progress.start()
        if self.progress is not None:
            self.progress.update(self.task, completed=done)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


@functools.cache
def _gnu_tar() -> bool:
    try:
        out = subprocess.run(["tar", "--version"], capture_output=True, env=_C_ENV, check=False).stdout
    except OSError:
        return False
    return b"GNU tar" in out and shutil.which("gzip") is not None


class _Archiver:
    """Writes src's entries, in the given order, to `tmp` as a normalised tar.gz, in the background."""

    def __init__(self, src: str, entries: list[tuple[str, os.stat_result]], tmp: Path) -> None:
        self.src, self.entries, self.tmp = src, entries, tmp
        self.done, self.error, self.aborted = 0, "", False
        self.procs: list[subprocess.Popen[bytes]] = []
        self.out = open(tmp, "wb")  # noqa: SIM115 -- closed by finish()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._gnu() if _gnu_tar() else self._python()
        except Exception as e:  # reported by finish() in the calling thread
            self.error = self.error or str(e)

    def _gnu(self) -> None:
        listing = self.tmp.with_suffix(".list")
        listing.write_bytes(b"".join(os.fsencode(rel) + b"\0" for rel, _ in self.entries))
        cmd = ["tar", "--create", "--file=-", "--format=gnu", f"--directory={self.src}", "--null",
               "--verbatim-files-from", "--no-unquote", "--no-recursion", "--hard-dereference", "--mtime=@0",
               "--owner=0", "--group=0", "--numeric-owner", "--mode=a=rX,u+w", f"--checkpoint={_CHECKPOINT}",
               "--checkpoint-action=echo=%u", f"--files-from={listing}"]
        try:
            tar = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_C_ENV)
            gz = subprocess.Popen(["gzip", "-n", f"-{COMPRESS_LEVEL}"], stdin=tar.stdout, stdout=self.out)
            self.procs = [tar, gz]
            if self.aborted:  # kill() ran before the processes existed
                self.kill_procs()
            assert tar.stdout is not None and tar.stderr is not None
            tar.stdout.close()
            for line in tar.stderr:
                tick = line.removeprefix(b"tar: ").strip()
                if tick.isdigit():
                    self.done = int(tick) * _CHECKPOINT * 10240
                elif not self.error:
                    self.error = line.decode(errors="replace").strip()
            if any((tar.wait(), gz.wait())) and not self.error:
                self.error = f"tar exited with {tar.returncode}, gzip with {gz.returncode}"
        finally:
            listing.unlink(missing_ok=True)

    def _python(self) -> None:
        with gzip.GzipFile(filename="", mode="wb", fileobj=self.out, compresslevel=COMPRESS_LEVEL, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tf:
            for rel, st in self.entries:
                if self.aborted:
                    return
                info, path = tarfile.TarInfo(rel), os.path.join(self.src, rel)
                info.mtime, info.uname, info.gname = 0, "", ""
                if stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o755
                    tf.addfile(info)
                    continue
                info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
                try:
                    with open(path, "rb") as f:
                        tf.addfile(info, f)
                except OSError as e:
                    self.error = f"{path}: Cannot open: {e.strerror}"
                    raise
                self.done += st.st_size

    def wait(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def kill_procs(self) -> None:
        for p in self.procs:
            with contextlib.suppress(OSError):
                p.kill()

    def kill(self) -> None:
        self.aborted = True
        self.kill_procs()
        self.thread.join()
        self.out.close()

    def finish(self) -> None:
        self.thread.join()
        try:
            if self.error:
                m = re.match(r"(?:tar: )?(.*?): Cannot (?:open|read|stat)", self.error)
                rel = os.path.relpath(os.path.join(self.src, m.group(1)), self.src) if m else ""
                raise JobtpuError(f"could not archive {self.src}: {self.error}",
                                  hint=_exclude_hint(rel) if rel else "run the submit again")
            self.out.flush()
            os.fsync(self.out.fileno())
        finally:
            self.out.close()


def _hash_file(path: str, on_bytes: Callable[[int], None]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            on_bytes(len(chunk))
    return h.hexdigest()


def _load_cache(path: Path) -> dict[str, list[int | str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # a lost or damaged cache only costs a re-hash
    return data if isinstance(data, dict) else {}


def _save_cache(path: Path, cache: dict[str, list[int | str]]) -> None:
    tmp = path.with_name(f".tmp-{secrets.token_hex(8)}")
    try:
        tmp.write_text(json.dumps(cache, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # not worth failing a submit over


def snapshot(src: Path, archives_dir: Path, include: Sequence[str] = (), exclude: Sequence[str] = (),
             console: Console | None = None) -> Snapshot:
    """Archive what list_files keeps into archives_dir/<content sha256>.tar.gz, unless it is there already."""
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    src_s = _check_src(src)
    t0 = time.time_ns()
    entries = _collect(src_s, include, exclude)
    archives_dir.mkdir(parents=True, exist_ok=True)
    cache_path = archives_dir / _CACHE_NAME
    old_cache = _load_cache(cache_path)
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
        if reused and archiver is not None:
            archiver.kill()
        elif not reused:
            archiver = archiver or _Archiver(src_s, entries, tmp)
            while not archiver.wait(0.1):
                bar.update(hashed + archiver.done)
            archiver.finish()
            os.replace(tmp, final)
    except BaseException:
        if archiver is not None:
            archiver.kill()
        raise
    finally:
        bar.stop()
        tmp.unlink(missing_ok=True)
    if cache != old_cache:
        _save_cache(cache_path, cache)
    largest = [(rel, st.st_size) for rel, st in sorted(entries, key=lambda e: (-e[1].st_size, e[0]))[:5]]
    if size > LARGE_SNAPSHOT_BYTES:
        from rich.markup import escape

        names = ", ".join(f"{escape(rel)} ({n / 1e6:.0f} MB)" for rel, n in largest)
        console.print(f"[yellow]warning:[/] the snapshot of {escape(src_s)} holds {size / 1e6:.0f} MB in "
                      f"{len(entries)} files; largest: {names}. Leave some out with .gitignore or --exclude.")
    return Snapshot(name, final, len(entries), size, reused, largest)
