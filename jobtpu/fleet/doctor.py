"""`jobtpu doctor NAME`: check every worker of a machine (reachable, logged in, disk, tools) and say,
for each problem, what to do about it. `--fix` repairs what is safe to repair (the remote root)."""

from __future__ import annotations

import contextlib
import getpass
import shutil
from collections.abc import Callable

from jobtpu import timing
from jobtpu.decide.workers import WorkerRef
from jobtpu.errors import BusyError, JobtpuError, RemoteError
from jobtpu.fleet.drivers import driver_for
from jobtpu.fleet.reach import Reach, parallel
from jobtpu.home.layout import Home
from jobtpu.home.store import Store, pass_lock
from jobtpu.remote.scripts import (
    doctor_script,
    kill_script,
    make_dirs_script,
    parse_doctor,
    parse_kill,
    parse_live,
)
from jobtpu.schema.fleet import Fleet, Machine
from jobtpu.schema.state import State
from jobtpu.transport.base import Endpoint, Transport

DISK_WARN_GB = 5.0
# What a remote worker needs: bash scripts, rsync for archives and fetch, python3 to check and unpack
# snapshots (jobtpu/snapshot/unpack.py) and for jobs.
REMOTE_TOOLS = ("python3", "rsync", "tar")
LOCAL_TOOLS = ("python3", "tar")

Line = tuple[str, bool]  # (text, is a problem)


def doctor(home: Home, fleet: Fleet, machine: Machine, fix: bool, report: Callable[[str], None],
           accelerator: bool = False) -> list[str]:
    """Check the machine's workers in parallel; report every check line; return the problems.
    With fix, no pass runs meanwhile: stopping a job that state.json does not manage must not race
    a pass that is launching it. `accelerator` adds the check of accelerator.py."""
    if accelerator and not driver_for(machine).accelerator_checked:
        raise JobtpuError(f"--accelerator checks a TPU machine's workers; {machine.name} is a {machine.kind} machine",
                          hint=f"run `jobtpu doctor {machine.name}` without it")
    wait = timing.current().act_lock_wait
    # --accelerator too: JAX opens the TPU for a moment, and a job launched meanwhile could not.
    with pass_lock(home, wait) if fix or accelerator else contextlib.nullcontext(True) as got:
        if not got:
            raise BusyError(f"a manage pass has held {home.pass_lock} for over {wait:.0f}s",
                            hint="wait for it to finish, or look for a stuck `jobtpu manage`")
        return _doctor(home, fleet, machine, fix, report, accelerator)


def _doctor(home: Home, fleet: Fleet, machine: Machine, fix: bool, report: Callable[[str], None],
            accelerator: bool = False) -> list[str]:
    lines: list[Line] = []
    # rsync copies to a machine reached over SSH: not to a Slurm cluster whose login node is this one.
    if driver_for(machine).reached_over_ssh(machine) and shutil.which("rsync") is None:
        lines.append(("here: problem: rsync is not installed on this machine; install it "
                      "(e.g. `sudo apt-get install -y rsync`)", True))
    session = Reach(home, fleet, Store(home).load())
    driver = driver_for(machine)
    lines.extend(driver.check_provider(session, machine))  # a TPU's API says where its workers are now
    eps = session.endpoints(machine)
    if not eps:
        lines.append((f"{machine.name}: problem: no worker address is known yet; run `jobtpu manage` "
                      f"(or `jobtpu tpu status {machine.name}`) first", True))
    for worker_lines in parallel(lambda ep: _check_worker(session, machine, ep, fix), eps):
        lines.extend(worker_lines)
    lines.extend(driver.check_workers(session, machine, eps, fix, _label))
    if accelerator:
        lines.extend(driver.check_accelerator(session, machine, eps, _label))
    for text, _ in lines:
        report(text)
    return [text for text, problem in lines if problem]


def _label(machine: Machine, ep: Endpoint) -> str:
    if ep.addr is None:
        return f"{machine.name}[{ep.index}] (this machine)"
    host = f"[{ep.addr}]" if ":" in ep.addr else ep.addr
    return f"{machine.name}[{ep.index}] {host}:{ep.port}"


