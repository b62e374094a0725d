"""Every shell text jobtpu runs on a machine, and what their output means, side by side.

The bash itself lives in jobtpu/remote/sh/*.sh, as functions that a linter can read. A script sent to a
machine is the text of the files it needs followed by calls of those functions, each argument quoted
with shlex.quote: Python never builds shell code from a value, so nothing a user typed can run as code.
One script per round trip, read whole before it runs (RUN_SCRIPT). What a script says back is one JSON
report a line (jobtpu/schema/worker_protocol.py); the parse_* functions below decode it into what callers use.

Remote layout under a machine's root R, the remote user's alone (PRIVATE_PREAMBLE; workers of one
machine may share it, e.g. over NFS, so every per-worker file is named by attempt and worker index):
    R/archives/<sha>.tar.gz      code snapshots, content-addressed, copied once per machine
    R/jobs/<id>/                 the job's folder: its unpacked snapshot, where it runs
    R/meta/<id>/<a>.reset/       made when attempt a (a rerun) replaced the folder an earlier one left
    R/meta/<id>/<a>.<w>.pid      "pid starttime" of worker w's process-group leader, attempt a
    R/meta/<id>/<a>.<w>.exit     its exit code, written when the command returns
    R/meta/<id>/<a>.<w>.log      its stdout and stderr
    R/meta/<id>/<a>.<w>.env      its environment until the wrapper reads it (mode 0600)
    R/meta/<id>/<a>.<w>.timer    (and .stopper) a FIFO to the wrapper's watch, removed once both ends are open
    R/meta/<id>/<a>.<w>.claim/   made (atomically) before the start, so a launch never runs twice
    R/meta/<id>/<a>.copied       (worker 0) attempt a's checkpoint was copied from the region of the
                                 attempt that last saved (submit --checkpoints)
    R/setup/<incarnation>.<w>.*  the same records for a machine's setup commands
    R/stop/<id>.<a>              (the local machine) a stop request for attempt a, which any member of a
                                 shared home may leave and the attempt's wrappers obey (docs/design.md §7)
Every process of a job carries JOBTPU_MARK=<home id>.<id>.<a>.<w> in its environment (the wrapper
starts with it, children inherit it), so a job's processes are found through /proc even after they
left its process group (setsid, double fork) or when its pid file is missing. The wrapper's watches
(its time limit and stop request) carry no marker: they are not the job's, which cannot reach them.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from jobtpu import timing
from jobtpu.decide.workers import LaunchOutcome, LaunchResult, LaunchSpec, WorkerRef, WorkerState
from jobtpu.result import MAX_RESULT_BYTES
from jobtpu.schema import worker_protocol as protocol
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.snapshot import unpack
from jobtpu.snapshot.unpack import BAD_ARCHIVE_EXIT

# Every script is read whole before it runs: a command inside that reads stdin cannot eat the script.
RUN_SCRIPT = """bash -c 'eval "$(cat)"'"""
# What every script sent to a remote machine begins with: what jobtpu makes there (the root, archives,
# job trees, meta logs, pid files) is the remote user's alone whatever the login umask; the login
# umask is kept for the job's own command and a machine's setup commands (jobtpu_wrapper,
# jobtpu_setup_run), whose files are the user's business (docs/reference/machines-json.md §3.3).
PRIVATE_PREAMBLE = "jobtpu_login_umask=$(umask)\numask 077\n"
LOG_CHUNK = 1 << 20  # bytes of new log pulled per worker per pass through the probe
TAIL_BYTES = 64 * 1024  # the end of a failed worker's log that its failure is classified from

# The files in jobtpu/remote/sh/, in the order a script defines them.
SCRIPT_FILES = ("common.sh", "wrapper.sh", "tpu.sh", "launch.sh", "reports.sh", "probe.sh", "kill.sh", "clean.sh",
                "doctor.sh", "setup.sh", "serve.sh", "peer.sh", "slurm.sh", "checkpoints.sh",
                "slurm_array.sh")


@functools.cache
def script_file(name: str) -> str:
    """The text of one of the .sh files shipped with the package."""
    return resources.files(__package__).joinpath("sh", name).read_text(encoding="utf-8")


def call(function: str, *args: object) -> str:
    """One line that calls a function of the .sh files with every argument quoted."""
    return " ".join([function, *(shlex.quote(str(arg)) for arg in args)])


def named(function: str, args: dict[str, object], *rest: object) -> str:
    """One line that calls a function of the .sh files by named arguments (`name=value` words, read by
    jobtpu_named in sh/common.sh), then `--` and `rest`, every word quoted: the call says what each
    value is, and the function refuses a name it does not take or one left out."""
    return call(function, *(f"{name}={value}" for name, value in args.items()), "--", *rest)


def render(files: Iterable[str], calls: Iterable[str]) -> str:
    """A whole script: the functions of the given files, then the calls."""
    return "\n".join(["set -u", *(script_file(name) for name in files), *calls]) + "\n"


def serve_script() -> str:
    """What a kept SSH connection runs once: a shell that runs every later script sent to it
    (transport/ssh.py frames them)."""
    return render(["serve.sh"], [call("jobtpu_serve")])


# ---- launch ---------------------------------------------------------------------------------------

def launch_script(specs: Iterable[LaunchSpec]) -> str:
    """Start every given worker detached, idempotently. One `launch` report per worker (protocol.LaunchLine):
    ok with its pid | pending | need-archive | bad-archive with why | fail with why."""
    # A claim with no pid after claim_stale_minutes means the start never happened (its pass died).
    # Longer than a pass waits for a launch script, so a slow unpack is never taken for a dead one.
    specs = list(specs)
    if any(spec.batch is not None for spec in specs):  # a Slurm cluster's: sbatch, not a detached start
        calls = [line for spec in specs for line in (call("jobtpu_batch", *(spec.batch or ())), launch_call(spec))]
        return render(("common.sh", "wrapper.sh", "tpu.sh", "launch.sh", "slurm.sh"), [launch_init(), *calls])
    return render(("common.sh", "wrapper.sh", "tpu.sh", "launch.sh"), [launch_init(), *map(launch_call, specs)])


def launch_init() -> str:
    return named("jobtpu_launch_init", {"stale_minutes": claim_stale_minutes(), "unpack_bad_exit": BAD_ARCHIVE_EXIT,
                                        "unpack_source": unpack_source(),
                                        "reset_tenths": tenths(timing.current().reset_wait)})


def launch_call(spec: LaunchSpec) -> str:
    r = spec.ref
    env = [word for name, value in spec.env.items()
           for word in (name, "=" if name in spec.literal else "x", value)]
    signal, delay = spec.early_signal or ("", 0)
    poll = stop_poll() if spec.stop_requests else 0
    return named("jobtpu_launch", {
        "root": spec.root, "home_id": spec.home_id, "job": r.job, "attempt": r.attempt, "worker": r.worker,
        "archive": spec.archive, "fresh": int(spec.fresh), "tpu_cleanup": int(spec.tpu_cleanup),
        "command": spec.command, "signal": signal, "delay": int(delay), "poll": poll, "grace": tenths(spec.grace),
        "limit": limit_seconds(spec.time_limit), "token": spec.token, "first": spec.evict_signal if poll else ""}, *env)


def limit_seconds(limit: float | None) -> str:
    """A --timeout as `sleep` takes it (empty: none)."""
    return "" if limit is None else f"{max(limit, 0.0):.3f}".rstrip("0").rstrip(".")


def claim_stale_minutes() -> int:
    """Whole minutes, as launch.sh's `find -mmin` takes them; at least 1."""
    return max(1, round(timing.current().claim_stale_minutes))


