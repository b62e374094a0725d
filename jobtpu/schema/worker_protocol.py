"""The worker protocol: what the scripts of jobtpu/remote/sh/ print back, one JSON object a line,
decoded into typed reports.

Each line is `{"kind": KIND, ...}` (written by jobtpu_say in sh/common.sh, which escapes every string,
so a log tail, a path or a remote error is data, never framing), and decodes into the Struct whose tag
is KIND. A line that is not one whole report (a job's own output around a setup's report, a line cut
short by a dropped connection, a field of the wrong type) decodes to nothing: the caller treats it as
it treats a worker that said nothing (docs/design.md §4). Log bytes travel base64 inside their
report's `data` string, which msgspec turns back into bytes.
"""

from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Literal, TypeVar

from jobtpu.schema.msgspec_lib import msgspec


class Report(msgspec.Struct, frozen=True, tag_field="kind"):
    """One line a worker script prints."""


class WorkerReport(Report, frozen=True):
    """A report about one worker of one attempt of one job."""

    job: int
    attempt: int
    worker: int


# ---- launch (sh/launch.sh) --------------------------------------------------------------------------

class LaunchOutcome(StrEnum):
    """What launch.sh says of a worker (jobtpu_launch_one's `outcome`)."""

    OK = "ok"
    PENDING = "pending"
    NEED_ARCHIVE = "need-archive"
    BAD_ARCHIVE = "bad-archive"
    FAIL = "fail"


class LaunchLine(WorkerReport, frozen=True, tag="launch"):
    """ok: started (or was already), `pid` its process group; pending: another launch may be under way;
    need-archive | bad-archive: the snapshot is missing or damaged there; fail: `detail` says why."""

    outcome: LaunchOutcome
    pid: int | None = None
    detail: str = ""
    slurm: int | str | None = None  # ok on a Slurm cluster: the Slurm job id, an array member's "<array id>_<index>" (sh/slurm.sh)


# ---- probe (sh/probe.sh) ----------------------------------------------------------------------------

class Host(Report, frozen=True, tag="host"):
    """The probe's first line: the worker's boot id and clock."""

    boot: str | None = None
    now: float | None = None


class WorkerLine(WorkerReport, frozen=True, tag="worker"):
    """A worker's pid record, liveness, exit record (and when it was written, the worker's clock), log
    size, claim, and how many live processes carry its marker (None: not counted, every leader lives)."""

    pid: int | None
    alive: bool
    exit: int | None
    size: int
    claimed: bool
    at: float | None = None
    marked: int | None = None
    timedout: bool = False  # its wrapper stopped it at its --timeout
    preempted: bool = False  # (a Slurm cluster) Slurm requeued or preempted it
    waiting: str = ""  # (a Slurm cluster) why Slurm holds it pending
    unsubmitted: bool = False  # (a Slurm cluster) Slurm forgot the job it took before it ran (a controller crash)


class Log(WorkerReport, frozen=True, tag="log"):
    """The log's bytes from `offset` on (at most a chunk)."""

    offset: int
    data: bytes = b""


class LogEnd(WorkerReport, frozen=True, tag="log-end"):
    """An exited worker's last log bytes, when the pull is further behind than a chunk."""

    data: bytes = b""


class SavedResult(WorkerReport, frozen=True, tag="result"):
    """The value an exited worker 0's job saved (jobtpu.save_result): its file's size, and its bytes
    when that is at most the probe's limit (jobtpu/result.py MAX_RESULT_BYTES)."""

    size: int
    data: bytes | None = None


# ---- kill (sh/kill.sh) ------------------------------------------------------------------------------

class Killed(WorkerReport, frozen=True, tag="kill"):
    gone: bool  # false: some of its processes are still there (stuck)


# ---- doctor (sh/doctor.sh) --------------------------------------------------------------------------

class Root(Report, frozen=True, tag="root"):
    exists: bool


class Disk(Report, frozen=True, tag="disk"):
    free_kib: int | None  # None: df failed


class Tool(Report, frozen=True, tag="tool"):
    name: str
    path: str | None  # None: not installed


class Live(WorkerReport, frozen=True, tag="live"):
    """A live process of one of this home's jobs on the host."""

    pid: int


# ---- the TPU device (sh/tpu.sh) ---------------------------------------------------------------------

class Holder(Report, frozen=True, tag="holder"):
    pid: int
    command: str
    ours: bool  # a live job of this home's holds it


class SlurmAnswer(Report, frozen=True, tag="slurm"):
    """(sh/slurm.sh's doctor) whether Slurm's controller answered at the login host, and what: its
    partitions, or its error."""

    answers: bool
    said: str = ""
    partitions: list[str] = []


class Lock(Report, frozen=True, tag="lock"):
    present: bool  # /tmp/libtpu_lockfile


class Device(Report, frozen=True, tag="device"):
    path: str


