"""The hash cache (`<archives>/.hashcache.json`, docs/reference/home-files.md) as its type: by a kept
file's absolute path, its stamp (size, mtime, ctime and inode, in nanoseconds) and its sha256."""

from typing import Annotated

from jobtpu.schema.msgspec_lib import Meta, msgspec

Sha256 = Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]
Stamp = tuple[int, int, int, int]
Entry = tuple[int, int, int, int, Sha256]
HashCacheFile = dict[str, Entry]

_DECODER = msgspec.json.Decoder(HashCacheFile)


def read_hash_cache(data: bytes) -> HashCacheFile:
    """The cache's entries; a damaged file (a crash, a hand edit) reads as empty: it only costs a re-hash."""
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return {}
