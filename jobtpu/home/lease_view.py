"""The runner lease in words (`jobtpu runner`, `status`, `doctor`), and which filesystems a standby
can work on (docs/reference/home-files.md §1.7). Pure: the caller reads the lease, /proc/mounts, the clock."""

from __future__ import annotations

from jobtpu.home.lease_rules import Lease

# Filesystems two boxes mount with exclusive create, atomic rename and hard links that every client sees.
SHARED_OK = frozenset({"nfs", "nfs4", "lustre", "gpfs", "ceph", "beegfs", "glusterfs", "fuse.glusterfs",
                       "fuse.cephfs", "ocfs2", "gfs2"})
# Local filesystems: a standby works only on this same box (another box cannot see the home).
LOCAL = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "f2fs", "jfs", "reiserfs",
                   "bcachefs", "ramfs"})


def filesystem_of(path: str, mounts: str) -> str | None:
    """The type of the filesystem holding `path` (a real path), from /proc/mounts' text: the mount
    point that is the longest prefix of it. None when no line says."""
    best, kind = -1, None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, kind = len(point), fields[2]
    return kind


def filesystem_line(kind: str | None) -> tuple[str, bool]:
    """What `doctor` says of the home's filesystem for a standby, and whether it is a problem there."""
    if kind is None:
        return "home filesystem: unknown (no /proc/mounts line); a standby needs NFSv4 or another shared " \
               "filesystem with atomic rename and hard links", False
    if kind in SHARED_OK:
        return f"home filesystem: {kind}: shared, a standby runner on another box can work here", False
    if kind in LOCAL:
        return (f"home filesystem: {kind}: local to this box; a standby on another box cannot see this home "
                "(put the home on NFSv4 or another shared filesystem for one)"), False
    if kind.startswith("fuse") or kind in {"cifs", "smb3", "smbfs", "9p", "vboxsf"}:
        return (f"home filesystem: {kind}: a standby cannot work here (its renames or hard links are not "
                "atomic for every client); put the home on NFSv4 or another POSIX shared filesystem"), True
    return f"home filesystem: {kind}: not known to jobtpu; a standby needs atomic rename and hard links " \
           "seen by every box", False


def ago(seconds: float) -> str:
    return f"{seconds:.0f}s ago" if seconds >= 0 else f"{-seconds:.0f}s in this box's future"


def lease_lines(top: int, lease: Lease | None, standbys: list[tuple[str, float]], now: float) -> list[tuple[str, bool]]:
    """The lease for people: (line, problem). `now`: wall time (what the lines show; nothing is decided on it)."""
    if top == 0:
        return [("runner lease: none (no standby was started; passes run without a lease)", False)]
    lines: list[tuple[str, bool]] = []
    if lease is None:
        lines.append((f"runner lease: lease/{top} is damaged (not a lease of token {top}); a standby takes it over "
                      "after one lease, or remove the file for its runner to write it again", True))
    else:
        age = now - lease.renewed
        state = ("handed over, waiting for a standby" if lease.released
                 else f"expired {age - lease.seconds:.0f}s ago, by this box's clock" if age > lease.seconds
                 else f"holds for {lease.seconds - age:.0f}s more")
        lines.append((f"runner: {lease.holder} (pid {lease.pid}), lease token {top}, renewed {ago(age)}, {state}",
                      lease.released or age > lease.seconds))
        if age < -lease.seconds:
            lines.append((f"runner lease: renewed {ago(age)}: the clocks of this box and {lease.box} differ; a "
                          "takeover waits on elapsed time, never on them", True))
    holder = lease.holder if lease is not None else None
    waiting = [f"{name} (looked {ago(now - when)})" for name, when in standbys if name != holder]
    lines.append(("standby: " + (", ".join(waiting) if waiting else "none seen"), False))
    return lines