def stop_poll() -> float:
    """How often a local job's wrapper looks for a stop request (seconds): a teammate's kill waits at
    most this long for the job's own account to start stopping it. A zero would make the wrapper spin."""
    return timing.current().stop_poll or timing.DEFAULTS.stop_poll


def tenths(seconds: float) -> int:
    return max(1, int(seconds / 0.1))


@functools.cache
def unpack_source() -> str:
    """The source of jobtpu/snapshot/unpack.py, which the worker runs with python3 -c."""
    return Path(unpack.__file__).read_text(encoding="utf-8")


@functools.cache
def peerfile_source() -> str:
    """The source of jobtpu/remote/peerfile.py, which the workers run with python3 -c. Read, not
    imported: the home never runs it, and its http.server import was a tenth of a pass's start-up."""
    return resources.files(__package__).joinpath("peerfile.py").read_text(encoding="utf-8")


def parse_launch(stdout: str) -> dict[WorkerRef, LaunchResult]:
    """Each worker's launch report; a worker with none is missing (its launch said nothing)."""
    return {(ref := _ref(r)): LaunchResult(ref, r.outcome, r.pid if r.outcome == LaunchOutcome.OK else None,
                                           r.detail if r.outcome in (LaunchOutcome.FAIL, LaunchOutcome.BAD_ARCHIVE)
                                           else "", slurm=r.slurm if r.outcome == LaunchOutcome.OK else None)
            for r in protocol.of_kind(protocol.reports(stdout), protocol.LaunchLine)}


