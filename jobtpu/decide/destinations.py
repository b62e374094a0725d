"""Notification destinations: the `notify` lists of machines.json and of users' settings, parsed
into Destinations (a webhook or a command, the notification names it wants, whose jobs it hears of).
Here, above schema/ and render/, because its error lines show what was typed through render/text.py's
escaping (docs/design.md §5.1: schema < render < decide)."""

import hashlib
import urllib.parse
from typing import Any

from jobtpu.errors import ConfigError
from jobtpu.render.text import printable
from jobtpu.schema.events import NOTIFICATIONS, Event
from jobtpu.schema.msgspec_lib import msgspec

_KEYS = frozenset({"webhook", "command", "events"})


class Destination(msgspec.Struct, frozen=True):
    webhook: str | None
    command: str | None
    events: frozenset[str]
    owner: str | None = None  # a user's own destination (their settings): events of their jobs only
    pinned: bool = False  # posted only to an address checked public as it is sent (webhooks.py)

    @property
    def key(self) -> str:
        """A stable name for the outbox that does not reveal a webhook's secret URL."""
        what = f"webhook {self.webhook}" if self.webhook else f"command {self.command}"
        if self.owner is not None:
            what += f" of {self.owner}"
        return hashlib.sha256(what.encode()).hexdigest()[:16]

    def wants(self, name: str, event: Event) -> bool:
        """Whether this destination hears of `event` (notification `name`): a user's own destination
        hears of their jobs and of what has no owner (machines, failed passes), not of others' jobs."""
        return name in self.events and (self.owner is None or event.user in (None, self.owner))

    @property
    def label(self) -> str:
        """How lines name it: the webhook's host (never its path, which may be the secret) or the command."""
        if self.webhook:
            return f"webhook {urllib.parse.urlsplit(self.webhook).hostname or '?'}"
        command = self.command or ""
        return f"command {command[:40]}{'…' if len(command) > 40 else ''}"


def parse_destinations(doc: Any, where: str = "notify", owner: str | None = None) -> list[Destination]:
    """The destinations a `notify` list names (None: none). One ConfigError line per mistake.
    `owner`: a user's own list (their settings), which may name webhooks only: a command would run
    as whoever runs the passes, which in a shared home is another account."""
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise ConfigError(f"{where} must be a list of destinations, like "
                          '[{"command": "notify-send jobtpu", "events": ["failed"]}]')
    found = [_destination(entry, f"{where}[{i}]") for i, entry in enumerate(doc)]
    if owner is None:
        return found
    if any(d.command is not None for d in found):
        raise ConfigError(f"{where}: a user's own destinations are webhooks only (a command would run as "
                          "whoever runs the passes); ask for a command destination in machines.json's notify")
    return [Destination(d.webhook, None, d.events, owner) for d in found]


def _destination(entry: Any, where: str) -> Destination:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object with \"webhook\" or \"command\", and \"events\"")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (a destination has webhook or command, and events)")
    if ("webhook" in entry) == ("command" in entry):
        raise ConfigError(f"{where} must name exactly one of \"webhook\" (a URL) or \"command\"")
    webhook, command = entry.get("webhook"), entry.get("command")
    if webhook is not None:
        _check_url(webhook, where)
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise ConfigError(f"{where}.command must be a non-empty shell command")
    return Destination(webhook, command, _wanted(entry.get("events"), where))


def _check_url(url: Any, where: str) -> None:
    try:
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        if parts is not None:
            parts.port  # noqa: B018  urllib reads (and refuses) the port only when asked
    except ValueError as e:  # an unclosed [IPv6], a port that is not a number or out of range
        raise ConfigError(f"{where}.webhook is not a valid URL ({e}): {printable(repr(url))}",
                          hint='like "https://hooks.example.com/path" or "http://host:8080/path" (a port up to 65535)') from None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}.webhook must be an http:// or https:// URL (got {printable(repr(url))})")


def _wanted(names: Any, where: str) -> frozenset[str]:
    """The notification names a destination asked for; all of them when it names none."""
    if names is None:
        return frozenset(NOTIFICATIONS)
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where}.events must be a non-empty list of: {', '.join(NOTIFICATIONS)}")
    unknown = [n for n in names if n not in NOTIFICATIONS]
    if unknown:
        raise ConfigError(f"{where}.events: unknown event {printable(repr(unknown[0]))} "
                          f"(choose from {', '.join(NOTIFICATIONS)})")
    return frozenset(names)

