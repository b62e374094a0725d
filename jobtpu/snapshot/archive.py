"""The snapshot of a job's working folder: the files selection.py keeps, hashed (through the hash
cache) into the archive's content-addressed name, and archived by tarball.py unless that archive exists.

Every file is read relative to the snapshot's root one folder at a time, never through a symlinked
folder, and the home's own files (state, secrets, archives, logs, ...) are never packed."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, cast

from jobtpu.errors import JobtpuError
from jobtpu.home.layout import make_dirs
from jobtpu.schema.hash_cache import Kept
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.snapshot.hashcache import HashCache, hash_file
from jobtpu.snapshot.selection import NeverPacked, check_src, collect, say_left_out, say_many
from jobtpu.snapshot.tree import FolderTree, exclude_hint

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from jobtpu.snapshot.tarball import Archiver

LARGE_SNAPSHOT_BYTES = 300 * 1024 * 1024
_HASH_FIRST_BYTES = 64 << 20  # below this, hash before archiving: a reverted tree then costs no tar at all
_PROGRESS_AFTER = 0.5
TMP_PREFIX = ".snapshot."  # + "<pid>.<random>.tmp": a later snapshot removes those of dead processes


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def home_problem(home_root: Path, name: str) -> str | None:
    """Why the home's snapshot `archives/<name>` cannot be sent (missing, damaged, or not a regular
    file: a link or a FIFO a member put there is refused at once, never followed nor waited on)."""
    from jobtpu.home import safefs
    from jobtpu.snapshot.unpack import problem

    try:
        fd = safefs.open_file(home_root, PurePath("archives", name))
    except FileNotFoundError:
        return "is missing"
    except safefs.UnsafePath as e:
        return e.why
    with os.fdopen(fd, "rb") as f:
        return problem(name, f)


class ArchiveInfo(msgspec.Struct, frozen=True):
    """The archive a snapshot made, or found already made, and what it holds."""

    name: str  # "<64-hex sha256>.tar.gz": the hash of the sorted (relpath, kind, content-sha256) list
    path: Path  # archives_dir / name
    files: int  # number of files kept
    size: int  # total bytes of kept files
    reused: bool  # True when the archive already existed, nothing was written
    largest: list[tuple[str, int]]  # the 5 largest kept files (relpath, bytes), biggest first


class _StderrConsole:
    """rich's stderr Console, made only when something is printed or a bar may be drawn: a small
    snapshot prints nothing, and importing rich would be a third of a plain submit's time."""

    def __init__(self) -> None:
        self._console: Console | None = None

    def _real(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True)
        return self._console

    @property
    def is_terminal(self) -> bool:
        # rich draws for a terminal, or where FORCE_TERMINAL / TTY_COMPATIBLE say to
        if self._console is None and not sys.stderr.isatty() and not {"FORCE_TERMINAL", "TTY_COMPATIBLE"} & set(os.environ):
            return False
        return self._real().is_terminal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)


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


def _head(tree: FolderTree, rel: str) -> bytes:
    """The first bytes of a file, for the credentials check; b"" when unreadable (archiving says why)."""
    from jobtpu.snapshot.private_files import HEAD_BYTES
    try:
        with tree.open(rel) as f:
            return f.read(HEAD_BYTES)
    except OSError:
        return b""


def snapshot(src: Path, archives_dir: Path, include: Sequence[str] = (), exclude: Sequence[str] = (),
             console: Console | None = None, home: Path | None = None, leave_out: Sequence[Path] = (),
             allow_secrets: bool = False) -> ArchiveInfo:
    """Archive what list_files keeps into archives_dir/<content sha256>.tar.gz, unless it is there already.
    Refused, unless allow_secrets, for a login home folder or a folder whose kept files hold credentials.
    Interrupted (KeyboardInterrupt or any exception), it stops within a read and leaves no temporary file."""
    if console is None:
        console = cast("Console", _StderrConsole())
    with FolderTree(_checked_root(src, allow_secrets)) as tree:
        t0 = time.time_ns()
        entries = _kept_entries(tree, include, exclude, home, leave_out, allow_secrets, console)
        return _archive(tree, entries, archives_dir, console, t0)


def check_snapshot(src: Path, include: Sequence[str] = (), exclude: Sequence[str] = (), home: Path | None = None,
                   leave_out: Sequence[Path] = (), allow_secrets: bool = False) -> int:
    """Every check `snapshot` makes (the folder, a login home, credentials among the kept files),
    and its notes, writing nothing: `submit --dry-run`'s. The number of files it would keep."""
    console = cast("Console", _StderrConsole())
    with FolderTree(_checked_root(src, allow_secrets)) as tree:
        return len(_kept_entries(tree, include, exclude, home, leave_out, allow_secrets, console))


def _checked_root(src: Path, allow_secrets: bool) -> str:
    from jobtpu.snapshot import private_files as credentials

    root = check_src(src)
    if not allow_secrets:
        credentials.check_not_login_home(root)
    return root