def _ref(report: protocol.WorkerReport) -> WorkerRef:
    return WorkerRef(report.job, report.attempt, report.worker)


# ---- a checkpoint that follows its job to another region (sh/checkpoints.sh) ---------------------------

# ---- one upload per machine: a worker serves the snapshot to the others (sh/peer.sh) -------------------

class Served(msgspec.Struct, frozen=True):
    port: int | None  # where the worker serves the snapshot; None: it does not
    why: str = ""


class Fetched(msgspec.Struct, frozen=True):
    ok: bool
    why: str = ""  # why not: the fetch failed, or the copy is not the snapshot
    held: bool = False  # it needed none: it shares a disk with the worker the home sent its copy to


def peer_serve_script(root: str, archive: str, bind: str, serve_id: str, token: str, peers: int) -> str:
    """Serve the worker's copy of the snapshot on `bind` to `peers` fetches that give `token`, detached:
    a `serve` report. `serve_id` names the server (for peer_stop_script) and is no secret; the token
    is only in the script's text, which the worker reads on stdin, never in an argument or a file name."""
    wait = int(timing.current().peer_copy_wait)
    return render(("common.sh", "peer.sh"), [call("jobtpu_peer_serve", root, archive, bind, serve_id, token,
                                                  int(peers), wait, peerfile_source())])


def peer_stop_script(root: str, serve_id: str) -> str:
    """End the server started as `serve_id` now: some of its peers will never fetch."""
    return render(("peer.sh",), [call("jobtpu_peer_stop", root, serve_id)])


def peer_fetch_script(url: str, token: str, spec: LaunchSpec) -> str:
    """Fetch the snapshot from a peer with its token (a `fetch` report), then launch the worker
    as launch_script does (its `LAUNCH` line): with no good copy it says `need-archive` as before."""
    fetch = call("jobtpu_peer_fetch", spec.root, spec.archive, url, token, int(timing.current().peer_copy_wait),
                 peerfile_source(), unpack_source())
    return render(("common.sh", "wrapper.sh", "tpu.sh", "launch.sh", "peer.sh"), [launch_init(), fetch, launch_call(spec)])


def parse_serve(stdout: str) -> Served:
    said = protocol.of_kind(protocol.reports(stdout), protocol.Serve)
    if not said:
        return Served(None, "the serve script said nothing")
    if said[0].outcome == "ok" and said[0].port is not None:
        return Served(said[0].port)
    return Served(None, said[0].detail.strip() or "no reason given")


def parse_fetch(stdout: str) -> Fetched:
    said = protocol.of_kind(protocol.reports(stdout), protocol.Fetch)
    if not said:
        return Fetched(False, "the fetch script said nothing")
    fetch = said[0]
    if fetch.outcome in ("ok", "held"):
        return Fetched(True, held=fetch.outcome == "held")
    why = fetch.detail.strip() or "no reason given"
    return Fetched(False, why if fetch.outcome == "fail" else f"the copy was refused: {why}")


# ---- probe ----------------------------------------------------------------------------------------

def probe_script(root: str, workers: Iterable[tuple[WorkerRef, int]], chunk: int = LOG_CHUNK,
                 home_id: str = "", markers: Iterable[tuple[WorkerRef, str]] = ()) -> str:
    """A `host` report, then for each (worker, log bytes already pulled): a `worker` report (protocol.WorkerLine),
    then a `log` report with the log bytes past that offset (at most `chunk`), and a `log-end` report
    with the last TAIL_BYTES of an exited worker's log further behind than that, and an exited worker
    0's saved value (a `result` report, at most MAX_RESULT_BYTES of it) with the report ending its log.
    Then for each (worker, --saved-marker path), a `saved` report when the attempt wrote its marker."""
    args = [int(n) for w, offset in workers for n in (w.job, w.attempt, w.worker, offset)]
    saved = [call("jobtpu_probe_saved", root, r.job, r.attempt, r.worker, path) for r, path in markers]
    return render(("common.sh", "reports.sh", "probe.sh"), [named("jobtpu_probe", {"root": root, "home_id": home_id, "chunk": int(chunk), "tail": TAIL_BYTES,
                                                                     "result": MAX_RESULT_BYTES}, *args), *saved])


