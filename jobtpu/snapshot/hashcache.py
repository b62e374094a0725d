"""The hash cache (`<archives>/.hashcache.json`): a kept file's sha256 by its absolute path, valid while
its size, mtime, ctime and inode are those recorded, so an unchanged tree is not read again; and the
archive a folder's last snapshot named, with the files it named it from, so a snapshot that keeps the
same files unchanged names its archive without hashing anything (nor loading hashlib)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path, PurePath

from jobtpu.home import safefs
from jobtpu.home.layout import write_atomic
from jobtpu.schema.hash_cache import Entry, HashCacheFile, Kept, Named, Stamp, read_hash_cache
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.snapshot.tree import FolderTree

CACHE_NAME = ".hashcache.json"
RACY_NS = 1_000_000_000  # a file modified this close to the snapshot may change again within its mtime tick


def stamp(st: os.stat_result) -> Stamp:
    """What git's index compares too: a same-size edit that restores the mtime still changes the ctime."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def hash_file(tree: FolderTree, rel: str, on_bytes: Callable[[int], None]) -> str:
    import hashlib  # here: a snapshot that names its archive from the cache never loads it (OpenSSL, 2.6 ms)

    h = hashlib.sha256()
    with tree.open(rel) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            on_bytes(len(chunk))
    return h.hexdigest()


class HashCache:
    """The cache as one snapshot of `root` uses it: entries of other roots kept as they are, this
    root's rebuilt from the hits and the files hashed now (a deleted file's entry goes)."""

    def __init__(self, archives_dir: Path, root: str) -> None:
        self.path, self.root = archives_dir / CACHE_NAME, root
        try:  # a lost, damaged or planted cache (a link, a FIFO) only costs a re-hash; saving replaces it
            raw = safefs.read_regular(archives_dir.parent, PurePath(archives_dir.name, CACHE_NAME), safefs.CAP_LARGE)
            self.old: HashCacheFile = read_hash_cache(raw)
        except (OSError, safefs.UnsafePath):
            self.old = HashCacheFile()
        self.entries: dict[str, Entry] = {k: v for k, v in self.old.files.items() if not k.startswith(root + os.sep)}
        self.names: dict[str, Named] = dict(self.old.names)

    def known(self, rel: str, st: os.stat_result) -> str | None:
        """The file's sha256 when the cache holds it for exactly this stat, else None."""
        key = os.path.join(self.root, rel)
        hit = self.old.files.get(key)
        if hit is not None and hit[:4] == stamp(st):
            self.entries[key] = hit
            return hit[4]
        return None

    def remember(self, rel: str, st: os.stat_result, sha: str, started_ns: int) -> None:
        if st.st_mtime_ns < started_ns - RACY_NS:  # as git's racy check: an edit in the same tick is caught
            self.entries[os.path.join(self.root, rel)] = (*stamp(st), sha)

    def named(self, kept: list[Kept]) -> str | None:
        """The archive name of the last snapshot of this folder, when it kept these very files (the
        same paths and kinds, in order) and each of them is a hit now: the name is a function of the
        paths, kinds and contents (archive.content_name), and a hit's content is the one recorded."""
        last = self.names.get(self.root)
        if last is None or last.kept != kept or not all(self._hit(rel, kind) for rel, kind in kept):
            return None
        return last.archive

    def _hit(self, rel: str, kind: str) -> bool:
        """This snapshot took the file's sha256 from the cache (known() kept the old entry as it was).
        A link's target is read each time, not stamped: a folder with one names its archive anew."""
        key = os.path.join(self.root, rel)
        return kind != "l" and key in self.old.files and self.entries.get(key) is self.old.files[key]

    def name(self, kept: list[Kept], archive: str) -> None:
        """Record the archive this snapshot named from `kept`; forgotten unless every file is remembered
        (a racy one is hashed again next time, so the name must be made again too)."""
        if all(kind != "l" and os.path.join(self.root, rel) in self.entries for rel, kind in kept):
            self.names[self.root] = Named(archive, kept)
        else:
            self.names.pop(self.root, None)

    def save(self) -> None:
        """Atomically, when changed; but a cache we cannot write is not worth failing a submit over."""
        new = HashCacheFile(self.entries, self.names)
        if new != self.old:
            with contextlib.suppress(OSError):
                write_atomic(self.path, msgspec.json.encode(new), sync=False)
