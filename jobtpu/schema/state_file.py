"""state.json's bytes ↔ State (docs/reference/state-json.md §4): a strict typed decode, whose faults
schema/decode.py tells in JSON paths with the job's id or the machine's name first, and the file's
layout (one job per line), written so that two States are equal exactly when their files are."""

import re
from pathlib import Path
from typing import Any, NamedTuple

from jobtpu.errors import ConfigError
from jobtpu.schema.decode import FileRefused, decode, explain, parse_json_file
from jobtpu.schema.job_checks import job_problem
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.records import MachineRecord, machine_problem
from jobtpu.schema.state import VERSION, Job, State

_DECODER = msgspec.json.Decoder(State)
_ENCODER = msgspec.json.Encoder()


def decode_state(raw: bytes | str, path: Path) -> State:
    """state.json's bytes as a State, strictly: every type (msgspec), then what types cannot say
    (id uniqueness, status and reason words, requests...). Anything wrong is one ConfigError naming
    the file, the job or machine, and the path of the bad value."""
    hint = f"fix {path} by hand (the last good copy is {path.name}.bak); nothing was changed"
    try:
        state = _DECODER.decode(raw)
    except RecursionError:  # in a free-form part (a node's spec), where no type bounds the depth
        raise ConfigError(f"{path.name}: nested too deeply to be a jobtpu file", hint) from None
    except msgspec.MsgspecError as e:
        # Not JSON at all, or a number JSON cannot carry: said in the standard library's words
        # (line and column). Otherwise the value at the path has the wrong shape.
        data = parse_json_file(path, raw)
        if not isinstance(e, msgspec.ValidationError):  # text only the standard library takes (a lone surrogate)
            raise ConfigError(f"{path.name}: not valid JSON text ({str(e)[:80]})", hint) from None
        raise ConfigError(f"{path.name}: {explain(str(e), State, data, paths=_label)}", hint) from None
    if state.version != VERSION:
        raise ConfigError(f"{path.name}: version {state.version!r} is not one this jobtpu reads ({VERSION})", hint)
    seen: set[int] = set()
    for job in state.jobs:
        problem = job_problem(job)
        if problem is not None:
            raise ConfigError(f"{path.name}: job {job.id}: {problem}", hint)
        if job.id in seen:
            raise ConfigError(f"{path.name}: job id {job.id} appears twice", hint)
        seen.add(job.id)
    for name, record in state.machines.items():
        problem = machine_problem(record)
        if problem is not None:
            raise ConfigError(f"{path.name}: machine {name!r}: {problem}", hint)
    if not -2**63 <= state.next_id < 2**63:
        raise ConfigError(f"{path.name}: the number {str(state.next_id)[:30]} is too large", hint)
    # Ids are never reused, even if a user deleted the newest job or lowered next_id by hand.
    state.next_id = max([state.next_id, *(j.id + 1 for j in state.jobs)])
    return state


def decode_history_line(line: bytes) -> Job:
    """One line of history.jsonl as the Job it records; FileRefused saying what is wrong in the same
    words as state.json's (the path within the line, the job's id first)."""
    try:
        return decode(line, Job, paths=_history_label)
    except msgspec.DecodeError as e:
        raise FileRefused(f"not a job record ({str(e)[:100]})") from None


def _history_label(path: str, data: Any) -> tuple[str, str]:
    job_id = data.get("id") if isinstance(data, dict) else None
    return (f"job {job_id}: " if isinstance(job_id, int) and not isinstance(job_id, bool) else ""), path


def _label(path: str, data: Any) -> tuple[str, str]:
    """What a path of state.json is about: "job 7: " for $.jobs[3]..., "machine 'm': " for
    $.machines[...] (msgspec does not say which key: the first record that fails is the one)."""
    job = re.match(r"\$\.jobs\[(\d+)\]", path)
    if job and isinstance(data, dict) and isinstance(data.get("jobs"), list):
        record = data["jobs"][int(job[1])]
        job_id = record.get("id") if isinstance(record, dict) else None
        return (f"job {job_id}: " if isinstance(job_id, int) and not isinstance(job_id, bool) else ""), path
    if path.startswith("$.machines[...]") and isinstance(data, dict) and isinstance(data.get("machines"), dict):
        name = _failing_machine(data["machines"])
        if name is not None:
            return f"machine {name!r}: ", path.replace("[...]", f"[{name!r}]", 1)
    return "", path


def _failing_machine(machines: dict[str, Any]) -> str | None:
    for name, record in machines.items():
        try:
            msgspec.convert(record, MachineRecord)
        except msgspec.ValidationError:
            return name
    return None


class Encoded(NamedTuple):
    """A State as state.json's parts: each job's line, and the rest. Two are equal exactly when
    their files would be."""

    head: bytes  # version and next_id
    jobs: list[bytes]
    ids: list[int]
    machines: list[bytes]  # one `"name": {...}` per machine


def encode_jobs(jobs: list[Job]) -> list[bytes]:
    """Each job as its line of state.json (msgspec encodes the Structs directly, no dicts between)."""
    return list(map(_ENCODER.encode, jobs))


def encode_head(state: State) -> bytes:
    """Everything of state.json but its jobs and machines."""
    enc = _ENCODER.encode
    head = b'  "version": %d,\n  "next_id": %d,\n' % (state.version, state.next_id)
    if state.runner_token:
        head += b'  "runner_token": %d,\n' % state.runner_token
    if state.last_pass is not None:
        head += b'  "last_pass": ' + enc(state.last_pass) + b",\n"
    if state.untold:
        head += b'  "untold": ' + enc(state.untold) + b",\n"
    return head


def encode(state: State) -> Encoded:
    enc = _ENCODER.encode
    head = encode_head(state)
    return Encoded(head=head,
                   jobs=encode_jobs(state.jobs), ids=[job.id for job in state.jobs],
                   machines=[enc(name) + b": " + enc(record) for name, record in state.machines.items()])


def records(jobs: list[Job]) -> list[dict[str, Any]]:
    """The jobs as plain objects, each as state.json stores it (for tables)."""
    records: list[dict[str, Any]] = msgspec.to_builtins(jobs)
    return records


def jobs_document(jobs: list[Job]) -> bytes:
    """`{"jobs": [...]}` as `status --json` prints it: the records as state.json stores them."""
    return b'{"jobs":[' + b",".join(encode_jobs(jobs)) + b"]}\n"


def render(encoded: Encoded) -> bytes:
    """state.json's layout: one job per line (easy to read, grep and edit by hand, and a third smaller
    than indenting every field), one machine per line, the rest indented."""
    machines = (b'  "machines": {\n    ' + b",\n    ".join(encoded.machines) + b"\n  },\n"
                if encoded.machines else b'  "machines": {},\n')
    jobs = b'  "jobs": [\n' + b"".join(b"    " + line + b",\n" for line in encoded.jobs[:-1]) + (
        b"    " + encoded.jobs[-1] + b"\n" if encoded.jobs else b"") + b"  ]\n"
    return b"{\n" + encoded.head + machines + jobs + b"}\n"