def parse_probe(stdout: str) -> dict[WorkerRef, WorkerState]:
    """Each worker's state, with the log bytes that came after its report."""
    states: dict[WorkerRef, WorkerState] = {}
    for report in protocol.of_kind(protocol.reports(stdout), protocol.WorkerReport):
        ref = _ref(report)
        if isinstance(report, protocol.WorkerLine):
            states[ref] = WorkerState(ref=ref, pid=report.pid, alive=report.alive, exit_code=report.exit,
                                      log_size=report.size, claimed=report.claimed, exited_at=report.at,
                                      marked=report.marked or 0, timed_out=report.timedout,
                                      preempted=report.preempted, waiting=report.waiting,
                                      unsubmitted=report.unsubmitted)
        elif isinstance(report, protocol.Log) and ref in states:
            states[ref] = msgspec.structs.replace(states[ref], log_offset=report.offset, log_bytes=report.data)
        elif isinstance(report, protocol.LogEnd) and ref in states:
            states[ref] = msgspec.structs.replace(states[ref], log_end=report.data)
        elif isinstance(report, protocol.SavedResult) and ref in states:
            states[ref] = msgspec.structs.replace(states[ref], result_size=report.size, result=report.data)
        elif isinstance(report, protocol.SavedMark) and ref in states:
            states[ref] = msgspec.structs.replace(states[ref], saved_at=report.at)
    return states


# ---- kill -----------------------------------------------------------------------------------------

def kill_script(root: str, refs: Iterable[WorkerRef], grace: float = 5.0, home_id: str = "",
                ask: bool = False, first: str | None = None) -> str:
    """TERM each worker's whole process group and every process that carries its marker (those that
    left the group by setsid or a double fork too), KILL what is left after `grace` seconds. With
    `first` (an eviction of a job with --signal), that signal a grace before the TERM. With `ask`
    (the local machine), a group another account runs gets a stop request its wrapper obeys, and the
    time for it to. One `kill` report per worker: gone or not (stuck)."""
    args = [n for r in refs for n in (r.job, r.attempt, r.worker)]
    graces = grace * (2 if first else 1)
    ask_steps = tenths(stop_poll() + graces) + 10 if ask else 0  # its wrapper's poll and grace(s), and a second
    return render(("common.sh", "kill.sh"), [call("jobtpu_kill", root, home_id, tenths(grace), ask_steps, first or "",
                                                  *args)])


def parse_kill(stdout: str) -> dict[WorkerRef, bool]:
    """worker → True when its processes are gone."""
    return {_ref(r): r.gone for r in protocol.of_kind(protocol.reports(stdout), protocol.Killed)}


# ---- housekeeping ---------------------------------------------------------------------------------

def remove_job_script(root: str, job_ids: Iterable[int], keep_archives: Iterable[str] | None = None) -> str:
    """Delete jobs' remote folders; with keep_archives, also every archive not in that list."""
    calls = [call("jobtpu_remove_jobs", root, *(int(job) for job in job_ids))]
    if keep_archives is not None:
        calls.append(call("jobtpu_keep_archives", root, *keep_archives))
    return render(("clean.sh",), calls)


def job_folder(root: str, job_id: int) -> str:
    return f"{root.rstrip('/')}/jobs/{job_id}"


def archive_path(root: str, archive: str) -> str:
    return f"{root.rstrip('/')}/archives/{archive}"


def make_dirs_script(paths: Iterable[str]) -> str:
    """mkdir -p each path (relative to the login folder unless absolute)."""
    return render(("clean.sh",), [call("jobtpu_make_dirs", *paths)])


# ---- doctor ---------------------------------------------------------------------------------------