class Jax(Report, frozen=True, tag="jax"):
    """What JAX said: the device count it printed (its last line, a number unless something else
    printed last), or the last line of its error; neither: python3 has no jax."""

    said: str | None = None
    error: str | None = None


# ---- one upload per machine (sh/peer.sh) -------------------------------------------------------------

class Serve(Report, frozen=True, tag="serve"):
    """The serving worker's server: listening on `port`, or not started and why."""

    outcome: Literal["ok", "fail"]
    port: int | None = None
    detail: str = ""


class Fetch(Report, frozen=True, tag="fetch"):
    """A peer's fetch: ok, held (it shares the serving worker's disk), fail (no copy came) or bad (a
    copy came, and is not the snapshot: deleted, never unpacked)."""

    outcome: Literal["ok", "held", "fail", "bad"]
    detail: str = ""


# ---- machine setup (sh/setup.sh) --------------------------------------------------------------------

class SetupReport(Report, frozen=True, tag="setup"):
    outcome: Literal["done", "running", "failed"]
    code: int | None = None  # a failed setup's exit code
    detail: str = ""  # why, or the end of its log

    @property
    def said(self) -> str:
        """The report in words: `done`, `running`, `failed CODE`, `failed CODE: DETAIL`."""
        code = f" {self.code}" if self.code is not None else ""
        return f"{self.outcome}{code}" + (f": {self.detail}" if self.detail else "")


# ---- saves and checkpoints (sh/probe.sh, sh/checkpoints.sh) --------------------------------------------

class SavedMark(WorkerReport, frozen=True, tag="saved"):
    """The job's --saved-marker exists and was written since the attempt started: when (the worker's clock)."""

    at: float


class Copied(Report, frozen=True, tag="copy"):
    """A checkpoint copy before a resumed attempt starts: ok (done now or by an earlier launch) or
    fail, with gcloud's last words."""

    outcome: Literal["ok", "fail"]
    detail: str = ""


# ---- a kept connection's shell (sh/serve.sh) --------------------------------------------------------

class Got(Report, frozen=True, tag="got"):
    """The kept shell has the script whole and runs it."""


class Ran(Report, frozen=True, tag="ran"):
    """The script ran: its exit code, then this many bytes of its stdout and of its stderr follow."""

    code: int
    stdout: Annotated[int, msgspec.Meta(ge=0)]
    stderr: Annotated[int, msgspec.Meta(ge=0)]


AnyReport = (LaunchLine | Host | WorkerLine | Log | LogEnd | SavedResult | Killed | Root | Disk | Tool | Live | Holder | Lock | Device
             | Jax | SetupReport | Got | Ran | Serve | Fetch | SlurmAnswer | SavedMark | Copied)
_DECODER = msgspec.json.Decoder(AnyReport)
R = TypeVar("R", bound=Report)


def decode(line: str) -> Report | None:
    """One line as its report, or None when it is not one whole report."""
    if not line.startswith("{"):
        return None  # the usual non-report (a job's output), without building an error for it
    try:
        return _DECODER.decode(line)
    except (msgspec.DecodeError, UnicodeEncodeError):  # the latter: a lone surrogate, no UTF-8 at all
        return None


def reports(stdout: str) -> list[Report]:
    """Every report in a script's output, in order; lines that are none are left out. Lines end at a
    newline only: a string may hold U+2028 or U+0085 as they are, which str.splitlines would break at."""
    return [r for r in map(decode, stdout.split("\n")) if r is not None]


def of_kind(found: Iterable[Report], kind: type[R]) -> list[R]:
    """The reports of one kind (or family, as WorkerReport), in order."""
    return [r for r in found if isinstance(r, kind)]


def is_receipt(line: bytes) -> bool:
    """Whether a kept shell's line is its `got` report."""
    return isinstance(decode(line.decode(errors="replace")), Got)


def ran_header(line: bytes) -> Ran | None:
    """A kept shell's `ran` report, which frames the script's outputs; None when the line is none."""
    report = decode(line.decode(errors="replace"))
    return report if isinstance(report, Ran) else None


def last_setup(stdout: str) -> tuple[list[str], SetupReport | None]:
    """A setup script's output lines before its report, and the report: its last line, or None when
    the last line is no setup report (the script did not run to its end). Only the last line counts:
    a setup command's own output may print anything, a report's look-alike among it."""
    before, _, last = stdout.rstrip("\n").rpartition("\n")
    report = decode(last)
    if isinstance(report, SetupReport):
        return before.splitlines(), report
    return stdout.rstrip("\n").splitlines(), None


def setup_outcome(stdout: str) -> str:
    """The setup script's report (its last line): done | running | failed, or error when there is none
    (the script did not run to its end)."""
    _, report = last_setup(stdout)
    return report.outcome if report is not None else "error"


def setup_said(stdout: str) -> str:
    """The setup script's report in words (`SETUP failed 3: LOG TAIL`), or its output as it is when
    it has none."""
    _, report = last_setup(stdout)
    return f"SETUP {report.said}" if report is not None else stdout.strip()
