"""Priority classes across users (docs/reference/machines-json.md §3.13): machines.json's
`priority_classes`, lowest first, each saying who may use it, whether it is the default and how long
a job of it runs before a higher class may evict it (`min_runtime`). As Kueue's WorkloadPriorityClass
ranks workloads and Slurm's QOS with PreemptMode=REQUEUE requeues what it preempts (PreemptExemptTime
is min_runtime). Pure: parsed from the file's JSON value, one line naming the key for a wrong one."""

import re
from typing import Any

from jobtpu.schema.decode import FileRefused
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.names import USER_NAME

CLASS_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
MIN_RUNTIME = 600.0  # seconds a job runs before it may be evicted, when its class does not say
_KEYS = ("users", "default", "min_runtime")


class PriorityClass(msgspec.Struct, frozen=True):
    name: str
    rank: int  # 0 the lowest; a higher rank evicts a lower one
    users: tuple[str, ...] | None = None  # who may submit with it; None: everyone
    min_runtime: float = MIN_RUNTIME

    def allows(self, user: str) -> bool:
        return self.users is None or user in self.users


class Classes(msgspec.Struct, frozen=True):
    """The team's classes, lowest first, and the one a job without --class gets."""

    ranked: tuple[PriorityClass, ...]
    default: str

    def of(self, name: str | None) -> PriorityClass:
        """A job's class: its own, or the default for none (or one machines.json no longer has)."""
        found = next((c for c in self.ranked if c.name == name), None) if name else None
        return found or next(c for c in self.ranked if c.name == self.default)

    def refusal(self, name: str, user: str) -> str | None:
        """Why `user` may not submit with class `name` (one line), or None when they may."""
        found = next((c for c in self.ranked if c.name == name), None)
        if found is None:
            return f"--class {name}: no such priority class (machines.json has {', '.join(self.names)})"
        if not found.allows(user):
            return f"--class {name}: {user} may not use it (machines.json allows {', '.join(found.users or ())})"
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.ranked)


class ClassesRefused(FileRefused):
    """machines.json's priority_classes is wrong: the message says where and how (the loader names the file)."""


def parse_classes(doc: Any) -> Classes | None:
    """machines.json's `priority_classes` (an object, lowest class first); None when it has none."""
    if doc is None:
        return None
    if not isinstance(doc, dict) or not doc:
        raise ClassesRefused("'priority_classes' must be a non-empty object of class name → class, lowest first")
    ranked: list[PriorityClass] = []
    defaults: list[str] = []
    for rank, (name, entry) in enumerate(doc.items()):
        where = f"priority_classes.{name[:40]}"
        if not CLASS_NAME.match(name):
            raise ClassesRefused(f"{where}: a class name must be lowercase letters, digits, '-' or '_'")
        if not isinstance(entry, dict):
            raise ClassesRefused(f"{where} must be an object (users, default, min_runtime)")
        unknown = sorted(set(entry) - set(_KEYS))
        if unknown:
            raise ClassesRefused(f"{where}: unknown key {unknown[0][:40]!r} (known: {', '.join(_KEYS)})")
        users = entry.get("users")
        if users is not None and (not isinstance(users, list) or not all(
                isinstance(u, str) and USER_NAME.match(u) for u in users)):
            raise ClassesRefused(f"{where}.users must be a list of user names")
        runtime = entry.get("min_runtime", MIN_RUNTIME)
        if isinstance(runtime, bool) or not isinstance(runtime, int | float) or not runtime >= 0:
            raise ClassesRefused(f"{where}.min_runtime must be a number of seconds ≥ 0")
        if entry.get("default", False) not in (True, False):
            raise ClassesRefused(f"{where}.default must be true or false")
        if entry.get("default"):
            if users is not None:
                raise ClassesRefused(f"{where}: the default class must be open to everyone (no users)")
            defaults.append(name)
        ranked.append(PriorityClass(name, rank, tuple(users) if users is not None else None, float(runtime)))
    if len(defaults) > 1:
        raise ClassesRefused(f"priority_classes: one default class, not {len(defaults)} ({', '.join(defaults)})")
    if not defaults and ranked[0].users is not None:
        raise ClassesRefused(f"priority_classes.{ranked[0].name}: the lowest class is the default when none says "
                             "\"default\": true, and must be open to everyone (no users)")
    return Classes(tuple(ranked), defaults[0] if defaults else ranked[0].name)