def _kept_entries(tree: FolderTree, include: Sequence[str], exclude: Sequence[str], home: Path | None,
                  leave_out: Sequence[Path], allow_secrets: bool, console: Console) -> list[tuple[str, os.stat_result]]:
    """The files a snapshot keeps, refused when one holds a credential (unless allow_secrets)."""
    from jobtpu.snapshot import private_files as credentials

    listing = collect(tree, include, exclude, NeverPacked(tree.root, home, leave_out))
    if not allow_secrets:
        credentials.check_no_secrets(tree.root, (rel for rel, st in listing.entries if stat.S_ISREG(st.st_mode)),
                                     lambda rel: _head(tree, rel))
    say_left_out(console, listing.through_symlinks)
    say_many(console, len(listing.entries))
    return listing.entries


def _archiver(src: str, entries: list[tuple[str, os.stat_result]], tmp: Path) -> Archiver:
    # A thread and tarfile: loaded only when an archive is written, not for a snapshot found made.
    from jobtpu.snapshot.tarball import Archiver

    return Archiver(src, entries, tmp)


def _archive(tree: FolderTree, entries: list[tuple[str, os.stat_result]], archives_dir: Path, console: Console,
             t0: int) -> ArchiveInfo:
    src_s = tree.root
    make_dirs(archives_dir)
    remove_dead_tmps(archives_dir)
    cache = HashCache(archives_dir, src_s)
    shas: dict[str, str] = {}
    misses: list[tuple[str, os.stat_result]] = []
    for rel, st in entries:
        if stat.S_ISLNK(st.st_mode):
            shas[rel] = _sha256(os.fsencode(tree.readlink(rel)))
        elif (known := cache.known(rel, st)) is not None:
            shas[rel] = known
        else:
            misses.append((rel, st))
    size = sum(st.st_size for _, st in entries)
    miss_bytes = sum(st.st_size for _, st in misses)
    bar = _Bar(console, miss_bytes + size)
    tmp = tmp_name(archives_dir)
    archiver: Archiver | None = None
    hashed = 0

    def on_bytes(n: int) -> None:
        nonlocal hashed
        hashed += n
        bar.update(hashed + (archiver.done if archiver else 0))

    try:  # from here on, any exception (Ctrl-C, SIGTERM) stops the archiver and removes tmp
        if miss_bytes > _HASH_FIRST_BYTES:
            archiver = _archiver(src_s, entries, tmp)
        for rel, st in misses:
            try:
                shas[rel] = hash_file(tree, rel, on_bytes)
            except OSError as e:
                where = e.filename or os.path.join(src_s, rel)
                raise JobtpuError(f"cannot read {where}: {e.strerror}", hint=exclude_hint(rel)) from e
            cache.remember(rel, st, shas[rel], t0)
        kept = [(rel, kind_of(st)) for rel, st in entries]
        name = cache.named(kept) or content_name(kept, shas)  # the same files unchanged: the same name
        cache.name(kept, name)
        final = archives_dir / name
        reused = _is_regular(final)  # a link, a FIFO or a folder planted there is replaced, never read
        if not reused:
            archiver = archiver or _archiver(src_s, entries, tmp)
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
    cache.save()
    largest = [(rel, st.st_size) for rel, st in sorted(entries, key=lambda e: (-e[1].st_size, e[0]))[:5]]
    if size > LARGE_SNAPSHOT_BYTES:
        from rich.markup import escape

        from jobtpu.render.text import printable
        names = ", ".join(f"{escape(printable(rel))} ({n / 1e6:.0f} MB)" for rel, n in largest)
        console.print(f"[yellow]warning:[/] the snapshot of {escape(printable(src_s))} holds {size / 1e6:.0f} MB in "
                      f"{len(entries)} files; largest: {names}. Leave some out with .gitignore or --exclude.")
    return ArchiveInfo(name, final, len(entries), size, reused, largest)


def kind_of(st: os.stat_result) -> str:
    """A kept file's kind as its archive's name counts it: a link, an executable or a plain file."""
    return "l" if stat.S_ISLNK(st.st_mode) else "x" if st.st_mode & 0o111 else "f"


def content_name(kept: list[Kept], shas: dict[str, str]) -> str:
    """The archive's name: the sha256 of its sorted (relpath, kind, content sha256) list, so the same
    files make the same name whoever snapshots them, and unpack.py can check an archive against it."""
    import hashlib  # here: a snapshot that names its archive from the hash cache never loads it

    digest = hashlib.sha256()
    for rel, kind in kept:
        digest.update(b"%s\0%s\0%s\n" % (os.fsencode(rel), kind.encode(), shas[rel].encode()))
    return f"{digest.hexdigest()}.tar.gz"


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def tmp_name(archives_dir: Path) -> Path:
    # os.urandom, not the secrets module: its imports (random, hmac, base64) would cost every submit.
    return archives_dir / f"{TMP_PREFIX}{os.getpid()}.{os.urandom(8).hex()}.tmp"


def remove_dead_tmps(archives_dir: Path) -> None:
    """Temporary files left by a snapshot whose process died (SIGKILL, a power cut) before its cleanup."""
    for path in archives_dir.glob(f"{TMP_PREFIX}*.tmp"):
        pid = path.name[len(TMP_PREFIX):].split(".", 1)[0]
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

