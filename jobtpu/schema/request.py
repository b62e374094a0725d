"""What a job asks for, as its `--req` tokens say it (docs/reference/requests-and-rules.md §6): counts
of resources, accelerator patterns, preemptible or on-demand, parsed into one shared Request. Beside
accelerator.py, which parses the patterns; decide/fit.py says whether a machine could give it. Pure."""

import functools
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from jobtpu.errors import JobtpuError
from jobtpu.schema.accelerator import accelerator
from jobtpu.schema.msgspec_lib import msgspec

# A machine's resources are handed out by index, one list per job and pass: a count in the billions
# would make every pass spin. (The same bound as a job's stored allocation; see model.MAX_COUNT.)
MAX_RESOURCE_COUNT = 1024

_COUNT = re.compile(r"([a-z][a-z0-9_]{0,31})=([0-9]+)")  # whole (fullmatch), in ASCII digits


class Request(msgspec.Struct, frozen=True):
    """What a job asks for. parse_request shares one Request between every job that asks the same, so
    nothing in it can be changed: the counts are a read-only mapping."""

    resources: Mapping[str, int] = msgspec.field(default_factory=lambda: MappingProxyType({}))
    accelerators: tuple[tuple[str, ...], ...] = ()  # every token must match; a token is alternatives
    preemptible: bool | None = None

    def needs(self) -> dict[str, int]:
        """The counts to allocate: what was asked, or one slot when nothing was."""
        asked = {k: v for k, v in self.resources.items() if v > 0}
        return asked or {"slot": 1}


def parse_request(tokens: Sequence[str]) -> Request:
    """The request `--req` tokens make, parsed once per distinct list: a pass over 10,000 queued jobs
    (and every read of state.json, which checks each job's) parses each request it meets once. The
    Request is shared, and read-only."""
    return _parsed(tuple(tokens))


@functools.lru_cache(maxsize=4096)
def _parsed(tokens: tuple[str, ...]) -> Request:
    resources: dict[str, int] = {}
    accelerators: list[tuple[str, ...]] = []
    preemptible: bool | None = None
    for token in tokens:
        token = token.strip()
        if token in ("preemptible", "on-demand"):
            preemptible = token == "preemptible"
            continue
        if "=" in token:
            match = _COUNT.fullmatch(token)
            if not match:
                raise JobtpuError(f"--req {token!r}: a resource request is NAME=COUNT, like gpu=2")
            if len(match[2]) > 9 or int(match[2]) > MAX_RESOURCE_COUNT:  # no machine offers more
                raise JobtpuError(f"--req {token[:60]!r}: at most {MAX_RESOURCE_COUNT} of a resource")
            resources[match[1]] = resources.get(match[1], 0) + int(match[2])
            continue
        alternatives = tuple(a.strip() for a in token.split(","))
        for alt in alternatives:
            found = accelerator(alt)
            if found is None or found.config_spelling:
                raise JobtpuError(
                    f"--req {token!r}: not a resource (gpu=2) nor an accelerator pattern",
                    hint="accelerator patterns: v3-32 (exact), v3 (family), v2-32,v3-32 (either), v3+ (v3 or newer),"
                         " preemptible, on-demand")
        accelerators.append(alternatives)
    return Request(resources=MappingProxyType(resources), accelerators=tuple(accelerators), preemptible=preemptible)
