"""What `status` lists and how its cells read (run time, overrides in their short form, resources
or allocation, why a queued job waits; rows.py makes the rows of them), the count per status, and
the jobs `clean` moved to history.jsonl. Pure but for reading history.jsonl and
machines.json's aliases and machine names; rich stays in display.py."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping

from jobtpu.errors import ConfigError, JobtpuError, NotFoundError
from jobtpu.home.layout import Home
from jobtpu.home.safefs import CAP_LARGE, read_regular
from jobtpu.render.names import short_names, with_short_names
from jobtpu.schema.decode import FileRefused
from jobtpu.schema.state import Job, Status
from jobtpu.schema.state_file import decode_history_line

STATUS_ORDER = tuple(s.value for s in Status)


def status_counts(jobs: Iterable[Job]) -> str:
    """`2 queued, 3 running, 1 failed`: how many of the selected jobs are in each status (in the
    order a job moves through them), so a table cut short still tells the whole story."""
    counts = Counter(job.status.value for job in jobs)
    parts = [f"{counts[s]} {s}" for s in STATUS_ORDER if counts[s]]
    return ", ".join(parts) if parts else "no jobs"


# ---- a row's cells --------------------------------------------------------------------------------

def run_time(job: Job, now: float) -> float | None:
    """How long the job has run, over all its attempts (a running one up to now); None before its first."""
    spans = [(a.ended if a.ended is not None else now) - a.started for a in job.attempts if a.started is not None]
    return sum(spans) if spans else None


def where(job: Job, short: Mapping[str, str] | None = None) -> str:
    """On a machine: the machine and what it holds there (`box gpu=0,1`; a bare slot is not named).
    Queued: what it asks for and where it is pinned (`v3-32 @v3-p1`). Ended: where it last ran.
    Machines by their short names (`short`: name → first alias, render/names.py)."""
    def named(machine: str) -> str:
        return (short or {}).get(machine, machine)

    if job.active and job.machine:
        held = [f"{resource}={','.join(map(str, indices))}" for resource, indices in job.alloc.items()
                if resource != "slot"]
        return " ".join([_gang_named(job.gang, named) or named(job.machine), *held])
    if job.status is Status.QUEUED:
        return " ".join([*job.req, *([f"@{named(job.pin)}"] if job.pin else []),
                         *([f"{job.slices} slices"] if job.slices > 1 else [])])
    if job.attempts:
        return _gang_named(job.attempts[-1].gang, named) or named(job.attempts[-1].machine)
    return ""


def _gang_named(gang: list[str], named: Callable[[str], str]) -> str:
    """A gang's machines as one cell: `4 slices: a,b,c,d` (empty for one slice)."""
    return f"{len(gang)} slices: {','.join(named(m) for m in gang)}" if gang else ""


def short_overrides(overrides: list[str], aliases: Mapping[str, str], first: Collection[str] = ()) -> str:
    """The job's config overrides as a person typed them: `--config.training.lr=0.01` reads `lr=0.01`
    when an alias names that key (the shortest such alias), else as the key itself. The keys in
    `first` come first (what tells the job from its neighbours must survive a cut cell), a key of
    them that no alias names by the shortest end of it that no other of them shares
    (`config.model.dropout=0.1` reads `dropout=0.1`)."""
    return " ".join(shown_overrides(overrides, aliases, first))


def shown_overrides(overrides: list[str], aliases: Mapping[str, str], first: Collection[str] = (),
                    pairs: list[tuple[str, str]] | None = None) -> list[str]:
    """short_overrides' words, those of the keys in `first` first (`pairs`: override_pairs', when
    the caller has them)."""
    shortest: dict[str, str] = {}
    for alias, full in aliases.items():
        if full not in shortest or len(alias) < len(shortest[full]):
            shortest[full] = alias
    pairs = sorted(override_pairs(overrides) if pairs is None else pairs, key=lambda pair: pair[0] not in first)
    return [f"{shortest.get(key) or (key_end(key, first) if key in first else key)}{rest}" for key, rest in pairs]


