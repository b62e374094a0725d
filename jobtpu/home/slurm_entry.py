"""machines.json's keys of a Slurm cluster (kind `slurm`, docs/reference/machines-json.md §3.3.1): what
such an entry needs, and that no other kind of machine takes them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from jobtpu.schema.decode import FileRefused
from jobtpu.schema.machines_file import MachineEntry
from jobtpu.schema.msgspec_lib import UNSET

SLURM_KEYS = ("partition", "account", "qos", "constraint")  # what every sbatch of the cluster asks for


def check(entry: MachineEntry, check_host: Callable[[str], object]) -> None:
    """Refuse, in one line, a Slurm key on another kind, a login host that is not one, or a Slurm name
    that would not survive the batch script's words (a space, a quote). A cluster without `host` is
    reached on this computer: jobtpu runs on its login node (docs/reference/machines-json.md §3.3.1)."""
    if entry.kind != "slurm" and (entry.host is not UNSET or any(getattr(entry, k) is not None for k in SLURM_KEYS)):
        given = "host" if entry.host is not UNSET else next(k for k in SLURM_KEYS if getattr(entry, k) is not None)
        raise FileRefused(f"'{given}' is only for kind slurm (an ssh machine lists its 'hosts')")
    if entry.kind != "slurm":
        return
    if entry.host is not UNSET:
        if not isinstance(entry.host, str) or not entry.host.strip():
            raise FileRefused("a slurm machine's 'host' must be its login host as \"addr\" or \"addr:port\" "
                              "(leave it out when jobtpu runs on the login node itself)")
        check_host(entry.host)
    for key in SLURM_KEYS:
        value = getattr(entry, key)
        if value is not None and (not value or any(c.isspace() or c == "'" for c in value)):
            raise FileRefused(f"'{key}' {value!r} must be a Slurm name: no spaces")


def here_root(root: str) -> str:
    """The root of a cluster whose login node is this computer (no `host`): in this account's home, as a
    login host's is in the login user's, made absolute since this process's folder is anyone's guess."""
    return str(Path("~").expanduser() / root)
