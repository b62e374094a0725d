"""runner.json (docs/reference/home-files.md §1.3) as msgspec types: the account whose passes run
every member's local jobs, and the privileged keys of machines.json it lays over that file, each in
machines.json's shape. A key they do not name is refused, listing the valid ones; each key's
description ends the sentence "'key' ..." of the one line a wrong value gets (schema/decode.py).
Each machine's entry stays raw until it is decoded on its own, so that its error names it."""

from typing import Annotated

from jobtpu.schema.msgspec_lib import UNSET, Meta, Raw, Struct, UnsetType, msgspec

_Text = Annotated[str | None | UnsetType, Meta(description="must be a string")]
_Object = Meta(description="must be an object")
LoginName = Annotated[str, Meta(min_length=1)]


class _Keys(Struct, forbid_unknown_fields=True, frozen=True):
    """An object of runner.json: only the keys its class names; a key absent stays UNSET, so that
    only the keys the file holds lie over machines.json's."""


class RunnerDefaults(_Keys, frozen=True):
    identity_file: _Text = UNSET


class RunnerApi(_Keys, frozen=True):
    """`gcp` and `sheet`: where their API is and the credentials it is called with."""

    credentials: _Text = UNSET
    api_endpoint: _Text = UNSET


class RunnerMachine(_Keys, frozen=True):
    identity_file: _Text = UNSET
    root: _Text = UNSET
    setup: Annotated[list[str] | UnsetType, Meta(description="must be a list of shell commands")] = UNSET


class RunnerFile(_Keys, frozen=True):
    runner: Annotated[LoginName | None, Meta(description="must be an account's login name")] = None
    allow_private_webhooks: Annotated[bool, Meta(description="must be true or false")] = False
    defaults: Annotated[RunnerDefaults | UnsetType, _Object] = UNSET
    machines: Annotated[dict[str, Raw] | UnsetType, Meta(description="must map machine names to objects")] = UNSET
    gcp: Annotated[RunnerApi | UnsetType, _Object] = UNSET
    sheet: Annotated[RunnerApi | UnsetType, _Object] = UNSET
    # Destinations added to machines.json's, checked with them (home/privileged.py, decide/destinations.py).
    notify: Raw | UnsetType = UNSET


def privileged_keys(doc: RunnerFile, machines: dict[str, RunnerMachine]) -> dict[str, object]:
    """The keys runner.json lays over machines.json, in machines.json's shape: only those it holds."""
    found: dict[str, object] = {}
    for section in ("defaults", "gcp", "sheet"):
        part = getattr(doc, section)
        if part is not UNSET:
            found[section] = msgspec.to_builtins(part)
    if doc.machines is not UNSET:
        found["machines"] = {name: msgspec.to_builtins(entry) for name, entry in machines.items()}
    if doc.notify is not UNSET:
        found["notify"] = msgspec.json.decode(doc.notify)
    return found