def key_end(key: str, keys: Collection[str]) -> str:
    """The shortest dotted end of `key` that no other of `keys` ends with: `dropout` for
    `config.model.dropout` beside `config.model.depth`; the whole key when every end is shared."""
    parts = key.split(".")
    for n in range(1, len(parts)):
        end = ".".join(parts[-n:])
        if not any(other != key and (other == end or other.endswith("." + end)) for other in keys):
            return end
    return key


def override_pairs(overrides: list[str]) -> list[tuple[str, str]]:
    """Each override as (its full key, the rest: `=value`), in the order given."""
    pairs = []
    for word in overrides:
        for part in shell_words(word):
            key, sep, value = part.lstrip("-").partition("=")
            pairs.append((key, sep + value))
    return pairs


def varying_keys(jobs: Iterable[Job]) -> dict[int | None, frozenset[str]]:
    """Per sweep (None: the jobs of no sweep), the override keys whose values are not the same in all
    its jobs listed: the axes that tell its members apart."""
    groups: dict[int | None, list[dict[str, str]]] = {}
    for job in jobs:
        groups.setdefault(job.sweep, []).append(dict(override_pairs(job.overrides)))
    return {sweep: frozenset(key for key in set().union(*found) if len({o.get(key) for o in found}) > 1)
            for sweep, found in groups.items()}


# One shell word: runs of plain characters, '…', "…" (with \" and \\ inside) and \x, possessive
# so a match never backtracks: linear in the word however long (shlex.split is quadratic in it).
_WORD = re.compile(r"""(?:[^\s'"\\]++|'[^']*+'|"(?:[^"\\]++|\\.)*+"|\\.)++""", re.DOTALL)
_PIECE = re.compile(r"""[^'"\\]++|'([^']*+)'|"((?:[^"\\]++|\\.)*+)"|\\(.)""", re.DOTALL)
_IN_DOUBLE = re.compile(r"""\\([\\"])""")


_PLAIN = re.compile(r"""[\s'"\\]""")


def shell_words(text: str) -> list[str]:
    """`text` split as a POSIX shell splits it (what shlex.split gives for the words shlex.quote
    makes), in linear time; a text a shell could not split (a quote left open) is one word as it is."""
    if not _PLAIN.search(text):  # one plain word (`--config.lr=0.1`): nothing to split or unquote
        return [text] if text else []
    words, end = [], 0
    for match in _WORD.finditer(text):
        if text[end:match.start()].strip():
            return [text]
        words.append("".join(_unquote(piece) for piece in _PIECE.finditer(match.group())))
        end = match.end()
    return words if not text[end:].strip() else [text]


def _unquote(piece: re.Match[str]) -> str:
    single, double, escaped = piece.groups()
    if single is not None:
        return single
    if double is not None:
        return _IN_DOUBLE.sub(r"\1", double)
    return escaped if escaped is not None else piece.group()


def info(job: Job, short: Mapping[str, str] | None = None, waiting: str | None = None) -> str:
    """The last column: why it stopped or waits (machines by their short names; `waiting`: that
    reason so written, when the caller has it), then its note, then its last log line."""
    parts = [job.reason or ""]
    if job.status is Status.QUEUED:
        if waiting is None:
            waiting = with_short_names(job.waiting, short or {}) if job.waiting else ""
        parts.append(waiting or "no pass has tried it yet")
    parts.append(f"note: {job.note}" if job.note else "")
    if job.status is not Status.QUEUED:
        parts.append(job.last_line)
    return "; ".join(p for p in parts if p)


def attempt_text(job: Job) -> str:
    """The attempt number, and what led to it, each cause counted apart (docs/reference/requests-and-rules.md
    §7.3): preemptions, infrastructure recoveries (a lost worker, grpc, a hang) and --retries (the job's
    own non-zero exits): `5 (3 pre, 1 infra, 1/2 retry)`."""
    parts = []
    if job.preemptions:
        parts.append(f"{job.preemptions} pre")
    if job.recoveries:
        parts.append(f"{job.recoveries} infra")
    if job.retries:
        parts.append(f"{job.retried}/{job.retries} retry")
    return f"{job.attempt} ({', '.join(parts)})" if parts else str(job.attempt)