def doctor_script(root: str, tools: Iterable[str] = ("python3", "rsync", "tar"), home_id: str = "") -> str:
    """A `root` report (exists or not), a `disk` report (KiB free where root is or would be), a `tool`
    report per tool (its path, or none), and a `live` report for every live process of this home's jobs
    on this host: each process that carries a job's marker (an ended job's escaped children among
    them) and each live process-group leader named by a pid file."""
    return render(("common.sh", "doctor.sh"), [call("jobtpu_doctor", root, home_id, *tools)])


def parse_live(stdout: str) -> dict[WorkerRef, list[int]]:
    """The job workers alive on a host (from doctor_script), with their live processes' pids."""
    out: dict[WorkerRef, set[int]] = {}
    for report in protocol.of_kind(protocol.reports(stdout), protocol.Live):
        out.setdefault(_ref(report), set()).add(report.pid)
    return {ref: sorted(pids) for ref, pids in out.items()}


def parse_doctor(stdout: str) -> dict[str, str]:
    """{"root": "yes", "disk_kib": "123", "tool:python3": "/usr/bin/python3" or "-"}."""
    out: dict[str, str] = {}
    for report in protocol.reports(stdout):
        if isinstance(report, protocol.Root):
            out["root"] = "yes" if report.exists else "no"
        elif isinstance(report, protocol.Disk):
            out["disk_kib"] = str(report.free_kib) if report.free_kib is not None else ""
        elif isinstance(report, protocol.Tool):
            out[f"tool:{report.name}"] = report.path or "-"
    return out


def tpu_doctor_script(root: str, fix: bool) -> str:
    """A `holder` report for each process holding the TPU device, a `lock` report for
    /tmp/libtpu_lockfile; with fix, the stale holders are stopped and the lock file removed first."""
    return render(("common.sh", "tpu.sh"), [call("jobtpu_tpu_doctor", root, int(fix))])


class TpuHolder(msgspec.Struct, frozen=True):
    pid: int
    command: str
    ours: bool  # a live job of this home's holds it


def parse_tpu_doctor(stdout: str) -> tuple[list[TpuHolder], bool]:
    """The processes holding the TPU device, and whether /tmp/libtpu_lockfile is there."""
    found = protocol.reports(stdout)
    holders = [TpuHolder(h.pid, h.command, h.ours) for h in protocol.of_kind(found, protocol.Holder)]
    return holders, any(lock.present for lock in protocol.of_kind(found, protocol.Lock))


def tpu_accelerator_script(root: str, device_dir: str) -> str:
    """A `device` report per device file, a `holder` report per process holding one, then (none holding
    one) a `jax` report: the count JAX printed, its error, or neither (no jax)."""
    return render(("common.sh", "tpu.sh"), [call("jobtpu_tpu_accelerator", root, device_dir)])


class AcceleratorFacts(msgspec.Struct, frozen=True):
    devices: list[str]
    holders: list[TpuHolder]
    jax: str | None  # the device count JAX saw, "error TEXT", or None: no jax (or not run: the device is held)


def parse_tpu_accelerator(stdout: str) -> AcceleratorFacts:
    found = protocol.reports(stdout)
    holders, _ = parse_tpu_doctor(stdout)
    devices = [d.path for d in protocol.of_kind(found, protocol.Device)]
    jax = next((f"error {j.error}" if j.error is not None else j.said for j in protocol.of_kind(found, protocol.Jax)), None)
    return AcceleratorFacts(devices, holders, jax)


# ---- machine setup (TPU incarnations) ---------------------------------------------------------------

def setup_tag(incarnation: str) -> str:
    """A file-name-safe name for one incarnation of a machine."""
    return "".join(c if c.isalnum() else "-" for c in incarnation)[:64] or "static"


def setup_script(root: str, tag: str, worker: int, commands: Iterable[str], retry: bool = False) -> str:
    """Run the setup commands detached, once per incarnation and worker; one `setup` report
    (protocol.SetupReport): done | running | failed with its code and log tail. With retry, a failed
    one starts again."""
    return render(("common.sh", "setup.sh"), [named("jobtpu_setup", {"root": root, "tag": tag, "worker": int(worker), "retry": int(retry)},
                                                      *commands)])


def setup_now_script(root: str, tag: str, worker: int, commands: Iterable[str]) -> str:
    """`jobtpu tpu setup`: the setup commands in the foreground, their output, then a `setup` report:
    done | failed with its code | running (a pass's setup still runs there)."""
    return render(("common.sh", "setup.sh"), [call("jobtpu_setup_now", root, tag, int(worker), *commands)])
