"""The hash cache (`<archives>/.hashcache.json`, docs/reference/home-files.md) as its type: by a kept
file's absolute path, its stamp (size, mtime, ctime and inode, in nanoseconds) and its sha256; and by
a snapshotted folder, the archive its last snapshot named and the files it kept, in order."""

from typing import Annotated

from jobtpu.schema.msgspec_lib import Meta, Struct, msgspec

Sha256 = Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]
Stamp = tuple[int, int, int, int]
Entry = tuple[int, int, int, int, Sha256]
ArchiveName = Annotated[str, Meta(pattern=r"^[0-9a-f]{64}\.tar\.gz$")]
Kept = tuple[str, str]  # a kept file's path in the folder, and its kind: "f", "x" (executable) or "l" (a link)


class Named(Struct, array_like=True, forbid_unknown_fields=True):
    """What a folder's last snapshot named its archive, and the files it named it from."""

    archive: ArchiveName
    kept: list[Kept]


class HashCacheFile(Struct, forbid_unknown_fields=True):
    files: dict[str, Entry] = {}
    names: dict[str, Named] = {}  # by the folder's absolute path


_DECODER = msgspec.json.Decoder(HashCacheFile)


def read_hash_cache(data: bytes) -> HashCacheFile:
    """The cache; a damaged file (a crash, a hand edit, the shape of before) reads as empty: it only
    costs a re-hash."""
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return HashCacheFile()