def config_aliases(home: Home) -> tuple[dict[str, str], dict[str, str]]:
    """The aliases overrides are shown through (built-in, the team's, the viewer's own), and the
    machines' short names (render/names.py). A machines.json that cannot be read costs the team's
    aliases and the short names only: `status` must still work while someone fixes it."""
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.settings import effective_aliases, viewer_settings

    try:
        fleet = load_fleet(home)
        team, short = dict(fleet.config_aliases), short_names((m.name, m.aliases) for m in fleet.machines.values())
    except ConfigError:
        team, short = {}, {}
    try:
        own = dict(viewer_settings(home).aliases)
    except JobtpuError:
        own = {}
    return effective_aliases(team, own), short


# ---- history --------------------------------------------------------------------------------------

def history(home: Home) -> list[Job]:
    """The jobs `clean` moved to history.jsonl, newest first (a job listed twice, after a crash
    between the append and the save, counts once: its last line)."""
    path = home.history_file
    try:
        lines = read_regular(home.root, path, CAP_LARGE).splitlines()  # a FIFO there is one line, never a hang
    except FileNotFoundError:
        return []
    by_id: dict[int, Job] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            job = decode_history_line(line)
        except FileRefused as e:
            raise ConfigError(f"{path.name}:{number}: {e}", hint=f"fix or delete that line of {path}") from None
        by_id.pop(job.id, None)
        by_id[job.id] = job
    return list(reversed(by_id.values()))


def find_job(home: Home, jobs: list[Job], job_id: int) -> Job:
    """The job with this id in state.json, else in history.jsonl (a cleaned job keeps its id, logs
    and results); NotFoundError when neither has it."""
    return find_jobs(home, jobs, [job_id])[0]


def find_jobs(home: Home, jobs: list[Job], ids: list[int]) -> list[Job]:
    """find_job for several ids (each once, in id order), reading history.jsonl at most once."""
    wanted = set(ids)
    by_id = {j.id: j for j in jobs if j.id in wanted}
    if len(by_id) < len(wanted):
        by_id.update((j.id, j) for j in history(home) if j.id in wanted and j.id not in by_id)
    missing = sorted(wanted - by_id.keys())
    if missing:
        raise no_such_job(missing[0], home)
    return [by_id[i] for i in sorted(wanted)]


def require_current(home: Home, jobs: list[Job], job_id: int, act: str) -> Job:
    """The job with this id in state.json, for a command that changes it (`act`: kill, resume,
    tag...). A job `clean` moved to history.jsonl is not changed any more: the error says that is
    where it went, rather than that it does not exist."""
    job = next((j for j in jobs if j.id == job_id), None)
    if job is not None:
        return job
    if any(j.id == job_id for j in history(home)):
        raise NotFoundError(f"job {job_id} was moved to history.jsonl by `clean`; {act} changes only the jobs "
                            "in state.json", hint=f"`jobtpu status {job_id}` shows it; submit it again to run it again")
    raise no_such_job(job_id, home)


def no_such_job(job_id: int, home: Home | None = None) -> NotFoundError:
    if home is not None and _waits_in_spool(home, job_id):
        return NotFoundError(f"job {job_id} was submitted and waits in the spool for the runner's next pass",
                             hint="`jobtpu requests` shows what waits; the runner's loop takes it in within seconds")
    return NotFoundError(f"no job {job_id} in state.json nor in history.jsonl",
                         hint="`jobtpu status --all-users --all` lists every job; add --history for those "
                              "`clean` moved out")


def _waits_in_spool(home: Home, job_id: int) -> bool:
    """Whether a submit in a shared home's spool claims this id (docs/reference/home-files.md §1.3)."""
    import os

    from jobtpu.home.roles import SPOOL
    from jobtpu.home.spool import entries

    try:
        names = os.listdir(home.root / SPOOL)
    except OSError:
        return False
    return any(e.kind == "submit" and e.first <= job_id < e.first + e.n for e in entries(names))
