"""The runner lease on disk (docs/reference/home-files.md §1.7): the folder lease/ of a home with a
standby, one file per fencing token (lease/<token>, the highest in force), what each standby has
watched (lease/seen.<runner>@<box>), a planned handover's request (lease/handover).

No flock between boxes: a token is taken by an exclusive create (a hard link of a written file,
whose link count says whether the link was made even when an NFS reply is lost), so two standbys
that both judge a lease expired cannot both take its next token; a holder renews its own file by a
rename. The decisions are lease_rules.py's; fence.py keeps what this process holds."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import time
from pathlib import Path

from jobtpu.home import safefs
from jobtpu.home.layout import Home, write_atomic, write_temp
from jobtpu.home.lease_rules import Lease, Me, Seen

FOLDER = "lease"
HANDOVER = "handover"
_CAP = 4096
_KEEP = 3  # older token files kept for people to read (`jobtpu runner`)


class LeaseUnreadable(OSError):
    """The home's lease folder cannot be read (the home's filesystem gone, a permission)."""


def folder(home: Home) -> Path:
    return home.root / FOLDER


def in_use(home: Home) -> bool:
    """Whether this home has a lease (a standby was ever started): its passes are fenced then."""
    return folder(home).is_dir()


def box_name() -> str:
    """This box's name: $JOBTPU_BOX (two runners on one machine, as tests run them), else the host name."""
    return os.environ.get("JOBTPU_BOX") or os.uname().nodename  # gethostname's, without importing socket


def me() -> Me:
    try:
        runner = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        runner = str(os.geteuid())
    return Me(runner, box_name(), os.getpid())


def boot_id() -> str:
    """This boot's id: monotonic times are comparable only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def ensure(home: Home) -> None:
    """Make lease/ with the modes of the runner's folders (home-files.md §1.4: in a one-writer shared
    home the group reads it, only the runner writes it). A home that is not there (its filesystem
    gone) is never made again here: LeaseUnreadable."""
    try:
        mode = safefs.modes_in(os.stat(home.root).st_mode)[0]  # the home's own folder mode: never the world's
        os.mkdir(folder(home), mode)
        os.chmod(folder(home), mode)  # exactly, whatever the umask
    except FileExistsError:
        pass
    except OSError as e:
        raise LeaseUnreadable(e.errno, f"cannot reach {folder(home)}: {e.strerror}") from None


def tokens(home: Home) -> list[int]:
    """The tokens of lease/'s files, lowest first (LeaseUnreadable when the folder cannot be listed)."""
    try:
        names = os.listdir(folder(home))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise LeaseUnreadable(e.errno, f"cannot read {folder(home)}: {e.strerror}") from None
    return sorted(int(n) for n in names if n.isdigit() and len(n) < 19)


def read(home: Home, token: int) -> Lease | None:
    """lease/<token>, or None when it is missing or damaged (not a lease of that token)."""
    try:
        raw = safefs.read_regular(folder(home), folder(home) / str(token), _CAP)
        doc = json.loads(raw)
        lease = Lease(token=int(doc["token"]), runner=str(doc["runner"]), box=str(doc["box"]), pid=int(doc["pid"]),
                      seconds=float(doc["seconds"]), renewed=float(doc["renewed"]), beat=int(doc["beat"]),
                      released=bool(doc.get("released", False)))
    except (OSError, safefs.UnsafePath, ValueError, KeyError, TypeError):
        return None
    return lease if lease.token == token and lease.seconds > 0 else None


def current(home: Home) -> tuple[int, Lease | None]:
    """The highest token and its lease (None: damaged); (0, None) without any."""
    found = tokens(home)
    top = found[-1] if found else 0
    return top, (read(home, top) if top else None)


def _encode(lease: Lease) -> bytes:
    return (json.dumps(lease._asdict(), indent=1) + "\n").encode()


def create(home: Home, lease: Lease) -> bool:
    """Take lease/<token> if nobody has: an exclusive create. False when another runner took it first."""
    path = folder(home) / str(lease.token)
    tmp = write_temp(path, _encode(lease))
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:
        # NFS: a retried LINK whose first reply was lost fails though it worked; the count tells.
        with contextlib.suppress(OSError):
            return os.stat(tmp).st_nlink == 2
        return False
    finally:
        tmp.unlink(missing_ok=True)


def renew(home: Home, lease: Lease) -> None:
    """Rewrite the holder's own lease/<token> (a rename: readers see the old or the new, whole)."""
    write_atomic(folder(home) / str(lease.token), _encode(lease))


def prune(home: Home, top: int) -> None:
    """Drop token files long superseded (the newest few stay for `jobtpu runner`)."""
    for token in tokens(home):
        if token <= top - _KEEP:
            with contextlib.suppress(OSError):
                (folder(home) / str(token)).unlink()


def _seen_path(home: Home, who: Me) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in who.name)[:120]
    return folder(home) / f"seen.{safe}"


def load_seen(home: Home, who: Me) -> Seen | None:
    """What this standby watched (kept in the home, so cron's single passes go on watching)."""
    try:
        doc = json.loads(safefs.read_regular(folder(home), _seen_path(home, who), _CAP))
        return Seen(int(doc["token"]), int(doc["beat"]), float(doc["since"]), str(doc["boot"]))
    except (OSError, safefs.UnsafePath, ValueError, KeyError, TypeError):
        return None


def save_seen(home: Home, who: Me, seen: Seen) -> None:
    write_atomic(_seen_path(home, who), (json.dumps(seen._asdict()) + "\n").encode(), sync=False)


def standbys(home: Home) -> list[tuple[str, float]]:
    """The standbys that have watched this lease (name, when they last looked: the file's time)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder(home)):
            if entry.name.startswith("seen."):
                found.append((entry.name[len("seen."):], entry.stat(follow_symlinks=False).st_mtime))
    return sorted(found)


def ask_handover(home: Home, by: str) -> None:
    write_atomic(folder(home) / HANDOVER, (json.dumps({"by": by, "time": time.time()}) + "\n").encode())


def handover_asked(home: Home) -> bool:
    return (folder(home) / HANDOVER).exists()


def handover_done(home: Home) -> None:
    (folder(home) / HANDOVER).unlink(missing_ok=True)
