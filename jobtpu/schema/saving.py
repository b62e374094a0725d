"""How a job says that it saved a checkpoint, and where its checkpoints live (submit --saved-when,
--saved-marker, --checkpoints: docs/reference/commands.md §2.2.8), and what an attempt's record keeps
of its last save, as state.json holds them. Their checks and what follows from them: decide/saving.py."""

from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import Time


class Saving(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, frozen=True, gc=False):
    """A job's way of saving: a log pattern, a marker file, its checkpoints' place (each None: not given)."""

    when: str | None = None  # --saved-when: an RE2 pattern a line of worker 0's log matches when it saved
    marker: str | None = None  # --saved-marker: a file in the job's folder, written anew by each save
    checkpoints: str | None = None  # --checkpoints: a gs:// template with {region}

    @property
    def watched(self) -> bool:
        """Whether jobtpu can tell an attempt that saved from one that did not."""
        return self.when is not None or self.marker is not None


class Saved(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """An attempt's last save as jobtpu saw it: when (the marker's time, or when its line came home)
    and the region it ran in ("" when machines.json names no zone): where its checkpoint is."""

    at: Time
    region: str = ""