def _check_worker(session: Reach, machine: Machine, ep: Endpoint, fix: bool) -> list[Line]:
    label = _label(machine, ep)
    ok = lambda text: (f"{label}: ok: {text}", False)  # noqa: E731
    bad = lambda text: (f"{label}: problem: {text}", True)  # noqa: E731
    tools = LOCAL_TOOLS if ep.addr is None else REMOTE_TOOLS
    with session.connected(machine, ep) as t:
        try:
            try:
                result = t.run(doctor_script(machine.root, tools, session.home_id), timeout=machine.connect_timeout + 30)
            except RemoteError as e:
                why = e.message.removeprefix(f"{label}: ")
                if "host key" in why or "authentication" in why:
                    return [bad(why)]  # these messages already say what to do
                return [bad(f"not reachable: {why}; check that the host is up and sshd listens on "
                            f"port {ep.port}, then run `jobtpu doctor {machine.name}` again")]
            facts = parse_doctor(result.stdout)
            if not facts:
                return [bad(f"the check script failed ({result.exit_code}): {result.stderr.strip()[-200:]}; "
                            "the login shell must be able to run bash")]
            out = [ok("runs scripts" if ep.addr is None else
                      f"reachable, logged in as {machine.user or getpass.getuser()}")]
            if facts.get("root") == "yes":
                out.append(ok(f"root {machine.root} exists"))
            elif fix:
                made = t.run(make_dirs_script([machine.root]), timeout=machine.connect_timeout + 30)
                out.append(ok(f"created root {machine.root}") if made.ok else
                           bad(f"cannot create root {machine.root}: {made.stderr.strip()[-200:]}; "
                               "set a writable 'root' in machines.json"))
            else:
                out.append(ok(f"root {machine.root} does not exist yet (the first launch creates it; "
                              "--fix creates it now)"))
            kib = facts.get("disk_kib", "")
            if kib.isdigit():
                gb = int(kib) / 1024 / 1024
                out.append(ok(f"{gb:.1f} GB free in {machine.root}") if gb >= DISK_WARN_GB else
                           bad(f"only {gb:.1f} GB free in {machine.root}; free some space there "
                               "(`jobtpu clean --remote` deletes ended jobs' folders)"))
            else:
                out.append(bad(f"could not measure free disk in {machine.root} (df failed); check the disk by hand"))
            for tool in tools:
                path = facts.get(f"tool:{tool}", "-")
                out.append(ok(f"{tool}: {path}") if path != "-" else
                           bad(f"{tool} is not installed; install it (e.g. `sudo apt-get install -y {tool}`)"))
            return out + _strays(t, machine, label, parse_live(result.stdout), session.state, fix, session.home_id)
        except RemoteError as e:
            return [bad(f"the connection failed during the checks: {e.message}")]


def _strays(t: Transport, machine: Machine, label: str, live: dict[WorkerRef, list[int]], state: State,
            fix: bool, hid: str) -> list[Line]:
    """Job processes alive on this worker that state.json does not manage (a running job deleted from
    it by hand, a worker left behind, a child that outlived its ended job): they hold the accelerator
    and nobody watches them."""
    if not live:
        return []
    why = {ref: reason for ref in live if (reason := _why_stray(state, ref)) is not None}
    strays = {ref: pid for ref, pid in live.items() if ref in why}
    if not strays:
        return [(f"{label}: ok: {len(live)} job worker(s) running, all managed by state.json", False)]
    stopped: dict[WorkerRef, bool] = {}
    if fix:
        try:
            script = kill_script(machine.root, strays, home_id=hid)
            stopped = parse_kill(t.run(script, timeout=machine.connect_timeout + 60).stdout)
        except RemoteError as e:
            return [(f"{label}: problem: could not stop unmanaged jobs: {e.message}", True)]
    out: list[Line] = []
    for ref, pids in sorted(strays.items(), key=lambda item: (item[0].job, item[0].attempt, item[0].worker)):
        what = (f"job {ref.job} attempt {ref.attempt} worker {ref.worker} "
                f"(process{'es' if len(pids) > 1 else ''} {', '.join(map(str, pids))})")
        if stopped.get(ref):
            out.append((f"{label}: ok: stopped {what} ({why[ref]})", False))
        else:
            out.append((f"{label}: problem: {what} still runs here but {why[ref]}; "
                        f"`jobtpu doctor {machine.name} --fix` stops it", True))
    return out


def _why_stray(state: State, ref: WorkerRef) -> str | None:
    """Why state.json does not account for this live worker; None when it does. Which machine the
    job is on is not asked: two machine entries may share a host and root (a GPU box split in two),
    and a job that a pass manages through the other entry is no stray."""
    job = state.job(ref.job)
    if job is None:
        return f"state.json no longer has job {ref.job}"
    if job.attempt != ref.attempt:
        return f"state.json is at the job's attempt {job.attempt}"
    if not job.active:
        return f"state.json has the job {job.status.value}"
    return None
