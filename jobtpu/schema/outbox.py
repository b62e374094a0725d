"""The notification outbox (`<home>/notify-outbox.json`, docs/reference/home-files.md) as its type:
the notifications not yet taken by their destination, and each slow destination's back-off."""

from typing import Annotated, Any

from jobtpu.schema.msgspec_lib import Meta, msgspec

Count = Annotated[int, Meta(ge=0)]


class Pending(msgspec.Struct):
    """One notification waiting for one destination."""

    dest: str  # the destination's key (a webhook's is a digest: its URL is a secret)
    event: dict[str, Any]  # the event as events.jsonl holds it
    tries: Count  # passes whose delivery of it failed
    name: str = ""  # the notification's name (`failed`, `finished`, …)


class Backoff(msgspec.Struct):
    """A destination whose deliveries ran out of time `strikes` passes in a row sits out `skip` more."""

    strikes: Count = 0
    skip: Count = 0


class Outbox(msgspec.Struct, omit_defaults=True):
    pending: list[Pending]
    # Each entry decoded on its own (read_slow): a damaged back-off costs that back-off, never the
    # notifications waiting beside it.
    slow: dict[str, msgspec.Raw] = {}


def read_slow(raw: dict[str, msgspec.Raw]) -> dict[str, Backoff]:
    slow = {}
    for key, value in raw.items():
        try:
            slow[key] = msgspec.json.decode(value, type=Backoff)
        except msgspec.DecodeError:
            continue
    return slow
